"""While a sweep's process lives, a point whose run it saw fail because the disk refused the run's last record (so
the record still says running, under the sweep's own process) reads failed in the report, as ``runs show SWEEP``
and ``runs table`` read it, not running."""

from __future__ import annotations

import io
import json
import os

from hetflow.engine.cli import main
from hetflow.engine.store.records import write_json_atomic

MANIFEST = """\
version: 1
name: rlp
params: {k: 1}
matrix: {k: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_point_the_live_sweep_saw_fail_reads_failed_in_the_report(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    # run in this process: the sweep's owner (and its runs') is a process that lives, as while a sweep runs
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    first = sweep["points"][0]
    # what a disk that refused the point's last record leaves: its record running, its row failed with exit 5
    record_path = os.path.join(runs, first["run_id"], "record.json")
    with open(record_path) as f:
        record = json.load(f)
    write_json_atomic(record_path, {**record, "status": "running", "ended_at": None, "duration_s": None})
    summary_path = os.path.join(runs, sweep["sweep_id"], "sweep.json")
    with open(summary_path) as f:
        summary = json.load(f)
    summary["status"] = "failed"
    summary["points"][0].update(status="failed", exit_code=5, outputs={},
                                error=f"run {first['run_id']}: record.json could not be written: File too large")
    write_json_atomic(summary_path, summary)
    code, out, err = _cli("runs", "show", sweep["sweep_id"], "--runs-dir", runs, "--json")
    assert code == 0, err
    assert [p["status"] for p in json.loads(out)["points"]] == ["failed", "succeeded"]
    page = tmp_path / "page.html"
    code, out, err = _cli("report", sweep["sweep_id"], "--runs-dir", runs, "-o", str(page))
    assert code == 0, err
    row = page.read_text().split(f'data-point="{first["name"]}"', 1)[1].split("</tr>", 1)[0]
    assert "status-failed" in row and "status-running" not in row, row
