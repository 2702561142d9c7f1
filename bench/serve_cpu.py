"""The CPU a long-lived ``hetflow schedule serve`` spends on its own, in a runs directory of many other runs.

A scheduled manifest fires every 2 seconds (a two-stage run); the runs
directory already holds ``--others`` runs of another manifest (a sweep's
points, made once and copied for each side). ``serve`` runs for
``--seconds``, then SIGTERM; the row is its own CPU time (user + system,
from ``/proc``), not its runs'. Each decision used to read every run
record of the runs directory (the slots' records), every tick.

    python bench/serve_cpu.py                       # this checkout
    python bench/serve_cpu.py --before TREE         # and an earlier tree's (git archive COMMIT | tar -x -C TREE)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

TICKER = """version: 1
name: ticker
params: {n: 4}
schedule:
  cron: "*/2 * * * * *"
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
outputs: {x: x}
"""


def _others(folder: str, n: int) -> str:
    """A runs directory holding a sweep of ``n`` points of another manifest."""
    import hetflow

    path = os.path.join(folder, "others.yaml")
    with open(path, "w") as f:
        f.write("version: 1\nname: others\nparams: {k: 0}\nmatrix: {k: [" + ", ".join(map(str, range(n)))
                + "]}\nexecutors: {cpu: {vendor: cpu}}\nstages:\n  x: {op: ones, args: {shape: [4]}}\n"
                  "outputs: {x: x}\n")
    runs = os.path.join(folder, "made")
    hetflow.sweep(path, runs_dir=runs, max_points=n, cache=False)
    return runs


def serve_cpu(root: str, made: str, folder: str, seconds: float) -> float:
    from bench_overhead import TREE_FINDER

    runs = os.path.join(folder, f"runs-{abs(hash(root))}")
    shutil.copytree(made, runs)
    manifest = os.path.join(folder, "ticker.yaml")
    with open(manifest, "w") as f:
        f.write(TICKER)
    code = TREE_FINDER + "from hetflow.engine.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    proc = subprocess.Popen([sys.executable, "-c", code, root, "schedule", "serve", manifest, "--runs-dir", runs,
                             "--poll", "0.5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds)
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--others", type=int, default=2000, help="runs of another manifest in the runs directory")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--before", help="an earlier source tree to time the same way, first")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    with tempfile.TemporaryDirectory(prefix="hetflow-serve-cpu-", dir=HERE) as folder:
        made = _others(folder, args.others)
        for side, root in ([("before", args.before)] if args.before else []) + [("after" if args.before else "", REPO)]:
            cpu = serve_cpu(root, made, folder, args.seconds)
            print(f"{side + ': ' if side else ''}serve's own CPU over {args.seconds:.0f} s beside {args.others:,} other "
                  f"runs: {cpu:.2f} s ({cpu / args.seconds:.1%} of a core)")


if __name__ == "__main__":
    main()
