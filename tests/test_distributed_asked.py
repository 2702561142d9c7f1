"""A cluster started by hand whose workers die or cannot be reached while hetflow asks them what they run.

Before a run or a plan on a cluster it did not start, hetflow asks every
worker for its hetflow version and its offers. A worker killed at that
moment, or one the scheduler lists at an address it cannot connect to, is
not a worker without hetflow: the first is left out (it left), the second
is not used and said so, and a cluster where no worker answers is an
environment that is not there (exit 5), not bad input (exit 2).

The worker that dies is a real ``dask worker`` process whose preload
makes it exit as it is asked (``os._exit`` inside the question's own
function), so the moment is the question's, not a clock's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import killworker as kw

pytestmark = pytest.mark.slow

DIES_WHEN_ASKED = """\
import os

import hetflow.engine.run.workerside as workerside


def _dies(*args, **kwargs):
    os._exit(9)


workerside.worker_versions = _dies
"""

MANIFEST = """\
version: 1
name: asked
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [8, 8], seed: 1}, executor: a}
  y: {op: softmax, inputs: [x], executor: b}
outputs: {y: y}
"""


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hetflow(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", *argv], capture_output=True, text=True,
                          timeout=180)


def test_workers_that_die_or_cannot_be_reached_while_asked_are_left_out_not_taken_for_foreign(tmp_path):
    folder = tmp_path / "cluster"
    folder.mkdir()
    (folder / "dies_when_asked.py").write_text(DIES_WHEN_ASKED)
    file = folder / "scheduler.json"
    # the scheduler gives up connecting to a worker after 1 s, not Dask's 30
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"}
    log = open(folder / "cluster.log", "w")
    procs = [subprocess.Popen(kw._dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                       "--scheduler-file", str(file)), env=env, stdout=log, stderr=subprocess.STDOUT)]
    cluster = kw.RealCluster(folder, file, procs, log)
    try:
        deadline = time.time() + kw.START_TIMEOUT_S
        while not file.exists() and time.time() < deadline:
            assert procs[0].poll() is None, (folder / "cluster.log").read_text()
            time.sleep(0.1)
        worker = ("worker", "--scheduler-file", str(file), "--nthreads", "1", "--no-dashboard", "--no-nanny")
        steady = subprocess.Popen(kw._dask(*worker, "--name", "steady", "--host", "127.0.0.1"), env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
        procs.append(steady)
        procs.append(subprocess.Popen(kw._dask(*worker, "--name", "dying", "--host", "127.0.0.1", "--preload",
                                               "dies_when_asked"),
                                      env={**env, "PYTHONPATH": f"{folder}{os.pathsep}{env.get('PYTHONPATH', '')}"},
                                      stdout=log, stderr=subprocess.STDOUT))
        astray = f"tcp://127.0.0.1:{_refused_port()}"
        procs.append(subprocess.Popen(kw._dask(*worker, "--name", "astray", "--listen-address", "tcp://127.0.0.1:0",
                                               "--contact-address", astray), env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
        cluster.wait_for(("astray", "dying", "steady"))
        manifest = tmp_path / "asked.yaml"
        manifest.write_text(MANIFEST)

        planned = _hetflow("plan", str(manifest), "--scheduler", str(file), "--format", "json")
        assert planned.returncode == 0, planned.stderr
        assert "Traceback" not in planned.stderr and "cannot run hetflow" not in planned.stderr
        placed = {name: e.get("worker_name") for name, e in json.loads(planned.stdout)["executors"].items()}
        assert placed == {"a": "steady", "b": "steady"}, planned.stdout
        assert procs[2].wait(30) == 9  # the dying worker did die as it was asked, not before

        runs = tmp_path / "runs"
        ran = _hetflow("run", str(manifest), "--scheduler", str(file), "--runs-dir", str(runs), "--quiet")
        # Dask hands the run's plugin to every worker, and cannot reach the astray one: the run fails, and says why
        assert ran.returncode == 1, ran.stderr
        assert "internal error" not in ran.stderr and "Traceback" not in ran.stderr
        assert f"the scheduler could not reach worker astray ({astray})" in ran.stderr
        (record_path,) = runs.glob("*/record.json")
        record = json.loads(record_path.read_text())
        assert record["status"] == "failed"
        assert f"worker astray ({astray}) could not be reached" in record["scheduler"]["not_used"][0]
        assert [w["name"] for w in record["scheduler"]["workers"]] == ["steady"]

        steady.kill()
        steady.wait(30)
        left = _hetflow("plan", str(manifest), "--scheduler", str(file))
        assert left.returncode == 5, left.stderr
        assert "no worker of the Dask cluster" in left.stderr and f"astray ({astray}) could not be reached" in left.stderr
        assert "Traceback" not in left.stderr and "cannot run hetflow" not in left.stderr
    finally:
        cluster.stop()

