"""Hundreds of faults at random moments in real ``hetflow run`` processes, and whether the records stayed true.

Each trial starts the CLI on a workload (a run, a sweep, a sweep with
``--parallel 2``, a run on a local Dask cluster of two workers), and at a
seeded random moment sends it SIGINT, two SIGINTs 10 ms apart, SIGTERM,
SIGHUP or SIGKILL, or closes its stdout or stderr pipe. Afterwards it
checks what ``hetflow runs --json`` says, looks for crash logs, resumes
what did not succeed and compares the outputs with a clean run's
(``tests/faultinject.py`` has the checks). The goals: 0 records that lied,
0 resumes that differed, 0 finished partitions run again, 0 crash logs.

    python bench/faults.py                      # 308 trials, seed 1, one at a time
    python bench/faults.py --jobs 3             # three trials at once: a loaded machine, and faster
    python bench/faults.py --trials 40 --seed 7 --workloads run,sweep-parallel

The counts go to stdout and ``bench/results_faults.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import faultinject as fi  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=308)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workloads", default=",".join(fi.WORKLOADS))
    parser.add_argument("--output", default=str(HERE / "results_faults.json"))
    parser.add_argument("--jobs", type=int, default=1, help="trials run at once")
    args = parser.parse_args(argv)
    workloads = tuple(w for w in args.workloads.split(",") if w)
    unknown = set(workloads) - set(fi.WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(fi.WORKLOADS)}")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="hetflow-faults-") as tmp:
        root = Path(tmp)
        manifests = fi.write_workloads(root / "manifests")
        clean = fi.clean_outputs(manifests, root)

        def one(trial: fi.Trial) -> fi.Verdict:
            verdict = fi.run_trial(trial, manifests, root, clean)
            mark = "ok " if verdict.ok else "BAD"
            problems = verdict.lies + verdict.crash_logs + verdict.resume_differed + verdict.reran
            line = (f"{mark} {trial.index:4d} {trial.workload:<14} {trial.fault:<12} at {trial.delay_s:5.2f} s  "
                    f"exit {verdict.exit_code}  {' '.join(verdict.statuses)}" + (f"  {problems}" if problems else ""))
            sys.stdout.write(line + "\n")  # one write a line: trials run in threads
            sys.stdout.flush()
            _remove(root / f"trial-{trial.index:04d}")
            return verdict

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            verdicts = list(pool.map(one, fi.plan_trials(args.trials, args.seed, workloads)))
    summary = {
        "trials": len(verdicts),
        "seed": args.seed,
        "faults": dict(collections.Counter(v.trial.fault for v in verdicts)),
        "workloads": dict(collections.Counter(v.trial.workload for v in verdicts)),
        "exit_codes": dict(collections.Counter(str(v.exit_code) for v in verdicts)),
        "resumed": sum(v.resumed for v in verdicts),
        "records_that_lied": sum(bool(v.lies) for v in verdicts),
        "resumes_that_differed": sum(bool(v.resume_differed) for v in verdicts),
        "partitions_run_twice": sum(len(v.reran) for v in verdicts),
        "crash_logs": sum(len(v.crash_logs) for v in verdicts),
        "failures": [{"trial": v.trial.__dict__, "lies": v.lies, "crash_logs": v.crash_logs,
                      "resume_differed": v.resume_differed, "reran": v.reran} for v in verdicts if not v.ok],
        "jobs": args.jobs,
        "seconds": round(time.time() - started, 1),
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
    }
    print()
    print(f"trials                 {summary['trials']}")
    print(f"faults by kind         {', '.join(f'{k} {n}' for k, n in sorted(summary['faults'].items()))}")
    print(f"workloads              {', '.join(f'{k} {n}' for k, n in sorted(summary['workloads'].items()))}")
    print(f"exit codes             {', '.join(f'{k}: {n}' for k, n in sorted(summary['exit_codes'].items()))}")
    print(f"resumed                {summary['resumed']}")
    print(f"records that lied      {summary['records_that_lied']}  (goal 0)")
    print(f"resumes that differed  {summary['resumes_that_differed']}  (goal 0)")
    print(f"partitions run twice   {summary['partitions_run_twice']}  (goal 0)")
    print(f"crash logs             {summary['crash_logs']}  (goal 0)")
    print(f"took                   {summary['seconds']} s")
    Path(args.output).write_text(json.dumps(summary, indent=2) + "\n")
    bad = summary["records_that_lied"] + summary["resumes_that_differed"] + summary["partitions_run_twice"] \
        + summary["crash_logs"]
    return 1 if bad else 0


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
