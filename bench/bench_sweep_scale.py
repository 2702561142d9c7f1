"""A sweep of many small points against the same runs one ``hetflow.run`` each: what a sweep adds per point.

The manifest (written to a temporary folder) sweeps one param over N
values; each point is a two-stage run of a 4-element array, so the
sweep's own book-keeping is what is timed. For each N:

* baseline: N calls of ``hetflow.run(PLAIN, params={"k": i})`` on the same
  manifest without its ``matrix:`` (a run each, in one process);
* subject: one ``hetflow.sweep`` of the N points (its ``sweep.json`` kept
  as it goes, one row a point).

ratio = baseline seconds / subject seconds (at 1, the sweep costs what
its runs cost). The notes give each side's milliseconds per point and the
size of the final ``sweep.json``. A summary rewritten after every point
made the sweep's cost grow as N^2: ``--before TREE`` (an earlier commit's
files, ``git archive COMMIT | tar -x -C TREE``) times the same rows from
that tree in a process of its own, beside this checkout's.

    python bench/bench_sweep_scale.py                      # N = 500 and 2,000
    python bench/bench_sweep_scale.py --sizes 4000 --before /tmp/before
"""

from __future__ import annotations

import os
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

PLAIN = """version: 1
name: many
params: {k: 0}
executors: {cpu: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def _sides(n: int, folder: str) -> dict:
    import hetflow

    plain = os.path.join(folder, "plain.yaml")
    swept = os.path.join(folder, "swept.yaml")
    with open(plain, "w") as f:
        f.write(PLAIN)
    with open(swept, "w") as f:
        f.write(PLAIN.replace("executors:", "matrix: {k: [" + ", ".join(map(str, range(n))) + "]}\nexecutors:", 1))
    hetflow.run(plain, runs_dir=os.path.join(folder, "warm"))  # imports and first-run costs, for neither side
    t0 = time.perf_counter()
    for i in range(n):
        hetflow.run(plain, params={"k": i}, runs_dir=os.path.join(folder, "runs"), cache=False)
    baseline = time.perf_counter() - t0
    t0 = time.perf_counter()
    sweep = hetflow.sweep(swept, runs_dir=os.path.join(folder, "sweep"), cache=False, max_points=n)
    subject = time.perf_counter() - t0
    assert sweep.status == "succeeded", sweep.summary.get("status")
    return {"baseline_s": baseline, "subject_s": subject,
            "summary_bytes": os.path.getsize(os.path.join(sweep.path, "sweep.json"))}


def rows(sizes: list[int]) -> list[dict]:
    out = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="hetflow-sweep-scale-", dir=os.path.join(REPO, "bench")) as folder:
            got = _sides(n, folder)
        out.append({
            "name": f"sweep of {n:,} small points",
            "baseline": f"{n:,} runs, one hetflow.run each",
            "subject": f"one hetflow.sweep of {n:,} points",
            "baseline_s": got["baseline_s"], "subject_s": got["subject_s"],
            "ratio": got["baseline_s"] / got["subject_s"],
            "notes": (f"{got['baseline_s'] / n * 1e3:.2f} ms a run alone, {got['subject_s'] / n * 1e3:.2f} ms a point; "
                      f"sweep.json {got['summary_bytes'] / 1e3:,.0f} kB at the end"),
        })
    return out


def run(quick: bool) -> list[dict]:
    return rows([200, 1000] if quick else [500, 2000])


def _in_tree(root: str, sizes: list[int]) -> list[dict]:
    from bench_overhead import rows_in_tree

    return rows_in_tree(root, "bench_sweep_scale", f"rows({sizes!r})")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000", help="the sweeps' point counts, comma separated")
    parser.add_argument("--before", help="another source tree to time the same rows from, in a process of its own")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    sides = [("before", args.before), ("after", REPO)] if args.before else [("", REPO)]
    for side, root in sides:
        for row in _in_tree(root, sizes):
            print(f"{side + ': ' if side else ''}{row['name']}: {row['baseline']} {row['baseline_s']:.2f} s, "
                  f"{row['subject']} {row['subject_s']:.2f} s, ratio {row['ratio']:.2f}; {row['notes']}")


if __name__ == "__main__":
    main()
