"""A sweep's points as ``runs show SWEEP`` (text and ``--json``) and ``runs table`` show them agree with the
records of their runs, which are what the runs left: after a disk that refused a point's last record, and after a
point's run was resumed on its own and succeeded."""

import io
import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

from hetflow.engine.cli import main

SWEEP = """\
version: 1
name: swp
params: {n: 16}
matrix: {n: [8, 16, 32]}
executors:
  host: {vendor: cpu}
stages:
  x: {op: random.normal, args: {shape: ["${n}", 8], seed: 3}, executor: host}
  y: {op: gelu, inputs: [x]}
outputs: {y: y}
"""

FLAKY = """\
import os

from hetflow import op


@op("t.flaky")
def flaky(xp, x):
    if os.path.exists(os.path.join(os.path.dirname(__file__), "fail")):
        raise RuntimeError("told to fail")
    return x
"""

RESUMED = """\
version: 1
name: rs
plugins: [flaky.py]
params: {n: 2}
matrix: {n: [2, 3]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
  y: {op: t.flaky, inputs: [x], cache: false}
outputs: {y: y}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _agree(runs: str, sweep_id: str) -> dict[str, str]:
    """Each point's status as runs show SWEEP --json, runs show SWEEP and runs table give it, checked against
    its run's record as runs show RUN reads it; point name -> that status."""
    code, out, err = cli("runs", "show", sweep_id, "--runs-dir", runs, "--json")
    assert code == 0, err
    points = json.loads(out)["points"]
    code, table, err = cli("runs", "table", sweep_id, "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    rows = {r["point"]: r["status"] for r in json.loads(table)["rows"]}
    code, text, err = cli("runs", "show", sweep_id, "--runs-dir", runs)
    assert code == 0, err
    shown = {}
    for p in points:
        assert rows[p["name"]] == p["status"], (rows, p)
        assert any(line.split()[:2] == [p["name"], p["status"]] for line in text.splitlines()), text
        if p.get("run_id") and os.path.isfile(os.path.join(runs, p["run_id"], "record.json")):
            code, out, err = cli("runs", "show", p["run_id"], "--runs-dir", runs, "--json")
            assert code == 0, err
            assert p["status"] == json.loads(out)["status"], (p, out)
        else:
            assert p["status"] != "succeeded", p  # no record: nothing left of a run that succeeded
        shown[p["name"]] = p["status"]
    return shown


def test_a_point_whose_last_record_the_disk_refused_reads_as_its_record_does(tmp_path):
    manifest = tmp_path / "swp.yaml"
    manifest.write_text(SWEEP)

    def run(runs, limit=None):
        def limited():
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir", runs,
                               "--quiet", "--json"], capture_output=True, text=True, preexec_fn=limited, timeout=120,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})

    whole = str(tmp_path / "whole")
    assert run(whole).returncode == 0
    size = max(os.path.getsize(os.path.join(whole, d, "record.json")) for d in os.listdir(whole)
               if os.path.isfile(os.path.join(whole, d, "record.json")))
    seen = set()
    # limits below a run's first record (nothing of the run is kept), and between its first record and its last
    # (the last cannot be written, the first stays)
    for part in (0.35, 0.5, 0.55, 0.6, 0.65, 0.7):
        runs = str(tmp_path / f"r{part}")
        done = run(runs, int(size * part))
        assert "Traceback" not in done.stderr and done.returncode == 5, done.stderr
        sweeps = [d for d in os.listdir(runs) if d.endswith("-sweep")]
        if not sweeps or not os.path.isfile(os.path.join(runs, sweeps[0], "sweep.json")):
            continue
        said = json.loads(done.stdout)
        if "points" in said:
            # each point that did not succeed says why and with what code, as its row in sweep.json keeps them
            with open(os.path.join(runs, sweeps[0], "sweep.json")) as f:
                rows = json.load(f)["points"]
            assert [(p["status"], p.get("error"), p.get("exit_code")) for p in said["points"]] == \
                [(r["status"], r.get("error"), r.get("exit_code")) for r in rows]
            failed = [p for p in said["points"] if p["status"] != "succeeded"]
            assert failed and all(p["exit_code"] == 5 and "File too large" in p["error"] for p in failed)
        seen.update(_agree(runs, sweeps[0]).values())
    # the sweep called those points failed while their records say running, from a process that is gone
    assert "died" in seen, seen


def test_a_point_resumed_on_its_own_reads_as_its_record_does(tmp_path, registry):
    (tmp_path / "flaky.py").write_text(FLAKY)
    (tmp_path / "m.yaml").write_text(RESUMED)
    (tmp_path / "fail").write_text("")
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 1, err
    sweep = json.loads(out)
    first = sweep["points"][0]
    os.remove(tmp_path / "fail")
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", runs, "--quiet", "--resume", first["run_id"])
    assert code == 0, err
    assert _agree(runs, sweep["sweep_id"]) == {first["name"]: "succeeded", sweep["points"][1]["name"]: "failed"}
    code, out, err = cli("runs", "show", sweep["sweep_id"], "--runs-dir", runs, "--json")
    row = json.loads(out)["points"][0]
    with open(os.path.join(runs, first["run_id"], "record.json")) as f:
        record = json.load(f)
    assert row["outputs"] == {k: v["digest"] for k, v in record["outputs"].items()} and row["error"] is None


def test_a_point_whose_run_folder_is_gone_reads_missing_not_succeeded(tmp_path):
    (tmp_path / "swp.yaml").write_text(SWEEP)
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(tmp_path / "swp.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    gone = sweep["points"][1]
    shutil.rmtree(os.path.join(runs, gone["run_id"]))
    assert _agree(runs, sweep["sweep_id"]) == {p["name"]: "missing" if p is gone else "succeeded"
                                               for p in sweep["points"]}
    page = tmp_path / "report.html"
    code, out, err = cli("report", sweep["sweep_id"], "--runs-dir", runs, "-o", str(page))
    assert code == 0, err
    row = page.read_text().split(f'data-point="{gone["name"]}"', 1)[1].split("</tr>", 1)[0]
    assert "missing" in row and "succeeded" not in row


def test_a_point_whose_record_is_damaged_reads_unreadable_as_the_listing_says(tmp_path):
    (tmp_path / "swp.yaml").write_text(SWEEP)
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(tmp_path / "swp.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    damaged = sweep["points"][2]
    with open(os.path.join(runs, damaged["run_id"], "record.json"), "w") as f:
        f.write('{"status": "succ')
    code, out, err = cli("runs", "--runs-dir", runs, "--json")
    assert code == 0, err
    assert {r["id"]: r["status"] for r in json.loads(out)}[damaged["run_id"]] == "unreadable"
    code, out, err = cli("runs", "show", sweep["sweep_id"], "--runs-dir", runs, "--json")
    assert code == 0, err
    assert [p["status"] for p in json.loads(out)["points"]] == ["succeeded", "succeeded", "unreadable"]
    code, text, err = cli("runs", "show", sweep["sweep_id"], "--runs-dir", runs)
    assert code == 0, err
    assert [line.split()[1] for line in text.splitlines()[1:]] == ["succeeded", "succeeded", "unreadable"]
    # the table is still made, the damaged point's row saying why it has no values
    code, out, err = cli("runs", "table", sweep["sweep_id"], "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["status"] for r in rows] == ["succeeded", "succeeded", "unreadable"]
    assert rows[2]["outputs"] == {} and rows[2]["record"] == os.path.join(runs, damaged["run_id"], "record.json")
