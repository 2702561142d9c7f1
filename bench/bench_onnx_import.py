"""An imported GPT-2-small-shaped layer on hetflow's CPU executor against onnxruntime, same machine, same run.

The layer (``tests/onnxgpt2.py``, ``layer_only``: d_model 768, 12 heads,
seq 512, batch 1; LayerNormalization, attention written out as MatMul /
Split / Reshape / Transpose / Where / Softmax, GELU in its Erf form,
residual Adds) is saved as ONNX and imported with
:func:`hetflow.engine.importers.onnximport.import_onnx`. Each pair runs
onnxruntime's ``InferenceSession.run`` (CPU provider, session built once,
default graph optimizations) and ``hetflow.run`` of the manifest without
the cache, turn about, the order alternating; the medians are compared,
and the notes give the minima's ratio too (on 2 cores shared with other
jobs a burst of theirs lands on single runs of either side).

Two rows: ``hetflow.run`` whole (plan, Dask, reading the weights,
the record) and the executor's own time for the layer's partition (the
record's task duration), each against the same onnxruntime times. The
notes say where hetflow's time goes: each stage's quickest of 5 runs of
the kernels alone, summed by op, largest first.

    python bench/run.py onnx_import          # seq 512
    python bench/run.py onnx_import --quick  # seq 128
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _measure(seq: int, pairs: int) -> dict:
    import onnx
    import onnxruntime as ort
    import onnxgpt2
    import yaml

    import hetflow
    from hetflow.engine.importers.onnximport import import_onnx

    folder = Path(tempfile.mkdtemp(prefix="hetflow-bench-onnx-"))
    model = folder / "layer.onnx"
    onnx.save(onnxgpt2.gpt2(d_model=768, heads=12, seq=seq, batch=1, layer_only=True), str(model))
    manifest = import_onnx(model, folder / "imported")
    x = np.random.default_rng(0).standard_normal((1, seq, 768)).astype(np.float32)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    runs = folder / "runs"
    hetflow.run(manifest, runs_dir=runs, cache=False, inputs={"x": x})      # warm both: imports, BLAS, arenas
    session.run(None, {"x": x})
    ort_s, run_s, task_s = [], [], []
    got = None
    for i in range(pairs):
        for which in (("ort", "hetflow") if i % 2 == 0 else ("hetflow", "ort")):
            if which == "ort":
                t = time.perf_counter()
                session.run(None, {"x": x})
                ort_s.append(time.perf_counter() - t)
                continue
            t = time.perf_counter()
            r = hetflow.run(manifest, runs_dir=runs, cache=False, inputs={"x": x})
            run_s.append(time.perf_counter() - t)
            assert r.status == "succeeded", r.failures
            got = r.outputs[next(iter(r.outputs))]
            task_s.append(sum(e["duration_s"] for e in r.record["tasks"] if e.get("nodes")))
    err = float(np.max(np.abs(got - want) / (np.abs(want) + 1e-3)))
    by_op = _profile(manifest, x, reps=5)
    total = sum(by_op.values())
    top = f"{1e3 * total:.0f} ms: " + ", ".join(f"{op} {100 * s / total:.0f}%" for op, s in by_op.most_common(6))
    return {"ort": statistics.median(ort_s), "run": statistics.median(run_s), "task": statistics.median(task_s),
            "ort_min": min(ort_s), "run_min": min(run_s), "task_min": min(task_s),
            "top": top, "err": err, "stages": len(yaml.safe_load(manifest.read_text())["stages"])}


def _profile(manifest: Path, x: np.ndarray, reps: int) -> Counter:
    """Seconds per op over the manifest's stages, each stage's quickest of ``reps``, run through ``ops.run`` as the
    CPU executor runs it.

    A partition is one task to the record, so its stages have no times of their own there; this calls the same
    kernels (:func:`hetflow.executors.ops.run`, what ``CpuExecutor.execute`` calls per node) in the manifest's order,
    each value let go after its last reader as ``run_nodes`` lets it go (on fresh pages rather than on memory just
    freed, the layer's elementwise ops took up to twice as long).
    """
    import yaml

    from hetflow.executors import ops
    from hetflow.executors.base import Dtype

    stages = yaml.safe_load(manifest.read_text())["stages"]
    last = {ref: i for i, spec in enumerate(stages.values()) for ref in spec.get("inputs", [])}
    quickest: dict[str, float] = {}
    for _ in range(reps):
        values = {}
        for i, (sid, spec) in enumerate(stages.items()):
            args = dict(spec.get("args") or {})
            if spec["op"] == "load":
                args["path"] = str(manifest.parent / args["path"])
            inputs = [values[ref] for ref in spec.get("inputs", [])]
            t = time.perf_counter()
            values[sid] = x if spec["op"] == "input" else ops.run(np, spec["op"], inputs, args,
                                                                   Dtype(spec.get("dtype", "fp32")))
            quickest[sid] = min(quickest.get(sid, math.inf), time.perf_counter() - t)
            for ref in spec.get("inputs", []):
                if last[ref] == i:
                    values.pop(ref, None)
    by_op: Counter = Counter()
    for sid, seconds in quickest.items():
        by_op[stages[sid]["op"]] += seconds
    return by_op


def run(quick: bool) -> list[dict]:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        return [{"name": "imported GPT-2 layer", "baseline": "onnxruntime", "baseline_s": None, "subject": "hetflow",
                 "subject_s": None, "ratio": None, "notes": f"skipped: {e} (pip install -e .[dev])"}]
    seq = 128 if quick else 512
    m = _measure(seq, pairs=3 if quick else 7)
    load = os.getloadavg()[0]
    name = f"imported GPT-2-small layer (d768, 12 heads, seq {seq}, batch 1)"
    common = (f"{m['stages']} stages; max rel. err vs onnxruntime {m['err']:.1e}; stage time by op: {m['top']}; "
              f"minima: onnxruntime {m['ort_min']:.4f} s, hetflow {m['run_min']:.4f} s, "
              f"{m['ort_min'] / m['run_min']:.2f}x; load {load:.2f} on {os.cpu_count()} CPUs")
    return [
        {"name": name + ", hetflow.run whole", "baseline": "onnxruntime session.run", "baseline_s": m["ort"],
         "subject": "hetflow.run (cpu, no cache)", "subject_s": m["run"], "ratio": m["ort"] / m["run"],
         "notes": common},
        {"name": name + ", executor time", "baseline": "onnxruntime session.run", "baseline_s": m["ort"],
         "subject": "the layer's partition task", "subject_s": m["task"], "ratio": m["ort"] / m["task"],
         "notes": f"the record's task durations: what the CPU executor spent, without planning and the record; "
                  f"minima: {m['task_min']:.4f} s, {m['ort_min'] / m['task_min']:.2f}x"},
    ]


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
