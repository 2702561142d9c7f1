"""One machine's cluster started by hand: ``dask scheduler`` and a single ``dask worker`` under its nanny.

With one worker, a lost worker leaves no other to take its executors: the
run waits for the worker its nanny starts again, instead of failing while
the replacement is a second away. A worker the nanny restarts for its
memory limit is said to be so, and a run that keeps outgrowing it gives up
after a few tries, as Dask gives up on a task that kills its workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

import killworker as kw

pytestmark = pytest.mark.slow

MEMORY_LIMIT = "600MB"

# 384 MiB an array, the first made over most of a second: more than a 600 MB worker holds, for long enough that its
# nanny's memory monitor (every 100 ms) sees it every time
OUTGROWS = """\
version: 1
name: outgrows
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [12288, 8192], seed: 1}, executor: a}
  y: {op: mul, inputs: [x, x], executor: b}
  z: {op: sum, inputs: [y], executor: b}
outputs: {z: z}
"""


@pytest.fixture(scope="module")
def solo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("solo")
    file = folder / "scheduler.json"
    log = open(folder / "cluster.log", "w")
    procs = [subprocess.Popen(kw._dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                       "--scheduler-file", str(file)), stdout=log, stderr=subprocess.STDOUT)]
    cluster = kw.RealCluster(folder, file, procs, log)
    try:
        deadline = time.time() + kw.START_TIMEOUT_S
        while not file.exists() and time.time() < deadline:
            assert procs[0].poll() is None, (folder / "cluster.log").read_text()
            time.sleep(0.1)
        procs.append(subprocess.Popen(
            kw._dask("worker", "--scheduler-file", str(file), "--name", "solo", "--nthreads", "1", "--host",
                     "127.0.0.1", "--no-dashboard", "--memory-limit", MEMORY_LIMIT),
            stdout=log, stderr=subprocess.STDOUT))
        cluster.wait_for(("solo",))
        yield cluster
    finally:
        cluster.stop()


def _run(cluster: kw.RealCluster, path: Path, runs: Path, kill_at: tuple[str, str] | None = None,
         then: Callable[[], None] | None = None, each: Callable[[dict], None] | None = None) -> tuple:
    """``hetflow run --scheduler``; when the first event ``kill_at`` (event, kind) comes, ``then()``, by default a
    SIGKILL to the worker; ``each(event)`` for every event: (exit code, record, the JSON events)."""
    victim = cluster.wait_for(("solo",))["solo"]
    pid = cluster.pid(victim)
    then = then or (lambda: os.kill(pid, signal.SIGKILL))
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler",
                             str(cluster.file), "--runs-dir", str(runs), "--log-format", "json", "--no-cache"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    events, killed = [], False
    try:
        for line in proc.stderr:
            if not line.startswith("{"):
                continue
            events.append(json.loads(line))
            if each is not None:
                each(events[-1])
            if kill_at and not killed and (events[-1].get("event"), events[-1].get("kind")) == kill_at:
                then()
                killed = True
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (record_file,) = runs.glob("*/record.json")
    return code, json.loads(record_file.read_text()), events


def test_the_only_worker_killed_is_waited_for_while_its_nanny_starts_it_again(solo, tmp_path):
    path = kw.manifest(tmp_path / "m")
    code, record, events = _run(solo, path, tmp_path / "runs", kill_at=("started", "partition"))
    assert code == 0, record.get("error")
    assert record["status"] == "succeeded"
    (lost,) = [e for e in events if e.get("event") == "worker-lost"]
    assert lost["name"] == "solo" and lost["rerun"] and "memory" not in lost
    (recovery,) = record["recovery"]
    assert {v["to"]["name"] for v in recovery["executors"].values()} == {"solo"}
    assert recovery["memory"] is None
    # the same bytes as an undisturbed run
    clean_code, clean, _ = _run(solo, path, tmp_path / "clean")
    assert clean_code == 0
    assert {k: v["digest"] for k, v in record["outputs"].items()} == {k: v["digest"] for k, v in clean["outputs"].items()}


def _pause_at(cluster: kw.RealCluster, fraction: float) -> None:
    """The worker's pause threshold (``distributed.worker.memory.pause``), set on the live worker: its memory
    monitor pauses it once its process holds more than ``fraction`` of its limit, and resumes it below."""

    def set_it(dask_worker, fraction=fraction):
        dask_worker.memory_manager.memory_pause_fraction = fraction

    with cluster.client() as client:
        client.run(set_it)


def test_a_paused_worker_is_said_to_be_while_the_run_waits_on_it(solo, tmp_path):
    """Dask starts no task on a paused worker: a run waiting on one says so, with the worker's memory; a cluster
    whose workers are all paused is not called one without workers."""
    import threading

    from hetflow.engine.errors import EnvironmentUnavailable
    from hetflow.engine.run.distributed import Cluster

    path = kw.manifest(tmp_path / "m")
    # resumed once the run has said so, or after a minute if it never does (the assertions below then fail)
    resumed = threading.Timer(60.0, _pause_at, (solo, 0.8))

    def pause() -> None:
        _pause_at(solo, 0.01)  # any process holds more than 6 MB: paused within the monitor's 100 ms
        resumed.start()

    def resume_once_said(event: dict) -> None:
        if event.get("event") == "worker-paused":
            _pause_at(solo, 0.8)

    try:
        code, record, events = _run(solo, path, tmp_path / "runs", ("finished", "partition"), pause,
                                    resume_once_said)
    finally:
        resumed.cancel()
        _pause_at(solo, 0.8)
    assert code == 0 and record["status"] == "succeeded"
    (paused,) = [e for e in events if e.get("event") == "worker-paused"]
    assert paused["name"] == "solo" and paused["seconds"] >= 5 and paused["memory_limit"] == 600 * 10**6
    assert isinstance(paused["memory"], int) and paused["memory"] > 0

    _pause_at(solo, 0.01)
    try:
        time.sleep(0.5)
        with pytest.raises(EnvironmentUnavailable, match=r"has no running worker \(waited 1 s\): worker solo "
                                                         r"\(tcp://127.0.0.1:\d+\) is paused: its process holds [\d.]+ MiB "
                                                         r"of its 572.2 MiB memory limit"):
            Cluster.connect(str(solo.file), timeout=1.0)
    finally:
        _pause_at(solo, 0.8)


def test_a_run_that_outgrows_its_workers_memory_limit_says_so_and_gives_up(solo, tmp_path):
    path = tmp_path / "outgrows.yaml"
    path.write_text(OUTGROWS)
    started = time.monotonic()
    code, record, events = _run(solo, path, tmp_path / "runs")
    assert code == 1 and record["status"] == "failed"
    assert time.monotonic() - started < 90, "three tries, not twenty"
    message = record["error"]["message"]
    assert "gave up: its workers were restarted for exceeding their memory limit 3 times in a row" in message
    assert "give the workers more memory (dask worker --memory-limit)" in message
    lost = [e for e in events if e.get("event") == "worker-lost"]
    assert len(lost) == 3
    assert all(e["memory"].startswith("restarted by its nanny for exceeding its memory limit: its process held ")
               for e in lost)
    assert all(r["memory"] for r in record["error"]["lost"]["recoveries"])
    solo.wait_for(("solo",))  # and the worker is back for whoever comes next
