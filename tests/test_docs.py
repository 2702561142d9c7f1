"""The documentation site builds with ``mkdocs build --strict`` and its reference pages are complete.

The manifest, CLI, ops and API pages are generated at build time by
``docs/hooks.py``; these tests read the built HTML and check it against
the sources themselves (the schema, the argparse parser, the op registry,
``hetflow.__all__``, ``bench/results.json``), walked here independently
of the hooks.
"""

from __future__ import annotations

import argparse
import doctest
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

for _package in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
    if importlib.util.find_spec(_package.split(".")[0]) is None or importlib.util.find_spec(_package) is None:
        pytest.skip(f"{_package} is not importable: pip install -e '.[dev]' installs the documentation tools",
                    allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def _text(site: Path, page: str) -> str:
    """The page's article as plain text (tags dropped, entities decoded, whitespace collapsed)."""
    raw = (site / page / "index.html").read_text()
    article = raw.split("<article", 1)[1].split("</article>", 1)[0]
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", article)))


def _ids(site: Path, page: str) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', (site / page / "index.html").read_text()))


def test_every_page_of_the_nav_is_built(site):
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)

    def pages(nav):
        for entry in nav:
            for value in (entry.values() if isinstance(entry, dict) else [entry]):
                if isinstance(value, list):
                    yield from pages(value)
                else:
                    yield value

    found = list(pages(config["nav"]))
    assert len(found) >= 20
    for page in found:
        folder = "" if page == "index.md" else page.removesuffix(".md")
        assert (site / folder / "index.html").is_file(), f"{page} is in the nav but was not built"
        assert len(_text(site, folder)) > 400, f"{page} is nearly empty"


def _commands(parser: argparse.ArgumentParser, words=("hetflow",)):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield words + (name,), sub
                yield from _commands(sub, words + (name,))


def test_cli_page_has_every_command_and_option(site):
    from hetflow.engine import cli

    text = _text(site, "reference/cli")
    commands = list(_commands(cli._parser()))
    assert len(commands) >= 20
    for words, sub in commands:
        assert " ".join(words) in text, f"{' '.join(words)} is missing from the CLI reference"
        assert "-".join(words) in _ids(site, "reference/cli")
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in text, f"{' '.join(words)} {option} is missing from the CLI reference"


def test_ops_page_has_every_op_with_its_args(site):
    from hetflow.executors.ops import BUILTIN, REGISTRY

    text = _text(site, "reference/ops")
    ids = _ids(site, "reference/ops")
    for name, op in REGISTRY.items():
        if name not in BUILTIN:
            continue
        assert "op-" + name.replace(".", "-") in ids, f"op {name} has no section in the ops reference"
        assert op.doc.split(";")[0].replace("`", "") in text
        for arg in op.args:
            assert arg in text


def _schema_keys(node: dict, defs: dict, prefix: str = ""):
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    for name, sub in node.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        yield path
        yield from _schema_keys(sub, defs, path)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and "$ref" in extra:
        yield from _schema_keys(extra, defs, f"{prefix}.NAME")


def test_manifest_page_has_every_key_of_the_schema(site):
    schema = json.loads((ROOT / "schemas" / "pipeline.base.json").read_text())
    keys = list(_schema_keys(schema, schema["$defs"]))
    assert {"version", "executors.NAME.vendor", "stages.NAME.op", "emulators.NAME.program", "schedule.cron"} <= set(keys)
    text = _text(site, "reference/manifest")
    for key in keys:
        assert key in text, f"manifest key {key} is missing from the manifest reference"


def test_api_page_documents_every_public_name(site):
    import hetflow

    ids = _ids(site, "reference/api")
    text = _text(site, "reference/api")
    for name in hetflow.__all__:
        if not name.startswith("_"):
            assert f"hetflow.{name}" in ids, f"hetflow.{name} is missing from the API reference"
    assert ":func:" not in text and "str(object=" not in text
    assert "point" in text and "runs_dir" in text  # run()'s parameters, from its signature


def test_benchmarks_page_has_every_row_of_results_json(site):
    text = _text(site, "benchmarks")
    rows = json.loads((ROOT / "bench" / "results.json").read_text())["rows"]
    assert rows
    for row in rows:
        assert html.unescape(row["name"]) in text


def test_hooks_doctests():
    spec = importlib.util.spec_from_file_location("hetflow_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# --- the README as a front page, and the passes page --------------------------------------------

def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.S | re.M)


def test_readme_is_a_front_page_with_the_ci_commands():
    readme = _readme()
    assert len(readme.splitlines()) < 150
    test_command = 'python -m pip install -e ".[dev]" && python -m pytest -n auto'
    assert _fenced(readme, "sh")[1].strip() == test_command
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert [line for line in ci if "-m pytest" in line and not line.lstrip().startswith("#")] == [test_command]
    assert _fenced(readme, "sh")[0].strip() == 'python -m pip install -e ".[dev]" && hetflow run examples/quickstart.yaml'


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _readme())
    assert sum(link.startswith("docs/") for link in links) >= 10
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"


def test_readme_example_plan_is_what_hetflow_plan_prints(tmp_path, capsys):
    from hetflow.engine.cli import main

    readme = _readme()
    (manifest,) = _fenced(readme, "yaml")
    (console,) = _fenced(readme, "console")
    command, shown = console.split("\n", 1)
    assert command == "$ hetflow plan first.yaml"
    (tmp_path / "first.yaml").write_text(manifest)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["plan", "first.yaml", "--runs-dir", str(tmp_path / "runs")]) == 0
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr().out

    def machine_free(text: str) -> str:  # the detected host memory is the one figure that varies by machine
        return re.sub(r"of [0-9.]+ [KMGT]iB detected", "of N detected", text).strip()

    assert machine_free(printed) == machine_free(shown)


_DOTTED = re.compile(r"hetflow\.engine\.\w+(?:\.\w+)*")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_name_on_the_passes_page_and_in_the_engine_docstring_exists():
    import hetflow.engine

    page = (ROOT / "docs" / "concepts" / "passes.md").read_text()
    names = set(_DOTTED.findall(page)) | set(_DOTTED.findall(hetflow.engine.__doc__))
    for module, function in re.findall(r"^\| \w+ \| `(hetflow\.engine\.[\w.]+)` \| `(\w+)\(", page, re.M):
        names.add(f"{module}.{function}")
    for module, function in re.findall(r"`(\w+)\.(\w+)`", page):  # planner.place, resolve.resolve, ...
        for found in ROOT.glob(f"engine/*/{module}.py"):
            names.add(f"hetflow.engine.{found.parent.name}.{module}.{function}")
    assert len(names) >= 25
    missing = sorted(n for n in names if not _resolves(n))
    assert not missing, f"named on the passes page or in hetflow.engine's docstring, but not in the code: {missing}"
    for step in ("load", "resolve", "validate", "graph", "place", "partition", "bridge", "lower", "run", "record"):
        assert f"\n## {step}\n" in page and f"| {step} |" in page


def test_engine_docstring_runs_the_passes():
    import hetflow.engine

    result = doctest.testmod(hetflow.engine, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10 and result.failed == 0


def test_repository_page_names_every_module():
    index = (ROOT / "docs" / "index.md").read_text()
    layout = index.split("## The repository", 1)[1].split("```", 2)[1]
    words = set(re.findall(r"[\w.]+", layout))
    folders = ["engine", *sorted(str(p.parent.relative_to(ROOT)) for p in ROOT.glob("engine/*/__init__.py")),
               "executors", "executors/emulator"]
    modules = [p for folder in folders for p in sorted((ROOT / folder).glob("*.py")) if not p.name.startswith("__")]
    assert len(modules) > 60
    missing = [str(p.relative_to(ROOT)) for p in modules if p.stem not in words]
    assert not missing, f"docs/index.md's repository layout does not name {missing}"
