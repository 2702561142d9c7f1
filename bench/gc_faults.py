"""``runs gc`` beside runs that take and store cache entries, and gc killed at random moments.

Two campaigns, each counting what a user would call a lie of the cache:

* ``beside``: one process runs a two-executor chain with the cache over
  and over (in-process, ``hetflow.run``), while another process runs
  ``hetflow runs gc --keep 1`` in a loop. After each run, every cache
  entry its record names must be there: gc keeps the newest run and the
  entries it names, so an entry missing is one gc removed from under a
  run (taken, or stored, while gc ran).
* ``killed``: a ``hetflow run`` process and a ``hetflow runs gc --keep 0``
  process started a seeded random moment apart, gc SIGKILLed a seeded
  random moment later. After each round, every entry the cache lists
  must load whole (its files and digests), and once all rounds are done
  nothing a killed gc moved aside may be left beyond a minute.

Prints the problems of each; the goal is none.

    python bench/gc_faults.py [--runs N] [--rounds N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "hetflow.engine.cli"]


def manifest(folder: Path, stages: int, size: int) -> Path:
    lines = ["version: 1", "name: gcchain", "params: {k: 1}", "executors: {h: {vendor: cpu}, g: {vendor: cpu}}",
             "stages:", f"  z: {{op: full, args: {{shape: [{size}], value: \"${{k}}\"}}, executor: h}}"]
    lines += [f"  s{i}: {{op: relu, inputs: [{'z' if i == 0 else f's{i - 1}'}], executor: {'gh'[i % 2]}}}"
              for i in range(stages)]
    lines.append(f"outputs: {{y: s{stages - 1}}}")
    path = folder / "gcchain.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def beside(folder: Path, runs_count: int) -> list[str]:
    import hetflow
    from hetflow.engine.store.cache import Cache

    path, runs = manifest(folder, 3, 2), folder / "runs"
    gc = subprocess.Popen([sys.executable, "-c", (
        "import io, sys\nfrom hetflow.engine.cli import main\nwhile True:\n"
        f"    main(['runs', 'gc', '--keep', '1', '--runs-dir', {str(runs)!r}], out=io.StringIO(), err=io.StringIO())\n")])
    problems, done = [], 0
    cache = Cache(str(runs / ".cache"))
    try:
        while done < runs_count:
            try:
                run = hetflow.run(path, runs_dir=runs)
            except hetflow.LockHeld:  # gc holds the run lock of the unit it removes: a run then exits 4
                time.sleep(0.01)
                continue
            done += 1
            record = json.loads(Path(run.record_path).read_text())
            named = {entry["key"] for entry in record["cache"]["keys"].values()}
            missing = sorted(key for key in named if not cache.has(key))
            if missing:
                problems.append(f"run {run.run_id}: {len(missing)} of the {len(named)} entries it names are gone")
    finally:
        gc.kill()
        gc.wait()
    return problems


def killed(folder: Path, rounds: int, rng: random.Random) -> list[str]:
    from hetflow.engine.store.cache import Cache

    path, runs = manifest(folder, 12, 200_000), folder / "runs"
    problems = []
    for r in range(rounds):
        run = subprocess.Popen(CLI + ["run", str(path), "--runs-dir", str(runs), "--quiet", "-p", f"k={rng.randint(1, 3)}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.0, 0.6))
        gc = subprocess.Popen(CLI + ["runs", "gc", "--keep", "0", "--runs-dir", str(runs)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 0.7))
        gc.send_signal(signal.SIGKILL)
        gc.wait()
        _, err = run.communicate()
        if run.returncode not in (0, 4):
            problems.append(f"round {r}: the run exited {run.returncode}: {err.decode()[-200:]}")
        cache = Cache(str(runs / ".cache"))
        for key in cache.keys():
            if cache.load(key) is None:
                problems.append(f"round {r}: entry {key} is listed but does not load: {cache.damaged.get(key)}")
    time.sleep(61)  # what a killed gc moved aside goes with the next gc a minute after its move
    subprocess.run(CLI + ["runs", "gc", "--keep", "0", "--runs-dir", str(runs)], capture_output=True, check=True)
    left = sorted(p.name for p in (runs / ".cache").glob("*/.tmp-*"))
    if left:
        problems.append(f"left aside after the last gc: {left}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs of the beside campaign")
    parser.add_argument("--rounds", type=int, default=40, help="rounds of the killed campaign")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="hetflow-gc-faults-") as tmp:
        for name, campaign in (("beside", lambda f: beside(f, args.runs)),
                               ("killed", lambda f: killed(f, args.rounds, random.Random(args.seed)))):
            folder = Path(tmp) / name
            folder.mkdir()
            began = time.monotonic()
            problems = campaign(folder)
            print(f"{name}: {len(problems)} problems ({time.monotonic() - began:.0f} s)")
            for line in problems:
                print(f"  {line}")
            failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
