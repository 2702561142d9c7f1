"""hetflow on a Dask cluster against raw Dask on the same cluster.

**Per-task overhead, each mode.** One ``alternating`` chain manifest: stage
i is pinned to executor ``a`` or ``b`` by parity, so every stage is its
own partition with a bridge to the next (an export and an import task):
``3 n - 1`` tasks for ``n`` stages, plus one output task. The baseline is
raw Dask running a chain of the same number of tiny numpy tasks:

* ``threads``: hetflow's default, ``dask.threaded.get`` in-process,
  against ``dask.threaded.get`` on the raw chain;
* ``local-cluster``: a ``LocalCluster`` of 2 worker processes
  (``--workers 2``), against ``Client.submit`` of the raw chain, each task
  pinned alternately to the two workers as hetflow pins its executors;
* ``cluster``: a second client that joins the same scheduler by address,
  which is what ``--scheduler`` does, against the same raw chain.

Subject and baseline are seconds per task (wall time of the whole run
divided by its task count), so the ratio is raw Dask's cost per task over
hetflow's: below 1, hetflow's wrappers, events, pinning and run record
cost that much more per task.

**A bridge between two worker processes**, 64 MiB and 1 GiB. One fp32
tensor produced on worker 1 and consumed on worker 0: hetflow's bridge
time is from the export's start to the import's end (worker clocks, one
machine), the export, Dask moving the portable bytes, and the import.
The baseline is the same number of bytes placed on worker 1 with plain
``client.scatter`` and then moved to worker 0 by a task there that takes
them. The portable bytes travel out of band (pickle protocol 5), as
Dask moves a numpy array.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time

import dask.threaded
import numpy as np

from hetflow.engine.manifest.validate import compile_manifest, loads
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import execute
from hetflow.executors import probe

HEAD = "version: 1\nname: {name}\nexecutors:\n  a: {{vendor: cpu}}\n  b: {{vendor: cpu}}\nstages:\n"


def alternating(n: int) -> str:
    lines = ["  x0: {op: ones, args: {shape: [4]}, executor: a}"]
    lines += [f"  x{i}: {{op: relu, inputs: [x{i - 1}], executor: {'ab'[i % 2]}}}" for i in range(1, n)]
    return HEAD.format(name="alt") + "\n".join(lines) + f"\noutputs: {{y: x{n - 1}}}\n"


def _step(x):
    return np.maximum(x, np.float32(0))


def _raw_chain(tasks: int) -> dict:
    dsk: dict = {"t0": (np.ones, 4, np.float32)}
    for i in range(1, tasks):
        dsk[f"t{i}"] = (_step, f"t{i - 1}")
    return dsk


def _raw_on_cluster(client, tasks: int, workers: list[str]) -> float:
    t0 = time.perf_counter()
    fut = client.submit(np.ones, 4, np.float32, workers=[workers[0]], allow_other_workers=False, pure=False)
    for i in range(1, tasks):
        fut = client.submit(_step, fut, workers=[workers[i % 2]], allow_other_workers=False, pure=False)
    fut.result()
    return time.perf_counter() - t0


def _timed_run(m, p, runs: str, **kw) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = execute(m, p, runs_dir=runs, **kw)
    return time.perf_counter() - t0, len(r.record["tasks"])


def _row(name, baseline, b_s, subject, s_s, notes):
    return {"name": name, "baseline": baseline, "baseline_s": b_s, "subject": subject, "subject_s": s_s,
            "ratio": b_s / s_s if s_s else None, "notes": notes}


def bridge_row(cluster, runs: str, mib: int, repeats: int = 5) -> dict:
    """A ``mib`` MiB fp32 bridge from worker 1 to worker 0 against ``client.scatter`` + a task moving the array.

    Both sides are timed turn about, best of ``repeats``: hetflow from the
    export's start to the import's end (worker clocks, one machine);
    the baseline from submitting the consuming task to its result, the
    array already scattered to worker 1.
    """
    side = int((mib * 2**20 // 4) ** 0.5)
    bm = compile_manifest(loads(
        HEAD.format(name=f"bridge{mib}")
        + f"  w: {{op: random.normal, args: {{shape: [{side}, {side}], seed: 1}}, executor: b}}\n"
        + "  s: {op: sum, inputs: [w], executor: a}\noutputs: {s: s}\n", os.path.join(runs, f"bridge{mib}.yaml")))
    bplaced = cluster.place(make_plan(bm, cluster.probe), bm)
    src, dst = bplaced.executors["b"].worker, bplaced.executors["a"].worker
    payload = np.random.default_rng(1).standard_normal((side, side), dtype=np.float32)
    best_h = best_b = float("inf")
    nbytes = 0
    for _ in range(repeats):
        r = execute(bm, bplaced, runs_dir=runs, cluster=cluster, use_cache=False)
        ev = {e["kind"]: e for e in r.record["events"] if e["event"] == "finished" and e["kind"] in ("export", "import")}
        best_h = min(best_h, ev["import"]["end"] - ev["export"]["start"])
        nbytes = ev["export"]["bytes"]
        fut = cluster.client.scatter(payload, workers=[src], direct=True, hash=False)
        t0 = time.perf_counter()
        cluster.client.submit(lambda a: a.nbytes, fut, workers=[dst], allow_other_workers=False, pure=False).result()
        best_b = min(best_b, time.perf_counter() - t0)
        cluster.client.cancel(fut)
        del fut
    return _row(f"bridge between worker processes ({nbytes / 2**20:.0f} MiB fp32)",
                "client.scatter to worker 1, moved to worker 0 by a task", best_b,
                "hetflow export on worker 1 + Dask transfer + import on worker 0", best_h,
                f"best of {repeats}, turn about; hetflow from export start to import end. Bytes copied in user space "
                f"per bridge of {nbytes}: none on export (the portable bytes are the activation's own read-only "
                "memory), none into or out of the pickle stream (a protocol-5 out-of-band frame, sent from that "
                "memory, received into one buffer), none on import (the CPU executor adopts the received frame); "
                "the kernel's socket copies are the same for both sides")


def run(quick: bool) -> list[dict]:
    from hetflow.engine.run.distributed import Cluster

    n = 20 if quick else 100
    rows = []
    runs = tempfile.mkdtemp(prefix="hetflow-bench-dist-")
    m = compile_manifest(loads(alternating(n), os.path.join(runs, "alt.yaml")))
    local_plan = make_plan(m, probe)
    execute(m, local_plan, runs_dir=runs)  # warm: inventory, imports
    # without the cache, as bench_overhead: its hits read files instead of running the tasks; a run this short
    # moves with every other process's minute, so best of 5 turn about
    h_s = raw_s = float("inf")
    for _ in range(5):
        took, tasks = _timed_run(m, local_plan, runs, use_cache=False)
        h_s = min(h_s, took)
        dsk = _raw_chain(tasks)
        t0 = time.perf_counter()
        dask.threaded.get(dsk, f"t{tasks - 1}")
        raw_s = min(raw_s, time.perf_counter() - t0)
    rows.append(_row(f"per-task overhead, threads ({tasks} tasks)", "dask.threaded.get raw chain", raw_s / tasks,
                     "hetflow run, threaded", h_s / tasks,
                     "seconds per task; whole run incl. record; hetflow without the cache; best of 5 turn about"))

    logging.getLogger("distributed").setLevel(logging.ERROR)
    with Cluster.local(2, 1) as cluster:
        placed = cluster.place(make_plan(m, cluster.probe), m)
        workers = [placed.executors["a"].worker, placed.executors["b"].worker]
        execute(m, placed, runs_dir=runs, cluster=cluster)  # warm the workers
        _raw_on_cluster(cluster.client, 4, workers)
        h_s, tasks = _timed_run(m, placed, runs, cluster=cluster)
        raw_s = _raw_on_cluster(cluster.client, tasks, workers)
        rows.append(_row(f"per-task overhead, local-cluster ({tasks} tasks)", "Client.submit raw chain, pinned",
                         raw_s / tasks, "hetflow run --workers 2", h_s / tasks,
                         "seconds per task; 2 worker processes, 1 thread each; the raw chain moves its value between workers at every task, hetflow's at every third (the import)"))

        with Cluster.connect(cluster.address) as joined:
            placed2 = joined.place(make_plan(m, joined.probe), m)
            h_s, tasks = _timed_run(m, placed2, runs, cluster=joined)
            raw_s = _raw_on_cluster(joined.client, tasks, workers)
            rows.append(_row(f"per-task overhead, existing cluster ({tasks} tasks)", "Client.submit raw chain, pinned",
                             raw_s / tasks, "hetflow run --scheduler ADDRESS", h_s / tasks,
                             "seconds per task; a second client joins the same scheduler"))

        for mib in ((64,) if quick else (64, 1024)):
            rows.append(bridge_row(cluster, runs, mib))
    return rows
