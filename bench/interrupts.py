"""Ctrl-C at random moments of a loop of runs in one process, as a notebook's user presses it.

Each run of the quickstart (warm, in-process, ``hetflow.run``) is sent a
real SIGINT (Python's own handler) a seeded random 0.5-30 ms after it
starts, and with ``--twice P`` a second one 0.3-5 ms after the first in a
seeded fraction P of the runs, as a user who presses Ctrl-C twice; the
loop catches what the run raises and goes on. Afterwards every run folder
must hold a record, no record may say ``running`` (the process that made
them all has moved on) or ``failed``, a succeeded one names only outputs
that are there, and no run lock may be left. A run lock or a thread's lock
that a ``KeyboardInterrupt`` left taken shows as the loop hanging: each
run is given ``--stuck`` seconds. Prints the statuses, the exceptions the
calls raised and the problems; the goal is none.

    python bench/interrupts.py [--runs N] [--seed S] [--twice P] [--stuck S]
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--twice", type=float, default=0.0)
    parser.add_argument("--stuck", type=float, default=60.0)
    parser.add_argument("--keep", help="a folder to copy the run folders with a problem into")
    args = parser.parse_args(argv)
    import hetflow

    rng = random.Random(args.seed)
    manifest = HERE.parent / "examples" / "quickstart.yaml"
    second: list[float] = []

    def alarm(signum, frame) -> None:
        # the timer's own handler only sends the SIGINT: the interrupt comes through Python's SIGINT handler
        os.kill(os.getpid(), signal.SIGINT)
        if second:
            signal.setitimer(signal.ITIMER_REAL, second.pop())

    def stuck(signum, frame) -> None:
        faulthandler.dump_traceback()
        print(f"a run did not end in {args.stuck} s: the loop hangs", flush=True)
        os._exit(2)

    signal.signal(signal.SIGALRM, alarm)
    signal.signal(signal.SIGUSR1, stuck)
    raised: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="hetflow-interrupts-") as tmp:
        runs = Path(tmp) / "runs"
        hetflow.run(manifest, params={"batch": 2}, runs_dir=Path(tmp) / "warm")
        for i in range(args.runs):
            first = rng.uniform(0.0005, 0.03)
            gap = rng.uniform(0.0003, 0.005) if rng.random() < args.twice else None
            watchdog = threading.Timer(args.stuck, os.kill, (os.getpid(), signal.SIGUSR1))
            watchdog.start()
            try:
                try:
                    second[:] = [gap] if gap is not None else []
                    signal.setitimer(signal.ITIMER_REAL, first)
                    hetflow.run(manifest, params={"batch": 64, "seed": i % 5, "hidden": 512}, runs_dir=runs)
                    raised["returned"] += 1
                finally:
                    second.clear()
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except BaseException as e:  # noqa: BLE001 - the interrupt, or the run's own account of it
                raised[type(e).__name__] += 1
            finally:
                watchdog.cancel()
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
                if args.keep:
                    shutil.copytree(folder, Path(args.keep) / folder.name)
            elif data["status"] == "failed":
                problems.append(f"{folder.name}: record says failed: {(data.get('error') or {}).get('message')}")
            missing = [n for n, o in (data.get("outputs") or {}).items() if not (folder / o["file"]).is_file()]
            if missing:
                problems.append(f"{folder.name}: record says {data['status']} and names outputs not there: {missing}")
        problems += [f"{lock.name}: a run lock left" for lock in (runs / ".locks").glob("*.lock")]
    print(f"{args.runs} runs: {dict(statuses)}; the calls raised {dict(raised)}; {len(problems)} problems")
    for line in problems:
        print(f"  {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
