"""``validate`` against ``plan`` of the same 100,000-stage manifest, side by side in one run.

The manifest is :func:`bench_planner.generate`'s (chains of ``relu`` and
``add`` under a pinned ``ones`` every 50 stages, two CPU executors),
written to a file; both columns are the whole public call, as the CLI
makes it: ``hetflow.validate(path)`` (load, resolve, schema, semantics,
the shape pass, every vendor an executor may get) and
``hetflow.plan(path)`` (load, resolve, validate, graph, place, partition,
bridge, the cache forecast). A second row makes executor ``e1``
``vendor: [vulkan, cpu]``, so validate runs the candidates step once per
kind of machine (Vulkan and CPU) where the first row needs none: the CPU
runs every op at every dtype.

The goal (issue 29) is validate in no more time than plan: ratio =
plan / validate, >= 1 meets it. Best of ``--turns`` each.

    python bench/validate_scale.py [--stages N] [--turns K]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_planner import generate  # noqa: E402

import hetflow  # noqa: E402


def best(call, turns: int) -> float:
    found = math.inf
    for _ in range(turns):
        t0 = time.perf_counter()
        call()
        found = min(found, time.perf_counter() - t0)
    return found


def side_by_side(n: int, turns: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        runs = os.path.join(folder, "runs")
        for label, text in (("two cpu executors", generate(n)),
                            ("e1: [vulkan, cpu]", generate(n).replace("  e1: {vendor: cpu}", "  e1: {vendor: [vulkan, cpu]}"))):
            path = os.path.join(folder, f"scale-{n}.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            assert hetflow.validate(path) == []
            validate_s = best(lambda: hetflow.validate(path), turns)
            plan_s = best(lambda: hetflow.plan(path, runs_dir=runs), turns)
            rows.append({"name": f"validate vs plan, {n:,} stages, {label}", "baseline": "hetflow.plan",
                         "baseline_s": plan_s, "subject": "hetflow.validate", "subject_s": validate_s,
                         "ratio": plan_s / validate_s, "notes": f"best of {turns}; goal: ratio >= 1"})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args(argv)
    for row in side_by_side(args.stages, args.turns):
        print(f"{row['name']}: validate {row['subject_s']:.2f} s, plan {row['baseline_s']:.2f} s, "
              f"ratio {row['ratio']:.2f} (plan / validate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
