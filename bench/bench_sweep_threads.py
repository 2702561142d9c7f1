"""A BLAS-heavy sweep with ``--parallel 2`` against ``--parallel 1``, whole processes, side by side.

The sweep (written to a temporary folder) has ``POINTS`` points, each a
chain of matmuls and GELUs on ``N x N`` fp32 matrices on one CPU executor:
matmul (BLAS, threaded) and GELU (numpy, one thread) share the work, in one
partition a point. Six commands
run in turn, ``PAIRS`` times, each a fresh ``hetflow run --no-cache
--quiet`` process:

* ``--parallel 1``: the baseline; one point at a time, BLAS on every core;
* ``--parallel 2``: two points at once; hetflow sizes the BLAS pool to
  ``cores // 2`` threads (:mod:`hetflow.engine.run.threads`);
* ``--parallel 2`` with ``OPENBLAS_NUM_THREADS`` set to the core count:
  what ``--parallel 2`` did before hetflow sized the pools (a user's
  variable is left alone), two points each asking for every core;
* ``--parallel 1`` and ``--parallel 2`` on a local cluster of one worker
  process a core (``--workers``): the same rule on the workers' pools;
* ``--parallel 1`` with ``OPENBLAS_NUM_THREADS=1``: a second baseline.
  At 256 x 256, OpenBLAS's threads gain little and lose much on a shared
  machine, so ``--parallel 1`` on every core can be slower than on one;
  against this baseline, ``--parallel 2`` shows what the second core adds.

Rows: ratio = the ``--parallel 1`` process's median seconds over the
subject's (above 1: two points at once are faster). The goal (issue 30)
is ``--parallel 2`` >= 1.6x ``--parallel 1`` on two cores.

Two more rows:

* the bound: however well two points at once share the cores, they take
  at least half the CPU time of all points on one thread each (the
  ``OPENBLAS_NUM_THREADS=1`` process, less its start, which nothing
  shares) plus the start; ``--parallel 1`` over that is the most
  ``--parallel 2`` can gain on this machine;
* a shared machine: ``--parallel 1`` and ``--parallel 2`` again, each
  while one busy process a core runs beside it (``--loaded``, and the
  full run), as on the machine where the issue was seen. A BLAS pool of
  every core then waits on threads the system has taken off its cores.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hetflow.engine.run.threads import USER_THREAD_VARS, usable_cores

N = 256
DEPTH = 192


def manifest(points: int, n: int = N, depth: int = DEPTH) -> str:
    """The sweep's YAML: ``points`` seeds, each a chain of ``depth`` (matmul, gelu) pairs on ``n x n``."""
    stages = [f'  x: {{op: random.normal, args: {{shape: [{n}, {n}], seed: "${{seed}}", std: 0.05}}}}',
              f"  w: {{op: random.normal, args: {{shape: [{n}, {n}], seed: 1, std: 0.05}}}}"]
    previous = "x"
    for i in range(depth):
        stages.append(f"  m{i}: {{op: matmul, inputs: [{previous}, w]}}")
        stages.append(f"  g{i}: {{op: gelu, inputs: [m{i}]}}")
        previous = f"g{i}"
    seeds = ", ".join(str(s) for s in range(1, points + 1))
    return (f"version: 1\nname: blas-sweep\nparams: {{seed: 1}}\nmatrix: {{seed: [{seeds}]}}\n"
            f"executors: {{host: {{vendor: cpu}}}}\nstages:\n" + "\n".join(stages) + f"\noutputs: {{y: {previous}}}\n")


def _timed(argv: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t


def measure(points: int, pairs: int) -> dict:
    """Median seconds of each command over ``pairs`` rounds, all of them run in turn in every round."""
    clean = {k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}
    cores = usable_cores()
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-sweep-") as tmp:
        path = Path(tmp) / "sweep.yaml"
        path.write_text(manifest(points))

        def argv(parallel: int, runs: str) -> list[str]:
            return [sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--parallel", str(parallel),
                    "--no-cache", "--quiet", "--runs-dir", str(Path(tmp) / runs)]

        commands = {"p1": (argv(1, "p1"), clean), "p2": (argv(2, "p2"), clean),
                    "p2_fight": (argv(2, "p2f"), {**clean, "OPENBLAS_NUM_THREADS": str(cores)}),
                    "p1_one": (argv(1, "p1o"), {**clean, "OPENBLAS_NUM_THREADS": "1"}),
                    # a local cluster of one worker a core: each worker's pool is its share of the cores
                    "c1": (argv(1, "c1") + ["--workers", str(cores)], clean),
                    "c2": (argv(2, "c2") + ["--workers", str(cores)], clean)}
        times: dict[str, list[float]] = {k: [] for k in commands}
        _timed(*commands["p1"])  # a warm-up: the page cache, the plugin-free imports
        for _ in range(pairs):
            for key, (cmd, env) in commands.items():
                times[key].append(_timed(cmd, env))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cores": cores, "points": points, "load": load, **{k: statistics.median(v) for k, v in times.items()},
            "all": times}


def start_seconds(pairs: int) -> float:
    """Median seconds of ``hetflow --version``'s whole process after ``import hetflow.engine.cli``'s run
    path: the part of every command that no two points share."""
    code = "import hetflow.engine.cli.main, hetflow.engine.api, numpy, dask"
    times = [_timed([sys.executable, "-c", code], dict(os.environ)) for _ in range(pairs)]
    return statistics.median(times)


KERNELS = """
import sys, time
import numpy as np
from hetflow.executors.builtin.elementwise import _gelu
first, last, n, depth = map(int, sys.argv[1:5])
w = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32) * np.float32(0.05)
t = time.perf_counter()
for seed in range(first, last):
    x = np.random.default_rng(seed).standard_normal((n, n), dtype=np.float32) * np.float32(0.05)
    for _ in range(depth):
        x = _gelu(np, [np.matmul(x, w)], {"approximate": "tanh"})
print(time.perf_counter() - t)
"""


def machine_capacity(points: int, pairs: int) -> dict:
    """What two cores give this sweep's arithmetic without hetflow: the points' matmuls and GELUs (the CPU
    executor's own GELU kernel, tanh form as the op's default, in numpy, one BLAS thread) split between two
    processes, run at once against one after the other.

    Each process reports its compute time alone (its start is left out),
    so the ratio (one after the other, summed, over at once, the slower)
    is what the second core adds to this arithmetic on this machine: the
    ceiling of ``--parallel 2`` over one BLAS thread.
    """
    env = {**{k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}, "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    half = points // 2
    argv = [[sys.executable, "-c", KERNELS, str(a), str(b), str(N), str(DEPTH)]
            for a, b in ((1, 1 + half), (1 + half, 1 + points))]

    def run_all(at_once: bool) -> list[float]:
        if at_once:
            procs = [subprocess.Popen(a, env=env, stdout=subprocess.PIPE, text=True) for a in argv]
            return [float(p.communicate()[0]) for p in procs]
        return [float(subprocess.run(a, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout)
                for a in argv]

    apart, together = [], []
    for _ in range(pairs):
        apart.append(sum(run_all(False)))
        together.append(max(run_all(True)))
    return {"apart": statistics.median(apart), "together": statistics.median(together),
            "all": {"apart": apart, "together": together}}


def measure_loaded(points: int, pairs: int) -> dict:
    """``--parallel 1`` against ``--parallel 2`` while one busy process a core runs beside them."""
    cores = usable_cores()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.5)
        clean = {k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}
        with tempfile.TemporaryDirectory(prefix="hetflow-bench-sweep-loaded-") as tmp:
            path = Path(tmp) / "sweep.yaml"
            path.write_text(manifest(points))
            times: dict[str, list[float]] = {"p1": [], "p2": []}
            for _ in range(pairs):
                for key, parallel in (("p1", 1), ("p2", 2)):
                    times[key].append(_timed([sys.executable, "-m", "hetflow.engine.cli", "run", str(path),
                                              "--parallel", str(parallel), "--no-cache", "--quiet", "--runs-dir",
                                              str(Path(tmp) / key)], clean))
    finally:
        for b in busy:
            b.kill()
            b.wait()
    return {"cores": cores, **{k: statistics.median(v) for k, v in times.items()}, "all": times}


def run(quick: bool) -> list[dict]:
    points, pairs = (8, 3) if quick else (27, 5)
    m = measure(points, pairs)
    start = start_seconds(pairs)
    loaded = measure_loaded(points, max(2, pairs - 2))
    capacity = machine_capacity(points, pairs)
    bound = start + (m["p1_one"] - start) / m["cores"]
    note = (f"{m['points']} points of {DEPTH} ({N}x{N} matmul, gelu), {m['cores']} cores, median of {pairs} rounds "
            f"of whole processes in turn, load average {m['load']:.1f} at the end")
    return [
        {"name": f"sweep --parallel 2 ({m['points']} BLAS points)", "baseline": "--parallel 1",
         "baseline_s": m["p1"], "subject": "--parallel 2, pools sized", "subject_s": m["p2"],
         "ratio": m["p1"] / m["p2"], "notes": note},
        {"name": f"sweep --parallel 2, OPENBLAS_NUM_THREADS={m['cores']} (before)", "baseline": "--parallel 1",
         "baseline_s": m["p1"], "subject": "--parallel 2, pools unsized", "subject_s": m["p2_fight"],
         "ratio": m["p1"] / m["p2_fight"], "notes": note},
        {"name": f"sweep --parallel 2 ({m['points']} BLAS points), against 1 BLAS thread",
         "baseline": "--parallel 1, OPENBLAS_NUM_THREADS=1", "baseline_s": m["p1_one"],
         "subject": "--parallel 2, pools sized", "subject_s": m["p2"], "ratio": m["p1_one"] / m["p2"], "notes": note},
        {"name": f"sweep --parallel 2 on a local cluster ({m['points']} BLAS points)",
         "baseline": f"--parallel 1 --workers {m['cores']}", "baseline_s": m["c1"],
         "subject": f"--parallel 2 --workers {m['cores']}", "subject_s": m["c2"], "ratio": m["c1"] / m["c2"],
         "notes": note + "; each a whole process, the cluster's start included"},
        {"name": f"sweep --parallel 2 ({m['points']} BLAS points), the most it can gain here",
         "baseline": "--parallel 1", "baseline_s": m["p1"],
         "subject": "start + CPU time of every point on one thread / cores", "subject_s": bound,
         "ratio": m["p1"] / bound,
         "notes": note + f"; start {start:.3f} s (imports of the run path), one BLAS thread {m['p1_one']:.3f} s"},
        {"name": f"the points' arithmetic in numpy, 2 processes at once ({m['points']} points)",
         "baseline": "one after the other (compute time, one BLAS thread)", "baseline_s": capacity["apart"],
         "subject": "at once (the slower)", "subject_s": capacity["together"],
         "ratio": capacity["apart"] / capacity["together"],
         "notes": f"what the second core adds to this arithmetic here, without hetflow: the ceiling of "
                  f"--parallel 2 over one BLAS thread; all: {capacity['all']}"},
        {"name": f"sweep --parallel 2 ({m['points']} BLAS points), a busy process a core beside it",
         "baseline": "--parallel 1, loaded", "baseline_s": loaded["p1"], "subject": "--parallel 2, pools sized, loaded",
         "subject_s": loaded["p2"], "ratio": loaded["p1"] / loaded["p2"],
         "notes": f"{loaded['cores']} busy processes (while True: pass) beside each command; median of "
                  f"{len(loaded['all']['p1'])} rounds; all: {loaded['all']}"},
    ]


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if "--loaded" in sys.argv:
        print(measure_loaded(8 if quick else 27, 2 if quick else 3))
        sys.exit(0)
    if "--capacity" in sys.argv:
        print(machine_capacity(8 if quick else 27, 3))
        sys.exit(0)
    for row in run(quick):
        print(f"{row['name']}: {row['baseline_s']:.2f} s / {row['subject_s']:.2f} s = {row['ratio']:.2f}x "
              f"({row['notes']})")
