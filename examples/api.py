"""hetflow from Python: plan, run, hand arrays in, read outputs back, look at failures.

Runs from any folder (``python examples/api.py``); its runs go to a fresh
temporary folder.
"""

import tempfile
from pathlib import Path

import numpy as np

import hetflow

HERE = Path(__file__).resolve().parent
QUICKSTART = HERE / "quickstart.yaml"
runs = Path(tempfile.mkdtemp(prefix="hetflow-api-"))

# Plan: the same data `hetflow plan --format json` prints (in Jupyter, `plan` alone draws it).
hetflow.validate(QUICKSTART)
plan = hetflow.plan(QUICKSTART, params={"batch": 8})
print(plan)
for bridge in plan.bridges:
    print(f"  bridge {bridge['id']}: {bridge['bytes']} bytes, {bridge['source']} -> {bridge['destination']}")

# Run: outputs come back as numpy arrays with their exact dtypes.
run = hetflow.run(QUICKSTART, params={"batch": 8}, runs_dir=runs)
probs, probs_bf16 = run.outputs["probs"], run.outputs["probs_bf16"]
print(f"{run.run_id}: {run.status}; probs {probs.shape} {probs.dtype}, rows sum to "
      f"{probs.sum(axis=1).min():.4f}..{probs.sum(axis=1).max():.4f}; probs_bf16 {probs_bf16.dtype}")

# Arrays from Python go to the manifest's input stages, checked against their shape and dtype.
x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
norm = hetflow.run(HERE / "normalize.yaml", inputs={"x": x}, runs_dir=runs)
y = norm.outputs["y"]
mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
print(f"normalize: {norm.status}; largest difference from numpy {np.abs(y - (x - mean) / np.sqrt(var + 1e-5)).max():.2e}; "
      f"input digest {norm.record['inputs']['x']['digest'][:23]}")
try:
    hetflow.run(HERE / "normalize.yaml", inputs={"x": x[:2]}, runs_dir=runs)
except hetflow.UsageError as e:
    print(f"rejected before running: {e}")

# A stage that fails makes a failed Run, not an exception.
slow = runs / "slow.yaml"
slow.write_text("version: 1\nname: slow\nexecutors: {host: {vendor: cpu}}\nstages:\n"
                "  x: {op: random.normal, args: {shape: [2048, 2048], seed: 1}, timeout: 0.001}\n"
                "outputs: {x: x}\n")
failed = hetflow.run(slow, runs_dir=runs)
for failure in failed.failures:
    print(f"{failed.status}: stage {failure.stage} ({failure.op}) {failure.status}: {failure.message}; "
          f"traceback in {failure.traceback_file}")

# A wrong manifest raises ManifestError with every problem's position.
broken = runs / "broken.yaml"
broken.write_text("version: 1\nname: broken\nexecutors: {host: {vendor: cpu}}\nstages:\n"
                  "  x: {op: relu2}\noutputs: {x: x}\n")
try:
    hetflow.validate(broken)
except hetflow.ManifestError as e:
    for d in e.diagnostics:
        print(f"line {d.origin.line}, column {d.origin.col}: {d.message}")

# An earlier run, read back by its id.
again = hetflow.open_run(run.run_id, runs_dir=runs)
assert again.outputs["probs_bf16"].tobytes() == probs_bf16.tobytes()
print(f"reopened {again.run_id}: {again.status}, outputs {', '.join(again.outputs)}")
