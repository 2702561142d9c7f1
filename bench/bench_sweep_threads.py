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
  process a core (``--workers``): the same rule on the workers' pools
  (``--cluster`` runs these two alone; ``--by-hand`` the same two on a
  cluster started by hand, ``dask scheduler`` and ``dask worker``, joined
  with ``--scheduler``; ``--before TREE`` with either: an earlier source
  tree's commands beside this checkout's, turn about; ``--timeline``: one
  process of each, broken down by its runs' records);
* ``--parallel 1`` with ``OPENBLAS_NUM_THREADS=1``: a second baseline.
  At 256 x 256, OpenBLAS's threads gain little and lose much on a shared
  machine, so ``--parallel 1`` on every core can be slower than on one;
  against this baseline, ``--parallel 2`` shows what the second core adds.

Rows: ratio = the ``--parallel 1`` process's median seconds over the
subject's (above 1: two points at once are faster). The goal (issue 30)
is ``--parallel 2`` >= 1.6x ``--parallel 1`` on two cores.

More rows:

* the bound: however well two points at once share the cores, they take
  at least half the CPU time of all points on one thread each (the
  ``OPENBLAS_NUM_THREADS=1`` process, less its start, which nothing
  shares) plus the start; ``--parallel 1`` over that is the most
  ``--parallel 2`` can gain on this machine;
* the points' arithmetic without hetflow (:func:`machine_capacity`): two
  processes of one BLAS thread at once against one after the other (what
  the second core adds), and against one process with a BLAS thread a
  core (what ``--parallel 1`` computes with): the ceiling of the goal's
  ratio, since BLAS's own threads already use the second core;
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


def _timed(argv: list[str], env: dict, cwd: str | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
    return time.perf_counter() - t


def site_of(tree: str, folder: str) -> str:
    """A folder to put first on ``PYTHONPATH`` whose ``hetflow`` is the source tree ``tree`` (an earlier commit's
    files, ``git archive HEAD | tar -x -C TREE``), laid out as ``setup.py`` installs it. The variable reaches the
    processes a local cluster spawns, so its workers run that tree's code too. The commands run in a folder
    without a ``hetflow`` folder: ``python -m`` puts the working folder first on the path, before the
    variable, and the checkout's own ``hetflow/`` would win there."""
    site = Path(folder) / "site"
    package = site / "hetflow"
    package.mkdir(parents=True)
    for entry in (Path(tree) / "hetflow").iterdir():
        (package / entry.name).symlink_to(entry.resolve())
    for name in ("engine", "executors", "schemas", "examples", "pipelines"):
        (package / name).symlink_to((Path(tree) / name).resolve())
    return str(site)


def measure(points: int, pairs: int, only: tuple[str, ...] | None = None, before: str | None = None) -> dict:
    """Median seconds of each command over ``pairs`` rounds, all of them run in turn in every round; ``only``:
    the commands of these keys alone (``("c1", "c2")``: the local-cluster row, ``--cluster``); ``before``: a
    source tree whose commands (keys ``KEY_before``) run beside this checkout's, each round turn about."""
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
        if only is not None:
            commands = {k: v for k, v in commands.items() if k in only}
        if before is not None:
            site = site_of(before, tmp)
            for key, (cmd, env) in list(commands.items()):
                runs = cmd.index("--runs-dir") + 1
                path_var = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
                commands[key + "_before"] = ([*cmd[:runs], cmd[runs] + "-before", *cmd[runs + 1:]],
                                             {**env, "PYTHONPATH": path_var})
        times: dict[str, list[float]] = {k: [] for k in commands}
        cwd = tmp if before is not None else None  # see site_of
        _timed(*next(iter(commands.values())), cwd=cwd)  # a warm-up: the page cache, the plugin-free imports
        for i in range(pairs):
            # with a tree before, the two sides of each command take turns at going first
            for key, (cmd, env) in sorted(commands.items(), key=lambda kv: (kv[0].replace("_before", ""),
                                                                           kv[0].endswith("_before") == bool(i % 2))):
                times[key].append(_timed(cmd, env, cwd=cwd))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cores": cores, "points": points, "load": load, **{k: statistics.median(v) for k, v in times.items()},
            "all": times}


def measure_by_hand(points: int, pairs: int, before: str | None = None) -> dict:
    """``c1`` and ``c2`` on a cluster started by hand (``dask scheduler`` and one ``dask worker --nthreads 1`` a
    core, default settings), joined with ``--scheduler FILE``: the cluster's start is not in the command's time,
    and its workers have run hetflow before (a warm-up command each). ``before``: a source tree whose commands run
    on a cluster of their own, with that tree's code in its workers, each round turn about with this checkout's."""
    cores = usable_cores()
    clean = {k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-sweep-hand-") as tmp:
        path = Path(tmp) / "sweep.yaml"
        path.write_text(manifest(points))
        sides = {"": clean}
        if before is not None:
            site = site_of(before, tmp)
            sides["_before"] = {**clean, "PYTHONPATH": os.pathsep.join(filter(None, [site, clean.get("PYTHONPATH")]))}
        commands = {}
        try:
            for side, env in sides.items():
                file = str(Path(tmp) / f"scheduler{side}.json")
                procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                                               "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", file],
                                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp))
                procs.extend(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--nthreads", "1",
                                               "--name", str(i), "--scheduler-file", file], env=env,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
                             for i in range(cores))
                for parallel in (1, 2):
                    commands[f"c{parallel}{side}"] = (
                        [sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--parallel", str(parallel),
                         "--no-cache", "--quiet", "--runs-dir", str(Path(tmp) / f"c{parallel}{side}"), "--scheduler",
                         file], env)
            from distributed import Client

            for side in sides:
                with Client(scheduler_file=str(Path(tmp) / f"scheduler{side}.json"), timeout=60) as client:
                    client.wait_for_workers(cores, timeout=60)
                _timed(*commands["c1" + side], cwd=tmp)  # a warm-up: the workers import hetflow once
            times: dict[str, list[float]] = {k: [] for k in commands}
            for i in range(pairs):
                for key, (cmd, env) in sorted(commands.items(), key=lambda kv: (
                        kv[0].replace("_before", ""), kv[0].endswith("_before") == bool(i % 2))):
                    times[key].append(_timed(cmd, env, cwd=tmp))
        finally:
            for proc in reversed(procs):
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cores": cores, "points": points, "load": load, **{k: statistics.median(v) for k, v in times.items()},
            "all": times}


def timeline(points: int, parallel: int, extra: list[str]) -> dict:
    """Where one whole ``--parallel PARALLEL`` process's time goes, from its runs' records: when the first run
    starts and when the process ends after the last, and per run (medians, ms) its span, its partition, the
    record's start to the partition's (the plan's set-up on the workers, the submission), the partition's end to
    the record's (the output, the close, the record), and the gap from one run's end to the next's start."""
    import glob
    import json
    from datetime import datetime, timezone

    def epoch(stamp: str) -> float:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()

    clean = {k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-sweep-timeline-") as tmp:
        path = Path(tmp) / "sweep.yaml"
        path.write_text(manifest(points))
        began = time.time()
        subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--parallel", str(parallel),
                        "--no-cache", "--quiet", "--runs-dir", str(Path(tmp) / "runs"), *extra], env=clean, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ended = time.time()
        runs = []
        for file in glob.glob(str(Path(tmp) / "runs" / "*" / "record.json")):
            record = json.loads(Path(file).read_text())
            parts = [e for e in record["events"] if e.get("event") == "finished" and e.get("kind") == "partition"]
            runs.append((epoch(record["started_at"]), epoch(record["ended_at"]), min(p["start"] for p in parts),
                         max(p["end"] for p in parts), sum(p["duration_s"] for p in parts)))
    runs.sort()

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1e3, 1) if values else 0.0

    return {"seconds": round(ended - began, 3), "first_run_at": round(runs[0][0] - began, 3),
            "after_last_run": round(ended - max(r[1] for r in runs), 3),
            "span_ms": ms([r[1] - r[0] for r in runs]), "partition_ms": ms([r[4] for r in runs]),
            "head_ms": ms([r[2] - r[0] for r in runs]), "tail_ms": ms([r[1] - r[3] for r in runs]),
            "gap_ms": ms([b[0] - a[1] for a, b in zip(runs, runs[1:])]), "runs": len(runs)}


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
    processes, run at once against one after the other; and all of them in one process whose BLAS pool has a
    thread a core (``blas``), as ``--parallel 1`` computes them.

    Each process reports its compute time alone (its start is left out),
    so the ratio (one after the other, summed, over at once, the slower)
    is what the second core adds to this arithmetic on this machine: the
    ceiling of ``--parallel 2`` over one BLAS thread; and ``blas`` over at
    once is its ceiling over ``--parallel 1``: what BLAS's own threads
    already take of the second core, two points at once cannot gain again.
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

    cores = usable_cores()
    pooled = [sys.executable, "-c", KERNELS, "1", str(1 + points), str(N), str(DEPTH)]
    pooled_env = {**env, "OPENBLAS_NUM_THREADS": str(cores), "OMP_NUM_THREADS": str(cores)}
    apart, together, blas = [], [], []
    for _ in range(pairs):
        apart.append(sum(run_all(False)))
        together.append(max(run_all(True)))
        blas.append(float(subprocess.run(pooled, env=pooled_env, stdout=subprocess.PIPE, text=True,
                                         check=True).stdout))
    return {"apart": statistics.median(apart), "together": statistics.median(together),
            "blas": statistics.median(blas), "all": {"apart": apart, "together": together, "blas": blas}}


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
        {"name": f"the points' arithmetic in numpy, 2 processes at once against 1 with a BLAS thread a core "
                 f"({m['points']} points)",
         "baseline": "one process, OPENBLAS_NUM_THREADS = cores (compute time)", "baseline_s": capacity["blas"],
         "subject": "2 processes of one BLAS thread at once (the slower)", "subject_s": capacity["together"],
         "ratio": capacity["blas"] / capacity["together"],
         "notes": "without hetflow: the ceiling of --parallel 2 over --parallel 1 on this machine (the goal's "
                  "ratio), as the matmuls of --parallel 1 already use every core"},
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
    if "--timeline" in sys.argv:
        # one --parallel 1 and one --parallel 2 process on a local cluster, each broken down by its runs' records
        # (gap: negative where two points run at once)
        for parallel in (1, 2):
            print(f"--parallel {parallel} --workers {usable_cores()}:",
                  timeline(8 if quick else 27, parallel, ["--workers", str(usable_cores())]))
        sys.exit(0)
    if "--cluster" in sys.argv or "--by-hand" in sys.argv:
        # the local-cluster row alone, its two commands in turn (--by-hand: on a cluster started by hand);
        # --before TREE: that tree's beside this checkout's
        tree = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
        if "--by-hand" in sys.argv:
            m = measure_by_hand(8 if quick else 27, 3 if quick else 5, before=tree)
        else:
            m = measure(8 if quick else 27, 3 if quick else 5, only=("c1", "c2"), before=tree)
        on = "--scheduler FILE" if "--by-hand" in sys.argv else f"--workers {m['cores']}"
        for side in (["_before"] if tree else []) + [""]:
            print(f"{'before' if side else 'this checkout'}: --parallel 1 {on} {m['c1' + side]:.3f} s, "
                  f"--parallel 2 {on} {m['c2' + side]:.3f} s: {m['c1' + side] / m['c2' + side]:.2f}x")
        print(f"(median of {len(m['all']['c1'])} rounds, load average {m['load']:.1f} at the end; all: {m['all']})")
        sys.exit(0)
    if "--capacity" in sys.argv:
        print(machine_capacity(8 if quick else 27, 3))
        sys.exit(0)
    for row in run(quick):
        print(f"{row['name']}: {row['baseline_s']:.2f} s / {row['subject_s']:.2f} s = {row['ratio']:.2f}x "
              f"({row['notes']})")
