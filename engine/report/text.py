"""How the report writes values: escaping, numbers, times, sizes, shapes, colours.

Shared by every part of the page, so a number reads the same in the run
page, the sweep page and the plan graph.
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping

from hetflow.engine.plan.planner import human_bytes
from hetflow.engine.report.data import _phase_target
from hetflow.engine.run.events import printable

_PALETTE = ["#3b6fb6", "#c0612b", "#3a8d5c", "#8a4fb0", "#b0913a", "#2f8f9d", "#b04f75", "#6b7280"]

_KIND_COLOURS = {"partition": None, "export": "#e0a030", "import": "#d07a18", "output": "#7c8797"}

_EMULATOR_COLOUR = "#6d5bd0"


def _e(value: Any) -> str:
    """``value`` as HTML text, its control characters and bidirectional overrides as the terminal shows them
    (``\\x1b[2J``): a browser drops the one and turns the words after the other around.

    >>> _e('<b a="1">\\x1b[2J\\u202eab')
    '&lt;b a=&quot;1&quot;&gt;\\\\x1b[2J\\\\u202eab'
    """
    return html.escape(printable("" if value is None else str(value)), quote=True)


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    if s < 120:
        return f"{s:.3f} s"
    return f"{int(s // 60)} min {s % 60:.0f} s"


def _fmt_num(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.4g}"
    return f"{x:.3e}"


def _nice_step(span: float, target: int = 8) -> float:
    raw = span / max(1, target)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def _shape_text(shape: Any, bound: bool = False) -> str:
    """
    >>> _shape_text([16, 8]), _shape_text([]), _shape_text(None), _shape_text([100, 64], bound=True)
    ('16×8', 'scalar', '?', '≤100×64')
    """
    if shape is None:
        return "?"
    return ("≤" if bound and shape else "") + ("×".join(str(s) for s in shape) if shape else "scalar")


def _bytes(d: Mapping[str, Any], short: bool = False) -> str:
    """A node's or bridge's bytes, said to be an upper bound when the plan says so.

    >>> _bytes({"bytes": 2560000, "size": "bound"}), _bytes({"bytes": 2560000, "size": "bound"}, short=True)
    ('at most 2.4 MiB', '≤ 2.4 MiB')
    """
    text = human_bytes(d.get("bytes"))
    if d.get("size") == "bound" and d.get("bytes") is not None:
        return ("≤ " if short else "at most ") + text
    return text


def _emulator_kind(emulators: Mapping[str, Any], band: str) -> str:
    if not isinstance(band, str):  # a record's node without an executor: edited by hand
        return "?"
    name = band.split(":", 1)[1] if band.startswith("emulator:") else band
    e = emulators.get(name)
    return f"emulator, {e.get('backend')} backend" if isinstance(e, Mapping) else "?"


def _phase_tip(pid: str, d: Mapping[str, Any], status: str) -> tuple[str, str]:
    """A phase node's hover text and its one-line summary."""
    bound = d.get("size") == "bound"
    lines = [f"{d.get('phase')} phase {pid}", f"runs on {_phase_target(d)}",
             f"inputs {', '.join(d.get('inputs') or []) or 'none'}"]
    if d.get("array"):
        sub = f"{d.get('phase')} · {_bytes(d, short=True)} {d.get('dtype') or ''}".rstrip()
        lines.append(f"yields {_shape_text(d.get('shape'), bound)} {d.get('dtype')}, {_bytes(d)}"
                     + (" (an upper bound: max_steps rows)" if bound else ""))
        if d.get("chunks_max") is not None:
            lines.append(f"fan-out at most {d['chunks_max']} witness tasks, one per chunk")
        if d.get("consumers"):
            lines.append(f"read by {', '.join(d['consumers'])}")
    else:
        sub = f"{d.get('phase')} · data"
        fields = [f for f in d.get("outputs") or [] if f != "array"]
        if fields:
            lines.append(f"yields {', '.join(fields)}")
    lines.append(f"status {status}")
    if d.get("origin"):
        lines.append(str(d["origin"]))
    return "\n".join(lines), sub


def _executor_colour(names: list[str], name: str) -> str:
    return _PALETTE[names.index(name) % len(_PALETTE)] if name in names else _PALETTE[-1]


def _fit(width: float) -> str:
    """SVG size attributes: shrink to the page up to a point, then scroll rather than become unreadable."""
    if width > 1900:
        return f'width="{width:.0f}"'
    return f'width="100%" style="max-width:{width:.0f}px"'
