"""Ctrl-C in the Python API: a request the run or sweep looks at where it is safe to, never a KeyboardInterrupt at
whatever line runs inside the locks of its own threads."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import hetflow

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signals reach the main thread")

MANIFEST = """\
version: 1
name: ctrlc
params: {n: 1}
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}}
  y: {op: add, inputs: [x, x]}
outputs: {y: y}
"""


def _records(runs):
    return {p.parent.name: json.loads(p.read_text()) for p in runs.glob("*/record.json")}


def test_a_ctrl_c_as_the_run_starts_cancels_it_and_the_next_run_runs(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"

    def on_event(event):
        if event.get("event") == "started":
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(hetflow.RunCancelled):
        hetflow.run(path, runs_dir=runs, cache=False, on_event=on_event)
    (record,) = _records(runs).values()
    assert record["status"] == "cancelled" and record["cancelled"]["signal"] == "SIGINT"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # nothing of the cancelled run holds the process: its lock, its threads' locks
    again = hetflow.run(path, runs_dir=runs, cache=False)
    assert again.status == "succeeded" and list(again.outputs["y"]) == [2.0] * 4
    assert not list((runs / ".locks").glob("*.lock"))


def test_a_ctrl_c_after_the_run_ended_is_raised_once_the_call_is_done(tmp_path):
    """Too late to stop anything: the record says succeeded, and the caller's loop still stops."""
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"

    def on_event(event):
        if event.get("event") == "finished":
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        hetflow.run(path, runs_dir=runs, cache=False, on_event=on_event)
    (record,) = _records(runs).values()
    assert record["status"] == "succeeded"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_gives_the_caller_back_with_the_record_cancelled(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"

    def on_event(event):
        if event.get("event") == "started":
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises((KeyboardInterrupt, hetflow.RunCancelled)):
        hetflow.run(path, runs_dir=runs, cache=False, on_event=on_event)
    (record,) = _records(runs).values()
    assert record["status"] == "cancelled", record["status"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert hetflow.run(path, runs_dir=runs, cache=False).status == "succeeded"


def test_a_ctrl_c_during_a_sweep_cancels_it_and_leaves_no_point_running(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST + "matrix: {n: [1, 2, 3]}\n")
    runs = tmp_path / "runs"
    sent = []

    def on_event(event):
        if event.get("event") == "started" and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(hetflow.RunCancelled):
        hetflow.sweep(path, runs_dir=runs, cache=False, on_event=on_event)
    (summary,) = runs.glob("*/sweep.json")
    summary = json.loads(summary.read_text())
    assert summary["status"] == "cancelled"
    assert {r["status"] for r in summary["points"]} <= {"cancelled", "pending"}
    assert {r["status"] for r in _records(runs).values()} == {"cancelled"}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


STORM = textwrap.dedent("""\
    import json, os, random, signal, sys, threading, time
    from pathlib import Path
    import hetflow
    manifest, runs, seed, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng, pid, outcomes = random.Random(seed), os.getpid(), {}
    hetflow.run(manifest, runs_dir=runs, cache=False)
    for i in range(count):
        first = rng.uniform(0.0, 0.004)
        timers = [threading.Timer(d, os.kill, (pid, signal.SIGINT)) for d in (first, first + rng.uniform(0.0, 0.003))]
        try:
            for t in timers:
                t.start()
            hetflow.run(manifest, params={"n": i % 5}, runs_dir=runs, cache=False)
            name = "ok"
        except BaseException as e:
            name = type(e).__name__
        outcomes[name] = outcomes.get(name, 0) + 1
        while True:
            try:
                for t in timers:
                    t.cancel()
                    if t.ident is not None:
                        t.join()
                break
            except KeyboardInterrupt:
                pass
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    print(json.dumps(outcomes))
    """)


def test_ctrl_c_storms_on_a_loop_of_runs_leave_every_record_true_and_nothing_held(tmp_path):
    """Two real SIGINTs a run at random moments, 60 runs: before, records left running for as long as the process
    lived, runs recorded failed ('release unlocked lock'), and later runs hung on a lock a KeyboardInterrupt left
    taken."""
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"
    script = tmp_path / "storm.py"
    script.write_text(STORM)
    done = subprocess.run([sys.executable, str(script), str(path), str(runs), "7", "60"], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout.splitlines()[-1])
    assert set(outcomes) <= {"ok", "RunCancelled", "KeyboardInterrupt"}, outcomes
    records = _records(runs)
    assert records and {r["status"] for r in records.values()} <= {"succeeded", "cancelled"}
    for folder, record in records.items():
        for output in record["outputs"].values():
            assert (runs / folder / output["file"]).is_file()
    assert not list((runs / ".locks").glob("*.lock"))
