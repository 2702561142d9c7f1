"""hetflow's per-task overhead against raw Dask on the same 10,000-node graphs.

Two graph shapes of tiny ops (4-element float32 tensors), each built once
as a hetflow manifest and once as a plain Dask graph of numpy calls, both
run on Dask's threaded scheduler in this process:

* ``chain``: ``x0 = ones``, ``x[i] = relu(x[i-1])``;
* ``fan``: one root, 4,999 ``relu`` leaves, an ``add`` tree back to one.

With every stage on one executor, hetflow's planner fuses the graph into
one partition, one Dask task; the ``alternating`` rows pin stage i to
executor ``a`` or ``b`` by parity, so every stage is its own partition
with a bridge to the next: the worst case, where hetflow pays its per-task
cost on every node. On the threaded scheduler a bridge's export and import
run inside its producer's task (``hetflow.engine.run.lowering``, "Folded
bridges"), so that is one Dask task a stage, as raw Dask's chain is. The hetflow time is
``execute`` (lowering, Dask, run record); planning is timed separately.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time

import dask.threaded
import numpy as np

from hetflow.engine.manifest.validate import compile_manifest, loads
from hetflow.engine.plan.planner import plan
from hetflow.engine.run.execute import execute
from hetflow.engine.run.runtime import LocalRuntime
from hetflow.executors import probe

HEAD = "version: 1\nname: {name}\nexecutors:\n  a: {{vendor: cpu}}\n  b: {{vendor: cpu}}\nstages:\n"


def chain(n: int, alternate: bool) -> tuple[str, dict, str]:
    pin = (lambda i: f", executor: {'ab'[i % 2]}") if alternate else (lambda i: ", executor: a" if i == 0 else "")
    lines = [f"  x0: {{op: ones, args: {{shape: [4]}}{pin(0)}}}"]
    dsk: dict = {"x0": (np.ones, 4, np.float32)}
    for i in range(1, n):
        lines.append(f"  x{i}: {{op: relu, inputs: [x{i - 1}]{pin(i)}}}")
        dsk[f"x{i}"] = (np.maximum, f"x{i - 1}", np.float32(0))
    last = f"x{n - 1}"
    return HEAD.format(name="chain") + "\n".join(lines) + f"\noutputs: {{y: {last}}}\n", dsk, last


def fan(n: int) -> tuple[str, dict, str]:
    leaves = n // 2
    lines = ["  r: {op: ones, args: {shape: [4]}, executor: a}"]
    dsk: dict = {"r": (np.ones, 4, np.float32)}
    level = []
    for i in range(leaves):
        lines.append(f"  l{i}: {{op: relu, inputs: [r]}}")
        dsk[f"l{i}"] = (np.maximum, "r", np.float32(0))
        level.append(f"l{i}")
    k = 0
    while len(level) > 1:
        nxt = []
        for j in range(0, len(level) - 1, 2):
            name = f"s{k}"
            k += 1
            lines.append(f"  {name}: {{op: add, inputs: [{level[j]}, {level[j + 1]}]}}")
            dsk[name] = (np.add, level[j], level[j + 1])
            nxt.append(name)
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return HEAD.format(name="fan") + "\n".join(lines) + f"\noutputs: {{y: {level[0]}}}\n", dsk, level[0]


def _relu_then_bridge(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.copy(np.maximum(x, np.float32(0))))


def _ones_then_bridge(n: int) -> np.ndarray:
    return np.asarray(np.copy(np.ones(n, np.float32)))


def lowered_like(n: int) -> tuple[dict, str]:
    """Raw Dask on the graph hetflow lowers the alternating chain to on the threaded scheduler: n + 1 tasks.

    Per stage one task: the stage (``relu``), then its bridge to the next
    stage folded into the same task, an export (the bytes copied out) and
    an import (an array over them); plus the output's export.
    """
    dsk: dict = {"p0": (_ones_then_bridge, 4)}
    for i in range(1, n):
        dsk[f"p{i}"] = (_relu_then_bridge, f"p{i - 1}")
    dsk["out"] = (np.copy, f"p{n - 1}")
    return dsk, "out"


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def measure(label: str, text: str, dsk: dict, last: str, repeats: int, runs_dir: str, per: str = "node") -> dict:
    t0 = time.perf_counter()
    manifest = compile_manifest(loads(text, f"{label}.yaml"))
    p = plan(manifest, probe)
    plan_s = time.perf_counter() - t0
    expected = dask.threaded.get(dsk, last)
    holder = {}

    def run_hetflow():
        # the content-addressed cache's files are a feature of their own, not per-task overhead
        holder["r"] = execute(manifest, p, runs_dir=runs_dir, use_cache=False)

    dask_times, hetflow_times = [], []
    for _ in range(repeats):  # turn about, so both see the same minutes of a shared machine
        dask_times.append(best_of(1, lambda: dask.threaded.get(dsk, last)))
        hetflow_times.append(best_of(1, run_hetflow))
    dask_s, hetflow_s = min(dask_times), min(hetflow_times)
    got = np.load(os.path.join(holder["r"].run_dir, "y.npy"))
    assert np.array_equal(got, expected), f"{label}: hetflow and Dask disagree"
    nodes = len(manifest.stages)
    # the Dask tasks the run ran (a bridge folded into its producer's task is none), not the record's entries
    tasks = len(LocalRuntime(p, {}, fold_bridges=True).graph.dsk)
    entries = len(holder["r"].record["tasks"])
    unit = nodes if per == "node" else tasks
    return {
        "name": label,
        "baseline": f"raw dask ({len(dsk)} tasks)",
        "baseline_s": dask_s,
        "subject": f"hetflow ({tasks} tasks, {entries} task entries in the record)",
        "subject_s": hetflow_s,
        "ratio": dask_s / hetflow_s,
        "notes": (f"{nodes} nodes, {len(p.partitions)} partitions, {len(p.bridges)} bridges; "
                  f"per {per}: dask {dask_s / unit * 1e6:.1f} us, hetflow {hetflow_s / unit * 1e6:.1f} us; "
                  f"validate+plan {plan_s:.2f} s; best of {repeats} turn about; hetflow without the cache; "
                  f"hetflow's warm-up {holder['r'].record['warm_up'][0]['seconds']:.3f} s"),
    }


def paired(label: str, text: str, dsk: dict, last: str, turns: int, runs_dir: str) -> dict:
    """:func:`measure`'s comparison as ``turns`` pairs, raw Dask then hetflow, each pair's ratio its own.

    On a shared machine the best of a few runs per side may come from
    different minutes; a pair's two runs are seconds apart, so the median
    of the pairs' ratios is the steadier figure. CPU seconds of the
    process (``time.process_time``, not counting time the host gave to
    other guests) are compared the same way.
    """
    import statistics

    manifest = compile_manifest(loads(text, f"{label}.yaml"))
    p = plan(manifest, probe)
    dask.threaded.get(dsk, last)
    execute(manifest, p, runs_dir=runs_dir, use_cache=False)
    walls, cpus, rows = [], [], []
    for _ in range(turns):
        w, c = time.perf_counter(), time.process_time()
        dask.threaded.get(dsk, last)
        raw_w, raw_c = time.perf_counter() - w, time.process_time() - c
        w, c = time.perf_counter(), time.process_time()
        execute(manifest, p, runs_dir=runs_dir, use_cache=False)
        het_w, het_c = time.perf_counter() - w, time.process_time() - c
        walls.append(raw_w / het_w)
        cpus.append(raw_c / het_c)
        rows.append((raw_w, het_w))
    return {
        "name": f"{label}, {turns} pairs",
        "baseline": f"raw dask ({len(dsk)} tasks), median pair",
        "baseline_s": statistics.median(r for r, _ in rows),
        "subject": "hetflow, median pair",
        "subject_s": statistics.median(h for _, h in rows),
        "ratio": statistics.median(walls),
        "notes": (f"median of {turns} pairs' wall ratios {statistics.median(walls):.3f} "
                  f"(each {', '.join(f'{r:.2f}' for r in walls)}); CPU seconds {statistics.median(cpus):.3f} "
                  f"(each {', '.join(f'{r:.2f}' for r in cpus)}); hetflow without the cache"),
    }


def witness(chunks: int, repeats: int, runs_dir: str) -> dict:
    """A ``witness`` phase of ``chunks`` chunks against raw Dask running the same ``witness_table`` calls.

    The guest hashes 4 KiB with SHA-256; ``chunk_steps`` is set from a
    first run's step count so that the phase has ``chunks`` chunks. Both
    sides are the span of the chunk tasks on the threaded scheduler:
    hetflow's from the record (first chunk start to last chunk end), raw
    Dask's the ``get`` of a graph of one ``witness_table`` task per chunk.
    """
    from pathlib import Path

    from hetflow.executors.emulator import execute as emulate, load_elf, witness_table

    guest = Path(__file__).resolve().parent.parent / "examples" / "guests" / "sha256.elf"
    data = bytes(range(256)) * 16
    with open(os.path.join(runs_dir, "input.bin"), "wb") as f:
        f.write(data)
    program = load_elf(str(guest))
    steps = emulate(program, input=data, runners=False).steps
    chunk = -(-steps // chunks)
    text = ("version: 1\nname: witness-overhead\nemulators:\n"
            f"  guest: {{isa: rv64ima, backend: fast, program: '{guest}', input: input.bin, chunk_steps: {chunk}}}\n"
            "executors:\n  host: {vendor: cpu}\nstages:\n"
            "  run: {phase: execute, emulator: guest}\n  trace: {phase: witness, inputs: [run]}\n"
            "  column_max: {op: max, inputs: [trace], args: {axis: 0}, executor: host}\n"
            "outputs: {steps: run.steps, column_max: column_max}\n")
    manifest = compile_manifest(loads(text, os.path.join(runs_dir, "witness.yaml")))
    p = plan(manifest, probe)
    traces = emulate(program, input=data, chunk_steps=chunk, runners=False).min_traces
    dsk = {f"w{i}": (functools.partial(witness_table, input_size=len(data)), program, t) for i, t in enumerate(traces)}
    keys = list(dsk)
    raw, het = [], []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        dask.threaded.get(dsk, keys)
        raw.append(time.perf_counter() - t0)
        r = execute(manifest, p, runs_dir=runs_dir, use_cache=False)
        ev = [e for e in r.record["events"] if e["event"] == "finished" and e["kind"] == "witness"]
        het.append(max(e["end"] for e in ev) - min(e["start"] for e in ev))
    raw_s, het_s = min(raw[1:]), min(het[1:])  # the first turn loads the compiled loop
    return {"name": f"witness-{len(traces)}-chunks", "baseline": f"raw dask ({len(traces)} witness_table tasks)",
            "baseline_s": raw_s, "subject": f"hetflow witness phase ({len(ev)} tasks)", "subject_s": het_s,
            "ratio": raw_s / het_s,
            "notes": (f"SHA-256 of {len(data)} bytes, {steps} steps in chunks of {chunk}; per chunk: dask "
                      f"{raw_s / len(traces) * 1e6:.1f} us, hetflow {het_s / len(traces) * 1e6:.1f} us; "
                      f"span of the chunk tasks, best of {repeats} turn about after a warm-up turn")}


def blocks(n: int, partitions: int) -> str:
    """``n`` trivial stages in one chain, cut into ``partitions`` blocks alternating between two executors."""
    block = n // partitions
    lines = ["version: 1", f"name: scale-{n}", "executors:", "  e0: {vendor: cpu}", "  e1: {vendor: cpu}", "stages:",
             "  s0: {op: ones, args: {shape: [8, 8]}, executor: e0}"]
    for i in range(1, n):
        pin = f", executor: e{(i // block) % 2}" if i % block == 0 else ""
        lines.append(f"  s{i}: {{op: relu, inputs: [s{i - 1}]{pin}}}")
    lines.append(f"outputs: {{y: s{n - 1}}}")
    return "\n".join(lines) + "\n"


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ``python -c`` code running the CLI of the source tree given as its first argument, folders mapped onto the
# ``hetflow`` packages as setup.py maps them: a checkout (this one, or an earlier commit's worktree) runs as it
# is, whatever is installed.
TREE_FINDER = """import importlib.util, os, sys
root = sys.argv.pop(1)
folders = {"hetflow": "hetflow", "hetflow.engine": "engine", "hetflow.executors": "executors",
           "hetflow.schemas": "schemas", "hetflow.examples": "examples", "hetflow.pipelines": "pipelines"}
class Tree:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in folders:
            return None
        folder = os.path.join(root, folders[name])
        init = os.path.join(folder, "__init__.py")
        if os.path.exists(init):
            return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[folder])
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [folder]
        return spec
sys.meta_path.insert(0, Tree)
"""
_FROM_TREE = TREE_FINDER + "from hetflow.engine.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def rows_in_tree(root: str, module: str, call: str) -> list[dict]:
    """The rows ``MODULE.CALL`` returns (a bench module beside this one), made in a process whose ``hetflow`` is
    the source tree ``root``: an earlier commit's files, for before and after in one sitting."""
    import json
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    code = (TREE_FINDER + f"sys.path.insert(0, {here!r})\n"
            f"import json, {module}\nprint(json.dumps({module}.{call}))\n")
    done = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True,
                          cwd=os.path.dirname(here))
    if done.returncode != 0:
        raise RuntimeError(f"rows from {root} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _cli_s(root: str, argv: list[str], what: str) -> tuple[float, float]:
    """Seconds of one whole ``hetflow ARGV`` process, hetflow taken from the source tree ``root``: wall-clock
    and CPU (user + system; on a machine others share, the CPU time moves less with their load)."""
    import resource
    import subprocess
    import sys

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _FROM_TREE, root, *argv], capture_output=True, text=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"hetflow {what} ({root}) failed: {done.stderr[-2000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cli_commands(path: str, runs_dir: str) -> list[tuple[str, list[str]]]:
    return [("plan --format json", ["plan", path, "--format", "json", "-o", path + ".plan.json", "--runs-dir", runs_dir]),
            ("run", ["run", path, "--runs-dir", runs_dir, "--quiet", "--no-cache"])]


def cli_scale(n: int, partitions: int, runs_dir: str) -> list[dict]:
    """``hetflow plan --format json`` and ``hetflow run`` of a ``n``-stage manifest, each a whole CLI process.

    The baseline is the budget of the goal, 10 s at 100,000 stages
    (0.1 ms a stage); the ratio is budget / time.
    """
    path = os.path.join(runs_dir, f"scale-{n}.yaml")
    with open(path, "w") as f:
        f.write(blocks(n, partitions))
    budget = 10.0 * n / 100_000
    rows = []
    for what, argv in _cli_commands(path, runs_dir):
        took, cpu = _cli_s(REPO, argv, what)
        rows.append({"name": f"hetflow {what}, {n} stages, {partitions} partitions",
                     "baseline": f"goal: {budget:g} s", "baseline_s": budget, "subject": f"hetflow {what} (CLI process)",
                     "subject_s": took, "ratio": budget / took,
                     "notes": ("a whole CLI process: start-up, load, validate, plan and its output or the run and its "
                               f"record; {cpu:.1f} s of CPU")})
    return rows


def cli_side_by_side(before: str, n: int = 100_000, partitions: int = 100, turns: int = 3,
                     commands: tuple[str, ...] = ("plan --format json", "run")) -> list[dict]:
    """The CLI processes of :func:`cli_scale` from the source tree ``before`` (an earlier commit's worktree)
    and from this one, taking turns; the median of ``turns`` each. The ratio is before / after.
    ``commands`` picks which of them (``"run"`` alone: ``commands=("run",)``)."""
    import statistics

    rows = []
    with tempfile.TemporaryDirectory() as runs_dir:
        path = os.path.join(runs_dir, f"scale-{n}.yaml")
        with open(path, "w") as f:
            f.write(blocks(n, partitions))
        for what, argv in _cli_commands(path, runs_dir):
            if what not in commands:
                continue
            times: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
            for i in range(turns):
                for side, root in sorted({"before": before, "after": REPO}.items(), reverse=i % 2 == 1):
                    times[side].append(_cli_s(root, argv, what))
            b, a = (statistics.median(t for t, _ in times[side]) for side in ("before", "after"))
            cpu = {side: statistics.median(c for _, c in times[side]) for side in times}
            rows.append({"name": f"hetflow {what}, {n} stages, {partitions} partitions, before and after",
                         "baseline": f"before ({before})", "baseline_s": b, "subject": "after (this tree)",
                         "subject_s": a, "ratio": b / a,
                         "notes": (f"whole CLI processes, turn about, median of {turns}: before "
                                   f"{', '.join(f'{t:.1f}' for t, _ in times['before'])} s, after "
                                   f"{', '.join(f'{t:.1f}' for t, _ in times['after'])} s; median CPU "
                                   f"{cpu['before']:.1f} s before, {cpu['after']:.1f} s after")})
    return rows


# ``python -c`` code (after TREE_FINDER) timing what ``hetflow plan --format json`` does once the planner has
# returned, in the source tree given: the cache status, the plan's data, its JSON text and the file, as
# cmd_plan does them there; then each part alone, and the manifest digest's canonical text. Best of the
# turns, CPU seconds, as JSON on standard output.
_POST_PLAN = TREE_FINDER + """import json, tempfile, time
from hetflow.engine import api, results
from hetflow.engine.run import clusters
from hetflow.engine.manifest.resolve import canonical_json
path, turns = sys.argv[1], int(sys.argv[2])
manifest = api.compile_manifest(api.load(path), {})
made = clusters.plan_on(manifest, None, None)
runs = tempfile.mkdtemp()

def post_plan():
    with api.gc_paused():
        plan = results.Plan(made, None, api._cache_status(manifest, made, None, runs, None))
    data = plan.json_bytes() if hasattr(plan, "json_bytes") else plan.dumps().encode()
    with open(os.path.join(runs, "plan.json"), "wb") as f:
        f.write(data)

parts = {"post-plan": post_plan, "cache status": lambda: api._cache_status(manifest, made, None, runs, None),
         "plan data": lambda: made.to_json(explain=True), "manifest digest text": lambda: canonical_json(manifest.resolved)}
best = {}
for name, fn in parts.items():
    times = []
    for _ in range(turns):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    best[name] = min(times)
print(json.dumps(best))
"""


def _in_both_trees(before: str, script: str, what: str, n: int, partitions: int, turns: int,
                   processes: int) -> dict[str, list]:
    """Run ``python -c script ROOT MANIFEST TURNS`` in the source tree ``before`` and in this one, ``processes``
    times each, turn about, on the ``n``-stage manifest; each process's last line of JSON, per side."""
    import json
    import subprocess
    import sys

    got: dict[str, list] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"scale-{n}.yaml")
        with open(path, "w") as f:
            f.write(blocks(n, partitions))
        for i in range(processes):
            for side, root in sorted({"before": before, "after": REPO}.items(), reverse=i % 2 == 1):
                done = subprocess.run([sys.executable, "-c", script, root, path, str(turns)],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"{what} timing ({root}) failed: {done.stderr[-2000:]}")
                got[side].append(json.loads(done.stdout.splitlines()[-1]))
    return got


def post_plan_side_by_side(before: str, n: int = 100_000, partitions: int = 100, turns: int = 3) -> list[dict]:
    """CPU seconds of what ``plan --format json`` does after the planner (cache keys and status, the plan's
    data, its JSON, the file), in the source tree ``before`` and in this one, one process each in one run;
    best of ``turns`` per part. The ratio is before / after."""
    got = _in_both_trees(before, _POST_PLAN, "post-plan", n, partitions, turns, processes=1)
    best = {side: runs[0] for side, runs in got.items()}
    b, a = best["before"], best["after"]
    return [{"name": f"hetflow plan --format json after the planner, {n} stages, {partitions} partitions, before and after",
             "baseline": f"before ({before})", "baseline_s": b["post-plan"], "subject": "after (this tree)",
             "subject_s": a["post-plan"], "ratio": b["post-plan"] / a["post-plan"],
             "notes": (f"CPU seconds, best of {turns}, one process per tree; parts before -> after: "
                       + ", ".join(f"{k} {b[k]:.3f} -> {a[k]:.3f}" for k in b if k != "post-plan"))}]


# ``python -c`` code (after TREE_FINDER) timing load and compile_manifest (resolve + validate) of a file in the
# source tree given, CPU seconds: the first turn (with the one-off set-up a CLI process pays: the schema's
# validators, the op registry) and the best of the turns, as JSON on standard output.
_LOAD_VALIDATE = TREE_FINDER + """import json, time
from hetflow.engine.manifest.validate import compile_manifest, load
path, turns = sys.argv[1], int(sys.argv[2])
runs = []
for _ in range(turns):
    t0 = time.process_time()
    doc = load(path)
    t1 = time.process_time()
    compile_manifest(doc)
    runs.append((t1 - t0, time.process_time() - t1))
    del doc
print(json.dumps({"first": sum(runs[0]), "load": min(l for l, _ in runs), "validate": min(v for _, v in runs),
                  "best": min(l + v for l, v in runs)}))
"""


def load_validate_side_by_side(before: str, n: int = 100_000, partitions: int = 100, turns: int = 3,
                               processes: int = 3) -> list[dict]:
    """CPU seconds of load + resolve + validate (``load`` then ``compile_manifest``) of the ``n``-stage manifest, in
    the source tree ``before`` and in this one: ``processes`` processes per tree, turn about, each the best of
    ``turns``; the row takes the median process. The ratio is before / after."""
    import statistics

    got = _in_both_trees(before, _LOAD_VALIDATE, "load + validate", n, partitions, turns, processes)
    med = {side: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for side, runs in got.items()}
    b, a = med["before"], med["after"]
    return [{"name": f"load + resolve + validate, {n} stages, {partitions} partitions, before and after",
             "baseline": f"before ({before})", "baseline_s": b["best"], "subject": "after (this tree)",
             "subject_s": a["best"], "ratio": b["best"] / a["best"],
             "notes": (f"CPU seconds, median of {processes} processes per tree taken turn about, each the best of "
                       f"{turns}: load {b['load']:.2f} -> {a['load']:.2f}, resolve + validate {b['validate']:.2f} -> "
                       f"{a['validate']:.2f}; a process's first turn (its one-off set-up too) {b['first']:.2f} -> "
                       f"{a['first']:.2f}")}]


# ``python -c`` code (after TREE_FINDER) timing ``hetflow.engine.plan.planner.plan`` of a compiled manifest in the
# source tree given: CPU seconds of each of the turns, as JSON on standard output.
_PLANNER = TREE_FINDER + """import json, time
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan
from hetflow.executors import probe
path, turns = sys.argv[1], int(sys.argv[2])
manifest = compile_manifest(load(path))
runs = []
for _ in range(turns):
    t0 = time.process_time()
    made = plan(manifest, probe)
    runs.append(time.process_time() - t0)
    del made
print(json.dumps(runs))
"""


def planner_side_by_side(before: str, n: int = 100_000, partitions: int = 100, turns: int = 3,
                         processes: int = 3) -> list[dict]:
    """CPU seconds of the planner alone (``planner.plan`` of the compiled ``n``-stage manifest) in the source tree
    ``before`` and in this one: ``processes`` processes per tree, turn about, each ``turns`` plans; the row takes
    the best plan of each tree. The ratio is before / after."""
    got = _in_both_trees(before, _PLANNER, "planner", n, partitions, turns, processes)
    best = {side: [min(r) for r in runs] for side, runs in got.items()}
    b, a = min(best["before"]), min(best["after"])
    return [{"name": f"planner.plan, {n} stages, {partitions} partitions, before and after",
             "baseline": f"before ({before})", "baseline_s": b, "subject": "after (this tree)",
             "subject_s": a, "ratio": b / a,
             "notes": (f"CPU seconds of hetflow.engine.plan.planner.plan on the compiled manifest, {processes} processes "
                       f"per tree taken turn about, {turns} plans each; each process's best: before "
                       f"{', '.join(f'{t:.2f}' for t in best['before'])} s, after "
                       f"{', '.join(f'{t:.2f}' for t in best['after'])} s")}]

def run(quick: bool) -> list[dict]:
    n = 1000 if quick else 10_000
    repeats = 1 if quick else 3
    with tempfile.TemporaryDirectory() as runs_dir:
        text, _, last = chain(n, alternate=True)
        return [
            measure(f"chain-{n}", *chain(n, alternate=False), repeats, runs_dir),
            measure(f"fan-{n}", *fan(n), repeats, runs_dir),
            measure(f"chain-{n}-alternating", *chain(n, alternate=True), repeats, runs_dir),
            measure(f"chain-{n}-alternating, same graph", text, *lowered_like(n), repeats, runs_dir, per="task"),
            paired(f"chain-{n}-alternating, same graph", text, *lowered_like(n), 2 if quick else 8, runs_dir),
            witness(100 if quick else 1000, repeats, runs_dir),
            *cli_scale(10_000 if quick else 100_000, 100, runs_dir),
        ]
