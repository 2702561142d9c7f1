"""Kill the worker hosting an executor at random moments, many times over, and count the runs that survive.

A cluster started as an operator starts one (``dask scheduler`` and two
``dask worker`` processes under nannies, on loopback, Dask's defaults or
hard replica reduction), the chain of ``tests/killworker.py`` run by the
``hetflow`` command line, and SIGKILL of accel's worker a seeded random
delay after a seeded random one of its events. A run survives when it
exits 0 with the digests of a clean run and a ``recovery`` record naming
the killed worker. Prints ``survived/total``; the goal is every one. It
also counts the partitions that had finished before the kill and were
submitted again: run again from their inputs, or restored from their
cache entries (the goal: all restored, so that the cost of a loss stays
at the tasks the lost worker held).

    python bench/recovery.py --trials 50 --seed 1 [--config reduce-replicas]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import killworker as kw  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", choices=list(kw.CONFIGS), default="default")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    survived = 0
    totals = {"ran": 0, "restored": 0}
    with tempfile.TemporaryDirectory(prefix="hetflow-recovery-") as tmp:
        folder = Path(tmp)
        cluster = kw.start(folder / "cluster", args.config)
        try:
            path = kw.manifest(folder / "m")
            clean = kw.run(cluster, path, folder / "clean")
            if clean.exit_code != 0:
                print("\n".join(clean.stderr[-20:]), file=sys.stderr)
                return 1
            i = late = 0
            while i < args.trials and late < 10 * args.trials:
                name = rng.choice(sorted(kw.MOMENTS))
                delay = round(rng.uniform(0, kw.STEP_S), 3)
                t0 = time.monotonic()
                out = kw.run(cluster, path, folder / f"runs-{i}-{late}", kw.MOMENTS[name], delay=delay)
                if out.killed is None:  # the run ended before the delayed kill: no trial, the next moment instead
                    late += 1
                    print(f"    (the run ended before {name} +{delay:.3f} s: not a trial)", flush=True)
                    continue
                i += 1
                recovered = out.record.get("recovery", [])
                lost = {w["address"] for r in recovered for w in r["lost_workers"]}
                ok = (out.exit_code == 0 and out.digests == clean.digests and out.killed in lost)
                survived += ok
                # partitions that had run before the loss and were submitted again
                again = [item for r in recovered for item in r["recomputed"]
                         if item["task"].startswith("partition:") and item["had_finished"]]
                restored = sum(1 for item in again if item.get("restored"))
                totals["restored"] += restored
                totals["ran"] += len(again) - restored
                print(f"{i:3d} {'survived' if ok else 'FAILED  '} exit {out.exit_code} "
                      f"{name} +{delay:.3f} s ({time.monotonic() - t0:.1f} s); finished partitions run again from "
                      f"their inputs {len(again) - restored}, restored from the cache {restored}", flush=True)
                if not ok:
                    print("    " + "\n    ".join(out.stderr[-8:]), flush=True)
        finally:
            cluster.stop()
    print(f"survived/total: {survived}/{i} (config {args.config}, seed {args.seed}; {late} kills came after the "
          "run had ended and were not trials)")
    print(f"finished partitions run again from their inputs: {totals['ran']}, restored from the cache: "
          f"{totals['restored']} (of {kw.STEPS} per run)")
    return 0 if survived == i == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
