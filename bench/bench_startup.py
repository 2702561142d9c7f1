"""``hetflow emulate`` start-up for short guests, against Unicorn, whole process against whole process.

Each row starts ``hetflow emulate GUEST`` and ``python bench/unicorn_guest.py
GUEST`` (QEMU's RISC-V core under Python, the same memory map and ABI) in
turn, A B A B ..., as fresh processes of one fresh venv that holds the
built wheel and Unicorn, as a user installs them (``bench/user_venv.py``;
the console script beside the interpreter that runs Unicorn, not a pyenv
shim, which would add its own start to one side), and takes the median
wall time of each; the ratio is Unicorn's time over hetflow's (above 1,
hetflow starts faster). The guests are short, so the figure is start-up: Python, the CLI,
the ELF loader and the emulator. A third row runs the fast backend from its
first step (``--no-interpreter-start``), which loads numba's compiled
interpreter, to show what the reference interpreter's first 20,000 steps
spare a short guest; two more run the native backend from its first step
with its translation in the disk cache (the warm-up run of the pair puts
it there), which loads neither numba, llvmlite nor pyelftools.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GUESTS = HERE.parent / "examples" / "guests"


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def _pair(a: list[str], b: list[str], runs: int) -> tuple[float, float]:
    _wall(a), _wall(b)  # warm the page cache and numba's on-disk cache
    times_a, times_b = [], []
    for _ in range(runs):
        times_a.append(_wall(a))
        times_b.append(_wall(b))
    return statistics.median(times_a), statistics.median(times_b)


def run(quick: bool) -> list[dict]:
    try:
        import unicorn  # noqa: F401
    except ImportError:
        return []
    sys.path.insert(0, str(HERE))
    from user_venv import user_python

    python, under = user_python()
    # the console script itself, beside the interpreter that runs Unicorn:
    # a pyenv shim in front of either would add its own start-up (~70 ms)
    hetflow = python.parent / "hetflow"
    if not hetflow.exists():
        return []
    runs = 3 if quick else 9
    rows = []
    cases = [("fib.elf", [], ""), ("sdk/hello.elf", [], ""),
             ("fib.elf", ["--no-interpreter-start"], " (fast backend from the first step)"),
             ("fib.elf", ["--backend", "native", "--no-interpreter-start"],
              " (native backend from the first step, translation in the disk cache)"),
             ("sdk/hello.elf", ["--backend", "native", "--no-interpreter-start"],
              " (native backend from the first step, translation in the disk cache)")]
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("HETFLOW_NATIVE_CACHE")
        os.environ["HETFLOW_NATIVE_CACHE"] = cache         # the warm-up run of each pair fills it
        try:
            for guest, flags, what in cases:
                path = str(GUESTS / guest)
                subject_s, baseline_s = _pair([str(hetflow), "emulate", *flags, path],
                                              [str(python), str(HERE / "unicorn_guest.py"), path], runs)
                label = " ".join(["hetflow emulate", *flags])
                rows.append({"name": f"start-up, {guest}{what}",
                             "baseline": "unicorn_guest.py (Unicorn), whole process", "baseline_s": baseline_s,
                             "subject": f"{label}, whole process", "subject_s": subject_s,
                             "ratio": baseline_s / subject_s,
                             "notes": f"median wall of {runs} fresh processes each, in turn, the console script and "
                                      f"Unicorn, {under}"})
        finally:
            if old is None:
                del os.environ["HETFLOW_NATIVE_CACHE"]
            else:
                os.environ["HETFLOW_NATIVE_CACHE"] = old
    return rows
