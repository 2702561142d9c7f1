"""The Vulkan executor's matmul against numpy, and a CPU <-> Vulkan bridge
against ``np.copyto`` of the same bytes, side by side on this machine.

* ``matmul NxN``: ``execute`` of a one-node plan (tiled WGSL kernel, the
  result left on the device) against ``a @ b`` in numpy (its BLAS, all
  host cores). Inputs are imported once, outside the timing; the first
  call, which compiles the pipeline, is a warm-up. On lavapipe the
  "device" is Mesa's software Vulkan running on the same CPU cores, so
  the ratio measures a software device against BLAS, not a GPU.
* ``bridge 64 MiB``: a CPU export, a Vulkan import and the Vulkan export
  back (the bytes cross the host/device boundary twice, through the
  executor's reused staging buffers) against two ``np.copyto`` of the
  same 64 MiB between preallocated host arrays.

* ``decoder first run``: ``pipelines/decoder.yaml`` with its ``gpu``
  executor on Vulkan, each run a fresh process (the device's start-up is
  per process), in turn: without the executor's ``warm_up`` (deleted
  before the run: the runtime then calls none, as before issue 30) and
  with it. Timed: the run's tasks on the device (the sum of the ``gpu``
  partitions', imports' and exports' durations in the record), and the
  layers' partition alone; the median of the pairs. The warm-up's seconds
  are in ``notes``: they moved out of the run's clock, not away.
* ``decoder partitions``: the same plan's partitions and lowered tasks at
  ``BEFORE_COMMIT`` (its tree from ``git archive``, imported first) and in
  this tree: counts, not seconds, in the seconds columns.

Each row is the best of several repetitions; ``quick`` runs the small
sizes only. Rows are skipped, with the reason in ``notes``, where no
Vulkan adapter is available.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hetflow.executors import create, probe
from hetflow.executors.base import Dtype, PortableActivation, Vendor
from hetflow.executors.cpu import encode_plan


def _best(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _device_note(offer) -> str:
    dev = offer.devices[0].display_name
    return ("software device (lavapipe on the host CPU): " if "CPU-type" in dev else "") + dev.split(":")[0]


def _matmul(vk, n: int, reps: int) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ha = vk.import_activation(PortableActivation.from_array(a, Dtype.fp32))
    hb = vk.import_activation(PortableActivation.from_array(b, Dtype.fp32))
    plan = encode_plan(Vendor.vulkan, ["a", "b"], [{"id": "c", "op": "matmul", "args": {}, "dtype": "fp32", "inputs": ["a", "b"]}], ["c"])

    def on_vulkan():
        (c,) = vk.execute(plan, [ha, hb])
        vk.synchronize()
        vk.release_activation(c)

    on_vulkan()
    vk_s = _best(on_vulkan, reps)
    np_s = _best(lambda: a @ b, reps)
    (c,) = vk.execute(plan, [ha, hb])
    err = float(np.abs(vk.export_activation(c).to_array() - a @ b).max())
    for h in (c, ha, hb):
        vk.release_activation(h)
    return {"vulkan_s": vk_s, "numpy_s": np_s, "gflops": 2 * n ** 3 / vk_s / 1e9, "max_abs_err": err}


def _bridge(vk, nbytes: int, reps: int) -> dict:
    cpu = create(Vendor.cpu, "host")
    values = np.random.default_rng(1).standard_normal(nbytes // 4, dtype=np.float32)
    hc = cpu.import_activation(PortableActivation.from_array(values, Dtype.fp32))

    def bridge():
        hv = vk.import_activation(cpu.export_activation(hc))
        back = vk.export_activation(hv)
        vk.release_activation(hv)
        return back

    assert bridge().bytes == values.tobytes()
    src = values.view(np.uint8)
    dst = np.empty_like(src)
    dst2 = np.empty_like(src)

    def copies():
        np.copyto(dst, src)
        np.copyto(dst2, dst)

    copies()
    out = {"bridge_s": _best(bridge, reps), "copyto_s": _best(copies, reps)}
    cpu.release_activation(hc)
    return out


REPO = Path(__file__).resolve().parent.parent
# the last commit before issue 30's Vulkan work
BEFORE_COMMIT = os.environ.get("HETFLOW_BENCH_VULKAN_BEFORE", "7b62ef8")

_FIRST_RUN = """
import json, sys
import hetflow
from hetflow.executors.vulkan import VulkanExecutor
if sys.argv[3] == "before":
    del VulkanExecutor.warm_up
run = hetflow.run(sys.argv[1], runs_dir=sys.argv[2], cache=False)
gpu = [e for e in run.record["events"] if e.get("executor") == "gpu" and e.get("duration_s") is not None]
print(json.dumps({"status": run.status, "device_s": sum(e["duration_s"] for e in gpu),
                  "layers_s": max(e["duration_s"] for e in gpu if e["kind"] == "partition"),
                  "warm_up_s": run.record["warm_up"][0]["seconds"]}))
"""

_COUNTS = """
import json, sys
import hetflow
from hetflow.engine.run.runtime import LocalRuntime
plan = hetflow.plan(sys.argv[1], runs_dir=sys.argv[2]).engine_plan
print(json.dumps({"partitions": len(plan.partitions), "tasks": len(LocalRuntime(plan, {}).graph.dsk)}))
"""


def _decoder_on_vulkan(folder: Path) -> Path:
    text = (REPO / "pipelines" / "decoder.yaml").read_text().replace("gpu:  {vendor: [vulkan, cpu]}", "gpu: {vendor: vulkan}")
    path = folder / "decoder-vulkan.yaml"
    path.write_text(text)
    return path


def _python(code: str, *args: str, cwd: Path, env: dict | None = None) -> dict:
    # run outside the repository: from its root, ``python -c`` would import ./hetflow before PYTHONPATH's
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                         cwd=cwd, env={**os.environ, **(env or {})})
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.splitlines()[-1])


def _first_runs(pairs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = _decoder_on_vulkan(Path(tmp))
        seen: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(pairs):
            for side in ("before", "after"):
                got = _python(_FIRST_RUN, str(path), str(Path(tmp) / "runs"), side, cwd=Path(tmp))
                assert got["status"] == "succeeded", got
                seen[side].append(got)
    return {side: {key: statistics.median(r[key] for r in rows) for key in rows[0] if key != "status"}
            for side, rows in seen.items()}


def _before_tree(folder: Path) -> Path | None:
    """BEFORE_COMMIT's packages laid out as an importable ``hetflow``; None where git cannot give them."""
    tree = folder / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", BEFORE_COMMIT, "hetflow", "engine", "executors",
                              "pipelines", "schemas", "examples"], capture_output=True)
    if archive.returncode:
        return None
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    site = folder / "site"
    site.mkdir()
    (tree / "hetflow").rename(site / "hetflow")
    for name in ("engine", "executors", "pipelines", "schemas", "examples"):
        (site / "hetflow" / name).symlink_to(tree / name)
    return site


def _counts() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = _decoder_on_vulkan(Path(tmp))
        site = _before_tree(Path(tmp))
        after = _python(_COUNTS, str(path), str(Path(tmp) / "runs"), cwd=Path(tmp))
        before = (_python(_COUNTS, str(path), str(Path(tmp) / "runs"), cwd=Path(tmp), env={"PYTHONPATH": str(site)})
                  if site else None)
    return {"before": before, "after": after}


def run(quick: bool) -> list[dict]:
    offer = probe(Vendor.vulkan)
    if not offer.available:
        return [{"name": "vulkan", "baseline": "numpy", "baseline_s": None, "subject": "vulkan", "subject_s": None,
                 "ratio": None, "notes": f"skipped: {offer.reason}"}]
    vk = create(Vendor.vulkan, "bench")
    note = _device_note(offer)
    rows = []
    for n in ((1024,) if quick else (1024, 4096)):
        m = _matmul(vk, n, reps=3 if n <= 1024 else 1)
        rows.append({
            "name": f"matmul {n}x{n} fp32", "baseline": "numpy a @ b", "baseline_s": m["numpy_s"],
            "subject": "vulkan execute", "subject_s": m["vulkan_s"], "ratio": m["numpy_s"] / m["vulkan_s"],
            "notes": f"{note}; {m['gflops']:.1f} GFLOP/s; max |err| {m['max_abs_err']:.1e}",
        })
    size = (16 if quick else 64) << 20
    b = _bridge(vk, size, reps=3)
    rows.append({
        "name": f"bridge {size >> 20} MiB cpu->vulkan->cpu", "baseline": "2x np.copyto", "baseline_s": b["copyto_s"],
        "subject": "export+import+export", "subject_s": b["bridge_s"], "ratio": b["copyto_s"] / b["bridge_s"],
        "notes": f"{note}; {2 * size / b['bridge_s'] / 1e9:.2f} GB/s across the boundary",
    })
    pairs = 2 if quick else 5
    first = _first_runs(pairs)
    rows.append({
        "name": "decoder first run, the run's tasks on the device (fresh processes)",
        "baseline": "no warm-up (before)", "baseline_s": first["before"]["device_s"],
        "subject": "VulkanExecutor.warm_up", "subject_s": first["after"]["device_s"],
        "ratio": first["before"]["device_s"] / first["after"]["device_s"],
        "notes": (f"{note}; median of {pairs} pairs; layers' partition {first['before']['layers_s'] * 1e3:.1f} ms "
                  f"before, {first['after']['layers_s'] * 1e3:.1f} ms after; warm-up {first['before']['warm_up_s'] * 1e3:.1f} "
                  f"ms before, {first['after']['warm_up_s'] * 1e3:.1f} ms after, out of the run's clock"),
    })
    counts = _counts()
    before, after = counts["before"], counts["after"]
    rows.append({
        "name": "decoder on vulkan, lowered tasks (counts, not seconds)",
        "baseline": f"before ({BEFORE_COMMIT})", "baseline_s": before["tasks"] if before else None,
        "subject": "this tree", "subject_s": after["tasks"],
        "ratio": before["tasks"] / after["tasks"] if before else None,
        "notes": (f"partitions {before['partitions'] if before else '?'} before, {after['partitions']} after: "
                  "sources (random draws, loads) join their consumers' partitions"),
    })
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)
