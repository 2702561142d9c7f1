"""The docs as checked in: every relative link resolves, and the generated reference pages are current.

These need no documentation tools: a link in ``README.md`` or ``docs/``
must work where the Markdown is read (a code host, an editor), not only
on the built site, so the reference pages ``docs/hooks.py`` generates are
checked in, and must be what their sources make now.
"""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# [text](target) and [text](target "title"), not images' sources nor code spans' look-alikes
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _hooks():
    spec = importlib.util.spec_from_file_location("hetflow_docs_hooks_links", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)  # code blocks hold no links
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def test_every_relative_link_in_the_readme_and_the_docs_resolves():
    checked, dead = 0, []
    for path in _markdown_files():
        for link in _links(path):
            target = link.split("#", 1)[0]
            if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):  # an anchor here, a URL, mailto:
                continue
            checked += 1
            if not (path.parent / target).exists():
                dead.append(f"{path.relative_to(ROOT)}: {link}")
    assert checked > 50, "the check found almost no links: its pattern is wrong"
    assert not dead, "links to nothing:\n" + "\n".join(dead)


def test_a_dead_link_is_found(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("See [the manifest](reference/nowhere.md) and [a site](https://example.com).\n"
                    "```\n[not a link](missing.md)\n```\n")
    assert _links(page) == ["reference/nowhere.md", "https://example.com"]


@pytest.mark.parametrize("uri", ["reference/manifest.md", "reference/cli.md", "reference/ops.md", "reference/api.md"])
def test_a_checked_in_reference_page_is_what_its_source_makes(uri):
    hooks = _hooks()
    made = getattr(hooks, hooks.PAGES[uri])()
    kept = (ROOT / "docs" / uri).read_text(encoding="utf-8")
    assert kept == made, f"docs/{uri} is stale: run `python docs/hooks.py` and commit what it writes"


def test_the_api_page_names_the_emulators_public_callables():
    from hetflow.executors import emulator

    text = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    for name in emulator.__all__:
        obj = getattr(emulator, name)
        if callable(obj) and not isinstance(obj, type(emulator)):
            assert f"### `{name}`" in text, f"hetflow.executors.emulator.{name} is missing from docs/reference/api.md"
