"""Slots run in the order of their fire times across every scheduler that shares a runs directory: two cron'd
``run-due`` sharing one backlog, ``serve`` beside a ``run-due``; and ``python -m hetflow.engine.cli schedule serve``,
how a service without the console script starts it, stopped while it loads."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hetflow.engine.batch import schedule as sched
from hetflow.engine.batch.serve import Server
from hetflow.engine.store.locks import RunLock, lock_path

from test_schedule import SLOW_OP, records, slow_body, wait_for, write

NOW = "2026-01-01T03:30:00Z"  # the history ends at 00:00: the hourly slots 01:00 to 03:00 are a backlog of three
BACKLOG = [f"2026-01-01T0{h}:00:00Z" for h in (1, 2, 3)]


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
    assert [ran[s]["status"] for s in BACKLOG] == ["succeeded"] * len(BACKLOG)
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
        # serve's loop, its clock at NOW, turned every 20 ms: it queues 02:00-03:00 and finds the lock free first
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


# --- a stop signal while python -m hetflow.engine.cli loads -----------------------------------------

_SIGNAL_WHILE_MODULE_LOADS = """
import os, signal, sys

sent = getattr(signal, os.environ["HETFLOW_TEST_SIGNAL"])


class Hook:
    # the signal comes as -m begins to load the command line's package, after hetflow's own first lines
    def find_spec(self, name, path=None, target=None):
        if name == "hetflow.engine":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), sent)
        return None


sys.meta_path.insert(0, Hook())
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_while_python_m_loads_the_command_line_stops_serve_cleanly(tmp_path, signame):
    """``python -m hetflow.engine.cli schedule serve`` took its stop signals only once the command line had loaded
    and parsed its arguments: one that came meanwhile ended it by the default action (-15, -1; a Ctrl-C with a
    traceback), where the console script's serve stops cleanly. It now keeps them from the package's first line."""
    m = write(tmp_path, "early", 'cron: "* * * * *"\n')
    runs = tmp_path / "runs"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SIGNAL_WHILE_MODULE_LOADS)  # runs as the interpreter starts, as site does
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "HETFLOW_TEST_SIGNAL": signame}
    proc = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "schedule", "serve", m, "--runs-dir", str(runs),
                           "--log-format", "json"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert [json.loads(line)["event"] for line in proc.stdout.splitlines()] == ["serving", "stopped"], proc.stdout
    assert "Traceback" not in proc.stderr
    assert not (runs / ".schedule").exists()


def test_a_program_run_with_python_m_that_imports_hetflow_keeps_its_signals(tmp_path):
    """Only ``-m hetflow.engine.cli`` keeps the stop signals from the package's first line: a package of another
    program, run with ``-m`` and the same words, that imports hetflow as it loads keeps the default actions."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "__init__.py").write_text("import signal\nimport hetflow\n\n"
                                       "print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n")
    (other / "__main__.py").write_text("")
    proc = subprocess.run([sys.executable, "-m", "other", "schedule", "serve"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "True"), proc.stderr


_CLAIMS_AND_WAITS = """
import sys, time
from hetflow.engine.batch import schedule as sched

entry = sched.load_entry(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
assert sched.claim(sys.argv[2], entry, sched.parse_instant(sys.argv[3])) is not None
print("claimed", flush=True)
time.sleep(600)
"""


def test_a_slot_whose_scheduler_was_killed_while_it_waited_runs_in_its_turn_not_after_the_next(tmp_path):
    """A run-due killed (a cron job's timeout) while it waited with a claimed slot of a backlog left the claim to
    the next decision: the run-due beside it found the slot claimed elsewhere, ran the slots after it, and the
    slot ran last, or never while it ran. The run-due beside it now takes it back and runs it in its turn."""
    m, runs, entry = _backlog(tmp_path)
    outside = tmp_path / "outside.log"
    other = subprocess.Popen([sys.executable, "-c", _CLAIMS_AND_WAITS, m, str(runs), BACKLOG[1]],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "ready"
        proc = _run_due(m, runs, outside)
        wait_for(lambda: any("slot=2026-01-01T01:00:00Z" in x for x in _lines(outside, "started")), 60,
                 "the run-due to start the backlog's oldest slot")
        # another scheduler claims 02:00 while 01:00 runs, to wait its turn, and is killed
        other.stdin.write("go\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "claimed"
    finally:
        other.kill()
        other.wait()
    assert proc.wait(timeout=120) == 0, outside.read_text()
    _in_order(runs)
    taken = [x for x in _lines(outside, "unqueued") if f"slot={BACKLOG[1]}" in x]
    assert len(taken) == 1 and "detached=true" in taken[0], outside.read_text()
    assert not _lines(outside, "claimed-elsewhere"), outside.read_text()


def test_serve_runs_a_slot_given_back_by_a_killed_scheduler_in_its_turn_not_skipped_or_after_the_next(tmp_path):
    """A run-due killed while it waited with the backlog's oldest slot left it to serve, which had queued the
    slots after it: serve took the slot back alone, as a single due slot, and max_active: skip skipped it for the
    backlog it was part of (or the slots after it started first). A slot given back now waits its turn as the
    backlog's, and runs first."""
    m, runs, entry = _backlog(tmp_path)
    outside = tmp_path / "outside.log"
    said: list[tuple[str, dict]] = []
    lock = RunLock(lock_path(str(runs), m, "hourly", {"n": 4}), manifest=m).acquire()
    try:
        proc = _run_due(m, runs, outside)  # claims 01:00 and waits for the lock
        wait_for(lambda: any("slot=2026-01-01T01:00:00Z" in x for x in _lines(outside, "queued")), 60,
                 "the run-due to wait with the backlog's oldest slot")
        server = Server([m], str(runs), lambda e, f: said.append((e, dict(f))), poll=0.02,
                        clock=lambda: sched.parse_instant(NOW))
        server.scan()
        server.tick()
        assert [f["slot"] for e, f in said if e == "queued"] == BACKLOG[1:], said
        proc.kill()  # a cron job's timeout
        proc.wait()
        server.tick()  # 01:00 is given back, and taken again
        assert ("skipped", BACKLOG[0]) not in [(e, f.get("slot")) for e, f in said], said
    finally:
        lock.release()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (server.queued or server.running or server.concluders):
        server.tick()
        time.sleep(0.02)
    server._concluded()
    assert not server.queued and not server.running, said
    _in_order(runs)


def test_run_due_waits_with_a_slot_given_back_while_a_run_is_active_rather_than_skip_it(tmp_path):
    m, runs, entry = _backlog(tmp_path)
    back = sched.claim(str(runs), entry, sched.parse_instant(BACKLOG[0]), state="queued")
    assert sched.give_back(back)  # the rest of a backlog whose scheduler was stopped
    later = sched.parse_instant(BACKLOG[1])
    sched.mark(sched.claim(str(runs), entry, later), entry, later, "skipped", reason="a run by hand was active")
    outside = tmp_path / "outside.log"
    lock = RunLock(lock_path(str(runs), m, "hourly", {"n": 4}), manifest=m).acquire()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--now",
                                 "2026-01-01T02:30:00Z", "--runs-dir", str(runs)], stdout=open(outside, "w"),
                                stderr=subprocess.STDOUT, text=True)
        wait_for(lambda: _lines(outside, "queued") or proc.poll() is not None, 60, "run-due to decide 01:00")
    finally:
        lock.release()
    assert proc.wait(timeout=120) == 0, outside.read_text()
    assert not _lines(outside, "skipped"), outside.read_text()
    assert [r["status"] for r in records(runs) if r["schedule"]["slot"] == BACKLOG[0]] == ["succeeded"]
