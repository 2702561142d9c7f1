"""`hetflow report` of a big run: whole processes, the report package before and after, in turn.

A run of ``n`` stages (``bench_planner.generate``: two CPU executors,
partitions of 50 stages) is made once; then ``hetflow report`` of it runs
as a whole process, alternately with the report package of
``BEFORE_COMMIT`` (its files from ``git show``, put in place of
``hetflow.engine.report`` before anything imports it; the rest of the
engine is this tree's) and with this tree's. Each row gives the median
wall time of the pairs and both pages' sizes. Before the work of issue 30
the page of 20,000 stages drew every stage, and Graphviz's ``dot`` (where
installed) ran until its 30 s timeout before hetflow's own layout took over.

    python bench/run.py report            # 20,000 stages, 3 pairs
    python bench/run.py report --quick    # 5,000 stages, 1 pair
    HETFLOW_BENCH_REPORT_BEFORE=<commit> python bench/run.py report
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_planner import generate  # noqa: E402

# the last commit before issue 30's report work
BEFORE_COMMIT = os.environ.get("HETFLOW_BENCH_REPORT_BEFORE", "844a6aae9e1436732118242d46b5d0847769dd68")

# run in a fresh interpreter: argv[1] is the report package folder to use ("" for this tree's), the rest the CLI's
_DRIVER = """
import sys
if sys.argv[1]:
    import importlib
    import importlib.util
    import hetflow.engine
    # the modules the old package imports by the names they had before the engine was split into subpackages
    for old, now in (("records", "store.records"), ("runs", "store.runs"), ("planner", "plan.planner")):
        sys.modules.setdefault("hetflow.engine." + old, importlib.import_module("hetflow.engine." + now))
    spec = importlib.util.spec_from_file_location("hetflow.engine.report", sys.argv[1] + "/__init__.py",
                                                  submodule_search_locations=[sys.argv[1]])
    module = importlib.util.module_from_spec(spec)
    sys.modules["hetflow.engine.report"] = module
    spec.loader.exec_module(module)
from hetflow.engine.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _before_package(folder: Path) -> Path | None:
    """``engine/report`` of BEFORE_COMMIT written to ``folder``; None where git cannot give it."""
    try:
        names = subprocess.run(["git", "ls-tree", "--name-only", f"{BEFORE_COMMIT}:engine/report"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.split()
        folder.mkdir(parents=True)
        for name in names:
            blob = subprocess.run(["git", "show", f"{BEFORE_COMMIT}:engine/report/{name}"], cwd=REPO,
                                  capture_output=True, check=True).stdout
            (folder / name).write_bytes(blob)
    except (OSError, subprocess.CalledProcessError):
        return None
    return folder


def _report(package: Path | None, run_id: str, runs_dir: Path, out: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _DRIVER, str(package or ""), "report", run_id, "--runs-dir",
                           str(runs_dir), "-o", str(out)], capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"hetflow report failed: {done.stderr[-2000:]}")
    return took


def run(quick: bool) -> list[dict]:
    from hetflow.engine.cli import main

    n, pairs = (5_000, 1) if quick else (20_000, 3)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifest = root / f"scale-{n}.yaml"
        manifest.write_text(generate(n))
        runs_dir = root / "runs"
        with open(os.devnull, "w") as quiet:
            assert main(["run", str(manifest), "--runs-dir", str(runs_dir), "--quiet"], quiet, quiet) == 0
        run_id = next(p.name for p in runs_dir.iterdir() if (p / "record.json").is_file())
        record_mb = (runs_dir / run_id / "record.json").stat().st_size / 2**20
        before = _before_package(root / "before" / "report")
        before_s, after_s = [], []
        for _ in range(pairs):
            if before is not None:
                before_s.append(_report(before, run_id, runs_dir, root / "before.html"))
            after_s.append(_report(None, run_id, runs_dir, root / "after.html"))
        after_mb = (root / "after.html").stat().st_size / 2**20
        before_mb = (root / "before.html").stat().st_size / 2**20 if before is not None else None
    load = os.getloadavg()[0]
    row = {"name": f"report-{n}-stages", "baseline": f"hetflow report at {BEFORE_COMMIT[:7]}",
           "baseline_s": statistics.median(before_s) if before_s else None,
           "subject": "hetflow report", "subject_s": statistics.median(after_s),
           "ratio": statistics.median(before_s) / statistics.median(after_s) if before_s else None,
           "baseline_mb": before_mb, "subject_mb": after_mb,
           "notes": (f"whole processes, median of {pairs} pairs in turn, load average {load:.1f}; record.json "
                     f"{record_mb:.1f} MB; page {before_mb:.1f} MB before, " if before_mb is not None else
                     f"whole processes, median of {pairs}, load average {load:.1f}; record.json {record_mb:.1f} MB; "
                     "page before not measured (git could not give the old package), ")
                    + f"{after_mb:.2f} MB after; goal <= 3 s and <= 3 MB at 20,000 stages"}
    return [row]


if __name__ == "__main__":
    for r in run("--quick" in sys.argv):
        print(r)
