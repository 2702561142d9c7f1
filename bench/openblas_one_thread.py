"""OpenBLAS's one-thread GEMM before and after a multiply on several threads (bench/README.md, stop 54).

    python bench/openblas_one_thread.py limit         # the pool limited to 1 before any GEMM
    python bench/openblas_one_thread.py prime-limit   # one 256 x 256 float32 multiply on every core first
    python bench/openblas_one_thread.py unlimited     # the pool left at its own limit

Each prints the microseconds a 256 x 256 float32 multiply takes with one
caller and with two threads calling at once (300 multiplies each), and
the CPU time over the wall time.
"""

import os
import sys
import threading
import time

import numpy as np
from threadpoolctl import ThreadpoolController

mode = sys.argv[1] if len(sys.argv) > 1 else "limit"
if "prime" in mode:
    a = np.ones((256, 256), np.float32)
    a @ a
if "limit" in mode:
    ThreadpoolController().limit(limits=1, user_api="blas")


def work(reps: int = 300) -> None:
    a = np.random.rand(256, 256).astype(np.float32)
    b = a.copy()
    for _ in range(reps):
        a @ b


for callers in (1, 2):
    start, cpu = time.perf_counter(), os.times()
    threads = [threading.Thread(target=work) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, used = time.perf_counter() - start, os.times()
    print(f"{mode}: {callers} caller(s): {wall / (300 * callers) * 1e6:.0f} us a multiply, "
          f"cpu/wall {(used.user + used.system - cpu.user - cpu.system) / wall:.2f}")
