"""A run on the caller's own long-lived ``distributed.Client`` that is cancelled: a notebook cell's
``KeyboardInterrupt``, or the stop flag a signal sets under ``stopping``.

The client, and the cluster, live on after the run: the run must leave them as it found them.
"""

import _thread
import json
import time

import pytest

pytest.importorskip("distributed")

import hetflow  # noqa: E402
from hetflow.engine.errors import RunCancelled  # noqa: E402
from hetflow.engine.run.cancel import stopping  # noqa: E402

from test_cluster_client_died import write_held  # noqa: E402
from test_distributed_cluster import START_TIMEOUT_S, by_hand  # noqa: E402


@pytest.mark.parametrize("how", ["KeyboardInterrupt", "stop flag"])
def test_a_cancelled_run_on_the_callers_client_leaves_the_cluster_as_it_found_it(tmp_path, how):
    """Cancelled, the run wrote its record and raised, but left its graph to a thread that went on waiting for it:
    the workers computed the rest of the cancelled run, and every worker kept the run's plugin, its executors and
    their activations until the graph ended (for as long as the client lived, where a task never ends)."""
    from distributed import Client

    # defined here, so that they travel to the workers by value: the workers cannot import this test module
    def _held(dask_worker):
        """{plugin name: {executor: live activations}} of every hetflow run this worker hosts."""
        return {name: {e: x.live_activations() for e, x in (p.runtime.executors.items() if p.runtime else ())}
                for name, p in dask_worker.plugins.items() if name.startswith("hetflow-run-")}

    def _registered(dask_scheduler):
        return sorted(n for n in dask_scheduler.worker_plugins if n.startswith("hetflow-run-"))

    path, go = write_held(tmp_path)
    with by_hand(tmp_path, ["--name", "w0", "--no-nanny"], ["--name", "w1", "--no-nanny"]) as file:
        with Client(scheduler_file=str(file), timeout=START_TIMEOUT_S, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=START_TIMEOUT_S)
            try:
                with stopping() as cancel:
                    def on_event(event):
                        # the held partition has started: the run cannot end before the test lets it go
                        if event.get("kind") == "partition" and event.get("event") == "started" \
                                and event.get("executor") == "b":
                            if how == "KeyboardInterrupt":
                                _thread.interrupt_main()
                            else:
                                cancel.request("SIGINT")

                    with pytest.raises(RunCancelled) as raised:
                        hetflow.run(path, runs_dir=tmp_path / "runs", scheduler=client, on_event=on_event)
                record = json.loads(open(raised.value.record_path).read())
                assert record["status"] == "cancelled"
                # the held task still runs on its worker; the run's plugin and handles must go all the same
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    held, registered = client.run(_held), client.run_on_scheduler(_registered)
                    if not registered and not any(held.values()):
                        break
                    time.sleep(0.25)
                assert registered == [] and not any(held.values()), (registered, held)
                assert not go.exists()
                # the cluster takes the next run as it took the first
                go.touch()
                again = hetflow.run(path, runs_dir=tmp_path / "runs", scheduler=client)
                assert again.status == "succeeded"
                assert client.run_on_scheduler(_registered) == []
            finally:
                go.touch()
