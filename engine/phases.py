"""Emulator phases as pipeline nodes: what each phase takes and yields, and how a run executes them.

Algorithm
---------
A stage with ``phase:`` belongs to an emulator (``emulators:`` in the
manifest), never to an executor: it is a node of the planner's graph
whose only placement is its emulator, :func:`target` (``emulator:NAME``),
and :func:`planned` is what the plan knows of it before the guest runs
(its fan-out and the bound on its array).  The phases and what they
yield (:data:`PHASES`):

``execute``        runs the guest once (``ExecutionOutput``); fields
                   ``steps``, ``exit_code``, ``pub_outs``, ``stdout``,
                   ``chunks``, ``end_reason``, ``counters``; arrays
                   ``registers``, ``min_trace``, ``min_trace_index``.
``mem-plans``      the memory plans (from the fast backend's MO runner, or
                   from the min traces on the reference path); fields
                   ``plans``, ``count``; arrays ``table``, ``rows``.
``rom-histogram``  pc -> times executed (RH runner, or the min traces);
                   fields ``steps``, ``pcs``, ``counts``.
``plan``           state-machine instances packed from the per-chunk
                   counters (``witness.plan_instances``); fields
                   ``instances``, ``count``; array ``instances_table``.
``witness``        every chunk re-executed from its min trace alone into
                   its witness table, one Dask task per chunk; the
                   tables, concatenated in chunk order, are an *array*
                   (an activation); fields ``rows``, ``chunks``.

A ``witness`` phase is an array itself (a stage names it alone). The
other phases yield JSON fields, which an ``outputs:`` entry
``STAGE.FIELD`` (or ``STAGE`` for all of them) persists in the run
record, and some also yield *array fields* (:class:`ArrayField`), int64
tables an executor stage takes as the input ``STAGE.FIELD`` and an
``outputs:`` entry persists as ``.npy``. Each array field a stage reads
is a node of its own in the graph, a phase of kind ``array``
(:data:`ARRAY_PHASE`, id ``STAGE.FIELD``, its one input the phase it
comes from), so it is placed, bridged and lowered as a witness table is:
its ``phase:STAGE.FIELD`` task builds the table from its phase's result
and hands it to the bridge's import.

Witness table
-------------
The activation a ``witness`` phase hands to executor stages is its table
itself: int64, shape ``(rows, 16)``, one row per step and the columns of
``witness.COLUMNS`` (64-bit register and memory values as their
two's-complement bit patterns; ``view(np.uint64)`` reads them unsigned),
128 bytes a step. The table is allocated once, when the chunk count is
known, and each chunk's task writes its rows into its own slice of it
(:func:`hetflow.executors.emulator.witness_table` with ``out=``), so
nothing assembles it: the ``phase:ID`` task hands a read-only view of the
table's bytes to the bridge, and a CPU executor imports it without a copy.

Rounds
------
A Dask graph is static, and the number of chunks is known only after
``execute`` has run.  A run therefore executes in two rounds on the same
thread pool: round 1 is one task per ``execute`` phase; round 2 is the
rest of the pipeline, lowered once the chunk counts are known: the other
phases (``phase:ID``), ``witness:ID:I`` per chunk with ``phase:ID``
handing on the table they filled, and the executor graph, whose bridges from a
phase (kind ``emulator output import``) import ``phase:ID``'s portable
activation on the consuming executor.  Phase results are host data held
by the run, never executor handles, so the handle refcounts and the
zero-live-activations guarantee are the executor graph's, unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from hetflow.engine.errors import StageFailure
from hetflow.executors.base import Dtype, PortableActivation

__all__ = ["PhaseKind", "ArrayField", "ARRAY_PHASE", "array_ref", "check_array_input", "PHASES", "EmulatorDecl",
           "PhaseDecl", "witness_activation", "ARRAY_DTYPE", "WITNESS_ROW_BYTES", "PhaseRunner", "EMULATOR_BRIDGE",
           "target", "planned", "execution_order", "GuestExit", "memory_bound_warning", "host_memory"]

#: the dtype of every array a phase yields (a witness table, an array field), and the bytes of one witness row:
#: 16 int64 columns
ARRAY_DTYPE = Dtype.int64
WITNESS_ROW_BYTES = 16 * 8
EMULATOR_BRIDGE = "emulator output import"


@dataclass(frozen=True)
class ArrayField:
    """An int64 array a phase yields beside its JSON fields: its ``columns`` in order, and what the plan knows of its
    first axis before the guest runs (``rows``: ``None`` for a vector whose entries are the columns, ``"chunks"`` and
    ``"instances"`` bounded from ``max_steps``, ``"unknown"`` until it runs).

    The column names are declared here, once for the engine (the plan, the record's ``columns``); the builders in
    :mod:`hetflow.executors.emulator` write the same order (``tests/test_phase_outputs.py`` holds them equal).
    """

    name: str
    columns: tuple[str, ...]
    rows: str | None


@dataclass(frozen=True)
class PhaseKind:
    name: str
    inputs: tuple[str, ...]           # the phase each input must be
    array: bool                       # is an activation itself (a stage names it alone)
    fields: tuple[str, ...]           # its JSON fields
    args: tuple[str, ...] = ()
    arrays: tuple[ArrayField, ...] = ()   # its array fields: a stage may take one as an input ``STAGE.FIELD``

    def array_field(self, name: str) -> ArrayField | None:
        return next((a for a in self.arrays if a.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        """Every field an ``outputs:`` entry may name: the JSON fields, then the array fields."""
        return self.fields + tuple(a.name for a in self.arrays)


_X = tuple(f"x{i}" for i in range(32))
_EXECUTE_ARRAYS = (
    ArrayField("registers", (*_X, "pc"), None),
    # a word stream: each chunk's record is these words, then its ``reads`` memory words
    ArrayField("min_trace", ("chunk_id", "steps", "end", "pc", "step", "priv", "reservation", *_X, "mstatus", "mtvec",
                             "mepc", "mcause", "mtval", "mscratch", "mie", "reads"), "unknown"),
    ArrayField("min_trace_index", ("offset", "length"), "chunks"),
)
PHASES: dict[str, PhaseKind] = {
    "execute": PhaseKind("execute", (), False,
                         ("steps", "exit_code", "pub_outs", "stdout", "chunks", "end_reason", "counters"),
                         arrays=_EXECUTE_ARRAYS),
    "mem-plans": PhaseKind("mem-plans", ("execute",), False, ("plans", "count"), ("rows_per_plan",), arrays=(
        ArrayField("table", ("segment_id", "first_row", "count", "first_address", "first_step", "last_address",
                             "last_step", "is_last"), "unknown"),
        # the memory operations the plans cut: the Mem machine's rows (a second MO run makes them)
        ArrayField("rows", ("address", "step", "is_write"), "unknown"))),
    "rom-histogram": PhaseKind("rom-histogram", ("execute",), False, ("steps", "pcs", "counts")),
    "plan": PhaseKind("plan", ("execute",), False, ("instances", "count"), ("sizes",), arrays=(
        ArrayField("instances_table", ("machine", "segment_id", "size", "rows", "first_chunk", "first_skip",
                                       "last_chunk", "last_count", "is_last"), "instances"),)),
    "witness": PhaseKind("witness", ("execute",), True, ("rows", "chunks")),
}

#: the kind of the node that carries one array field (``STAGE.FIELD``) to the stages that read it; never written
#: in a manifest, so not in :data:`PHASES`
ARRAY_PHASE = "array"
_ARRAY_KIND = PhaseKind(ARRAY_PHASE, (), True, ())


def array_ref(ref: str, phases: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(phase, field)`` when ``ref`` reads as ``PHASE.FIELD`` for a phase in ``phases``, else None.

    A stage id may hold dots itself (a block's ``layers.3.attn``): the
    field is what follows the last one.

    >>> array_ref("run.registers", {"run": {}}), array_ref("top", {"run": {}})
    (('run', 'registers'), None)
    """
    head, dot, field = ref.rpartition(".")
    return (head, field) if dot and head in phases else None


def check_array_input(ref: str, stages: Mapping[str, Any]) -> str | None:
    """Why an executor stage cannot take ``ref`` (``PHASE.FIELD``) as an input, or None where it names an array field.

    >>> stages = {"run": {"phase": "execute"}}
    >>> check_array_input("run.registers", stages) is None
    True
    >>> print(check_array_input("run.steps", stages))
    field 'steps' of an execute phase is data, not an array (arrays: registers, min_trace, min_trace_index); name it under outputs: instead
    >>> print(check_array_input("run.regs", stages))
    an execute phase has no field 'regs' (arrays: registers, min_trace, min_trace_index)
    """
    pid, field = ref.rpartition(".")[::2]
    spec = stages.get(pid)
    kind = PHASES.get(spec.get("phase")) if isinstance(spec, dict) and isinstance(spec.get("phase"), str) else None
    if kind is None:
        return None if spec is None else f"{pid!r} is not an emulator phase, so it has no fields"
    arrays = ", ".join(a.name for a in kind.arrays) or "none"
    if kind.array_field(field) is not None:
        return None
    if kind.array:
        return f"{article(kind.name)} phase is an array itself: name {pid!r} alone"
    if field in kind.fields:
        return (f"field {field!r} of {article(kind.name)} phase is data, not an array (arrays: {arrays}); name it "
                f"under outputs: instead")
    return f"{article(kind.name)} phase has no field {field!r} (arrays: {arrays})"


@dataclass(frozen=True)
class EmulatorDecl:
    name: str
    isa: str
    backend: str
    program: str                      # absolute path
    chunk_steps: int
    max_steps: int
    input: str | None                 # absolute path of the input bytes
    origin: Any = None
    fetch: str = "executable"         # where instructions may be fetched from (the emulator's fetch protection)
    timeout: float | None = None      # seconds of wall-clock time the execute phase may run the guest
    accept_exit: tuple[int, ...] = (0,)   # the exit codes an execute phase succeeds with
    backend_reason: str = "chosen in the manifest"   # why ``backend`` (what ``backend: auto`` resolved to)
    memory: str = "protected"         # the emulator's memory mode: "flat" loads and stores anywhere mapped too

    def to_json(self) -> dict:
        out = {"isa": self.isa, "backend": self.backend, "program": self.program, "chunk_steps": self.chunk_steps,
               "max_steps": self.max_steps, "input": self.input}
        # the defaults add no key, so earlier runs' cache keys still hold
        if self.fetch != "executable":
            out["fetch"] = self.fetch
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if self.accept_exit != (0,):
            out["accept_exit"] = list(self.accept_exit)
        if self.memory != "protected":
            out["memory"] = self.memory
        return out


@dataclass(frozen=True)
class PhaseDecl:
    id: str
    phase: str
    emulator: str
    inputs: tuple[str, ...]
    args: Mapping[str, Any]
    origin: Any = None

    @property
    def kind(self) -> PhaseKind:
        return PHASES.get(self.phase) or _ARRAY_KIND

    def to_json(self) -> dict:
        return {"phase": self.phase, "emulator": self.emulator, "inputs": list(self.inputs), "args": dict(self.args),
                "array": self.kind.array, "origin": str(self.origin) if self.origin else None}


def target(emulator: str) -> str:
    """The placement target of every phase of ``emulator``: where the plan says the phase runs.

    >>> target("guest")
    'emulator:guest'
    """
    return f"emulator:{emulator}"


def execution_order(phases: Mapping[str, PhaseDecl]) -> list[str]:
    """The phases in an order that runs every input first: the ``execute`` phases, then the rest.

    Every other phase takes exactly one ``execute`` phase, so this is a
    topological order of the phases whatever order they were written in.
    """
    return ([pid for pid, p in phases.items() if not p.inputs] +
            [pid for pid, p in phases.items() if p.inputs])


_compile_lock = threading.Lock()


def _translation_missing(program, data: bytes) -> bool:
    """Whether the native backend's disk cache lacks this program's translation
    (a look that loads the cached one if there, in milliseconds, without llvmlite)."""
    from hetflow.executors.emulator import native_main

    return native_main.MainRun(program, data, translate=False).code is None


def _announce_fast_compile() -> None:
    """Load the fast backend's interpreter before an execute phase runs it,
    saying on stderr when numba must compile it (27-58 s, once a machine):
    a pipeline silent for a minute looks hung.  Phases that run at the same
    time wait on one compile and one message."""
    from hetflow.executors.emulator import fast_compile_needed

    with _compile_lock:
        if not fast_compile_needed():
            return
        print("hetflow: compiling the fast backend's interpreter (first run on this machine; cached for later "
              "runs)...", file=sys.stderr, flush=True)
        from hetflow.executors.emulator import fast

        t0 = time.perf_counter()
        fast.warm_up()
        print(f"hetflow: compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def planned(p: PhaseDecl, emulator: EmulatorDecl) -> dict[str, Any]:
    """What the plan knows of phase ``p`` before its guest runs.

    The guest's length is known only once ``execute`` has run; the plan
    holds its bound, the emulator's ``max_steps`` (a run that reaches it
    fails). A ``witness`` phase re-executes every chunk, one Dask task
    each: at most ``ceil(max_steps / chunk_steps)`` tasks (``chunks_max``),
    and its table has one row per step, so its array is at most
    ``(max_steps, columns)`` int64. ``size`` says whether
    ``shape`` and ``bytes`` are ``exact`` or an upper ``bound``; a phase
    that yields data has neither.

    >>> e = EmulatorDecl("guest", "rv64ima", "fast", "/g.elf", chunk_steps=1024, max_steps=10_000, input=None)
    >>> w = planned(PhaseDecl("trace", "witness", "guest", ("run",), {}), e)
    >>> w["chunks_max"], w["shape"], w["bytes"], w["size"]
    (10, [10000, 16], 1280000, 'bound')
    >>> planned(PhaseDecl("run", "execute", "guest", (), {}), e)["size"] is None
    True

    An array field's node (:data:`ARRAY_PHASE`) knows its columns, and its
    rows where they are fixed (``registers``: exact), bounded (one
    ``min_trace_index`` row per chunk; ``instances_table``: at most
    ``ceil(max_steps / size)`` instances a machine) or known only once
    the guest has run (``shape`` None, ``size`` ``unknown``):

    >>> [(f, planned(PhaseDecl("run." + f, ARRAY_PHASE, "guest", ("run",), {"field": f, "of": "execute"}), e)["shape"])
    ...  for f in ("registers", "min_trace", "min_trace_index")]
    [('registers', [33]), ('min_trace', None), ('min_trace_index', [10, 2])]
    """
    from hetflow.executors.emulator import WITNESS_COLUMNS

    steps = int(emulator.max_steps)
    out: dict[str, Any] = {"target": target(p.emulator), "backend": emulator.backend,
                           "backend_reason": emulator.backend_reason, "steps_max": steps,
                           "tasks_max": 1, "shape": None, "dtype": None, "bytes": None, "size": None}
    if p.phase == ARRAY_PHASE:
        out.update(_array_plan(PHASES[p.args["of"]].array_field(p.args["field"]), p.args, emulator))
        return out
    if p.kind.arrays:  # what the plan knows of each array field, read by a stage or not
        out["arrays"] = {a.name: _array_plan(a, p.args, emulator) for a in p.kind.arrays}
    if p.kind.array:
        chunks = -(-steps // int(emulator.chunk_steps))
        shape = [steps, len(WITNESS_COLUMNS)]
        out.update(tasks_max=chunks, chunks_max=chunks, rows_max=steps, shape=shape, dtype=Dtype.int64.value,
                   bytes=Dtype.int64.nbytes(shape[0] * shape[1]), size="bound")
    return out


def _array_plan(spec: ArrayField, args: Mapping[str, Any], emulator: EmulatorDecl) -> dict[str, Any]:
    """The shape, bytes and columns of array field ``spec`` before the guest runs (``args``: its phase's)."""
    steps = int(emulator.max_steps)
    rows: int | None = None
    if spec.rows == "chunks":
        rows = -(-steps // int(emulator.chunk_steps))
    elif spec.rows == "instances":   # each machine has at most one row a step
        from hetflow.executors.emulator import DEFAULT_SIZES
        rows = sum(-(-steps // int(size)) for size in (args.get("sizes") or DEFAULT_SIZES).values())
    shape = [len(spec.columns)] if spec.rows is None else None if rows is None else [rows, len(spec.columns)]
    return {"dtype": ARRAY_DTYPE.value, "shape": shape, "columns": list(spec.columns),
            "size": "exact" if spec.rows is None else "unknown" if rows is None else "bound",
            "bytes": None if shape is None else ARRAY_DTYPE.nbytes(int(np.prod(shape))),
            **({"rows_max": rows} if rows is not None else {})}


def host_memory() -> int | None:
    """This machine's physical memory in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def memory_bound_warning(p: PhaseDecl, info: Mapping[str, Any], emulator: EmulatorDecl,
                         memory: int | None = None) -> str | None:
    """Why phase ``p``'s array bound (:func:`planned`) cannot be met on this machine, or None.

    A witness table has one 128-byte row per step, so the bound from
    ``max_steps`` (2^28 by default: 32 GiB) can pass the machine's memory:
    a guest that ran that long would fail the run when its table is built,
    after the whole execution. ``memory`` defaults to :func:`host_memory`.

    >>> e = EmulatorDecl("guest", "rv64imac", "fast", "/g.elf", chunk_steps=1024, max_steps=1 << 28, input=None)
    >>> w = PhaseDecl("trace", "witness", "guest", ("run",), {})
    >>> print(memory_bound_warning(w, planned(w, e), e, memory=16 << 30))
    witness phase 'trace' may hold up to 32.0 GiB (268435456 rows, one per step up to max_steps), more than this machine's 16.0 GiB of memory; set max_steps on emulator 'guest' to the most steps its guest needs (at most 134217728 here)
    >>> memory_bound_warning(w, planned(w, e), e, memory=128 << 30) is None
    True
    """
    from hetflow.engine.costs import human_bytes

    memory = host_memory() if memory is None else memory
    bound = info.get("bytes")
    if not memory or not bound or bound <= memory:
        return None
    fits = memory // (bound // max(int(info.get("rows_max") or emulator.max_steps), 1))
    return (f"{p.phase} phase {p.id!r} may hold up to {human_bytes(bound)} ({info.get('rows_max')} rows, one per step "
            f"up to max_steps), more than this machine's {human_bytes(memory)} of memory; set max_steps on emulator "
            f"{emulator.name!r} to the most steps its guest needs (at most {fits} here)")


def witness_activation(table: np.ndarray) -> PortableActivation:
    """The portable activation of a phase's int64 array (a witness table, an array field): a read-only view of its
    bytes, no copy.

    The table is made read-only too: the activation and every executor that
    adopts its bytes share them.

    >>> t = np.arange(32, dtype=np.int64).reshape(2, 16)
    >>> a = witness_activation(t)
    >>> a.dtype.value, a.shape.dims, np.shares_memory(a.to_array(), t) or a.bytes.obj is not None, t.flags.writeable
    ('int64', (2, 16), True, False)
    """
    from hetflow.executors.base import portable_of_own

    table = np.ascontiguousarray(table, dtype=np.int64)
    table.flags.writeable = False
    return portable_of_own(tuple(int(d) for d in table.shape), Dtype.int64, memoryview(table.reshape(-1).view(np.uint8)))


class GuestExit(ValueError):
    """An execute phase's guest exited with a code its emulator does not accept (``accept_exit``)."""

    def __init__(self, pid: str, emulator: str, out: Any, accepted: tuple[int, ...]):
        self.out = out
        super().__init__(f"execute phase {pid!r} on emulator {emulator!r}: the guest exited with code "
                         f"{out.exit_code} after {out.steps} steps (accepted: "
                         f"{', '.join(map(str, accepted))}; list the codes it may exit with under "
                         f"`accept_exit:` on the emulator)" + _output_tail(out.stdout))


def _output_tail(stdout: bytes, limit: int = 400) -> str:
    """The end of what a failed guest printed, for its error message: often why it failed."""
    if not stdout:
        return ""
    text = stdout[-limit:].decode("utf-8", "replace").rstrip("\n")
    return f"; its output {'ends' if len(stdout) > limit else 'was'}: {text!r}"


def article(word: str) -> str:
    """``word`` with its indefinite article: "an execute", "a witness"."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


def _read_input(decl: EmulatorDecl) -> bytes:
    if decl.input is None:
        return b""
    with open(decl.input, "rb") as f:
        return f.read()


class PhaseRunner:
    """Runs a manifest's phases for one run; results are host data keyed by phase id.

    ``event(kind, id, where, start, status, **extra)`` records a task
    (the executor runtime's event recorder, so phase tasks appear in the
    record's ``tasks`` like partitions do).
    """

    def __init__(self, emulators: Mapping[str, EmulatorDecl], phases: Mapping[str, PhaseDecl],
                 event: Callable[..., None]) -> None:
        self.emulators = dict(emulators)
        self.phases = dict(phases)
        self.event = event
        self.results: dict[str, Any] = {}
        self._programs: dict[str, Any] = {}
        self._inputs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._tables: dict[str, np.ndarray] = {}  # witness phase -> the table its chunks fill
        self._arrays: dict[tuple[str, str], np.ndarray] = {}  # (phase, array field) -> its table, built once

    def _program(self, emulator: str):
        from hetflow.executors.emulator import load_elf
        with self._lock:
            if emulator not in self._programs:
                decl = self.emulators[emulator]
                self._programs[emulator] = load_elf(decl.program, fetch=decl.fetch, isa=decl.isa, memory=decl.memory)
                self._inputs[emulator] = _read_input(self.emulators[emulator])
            return self._programs[emulator], self._inputs[emulator]

    def round1(self) -> dict:
        """The ``execute`` phases: a Dask graph of one task each."""
        return {f"phase:{p.id}": (self._run, p.id) for p in self.phases.values() if p.phase == "execute"}

    def round2(self) -> dict:
        """Every other phase, lowered now that each execute's chunk count is known."""
        dsk: dict[str, tuple] = {}
        for p in self.phases.values():
            if p.phase == "execute":
                continue
            if p.phase == "witness":
                from hetflow.executors.emulator import WITNESS_COLUMNS

                traces = self.results[p.inputs[0]].min_traces
                # the whole table, its pages untouched until each chunk's task writes its own rows
                self._tables[p.id] = np.empty((sum(int(t.steps) for t in traces), len(WITNESS_COLUMNS)), np.int64)
                keys = [f"witness:{p.id}:{i}" for i in range(len(traces))]
                row = 0
                for i, key in enumerate(keys):
                    dsk[key] = (self._witness_chunk, p.id, i, row)
                    row += int(traces[i].steps)
                dsk[f"phase:{p.id}"] = (self._witness_gather, p.id, keys)
            elif p.phase == ARRAY_PHASE:
                source = p.inputs[0]
                # its phase ran in round 1 (execute) or is a task of this round, which it waits for
                after = () if self.phases[source].phase == "execute" else (f"phase:{source}",)
                dsk[f"phase:{p.id}"] = (self._run_array, p.id, *after)
            else:
                dsk[f"phase:{p.id}"] = (self._run, p.id)
        return dsk

    def _run_array(self, pid: str, *_after: Any) -> PortableActivation:
        """An array field's node: the field's table built from its phase's result, handed to its bridges."""
        source, field = self.phases[pid].inputs[0], self.phases[pid].args["field"]
        portable = self._timed("phase", pid, pid, lambda: witness_activation(self.array(source, field)))
        self.results[pid] = {"portable": portable}
        return portable

    def array(self, pid: str, field: str) -> np.ndarray:
        """Array field ``field`` of phase ``pid`` (int64, C-contiguous, its columns those of :data:`PHASES`);
        built once, and shared by the stages that read it and an ``outputs:`` entry that persists it."""
        with self._lock:
            table = self._arrays.get((pid, field))
        if table is not None:
            return table
        p, value = self.phases[pid], self.results[pid]
        if (p.phase, field) == ("execute", "registers"):
            from hetflow.executors.emulator.output import registers_array
            end = self._end_state(p, value)
            table = registers_array(end.pc, end.regs)
        elif p.phase == "execute":
            from hetflow.executors.emulator.output import min_trace_array
            words, index = min_trace_array(value.min_traces)
            with self._lock:  # one build serves both fields; a second thread's build is dropped
                words = self._arrays.setdefault((pid, "min_trace"), words)
                index = self._arrays.setdefault((pid, "min_trace_index"), index)
            table = words if field == "min_trace" else index
        elif (p.phase, field) == ("mem-plans", "table"):
            from hetflow.executors.emulator.memplan import mem_plan_table
            table = mem_plan_table(value)
        elif (p.phase, field) == ("mem-plans", "rows"):
            from hetflow.executors.emulator.memplan import mem_rows
            table = mem_rows(self._mem_ops(p))
        elif (p.phase, field) == ("plan", "instances_table"):
            from hetflow.executors.emulator.output import instances_array
            table = instances_array(value)
        else:
            raise KeyError(f"{p.phase} phase {pid!r} has no array field {field!r}")
        with self._lock:
            return self._arrays.setdefault((pid, field), np.ascontiguousarray(table, dtype=np.int64))

    def _fail(self, pid: str, message: str) -> Exception:
        return StageFailure(f"phase:{pid}", pid, message)

    def _message(self, pid: str, e: Exception) -> str:
        """A phase's error, with what its guest printed and the steps it ran when the guest failed."""
        from hetflow.executors.emulator import GuestError
        if not isinstance(e, GuestError):
            return str(e)
        p = self.phases[pid]
        return (f"{p.phase} phase {pid!r} on emulator {p.emulator!r}: {e} (steps done: {e.step})"
                + _output_tail(e.stdout))

    def _timed(self, kind: str, id: str, pid: str, call: Callable[[], Any], **extra: Any) -> Any:
        from hetflow.executors.emulator import EmulatorError
        where = f"emulator:{self.phases[pid].emulator}"
        start = time.time()
        self.event(kind, id, where, start, "started")
        try:
            value = call()
        except (EmulatorError, ValueError, OSError) as e:
            message = self._message(pid, e)
            self.event(kind, id, where, start, "failed", node=pid, error=message)
            raise self._fail(pid, message) from None
        self.event(kind, id, where, start, "succeeded", nodes=[pid], phase=self.phases[pid].phase, **extra)
        return value

    def _run(self, pid: str) -> str:
        p = self.phases[pid]
        value = self._timed("phase", pid, pid, lambda: getattr(self, "_" + p.phase.replace("-", "_"))(p))
        self.results[pid] = value
        return pid

    def _consumers(self, pid: str, phase: str) -> list[PhaseDecl]:
        return [q for q in self.phases.values() if q.phase == phase and pid in q.inputs]

    def _execute(self, p: PhaseDecl):
        from hetflow.executors.emulator import execute
        decl = self.emulators[p.emulator]
        program, data = self._program(p.emulator)
        plans = self._consumers(p.id, "mem-plans")
        rows = int(plans[0].args.get("rows_per_plan", 1 << 22)) if plans else 1 << 22
        runners = bool(plans or self._consumers(p.id, "rom-histogram"))
        if decl.backend == "fast":      # native's runners and replay run translated code, without numba
            _announce_fast_compile()
        translating = decl.backend == "native" and _translation_missing(program, data)
        if translating:
            print(f"hetflow: translating {program.name}'s code to host code with LLVM (not in the disk cache; "
                  "cached for later runs)...", file=sys.stderr, flush=True)
        out = execute(program, backend=decl.backend, input=data, chunk_steps=decl.chunk_steps,
                      max_steps=decl.max_steps, mem_plan_rows=rows,
                      rom_histogram=bool(self._consumers(p.id, "rom-histogram")),
                      runners=runners, timeout=decl.timeout)
        if translating:
            print(f"hetflow: translated in {out.extra['translation']['seconds']:.2f} s", file=sys.stderr, flush=True)
        if out.exit_code not in decl.accept_exit:
            # a guest that exits nonzero failed: its witness would prove a failed run, so nothing after it runs
            raise GuestExit(p.id, decl.name, out, decl.accept_exit)
        return out

    def _mem_plans(self, p: PhaseDecl):
        from hetflow.executors.emulator import mem_plans_from_min_traces
        out = self.results[p.inputs[0]]
        rows = int(p.args.get("rows_per_plan", 1 << 22))
        if self.emulators[p.emulator].backend in ("fast", "native"):
            plans, _ = out.backend.await_mem_plans()
        else:
            program, data = self._program(p.emulator)
            plans, _ = mem_plans_from_min_traces(program, out.min_traces, len(data), rows)
        return plans

    def _rom_histogram(self, p: PhaseDecl):
        from hetflow.executors.emulator import rom_histogram_from_min_traces
        out = self.results[p.inputs[0]]
        if self.emulators[p.emulator].backend in ("fast", "native"):
            return out.backend.await_rom_histogram()
        program, data = self._program(p.emulator)
        return rom_histogram_from_min_traces(program, out.min_traces, len(data))

    def _plan(self, p: PhaseDecl):
        from hetflow.executors.emulator import DEFAULT_SIZES, plan_instances
        sizes = p.args.get("sizes") or DEFAULT_SIZES
        return plan_instances(self.results[p.inputs[0]].counters, {k: int(v) for k, v in sizes.items()})

    def _witness_chunk(self, pid: str, i: int, row: int | None = None) -> np.ndarray:
        """Chunk ``i``'s rows, written into the run's table from ``row`` on (a table of its own without one)."""
        from hetflow.executors.emulator import witness_table
        p = self.phases[pid]
        program, data = self._program(p.emulator)
        trace = self.results[p.inputs[0]].min_traces[i]
        table = self._tables.get(pid)
        out = None if table is None or row is None else table[row:row + int(trace.steps)]
        return self._timed("witness", f"{pid}:{i}", pid, lambda: witness_table(
            program, trace, input_size=len(data), backend=self.emulators[p.emulator].backend, out=out), chunk=i)

    def _witness_gather(self, pid: str, tables: list[np.ndarray]) -> PortableActivation:
        """The witness phase's activation: the table its chunks filled in place, or, from chunks that ran in
        other processes (a cluster), their tables copied into one; a task of the record either way."""
        return self._timed("phase", pid, pid, lambda: self._assemble(pid, tables))

    def _assemble(self, pid: str, tables: list[np.ndarray]) -> PortableActivation:
        from hetflow.executors.emulator import WITNESS_COLUMNS
        table = self._tables.pop(pid, None)
        if table is None or not all(t.base is table for t in tables):
            rows = sum(len(t) for t in tables)
            if table is None or len(table) != rows:
                table = np.empty((rows, len(WITNESS_COLUMNS)), np.int64)
            row = 0
            for t in tables:
                table[row:row + len(t)] = t
                row += len(t)
        portable = witness_activation(table)
        self.results[pid] = {"rows": int(table.shape[0]), "chunks": len(tables), "portable": portable}
        return portable

    def fields(self, pid: str) -> dict[str, Any]:
        """A phase's JSON fields (its array fields are :meth:`array`'s)."""
        p = self.phases[pid]
        v = self.results[pid]
        if p.phase == "execute":
            return {"steps": int(v.steps), "exit_code": int(v.exit_code),
                    "pub_outs": [[int(i), int(x)] for i, x in v.pub_outs],
                    "stdout": v.stdout.decode("utf-8", "replace"), "chunks": len(v.min_traces),
                    "end_reason": v.end_reason, "counters": v.counters.totals()}
        if p.phase == "mem-plans":
            return {"plans": [{"segment_id": m.segment_id, "first_row": m.first_row, "count": m.count,
                               "first": list(m.first), "last": list(m.last), "is_last": m.is_last} for m in v],
                    "count": len(v)}
        if p.phase == "rom-histogram":
            return {"steps": int(v.steps), "pcs": [int(x) for x in v.pcs], "counts": [int(x) for x in v.counts]}
        if p.phase == "plan":
            return {"instances": [i.to_json() for i in v], "count": len(v)}
        return {"rows": v["rows"], "chunks": v["chunks"]}

    def _mem_ops(self, p: PhaseDecl) -> np.ndarray:
        """The run's memory operations in execution order, logged anew: the MO runner keeps only the plans.

        Fast and native run their MO runner once more (as fast as their
        ``execute``, up to the steps the guest ran); the reference path
        replays every chunk from its min trace, as its plans do.
        """
        program, data = self._program(p.emulator)
        out = self.results[p.inputs[0]]
        backend = self.emulators[p.emulator].backend
        if backend == "reference":
            from hetflow.executors.emulator import mem_ops_from_min_traces
            return mem_ops_from_min_traces(program, out.min_traces, len(data))
        if backend == "native":
            from hetflow.executors.emulator import native_runners as running
        else:
            from hetflow.executors.emulator import fast as running
        return running.mem_ops_runner(running.image_of(program, data, len(data)), program, int(out.steps))

    def _end_state(self, p: PhaseDecl, out: Any) -> Any:
        """The guest's state when it ended (pc, x0..x31, priv), from a replay of its last chunk (no backend keeps
        it; the replay costs at most ``chunk_steps`` steps)."""
        program, data = self._program(p.emulator)
        last = out.min_traces[-1]
        backend = self.emulators[p.emulator].backend
        if backend == "reference":
            from hetflow.executors.emulator import reference as replaying
        elif backend == "native":   # translated code: a native run never loads numba for its registers
            from hetflow.executors.emulator import native as replaying
        else:
            from hetflow.executors.emulator import fast as replaying
        end, _, _ = replaying.replay_chunk(program, last, len(data))
        return end

    def output(self, pid: str, fieldname: str | None) -> tuple[Any, str]:
        """The JSON value an ``outputs:`` entry persists and its digest."""
        data = self.fields(pid)
        value = data if fieldname is None else data[fieldname]
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        return value, "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def phase_status(runner: "PhaseRunner", events: list[dict]) -> dict[str, dict]:
    """Each phase's entry in the run record: status, emulator, its tasks, the error of a failed one."""
    out: dict[str, dict] = {}
    for pid, p in runner.phases.items():
        mine = [e for e in events if e["kind"] in ("phase", "witness") and (e.get("node") == pid or pid in e.get("nodes", ()))]
        bad = next((e for e in mine if e["status"] == "failed"), None)
        status = "failed" if bad is not None else "succeeded" if pid in runner.results else "not run"
        out[pid] = {"phase": p.phase, "emulator": p.emulator, "status": status, "tasks": len(mine),
                    **({"error": bad.get("error")} if bad is not None else {})}
    return out


def resolve_path(base: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(base, path)


# keys of executor stages that mean nothing for a phase (a phase runs once on its emulator, uncached)
_EXECUTOR_ONLY = ("op", "dtype", "executor", "vendor", "colocate_with", "retries", "timeout", "cache")


def check_manifest(tree: Mapping[str, Any], doc: Any, base: str, problems: list) -> tuple[dict, dict]:
    """The manifest's ``emulators:`` and phase stages, checked; problems are appended with FILE:LINE:COL."""
    import difflib

    from hetflow.engine.errors import Diagnostic

    emulators: dict[str, EmulatorDecl] = {}
    raw = tree.get("emulators") if isinstance(tree.get("emulators"), dict) else {}
    if raw:  # the emulator's package is 3-8 ms of a manifest without emulators' validation
        from hetflow.executors.emulator import (AUTO, DEFAULT_CHUNK_STEPS, DEFAULT_MAX_STEPS, ElfError, load_elf,
                                                resolve_backend)
    for name, spec in raw.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("program"), str):
            continue
        here = ("emulators", name)
        program = resolve_path(base, spec["program"])
        try:
            if not os.path.exists(program):
                raise FileNotFoundError(program)
            load_elf(program, isa=spec.get("isa", "rv64imac"))
        except FileNotFoundError:
            problems.append(Diagnostic(doc.at(here + ("program",)), f"emulator {name!r}: program {spec['program']!r} does not exist ({program})"))
        except OSError as e:
            problems.append(Diagnostic(doc.at(here + ("program",)), f"emulator {name!r}: cannot read program {spec['program']!r}: {e.strerror or e}"))
        except ElfError as e:
            problems.append(Diagnostic(doc.at(here + ("program",)), f"emulator {name!r}: program {spec['program']!r} is not a guest ELF: {e}"))
        if spec.get("memory") == "flat" and spec.get("fetch") == "executable":
            problems.append(Diagnostic(doc.at(here + ("fetch",)), f"emulator {name!r}: memory: flat fetches from any "
                                       f"mapped memory (it implies fetch: any); drop fetch: executable, or drop "
                                       f"memory: flat"))
        data = spec.get("input")
        if isinstance(data, str):
            data = resolve_path(base, data)
            if not os.path.isfile(data) or not os.access(data, os.R_OK):
                problems.append(Diagnostic(doc.at(here + ("input",)), f"emulator {name!r}: input file {spec['input']!r} cannot be read ({data})"))
        # auto resolves here, once, so that the plan, the cache key and the record name the backend that runs
        given = spec.get("backend", AUTO)
        backend, reason = given, "chosen in the manifest"      # an unknown name is the schema's to report
        if given == AUTO:
            backend, why = resolve_backend(AUTO)
            reason = f"auto: {why}"
        emulators[name] = EmulatorDecl(
            name, spec.get("isa", "rv64imac"), backend, program,
            spec.get("chunk_steps", DEFAULT_CHUNK_STEPS), spec.get("max_steps", DEFAULT_MAX_STEPS),
            data if isinstance(data, str) else None, doc.key_at(here),
            # flat memory fetches from anywhere: its fetch is "any" (a fetch: executable beside it is refused above)
            spec.get("fetch", "any" if spec.get("memory") == "flat" else "executable"),
            spec.get("timeout"), tuple(spec.get("accept_exit", (0,))), backend_reason=reason,
            memory=spec.get("memory", "protected"))

    stages = tree.get("stages") if isinstance(tree.get("stages"), dict) else {}
    phases: dict[str, PhaseDecl] = {}
    pending = [(sid, spec) for sid, spec in stages.items() if isinstance(spec, dict) and spec.get("phase") in PHASES]
    for sid, spec in pending:
        here = ("stages", sid)
        kind = PHASES[spec["phase"]]
        for key in _EXECUTOR_ONLY:
            if key in spec and key != "op":
                problems.append(Diagnostic(doc.key_at(here + (key,)), (
                    f"stage {sid!r} is {article(kind.name)} phase, which runs on its emulator: {key!r} is a key of executor stages")))
        inputs = [i for i in spec.get("inputs", []) if isinstance(i, str)] if isinstance(spec.get("inputs"), list) else []
        ok = True
        if len(inputs) != len(kind.inputs):
            want = ", ".join(kind.inputs) or "no inputs"
            problems.append(Diagnostic(doc.at(here + ("inputs",)) if "inputs" in spec else doc.key_at(here),
                                       f"phase {kind.name!r} takes {want}, stage {sid!r} gives {len(inputs)} input{'s' if len(inputs) != 1 else ''}"))
            ok = False
        for i, (ref, want) in enumerate(zip(inputs, kind.inputs)):
            other = stages.get(ref)
            got = other.get("phase") if isinstance(other, dict) else None
            if ref in stages and got != want:
                what = f"{article(got)} phase" if got else "an executor stage"
                problems.append(Diagnostic(doc.at(here + ("inputs", i)),
                                           f"phase {kind.name!r} of stage {sid!r} takes {article(want)} phase, but {ref!r} is {what}"))
                ok = False
        args = spec.get("args", {}) if isinstance(spec.get("args"), dict) else {}
        for key in args:
            if key not in kind.args:
                allowed = ", ".join(kind.args) or "none"
                problems.append(Diagnostic(doc.key_at(here + ("args", key)), f"phase {kind.name!r} has no argument {key!r} (arguments: {allowed})"))
                ok = False
        if "rows_per_plan" in args and not (isinstance(args["rows_per_plan"], int) and args["rows_per_plan"] > 0):
            problems.append(Diagnostic(doc.at(here + ("args", "rows_per_plan")), "rows_per_plan must be a positive integer"))
            ok = False
        if "sizes" in args:
            from hetflow.executors.emulator import STATE_MACHINES
            sizes = args["sizes"]
            if not isinstance(sizes, dict) or not all(k in STATE_MACHINES and isinstance(v, int) and v > 0 for k, v in sizes.items()):
                problems.append(Diagnostic(doc.at(here + ("args", "sizes")), (
                    f"sizes maps state machines ({', '.join(STATE_MACHINES)}) to positive row counts")))
                ok = False
        emulator = spec.get("emulator")
        if isinstance(emulator, str) and emulator not in raw:
            close = difflib.get_close_matches(emulator, list(raw), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(Diagnostic(doc.at(here + ("emulator",)), (
                f"stage {sid!r} names emulator {emulator!r}, which is not declared (declared: {', '.join(raw) or 'none'}){hint}")))
            continue
        if emulator is None and kind.name == "execute":
            if len(raw) != 1:
                problems.append(Diagnostic(doc.key_at(here), (
                    f"stage {sid!r} is an execute phase: name its emulator with `emulator:` "
                    + ("(no emulator is declared under `emulators:`)" if not raw else f"(declared: {', '.join(raw)})"))))
                continue
            emulator = next(iter(raw))
        if ok and isinstance(emulator, str) or ok and inputs:
            phases[sid] = PhaseDecl(sid, kind.name, emulator or "", tuple(inputs), dict(args), doc.key_at(here))
    # a phase's emulator is its execute input's
    for sid, p in list(phases.items()):
        if p.inputs and p.inputs[0] in phases:
            source = phases[p.inputs[0]].emulator
            declared = stages[sid].get("emulator")
            if isinstance(declared, str) and declared != source:
                problems.append(Diagnostic(doc.at(("stages", sid, "emulator")), (
                    f"stage {sid!r} names emulator {declared!r}, but its input {p.inputs[0]!r} runs on {source!r}")))
            phases[sid] = PhaseDecl(sid, p.phase, source, p.inputs, p.args, p.origin)
    for sid, p in list(phases.items()):
        if p.emulator not in emulators:
            del phases[sid]
    # every array field an executor stage reads becomes a node of its own, after the phases (a topological order)
    for spec in stages.values():
        refs = spec.get("inputs") if isinstance(spec, dict) and "phase" not in spec else None
        for ref in refs if isinstance(refs, list) else ():
            found = array_ref(ref, phases) if isinstance(ref, str) and ref not in stages else None
            if found is None or ref in phases or phases[found[0]].kind.array_field(found[1]) is None:
                continue  # not an array field: the stage's inputs are checked with the stages
            source = phases[found[0]]
            args = {"field": found[1], "of": source.phase,
                    **({"sizes": dict(source.args["sizes"])} if "sizes" in source.args else {})}
            phases[ref] = PhaseDecl(ref, ARRAY_PHASE, source.emulator, (source.id,), args, source.origin)
    return emulators, phases


def check_output(stage: str, fieldname: str | None, stages: Mapping[str, Any], phases: Mapping[str, PhaseDecl]) -> str | None:
    """Why ``outputs: {NAME: STAGE.FIELD}`` is wrong, or None."""
    spec = stages.get(stage)
    if spec is None:
        return f"{stage!r} is not a stage"
    if stage not in phases:
        return f"{stage!r} is not an emulator phase, so it has no fields; name the stage alone"
    kind = phases[stage].kind
    if fieldname is not None and fieldname not in kind.names:
        arrays = f"; arrays: {', '.join(a.name for a in kind.arrays)}" if kind.arrays else ""
        return f"{article(kind.name)} phase has no field {fieldname!r} (fields: {', '.join(kind.fields)}{arrays})"
    return None
