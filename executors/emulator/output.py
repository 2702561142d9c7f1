"""The uniform output of every emulator backend (seed 002, ZisK's executor).

``ExecutionOutput`` has the seed's fields — ``min_traces``, ``counters``,
``pub_outs``, ``steps``, ``backend`` — plus what hetflow's guest ABI adds
(``exit_code``, ``stdout``).  Everything except ``backend`` is identical
between the ``reference`` and ``fast`` backends.

``BackendArtifacts`` keeps the seed's semantics exactly:

* ``BackendArtifacts.fast(mo, rh)`` holds the memory-operations runner
  (MO) and the ROM-histogram runner (RH) as :class:`concurrent.futures.Future`
  handles that the fast backend started in parallel with the main
  execution (the seed's ``Asm`` variant).  ``await_mem_plans()`` joins MO
  once and returns ``(plans, device_bytes)``; a second call raises
  :class:`RunnerHandleConsumed` ("MO runner handle already consumed").
  ``await_rom_histogram()`` returns the histogram once, then ``None``.  A
  runner's exception surfaces as :class:`RunnerFailed` ("MO runner
  failed: ...").  ``stop()`` stops the runners not yet joined, for a
  caller that will not await them (:mod:`.background`: a runner left
  going is stopped and joined at the process's exit anyway).
* ``BackendArtifacts("native", mo, rh)``: the same on the native backend,
  whose MO and RH runners run translated code.
* ``BackendArtifacts.reference()`` (the seed's ``Rust`` variant) has no
  async work: ``await_mem_plans()`` returns ``([], None)`` and
  ``await_rom_histogram()`` returns ``None``, at once, every time.  The
  reference path computes the same plans and histogram from the min
  traces (:func:`hetflow.executors.emulator.mem_plans_from_min_traces`,
  :func:`hetflow.executors.emulator.rom_histogram_from_min_traces`).
"""

from __future__ import annotations

from .isa import CLASSES
from .machine import CSR_STATE, EmulatorError
from .tuples import FieldTuple, getters

TYPE_CHECKING = False     # typing's own costs ``hetflow emulate`` 3 ms of its start
if TYPE_CHECKING:         # the runners' futures and the arrays: ``hetflow emulate --backend native`` loads neither
    from concurrent.futures import Future

    import numpy as np

__all__ = [
    "EmuTraceStart", "EmuTrace", "CountersChunkMetrics", "ExecutionOutput", "BackendArtifacts",
    "RomHistogram", "MemPlan", "ExecutorError", "RunnerHandleConsumed", "RunnerFailed",
    "MIN_TRACE_COLUMNS", "REGISTER_COLUMNS", "INSTANCE_COLUMNS", "min_trace_array", "min_traces_from_array",
    "registers_array", "instances_array", "STATE_MACHINES",
]


def _array_equal(a, b) -> bool:
    # numpy loads on the first comparison, not with the module: ``hetflow emulate`` never compares
    import numpy as np

    return np.array_equal(a, b)


# a FieldTuple, not typing's NamedTuple nor a namedtuple: ``hetflow emulate`` starts without the typing module
# (3 ms) and without compiling a namedtuple's __new__ (0.1 ms a class)
class EmuTraceStart(FieldTuple):
    """Architectural state at a chunk's first step."""

    __slots__ = ()
    _fields = ("pc", "step", "priv", "regs", "csrs", "reservation")
    pc, step, priv, regs, csrs, reservation = getters(6)

    def __new__(cls, pc, step, priv, regs, csrs, reservation=-1):
        return tuple.__new__(cls, (pc, step, priv, regs, csrs, reservation))
    # pc: int
    # step: int                         global index of the chunk's first step
    # priv: int                         3 = M, 0 = U
    # regs: tuple[int, ...]             x0..x31, unsigned 64-bit
    # csrs: tuple[int, ...]             values of CSR_STATE, in that order
    # reservation: int = -1             LR reservation address, -1 = none

    def csr(self, name: str) -> int:
        return self.csrs[CSR_STATE.index(name)]


class _Record:
    """A class of named fields set once by its ``__init__``, shown as ``Name(field=value, ...)``.

    What ``@dataclass`` would generate, written out: a dataclass compiles its
    methods when its class is made, which ``hetflow emulate`` would pay at
    every start for each output class.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class EmuTrace(_Record):
    """A min trace: a chunk's start state plus every memory read, in order.

    ``mem_reads`` holds the aligned 8-byte words the chunk read (a load
    touching two words records both; a fetch from writable memory records
    the word holding the instruction).  ``steps`` is the chunk's length;
    ``end`` is True only for the last chunk, which ended the program.
    """

    __slots__ = ("chunk_id", "start_state", "steps", "mem_reads", "end")

    def __init__(self, chunk_id: int, start_state: EmuTraceStart, steps: int, mem_reads: np.ndarray, end: bool):
        self.chunk_id, self.start_state, self.steps, self.mem_reads, self.end = (
            chunk_id, start_state, steps, mem_reads, end)       # mem_reads: uint64

    def __eq__(self, other):
        if not isinstance(other, EmuTrace):
            return NotImplemented
        return (self.chunk_id, self.start_state, self.steps, self.end) == (
            other.chunk_id, other.start_state, other.steps, other.end
        ) and _array_equal(self.mem_reads, other.mem_reads)

    __hash__ = None


class CountersChunkMetrics(_Record):
    """Per-chunk operation counts: ``table[chunk, class]``, classes as CLASSES."""

    __slots__ = ("table", "classes")

    def __init__(self, table: np.ndarray, classes: tuple[str, ...] = CLASSES):
        self.table, self.classes = table, classes      # table: int64, shape (n_chunks, len(CLASSES))

    def chunk(self, i: int) -> dict[str, int]:
        return {c: int(v) for c, v in zip(self.classes, self.table[i])}

    def totals(self) -> dict[str, int]:
        sums = [sum(int(v) for v in col) for col in zip(*self.table)] or [0] * len(self.classes)
        return dict(zip(self.classes, sums))

    def __eq__(self, other):
        if not isinstance(other, CountersChunkMetrics):
            return NotImplemented
        return self.classes == other.classes and _array_equal(self.table, other.table)

    __hash__ = None


class RomHistogram(_Record):
    """Execution count per instruction address (ZisK's ``AsmRHData``)."""

    __slots__ = ("steps", "pcs", "counts")

    def __init__(self, steps: int, pcs: np.ndarray, counts: np.ndarray):
        # pcs: uint64, sorted, each executed at least once; counts: uint64
        self.steps, self.pcs, self.counts = steps, pcs, counts

    def __eq__(self, other):
        if not isinstance(other, RomHistogram):
            return NotImplemented
        return self.steps == other.steps and _array_equal(self.pcs, other.pcs) and _array_equal(self.counts, other.counts)

    __hash__ = None


class MemPlan(FieldTuple):
    """One memory instance: ``count`` consecutive rows of the memory
    operations sorted by (address, step), from row ``first_row``."""

    __slots__ = ()
    _fields = ("segment_id", "first_row", "count", "first", "last", "is_last")
    segment_id, first_row, count, first, last, is_last = getters(6)

    def __new__(cls, segment_id, first_row, count, first, last, is_last):
        return tuple.__new__(cls, (segment_id, first_row, count, first, last, is_last))
    # segment_id: int; first_row: int; count: int; first, last: tuple[int, int], (address, step) of the
    # first and the last row; is_last: bool


class ExecutorError(EmulatorError):
    pass


class RunnerHandleConsumed(ExecutorError):
    def __init__(self, name: str):
        self.name = name
        super().__init__(f"{name} runner handle already consumed")


class RunnerFailed(ExecutorError):
    def __init__(self, name: str, message: str):
        self.name, self.message = name, message
        super().__init__(f"{name} runner failed: {message}")


class BackendArtifacts:
    """Backend-specific async artifacts; see the module docstring."""

    def __init__(self, kind: str, mo: Future | None = None, rh: Future | None = None):
        if kind not in ("fast", "native", "reference"):
            raise ValueError(f"unknown backend kind {kind!r}")
        self.kind = kind
        self.mo = mo
        self.rh = rh

    @classmethod
    def fast(cls, mo: Future | None, rh: Future | None) -> "BackendArtifacts":
        return cls("fast", mo, rh)

    @classmethod
    def reference(cls) -> "BackendArtifacts":
        return cls("reference")

    def await_mem_plans(self) -> tuple[list[MemPlan], int | None]:
        """Join MO once: ``(plans, device bytes used or None)``."""
        if self.kind == "reference":
            return [], None
        handle, self.mo = self.mo, None
        if handle is None:
            raise RunnerHandleConsumed("MO")
        try:
            plans, device_bytes = handle.result()
        except Exception as e:
            raise RunnerFailed("MO", str(e)) from e
        return plans, device_bytes

    def await_rom_histogram(self) -> RomHistogram | None:
        """Join RH once; ``None`` afterwards, when absent, or on reference."""
        if self.kind == "reference":
            return None
        handle, self.rh = self.rh, None
        if handle is None:
            return None
        try:
            return handle.result()
        except Exception as e:
            raise RunnerFailed("RH", str(e)) from e

    def stop(self) -> None:
        """Stop the runners not joined yet, for a caller that will not await them: they end at their next
        slice of steps or compiled part instead of running the program through, and awaiting one afterwards
        raises :class:`RunnerFailed` (unless it had already finished). Returns at once."""
        for handle in (self.mo, self.rh):
            if handle is not None and hasattr(handle, "stop"):
                handle.stop()

    def __repr__(self):
        return f"BackendArtifacts.{self.kind}(mo={'pending' if self.mo else None}, rh={'pending' if self.rh else None})"


class ExecutionOutput(_Record):
    """What a backend's run returns: the seed's fields, then what hetflow's guest ABI adds."""

    __slots__ = ("min_traces", "counters", "pub_outs", "steps", "backend", "exit_code", "stdout", "end_reason",
                 "extra")

    def __init__(self, min_traces: list[EmuTrace], counters: CountersChunkMetrics, pub_outs: list[tuple[int, int]],
                 steps: int, backend: BackendArtifacts, exit_code: int = 0, stdout: bytes = b"",
                 end_reason: str = "exit", extra: dict | None = None):
        self.min_traces, self.counters, self.steps, self.backend = min_traces, counters, steps, backend
        self.pub_outs = pub_outs          # (index, u32 value), index 0..63
        self.exit_code, self.stdout = exit_code, stdout
        self.end_reason = end_reason      # "exit" (ecall 93) or "tohost"
        self.extra = {} if extra is None else extra

    def same_result(self, other: "ExecutionOutput") -> list[str]:
        """Names of the fields (other than ``backend``) that differ."""
        diffs = []
        if len(self.min_traces) != len(other.min_traces) or any(a != b for a, b in zip(self.min_traces, other.min_traces)):
            diffs.append("min_traces")
        for name in ("counters", "pub_outs", "steps", "exit_code", "stdout", "end_reason"):
            if getattr(self, name) != getattr(other, name):
                diffs.append(name)
        return diffs


# Integer tables of what a run leaves, as the pipeline's phases hand them to executor stages: int64, each
# 64-bit value as its two's-complement bit pattern (``view(np.uint64)`` reads them unsigned).

#: the final state as one int64 vector: x0..x31, then pc
REGISTER_COLUMNS = (*(f"x{i}" for i in range(32)), "pc")
#: the words of one chunk's record in a min-trace array; ``reads`` words of ``mem_reads`` follow them
MIN_TRACE_COLUMNS = ("chunk_id", "steps", "end", "pc", "step", "priv", "reservation",
                     *(f"x{i}" for i in range(32)), *CSR_STATE, "reads")
#: state machine -> the operation classes whose steps it consumes; an instance row's ``machine`` is the
#: machine's position here (the witness module plans instances by it)
STATE_MACHINES: dict[str, tuple[str, ...]] = {
    "main": CLASSES,
    "binary": ("alu", "branch"),
    "arith": ("muldiv",),
    "mem": ("load", "store", "atomic"),
}
#: one state-machine instance a row (:class:`hetflow.executors.emulator.witness.Instance`)
INSTANCE_COLUMNS = ("machine", "segment_id", "size", "rows", "first_chunk", "first_skip", "last_chunk",
                    "last_count", "is_last")

_U64 = (1 << 64) - 1


def registers_array(pc: int, regs) -> "np.ndarray":
    """x0..x31 and ``pc`` (unsigned 64-bit ints) as the int64 vector of :data:`REGISTER_COLUMNS`.

    >>> registers_array(0x8000_0000, [0, (1 << 64) - 1] + [0] * 30)[[0, 1, 32]].tolist()
    [0, -1, 2147483648]
    """
    import numpy as np

    return np.array([int(r) & _U64 for r in regs] + [int(pc) & _U64], dtype=np.uint64).view(np.int64)


def min_trace_array(traces: list[EmuTrace]) -> tuple["np.ndarray", "np.ndarray"]:
    """Every chunk's min trace in chunk order as one int64 word stream, and its index.

    A chunk's record is the words of :data:`MIN_TRACE_COLUMNS` (its start
    state; ``end`` 0 or 1; ``reservation`` -1 for none), then its
    ``reads`` memory words in the order the chunk read them. The index
    has one row a chunk: ``offset`` and ``length`` of its record in words,
    so ``words[offset:offset + length]`` is chunk ``i`` alone, enough to
    re-execute it (:func:`min_traces_from_array` reads it back). A run of
    consecutive records is one slice of ``words`` too: a cluster's witness
    batch travels as that slice and its rows of the index, a few buffers
    that pickle as their bytes, not thousands of objects.

    >>> start = EmuTraceStart(0x1000, 0, 3, (0,) * 32, (0,) * 7)
    >>> import numpy as np
    >>> words, index = min_trace_array([EmuTrace(0, start, 5, np.array([7, 9], np.uint64), True)])
    >>> index.tolist(), words[:7].tolist(), words[-3:].tolist()
    ([[0, 49]], [0, 5, 1, 4096, 0, 3, -1], [2, 7, 9])
    """
    import numpy as np

    from array import array

    heads = len(MIN_TRACE_COLUMNS)
    n = len(traces)
    reads = [t.mem_reads for t in traces]
    counts = np.fromiter(map(len, reads), np.int64, n)
    # the start states' Python ints through array('Q'), 1.5 us a chunk: numpy's own conversion of ints above
    # 2^63, or a slice assignment a chunk, costs 3-7 us, and a cluster's witness packs thousands of chunks
    head = array("Q")
    try:
        for t in traces:
            s = t.start_state
            head.extend((t.chunk_id, t.steps, bool(t.end), s.pc, s.step, s.priv, s.reservation & _U64))
            head.extend(s.regs)
            head.extend(s.csrs)
            head.append(len(t.mem_reads))
    except OverflowError:  # a register or CSR held as a negative int: its 64-bit pattern, as a backend means it
        head = array("Q", [int(v) & _U64 for t in traces for v in (
            t.chunk_id, t.steps, bool(t.end), t.start_state.pc, t.start_state.step, t.start_state.priv,
            t.start_state.reservation, *t.start_state.regs, *t.start_state.csrs, len(t.mem_reads))])
    index = np.empty((n, 2), dtype=np.int64)
    index[:, 1] = counts + heads
    np.cumsum(index[:, 1], out=index[:, 0])
    index[:, 0] -= index[:, 1]
    words = np.empty(int(index[-1].sum()) if n else 0, dtype=np.uint64)
    words[index[:, :1] + np.arange(heads)] = np.frombuffer(head, np.uint64).reshape(n, heads)
    if int(counts.sum()):
        # read k of chunk i lands at offset_i + heads + k: its place in the concatenated reads, shifted by the
        # heads of chunks 0..i
        at = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(heads * np.arange(1, n + 1), counts)
        words[at] = np.concatenate(reads)
    return words.view(np.int64), index


def min_traces_from_array(words: "np.ndarray", index: "np.ndarray") -> list[EmuTrace]:
    """The min traces :func:`min_trace_array` wrote, read back from its two arrays."""
    import numpy as np

    unsigned = np.ascontiguousarray(words, dtype=np.int64).view(np.uint64)
    index = np.asarray(index, dtype=np.int64).reshape(-1, 2)
    heads = len(MIN_TRACE_COLUMNS)
    ncsr = len(CSR_STATE)
    if len(index) and (index[:, 1].min() < heads or int(index.sum(axis=1).max()) > len(unsigned)
                       or index[:, 0].min() < 0):
        raise ValueError(f"a min-trace index row outside the {len(unsigned)} words, or shorter than a record's "
                         f"{heads} head words")
    out = []
    rows = unsigned[index[:, :1] + np.arange(heads)].tolist() if len(index) else []
    for (offset, length), h in zip(index.tolist(), rows):
        chunk_id, steps, end, pc, step, priv, reservation = h[:7]
        reads = h[-1]
        if length != heads + reads:
            raise ValueError(f"min-trace record at word {offset}: length {length} but {reads} reads")
        # a reservation is an address below 2^63 or -1 (none): the signed reading gives both
        start = EmuTraceStart(pc, step, priv, tuple(h[7:39]), tuple(h[39:39 + ncsr]),
                              reservation - (1 << 64) if reservation >> 63 else reservation)
        out.append(EmuTrace(chunk_id, start, steps, unsigned[offset + heads:offset + length].copy(), bool(end)))
    return out


def instances_array(instances, machines=None) -> "np.ndarray":
    """State-machine instances (``plan_instances``) as int64 rows of :data:`INSTANCE_COLUMNS`.

    ``machine`` is the machine's position in ``machines`` (default
    :data:`STATE_MACHINES`: main 0, binary 1, arith 2, mem 3). An
    instance takes ``first_skip`` rows into chunk ``first_chunk``, every
    row of the chunks between that have rows of the machine, and the
    first ``last_count`` rows of ``last_chunk``
    (the packing rule of :func:`hetflow.executors.emulator.witness.plan`),
    so those four numbers and the per-chunk counts give its slices.
    """
    import numpy as np

    if machines is None:
        machines = STATE_MACHINES
    ids = {name: i for i, name in enumerate(machines)}
    rows = [(ids[i.machine], i.segment_id, i.size, i.rows, i.slices[0][0], i.slices[0][1], i.slices[-1][0],
             i.slices[-1][2], int(i.is_last)) for i in instances]
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(INSTANCE_COLUMNS))
