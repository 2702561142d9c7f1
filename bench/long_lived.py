"""What a process that calls ``hetflow.run`` again and again keeps: a notebook, a service, a scheduler's worker.

Three loops, each in a process of its own, none calling ``gc.collect()``:
the quickstart warm (the same params each time), the quickstart with new
params each call (checked and planned again), and a chain of 1,200 stages
(a run that freezes the heap). Each prints, every so many runs, the
objects the cyclic collector tracks, the process's RSS and the collections
of each generation so far, then the objects a full collection leaves: what
the loop kept that was garbage is the difference.

    python bench/long_lived.py                 # the three loops
    python bench/long_lived.py --runs 200      # shorter
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
QUICKSTART = os.path.join(os.path.dirname(HERE), "examples", "quickstart.yaml")


def _rss_mib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def _chain(folder: str, stages: int = 1200) -> str:
    lines = ["version: 1", "name: long", "executors:", "  a: {vendor: cpu}", "stages:",
             "  s0: {op: random.normal, args: {shape: [4], seed: 1}}"]
    lines += [f"  s{i}: {{op: neg, inputs: [s{i - 1}]}}" for i in range(1, stages)]
    path = os.path.join(folder, "long.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines + [f"outputs: {{y: s{stages - 1}}}"]) + "\n")
    return path


def loop(kind: str, runs: int) -> None:
    import hetflow

    work = tempfile.mkdtemp(prefix="hetflow-long-")
    path = _chain(work) if kind == "large" else QUICKSTART
    every = max(runs // 4, 1)
    for i in range(runs + 1):
        params = {"batch": 8 + i} if kind == "new-params" else {"batch": 8} if kind == "warm" else None
        hetflow.run(path, params, runs_dir=os.path.join(work, "runs"), cache=False)
        if i % every == 0:
            print(f"{kind:10s} run {i:5d}: {len(gc.get_objects()):7,d} objects, RSS {_rss_mib()} MiB, collections "
                  f"{[s['collections'] for s in gc.get_stats()]}", flush=True)
    kept = len(gc.get_objects())
    gc.collect()
    print(f"{kind:10s} a full collection then frees {kept - len(gc.get_objects()):,} of them", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--loop", choices=("warm", "new-params", "large"))
    args = parser.parse_args()
    if args.loop:
        loop(args.loop, args.runs)
        return
    for kind, runs in (("warm", args.runs), ("new-params", max(args.runs // 2, 1)), ("large", max(args.runs // 10, 1))):
        subprocess.run([sys.executable, __file__, "--loop", kind, "--runs", str(runs)], check=True)


if __name__ == "__main__":
    main()
