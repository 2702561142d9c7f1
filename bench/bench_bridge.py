"""Bridge bandwidth: a tensor crossing executors against a plain copy of the same bytes.

CPU rows (always): 256 MiB of fp32 (32 MiB with --quick) bridged from one
CPU executor to another, export + import + release, against ``np.copyto``
into a warm buffer of the same size, both timed in this process (best of
several, after one warm-up). The goal is a ratio of at least 0.8: a
bridge must cost no more than one memcpy. A contiguous CPU activation is
read-only, so the export hands out its own memory and the import adopts
it: no copy at all (a strided one goes through a reused staging store);
the ``fresh`` row shows the bytes-copying path (``from_array`` +
``to_array``, new pages every time).

Witness row (always): an int64 table of 100 M values (800 MB; 10 M with
--quick), a zkVM's witness column at its own width, bridged between two
CPU executors the same way, against ``np.copyto`` of the same array in the
same run; the bytes that arrive are checked against the source's.

GPU rows (where cupy sees a device): D2H + H2D through two CUDA executors
(export staged through their pinned pool, import from host bytes) against
cupy's own pinned copy (``get(out=pinned)`` + ``set``), and the
device-to-device fast path between two CUDA executors against a plain
device ``copy``.
"""

from __future__ import annotations

import gc
import time

import numpy as np

from hetflow.executors import create, probe
from hetflow.executors.base import Dtype, PortableActivation, TensorShape, Vendor


def best_of(repeats: int, fn, sync=lambda: None) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def gbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:.2f} GB/s"


def cpu_rows(nbytes: int, repeats: int) -> list[dict]:
    n = nbytes // 4
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
    copy_s = best_of(repeats, lambda: np.copyto(dst, src))

    a, b = create(Vendor.cpu, "a"), create(Vendor.cpu, "b")
    h = a.import_activation(PortableActivation.from_array(src, Dtype.fp32))

    def bridge():
        p = a.export_activation(h)
        h2 = b.import_activation(p)
        b.release_activation(h2)

    bridge_s = best_of(repeats, bridge)
    check = b.import_activation(a.export_activation(h))
    assert np.array_equal(b.export_activation(check).to_array(), src)
    b.release_activation(check)

    def fresh():
        PortableActivation.from_array(src, Dtype.fp32).to_array()

    fresh_s = best_of(repeats, fresh)
    a.release_activation(h)
    size = f"{nbytes >> 20} MiB fp32"
    return [
        {"name": f"bridge-cpu-cpu-{nbytes >> 20}MiB", "baseline": "np.copyto (warm)", "baseline_s": copy_s,
         "subject": "cpu->cpu bridge", "subject_s": bridge_s, "ratio": copy_s / bridge_s,
         "notes": (f"{size}; copyto {gbps(nbytes, copy_s)}, bridge {gbps(nbytes, bridge_s)}; goal ratio >= 0.8; "
                   "the destination adopts the source's read-only memory: 0 bytes copied")},
        {"name": f"bridge-cpu-fresh-{nbytes >> 20}MiB", "baseline": "np.copyto (warm)", "baseline_s": copy_s,
         "subject": "from_array+to_array (fresh pages)", "subject_s": fresh_s, "ratio": copy_s / fresh_s,
         "notes": f"{size}; the portable path without staging reuse, for comparison: {gbps(nbytes, fresh_s)}"},
    ]


def witness_rows(count: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(1)
    src = rng.integers(-2**63, 2**63 - 1, count, dtype=np.int64, endpoint=True)
    nbytes = src.nbytes
    dst = np.empty_like(src)
    copy_s = best_of(repeats, lambda: np.copyto(dst, src))
    del dst

    a, b = create(Vendor.cpu, "a"), create(Vendor.cpu, "b")
    h = a.import_activation(PortableActivation.from_array(src, Dtype.int64))

    def bridge():
        p = a.export_activation(h)
        h2 = b.import_activation(p)
        b.release_activation(h2)

    bridge_s = best_of(repeats, bridge)
    check = b.import_activation(a.export_activation(h))
    back = b.export_activation(check)
    assert back.dtype is Dtype.int64 and bytes(back.bytes[-64:]) == src[-8:].tobytes()
    assert np.array_equal(back.to_array(), src)
    b.release_activation(check)
    a.release_activation(h)
    return [
        {"name": f"bridge-cpu-cpu-int64-{count // 10**6}M", "baseline": "np.copyto (warm)", "baseline_s": copy_s,
         "subject": "cpu->cpu bridge, int64", "subject_s": bridge_s, "ratio": copy_s / bridge_s,
         "notes": (f"{count:,} int64 values ({nbytes / 1e6:.0f} MB), a witness table at its own width; "
                   f"copyto {gbps(nbytes, copy_s)}, bridge {gbps(nbytes, bridge_s)}; goal ratio >= 0.8; "
                   "the destination adopts the source's read-only memory: 0 bytes copied, values checked")},
    ]


def gpu_rows(nbytes: int, repeats: int) -> list[dict]:
    import cupy as cp
    import cupyx

    n = nbytes // 4
    offer = probe(Vendor.cuda) if probe(Vendor.cuda).available else probe(Vendor.rocm)
    vendor, devices = offer.vendor, offer.devices
    sync = lambda: cp.cuda.runtime.deviceSynchronize()  # noqa: E731
    host = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    rows = []
    with cp.cuda.Device(0):
        dev = cp.asarray(host)
        out = cp.empty_like(dev)
        pinned = cupyx.empty_pinned(host.shape, host.dtype)

        def raw():
            dev.get(out=pinned)
            out.set(pinned)

        raw_s = best_of(repeats, raw, sync)
        a, b = create(vendor, "ga", 0), create(vendor, "gb", 0)
        h = a.import_activation(PortableActivation.from_array(host, Dtype.fp32))

        def staged():
            p = a.export_activation(h)
            plain = PortableActivation(p.shape, p.dtype, p.bytes)  # forces D2H; import then takes the H2D path
            h2 = b.import_activation(plain)
            b.release_activation(h2)

        staged_s = best_of(repeats, staged, sync)
        check = b.import_activation(PortableActivation(TensorShape((n,)), Dtype.fp32, a.export_activation(h).bytes))
        assert np.array_equal(b.export_activation(check).to_array(), host)
        b.release_activation(check)
        rows.append({
            "name": f"bridge-{vendor.value}-host-{nbytes >> 20}MiB", "baseline": "cupy pinned get+set",
            "baseline_s": raw_s, "subject": "export (D2H) + import (H2D)", "subject_s": staged_s,
            "ratio": raw_s / staged_s,
            "notes": f"{devices[0].display_name}; raw {gbps(2 * nbytes, raw_s)}, bridge {gbps(2 * nbytes, staged_s)} (both directions counted)",
        })

        dev_copy_s = best_of(repeats, lambda: dev.copy(), sync)
        peer = create(vendor, "gc", 1 if len(devices) > 1 else 0)

        def device_bridge():
            h2 = peer.import_activation(a.export_activation(h))
            peer.release_activation(h2)

        d2d_s = best_of(repeats, device_bridge, sync)
        check = peer.import_activation(a.export_activation(h))
        assert np.array_equal(peer.export_activation(check).to_array(), host)
        peer.release_activation(check)
        a.release_activation(h)
        rows.append({
            "name": f"bridge-{vendor.value}-device-{nbytes >> 20}MiB", "baseline": "cupy device copy",
            "baseline_s": dev_copy_s, "subject": f"cuda->cuda bridge (device {peer.device_index})", "subject_s": d2d_s,
            "ratio": dev_copy_s / d2d_s,
            "notes": f"{'peer to peer' if len(devices) > 1 else 'same device'}; copy {gbps(nbytes, dev_copy_s)}, bridge {gbps(nbytes, d2d_s)}",
        })
    return rows


def run(quick: bool) -> list[dict]:
    nbytes = (32 if quick else 256) << 20
    repeats = 3 if quick else 5
    rows = cpu_rows(nbytes, repeats)
    rows += witness_rows(10**7 if quick else 10**8, repeats)
    if probe(Vendor.cuda).available or probe(Vendor.rocm).available:
        rows += gpu_rows(nbytes, repeats)
    return rows
