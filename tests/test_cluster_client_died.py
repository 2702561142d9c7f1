"""A ``hetflow run`` on a cluster started by hand whose own process dies mid-run (SIGKILL, the OOM killer, or a
SIGTERM that cancels it).

The cluster outlives it: what the run held in the workers must not.
"""

import json
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("distributed")

from test_distributed_cluster import START_TIMEOUT_S, by_hand  # noqa: E402

# holds its partition until the test lets it go, so that the kill lands while the run goes on however loaded the
# machine; what its first partition made is held on the worker meanwhile
HOLD_OP = """\
import os
import time

from hetflow import op


@op("k.hold")
def hold(xp, x, *, path: str):
    deadline = time.monotonic() + 300
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return x
"""

def write_held(folder):
    """A manifest whose partition on executor b holds until the file ``go`` exists: (its path, go's path)."""
    go = folder / "go"
    (folder / "hold_ops.py").write_text(HOLD_OP)
    path = folder / "held.yaml"
    path.write_text("version: 1\nname: held\nplugins: [hold_ops.py]\n"
                    "executors: {a: {vendor: cpu}, b: {vendor: cpu}}\nstages:\n"
                    "  x: {op: random.normal, args: {shape: [64, 64], seed: 1}, executor: a}\n"
                    "  s: {op: softmax, inputs: [x], executor: a}\n"
                    f"  y: {{op: k.hold, inputs: [s], args: {{path: {json.dumps(str(go))}}}, executor: b, "
                    "cache: false}\n"
                    "  z: {op: relu, inputs: [s], executor: a}\n"
                    "  w: {op: add, inputs: [y, z], executor: a}\n"
                    "outputs: {w: w}\n")
    return path, go



@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_run_whose_process_died_gives_its_handles_back_on_the_workers(tmp_path, sig):
    """The run's worker plugin stayed registered when its process was killed, or cancelled by SIGTERM (which
    leaves the run's cluster work behind as it writes the record): every worker kept the run's executors and the
    activations they held until the worker itself ended, and every worker that joined later was handed the dead
    run's plugin."""
    from distributed import Client

    # defined here, so that they travel to the workers by value: the workers cannot import this test module
    def _held(dask_worker):
        """{plugin name: {executor: live activations}} of every hetflow run this worker hosts."""
        return {name: {e: x.live_activations() for e, x in (p.runtime.executors.items() if p.runtime else ())}
                for name, p in dask_worker.plugins.items() if name.startswith("hetflow-run-")}

    def _registered(dask_scheduler):
        return sorted(n for n in dask_scheduler.worker_plugins if n.startswith("hetflow-run-"))

    path, go = write_held(tmp_path)
    run = None
    with by_hand(tmp_path, ["--name", "w0", "--no-nanny"], ["--name", "w1", "--no-nanny"]) as file:
        with Client(scheduler_file=str(file), timeout=START_TIMEOUT_S, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=START_TIMEOUT_S)
            try:
                run = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler",
                                        str(file), "--runs-dir", str(tmp_path / "runs"), "--log-format", "json"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                for line in run.stderr:
                    event = json.loads(line) if line.startswith("{") else {}
                    if event.get("kind") == "partition" and event.get("event") == "started" \
                            and event.get("executor") == "b":
                        break
                held = client.run(_held)
                assert sum(n for h in held.values() for r in h.values() for n in r.values()) > 0, held
                run.send_signal(sig)
                assert run.wait(60) == (-sig if sig == signal.SIGKILL else 128 + sig)
            finally:
                go.touch()
                if run is not None and run.poll() is None:
                    run.kill()
                    run.wait(30)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                held, registered = client.run(_held), client.run_on_scheduler(_registered)
                if not registered and not any(held.values()):
                    break
                time.sleep(0.5)
            assert registered == [] and not any(held.values()), (registered, held)
