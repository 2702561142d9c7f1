"""Witness tables and instance plans: what the proving side of a zkVM needs
after the emulator has run (ZisK's "Planning" and "Witness Computation").

Algorithm
---------
*Planning* packs work into state-machine instances of fixed row counts.
A state machine (:data:`STATE_MACHINES`) consumes the steps of some
operation classes; its per-chunk row counts are the sums of those
columns of ``ExecutionOutput.counters``.  :func:`plan` walks the chunks
in order and fills instances of ``size`` rows one after another, the way
ZisK's ``plan(counts, size)`` does: a chunk whose rows do not fit in the
current instance is split, its first rows closing that instance and the
rest opening the next, so each instance is a list of
``(chunk_id, skip, count)`` slices (ZisK's ``CheckPoint::Multiple`` with a
``CollectSkipper``).  Chunks with no rows for a machine appear in none of
its instances.  Every instance is full except the last of each machine::

    >>> plan([5, 3, 0, 7], 6)
    [((0, 0, 5), (1, 0, 1)), ((1, 1, 2), (3, 0, 4)), ((3, 4, 3),)]

*Witness computation* re-executes one chunk from its min trace alone
(:func:`witness_table`: no memory image, so one call per chunk is one
Dask task, on any worker, in parallel with the others) and records one
row per step, columns :data:`COLUMNS`.  An instance's rows are then the
rows of its slices, taken from each chunk's table by
:func:`instance_table`: the chunk's rows whose class the machine
consumes, ``skip`` of them skipped, ``count`` of them kept.

Both backends give identical tables (the conformance suite checks it).
The fast backend releases the GIL, so chunk tables computed from several
threads run in parallel.

Witness columns (``int64``; 64-bit register and memory values are stored
as their two's-complement bit patterns, ``table.view(np.uint64)`` reads
them unsigned)
----------------------------------------------------------------------
==========  ==============================================================
step        global index of the step
pc          address of the instruction
insn        the 32-bit instruction word (the 16-bit parcel of a compressed
            instruction); -1 if the fetch faulted
op          index into :data:`hetflow.executors.emulator.isa.TABLE`;
            -1 illegal instruction, -2 fetch fault
cls         operation class, index into ``isa.CLASSES`` (the counter the
            step incremented; illegal and faulting fetches count as system)
rd          the register the step wrote, 0 if none (stores, branches,
            system instructions, a trapped step); the write syscall's
            ``ecall`` writes a0 (10)
rd_value    x[rd] after the step (0 when rd is 0)
rs1_value   x[rs1] before the step, 0 if the format has no rs1
rs2_value   x[rs2] before the step, 0 if the format has no rs2
mem_op      data access: 0 none, 1 read (loads, LR), 2 write (stores,
            a successful SC), 3 read then write (AMOs); 0 on a trapped step
mem_width   bytes accessed (1, 2, 4 or 8), 0 if none
mem_addr    the access's byte address, 0 if none
mem_read    the value read, zero-extended from mem_width bytes
mem_write   the value written, mem_width bytes
trap        mcause of the trap the step took (to mtvec), -1 if none
next_pc     pc of the next step
==========  ==============================================================

Instruction fetches and the write syscall's buffer are memory reads of
the min trace but not data accesses of a row.

Public API
----------
``plan(counts, size) -> list[tuple[(chunk_id, skip, count), ...]]``
``plan_instances(counters, sizes=DEFAULT_SIZES, machines=STATE_MACHINES) -> list[Instance]``
``witness_table(program, trace, *, input_size=0, backend="fast") -> np.ndarray``
``instance_table(instance, tables) -> np.ndarray``
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .elf import Program, load_elf
from .isa import CLASSES
# the state machines are the instance table's codes (output.instances_array): defined there, used here
from .output import STATE_MACHINES, CountersChunkMetrics, EmuTrace

__all__ = ["COLUMNS", "STATE_MACHINES", "DEFAULT_SIZES", "Instance", "plan", "plan_instances", "witness_table",
           "instance_table"]

COLUMNS = ("step", "pc", "insn", "op", "cls", "rd", "rd_value", "rs1_value", "rs2_value", "mem_op", "mem_width",
           "mem_addr", "mem_read", "mem_write", "trap", "next_pc")

#: rows per instance, as ZisK's pil/zisk.pil sizes them
DEFAULT_SIZES: dict[str, int] = {"main": 1 << 22, "binary": 1 << 22, "arith": 1 << 21, "mem": 1 << 22}

Slice = tuple[int, int, int]          # (chunk_id, skip, count)


@dataclass(frozen=True)
class Instance:
    """One instance of a state machine: ``rows`` rows (at most ``size``)
    taken from consecutive chunks as ``(chunk_id, skip, count)`` slices."""

    machine: str
    segment_id: int                   # index among the machine's instances
    size: int
    slices: tuple[Slice, ...]
    classes: tuple[str, ...]
    is_last: bool

    @property
    def rows(self) -> int:
        return sum(c for _, _, c in self.slices)

    @property
    def chunks(self) -> tuple[int, ...]:
        return tuple(c for c, _, _ in self.slices)

    def to_json(self) -> dict:
        return {"machine": self.machine, "segment_id": self.segment_id, "size": self.size, "rows": self.rows,
                "slices": [list(s) for s in self.slices], "classes": list(self.classes), "is_last": self.is_last}


def plan(counts: Sequence[int] | np.ndarray, size: int) -> list[tuple[Slice, ...]]:
    """Pack per-chunk row counts (chunk ids = positions) into instances of
    ``size`` rows; see the module docstring.

    Raises
    ------
    ValueError: ``size`` not positive, or a negative count.

    >>> plan([4, 4], 4)
    [((0, 0, 4),), ((1, 0, 4),)]
    >>> plan([], 8)
    []
    """
    if size <= 0:
        raise ValueError(f"instance size must be positive, got {size}")
    instances: list[tuple[Slice, ...]] = []
    current: list[Slice] = []
    free = size
    for chunk_id, count in enumerate(int(c) for c in counts):
        if count < 0:
            raise ValueError(f"chunk {chunk_id}: negative count {count}")
        skip = 0
        while count > 0:
            take = min(free, count)
            current.append((chunk_id, skip, take))
            skip += take
            count -= take
            free -= take
            if free == 0:
                instances.append(tuple(current))
                current, free = [], size
    if current:
        instances.append(tuple(current))
    return instances


def plan_instances(counters: CountersChunkMetrics, sizes: Mapping[str, int] = DEFAULT_SIZES,
                   machines: Mapping[str, Sequence[str]] = STATE_MACHINES) -> list[Instance]:
    """Instances of every machine in ``sizes``, machine by machine in
    ``sizes`` order, from the run's per-chunk counters.

    Raises
    ------
    ValueError: a machine without a class list, or an unknown class.
    """
    out = []
    for name, size in sizes.items():
        if name not in machines:
            raise ValueError(f"unknown state machine {name!r}; known: {', '.join(machines)}")
        classes = tuple(machines[name])
        unknown = [c for c in classes if c not in counters.classes]
        if unknown:
            raise ValueError(f"state machine {name!r}: unknown operation classes {unknown}")
        cols = [counters.classes.index(c) for c in classes]
        per_chunk = counters.table[:, cols].sum(axis=1) if len(counters.table) else np.zeros(0, dtype=np.int64)
        packed = plan(per_chunk, size)
        out.extend(Instance(name, i, size, slices, classes, i == len(packed) - 1) for i, slices in enumerate(packed))
    return out


def witness_table(program: Program | str, trace: EmuTrace, *, input_size: int = 0, backend: str = "fast",
                  out: np.ndarray | None = None, _image=None) -> np.ndarray:
    """Re-execute one chunk from its min trace into its witness table,
    shape ``(trace.steps, len(COLUMNS))``, dtype int64.

    ``input_size`` is the run's input length (the input region's size;
    its bytes come from the min trace). ``out``, a C-contiguous int64
    array of that shape (the chunk's rows of the whole run's table),
    receives the rows and is returned: the chunks of a run fill one
    table in place, with no copy to assemble it.

    Raises
    ------
    EmulatorError: the min trace does not re-execute to its own end (too
    few or too many recorded reads, a wrong end flag).
    """
    if not isinstance(program, Program):
        program = load_elf(program)
    if backend == "native":                      # translated code writes the rows (no numba)
        from . import native_runners
        _, _, m = native_runners.replay_chunk(program, trace, input_size, image=_image, mode=native_runners.WITNESS,
                                              out=out)
        return m.wbuf
    if backend == "fast":
        from . import fast
        _, _, m = fast.replay_chunk(program, trace, input_size, image=_image, mode=fast.WITNESS, out=out)
        return m.wbuf
    if backend == "reference":
        from . import reference
        _, _, port = reference.replay_chunk(program, trace, input_size, witness=True)
        table = np.array(port.rows, dtype=object).reshape(-1, len(COLUMNS))
        rows = np.array([[_i64(v) for v in row] for row in table], dtype=np.int64).reshape(-1, len(COLUMNS))
        if out is None:
            return rows
        if out.shape != rows.shape or out.dtype != np.int64:
            raise ValueError(f"chunk {trace.chunk_id}: a witness buffer of {rows.shape[0]} rows of "
                             f"{len(COLUMNS)} int64, not {out.shape} {out.dtype}")
        out[...] = rows
        return out
    raise ValueError(f"unknown emulator backend {backend!r}")


def _i64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def instance_table(instance: Instance, tables: Mapping[int, np.ndarray] | Sequence[np.ndarray]) -> np.ndarray:
    """The rows of one instance, from the witness tables of its chunks
    (``tables[chunk_id]``; only the instance's chunks are needed)."""
    cls_ids = np.array([CLASSES.index(c) for c in instance.classes], dtype=np.int64)
    parts = []
    for chunk_id, skip, count in instance.slices:
        t = tables[chunk_id]
        rows = t[np.isin(t[:, COLUMNS.index("cls")], cls_ids)]
        if skip + count > len(rows):
            raise ValueError(f"instance {instance.machine}/{instance.segment_id}: chunk {chunk_id} has "
                             f"{len(rows)} {instance.machine} rows, the plan takes {skip}..{skip + count}")
        parts.append(rows[skip:skip + count])
    return np.concatenate(parts) if parts else np.zeros((0, len(COLUMNS)), dtype=np.int64)
