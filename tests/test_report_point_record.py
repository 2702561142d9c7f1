"""The sweep's report reads each point from its run's record, where ``runs show SWEEP`` and ``runs table`` read it:
a row whose ``record`` path names another file (an edit, a summary copied from elsewhere) does not make the page
show that file's run as the point's."""

from __future__ import annotations

import io
import json
import os

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: rpr
params: {k: 1}
matrix: {k: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [3], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_points_row_is_drawn_from_its_own_runs_record(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    first, second = sweep["points"]
    assert first["outputs"]["x"] != second["outputs"]["x"]
    path = os.path.join(runs, sweep["sweep_id"], "sweep.json")
    with open(path) as f:
        summary = json.load(f)
    summary["points"][0]["record"] = os.path.join(second["run_id"], "record.json")
    with open(path, "w") as f:
        json.dump(summary, f)
    page = tmp_path / "page.html"
    code, out, err = _cli("report", sweep["sweep_id"], "--runs-dir", runs, "-o", str(page))
    assert code == 0, err
    row = page.read_text().split(f'data-point="{first["name"]}"', 1)[1].split("</tr>", 1)[0]
    assert first["outputs"]["x"] in row and second["outputs"]["x"] not in row, row
    # as runs table reads it
    code, out, err = _cli("runs", "table", sweep["sweep_id"], "--runs-dir", runs, "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["digests"] == first["outputs"]
