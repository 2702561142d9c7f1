"""Reading a runs directory of many runs: ``hetflow runs`` and ``hetflow runs show latest``, whole processes.

A scheduled manifest makes a run every few minutes, and a sweep dozens
at once: a runs directory of thousands of runs is ordinary before
``runs gc`` trims it. Each row times the whole CLI process against
``python -c "import numpy, yaml"`` (the start-up rows' baseline), turn
about, on a runs directory of ``N`` quickstart runs made in-process
first (``N`` = 3,000; 300 with ``--quick``), and an empty one.

    python bench/run.py listing
    python bench/bench_listing.py --before TREE   # the same commands from another source tree, turn about
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _make(runs_dir: str, n: int) -> None:
    import hetflow

    for i in range(n):
        hetflow.run(os.path.join(REPO, "examples", "quickstart.yaml"), runs_dir=runs_dir, cache=False,
                    params={"seed": i})


def _commands(runs_dir: str) -> dict[str, list[str]]:
    return {"hetflow runs": ["runs", "--runs-dir", runs_dir],
            "hetflow runs show latest": ["runs", "show", "latest", "--runs-dir", runs_dir],
            "hetflow runs, an empty runs directory": ["runs", "--runs-dir", runs_dir + "-empty"]}


def _time(argv: list[str], tree: str | None) -> float:
    if tree is None:
        command = [sys.executable, "-m", "hetflow.engine.cli", *argv]
    else:
        sys.path.insert(0, HERE)
        from bench_overhead import _FROM_TREE

        command = [sys.executable, "-c", _FROM_TREE, tree, *argv]
    t = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stderr[-2000:]}")
    return took


def _baseline() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import numpy, yaml"], check=True)
    return time.perf_counter() - t


def run(quick: bool) -> list[dict]:
    n, turns = (300, 5) if quick else (3000, 9)
    folder = tempfile.mkdtemp(prefix="hetflow-bench-listing-")
    try:
        runs_dir = os.path.join(folder, "runs")
        _make(runs_dir, n)
        rows = []
        for name, argv in _commands(runs_dir).items():
            base, subj = [], []
            for _ in range(turns):
                base.append(_baseline())
                subj.append(_time(argv, None))
            b, s = statistics.median(base), statistics.median(subj)
            what = "" if "empty" in name else f" of {n:,} runs"
            rows.append({"name": f"{name}{what}", "baseline": 'python -c "import numpy, yaml"', "baseline_s": b,
                         "subject": f"{name}, whole process", "subject_s": s, "ratio": b / s,
                         "notes": f"median of {turns} pairs taken turn about (best {min(base) * 1e3:.0f} ms "
                                  f"against {min(subj) * 1e3:.0f} ms)"})
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def before_after(before: str, quick: bool) -> None:
    n, turns = (300, 5) if quick else (3000, 9)
    folder = tempfile.mkdtemp(prefix="hetflow-bench-listing-")
    try:
        runs_dir = os.path.join(folder, "runs")
        _make(runs_dir, n)
        for name, argv in _commands(runs_dir).items():
            got: dict[str, list[float]] = {"before": [], "after": []}
            for i in range(turns):
                for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
                    got[side].append(_time(argv, before if side == "before" else REPO))
            b, a = statistics.median(got["before"]), statistics.median(got["after"])
            print(f"{name} ({n:,} runs): before {b * 1e3:.0f} ms, after {a * 1e3:.0f} ms, {b / a:.2f}x "
                  f"(best {min(got['before']) * 1e3:.0f} / {min(got['after']) * 1e3:.0f} ms)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another source tree to time the same commands from, turn about")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.before:
        before_after(args.before, args.quick)
    else:
        for row in run(args.quick):
            print(f"{row['name']}: {row['baseline']} {row['baseline_s'] * 1e3:.0f} ms, {row['subject']} "
                  f"{row['subject_s'] * 1e3:.0f} ms, ratio {row['ratio']:.3f}; {row['notes']}")
