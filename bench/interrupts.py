"""Ctrl-C at random moments of a loop of runs in one process, as a notebook's user presses it.

Each run of the quickstart (warm, in-process, ``hetflow.run``) is sent a
real SIGINT (Python's own handler: a ``KeyboardInterrupt`` at whatever
line runs) a seeded random 0.5-30 ms after it starts; the loop catches
what the run raises and goes on. Afterwards every run folder must hold a
record, and no record may say ``running`` (the process that made them all
has moved on). Prints the statuses and the problems; the goal is none.

    python bench/interrupts.py [--runs N] [--seed S]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    import hetflow

    rng = random.Random(args.seed)
    manifest = HERE.parent / "examples" / "quickstart.yaml"
    # the timer's own handler only sends the SIGINT: the interrupt comes through Python's SIGINT handler
    signal.signal(signal.SIGALRM, lambda signum, frame: os.kill(os.getpid(), signal.SIGINT))
    with tempfile.TemporaryDirectory(prefix="hetflow-interrupts-") as tmp:
        runs = Path(tmp) / "runs"
        hetflow.run(manifest, params={"batch": 2}, runs_dir=Path(tmp) / "warm")
        for i in range(args.runs):
            try:
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0005, 0.03))
                    hetflow.run(manifest, params={"batch": 64, "seed": i % 5, "hidden": 512}, runs_dir=runs)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except BaseException:  # noqa: BLE001 - the interrupt, or the run's own account of it
                pass
        statuses: collections.Counter = collections.Counter()
        problems = []
        for folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
            record = folder / "record.json"
            if not record.exists():
                problems.append(f"{folder.name}: no record ({sorted(p.name for p in folder.iterdir())})")
                continue
            data = json.loads(record.read_text())
            statuses[data["status"]] += 1
            if data["status"] == "running":
                problems.append(f"{folder.name}: record says running")
            elif data["status"] == "failed":
                problems.append(f"{folder.name}: record says failed: {(data.get('error') or {}).get('message')}")
    print(f"{args.runs} runs: {dict(statuses)}; {len(problems)} problems")
    for line in problems:
        print(f"  {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
