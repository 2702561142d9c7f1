"""Surviving a lost worker: real worker processes killed with SIGKILL mid-run.

A ``LocalCluster`` of three worker processes (their nannies restart a killed
worker under a new address) runs a chain that alternates between the
executors ``host`` and ``accel``; the worker hosting ``accel`` is killed
at a different point of each run. The run re-creates ``accel`` on a live
worker, runs again only what was lost and ends with the outputs of an
undisturbed run. A second cluster of plain ``dask worker`` processes
without nannies, only one of which offers Vulkan, loses that one: the run
fails at once saying why, and the survivor releases everything.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask.config
import pytest

from hetflow.engine.errors import RunFailed
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import execute

pytest.importorskip("distributed")

from hetflow.engine.run.distributed import PLUGIN_PREFIX, Cluster  # noqa: E402

START_TIMEOUT_S = 90
N_WORKERS = 3

CHAIN = """
version: 1
name: relay
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  a0: {op: random.normal, args: {shape: [700, 700], seed: 1}, executor: accel}
  h1: {op: softmax, inputs: [a0], executor: host}
  a1: {op: matmul, inputs: [h1, h1], executor: accel}
  h2: {op: softmax, inputs: [a1], executor: host}
  a2: {op: matmul, inputs: [h2, h1], executor: accel}
  h3: {op: softmax, inputs: [a2], executor: host}
  a3: {op: matmul, inputs: [h3, h2], executor: accel}
  h4: {op: softmax, inputs: [a3], executor: host}
  s:  {op: sum, inputs: [h4], executor: host}
outputs: {y: a3, z: h4, s: s}
"""


@pytest.fixture(scope="module")
def cluster():
    # a third worker, so that a second loss in one run still leaves a worker besides host's. A killed worker's
    # nanny starts a new one, which on a loaded machine can take longer than the 15 s after which a LocalCluster
    # gives that worker up for good (distributed.deploy.lost-worker-timeout) and stays a worker short
    with dask.config.set({"distributed.deploy.lost-worker-timeout": f"{START_TIMEOUT_S}s"}), \
            Cluster.local(N_WORKERS, 1) as c:
        yield c


def digests(record):
    return {k: v["digest"] for k, v in record["outputs"].items()}


def run_killing(cluster, m, runs, victim_executor, trigger, workers=N_WORKERS, **kw):
    """Run ``m`` and SIGKILL the worker of ``victim_executor`` when ``trigger(event)`` first holds."""
    cluster.client.wait_for_workers(workers, timeout=START_TIMEOUT_S)
    cluster.refresh()
    placed = cluster.place(make_plan(m, cluster.probe), m)
    victim = placed.executors[victim_executor].worker
    pid = cluster.client.run(os.getpid, workers=[victim])[victim]
    killed = threading.Event()

    def on_event(event):
        if not killed.is_set() and trigger(event):
            killed.set()
            os.kill(pid, signal.SIGKILL)

    outcome = {}

    def run():
        try:
            outcome["result"] = execute(m, placed, runs_dir=str(runs), cluster=cluster, on_event=on_event, **kw)
        except RunFailed as e:
            outcome["failed"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(180)
    assert not thread.is_alive(), "the run did not end"
    assert killed.is_set(), "the trigger never fired"
    return placed, victim, outcome


def nth(event_name, kind, executor, n):
    seen = []

    def trigger(event):
        if event.get("event") == event_name and event.get("kind") == kind and event.get("executor") == executor:
            seen.append(event)
        return len(seen) >= n

    return trigger


@pytest.fixture(scope="module")
def undisturbed(cluster, tmp_path_factory):
    m = compile_manifest(load(_write(tmp_path_factory.mktemp("m"), CHAIN)))
    placed = cluster.place(make_plan(m, cluster.probe), m)
    result = execute(m, placed, runs_dir=str(tmp_path_factory.mktemp("runs")), cluster=cluster, use_cache=False)
    assert result.status == "succeeded"
    return m, result.record


def _write(folder, text):
    path = folder / "relay.yaml"
    path.write_text(text)
    return path


POINTS = {
    "as accel's first partition starts": nth("started", "partition", "accel", 1),
    "after accel's second partition finished": nth("finished", "partition", "accel", 2),
    "after the third bridge onto host": nth("finished", "import", "host", 3),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_a_killed_worker_is_replaced_and_only_what_it_lost_runs_again(cluster, undisturbed, tmp_path, point):
    m, clean = undisturbed
    placed, victim, outcome = run_killing(cluster, m, tmp_path, "accel", POINTS[point])
    assert "failed" not in outcome, str(outcome.get("failed"))
    record = json.loads(Path(outcome["result"].record_path).read_text())
    assert record["status"] == "succeeded"
    assert digests(record) == digests(clean) and len(digests(clean)) == 3

    (recovery,) = record["recovery"]
    assert recovery["lost_workers"][0]["address"] == victim
    moved = recovery["executors"]
    assert list(moved) == ["accel"] and moved["accel"]["from"]["address"] == victim
    new_home = moved["accel"]["to"]["address"]
    assert new_home != victim
    recomputed = recovery["recomputed"]
    assert recomputed, "nothing was run again"
    for item in recomputed:
        assert item["worker"] == (new_home if item["executor"] == "accel" else placed.executors["host"].worker)
        # what finished on the surviving worker is never run again
        assert item["executor"] == "accel" or not item["had_finished"], item
    finished_before = {f"{t['kind']}:{t['id']}" for t in record["tasks"]
                       if t["executor"] == "accel" and t["worker"] == victim}
    # an entry of a task the recovery submitted again says so; those of the first submission do not
    again = [t for t in record["tasks"] if "generation" in t]
    assert {t["generation"] for t in again} == {1} and not any(t["worker"] == victim for t in again)
    assert {item["task"] for item in recomputed} <= {f"{t['kind']}:{t['id']}" for t in again}
    for item in recomputed:
        if item["task"].startswith("partition:") and item["had_finished"]:
            # a partition that finished on the lost worker runs again only for a consumer that still needs it
            assert item["task"] in finished_before
            assert item.get("cached") is True, "a finished partition is taken from the cache"
    last = {}
    for t in record["tasks"]:
        if t["kind"] == "partition" and t["status"] == "succeeded":
            last[t["id"]] = t
    for node in ("a1", "a2", "a3"):
        assert last[record["nodes"][node]["partition"]]["executor"] == "accel"
    assert record["live_activations_after"] == {"accel": 0, "host": 0}
    workers = cluster.client.run(lambda dask_worker: sorted(n for n in dask_worker.plugins
                                                           if n.startswith(PLUGIN_PREFIX)))
    assert all(names == [] for names in workers.values())


def test_two_losses_in_one_run(cluster, undisturbed, tmp_path):
    m, clean = undisturbed
    cluster.client.wait_for_workers(N_WORKERS, timeout=START_TIMEOUT_S)
    cluster.refresh()
    placed = cluster.place(make_plan(m, cluster.probe), m)
    first = placed.executors["accel"].worker
    homes: list[str] = []
    wanted = threading.Event()

    def on_event(event):
        # kill accel's worker when a partition starts on it; then once more on the worker it was moved to
        if event.get("event") == "started" and event.get("executor") == "accel" and len(homes) < 2:
            if not homes or (event["worker"] != homes[-1] and wanted.is_set() is False):
                homes.append(event["worker"])
                wanted.set()

    def killer():
        # the event handler runs on the client's event loop; asking a worker its pid has to happen elsewhere
        for _ in range(2):
            if not wanted.wait(120):
                return
            address = homes[-1]
            os.kill(cluster.client.run(os.getpid, workers=[address])[address], signal.SIGKILL)
            wanted.clear()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    result = execute(m, placed, runs_dir=str(tmp_path), cluster=cluster, on_event=on_event)
    thread.join(10)
    record = json.loads(Path(result.record_path).read_text())
    assert homes[0] == first and len(homes) == 2 and homes[1] != first
    assert record["status"] == "succeeded" and digests(record) == digests(clean)
    assert [r["lost_workers"][0]["address"] for r in record["recovery"]] == homes
    assert record["recovery"][1]["executors"]["accel"]["from"]["address"] == homes[1]
    assert record["recovery"][1]["generation"] == 2
    assert record["live_activations_after"] == {"accel": 0, "host": 0}


def _stop(procs):
    # killed, not asked to close: a Dask process asked to close may take 10 s, and nothing here needs its close
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(30)


@pytest.fixture(scope="module")
def one_vulkan_worker(tmp_path_factory):
    """A scheduler and two nanny-less workers; only ``vk`` can see the Vulkan driver."""
    from hetflow.executors import probe
    from hetflow.executors.base import Vendor

    if not probe(Vendor.vulkan).available:
        pytest.skip(f"needs a Vulkan device: {probe(Vendor.vulkan).reason}")
    folder = tmp_path_factory.mktemp("vk-cluster")
    file = folder / "scheduler.json"
    log = open(folder / "cluster.log", "w")
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(file)], stdout=log, stderr=subprocess.STDOUT)]
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not file.exists() and time.time() < deadline:
            assert procs[0].poll() is None, (folder / "cluster.log").read_text()
            time.sleep(0.1)
        for name, env in (("cpu-only", {"VK_ICD_FILENAMES": str(folder / "no-driver.json")}), ("vk", {})):
            procs.append(subprocess.Popen(
                [*dask, "worker", "--scheduler-file", str(file), "--name", name, "--nthreads", "1", "--no-nanny",
                 "--host", "127.0.0.1", "--no-dashboard"], env={**os.environ, **env},
                stdout=log, stderr=subprocess.STDOUT))
        cluster = Cluster.connect(str(file), timeout=START_TIMEOUT_S)
        try:
            cluster.client.wait_for_workers(2, timeout=START_TIMEOUT_S)
            yield cluster
        finally:
            cluster.close()
    finally:
        _stop(procs)
        log.close()


ON_VULKAN = """
version: 1
name: only-one
executors:
  host: {vendor: cpu}
  gpu: {vendor: vulkan}
stages:
  x: {op: random.normal, args: {shape: [384, 384], seed: 2}, executor: host}
  m: {op: matmul, inputs: [x, x], executor: gpu}
  n: {op: matmul, inputs: [m, x], executor: gpu}
  s: {op: sum, inputs: [n], executor: host}
  k: {op: relu, inputs: [x], executor: host}
outputs: {s: s, k: k}
"""


def test_losing_the_only_worker_offering_a_vendor_fails_at_once_and_releases_the_survivor(one_vulkan_worker,
                                                                                          tmp_path):
    cluster = one_vulkan_worker
    m = compile_manifest(load(_write(tmp_path, ON_VULKAN)))
    placed, victim, outcome = run_killing(cluster, m, tmp_path / "runs", "gpu",
                                          nth("started", "partition", "gpu", 1), workers=2)
    assert placed.executors["gpu"].worker_name == "vk" and placed.executors["host"].worker_name == "cpu-only"
    failure = outcome["failed"]
    message = str(failure)
    assert message.startswith(f"worker {victim} (name vk) died during the run; it hosted executor(s) gpu; lost: ")
    assert message.endswith("no live worker can host executor 'gpu': none offers vulkan device 0 (the live workers "
                            f"offer: worker cpu-only ({placed.executors['host'].worker}): cpu)")
    record = json.loads(Path(failure.record_path).read_text())
    assert record["status"] == "failed" and record["outputs"] == {}
    lost = record["error"]["lost"]
    assert lost["workers"] == [{"address": victim, "name": "vk"}] and lost["executors"] == ["gpu"]
    assert lost["reason"].startswith("no live worker can host executor 'gpu'")
    assert "partition:" + placed.nodes["s"].partition in lost["tasks"] or record["nodes"]["s"]["status"] == "not run"
    assert record["ended_at"] and record["duration_s"] is not None and record["error"]["traceback_file"]
    assert record["live_activations_after"]["host"] == 0
    survivor = placed.executors["host"].worker
    left = cluster.client.run(lambda dask_worker: sorted(n for n in dask_worker.plugins if n.startswith(PLUGIN_PREFIX)),
                              workers=[survivor])
    assert left == {survivor: []}


WITNESS = """
version: 1
name: witness-relay
emulators:
  emu: {{backend: fast, program: {program}, chunk_steps: 128}}
executors:
  host: {{vendor: cpu}}
  accel: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: emu}}
  wit: {{phase: witness, inputs: [run]}}
  top: {{op: max, inputs: [wit], args: {{axis: 0}}, executor: accel}}
  sq: {{op: relu, inputs: [top], executor: host}}
outputs: {{top: top, sq: sq, trace: wit, steps: run.steps}}
"""


def test_a_witness_array_lost_with_the_only_worker_holding_it_is_scattered_again(cluster, tmp_path):
    from hetflow.executors import probe

    guests = Path(__file__).resolve().parents[1] / "examples" / "guests"
    m = compile_manifest(load(_write(tmp_path, WITNESS.format(program=guests / "fib.elf"))))
    clean = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "local"), use_cache=False)
    cluster.client.wait_for_workers(N_WORKERS, timeout=START_TIMEOUT_S)
    cluster.refresh()
    placed = cluster.place(make_plan(m, cluster.probe), m)
    pids = cluster.client.run(os.getpid)
    killed = []

    def on_event(event):
        # emitted on the client as the array is scattered, before any task that reads it is submitted
        if event.get("event") == "scattered" and not killed:
            killed.extend(event["workers"])
            for address in event["workers"]:
                os.kill(pids[address], signal.SIGKILL)

    result = execute(m, placed, runs_dir=str(tmp_path / "runs"), cluster=cluster, on_event=on_event, use_cache=False)
    record = json.loads(Path(result.record_path).read_text())
    assert killed == [placed.executors["accel"].worker], "the array goes to the worker of the executor importing it"
    assert record["status"] == "succeeded"
    assert digests(record) == digests(clean.record) and {"top", "sq", "trace"} <= set(digests(record))
    recoveries = record["recovery"]
    assert killed[0] in {w["address"] for r in recoveries for w in r["lost_workers"]}
    assert "phase:wit" in {k for r in recoveries for k in r["lost_data"]}
    (again,) = [s for r in recoveries for s in r["rescattered"]]
    assert again["key"] == "phase:wit" and again["bytes"] == record["outputs"]["trace"]["bytes"]
    assert again["workers"] == [recoveries[-1]["executors"].get("accel", {}).get("to", {}).get("address")
                                or placed.executors["accel"].worker]
    recomputed = {item["task"] for r in recoveries for item in r["recomputed"]}
    bridge = next(b.id for b in placed.bridges if b.tensor == "wit")
    assert f"import:{bridge}" in recomputed
    scattered = [e for e in record["events"] if e["event"] == "scattered"]
    assert [e["why"] for e in scattered] == ["phase", "recovery"] and scattered[1]["workers"] == again["workers"]
    assert record["live_activations_after"] == {"accel": 0, "host": 0}
    workers = cluster.client.run(lambda dask_worker: sorted(n for n in dask_worker.plugins
                                                           if n.startswith(PLUGIN_PREFIX)))
    assert all(names == [] for names in workers.values())


def test_two_workers_killed_at_once_are_both_recovered(cluster, undisturbed, tmp_path):
    """Both workers of a run SIGKILLed together, each executor re-created on a worker alive now. (Where the client
    is told of one loss before the other, the recovery that began then met an executor whose worker the scheduler
    no longer listed: a KeyError, one run in 25 by hand; such a worker is now taken as lost too.)"""
    m, clean = undisturbed
    cluster.client.wait_for_workers(N_WORKERS, timeout=START_TIMEOUT_S)
    cluster.refresh()
    placed = cluster.place(make_plan(m, cluster.probe), m)
    victims = sorted({placed.executors[n].worker for n in ("host", "accel")})
    pids = [cluster.client.run(os.getpid, workers=[w])[w] for w in victims]
    killed, trigger = threading.Event(), nth("finished", "partition", "accel", 2)

    def on_event(event):
        if not killed.is_set() and trigger(event):
            killed.set()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

    result = execute(m, placed, runs_dir=str(tmp_path), cluster=cluster, on_event=on_event)
    assert killed.is_set()
    record = json.loads(Path(result.record_path).read_text())
    assert record["status"] == "succeeded" and digests(record) == digests(clean)
    lost = {w["address"] for r in record["recovery"] for w in r["lost_workers"]}
    assert lost >= set(victims) - {None}, (lost, victims)
    assert record["live_activations_after"] == {"accel": 0, "host": 0}
