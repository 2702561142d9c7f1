"""verify of a run that did not succeed (a failed sweep point, a cancelled run) is refused as bad input (exit 2)
naming the run by its id too, and starts no rerun."""

from __future__ import annotations

import io
import json

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: un
params: {n: 4}
matrix: {n: [3, 5]}
plugins: [ops.py]
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [2]}}
  y: {op: t.fails_past_four, inputs: [x], args: {n: "${n}"}}
outputs: {y: y}
"""

PLUGIN = """\
from hetflow import op


@op("t.fails_past_four")
def fails_past_four(xp, x, *, n: int = 0):
    if n > 4:
        raise RuntimeError("past four")
    return x
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_failed_point_and_a_cancelled_run_are_refused_naming_their_ids(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    (tmp_path / "ops.py").write_text(PLUGIN)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json")
    points = {p["name"]: p for p in json.loads(out)["points"]}
    bad, good = points["un[n=5]"], points["un[n=3]"]
    assert code == 1 and bad["status"] == "failed" and good["status"] == "succeeded"
    before = sorted(p.name for p in runs.iterdir())
    code, out, err = _cli("verify", bad["name"], "--runs-dir", str(runs))
    assert code == 2 and out == ""
    assert err == (f"hetflow: error: run {bad['name']} ({bad['run_id']}) did not succeed (status failed); there "
                   "is nothing to verify: verify reruns a run that succeeded and compares its outputs\n")
    assert sorted(p.name for p in runs.iterdir()) == before
    record_file = runs / good["run_id"] / "record.json"
    record = json.loads(record_file.read_text())
    record["status"] = "cancelled"
    record_file.write_text(json.dumps(record))
    code, out, err = _cli("verify", good["run_id"], "--runs-dir", str(runs), "--json")
    assert code == 2
    assert json.loads(out)["message"] == (f"run {good['run_id']} did not succeed (status cancelled); there is "
                                          "nothing to verify: verify reruns a run that succeeded and compares its "
                                          "outputs")
