"""The cluster runtime on a real LocalCluster of worker processes (loopback), shared by the module.

Killed workers are the subject of test_distributed_recovery.py.
"""

import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine import cli
from hetflow.engine.errors import ManifestError, RunFailed
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.plan.planner import render_text
from hetflow.engine.run import threads
from hetflow.engine.run.execute import execute
from hetflow.executors import probe

distributed = pytest.importorskip("distributed")

from hetflow.engine.run.distributed import PLUGIN_PREFIX, Cluster  # noqa: E402

SPLIT = """
version: 1
name: split
params: {n: 16}
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  x:  {op: random.normal, args: {shape: ["${n}", 32], seed: 3}, executor: host}
  w:  {op: random.uniform, args: {shape: [32, 8], seed: 4, low: -1, high: 1}, executor: accel}
  h:  {op: matmul, inputs: [x, w]}
  g:  {op: gelu, inputs: [h]}
  s:  {op: softmax, inputs: [g], executor: host}
  t:  {op: transpose, inputs: [g], executor: accel}
  b:  {op: cast, inputs: [t], dtype: bf16}
  q:  {op: cast, inputs: [h], dtype: int4, executor: host}
outputs: {s: s, b: b, q: q}
"""


@pytest.fixture(scope="module")
def cluster():
    with Cluster.local(2, 1) as c:
        yield c


def compiled(manifest_file, text, name="m.yaml"):
    return compile_manifest(load(manifest_file(text, name)))


def digests(result):
    return {k: v["digest"] for k, v in result.record["outputs"].items()}


def hetflow_plugins(cluster):
    return cluster.client.run(lambda dask_worker: sorted(n for n in dask_worker.plugins if n.startswith(PLUGIN_PREFIX)))


def test_same_digests_as_threads_and_each_task_ran_on_its_executors_worker(cluster, manifest_file, tmp_path):
    m = compiled(manifest_file, SPLIT)
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path))
    placed = cluster.place(make_plan(m, cluster.probe), m)
    workers = {e.name: e.worker for e in placed.executors.values()}
    assert workers["host"] != workers["accel"]
    assert {e.worker_name for e in placed.executors.values()} == {"0", "1"}
    assert f"on worker {workers['accel']}" in render_text(placed)
    assert placed.to_json()["executors"]["accel"]["worker"] == workers["accel"]

    remote = execute(m, placed, runs_dir=str(tmp_path), cluster=cluster, use_cache=False)
    assert remote.status == "succeeded"
    assert digests(remote) == digests(local) and len(digests(local)) == 3
    record = json.loads(Path(remote.record_path).read_text())
    assert record["scheduler"]["kind"] == "local-cluster"
    assert record["plan"]["executors"]["accel"]["worker"] == workers["accel"]
    tasks = record["tasks"]
    assert len(tasks) == len(placed.partitions) + 2 * len(placed.bridges) + len(placed.outputs)
    for task in tasks:
        assert task["worker"] == workers[task["executor"]], task
    exports = [t for t in tasks if t["kind"] == "export"]
    imports = {t["id"]: t for t in tasks if t["kind"] == "import"}
    assert exports and all(imports[e["id"]]["worker"] != e["worker"] for e in exports)
    assert all(e["bytes"] > 0 for e in exports)
    assert record["live_activations_after"] == {"accel": 0, "host": 0}
    kinds = {(e["event"], e["kind"]) for e in record["events"]}
    assert ("started", "partition") in kinds and ("started", "run") in kinds
    assert hetflow_plugins(cluster) == {w: [] for w in workers.values()}


def test_workers_take_partitions_from_and_store_them_in_the_cache(cluster, manifest_file, tmp_path):
    m = compiled(manifest_file, SPLIT)
    placed = cluster.place(make_plan(m, cluster.probe), m)
    first = execute(m, placed, runs_dir=str(tmp_path), cluster=cluster)
    assert first.record["cache"]["hits"] == [] and len(first.record["cache"]["stored"]) == len(placed.partitions)
    second = execute(m, placed, runs_dir=str(tmp_path), cluster=cluster)
    assert sorted(second.record["cache"]["hits"]) == sorted(p.id for p in placed.partitions)
    assert digests(second) == digests(first)
    # a product's partition, and what reads it, take only an entry made with the run's BLAS threads: a run in
    # this process at the workers' threads takes every entry; at other threads it computes those again
    workers_blas = threads.recorded_blas(second.record)
    with threads.POOLS.pinned(workers_blas):
        local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path))
    assert sorted(local.record["cache"]["hits"]) == sorted(p.id for p in placed.partitions), "one cache for every mode"
    assert local.record["cache"]["other_threads"] == {} and digests(local) == digests(first)
    follow = {pid for pid, k in first.record["cache"]["keys"].items() if k["blas"]}
    with threads.POOLS.pinned(workers_blas + 1):
        other = execute(m, make_plan(m, probe), runs_dir=str(tmp_path))
    recomputed = set(other.record["cache"]["other_threads"])
    assert recomputed and set(other.record["cache"]["hits"]) == {p.id for p in placed.partitions} - recomputed
    assert all(f"computed with {workers_blas} BLAS threads, this run's have {workers_blas + 1}" in why
               for why in other.record["cache"]["other_threads"].values())
    assert recomputed == follow
    assert second.record["live_activations_after"] == {"accel": 0, "host": 0}


def test_unsatisfiable_executor_fails_at_plan_time(cluster, manifest_file):
    m = compiled(manifest_file, SPLIT.replace("accel: {vendor: cpu}", "accel: {vendor: cuda}"))
    with pytest.raises(ManifestError) as info:
        make_plan(m, cluster.probe)
    text = str(info.value)
    assert ":7:19: error: executor 'accel': no vendor of [cuda] is available" in text
    assert "no worker of the cluster offers cuda (the cluster offers: worker 0 (tcp://127.0.0.1:" in text
    assert "; worker 1 (tcp://127.0.0.1:" in text

    m = compiled(manifest_file, SPLIT, "ok.yaml")
    with pytest.raises(ManifestError) as info:
        cluster.place(make_plan(m, cluster.probe), m, {"accel": "gpu-box"})
    (d,) = info.value.diagnostics
    assert str(d.origin).endswith("ok.yaml:7:19")
    assert d.message.startswith(f"executor 'accel' (cpu) cannot be placed on the cluster at {cluster.target}: "
                                "place={'accel': 'gpu-box'} matches no worker; the cluster offers: worker 0 (")


def test_cli_plan_against_the_cluster_shows_placement_and_fails_with_exit_2(cluster, manifest_file):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["plan", manifest_file(SPLIT), "--scheduler", cluster.address, "--place", "accel=0",
                     "--format", "json"], out=out, err=err)
    assert code == 0, err.getvalue()
    executors = json.loads(out.getvalue())["executors"]
    assert executors["accel"]["worker_name"] == "0" and executors["accel"]["worker_reason"].startswith("--place accel=0")
    assert executors["host"]["worker_name"] == "1"

    bad = manifest_file(SPLIT.replace("accel: {vendor: cpu}", "accel: {vendor: cuda}"), "bad.yaml")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["plan", bad, "--scheduler", cluster.address], out=out, err=err) == 2
    assert err.getvalue().startswith(f"{bad}:7:19: error: executor 'accel'") and "Traceback" not in err.getvalue()


FLAKY = """
version: 1
name: limits
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  ok:   {op: ones, args: {shape: [4]}, executor: host}
  bad:  {op: load, args: {path: broken.npy}, executor: accel, retries: 2}
  a:    {op: random.normal, args: {shape: [700, 700], seed: 1}, executor: host}
  slow: {op: matmul, inputs: [a, a], timeout: 0.001, retries: 1}
  z:    {op: add, inputs: [ok, ok]}
outputs: {z: z, bad: bad, slow: slow}
"""


def test_retries_and_timeouts_are_enforced_on_workers_and_release_everything(cluster, manifest_file, tmp_path):
    np.save(tmp_path / "broken.npy", np.ones((4, 4), np.float32))
    m = compiled(manifest_file, FLAKY)
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY garbage")  # validate read it whole; it breaks before the run
    placed = cluster.place(make_plan(m, cluster.probe), m)
    assert {p.nodes: (p.retries, p.timeout) for p in placed.partitions}[("bad",)] == (2, None)
    with pytest.raises(RunFailed) as info:
        # without the cache: an abandoned attempt that finishes late stores its result, and a retry would take it
        execute(m, placed, runs_dir=str(tmp_path / "runs"), cluster=cluster, use_cache=False)
    record = json.loads(Path(info.value.record_path).read_text())
    assert record["status"] == "failed"
    retried = [e for e in record["events"] if e["event"] == "retried"]
    by_id = {}
    for e in retried:
        by_id.setdefault(e["id"], []).append(e)
    bad_pid = record["nodes"]["bad"]["partition"]
    slow_pid = record["nodes"]["slow"]["partition"]
    if bad_pid in by_id:  # the first failure cancels the rest; whichever ran shows its attempts
        assert [e["attempt"] for e in by_id[bad_pid]] == [1, 2]
        assert record["nodes"]["bad"]["attempts"] == 3 and record["nodes"]["bad"]["status"] == "failed"
    if record["nodes"]["slow"].get("attempts"):
        assert record["nodes"]["slow"]["status"] == "timed out"
        assert record["nodes"]["slow"]["error"] == "timed out after 0.001 s"
        assert record["nodes"]["slow"]["attempts"] == 2 and by_id[slow_pid][0]["timed_out"] is True
    assert record["nodes"]["bad"].get("attempts") or record["nodes"]["slow"].get("attempts")
    assert all(e["worker"].startswith("tcp://127.0.0.1:") for e in retried)
    assert record["live_activations_after"] == {"accel": 0, "host": 0}
    assert record["outputs"] == {}
    assert not [f for f in os.listdir(os.path.dirname(info.value.record_path)) if f.endswith(".npy")]
    assert all(names == [] for names in hetflow_plugins(cluster).values())


def test_a_timeout_alone_says_timed_out(cluster, manifest_file, tmp_path):
    m = compiled(manifest_file, FLAKY.replace("  bad:  {op: load, args: {path: broken.npy}, executor: accel, retries: 2}\n", "")
                 .replace("bad: bad, ", ""))
    placed = cluster.place(make_plan(m, cluster.probe), m)
    with pytest.raises(RunFailed) as info:
        execute(m, placed, runs_dir=str(tmp_path), cluster=cluster, use_cache=False)
    assert str(info.value) == f"partition {placed.nodes['slow'].partition} failed: timed out after 0.001 s"
    record = json.loads(Path(info.value.record_path).read_text())
    assert record["nodes"]["slow"]["status"] == "timed out" and record["nodes"]["slow"]["attempts"] == 2
    assert record["live_activations_after"] == {"accel": 0, "host": 0}


def test_emulator_phases_run_on_the_cluster_the_witness_where_it_is_priced_faster(cluster, tmp_path):
    from test_phases import GUESTS, PIPELINE

    path = tmp_path / "zk.yaml"
    path.write_text(PIPELINE.format(backend="fast", program=GUESTS / "fib.elf"))
    m = compile_manifest(load(path))
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "local"))
    placed = cluster.place(make_plan(m, cluster.probe), m)
    remote = execute(m, placed, runs_dir=str(tmp_path / "remote"), cluster=cluster, use_cache=False)
    assert remote.status == "succeeded"
    assert digests(remote) == digests(local) and "trace" in digests(remote)
    chunks = [t for t in remote.record["tasks"] if t["kind"] == "witness"]
    assert len(chunks) == -(-remote.record["outputs"]["steps"]["value"] // 128)
    # a guest this short replays faster in the client than it would start on the workers: the plan and the
    # run say so, with both estimates (a long guest on the workers: tests/test_witness_cluster.py)
    (placed_event,) = [e for e in remote.record["events"] if e.get("event") == "witness-placed"]
    assert placed_event["where"] == "in-process" and placed_event["cluster_s"] > placed_event["in_process_s"]
    # the plan prices the phase at its max_steps, before the guest has run: both estimates and the pick are there
    runs = placed.phases["wit"]["runs"]
    assert runs["where"] in ("cluster", "in-process") and runs["in_process_s"] > 0 and runs["cluster_s"] > 0
    assert chunks and all(t["worker"] is None for t in chunks)
    assert remote.record["phases"]["wit"]["status"] == "succeeded"
    assert remote.record["live_activations_after"] == {"cpu": 0}


ONE = """
version: 1
name: one
params: {seed: 1}
executors:
  host: {vendor: cpu}
stages:
  x: {op: random.normal, args: {shape: [64, 64], seed: "${seed}"}}
  y: {op: matmul, inputs: [x, x]}
outputs: {y: y}
"""


def test_runs_in_flight_place_their_executors_where_the_fewest_are(cluster, manifest_file, tmp_path):
    import gc

    m = compiled(manifest_file, ONE)
    first = cluster.place(make_plan(m, cluster.probe), m)
    second = cluster.place(make_plan(m, cluster.probe), m)
    assert first.executors["host"].worker != second.executors["host"].worker
    freed = first.executors["host"].worker
    del first
    gc.collect()
    assert cluster.place(make_plan(m, cluster.probe), m).executors["host"].worker == freed
    # a run gives its places back when it ends, not only when its plan is dropped
    done = execute(m, second, runs_dir=str(tmp_path), cluster=cluster, use_cache=False)
    assert done.status == "succeeded" and cluster._hosting == {}



def test_a_local_clusters_workers_freeze_their_heap_when_they_close(cluster):
    def frozen_by_teardown(dask_worker):
        import gc

        before = gc.get_freeze_count()
        dask_worker.plugins["hetflow-exit"].teardown(dask_worker)
        after = gc.get_freeze_count()
        gc.unfreeze()  # this worker goes on serving the module's tests
        return before, after

    got = cluster.client.run(frozen_by_teardown)
    assert len(got) == 2 and all(after > before for before, after in got.values())


def test_a_local_cluster_leaves_this_processs_thread_variables_as_they_were(monkeypatch):
    """Dask's nanny writes its workers' OMP_NUM_THREADS=1 and the like into its own process's environment before it
    spawns them; there they stayed, and a BLAS this process loaded afterwards (scipy's) kept one thread."""
    from hetflow.engine.run.threads import USER_THREAD_VARS

    for var in USER_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # a user's own stays theirs
    with Cluster.local(1, 1, dashboard=False) as c:
        here = {var: os.environ.get(var) for var in USER_THREAD_VARS}
        there = c.client.run(lambda: {var: os.environ.get(var) for var in USER_THREAD_VARS})
    assert here == {"OMP_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": None, "MKL_NUM_THREADS": "3"}
    (worker,) = there.values()
    assert worker["OMP_NUM_THREADS"] == "1" and worker["OPENBLAS_NUM_THREADS"] == "1"  # the worker's, as Dask sets them


def test_a_worker_restarted_by_its_nanny_leaves_this_processs_thread_variables_as_they_were(monkeypatch):
    """The nanny of a local cluster, in this process, writes its workers' OMP_NUM_THREADS=1 and the like here again
    each time it restarts a lost worker: a run that lost one left them set for the rest of the process."""
    import signal

    from hetflow.engine.run.threads import USER_THREAD_VARS

    for var in USER_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    with Cluster.local(1, 1, dashboard=False) as c:
        (first,) = c.client.run(os.getpid).values()
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                again = list(c.client.run(os.getpid).values())
            except Exception:  # noqa: BLE001 - the worker is gone until its nanny has started the next
                again = []
            if again and again != [first]:
                break
            time.sleep(0.1)
        assert again and again != [first], "the nanny did not restart the worker"
        here = {var: os.environ.get(var) for var in USER_THREAD_VARS}
        there = c.client.run(lambda: {var: os.environ.get(var) for var in USER_THREAD_VARS})
    assert here == {"OMP_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": None, "MKL_NUM_THREADS": "3"}
    (worker,) = there.values()
    assert worker["OMP_NUM_THREADS"] == "1" and worker["OPENBLAS_NUM_THREADS"] == "1"
