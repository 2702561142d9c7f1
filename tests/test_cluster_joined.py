"""A worker started by hand that joins a cluster while a run goes on, and takes over a lost worker's executor.

The record's ``scheduler.workers`` is written as the run starts; what the
run learns of a worker that joined later is said where that worker takes
executors over, in the recovery's entry.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from test_cluster_client_died import HOLD_OP  # noqa: E402
from test_distributed_cluster import START_TIMEOUT_S, _installation  # noqa: E402


def test_the_libraries_of_a_worker_that_joined_mid_run_are_recorded_where_it_takes_executors_over(tmp_path):
    """A worker whose PyYAML differs joined after placement and took over the lost worker's executor: the run
    finished on it, and nothing in the record said its libraries differ from the record's ``versions``."""
    from hetflow._version import __version__
    from distributed import Client

    file = tmp_path / "scheduler.json"
    go = tmp_path / "go"
    (tmp_path / "hold_ops.py").write_text(HOLD_OP)
    path = tmp_path / "held.yaml"
    path.write_text("version: 1\nname: held\nplugins: [hold_ops.py]\nexecutors: {a: {vendor: cpu}}\nstages:\n"
                    "  x: {op: random.normal, args: {shape: [4, 4], seed: 1}}\n"
                    f"  y: {{op: k.hold, inputs: [x], args: {{path: {json.dumps(str(go))}}}, cache: false}}\n"
                    "outputs: {y: y}\n")
    runs = tmp_path / "runs"
    log = open(tmp_path / "cluster.log", "w")
    dask = [sys.executable, "-m", "dask"]
    procs = {"scheduler": subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                            "--no-dashboard", "--scheduler-file", str(file)],
                                           stdout=log, stderr=subprocess.STDOUT)}

    def worker(name: str, pythonpath: Path | None = None) -> None:
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
        procs[name] = subprocess.Popen(
            [*dask, "worker", "--scheduler-file", str(file), "--name", name, "--nthreads", "1", "--no-nanny",
             "--host", "127.0.0.1", "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)

    run = None
    try:
        worker("first")
        with Client(scheduler_file=str(file), timeout=START_TIMEOUT_S, set_as_default=False) as client:
            client.wait_for_workers(1, timeout=START_TIMEOUT_S)
            run = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler",
                                    str(file), "--runs-dir", str(runs), "--log-format", "json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for line in run.stderr:
                if line.startswith("{") and json.loads(line).get("kind") == "partition":
                    break
            worker("libs", _installation(tmp_path / "libs", __version__, pyyaml="0.0.1"))
            client.wait_for_workers(2, timeout=START_TIMEOUT_S)
            procs["first"].kill()  # no nanny: its executor moves to the worker that joined
            procs["first"].wait(30)
            go.touch()
            out, err = run.communicate(timeout=180)
    finally:
        go.touch()
        if run is not None and run.poll() is None:
            run.kill()
            run.wait(30)
        for p in procs.values():
            p.kill()
            p.wait(30)
        log.close()
    assert run.returncode == 0, err[-3000:]
    record = json.loads((runs / out.split()[-1] / "record.json").read_text())
    assert record["status"] == "succeeded"
    assert [w["name"] for w in record["scheduler"]["workers"]] == ["first"]
    (entry,) = record["recovery"]
    moved = entry["executors"]["a"]
    assert moved["from"]["name"] == "first"
    assert moved["to"]["name"] == "libs" and moved["to"]["versions"] == {"pyyaml": "0.0.1"}, moved
