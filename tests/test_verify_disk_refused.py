"""``verify --json`` whose rerun's disk refused its files (exit 5) names the run verified as ``run_id`` and its
rerun as ``rerun_id``, with the rerun's failed record, as a finished or a cancelled verify's object does; the id
on standard output's last line without ``--json`` is the rerun's, as a cancelled verify's is."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: vd
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [8, 8], seed: 3}, executor: h}
  y: {op: gelu, inputs: [x]}
outputs: {y: y}
"""


def test_a_rerun_whose_disk_refused_its_record_is_named_as_the_rerun(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--json"], out=out, err=err) == 0
    run_id = json.loads(out.getvalue())["run_id"]
    size = os.path.getsize(os.path.join(runs, run_id, "record.json"))
    named = 0
    # limits between the rerun's first record and its last: the last is refused, a failed one written in its place
    for part in (0.75, 0.85, 0.95):
        limit = int(size * part)
        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "verify", run_id, "--runs-dir", runs,
                               "--json"], capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        assert "Traceback" not in done.stderr, done.stderr
        if done.returncode != 5:
            continue
        said = json.loads(done.stdout)
        assert said["run_id"] == run_id, said
        if said.get("record") is None:
            continue  # not even a failed record fitted: the rerun's running record stays
        named += 1
        rerun = os.path.basename(os.path.dirname(said["record"]))
        assert said["rerun_id"] == rerun != run_id
        with open(said["record"]) as f:
            record = json.load(f)
        assert record["status"] == "failed" and record["verifies"] == run_id
    assert named, "no limit left the rerun's failed record"
