"""A worker of a cluster started by hand that stops answering mid-run: its process stopped (``kill -STOP``, a paused
VM) or hung, its connections open.

Dask drops such a worker only after its ``worker-ttl``, 5 minutes unless set; a run hosting an executor there says
so after a few seconds, and takes it for lost after ``distributed.comm.timeouts.tcp`` (11 s here).
"""

import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("distributed")

import hetflow  # noqa: E402

from test_cluster_client_died import write_held  # noqa: E402
from test_distributed_cluster import START_TIMEOUT_S, by_hand  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("nanny", [False, True], ids=["no-nanny", "nanny"])
def test_a_stopped_worker_is_said_then_taken_for_lost_and_its_executor_moved(tmp_path, nanny):
    """The run waited without a word on the worker that hosted executor b, stopped by SIGSTOP, until the
    scheduler's worker-ttl dropped it minutes later (and every question to all the workers waited with it)."""
    from distributed import Client

    path, go = write_held(tmp_path)
    runs = tmp_path / "runs"
    extra = [] if nanny else ["--no-nanny"]
    run, stopped = None, None
    with by_hand(tmp_path, ["--name", "w0", *extra], ["--name", "w1", *extra]) as file:
        try:
            with Client(scheduler_file=str(file), timeout=START_TIMEOUT_S, set_as_default=False) as client:
                client.wait_for_workers(2, timeout=START_TIMEOUT_S)
                (w1,) = [a for a, w in client.scheduler_info()["workers"].items() if w["name"] == "w1"]
                pid = client.run(os.getpid, workers=[w1])[w1]
            env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": "11s"}
            run = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler",
                                    str(file), "--runs-dir", str(runs), "--log-format", "json", "--place", "a=w0",
                                    "--place", "b=w1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for line in run.stderr:
                event = json.loads(line) if line.startswith("{") else {}
                if event.get("kind") == "partition" and event.get("event") == "started" \
                        and event.get("executor") == "b":
                    break
            os.kill(pid, signal.SIGSTOP)
            stopped = pid
            go.touch()
            out, err = run.communicate(timeout=150)
        finally:
            go.touch()
            if run is not None and run.poll() is None:
                run.kill()
                run.wait(30)
            if stopped is not None:
                try:
                    os.kill(stopped, signal.SIGCONT)
                except ProcessLookupError:
                    pass  # its nanny ended it
    assert run.returncode == 0, err[-3000:]
    record = json.loads((runs / out.split()[-1] / "record.json").read_text())
    assert record["status"] == "succeeded"
    (entry,) = record["recovery"]
    assert entry["lost_workers"] == [{"address": w1, "name": "w1"}]
    assert entry["executors"]["b"]["from"]["name"] == "w1" and entry["executors"]["b"]["to"]["name"] == "w0"
    assert "no heartbeat" in entry["cause"] and entry["silent"], entry
    assert ("restarted through its nanny" if nanny else "removed from the cluster") in entry["silent"]
    said = [e for e in record["events"] if e.get("event") in ("worker-silent", "worker-lost")]
    assert [e["event"] for e in said] == ["worker-silent", "worker-lost"], said
    assert said[0]["worker"] == w1 and said[0]["name"] == "w1" and said[0]["lost_after"] == 11
    assert said[1]["worker"] == w1 and said[1]["silent"] in entry["silent"]
    # the same bytes as an undisturbed run
    local = hetflow.run(path, runs_dir=tmp_path / "local")
    assert record["outputs"]["w"]["digest"] == local.record["outputs"]["w"]["digest"]


@pytest.mark.slow
def test_a_stopped_worker_that_hosts_nothing_does_not_hold_the_run(tmp_path):
    """A stopped worker of the cluster that none of the run's executors would use held ``hetflow run --scheduler``
    before it began (the question to every worker of what it runs waited on it) until its worker-ttl."""
    from distributed import Client

    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: m\nexecutors: {a: {vendor: cpu}, b: {vendor: cpu}}\nstages:\n"
                    "  x: {op: random.normal, args: {shape: [64, 64], seed: 1}, executor: a}\n"
                    "  y: {op: relu, inputs: [x], executor: b}\noutputs: {y: y}\n")
    runs = tmp_path / "runs"
    run, stopped = None, None
    with by_hand(tmp_path, *(["--name", n, "--no-nanny"] for n in ("w0", "w1", "w2"))) as file:
        try:
            with Client(scheduler_file=str(file), timeout=START_TIMEOUT_S, set_as_default=False) as client:
                client.wait_for_workers(3, timeout=START_TIMEOUT_S)
                (w2,) = [a for a, w in client.scheduler_info()["workers"].items() if w["name"] == "w2"]
                stopped = client.run(os.getpid, workers=[w2])[w2]
            os.kill(stopped, signal.SIGSTOP)
            env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": "11s"}
            run = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler",
                                    str(file), "--runs-dir", str(runs), "--place", "a=w0", "--place", "b=w1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            out, err = run.communicate(timeout=150)
        finally:
            if run is not None and run.poll() is None:
                run.kill()
                run.wait(30)
            if stopped is not None:
                os.kill(stopped, signal.SIGCONT)
    assert run.returncode == 0, err[-3000:]
    record = json.loads((runs / out.split()[-1] / "record.json").read_text())
    assert record["status"] == "succeeded"
    assert [w["name"] for w in record["scheduler"]["workers"]] == ["w0", "w1"]
    (said,) = record["scheduler"]["not_used"]
    assert said.startswith(f"worker w2 ({w2}) sent the scheduler no heartbeat for ") and "removed from the cluster" in said
