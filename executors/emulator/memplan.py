"""Memory plans and the ROM histogram, from either source.

A *memory operation* is one access to one aligned 8-byte word:
``[word address, step, is_write]`` (a load touching two words is two
operations; an AMO is a read then a write; a fetch from writable memory
is a read).  The planner sorts the operations by (address, step) — a
stable sort by address of operations already in execution order — and
cuts the sorted rows into plans of at most ``rows_per_plan`` rows, one
memory instance each (ZisK's Mem instance has 2^22 rows).

The fast backend's MO runner logs the operations while re-running the
program; the reference path derives the same operations (and the ROM
histogram) by re-executing every chunk from its min trace, so both paths
give identical plans and histograms.

The planner is written once over an array namespace ``xp`` (numpy, or
cupy when placed on a CUDA executor); with a device namespace it returns
the device bytes it used as the second value, as the seed's
``gpu_mops_used_bytes``.
"""

from __future__ import annotations

import numpy as np

from . import reference
from .elf import Program
from .output import EmuTrace, MemPlan, RomHistogram

__all__ = ["MEM_PLAN_COLUMNS", "MEM_ROW_COLUMNS", "mem_plan_table", "mem_rows",
           "plan_memory", "mem_ops_from_min_traces", "mem_plans_from_min_traces", "rom_histogram_from_min_traces"]

DEFAULT_ROWS_PER_PLAN = 1 << 22
#: one plan a row, in ``segment_id`` order: :class:`MemPlan`'s fields, ``first``/``last`` split into address and step
MEM_PLAN_COLUMNS = ("segment_id", "first_row", "count", "first_address", "first_step", "last_address", "last_step",
                    "is_last")


#: one memory operation a row, in the planner's order (by word address, then step): plan k is rows
#: ``first_row`` .. ``first_row + count - 1`` of it
MEM_ROW_COLUMNS = ("address", "step", "is_write")


def mem_rows(ops: np.ndarray) -> np.ndarray:
    """Memory operations (``[word address, step, is_write]`` in execution order) in the order :func:`plan_memory`
    cuts them into plans: a stable sort by address, so one word's rows stay in execution order.

    >>> mem_rows(np.array([[16, 0, 0], [8, 1, 1], [16, 2, 1]])).tolist()
    [[8, 1, 1], [16, 0, 0], [16, 2, 1]]
    """
    ops = np.asarray(ops, dtype=np.int64).reshape(-1, 3)
    return np.ascontiguousarray(ops[np.argsort(ops[:, 0], kind="stable")])


def mem_plan_table(plans: list[MemPlan]) -> np.ndarray:
    """The plans as int64 rows of :data:`MEM_PLAN_COLUMNS` (addresses as two's-complement bit patterns).

    >>> mem_plan_table([MemPlan(0, 0, 3, (8, 1), (16, 0), True)]).tolist()
    [[0, 0, 3, 8, 1, 16, 0, 1]]
    """
    rows = [(m.segment_id, m.first_row, m.count, m.first[0], m.first[1], m.last[0], m.last[1], int(m.is_last))
            for m in plans]
    table = np.array(rows, dtype=np.uint64).reshape(len(rows), len(MEM_PLAN_COLUMNS))
    return table.view(np.int64)


def plan_memory(ops: np.ndarray, rows_per_plan: int = DEFAULT_ROWS_PER_PLAN, xp=np) -> tuple[list[MemPlan], int | None]:
    """Sort (n, 3) memory operations by (address, step) and cut them into plans."""
    if rows_per_plan <= 0:
        raise ValueError(f"rows_per_plan must be positive, got {rows_per_plan}")
    ops = xp.asarray(ops, dtype=xp.int64).reshape(-1, 3)
    order = xp.argsort(ops[:, 0], kind="stable")
    addr = ops[order, 0]
    step = ops[order, 1]
    n = int(addr.shape[0])
    firsts = list(range(0, n, rows_per_plan))
    lasts = [min(f + rows_per_plan, n) - 1 for f in firsts]
    a_first, s_first = addr[firsts].tolist() if n else [], step[firsts].tolist() if n else []
    a_last, s_last = addr[lasts].tolist() if n else [], step[lasts].tolist() if n else []
    plans = [
        MemPlan(i, f, l - f + 1, (a_first[i] & ((1 << 64) - 1), s_first[i]), (a_last[i] & ((1 << 64) - 1), s_last[i]),
                i == len(firsts) - 1)
        for i, (f, l) in enumerate(zip(firsts, lasts))
    ]
    device_bytes = None
    if xp is not np:
        device_bytes = int(ops.nbytes + order.nbytes + addr.nbytes + step.nbytes)
    return plans, device_bytes


def mem_ops_from_min_traces(program: Program, min_traces: list[EmuTrace], input_size: int = 0) -> np.ndarray:
    """The run's memory operations, by re-executing each chunk (reference)."""
    rows = []
    for t in min_traces:
        _, _, port = reference.replay_chunk(program, t, input_size, log_ops=True)
        rows.extend(port.ops)
    return np.array(rows, dtype=np.uint64).astype(np.int64).reshape(-1, 3)


def mem_plans_from_min_traces(program: Program, min_traces: list[EmuTrace], input_size: int = 0,
                              rows_per_plan: int = DEFAULT_ROWS_PER_PLAN, xp=np):
    return plan_memory(mem_ops_from_min_traces(program, min_traces, input_size), rows_per_plan, xp)


def rom_histogram_from_min_traces(program: Program, min_traces: list[EmuTrace], input_size: int = 0) -> RomHistogram:
    pcs = []
    for t in min_traces:
        _, _, port = reference.replay_chunk(program, t, input_size, log_pcs=True)
        pcs.extend(port.pcs)
    steps = sum(t.steps for t in min_traces)
    uniq, counts = np.unique(np.array(pcs, dtype=np.uint64), return_counts=True)
    return RomHistogram(steps, uniq.astype(np.uint64), counts.astype(np.uint64))
