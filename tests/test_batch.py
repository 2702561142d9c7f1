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
