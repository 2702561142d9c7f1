"""hetflow's per-task overhead against raw Dask on the same 10,000-node graphs.

Two graph shapes of tiny ops (4-element float32 tensors), each built once
as a hetflow manifest and once as a plain Dask graph of numpy calls, both
run on Dask's threaded scheduler in this process:

* ``chain``: ``x0 = ones``, ``x[i] = relu(x[i-1])``;
* ``fan``: one root, 4,999 ``relu`` leaves, an ``add`` tree back to one.

With every stage on one executor, hetflow's planner fuses the graph into
one partition, one Dask task; the ``alternating`` rows pin stage i to
executor ``a`` or ``b`` by parity, so every stage is its own partition
with a bridge (export + import task) to the next: the worst case, where
hetflow pays its per-task cost on every node. The hetflow time is
``execute`` (lowering, Dask, run record); planning is timed separately.
"""

from __future__ import annotations

import os
import tempfile
import time

import dask.threaded
import numpy as np

from hetflow.engine.manifest import compile_manifest, loads
from hetflow.engine.planner import plan
from hetflow.engine.run import execute
from hetflow.executors import probe

HEAD = "version: 1\nname: {name}\nexecutors:\n  a: {{vendor: cpu}}\n  b: {{vendor: cpu}}\nstages:\n"


def chain(n: int, alternate: bool) -> tuple[str, dict, str]:
    pin = (lambda i: f", executor: {'ab'[i % 2]}") if alternate else (lambda i: ", executor: a" if i == 0 else "")
    lines = [f"  x0: {{op: ones, args: {{shape: [4]}}{pin(0)}}}"]
    dsk: dict = {"x0": (np.ones, 4, np.float32)}
    for i in range(1, n):
        lines.append(f"  x{i}: {{op: relu, inputs: [x{i - 1}]{pin(i)}}}")
        dsk[f"x{i}"] = (np.maximum, f"x{i - 1}", np.float32(0))
    last = f"x{n - 1}"
    return HEAD.format(name="chain") + "\n".join(lines) + f"\noutputs: {{y: {last}}}\n", dsk, last


def fan(n: int) -> tuple[str, dict, str]:
    leaves = n // 2
    lines = ["  r: {op: ones, args: {shape: [4]}, executor: a}"]
    dsk: dict = {"r": (np.ones, 4, np.float32)}
    level = []
    for i in range(leaves):
        lines.append(f"  l{i}: {{op: relu, inputs: [r]}}")
        dsk[f"l{i}"] = (np.maximum, "r", np.float32(0))
        level.append(f"l{i}")
    k = 0
    while len(level) > 1:
        nxt = []
        for j in range(0, len(level) - 1, 2):
            name = f"s{k}"
            k += 1
            lines.append(f"  {name}: {{op: add, inputs: [{level[j]}, {level[j + 1]}]}}")
            dsk[name] = (np.add, level[j], level[j + 1])
            nxt.append(name)
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return HEAD.format(name="fan") + "\n".join(lines) + f"\noutputs: {{y: {level[0]}}}\n", dsk, level[0]


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def measure(label: str, text: str, dsk: dict, last: str, repeats: int, runs_dir: str) -> dict:
    t0 = time.perf_counter()
    manifest = compile_manifest(loads(text, f"{label}.yaml"))
    p = plan(manifest, probe)
    plan_s = time.perf_counter() - t0
    expected = dask.threaded.get(dsk, last)
    holder = {}

    def run_hetflow():
        holder["r"] = execute(manifest, p, runs_dir=runs_dir)

    dask_s = best_of(repeats, lambda: dask.threaded.get(dsk, last))
    hetflow_s = best_of(repeats, run_hetflow)
    got = np.load(os.path.join(holder["r"].run_dir, "y.npy"))
    assert np.array_equal(got, expected), f"{label}: hetflow and Dask disagree"
    nodes = len(manifest.stages)
    tasks = len(holder["r"].record["tasks"])
    return {
        "name": label,
        "baseline": f"raw dask ({len(dsk)} tasks)",
        "baseline_s": dask_s,
        "subject": f"hetflow ({tasks} tasks)",
        "subject_s": hetflow_s,
        "ratio": dask_s / hetflow_s,
        "notes": (f"{nodes} nodes, {len(p.partitions)} partitions, {len(p.bridges)} bridges; "
                  f"per node: dask {dask_s / nodes * 1e6:.1f} us, hetflow {hetflow_s / nodes * 1e6:.1f} us; "
                  f"validate+plan {plan_s:.2f} s"),
    }


def run(quick: bool) -> list[dict]:
    n = 1000 if quick else 10_000
    repeats = 1 if quick else 3
    with tempfile.TemporaryDirectory() as runs_dir:
        return [
            measure(f"chain-{n}", *chain(n, alternate=False), repeats, runs_dir),
            measure(f"fan-{n}", *fan(n), repeats, runs_dir),
            measure(f"chain-{n}-alternating", *chain(n, alternate=True), repeats, runs_dir),
        ]
