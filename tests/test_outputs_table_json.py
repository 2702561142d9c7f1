"""``runs table --json`` takes ``--json`` after the subcommand as ``runs show``, ``diff`` and ``gc`` do (the table
as ``--format json``), and a ``--format`` other than json beside ``--json`` is refused: ``--json`` promises one
JSON value on standard output, however the command ends."""

from __future__ import annotations

import io
import json

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: tj
params: {k: 1}
matrix: {k: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [1], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("tj")
    (root / "m.yaml").write_text(MANIFEST)
    runs = str(root / "runs")
    code, out, err = _cli("run", str(root / "m.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    return runs, json.loads(out)


def test_table_json_after_the_subcommand_is_the_json_table(swept):
    runs, sweep = swept
    code, out, err = _cli("runs", "table", sweep["sweep_id"], "--runs-dir", runs, "--json")
    assert code == 0, err
    code, same, err = _cli("runs", "table", sweep["sweep_id"], "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    assert json.loads(out) == json.loads(same)
    assert [r["run_id"] for r in json.loads(out)["rows"]] == [p["run_id"] for p in sweep["points"]]


@pytest.mark.parametrize("before", [False, True])
@pytest.mark.parametrize("fmt", ["csv", "markdown", "text"])
def test_json_with_another_format_is_refused_as_one_json_object(swept, before, fmt):
    runs, sweep = swept
    argv = (["runs", "--json", "table"] if before else ["runs", "table", "--json"]) + \
        [sweep["sweep_id"], "--runs-dir", runs, "--format", fmt]
    code, out, err = _cli(*argv)
    assert code == 2
    said = json.loads(out)
    assert said["error"] == "bad-input" and said["message"] == f"--json prints the table as JSON; it takes no --format {fmt}"
