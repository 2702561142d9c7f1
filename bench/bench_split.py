"""One executor over two CPU devices against one device with the same total threads (issue 34).

A chain of matmuls, ``x @ w1 @ w2`` at 4096 x 4096 fp32 (1024 with
--quick), executed as one partition by the CPU executor: the baseline is
one device (the whole host, its BLAS pool at every core this process may
run on), the subject the same executor split across two core sets
(``devices: [0, 1]``), each device its own pinned thread with its BLAS
pool at its half of the cores. Both run in this process, pairs turn about
(baseline first, then subject first), after one warm-up each; the row
gives the medians and ``ratio = baseline_s / subject_s`` (above 1: the
split is faster). The rows of the first product stay on their devices for
the second (the row's ``moves`` is 0): the chain never gathers until the
export. Both results are checked equal within fp32 rounding.

The second row is the same chain on GPUs: one CUDA/ROCm executor on one
GPU against the one executor over two (``SplitCudaExecutor``, pieces
computed under each ``cupy.cuda.Device``, the weights copied GPU to GPU
by peer copy where the GPUs allow it, else through the host). It is
skipped, with the reason, where fewer than two GPUs are present;
``bench/gpu_check.sh`` runs it on a GPU machine.

Run ``python bench/run.py split``; ``uptime`` before it says the load.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from hetflow.executors.base import DeviceSet, Dtype, PortableActivation, Vendor
from hetflow.executors.cpu import CpuExecutor
from hetflow.executors.payload import encode_plan
from hetflow.executors.split import SplitCpuExecutor

NODES = [{"id": "h", "op": "matmul", "args": {}, "dtype": "fp32", "inputs": ["x", "w1"]},
         {"id": "y", "op": "matmul", "args": {}, "dtype": "fp32", "inputs": ["h", "w2"]}]


def _blas_threads(n: int | None) -> None:
    """Set the process-wide BLAS pool (None: leave it); the baseline gets every core, as one device would."""
    from threadpoolctl import ThreadpoolController

    for lib in ThreadpoolController().lib_controllers:
        if n is not None and lib.user_api == "blas":
            for prefix in ("", "scipy_"):
                for suffix in ("", "64_", "_64"):
                    fn = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                    if fn is not None:
                        fn(n)
                        break
                else:
                    continue
                break
            else:
                lib.set_num_threads(n)


def _chain(ex, arrays, vendor: Vendor = Vendor.cpu) -> tuple[float, np.ndarray]:
    handles = [ex.import_activation(PortableActivation.from_array(a, Dtype.fp32)) for a in arrays]
    plan = encode_plan(vendor, ["x", "w1", "w2"], NODES, ["y"])
    t0 = time.perf_counter()
    [y] = ex.execute(plan, handles)
    out = ex.export_activation(y).to_array()  # the assembled bytes, as a bridge or an output reads them
    seconds = time.perf_counter() - t0
    for h in handles + [y]:
        ex.release_activation(h)
    return seconds, out


def run(quick: bool) -> list[dict]:
    return _cpu_rows(quick) + _gpu_rows(quick)


def _pairs(base, subject, pairs: int) -> tuple[float, float]:
    """Medians of ``pairs`` runs of each, turn about (baseline first, then subject first)."""
    b_s, s_s = [], []
    for i in range(pairs):
        order = (base, subject) if i % 2 == 0 else (subject, base)
        for fn in order:
            (b_s if fn is base else s_s).append(fn()[0])
    return statistics.median(b_s), statistics.median(s_s)


def _gpu_rows(quick: bool) -> list[dict]:
    from hetflow.executors import probe

    gpu = next((v for v in (Vendor.cuda, Vendor.rocm) if probe(v).available), None)
    count = len(probe(gpu).devices) if gpu is not None else 0
    name = "split matmul chain on GPUs"
    if count < 2:
        why = f"{gpu.value} has {count} GPU here" if gpu is not None else f"no GPU here: {probe(Vendor.cuda).reason}"
        return [{"name": name, "baseline": "1 GPU", "baseline_s": None, "subject": "2 GPUs", "subject_s": None,
                 "ratio": None, "notes": f"skipped: two GPUs needed; {why}"}]
    import cupy

    from hetflow.executors.cuda import CudaExecutor, SplitCudaExecutor, peer_access

    n = 1024 if quick else 4096
    rng = np.random.default_rng(34)
    arrays = [rng.standard_normal((n, n), dtype=np.float32) / np.float32(n ** 0.5) for _ in range(3)]
    one, two = CudaExecutor("one", 0), SplitCudaExecutor("two", DeviceSet((0, 1)))
    _, want = _chain(one, arrays, gpu)
    _, got = _chain(two, arrays, gpu)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    moves, moved = two.moves, dict(two.move_bytes)
    b, s = _pairs(lambda: _chain(one, arrays, gpu), lambda: _chain(two, arrays, gpu), 3 if quick else 8)
    peer = "peer" if peer_access(cupy, 0, 1) and peer_access(cupy, 1, 0) else "staged through the host"
    return [{"name": f"{name} {n}x{n} x2", "baseline": f"1 {gpu.value} GPU", "baseline_s": b,
             "subject": f"2 {gpu.value} GPUs ({peer})", "subject_s": s, "ratio": b / s,
             "notes": f"medians, pairs turn about; layout moves {moves}, bytes moved in the first chain {moved} "
                      f"(each imported weight, laid out by rows, gathered on the first GPU and copied to the second; "
                      f"the result's pieces to the first for export)"}]


def _cpu_rows(quick: bool) -> list[dict]:
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        return [{"name": "split matmul chain", "baseline": "1 device", "baseline_s": None, "subject": "2 devices",
                 "subject_s": None, "ratio": None, "notes": f"skipped: two CPU devices need two cores, this has {cores}"}]
    n = 1024 if quick else 4096
    rng = np.random.default_rng(34)
    arrays = [rng.standard_normal((n, n), dtype=np.float32) / np.float32(n ** 0.5) for _ in range(3)]
    one, two = CpuExecutor("one"), SplitCpuExecutor("two", DeviceSet((0, 1)))
    _blas_threads(cores)

    def base() -> tuple[float, np.ndarray]:
        _blas_threads(cores)
        return _chain(one, arrays)

    def subject() -> tuple[float, np.ndarray]:
        return _chain(two, arrays)

    _, want = base()
    _, got = subject()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    moves = two.moves
    pairs = 3 if quick else 4
    b, s = _pairs(base, subject, pairs)
    load = os.getloadavg()[0]
    return [{"name": f"split matmul chain {n}x{n} x2", "baseline": f"1 device, {cores} BLAS threads",
             "baseline_s": b, "subject": f"2 core sets, {cores // 2} thread(s) each", "subject_s": s,
             "ratio": b / s, "notes": f"medians of {pairs} pairs turn about; moves between devices {moves}; "
                                      f"load {load:.2f} on {cores} cores"}]


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)
