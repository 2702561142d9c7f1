"""Small runs in one process: what each run pays besides its work (issue 30, "Small runs").

* ``quickstart``: a warm in-process ``hetflow.run("examples/quickstart.yaml",
  cache=False)`` (load, validate, plan, run, record, outputs) against the
  same computation in numpy (the same generators and seeds, the same
  formulas as the CPU executor's ops, the bf16 cast through ml_dtypes);
  the outputs are checked equal. Goal: within 3x (ratio >= 0.33).
* ``chain``: the 100-stage chain alternating between two CPU executors
  (``bench_distributed``'s threaded row: 100 partitions, 99 bridges, the
  record's 299 task entries) against raw Dask on a chain of as many tiny
  numpy tasks as the record lists (299), and against raw Dask doing one
  task a stage (100). Goal: >= 0.83.
* ``git``: the manifest's git state asked of ``git`` against its answer
  from the process's cache (:func:`hetflow.engine.store.records.provenance`),
  for a manifest in a dirty checkout.

Every row is pairs taken turn about (baseline, then hetflow), the median
of each side; ratio = baseline / hetflow. ``python bench/bench_small_runs.py
--before TREE`` runs the same rows from another source tree (an earlier
commit's files, e.g. ``git archive HEAD | tar -x -C TREE``) and from this
one, processes in turn, for before/after figures. ``--manifest PATH`` times
the ``quickstart`` and ``durable_writes`` rows on a copy of the quickstart
outside any git checkout (``cp examples/quickstart.yaml /tmp/qs.yaml``): in
this checkout a run also asks for the manifest's git state. The runs'
folders are made under ``bench/.cache`` (``--runs-in DIR`` for another
folder), where ``hetflow run``'s ``./runs`` would be, and each row's notes
say what making a file costs there and in the system's temporary folder.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --manifest (or this variable, which the processes of --before inherit) times a copy outside any git checkout:
# a run of a manifest inside one also asks git for its state, which is not what the row is about
QUICKSTART = os.environ.get("HETFLOW_BENCH_QUICKSTART") or os.path.join(REPO, "examples", "quickstart.yaml")
# The runs go where a user's go by default, ./runs beside the work, not to the system's temporary folder, which
# may be another file system (tmpfs, a disk of its own). A run makes five files, and on the development machine
# making one moved from 12 us to 0.1-0.3 ms within minutes, in either folder: each row's notes say what it cost
# in both while the rows ran. --runs-in (or this variable) picks another folder.
RUNS_IN = os.environ.get("HETFLOW_BENCH_RUNS_IN") or os.path.join(REPO, "bench", ".cache")


def quickstart_numpy() -> tuple[np.ndarray, np.ndarray]:
    """The quickstart's computation in numpy: what its stages compute, without hetflow."""
    import ml_dtypes

    def normal(shape, seed, std=1.0):
        return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(0.0)

    x = normal((64, 128), 7)
    h = np.matmul(x, normal((128, 256), 1, 0.1))
    a = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h * h * h)))
    logits = np.matmul(a, normal((256, 10), 2, 0.1))
    e = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
    probs = e / np.sum(e, axis=-1, keepdims=True)
    return probs, probs.astype(ml_dtypes.bfloat16)


def _pairs(turns: int, baseline, subject) -> tuple[list[float], list[float]]:
    base, subj = [], []
    for _ in range(turns):
        t = time.perf_counter()
        baseline()
        base.append(time.perf_counter() - t)
        t = time.perf_counter()
        subject()
        subj.append(time.perf_counter() - t)
    return base, subj


def _row(name: str, baseline: str, base: list[float], subject: str, subj: list[float], notes: str) -> dict:
    b, s = statistics.median(base), statistics.median(subj)
    # the best of each side too: on a shared machine a median moves with the others' load, a best less
    best = f"best: {min(base) * 1e3:.3f} ms against {min(subj) * 1e3:.3f} ms, ratio {min(base) / min(subj):.3f}"
    return {"name": name, "baseline": baseline, "baseline_s": b, "subject": subject, "subject_s": s,
            "ratio": b / s, "best_ratio": min(base) / min(subj),
            "notes": f"median of {len(base)} pairs taken turn about ({best}); {notes}"}


def quickstart(turns: int, runs_dir: str) -> dict:
    import hetflow

    def run() -> None:
        hetflow.run(QUICKSTART, runs_dir=runs_dir, cache=False)

    for _ in range(5):  # warm: imports, the op registry, the inventory, the thread pool
        run()
        quickstart_numpy()
    done = hetflow.run(QUICKSTART, runs_dir=runs_dir, cache=False)
    probs, bf16 = quickstart_numpy()
    got = np.load(os.path.join(done.path, "probs.npy"))
    assert np.allclose(got, probs, rtol=1e-5, atol=1e-7), "hetflow and numpy disagree on probs"
    base, subj = _pairs(turns, quickstart_numpy, run)
    return _row("quickstart, warm in-process run", "the same computation in numpy", base,
                "hetflow.run(cache=False): load, validate, plan, run, record, outputs", subj,
                f"{len(done.record['tasks'])} task entries; hetflow warm-up "
                f"{done.record['warm_up'][0]['seconds']:.4f} s")


def chain(turns: int, runs_dir: str, stages: int = 100) -> list[dict]:
    import dask.threaded

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_distributed import _raw_chain, alternating

    from hetflow.engine.manifest.validate import compile_manifest, loads
    from hetflow.engine.plan.planner import plan as make_plan
    from hetflow.engine.run.execute import execute
    from hetflow.executors import probe

    m = compile_manifest(loads(alternating(stages), os.path.join(runs_dir, "alt.yaml")))
    p = make_plan(m, probe)
    first = execute(m, p, runs_dir=runs_dir, use_cache=False)
    entries = len(first.record["tasks"])
    rows = []
    for tasks in (entries, stages):
        dsk = _raw_chain(tasks)
        last = f"t{tasks - 1}"
        dask.threaded.get(dsk, last)
        base, subj = _pairs(turns, lambda: dask.threaded.get(dsk, last),
                            lambda: execute(m, p, runs_dir=runs_dir, use_cache=False))
        rows.append(_row(f"chain of {stages} stages alternating between 2 executors, against {tasks} raw tasks",
                         f"dask.threaded.get, a chain of {tasks} tiny numpy tasks", base,
                         f"hetflow execute, threaded, without the cache ({entries} task entries in the record)", subj,
                         f"{len(p.partitions)} partitions, {len(p.bridges)} bridges; the whole run with its record"))
    return rows


def git_lookup(turns: int) -> list[dict]:
    """A manifest in a checkout of 600 files in 40 folders, clean and dirty: its git state asked of git
    (a process's first question) against the answer the process keeps (while the watch on the tree, or
    the stat of its files, says nothing changed)."""
    from hetflow.engine.store import records

    try:
        from hetflow.engine.store import gitstate
    except ImportError:  # a tree from before the watched answers (--before): its rows end here
        return []
    folder = tempfile.mkdtemp(prefix="hetflow-bench-git-")
    try:
        def git(*args: str) -> None:
            subprocess.run(["git", "-C", folder, "-c", "user.email=b@example.com", "-c", "user.name=b", *args],
                           check=True, capture_output=True)

        git("init", "-q")
        for d in range(40):
            os.makedirs(os.path.join(folder, "src", f"d{d}"))
            for f in range(15):
                with open(os.path.join(folder, "src", f"d{d}", f"f{f}.py"), "w") as out:
                    out.write(f"x = {d * 15 + f}\n")
        path = os.path.join(folder, "p.yaml")
        with open(path, "w") as f:
            f.write("version: 1\n")
        git("add", "-A")
        git("commit", "-q", "-m", "p")

        def asked() -> None:  # what a process's first run pays
            gitstate._ask_git(path, folder)

        rows = []
        for tree in ("clean", "dirty"):
            if tree == "dirty":
                with open(os.path.join(folder, "untracked.txt"), "w") as f:
                    f.write("dirty\n")
            for _ in range(3):  # the second question starts watching the tree
                assert records.provenance(path)["git"]["dirty"] == (tree == "dirty")
            base, subj = _pairs(turns, asked, lambda: records.provenance(path))
            rows.append(_row(f"a run's git state, {tree} checkout (601 files)", "asked of git (one status)", base,
                             "kept while the tree's watch says nothing changed", subj, "records.provenance"))
        return rows
    finally:
        gitstate.forget()
        shutil.rmtree(folder, ignore_errors=True)


def durable_writes(turns: int, runs_dir: str) -> dict:
    """What the quickstart's run writes, alone: the floor under the warm run's time on this disk.

    The run's folder, its lock file (made and removed), the ``running``
    record (temporary file, fsync, rename), then the two outputs and the
    final record written together (their fsyncs at once, the record
    renamed last): the files and syncs a run whose record must survive a
    crash cannot skip, with the quickstart's record and outputs, against
    the same computation in numpy.
    """
    import json

    import hetflow
    from hetflow.engine.store import records
    from hetflow.engine.store.locks import RunLock, lock_path

    done = hetflow.run(QUICKSTART, runs_dir=runs_dir, cache=False)
    record = json.loads(open(done.record_path, encoding="utf-8").read())
    outputs = {name: np.load(os.path.join(done.path, entry["file"])) for name, entry in record["outputs"].items()}

    def writes() -> None:
        run_id, folder = records.new_run_dir(runs_dir, "floor", "sha256:0")
        with RunLock(lock_path(runs_dir, QUICKSTART, "floor", {})):
            path = os.path.join(folder, "record.json")
            records.write_json_atomic(path, {**record, "status": "running"})
            records.write_together([*((os.path.join(folder, f"{n}.npy"), records.npy_writer(a))
                                      for n, a in outputs.items()), (path, records.json_writer(record))],
                                   fresh=len(outputs))

    base, subj = _pairs(turns, quickstart_numpy, writes)
    return _row("a run's durable writes alone (the quickstart's)", "the same computation in numpy", base,
                "folder, lock, running record, outputs and final record with their fsyncs", subj,
                f"{len(outputs)} outputs; the floor the warm quickstart row stands on: 3x numpy is "
                f"{3 * statistics.median(base) * 1e3:.2f} ms")


def create_cost(folder: str, files: int = 60) -> float:
    """The median seconds to make (``O_CREAT | O_EXCL``) and close a file in a new folder under ``folder``: what
    each of a run's files costs before any byte is written."""
    times = []
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-create-", dir=folder) as here:
        for i in range(files):
            t = time.perf_counter()
            os.close(os.open(os.path.join(here, f"f{i}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def run(quick: bool) -> list[dict]:
    turns = 15 if quick else 60
    os.makedirs(RUNS_IN, exist_ok=True)

    def costs() -> str:
        return f"{create_cost(RUNS_IN) * 1e6:.0f} us there, {create_cost(tempfile.gettempdir()) * 1e6:.0f} us"

    first = costs()
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-small-", dir=RUNS_IN) as runs_dir:
        rows = [quickstart(turns, runs_dir), durable_writes(turns, runs_dir), *chain(turns, runs_dir)]
    where = f"runs in {RUNS_IN}; a file made before the rows: {first} in {tempfile.gettempdir()}; after: {costs()}"
    for row in rows:
        row["notes"] += f"; {where}"
    return rows + git_lookup(max(5, turns // 4))


def _in_tree(root: str, quick: bool) -> list[dict]:
    """:func:`run` in a process whose ``hetflow`` is the source tree ``root`` (``bench_overhead.TREE_FINDER``)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_overhead import rows_in_tree

    return rows_in_tree(root, "bench_small_runs", f"run({quick!r})")


def before_after(before: str, processes: int, quick: bool) -> None:
    """Each row from the tree ``before`` and from this one, ``processes`` processes each, turn about; prints the
    median ratio per row and side."""
    got: dict[str, list[list[dict]]] = {"before": [], "after": []}
    for i in range(processes):
        for side, root in sorted({"before": before, "after": REPO}.items(), reverse=i % 2 == 1):
            got[side].append(_in_tree(root, quick))
    for k, row in enumerate(got["after"][0]):
        line = [row["name"]]
        for side in ("before", "after"):
            rows = [r[k] for r in got[side] if k < len(r)]
            if rows:
                line.append(f"{side}: ratio {statistics.median(r['ratio'] for r in rows):.3f}, best "
                            f"{statistics.median(r['best_ratio'] for r in rows):.3f} "
                            f"({statistics.median(r['subject_s'] for r in rows) * 1e3:.2f} ms against "
                            f"{statistics.median(r['baseline_s'] for r in rows) * 1e3:.2f} ms)")
        print(" | ".join(line))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another source tree to run the same rows from, turn about")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--manifest", help="the quickstart's manifest to time (default: examples/quickstart.yaml), "
                                           "e.g. a copy outside any git checkout")
    parser.add_argument("--runs-in", help="the folder the runs' folders are made in (default: bench/.cache, on the "
                                          "checkout's file system, as ./runs would be)")
    args = parser.parse_args()
    if args.runs_in:
        os.environ["HETFLOW_BENCH_RUNS_IN"] = RUNS_IN = os.path.abspath(args.runs_in)
    if args.manifest:
        os.environ["HETFLOW_BENCH_QUICKSTART"] = QUICKSTART = os.path.abspath(args.manifest)
    if args.before:
        before_after(args.before, args.processes, args.quick)
    else:
        for row in run(args.quick):
            print(f"{row['name']}: {row['baseline']} {row['baseline_s'] * 1e3:.3f} ms, {row['subject']} "
                  f"{row['subject_s'] * 1e3:.3f} ms, ratio {row['ratio']:.3f}; {row['notes']}")
