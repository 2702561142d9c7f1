"""Batch use: a killed run resumed, verify, runs listing and gc, the run lock."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetflow.engine import cli
from hetflow.engine.store.cache import Cache
from hetflow.engine.store.locks import LockHeld, RunLock, lock_path

SLOW = """
version: 1
name: slow
params: {n: 700, rounds: 40}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x:  {op: random.normal, args: {shape: ["${n}", "${n}"], seed: 1, std: 0.03}, executor: a}
  x2: {op: relu, inputs: [x]}
STEPS
outputs: {y: yLAST}
"""


def slow_manifest(manifest_file, rounds=40):
    steps = ["  y0: {op: matmul, inputs: [x2, x2], executor: b}"]
    for i in range(1, rounds):
        steps.append(f"  y{i}: {{op: matmul, inputs: [y{i - 1}, x2]}}")
    return manifest_file(SLOW.replace("STEPS", "\n".join(steps)).replace("LAST", str(rounds - 1)), "slow.yaml")


def main(*argv):
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def hetflow(*argv, **kw):
    return subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_a_killed_run_resumes_to_identical_outputs_without_rerunning_finished_partitions(manifest_file, tmp_path):
    path = slow_manifest(manifest_file)
    runs = tmp_path / "runs"
    proc = hetflow("run", path, "--runs-dir", str(runs), "--quiet")
    cache = Cache(str(runs / ".cache"))
    deadline = time.time() + 120
    while not list(cache.keys()):
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
        assert time.time() < deadline, "no partition finished within 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    (run_id,) = [p.name for p in runs.iterdir() if not p.name.startswith(".")]
    killed = json.loads((runs / run_id / "record.json").read_text())
    assert killed["status"] == "running"
    finished = len(list(cache.keys()))

    code, out, err = main("run", path, "--runs-dir", str(runs), "--quiet", "--resume", run_id)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == run_id
    resumed = json.loads((runs / run_id / "record.json").read_text())
    assert resumed["status"] == "succeeded" and resumed["resumed"] is True
    executed = [t["id"] for t in resumed["tasks"] if t["kind"] == "partition" and t["status"] == "succeeded" and not t["cached"]]
    assert len(resumed["cache"]["hits"]) == finished >= 1
    assert len(executed) == len(resumed["plan"]["partitions"]) - finished
    assert not set(executed) & set(resumed["cache"]["hits"])

    code, out, err = main("run", path, "--runs-dir", str(tmp_path / "fresh"), "--quiet", "--no-cache", "--json")
    fresh = json.loads(out)
    assert fresh["outputs"] == {k: v["digest"] for k, v in resumed["outputs"].items()}


VERIFY = """
version: 1
name: v
executors: {a: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [16], seed: SEED}}
  y: {op: gelu, inputs: [x]}
outputs: {y: y}
"""


def test_verify_matches_a_deterministic_run_and_catches_a_nondeterministic_one(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    code, out, _ = main("run", manifest_file(VERIFY.replace("SEED", "3"), "det.yaml"), "--runs-dir", runs, "--quiet")
    run_id = out.strip().splitlines()[-1]
    code, out, _ = main("verify", run_id, "--runs-dir", runs)
    assert code == 0 and f"verify {run_id}: all outputs match" in out
    assert out.splitlines()[1].split()[-1] == "yes"

    code, out, _ = main("run", manifest_file(VERIFY.replace("SEED", "null"), "nondet.yaml"), "--runs-dir", runs, "--quiet")
    run_id = out.strip().splitlines()[-1]
    code, out, _ = main("verify", run_id, "--runs-dir", runs, "--json")
    data = json.loads(out)
    assert code == 1 and data["match"] is False and data["outputs"][0]["match"] is False
    code, _, err = main("verify", "no-such-run", "--runs-dir", runs)
    assert code == 2 and "no run 'no-such-run'" in err


def test_runs_lists_shows_and_collects_garbage(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    ids = []
    for seed in (1, 2, 3):
        code, out, _ = main("run", manifest_file(VERIFY.replace("SEED", str(seed)), f"s{seed}.yaml"), "--runs-dir", runs, "--quiet")
        ids.append(out.strip().splitlines()[-1])
        time.sleep(0.01)
    code, out, _ = main("runs", "--runs-dir", runs, "--json")
    rows = json.loads(out)
    assert [r["id"] for r in rows] == ids[::-1] and all(r["status"] == "succeeded" for r in rows)
    code, out, _ = main("runs", "show", ids[0], "--runs-dir", runs)
    assert code == 0 and out.startswith(f"run {ids[0]}: succeeded")
    cache = Cache(str(Path(runs) / ".cache"))
    assert len(list(cache.keys())) == 3
    code, out, _ = main("runs", "gc", "--keep", "1", "--runs-dir", runs)
    assert code == 0 and "kept 1 runs; removed 2 runs, 0 sweeps, 2 cache entries" in out
    assert sorted(os.listdir(runs)) == [".cache", ids[2]] or sorted(os.listdir(runs)) == sorted([".cache", ".locks", ids[2]])
    code, out, _ = main("run", manifest_file(VERIFY.replace("SEED", "3"), "s3.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert json.loads(out)["cache_hits"] == ["p0"], "the kept run's cache entry survives gc"


HOLD = """
import sys, time
from hetflow.engine.store.locks import RunLock
lock = RunLock(sys.argv[1], manifest="held.yaml").acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_the_lock_refuses_a_second_run_while_the_first_lives(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    path = manifest_file(VERIFY.replace("SEED", "1"))
    where = lock_path(runs, path, "v", {})  # the lock of the manifest run with its (no) params
    holder = subprocess.Popen([sys.executable, "-c", HOLD, where, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = main("run", path, "--runs-dir", runs, "--quiet")
        assert code == 4
        assert f"held.yaml is already running: pid {holder.pid} on " in err and where in err
        with pytest.raises(LockHeld):
            RunLock(where).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_held_by_another_thread_of_this_process_says_so(tmp_path):
    """A notebook or a service calling hetflow.run from two threads: the holder's pid was the caller's own."""
    where = lock_path(str(tmp_path / "runs"), "m.yaml", "m", {})
    with RunLock(where, manifest="m.yaml"):
        with pytest.raises(LockHeld) as held:
            RunLock(where, manifest="m.yaml").acquire()
    assert str(held.value).startswith(f"m.yaml is already running: another call in this process (pid {os.getpid()}), "
                                      "in another thread since ")
    RunLock(where).acquire().release()  # and given back


def test_a_lock_left_by_a_dead_process_is_taken_over(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    path = manifest_file(VERIFY.replace("SEED", "1"))
    where = lock_path(runs, path, "v", {})  # the lock of the manifest run with its (no) params
    holder = subprocess.Popen([sys.executable, "-c", HOLD, where, "60"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads(Path(where).read_text())["pid"] == holder.pid, "the dead holder's lock file is still there"
    code, out, err = main("run", path, "--runs-dir", runs, "--quiet")
    assert code == 0, err


KILLED_AT_A_POINT = """
import os, signal, sys
import hetflow

def on_point(row):
    if row["name"].endswith("[k=40]"):
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would, the moment the point ended

hetflow.sweep(sys.argv[1], runs_dir=sys.argv[2], on_point=on_point)
"""


def test_a_sweep_killed_before_its_summary_caught_up_reads_and_resumes_as_its_runs_say(manifest_file, tmp_path):
    """The summary is written a moment behind the points; a sweep killed in that moment read ``died`` (or
    ``pending``) for points whose runs had succeeded, and its resume ran them again beside their runs."""
    path = manifest_file("version: 1\nname: many\nparams: {k: 0}\nmatrix: {k: [" + ", ".join(map(str, range(60)))
                         + "]}\nexecutors: {cpu: {vendor: cpu}}\nstages:\n  x: {op: ones, args: {shape: [4]}}\n"
                         "  y: {op: relu, inputs: [x]}\noutputs: {y: y}\n")
    runs = tmp_path / "runs"
    script = tmp_path / "killed.py"
    script.write_text(KILLED_AT_A_POINT)
    done = subprocess.run([sys.executable, str(script), path, str(runs)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    (folder,) = runs.glob("*-sweep")
    on_disk = json.loads((folder / "sweep.json").read_text())
    records = {p.parent.name: json.loads(p.read_text()) for p in runs.glob("*/record.json")}
    (killer,) = [r for r in records.values() if r["matrix_point"]["name"] == "many[k=40]"]
    assert killer["status"] == "succeeded" and killer["matrix_point"]["sweep"] == folder.name
    row = next(p for p in on_disk["points"] if p["name"] == "many[k=40]")
    assert row["status"] != "succeeded", "the summary caught up before the kill: nothing here tells lag from truth"

    code, out, err = main("runs", "show", folder.name, "--runs-dir", str(runs), "--json")
    view = json.loads(out)
    assert view["status"] == "died"
    for p in view["points"]:
        record = records.get(p["run_id"] or "")
        said = record["status"] if record else None
        assert p["status"] == ("pending" if record is None else said if said != "running" else "died"), (p, said)
    assert next(p for p in view["points"] if p["name"] == "many[k=40]")["run_id"] == killer["run_id"]

    code, out, err = main("run", path, "--runs-dir", str(runs), "--resume", folder.name, "--quiet")
    assert code == 0, err
    summary = json.loads((folder / "sweep.json").read_text())
    assert summary["status"] == "succeeded"
    named = {p["run_id"] for p in summary["points"]}
    with_records = {p.parent.name for p in runs.glob("*/record.json")}
    assert with_records <= named, f"runs of the sweep it does not name: {sorted(with_records - named)}"
    assert next(p for p in summary["points"] if p["name"] == "many[k=40]")["run_id"] == killer["run_id"]
    again = json.loads((runs / killer["run_id"] / "record.json").read_text())
    assert again["attempts"] == killer["attempts"], "a point whose run had succeeded was run again"
    gc = main("runs", "gc", "--keep", "0", "--runs-dir", str(runs), "--json")
    assert gc[0] == 0 and not [p for p in runs.iterdir() if not p.name.startswith(".")], gc


@pytest.mark.parametrize("where", ["flock", "_same_file", "current", "ftruncate", "pwrite"])
def test_a_ctrl_c_while_the_lock_is_taken_leaves_no_descriptor_holding_it(tmp_path, monkeypatch, where):
    """A KeyboardInterrupt between the lock file's open and acquire's return dropped the descriptor that held the
    flock: every later run of the manifest, from this process or any other, was "already running" until the
    process ended (a notebook's kernel, a service)."""
    from hetflow.engine.store import locks

    path = lock_path(str(tmp_path / "runs"), str(tmp_path / "m.yaml"), "m")
    target = {"flock": (locks.fcntl, "flock"), "_same_file": (locks, "_same_file"), "current": (locks.owner, "current"),
              "ftruncate": (locks.os, "ftruncate"), "pwrite": (locks.os, "pwrite")}[where]
    real = getattr(*target)
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            if where != "current":
                real(*args, **kwargs)  # the call done (the file locked, written), the interrupt just after it
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(*target, interrupted)
    with pytest.raises(KeyboardInterrupt):
        RunLock(path, manifest="m.yaml").acquire()
    monkeypatch.setattr(*target, real)
    assert calls, where
    assert len(os.listdir("/proc/self/fd")) == before  # no descriptor left open
    # taken again at once, here and in another process
    with RunLock(path, manifest="m.yaml"):
        pass
    done = subprocess.run([sys.executable, "-c", "import sys\nfrom hetflow.engine.store.locks import RunLock\n"
                           "RunLock(sys.argv[1], manifest='m.yaml').acquire()\n", path], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
