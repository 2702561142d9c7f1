"""The planner's two speed goals, each side by side in one run.

``fused chain``: 1,000 small same-executor ops (``relu`` on 16 float32
values). hetflow fuses them into one partition, one Dask task. The
baseline is the same 1,000 ops through the same op library
(``ops.run``), submitted to Dask's threaded scheduler as 1,000 tasks.
Two rows: *tasks only* runs hetflow's lowered task graph on the same
scheduler (the goal, ratio >= 5); the other times the whole
``execute`` (lowering, Dask, run record), whose fixed per-run cost
(package versions, git provenance, writing record JSON) shows there.

``load+validate+plan N``: a generated manifest of N stages (chains of
``relu``/``add`` under a pinned ``ones`` every 50 stages, the heads
alternating between two CPU executors, every other stage free) is
parsed, validated and planned. The baseline column is the goal's linear
budget, 0.1 ms per stage (10 s at 100,000); the ratio is budget / time,
so >= 1 meets it. The notes give the split and, over the sizes run, the
slope (time per stage) and the exponent of a power-law fit (1.0 is
linear). Quick mode runs 1k and 10k; the full run adds 100k.
"""

from __future__ import annotations

import math
import os
import tempfile
import time

import dask.threaded
import numpy as np

from hetflow.engine.manifest.validate import compile_manifest, loads
from hetflow.engine.plan.planner import plan
from hetflow.engine.run.execute import LocalRuntime, create_executors, execute
from hetflow.executors import ops, probe
from hetflow.executors.base import Dtype


def generate(n: int) -> str:
    """A manifest of ``n`` stages on two CPU executors."""
    lines = ["version: 1", f"name: scale-{n}", "executors:", "  e0: {vendor: cpu}", "  e1: {vendor: cpu}", "stages:"]
    for i in range(n):
        if i % 50 == 0:
            lines.append(f"  s{i}: {{op: ones, args: {{shape: [8, 8]}}, executor: e{(i // 50) % 2}}}")
        elif i % 7 == 3 and i % 50 >= 2:
            lines.append(f"  s{i}: {{op: add, inputs: [s{i - 1}, s{i - 2}]}}")
        else:
            lines.append(f"  s{i}: {{op: relu, inputs: [s{i - 1}]}}")
    lines.append(f"outputs: {{y: s{n - 1}}}")
    return "\n".join(lines) + "\n"


def _chain_manifest(n: int) -> str:
    lines = ["version: 1", "name: fused", "executors:", "  a: {vendor: cpu}", "stages:",
             "  x0: {op: ones, args: {shape: [16]}}"]
    lines += [f"  x{i}: {{op: relu, inputs: [x{i - 1}]}}" for i in range(1, n)]
    lines.append(f"outputs: {{y: x{n - 1}}}")
    return "\n".join(lines) + "\n"


def _relu(x):
    return ops.run(np, "relu", [x], {}, Dtype.fp32)


def fused(n: int = 1000, repeat: int = 3) -> list[dict]:
    manifest = compile_manifest(loads(_chain_manifest(n), "fused.yaml"))
    p = plan(manifest, probe)
    assert len(p.partitions) == 1
    dsk: dict = {"x0": (ops.run, np, "ones", [], {"shape": [16]}, Dtype.fp32)}
    for i in range(1, n):
        dsk[f"x{i}"] = (_relu, f"x{i - 1}")
    best_h = best_d = math.inf
    with tempfile.TemporaryDirectory() as runs:
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = execute(manifest, p, runs_dir=runs)
            best_h = min(best_h, time.perf_counter() - t0)
            t0 = time.perf_counter()
            dask_out = dask.threaded.get(dsk, f"x{n - 1}", num_workers=os.cpu_count())
            best_d = min(best_d, time.perf_counter() - t0)
    assert result.status == "succeeded" and dask_out.shape == (16,)
    best_t = math.inf
    for _ in range(repeat):
        executors = create_executors(p)
        runtime = LocalRuntime(p, executors)
        t0 = time.perf_counter()
        dask.threaded.get(runtime.graph.dsk, runtime.graph.keys, num_workers=os.cpu_count())
        best_t = min(best_t, time.perf_counter() - t0)
        runtime.handles.release_all()
    task_row = {
        "name": f"fused chain of {n} ops, tasks only", "baseline": f"{n} Dask tasks (ops.run each)", "baseline_s": best_d,
        "subject": "hetflow's lowered graph: 1 partition task + output", "subject_s": best_t, "ratio": best_d / best_t,
        "notes": f"best of {repeat}; the same Dask scheduler runs both graphs; no run record; goal >= 5x",
    }
    return [task_row, {
        "name": f"fused chain of {n} ops", "baseline": f"{n} Dask tasks (ops.run each)", "baseline_s": best_d,
        "subject": "hetflow: 1 partition, 1 task", "subject_s": best_h, "ratio": best_d / best_h,
        "notes": f"best of {repeat}; execute() incl. lowering and the run record (its fixed cost: versions, git, JSON)",
    }]


def scale(sizes: list[int]) -> list[dict]:
    rows, points = [], []
    for n in sizes:
        text = generate(n)
        t0 = time.perf_counter()
        doc = loads(text, f"scale-{n}.yaml")
        t1 = time.perf_counter()
        manifest = compile_manifest(doc)
        t2 = time.perf_counter()
        p = plan(manifest, probe)
        t3 = time.perf_counter()
        total = t3 - t0
        points.append((n, total))
        budget = n * 1e-4
        rows.append({
            "name": f"load+validate+plan {n} nodes", "baseline": "goal: 0.1 ms per node", "baseline_s": budget,
            "subject": "hetflow", "subject_s": total, "ratio": budget / total,
            "notes": (f"{len(text) / 1e6:.1f} MB; load {t1 - t0:.2f} s, validate {t2 - t1:.2f} s, plan {t3 - t2:.2f} s; "
                      f"{len(p.partitions)} partitions, {len(p.bridges)} bridges, placement {p.estimate['placement']}"),
        })
    if len(points) >= 2:
        (n0, s0), (n1, s1) = points[0], points[-1]
        slope = (s1 - s0) / (n1 - n0)
        exponent = math.log(s1 / s0) / math.log(n1 / n0)
        rows[-1]["notes"] += f"; slope {slope * 1e3:.3f} ms/node, power-law exponent {exponent:.2f} ({n0} -> {n1})"
    return rows


def loads_side_by_side(before: str, n: int = 100_000, repeat: int = 7) -> dict:
    """Median seconds to load the ``n``-stage manifest with the loader module at path ``before`` and with
    the current one, taking turns in one process (the machine's noise falls on both)."""
    import importlib.util
    import statistics

    from hetflow.engine.manifest import loader

    spec = importlib.util.spec_from_file_location("loader_before", before)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    text = generate(n)
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(repeat):
        for name, module in sorted({"before": old, "after": loader}.items(), reverse=i % 2 == 1):
            t0 = time.perf_counter()
            module.loads(text, f"scale-{n}.yaml")
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def scale_side_by_side(before: str, n: int = 100_000, turns: int = 3) -> list[dict]:
    """:func:`scale` of ``n`` stages with hetflow from the source tree ``before`` (an earlier commit's
    worktree) and from this one, each turn a fresh process per side, taking turns; medians of ``turns``.
    The ratio is before / after."""
    import json
    import statistics
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from bench_overhead import REPO, TREE_FINDER

    code = TREE_FINDER + (f"sys.path.insert(0, {here!r})\nimport json, bench_planner\n"
                          f"print(json.dumps(bench_planner.scale([{n}])[0]))\n")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for i in range(turns):
        for side, root in sorted({"before": before, "after": REPO}.items(), reverse=i % 2 == 1):
            done = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True, check=True)
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    b, a = (statistics.median(r["subject_s"] for r in runs[side]) for side in ("before", "after"))
    return [{"name": f"load+validate+plan {n} nodes, before and after", "baseline": f"before ({before})",
             "baseline_s": b, "subject": "after (this tree)", "subject_s": a, "ratio": b / a,
             "notes": "; ".join(f"{side}: " + ", ".join(f"{r['subject_s']:.1f} s ({r['notes'].split('; ')[1]})"
                                                         for r in runs[side]) for side in runs)}]


def run(quick: bool) -> list[dict]:
    return fused(1000, 2 if quick else 5) + scale([1000, 10000] if quick else [1000, 10000, 100000])


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
