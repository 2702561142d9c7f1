"""``latest`` names the sweep whose point is the newest run (``runs show``, ``runs table``, ``report``) also where
the sweep's summary does not name that run yet: it is written a moment behind its points, and one whose last
write the disk refused keeps an earlier state. The run's record says its sweep from its first write."""

from __future__ import annotations

import io
import json
import os

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: ls
params: {k: 1}
matrix: {k: [1, 2, 3]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2, 2], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_latest_is_the_sweep_of_the_newest_run_its_summary_does_not_name_yet(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    # the summary as its writer left it a moment before the last point's run began, its process then gone (killed,
    # or its disk refused the summary's end): that row pending, no run named
    path = os.path.join(runs, sweep["sweep_id"], "sweep.json")
    with open(path) as f:
        summary = json.load(f)
    summary["status"] = "running"
    summary["owner"]["pid"] = 2**30  # beyond any pid the kernel gives
    summary["points"][-1].update(status="pending", run_id=None, record=None, outputs={})
    with open(path, "w") as f:
        json.dump(summary, f)
    code, out, err = _cli("runs", "show", "latest", "--runs-dir", runs)
    assert code == 0, err
    assert out.startswith(f"sweep {sweep['sweep_id']}: "), out
    code, out, err = _cli("runs", "table", "latest", "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    assert [r["run_id"] for r in json.loads(out)["rows"]] == [p["run_id"] for p in sweep["points"]]
    page = tmp_path / "page.html"
    code, out, err = _cli("report", "latest", "--runs-dir", runs, "-o", str(page))
    assert code == 0, err
    assert all(f'data-point="{p["name"]}"' in page.read_text() for p in sweep["points"])
    # latest-run is still the run itself
    code, out, err = _cli("runs", "show", "latest-run", "--runs-dir", runs)
    assert code == 0, err
    assert out.startswith(f"run {sweep['points'][-1]['run_id']}: "), out
