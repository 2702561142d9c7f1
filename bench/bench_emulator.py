"""Emulator benchmarks (issue 5): steps/s of the reference and fast
backends on the same guest, chunk re-execution and witness tables with
1 vs 2 threads.

``run(quick)`` returns rows ``{name, baseline, baseline_s, subject,
subject_s, ratio, notes}`` with ratio = baseline_s / subject_s, measured
side by side in one process.  The fast backend's compile cost is paid
(or loaded from numba's cache) in a warm-up run before timing.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hetflow.executors.emulator import fast, load_elf, reference

GUESTS = Path(__file__).resolve().parents[1] / "examples" / "guests"


def _best(fn, repeat):
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def run(quick: bool) -> list[dict]:
    rows = []
    prog = load_elf(GUESTS / "sort.elf")
    chunk = 1 << 16
    fast.run(prog, b"", chunk)                                    # warm-up: compile or load the cache
    ref_s, ref = _best(lambda: reference.run(prog, b"", chunk), 1)
    fast_s, fst = _best(lambda: fast.run(prog, b"", chunk), 3 if quick else 10)
    steps = ref["steps"]
    assert steps == fst["steps"]
    rows.append({
        "name": "emulate sort.elf with min traces",
        "baseline": "reference", "baseline_s": ref_s, "subject": "fast", "subject_s": fast_s,
        "ratio": ref_s / fast_s,
        "notes": f"{steps} steps, chunk_steps={chunk}; reference {steps / ref_s / 1e6:.3f} M steps/s, "
                 f"fast {steps / fast_s / 1e6:.1f} M steps/s (one thread, min traces recorded)",
    })

    # witness-style re-execution of every chunk, 1 vs 2 threads (fast replay releases the GIL)
    traces = fst["traces"] if quick else fast.run(prog, b"", 1 << 14)["traces"]
    image = fast.Image(prog, None, 0)

    def replay(workers):
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda t: fast.replay_chunk(prog, t, 0, image), traces))

    one_s, _ = _best(lambda: replay(1), 3 if quick else 10)
    two_s, _ = _best(lambda: replay(2), 3 if quick else 10)
    rows.append({
        "name": "re-execute sort.elf chunks from min traces",
        "baseline": "fast, 1 thread", "baseline_s": one_s, "subject": "fast, 2 threads", "subject_s": two_s,
        "ratio": one_s / two_s,
        "notes": f"{len(traces)} chunks, {steps} steps; {steps / one_s / 1e6:.1f} vs {steps / two_s / 1e6:.1f} M steps/s",
    })

    # witness tables (one per chunk, the `witness` phase's Dask tasks), 1 vs 2 threads
    from hetflow.executors.emulator.witness import witness_table

    def tables(workers):
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda t: witness_table(prog, t, _image=image), traces))

    tables(1)
    w1_s, _ = _best(lambda: tables(1), 3 if quick else 10)
    w2_s, _ = _best(lambda: tables(2), 3 if quick else 10)
    rows.append({
        "name": "witness tables of sort.elf chunks",
        "baseline": "fast, 1 thread", "baseline_s": w1_s, "subject": "fast, 2 threads", "subject_s": w2_s,
        "ratio": w1_s / w2_s,
        "notes": f"{len(traces)} chunks, {steps} rows x 16 columns; {steps / w1_s / 1e6:.1f} vs "
                 f"{steps / w2_s / 1e6:.1f} M rows/s",
    })
    return rows


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(run("--quick" in sys.argv), indent=2))
