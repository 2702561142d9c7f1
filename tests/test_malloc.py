"""glibc's malloc thresholds in Dask workers (:mod:`hetflow.engine.run.malloc`), told by page faults.

An array that malloc hands out by ``mmap`` is zeroed page by page on its
first touch, every time; one reused from the heap is not. So the minor
faults of allocating and filling a 1 MiB array over and over tell which
way it went: 256 a round by ``mmap``, next to none from the heap.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from hetflow.engine.run import malloc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc thresholds: Linux only")

PAGES = (1 << 20) // 4096


def faults_per_round(rounds: int = 40) -> float:
    """Minor page faults of allocating and filling a 1 MiB array, a round (run where the thresholds are asked)."""
    import resource

    import numpy as np

    for _ in range(3):
        np.ones(1 << 20, np.uint8)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        np.ones(1 << 20, np.uint8)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / rounds


PROBE = f"""
import json, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_malloc import faults_per_round
from hetflow.engine.run import malloc
before = faults_per_round()
tuned = malloc.tune_this_process()
print(json.dumps({{"before": before, "tuned": tuned, "after": faults_per_round()}}))
"""


def _probe(env: dict) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout)


def test_dasks_trim_threshold_maps_every_array_and_the_tuning_reuses_the_heap():
    got = _probe({"MALLOC_TRIM_THRESHOLD_": "65536"})
    assert got["before"] >= PAGES * 0.9, got  # every round a fresh mapping
    assert got["tuned"] == {"mmap_threshold": 32 << 20, "trim_threshold": 64 << 20}
    assert got["after"] < PAGES * 0.1, got


def test_a_plain_process_and_an_operators_choice_are_left_alone():
    plain = _probe({})
    assert plain["tuned"] is None and plain["before"] < PAGES * 0.1, plain
    chosen = _probe({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert chosen["tuned"] is None and chosen["after"] >= PAGES * 0.9, chosen


def test_a_users_malloc_variables_go_to_a_local_clusters_workers_as_given():
    dask = {"MALLOC_TRIM_THRESHOLD_": 65536, "PYTHONHASHSEED": "1"}
    assert malloc.spawn_environ(dask, user={}) == {"MALLOC_TRIM_THRESHOLD_": str(64 << 20), "PYTHONHASHSEED": "1",
                                                   "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}
    # glibc reads the thresholds together: a user who set one keeps Dask's trim and gets none of hetflow's
    assert malloc.spawn_environ(dask, user={"MALLOC_TOP_PAD_": "0"}) == \
        {"MALLOC_TRIM_THRESHOLD_": "65536", "PYTHONHASHSEED": "1", "MALLOC_TOP_PAD_": "0"}


distributed = pytest.importorskip("distributed")


def _worker_faults(client) -> dict:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        return client.run(faults_per_round)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_what_a_nanny_wrote_into_this_process_is_not_the_users():
    # a nanny writes its pre-spawn environment into its parent's before it spawns a worker
    dask = {"MALLOC_TRIM_THRESHOLD_": 65536}
    assert malloc.users_variables(dask, {"MALLOC_TRIM_THRESHOLD_": "65536"}) == {}
    assert malloc.users_variables(dask, {"MALLOC_TRIM_THRESHOLD_": str(64 << 20),
                                         "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}) == {}
    assert malloc.users_variables(dask, {"MALLOC_TRIM_THRESHOLD_": "0", "PATH": "/bin"}) == \
        {"MALLOC_TRIM_THRESHOLD_": "0"}


@pytest.mark.slow
def test_local_cluster_workers_reuse_the_heap(monkeypatch):
    from hetflow.engine.run.distributed import Cluster

    # as an earlier LocalCluster of Dask's own in this process leaves it
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")

    with Cluster.local(1, 1) as cluster:
        env = cluster.client.run(lambda: {k: v for k, v in __import__("os").environ.items() if k.startswith("MALLOC_")})
        faults = _worker_faults(cluster.client)
    (env,) = env.values()
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20) and env["MALLOC_TRIM_THRESHOLD_"] == str(64 << 20)
    assert all(f < PAGES * 0.1 for f in faults.values()), faults


@pytest.mark.slow
def test_a_nanny_worker_started_by_hand_reuses_the_heap_once_hetflow_ran_there(tmp_path, manifest_file):
    """``dask worker`` with its nanny, as operators start it: Dask's trim threshold in force until a run's plugin."""
    from hetflow.engine.manifest.validate import compile_manifest, load
    from hetflow.engine.plan.planner import plan as make_plan
    from hetflow.engine.run.distributed import Cluster
    from hetflow.engine.run.execute import execute
    from test_distributed_cluster import _stop

    file = tmp_path / "scheduler.json"
    log = open(tmp_path / "cluster.log", "w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(file)], stdout=log, stderr=subprocess.STDOUT, env=env)]
    try:
        deadline = time.time() + 90
        while not file.exists() and time.time() < deadline:
            time.sleep(0.1)
        procs.append(subprocess.Popen([*dask, "worker", "--scheduler-file", str(file), "--nthreads", "1",
                                       "--host", "127.0.0.1", "--no-dashboard"], stdout=log,
                                      stderr=subprocess.STDOUT, env=env))
        with Cluster.connect(str(file), timeout=90) as cluster:
            cluster.client.wait_for_workers(1, timeout=90)
            before = _worker_faults(cluster.client)
            m = compile_manifest(load(manifest_file(
                "version: 1\nname: m\nexecutors: {host: {vendor: cpu}}\n"
                "stages:\n  x: {op: random.normal, args: {shape: [64, 64], seed: 1}}\n  y: {op: relu, inputs: [x]}\n"
                "outputs: {y: y}\n")))
            done = execute(m, cluster.place(make_plan(m, cluster.probe), m), runs_dir=str(tmp_path / "runs"),
                           cluster=cluster, use_cache=False)
            assert done.status == "succeeded"
            after = _worker_faults(cluster.client)
    finally:
        _stop(procs)
        log.close()
    assert all(f >= PAGES * 0.9 for f in before.values()), before
    assert all(f < PAGES * 0.1 for f in after.values()), after
