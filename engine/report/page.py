"""The page around the sections: the HTML template, its style sheet and script, package data files.

``page.html`` is a :class:`string.Template` with ``$title``, ``$style``,
``$nav``, ``$body`` and ``$script``; ``report.css`` and ``report.js`` are
inlined into it, so the page has no external reference, and so are
``partitions.css`` and ``partitions.js`` in the page of a big run (a plan
collapsed to partitions that open on a click, a timeline in bins).
"""

from __future__ import annotations

import functools
import json
import string
from importlib.resources import files
from typing import Any, Mapping

from hetflow.engine.report.text import _e


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{_e(title)}</h2>{body}</section>'


def _status_badge(status: Any) -> str:
    return f'<span class="badge status-{_e(str(status).replace(" ", "-"))}">{_e(status)}</span>'


def _kv_table(items: Mapping[str, Any], empty: str = "none") -> str:
    if not items:
        return f'<span class="muted">{_e(empty)}</span>'
    return '<table class="kv">' + "".join(
        f"<tr><th>{_e(k)}</th><td><code>{_e(json.dumps(v) if not isinstance(v, str) else v)}</code></td></tr>"
        for k, v in items.items()) + "</table>"


@functools.cache
def _asset(name: str) -> str:
    return (files(__package__) / name).read_text(encoding="utf-8")


def _page(title: str, nav: list[tuple[str, str]], body: str, *, big: bool = False) -> str:
    """The whole page; ``big`` adds what only a collapsed plan or a binned timeline uses (``partitions.css``,
    ``partitions.js``), so the page of a small run stays as it was."""
    links = "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in nav)
    style = _asset("report.css") + (_asset("partitions.css") if big else "")
    script = (_asset("partitions.js") if big else "") + _asset("report.js")
    return string.Template(_asset("page.html")).substitute(title=_e(title), style=style, nav=links, body=body,
                                                           script=script)
