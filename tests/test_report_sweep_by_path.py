"""``report PATH/TO/SWEEP`` of a sweep in another runs directory than ``--runs-dir`` (a path is taken anywhere) reads
its points' runs beside it, as ``runs show SWEEP --runs-dir`` that directory does: a point whose row a killed sweep
left pending while its run ended reads as that run, not pending without a run."""

from __future__ import annotations

import io
import json
import os

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: rsp
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


def test_a_sweep_reported_by_its_path_reads_its_points_runs_beside_it(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    folder = os.path.join(runs, sweep["sweep_id"])
    # the summary as a sweep killed a moment after its last point's run began left it: that row pending, no run
    with open(os.path.join(folder, "sweep.json")) as f:
        summary = json.load(f)
    summary["status"] = "running"
    summary["owner"]["pid"] = 2**30  # beyond any pid the kernel gives
    summary["points"][-1].update(status="pending", run_id=None, record=None, outputs={})
    with open(os.path.join(folder, "sweep.json"), "w") as f:
        json.dump(summary, f)
    code, out, err = _cli("runs", "show", sweep["sweep_id"], "--runs-dir", runs, "--json")
    assert code == 0, err
    shown = [(p["status"], p["run_id"]) for p in json.loads(out)["points"]]
    assert shown == [("succeeded", p["run_id"]) for p in sweep["points"]]
    page = tmp_path / "page.html"
    code, out, err = _cli("report", folder, "--runs-dir", str(tmp_path / "elsewhere"), "-o", str(page))
    assert code == 0, err
    last = sweep["points"][-1]
    row = page.read_text().split(f'data-point="{last["name"]}"', 1)[1].split("</tr>", 1)[0]
    assert "succeeded" in row and last["run_id"] in row and "pending" not in row, row
