"""The witness table of a run: assembled in place, against ``np.copyto`` of its bytes (issue 31).

A SHA-256 guest of about 1.6 M steps, 49 chunks of 32,768 steps, runs
``hetflow.run`` in-process (the threaded scheduler) with a ``witness``
phase and a CPU stage that reads the table (``max`` over axis 0), in a
fresh process of its own so that its peak memory (``ru_maxrss``) is the
run's. From the run's record it takes:

* **assembling**: from the end of the last chunk's task to the end of the
  import of the table onto the CPU executor (the ``phase:trace`` task that
  hands the table on, and the bridge's import), against ``np.copyto`` of
  as many bytes into fresh memory (page faults included, as the table's
  first touch has them), timed in another fresh process in turn;
* **peak memory** against the table's bytes;
* **the plan's estimate** of the phases against their run.

``--before DIR`` runs the same against another checkout (``git worktree
add DIR REV``), for the before column.

``--cluster`` (:func:`measure_cluster`; its row is ``bench_emulator``'s
cluster row) runs the witness phase of a longer SHA-256 guest (52 KiB,
4,551 chunks of 1,024 steps) on local clusters of 1 and 2 worker
processes, in pairs that take turns, and then as the planner places it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GUESTS = HERE.parent / "examples" / "guests"
INPUT_BYTES = 18_432          # about 1.6 M steps of sha256.elf
CHUNK = 1 << 15

_CHILD = r"""
import json, os, resource, sys, time
import numpy as np
import hetflow
folder, program, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = ("version: 1\nname: witness-gather\nemulators:\n"
        f"  guest: {{isa: rv64ima, backend: fast, program: '{program}', input: input.bin, chunk_steps: {chunk}, "
        "max_steps: 4000000}\n"
        "executors:\n  host: {vendor: cpu}\nstages:\n"
        "  run: {phase: execute, emulator: guest}\n  trace: {phase: witness, inputs: [run]}\n"
        "  column_max: {op: max, inputs: [trace], args: {axis: 0}, executor: host}\n"
        "outputs: {steps: run.steps, column_max: column_max}\n")
path = os.path.join(folder, "witness.yaml")
with open(path, "w") as f:
    f.write(text)
planned = hetflow.plan(path, runs_dir=os.path.join(folder, "runs"))
estimate = planned.to_json()["estimate"] if hasattr(planned, "to_json") else {}
t0 = time.perf_counter()
run = hetflow.run(path, runs_dir=os.path.join(folder, "runs"), cache=False)
wall = time.perf_counter() - t0
rec = run.record
tasks = rec["tasks"]
chunks = [t for t in tasks if t["kind"] == "witness"]
end = lambda t: t["offset_s"] + t["duration_s"]
last_chunk = max(end(t) for t in chunks)
imports = [t for t in tasks if t["kind"] == "import"]
ready = max(end(t) for t in imports)
steps = int(rec["outputs"]["steps"]["value"])
print(json.dumps({
    "wall_s": wall, "steps": steps, "chunks": len(chunks), "table_bytes": steps * 16 * 8,
    "assemble_s": ready - last_chunk, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "phases_estimate_s": estimate.get("phases_s"),
    "phases_run_s": ready - min(t["offset_s"] for t in tasks if t["kind"] in ("phase", "witness")),
    "status": rec["status"],
}))
"""

_COPY = r"""
import json, sys, time
import numpy as np
n = int(sys.argv[1])
src = np.ones(n // 8, dtype=np.int64)
t0 = time.perf_counter()
dst = np.empty_like(src)
np.copyto(dst, src)
print(json.dumps({"copy_s": time.perf_counter() - t0}))
"""


def _child(code: str, *args: str, pythonpath: str | None = None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(turns: int, before: str | None = None) -> dict:
    folder = tempfile.mkdtemp(prefix="hetflow-bench-witness-gather-")
    with open(os.path.join(folder, "input.bin"), "wb") as f:
        f.write(bytes(range(256)) * (INPUT_BYTES // 256))
    small = tempfile.mkdtemp(prefix="hetflow-bench-witness-small-")
    with open(os.path.join(small, "input.bin"), "wb") as f:
        f.write(bytes(range(64)))
    runs, copies, bases = [], [], []
    for _ in range(turns):   # in turn: the run, the copy of as many bytes, the run of a 64-byte input
        runs.append(_child(_CHILD, folder, str(GUESTS / "sha256.elf"), str(CHUNK), pythonpath=before))
        copies.append(_child(_COPY, str(runs[-1]["table_bytes"])))
        bases.append(_child(_CHILD, small, str(GUESTS / "sha256.elf"), str(CHUNK), pythonpath=before))
    med = lambda key, rows: statistics.median(r[key] for r in rows)  # noqa: E731
    return {"assemble_s": med("assemble_s", runs), "copy_s": med("copy_s", copies), "wall_s": med("wall_s", runs),
            "peak_rss_bytes": med("peak_rss_bytes", runs), "table_bytes": runs[0]["table_bytes"],
            "base_rss_bytes": med("peak_rss_bytes", bases), "base_table_bytes": bases[0]["table_bytes"],
            "steps": runs[0]["steps"], "chunks": runs[0]["chunks"],
            "phases_estimate_s": runs[0]["phases_estimate_s"], "phases_run_s": med("phases_run_s", runs)}


def _forced(where: str | None):
    """Make every witness phase run ``where`` ("cluster" or "in-process"), whatever the planner prices; ``None``
    leaves the choice to it. The bench times both sides of the choice; a pipeline run never forces."""
    from hetflow.engine.run import clusterphases

    chosen = clusterphases.__dict__.setdefault("_bench_witness_where", clusterphases.witness_where)

    def where_forced(*args, **kwargs):
        answer = chosen(*args, **kwargs)
        return answer if where is None else {**answer, "where": where}

    clusterphases.witness_where = where_forced


def measure_cluster(input_kib: int, pairs: int, chunk: int = 1 << 10) -> dict:
    """A witness phase of the SHA-256 guest on a local cluster of 1 and of 2 worker processes (1 thread each).

    Both clusters stay up; each pair runs the 1-worker and the 2-worker
    run in turn (which goes first alternates), forced onto the workers,
    after a warm-up run on each that loads the compiled loop there. From
    each run's record: the phase's span (``execute``'s end to the end of
    the ``phase:ID`` task that hands the table on) and the CPU seconds of
    its chunk tasks on the workers (their summed durations: what 2 cores
    shared with other work stretch least). Then one unforced run on 2
    workers: where the planner put the phase, its estimate against the
    run's span, and one forced in-process run for its other side.
    """
    import logging

    from hetflow.engine.run.distributed import Cluster
    from hetflow.engine.manifest.validate import compile_manifest, loads
    from hetflow.engine.plan.planner import plan as make_plan
    from hetflow.engine.run.execute import execute as run_pipeline

    logging.getLogger("distributed").setLevel(logging.ERROR)
    folder = tempfile.mkdtemp(prefix="hetflow-bench-witness-cluster-")
    data = bytes(range(256)) * (input_kib * 4)
    with open(os.path.join(folder, "input.bin"), "wb") as f:
        f.write(data)
    text = ("version: 1\nname: witness-cluster\nemulators:\n"
            f"  guest: {{isa: rv64ima, backend: fast, program: '{GUESTS / 'sha256.elf'}', input: input.bin, "
            f"chunk_steps: {chunk}, max_steps: 100000000}}\n"
            "executors:\n  host: {vendor: cpu}\nstages:\n"
            "  run: {phase: execute, emulator: guest}\n  trace: {phase: witness, inputs: [run]}\n"
            "  column_max: {op: max, inputs: [trace], args: {axis: 0}, executor: host}\n"
            "outputs: {steps: run.steps, column_max: column_max}\n")
    manifest = compile_manifest(loads(text, os.path.join(folder, "witness.yaml")))

    def one(cluster, placed, where):
        _forced(where)
        rec = run_pipeline(manifest, placed, runs_dir=folder, cluster=cluster, use_cache=False).record
        end = {t["id"]: t["offset_s"] + t["duration_s"] for t in rec["tasks"] if t["kind"] == "phase"}
        chunks = [t for t in rec["tasks"] if t["kind"] == "witness"]
        (placed_event,) = [e for e in rec["events"] if e["event"] == "witness-placed"]
        ran = [e for e in rec["events"] if e["event"] == "witness-ran"]
        cpu = ran[0]["worker_cpu_s"] if ran else {}
        imported = max(t["offset_s"] + t["duration_s"] for t in rec["tasks"] if t["kind"] == "import")
        by_worker: dict = {}
        for t in chunks:
            by_worker.setdefault(t["worker"], []).append(t)
        # each worker's chunks from its first start to its last end: against its CPU, what the cores gave it
        walls = [max(t["offset_s"] + t["duration_s"] for t in ts) - min(t["offset_s"] for t in ts)
                 for ts in by_worker.values()]
        return {"span_s": end["trace"] - end["run"], "handoff_s": imported - end["trace"],
                "worker_wall_s": max(walls),
                "cpu_s": sum(cpu.values()), "cpu_max_s": max(cpu.values(), default=0),
                "chunks": len(chunks), "steps": int(rec["outputs"]["steps"]["value"]), "placed": placed_event,
                "load": os.getloadavg()[0], "digest": rec["outputs"]["column_max"]["digest"]}

    try:
        with Cluster.local(1, 1) as c1, Cluster.local(2, 1) as c2:
            p1 = c1.place(make_plan(manifest, c1.probe), manifest)
            p2 = c2.place(make_plan(manifest, c2.probe), manifest)
            one(c1, p1, "cluster"), one(c2, p2, "cluster")
            rows = []
            for i in range(pairs):
                order = ((1, c1, p1), (2, c2, p2)) if i % 2 == 0 else ((2, c2, p2), (1, c1, p1))
                rows.append({n: one(c, p, "cluster") for n, c, p in order})
            # the planner's own choice and its other side, in turn; the median run of each by span
            chosen, in_process = [], []
            for _ in range(max(pairs // 2, 1)):
                chosen.append(one(c2, p2, None))
                in_process.append(one(c2, p2, "in-process"))
            chosen, in_process = (sorted(runs, key=lambda r: r["span_s"])[len(runs) // 2]
                                  for runs in (chosen, in_process))
            _forced(None)
            from hetflow.engine.run.clusterphases import place_witness
            planned = place_witness(p2, c2.workers()).phases["trace"]["runs"]
    finally:
        _forced(None)
    med = lambda n, key: statistics.median(r[n][key] for r in rows)  # noqa: E731
    assert len({r[n]["digest"] for r in rows for n in (1, 2)} | {chosen["digest"], in_process["digest"]}) == 1
    return {"one_s": med(1, "span_s"), "two_s": med(2, "span_s"), "one_cpu_s": med(1, "cpu_s"),
            "two_cpu_s": med(2, "cpu_s"), "two_cpu_max_s": med(2, "cpu_max_s"), "handoff_s": med(2, "handoff_s"),
            "one_wall_s": med(1, "worker_wall_s"), "two_wall_s": med(2, "worker_wall_s"),
            "ratios": [r[1]["span_s"] / r[2]["span_s"] for r in rows],
            "loads": [round(r[n]["load"], 2) for r in rows for n in (1, 2)], "chunks": rows[0][1]["chunks"],
            "steps": rows[0][1]["steps"], "chunk": chunk, "input_bytes": len(data), "chosen": chosen,
            "in_process": in_process, "planned": planned}


def cluster_row(quick: bool) -> dict:
    m = measure_cluster(8 if quick else 52, 1 if quick else 5)
    placed = m["chosen"]["placed"]
    estimate = placed["cluster_s"] if placed["where"] == "cluster" else placed["in_process_s"]
    return {
        "name": "witness phase of a SHA-256 run on a Dask cluster",
        "baseline": "1 worker process", "baseline_s": m["one_s"], "subject": "2 worker processes",
        "subject_s": m["two_s"], "ratio": m["one_s"] / m["two_s"],
        "notes": (f"{m['input_bytes']} bytes hashed, {m['steps']} steps, {m['chunks']} chunks of {m['chunk']}; "
                  f"span from execute's end to the table handed on, median of {len(m['ratios'])} pairs in turn "
                  f"(pair ratios {', '.join(f'{r:.2f}' for r in m['ratios'])}; loads {m['loads']}); the batches' "
                  f"thread CPU seconds on the workers: {m['one_cpu_s']:.3f} on 1, {m['two_cpu_s']:.3f} on 2 (the "
                  f"busier "
                  f"{m['two_cpu_max_s']:.3f}: {m['one_cpu_s'] / m['two_cpu_max_s']:.2f}x), over "
                  f"{m['one_wall_s']:.3f} s "
                  f"and {m['two_wall_s']:.3f} s of a worker's wall time; goal 2 workers "
                  f">= 1.6x. The planner (2 workers, actual steps) chose {placed['where']}: estimate "
                  f"{estimate:.3f} s against {m['chosen']['span_s']:.3f} s run; in-process forced "
                  f"{m['in_process']['span_s']:.3f} s (estimate {placed['in_process_s']:.3f} s), cluster "
                  f"estimate {placed['cluster_s']:.3f} s; plan (max_steps bound): {m['planned']['where']}; the "
                  f"table's scatter and import on the worker after the phase: {m['handoff_s']:.3f} s"),
    }


def run(quick: bool) -> list[dict]:
    m = measure(1 if quick else 3)
    table = m["table_bytes"]
    notes = (f"SHA-256 guest, {m['steps']} steps in {m['chunks']} chunks of {CHUNK}, in-process run (threaded), "
             f"table {table / 2**20:.1f} MiB; median of {1 if quick else 3} fresh processes each, in turn")
    return [
        {"name": "witness table: assembling (last chunk's end to the import's end)",
         "baseline": "np.copyto of the table's bytes into fresh memory", "baseline_s": m["copy_s"],
         "subject": "hetflow run, from its record", "subject_s": m["assemble_s"],
         "ratio": m["copy_s"] / m["assemble_s"], "notes": "goal: at most 1.5x the copy (ratio >= 0.67); " + notes},
        {"name": "witness table: peak memory of the run against the table",
         "baseline": "the table's bytes", "baseline_s": table,
         "subject": "the run process's ru_maxrss, less that of the same run of a 64-byte input",
         "subject_s": m["peak_rss_bytes"] - m["base_rss_bytes"], "ratio": table / (m["peak_rss_bytes"] - m["base_rss_bytes"]),
         "notes": f"bytes, not seconds; goal: at most 1.3x the table (ratio >= 0.77); the process's own interpreter, "
                  f"numpy, numba and hetflow ({m['base_rss_bytes'] / 2**20:.0f} MiB with the small input's "
                  f"{m['base_table_bytes']} table bytes) are left out; whole process {m['peak_rss_bytes'] / 2**20:.0f} "
                  "MiB; " + notes},
        {"name": "witness phases: the plan's estimate against the run",
         "baseline": "the plan's phases_s (bounded by max_steps 4 M)", "baseline_s": m["phases_estimate_s"],
         "subject": "the phases' span in the run, to the table's import", "subject_s": m["phases_run_s"],
         "ratio": (m["phases_estimate_s"] or 0) / m["phases_run_s"],
         "notes": "goal: within 2x of the run; the estimate is for max_steps, an upper bound; " + notes},
    ]


if __name__ == "__main__":
    if "--cluster" in sys.argv:
        print(json.dumps(measure_cluster(8 if "--quick" in sys.argv else 52, 1 if "--quick" in sys.argv else 5),
                         indent=2, default=str))
    elif "--before" in sys.argv:
        print(json.dumps(measure(1, before=sys.argv[sys.argv.index("--before") + 1]), indent=2))
    else:
        print(json.dumps(run("--quick" in sys.argv), indent=2))
