"""A point whose row a sweep's summary still says ``running`` (the sweep killed, or its disk refused the summary's
last write) while its run ended reads as that run's record says in ``runs show SWEEP``: its status, and its
outputs' digests and error with it, not a succeeded row without outputs."""

from __future__ import annotations

import io
import json
import os

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: dr
params: {k: 1}
matrix: {k: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2, 2], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_point_that_ended_after_the_summarys_last_write_reads_as_its_record_outputs_too(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    # the summary as a sweep killed (or refused its last write) left it: that point's row still running
    path = os.path.join(runs, sweep["sweep_id"], "sweep.json")
    with open(path) as f:
        summary = json.load(f)
    summary["status"] = "running"
    summary["owner"]["pid"] = 2**30
    summary["points"][0].update(status="running", outputs={})
    with open(path, "w") as f:
        json.dump(summary, f)
    code, out, err = _cli("runs", "show", sweep["sweep_id"], "--runs-dir", runs, "--json")
    assert code == 0, err
    row = json.loads(out)["points"][0]
    assert (row["status"], row["outputs"], row["error"]) == ("succeeded", sweep["points"][0]["outputs"], None)
    code, text, err = _cli("runs", "show", sweep["sweep_id"], "--runs-dir", runs)
    assert code == 0, err
    digest = sweep["points"][0]["outputs"]["x"][7:19]
    assert any(line.split()[:3] == [sweep["points"][0]["name"], "succeeded", sweep["points"][0]["run_id"]]
               and f"x={digest}" in line for line in text.splitlines()), text
