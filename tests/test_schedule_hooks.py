"""Scheduled batch operations: on_failure / on_success, run-due --dry-run, schedule status, claims cleaned by gc."""

import io
import json
import os
import textwrap
from pathlib import Path

from hetflow.engine.cli import main

FAILING = """\
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [1024, 1024], seed: 1}}
  y: {op: matmul, inputs: [x, x], timeout: 0.000001}
outputs: {y: y}
"""

FINE = """\
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
outputs: {x: x}
"""

HOOKS = """\
on_failure: 'echo "$HETFLOW_STATUS $HETFLOW_RUN_ID $HETFLOW_RECORD" >> failures.txt'
on_success: 'echo "$HETFLOW_STATUS $HETFLOW_RECORD" >> successes.txt'
"""


def write(folder: Path, name: str, schedule: str, body: str) -> str:
    text = f"version: 1\nname: {name}\nparams: {{n: 4}}\nschedule:\n{textwrap.indent(schedule, '  ')}{body}"
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_failing_scheduled_run_triggers_on_failure_exactly_once(tmp_path):
    m = write(tmp_path, "broken", 'cron: "0 * * * *"\n' + HOOKS, FAILING)
    runs = tmp_path / "runs"
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert code == 1
    assert "failed manifest=broken slot=2026-06-01T10:00:00Z rc=1" in out
    assert "hook manifest=broken slot=2026-06-01T10:00:00Z hook=on_failure rc=0" in out
    (line,) = (tmp_path / "failures.txt").read_text().splitlines()
    status, run_id, record = line.split(" ")
    assert status == "failed" and record == str(runs / run_id / "record.json")
    assert json.loads(Path(record).read_text())["status"] == "failed"
    assert not (tmp_path / "successes.txt").exists()
    # the slot is decided: later run-due calls neither rerun it nor call the hook again
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:30:00Z", "--runs-dir", str(runs))
    assert code == 0 and out == ""
    assert len((tmp_path / "failures.txt").read_text().splitlines()) == 1


def test_on_success_gets_the_record_path(tmp_path):
    m = write(tmp_path, "fine", 'cron: "0 * * * *"\n' + HOOKS, FINE)
    runs = tmp_path / "runs"
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and "hook=on_success rc=0" in out
    (line,) = (tmp_path / "successes.txt").read_text().splitlines()
    status, record = line.split(" ")
    assert status == "succeeded" and json.loads(Path(record).read_text())["schedule"]["slot"] == "2026-06-01T10:00:00Z"


def test_a_hook_past_its_time_limit_ends_with_every_process_it_started(tmp_path, monkeypatch):
    from hetflow.engine.batch import schedule as sched

    monkeypatch.setattr(sched, "HOOK_TIMEOUT_S", 1)
    hook = "on_success: '(sleep 29.37; echo late >> late.txt) & echo $! > bg.pid; sleep 29.38; echo done >> done.txt'\n"
    m = write(tmp_path, "hung", 'cron: "0 * * * *"\n' + hook, FINE)
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and 'hook manifest=hung slot=2026-06-01T10:00:00Z hook=on_success rc="timed out"' in out, out
    left = [pid for pid in _pids() if b"sleep\x0029.3" in _proc(pid, "cmdline") and _proc(pid, "stat")
            .rsplit(b")", 1)[-1].split()[:1] != [b"Z"]]
    assert left == [] and int((tmp_path / "bg.pid").read_text()) > 0
    assert not (tmp_path / "done.txt").exists() and not (tmp_path / "late.txt").exists()


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _proc(pid: int, what: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_run_due_dry_run_claims_and_runs_nothing(tmp_path):
    m = write(tmp_path, "fine", 'cron: "0 * * * *"\ncatchup: true\n', FINE)
    runs = tmp_path / "runs"
    cli("schedule", "run-due", m, "--now", "2026-06-01T08:05:00Z", "--runs-dir", str(runs))
    before = sorted(str(p.relative_to(runs)) for p in runs.rglob("*"))
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs), "--dry-run")
    assert code == 0
    lines = [line.split(" ", 1)[1] for line in out.splitlines()]
    assert [line.split(" command=")[0] for line in lines] == ["would-run manifest=fine slot=2026-06-01T09:00:00Z",
                                                             "would-run manifest=fine slot=2026-06-01T10:00:00Z"]
    assert f"--schedule-slot 2026-06-01T10:00:00Z" in lines[1]
    assert sorted(str(p.relative_to(runs)) for p in runs.rglob("*")) == before
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and out.count(" succeeded manifest=fine") == 2


def test_schedule_status_names_the_last_slot_its_run_and_the_next(tmp_path):
    bad = write(tmp_path, "broken", 'cron: "0 * * * *"\n', FAILING)
    good = write(tmp_path, "fine", 'cron: "30 * * * *"\n', FINE)
    idle = write(tmp_path, "idle", 'cron: "0 0 1 1 *"\n', FINE)
    runs = tmp_path / "runs"
    cli("schedule", "run-due", bad, good, "--now", "2026-06-01T10:45:00Z", "--runs-dir", str(runs))
    code, out, _ = cli("schedule", "status", bad, good, idle, "--now", "2026-06-01T10:50:00Z", "--runs-dir", str(runs),
                       "--json")
    assert code == 0
    rows = {r["manifest"]: r for r in json.loads(out)}
    assert rows["broken"]["last_slot"] == "2026-06-01T10:00:00Z" and rows["broken"]["status"] == "failed"
    assert rows["fine"]["last_slot"] == "2026-06-01T10:30:00Z" and rows["fine"]["status"] == "succeeded"
    assert rows["fine"]["next_slot"] == "2026-06-01T11:30:00Z" and rows["idle"]["last_slot"] is None
    assert os.path.isfile(runs / rows["broken"]["run_id"] / "record.json")
    code, out, _ = cli("schedule", "status", bad, idle, "--now", "2026-06-01T10:50:00Z", "--runs-dir", str(runs))
    assert f"broken  {bad}  last slot 2026-06-01T10:00:00Z: failed in " in out and f"(run {rows['broken']['run_id']})" in out
    assert f"idle  {idle}  never ran  next 2027-01-01T00:00:00Z" in out


def test_gc_removes_schedule_claims_with_their_runs_and_keeps_the_newest(tmp_path):
    m = write(tmp_path, "fine", 'cron: "0 * * * *"\ncatchup: true\n', FINE)
    runs = tmp_path / "runs"
    cli("schedule", "run-due", m, "--now", "2026-06-01T08:05:00Z", "--runs-dir", str(runs))
    cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    (claims,) = (runs / ".schedule").iterdir()
    assert len(list(claims.glob("*.json"))) == 3 and len(list(claims.glob("*.log"))) == 3
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--dry-run")
    assert out.count("would remove schedule claim ") == 2
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1")
    assert "removed 2 runs, 0 sweeps, 0 cache entries, 2 schedule claims" in out  # one entry, still used by the kept run
    assert [p.name for p in claims.iterdir()] in (["20260601T100000Z.json", "20260601T100000Z.log"],
                                                  ["20260601T100000Z.log", "20260601T100000Z.json"])
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:10:00Z", "--runs-dir", str(runs))
    assert out == ""  # the newest slot stays decided
