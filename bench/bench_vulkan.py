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

Each row is the best of several repetitions; ``quick`` runs the small
sizes only. Rows are skipped, with the reason in ``notes``, where no
Vulkan adapter is available.
"""

from __future__ import annotations

import time

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
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)
