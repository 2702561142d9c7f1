"""Slots run in the order of their fire times across every scheduler that shares a runs directory: two cron'd
``run-due`` sharing one backlog, ``serve`` beside a ``run-due``."""

import subprocess
import sys
import threading
import time
from pathlib import Path

from hetflow.engine.batch import schedule as sched
from hetflow.engine.batch.serve import Server
from hetflow.engine.store.locks import RunLock, lock_path

from test_schedule import SLOW_OP, records, slow_body, wait_for, write

NOW = "2026-01-01T04:30:00Z"  # the history ends at 00:00: the hourly slots 01:00 to 04:00 are a backlog of four
BACKLOG = [f"2026-01-01T0{h}:00:00Z" for h in (1, 2, 3, 4)]


def _backlog(tmp_path: Path) -> tuple[str, Path, sched.Entry]:
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "hourly", 'cron: "0 * * * *"\ncatchup: true\nmax_active: skip\n',
              body=slow_body(0.3).replace("{seconds: 0.3}", "{seconds: 0.3}, cache: false"))
    runs = tmp_path / "runs"
    entry = sched.load_entry(m)
    first = sched.parse_instant("2026-01-01T00:00:00Z")
    sched.mark(sched.claim(str(runs), entry, first), entry, first, "skipped", reason="before the downtime")
    return m, runs, entry


def _run_due(m: str, runs: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--now", NOW,
                             "--runs-dir", str(runs)], stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True)


def _lines(log: Path, event: str) -> list[str]:
    return [line for line in log.read_text().splitlines() if f" {event} " in line]


def _in_order(runs: Path) -> None:
    ran = {r["schedule"]["slot"]: r for r in records(runs)}
    assert sorted(ran) == BACKLOG, sorted(ran)  # each slot once
    assert [ran[s]["status"] for s in BACKLOG] == ["succeeded"] * 4
    for before, after in zip(BACKLOG, BACKLOG[1:]):
        assert ran[before]["ended_at"] <= ran[after]["started_at"], (before, after, ran[before], ran[after])


def test_two_run_due_sharing_a_backlog_run_its_slots_in_order(tmp_path):
    m, runs, entry = _backlog(tmp_path)
    outside = tmp_path / "outside.log"
    got: list[str] = []
    # a run by hand holds the manifest's lock while both schedulers take their first slot of the backlog
    lock = RunLock(lock_path(str(runs), m, "hourly", {"n": 4}), manifest=m).acquire()
    try:
        proc = _run_due(m, runs, outside)  # claims 01:00 and waits for the lock
        wait_for(lambda: any("slot=2026-01-01T01:00:00Z" in x for x in _lines(outside, "queued")), 60,
                 "the first run-due to wait with the backlog's oldest slot")

        def second() -> None:
            # the scheduler that looks more often (every 20 ms) finds the lock free first
            sched.run_due([m], str(runs), sched.parse_instant(NOW), lambda e, f: got.append(f"{e} {f.get('slot')}"),
                          wait=0.02)

        thread = threading.Thread(target=second)
        thread.start()
        wait_for(lambda: "queued 2026-01-01T02:00:00Z" in got, 60, "the second run-due to wait with 02:00")
    finally:
        lock.release()
    thread.join(120)
    assert not thread.is_alive()
    assert proc.wait(timeout=120) == 0, outside.read_text()
    _in_order(runs)
    # every slot was claimed by one of the two and started once
    started = [x.split()[1] for x in got if x.startswith("started ")] + [
        x.split("slot=")[1].split()[0] for x in _lines(outside, "started")]
    assert sorted(started) == BACKLOG, (got, outside.read_text())


def test_serve_beside_a_run_due_runs_a_shared_backlog_in_order(tmp_path):
    m, runs, entry = _backlog(tmp_path)
    outside = tmp_path / "outside.log"
    said: list[tuple[str, dict]] = []
    lock = RunLock(lock_path(str(runs), m, "hourly", {"n": 4}), manifest=m).acquire()
    try:
        proc = _run_due(m, runs, outside)
        wait_for(lambda: any("slot=2026-01-01T01:00:00Z" in x for x in _lines(outside, "queued")), 60,
                 "the run-due to wait with the backlog's oldest slot")
        # serve's loop, its clock at NOW, turned every 20 ms: it queues 02:00-04:00 and finds the lock free first
        server = Server([m], str(runs), lambda e, f: said.append((e, dict(f))), poll=0.02,
                        clock=lambda: sched.parse_instant(NOW))
        server.scan()
        server.tick()
        assert [f["slot"] for e, f in said if e == "queued"] == BACKLOG[1:], said
    finally:
        lock.release()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (server.queued or server.running or server.concluders):
        server.tick()
        time.sleep(0.02)
    server._concluded()
    assert not server.queued and not server.running, said
    assert proc.wait(timeout=120) == 0, outside.read_text()
    _in_order(runs)
