"""The ``fast`` backend: one numba-compiled interpreter loop.

Algorithm
---------
:func:`_run` executes up to ``budget`` steps of the same machine as the
reference backend (see :mod:`.machine`), on fixed-width integers: every
register and immediate is an ``int64``; unsigned comparisons, logical
right shifts and unsigned division cast both operands to ``uint64``
explicitly, and 32-bit results are sign-extended by hand.  Nothing is
computed through floats.

State lives in arrays so a call can stop anywhere and the next call
resume: ``regs[32]`` and ``st`` (indices ``S_*``: pc, step, privilege, LR
reservation, the CSR_STATE CSRs, end flag and exit code, trap details).
Memory is one ``uint8`` array holding every region back to back (8-byte
aligned, so ``uint64``/``uint32`` views index words directly) plus a
region table (base, size, offset, permission, decode-cache slot).

Decoding uses the shared ISA table compiled into numpy arrays
(:func:`hetflow.executors.emulator.isa.decode_arrays`): the candidates of
the word's major opcode are scanned for ``word & mask == match``.  The
result is cached per instruction address in ``dc`` (raw word, op id,
rd, rs1, rs2, imm, class, fast-path kind); an entry is reused only while the word in
memory still equals the cached raw word, so self-modifying code behaves
exactly as in the reference (the new word is seen by the next fetch).

Each step first tries a *fast path*, taken unless witness rows are being
written (``WITNESS``): the pc lies in a read-only executable region, whose
decode-cache rows can never go stale (no store can reach it), so the word
is neither re-read nor compared; the row's fast-path kind (column 7,
filled at decode) says the op is an ALU or M op, a branch, a jump, a load
or a store; and a load or store falls inside one word of a region with
the right permission (the region of the last access is tried first, then
the table).  Everything that could trap, print, end the guest or touch
CSRs (misaligned targets or accesses, the UART, ``tohost``, system and
atomic instructions, writable code) leaves the fast path before any state
changes and runs through the general step, so both paths record exactly
what the reference records.  Both paths compute ALU and M results with
one helper, :func:`_alu`, inlined into each.  The first execution of an
instruction always takes the general step (it decodes the word), and so
does the first step of each call of the compiled loop.  Array indices in
the fast path are unsigned, which lets numba drop its negative-index
wraparound.

``mode`` selects what a call records, so one compiled loop serves every
runner:

* ``REC_READS`` — the main execution: every word read (loads, AMOs, the
  write syscall's buffer, fetches from writable regions) is appended to
  ``rbuf``: the min trace of the current chunk.
* ``LOG_OPS`` — the memory-operations runner (MO): ``(word address,
  step, is_write)`` triples for every word accessed.
* ``LOG_PCS`` — the ROM-histogram runner (RH): executions per slot.
* ``REPLAY`` — re-execution of one chunk: reads are popped from ``rbuf``
  instead of memory, and stores do not touch memory.
* ``WITNESS`` (with ``REPLAY``) — one row per step into ``wbuf``, the
  columns of :data:`hetflow.executors.emulator.witness.COLUMNS`.

The compiled loop never allocates or reassigns an array (numba would
reference-count it on every step): :meth:`_Machine.run` calls it on
slices of at most ``_SLICE`` steps and first makes room for a slice's
worst case (3 words read, 9 logged values and 1 printed byte per step).
Only the write syscall can need more; the loop then stops before that
step with ``ST_GROW``, undoes its fetch, and is called again with
bigger buffers.

Per run, the Python side does little: the memory image of a program and
input is built once per process (:func:`image_of`) and each run copies
it; each chunk records into a buffer of its own that becomes the min
trace's ``mem_reads`` (shrunk in place, not copied).

The compiled function is ``nogil=True`` (MO and RH run in threads beside
the main execution; chunk re-executions run in parallel threads) and
``cache=True`` (the compile cost is paid once per machine).
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from . import machine as M
from .background import check as _check_stop, spawn  # noqa: F401 - the runners' threads, re-exported
from .elf import PERM_R, PERM_X, Program, Segment
from .fast_kernel import _CTAB, _SLICE, _TAB, N_WITNESS, _decode, _run  # noqa: F401 (the kernels, re-exported)
from .isa import CLASSES
from .layout import (LOG_OPS, LOG_PCS, N_ST, REC_READS, REPLAY, S_CNEED, S_CODE, S_EINSN, S_END, S_ETVAL,  # noqa: F401
                     S_ECAUSE, S_MIE, S_MSTATUS, S_NEED, S_PC, S_PRIV, S_RES, S_STEP, ST_BUDGET, ST_END, ST_GROW,
                     ST_REPLAY_EXHAUSTED, ST_TRAP, U64, WITNESS, region_layout)
from .output import EmuTrace, EmuTraceStart, RomHistogram

__all__ = ["run", "replay_chunk", "Image", "image_of", "mem_ops_runner", "rom_histogram_runner", "warm_up"]


# --------------------------------------------------------------------------
# Python side: images, state conversion, runners

_U64 = U64
_NO_READS = np.empty(0, dtype=np.uint64)       # shared, never written: its size is 0


def _to_i64(v: int) -> int:
    v &= _U64
    return v - (1 << 64) if v >> 63 else v


@functools.lru_cache(maxsize=1)
def _no_ctab():
    """The compressed table of rv64ima: op -1 (illegal) for every parcel, the shape and dtype of ``_CTAB``
    so that the kernel's compiled signature is the same."""
    return np.full(_CTAB.shape, -1, dtype=_CTAB.dtype)


class Image:
    """Memory and region tables for one program + input size."""

    def __init__(self, program: Program, input_bytes: bytes | None, input_size: int):
        regions = M.build_regions(program, input_size, input_bytes)
        self.xperm = M.fetch_permission(program.fetch)
        # Regions without decode-cache rows of their own (fetch protection
        # "any") decode into one shared scratch row, checked against the
        # raw instruction before each use.
        offs, slots, hslots, self.nslot, self.nhist, off = region_layout(regions, self.xperm)
        self.mem = np.zeros(off, dtype=np.uint8)
        for r, o in zip(regions, offs):
            if r.name in ("ram", "stack"):
                continue                      # already zero
            self.mem[o:o + r.size] = np.frombuffer(r.data, dtype=np.uint8)
        self.regions = regions
        self.rbase = np.array([r.base for r in regions], dtype=np.int64)
        self.rsize = np.array([r.size for r in regions], dtype=np.int64)
        self.roff = np.array(offs, dtype=np.int64)
        self.rperm = np.array([r.perm for r in regions], dtype=np.int64)
        self.rslot = np.array(slots, dtype=np.int64)
        self.rhslot = np.array(hslots, dtype=np.int64)
        self.tohost = -1 if program.tohost is None else program.tohost
        # under rv64ima no parcel decodes as compressed: the kernel's illegal-instruction path, as in reference
        self.rvc = program.isa != "rv64ima"
        self.ctab = _CTAB if self.rvc else _no_ctab()

    def copy_mem(self):
        # The RAM region is all zero: a fresh zeroed array gets its pages
        # lazily from the OS, so only the other regions are copied.
        mem = np.zeros(self.mem.shape[0], dtype=np.uint8)
        for r, o in zip(self.regions, self.roff):
            if r.name not in ("ram", "stack"):
                mem[o:o + r.size] = self.mem[o:o + r.size]
        return mem

    def peek_u32s(self, mem, addr: int, n: int) -> list[int]:
        """The ``n`` little-endian words from ``addr`` (4-aligned, in one region)."""
        for r, o in zip(self.regions, self.roff):
            if r.base <= addr and addr + 4 * n <= r.base + r.size and (int(o) + addr - r.base) % 4 == 0:
                o = int(o) + addr - r.base
                return mem[o:o + 4 * n].view("<u4").tolist()
        return [self.peek_u32(mem, addr + 4 * i) for i in range(n)]

    def _parcel(self, mem, addr: int) -> int | None:
        for r, o in zip(self.regions, self.roff):
            if r.perm & self.xperm == self.xperm and r.base <= addr and addr + 2 <= r.base + r.size:
                o = int(o) + addr - r.base
                return int(mem[o]) | int(mem[o + 1]) << 8
        return None

    def peek_insn(self, mem, pc: int) -> int | None:
        """The instruction at pc, or None where it cannot be fetched."""
        lo = self._parcel(mem, pc)
        if lo is None or lo & 3 != 3:
            return lo
        hi = self._parcel(mem, pc + 2)
        return None if hi is None else lo | hi << 16

    def peek_u32(self, mem, addr: int) -> int:
        for r, o in zip(self.regions, self.roff):
            if r.base <= addr and addr + 4 <= r.base + r.size:
                o = int(o) + addr - r.base
                return int(mem[o]) | int(mem[o + 1]) << 8 | int(mem[o + 2]) << 16 | int(mem[o + 3]) << 24
        raise AssertionError(hex(addr))


def image_of(program: Program, input_bytes: bytes | None, input_size: int) -> Image:
    """The :class:`Image` of a program and input, built once per process
    and shared: a run copies its memory (:meth:`Image.copy_mem`) and a
    replay only reads it, so nothing ever writes the shared one.  Keyed by
    value (``Program`` is frozen), so re-running a guest, or the MO and RH
    runners beside the main execution, pay for the image once.  The last
    8 images (each holding its input) stay alive; a program that is not
    hashable gets an image of its own."""
    try:
        return _cached_image(program, input_bytes, input_size)
    except TypeError:
        return Image(program, input_bytes, input_size)


@functools.lru_cache(maxsize=8)
def _cached_image(program: Program, input_bytes: bytes | None, input_size: int) -> Image:
    return Image(program, input_bytes, input_size)


class _Machine:
    """One interpreter instance: image memory, decode cache, state arrays."""

    def __init__(self, image: Image, mem: np.ndarray, start: EmuTraceStart, mode: int):
        self.image, self.mem, self.mode = image, mem, mode
        self.mem64 = mem.view(np.uint64)
        self.mem32 = mem.view(np.uint32)
        # int32 rows of 32 bytes: two 2-byte slots per cache line.  -4 is no
        # raw instruction (a compressed parcel has its upper 16 bits zero).
        self.dc = np.full((image.nslot, 8), -4, dtype=np.int32)
        self.regs = np.array([_to_i64(v) for v in start.regs], dtype=np.int64)
        self.st = np.zeros(N_ST, dtype=np.int64)
        self.st[S_PC] = _to_i64(start.pc)
        self.st[S_STEP] = start.step
        self.st[S_PRIV] = start.priv
        self.st[S_RES] = _to_i64(start.reservation) if start.reservation != -1 else -1
        self.st[S_MSTATUS:S_MIE + 1] = [_to_i64(v) for v in start.csrs]
        self.rbuf = np.empty(1024, dtype=np.uint64)
        self.rpos = 0
        self.obuf = np.empty(1024 if mode & LOG_OPS else 0, dtype=np.int64)
        self.opos = 0
        self.hist = np.zeros(image.nhist if mode & LOG_PCS else 0, dtype=np.int64)
        self.cbuf = np.empty(256, dtype=np.uint8)
        self.cpos = 0
        # the captured output's bound: the buffer never grows past it, so the compiled loop stops (ST_GROW) before
        # a write or UART store that would pass it; a main run sets its own, a replay's chunk stays within it
        self.max_output = M.MAX_OUTPUT_LIMIT
        self.wbuf = np.empty((0, N_WITNESS), dtype=np.int64)
        self.wofs = 0

    def _room(self, buf: np.ndarray, used: int, need: int) -> np.ndarray:
        if used + need <= buf.shape[0]:
            return buf
        grown = np.empty(max(used + need, 2 * buf.shape[0]), dtype=buf.dtype)
        grown[:used] = buf[:used]
        return grown

    def _output_room(self, need: int) -> None:
        """Room in the output buffer for ``need`` more bytes, up to ``max_output`` in all."""
        cap = self.cbuf.shape[0]
        if cap > self.max_output:  # a bound below the first buffer's size: the buffer is the bound
            self.cbuf = self.cbuf[:max(self.max_output, self.cpos)].copy()
            cap = self.cbuf.shape[0]
        want = min(self.cpos + need, self.max_output)
        if want > cap:
            grown = np.empty(min(max(want, 2 * cap), self.max_output), dtype=np.uint8)
            grown[:self.cpos] = self.cbuf[:self.cpos]
            self.cbuf = grown

    def run(self, budget: int, counts: np.ndarray) -> int:
        """Run up to ``budget`` steps.  The compiled loop never allocates:
        before each call the buffers get room for the worst case of a
        slice of steps (3 words read, 3 operations logged, 1 byte printed
        per step); only the write syscall can need more, and then the loop
        stops before that step (ST_GROW) and is called again."""
        im = self.image
        done = 0
        status = ST_BUDGET
        while done < budget:
            b = min(budget - done, _SLICE)
            if self.mode & REC_READS:
                self.rbuf = self._room(self.rbuf, self.rpos, 3 * b)
            if self.mode & LOG_OPS:
                self.obuf = self._room(self.obuf, self.opos, 9 * b)
            self._output_room(b)
            status, n, self.rpos, self.opos, self.cpos = _run(
                self.mem, self.mem64, self.mem32, im.rbase, im.rsize, im.roff, im.rperm, im.rslot, self.dc,
                _TAB["match"], _TAB["mask"], _TAB["fmt"], _TAB["cls"], _TAB["order"], _TAB["start"], _TAB["stop"],
                self.regs, self.st, counts, im.tohost, b, self.mode,
                self.rbuf, self.rpos, self.obuf, self.opos, self.hist, self.cbuf, self.cpos, _TAB["use"], self.wbuf,
                self.wofs, _TAB["kind"], im.ctab, im.rhslot, im.xperm)
            done += n
            self.wofs += n
            if status == ST_GROW:
                need = int(self.st[S_NEED])
                # the write, and the reserve of every step of the next slice after it
                if self.mode & REC_READS:
                    self.rbuf = self._room(self.rbuf, self.rpos, need + 3 * _SLICE)
                if self.mode & LOG_OPS:
                    self.obuf = self._room(self.obuf, self.opos, 3 * need + 9 * _SLICE)
                wanted = int(self.st[S_CNEED])
                if self.cpos + wanted > self.max_output:
                    pc = int(self.st[S_PC]) & _U64
                    raise M.OutputLimitExceeded(self.max_output, wanted, pc=pc, insn=self.image.peek_insn(self.mem, pc),
                                                step=int(self.st[S_STEP]))
                self._output_room(wanted)
                if self.mode & REPLAY and self.rpos + need > self.rbuf.shape[0]:
                    return ST_REPLAY_EXHAUSTED
                continue
            if status != ST_BUDGET:
                return status
        return status

    def state(self) -> EmuTraceStart:
        st = self.st
        res = int(st[S_RES])
        return EmuTraceStart(int(st[S_PC]) & _U64, int(st[S_STEP]), int(st[S_PRIV]),
                             tuple(self.regs.view(np.uint64).tolist()),
                             tuple(st[S_MSTATUS:S_MIE + 1].view(np.uint64).tolist()),
                             -1 if res == -1 else res & _U64)

    def fail(self, status: int, max_steps: int):
        st = self.st
        pc, step = int(st[S_PC]) & _U64, int(st[S_STEP])
        if status == ST_TRAP:
            insn = int(st[S_EINSN])
            raise M.GuestTrap(int(st[S_ECAUSE]), int(st[S_ETVAL]) & _U64, pc=pc,
                              insn=None if insn < 0 else insn, step=step)
        if status == ST_REPLAY_EXHAUSTED:
            raise M.EmulatorError(f"min trace exhausted at pc {pc:#x} (step {step})")
        raise M.StepLimitExceeded(max_steps, pc=pc, insn=self.image.peek_insn(self.mem, pc), step=step)


def _entry(program: Program) -> EmuTraceStart:
    pc, regs = M.initial_state(program)
    return EmuTraceStart(pc, 0, M.PRIV_M, tuple(regs), tuple(0 for _ in M.CSR_STATE), -1)


def _whole_run(image: Image, program: Program, mode: int, max_steps: int, machine=None,
               deadline: float | None = None, timeout: float | None = None,
               max_output: int = M.DEFAULT_MAX_OUTPUT) -> _Machine:
    """Run the whole program in one machine (the MO and RH runners), under
    the main execution's step limit, deadline and output bound."""
    import time

    m = (machine or _Machine)(image, image.copy_mem(), _entry(program), mode)
    m.max_output = max_output
    counts = np.zeros(len(CLASSES), dtype=np.int64)
    while True:
        _check_stop()
        left = max_steps - int(m.st[S_STEP])
        if left <= 0:
            m.fail(ST_BUDGET, max_steps)
        # a guest's first slice runs whatever the clock says: one that ends on its limit has taken steps
        if deadline is not None and int(m.st[S_STEP]) and time.monotonic() > deadline:
            pc = int(m.st[S_PC]) & _U64
            raise M.TimeLimitExceeded(timeout, pc=pc, insn=image.peek_insn(m.mem, pc), step=int(m.st[S_STEP]))
        status = m.run(min(left, 1 << 24), counts)
        m.rpos = 0                            # (MO/RH keep no min trace)
        if status == ST_END:
            return m
        if status != ST_BUDGET:
            m.fail(status, max_steps)


def mem_ops_runner(image: Image, program: Program, max_steps: int, machine=None, deadline: float | None = None,
                   timeout: float | None = None, max_output: int = M.DEFAULT_MAX_OUTPUT) -> np.ndarray:
    """MO: every word access of the run as an (n, 3) int64 array
    ``[word address, step, is_write]`` in execution order."""
    m = _whole_run(image, program, LOG_OPS, max_steps, machine, deadline, timeout, max_output)
    return m.obuf[:m.opos].reshape(-1, 3).copy()


def rom_histogram_runner(image: Image, program: Program, max_steps: int, machine=None,
                         deadline: float | None = None, timeout: float | None = None,
                         max_output: int = M.DEFAULT_MAX_OUTPUT) -> RomHistogram:
    """RH: executions per instruction address."""
    m = _whole_run(image, program, LOG_PCS, max_steps, machine, deadline, timeout, max_output)
    return histogram_from_slots(image, m.hist, int(m.st[S_STEP]))


def histogram_from_slots(image: Image, hist: np.ndarray, steps: int) -> RomHistogram:
    pcs = [np.zeros(0, dtype=np.uint64)] * len(image.regions)
    for i, (r, slot) in enumerate(zip(image.regions, image.rhslot)):
        if slot >= 0:
            pcs[i] = np.arange(r.base, r.base + r.size, 2, dtype=np.uint64)
    order = np.argsort(image.rhslot, kind="stable")
    pcs = np.concatenate([pcs[i] for i in order])
    hist = hist[:len(pcs)]
    nz = hist != 0
    return RomHistogram(steps, pcs[nz], hist[nz].astype(np.uint64))


_warm = threading.Lock()
_warmed = False


def warm_up() -> None:
    """Compile the interpreter, or load it from numba's cache, once per
    process, so that a caller can time a run without the compile."""
    global _warmed
    with _warm:
        if _warmed:
            return
        program = Program("warm-up", 0x8000_0000, (Segment(0x8000_0000, bytes(8), PERM_R | PERM_X),))
        image = Image(program, b"", 0)
        _Machine(image, image.copy_mem(), _entry(program), REC_READS).run(1, np.zeros(len(CLASSES), dtype=np.int64))
        _warmed = True




#: steps between two looks at the clock when a run has a deadline
CLOCK_STEPS = 1 << 22


def run(program: Program, input_bytes: bytes = b"", chunk_steps: int = 1 << 18, max_steps: int = M.DEFAULT_MAX_STEPS,
        machine=None, deadline: float | None = None, timeout: float | None = None,
        max_output: int = M.DEFAULT_MAX_OUTPUT):
    """Main execution (MT): min traces + per-chunk counters; same dict as reference.run.

    ``machine`` is the :class:`_Machine` class to run (the native backend
    passes its subclass); ``deadline`` (:func:`time.monotonic`) is looked
    at every :data:`CLOCK_STEPS` steps.  A failure raises a
    :class:`~.machine.GuestError` holding the output so far."""
    image = image_of(program, input_bytes, len(input_bytes))
    mem = image.copy_mem()
    m = (machine or _Machine)(image, mem, _entry(program), REC_READS)
    m.max_output = max_output
    try:
        return _main(image, mem, m, chunk_steps, max_steps, deadline, timeout)
    except M.GuestError as e:
        raise M.with_output(M.explain(e, image.regions, program.symbols, program.isa), bytes(m.cbuf[:m.cpos]), enumerate(image.peek_u32s(mem, M.OUTPUT_ADDR, M.N_OUTPUTS)))


def _main(image: Image, mem, m: _Machine, chunk_steps: int, max_steps: int, deadline: float | None,
          timeout: float | None) -> dict:
    import time

    slice_steps = CLOCK_STEPS if deadline is not None else max_steps
    traces, table = [], []
    while True:
        start = m.state()
        counts = np.zeros(len(CLASSES), dtype=np.int64)
        # Each chunk records into a buffer of its own, which becomes the min
        # trace's array: shrunk in place below instead of copied out.
        m.rbuf = _NO_READS
        m.rpos = 0
        first_step = start.step
        status = ST_BUDGET
        while True:
            done = int(m.st[S_STEP]) - first_step
            left = min(chunk_steps - done, max_steps - int(m.st[S_STEP]), slice_steps)
            if left <= 0:
                break
            if deadline is not None and int(m.st[S_STEP]) and time.monotonic() > deadline:
                pc = int(m.st[S_PC]) & _U64
                raise M.TimeLimitExceeded(timeout, pc=pc, insn=image.peek_insn(mem, pc), step=int(m.st[S_STEP]))
            status = m.run(left, counts)
            if status != ST_BUDGET:
                break
        if status == ST_TRAP:
            m.fail(status, max_steps)
        n = int(m.st[S_STEP]) - first_step
        ended = status == ST_END
        if not ended and n < chunk_steps:
            m.fail(ST_BUDGET, max_steps)            # step limit
        reads, m.rbuf = m.rbuf, _NO_READS
        if reads is _NO_READS:
            reads = np.empty(0, dtype=np.uint64)
        else:
            # realloc keeps the pages: no copy.  No view of this buffer
            # exists (the compiled loop keeps none), hence refcheck=False.
            reads.resize(m.rpos, refcheck=False)
        traces.append(EmuTrace(len(traces), start, n, reads, ended))
        table.append(counts)
        if ended:
            break
    st = m.st
    code = int(st[S_CODE]) & _U64
    pub_outs = list(enumerate(image.peek_u32s(mem, M.OUTPUT_ADDR, M.N_OUTPUTS)))
    return {
        "traces": traces, "counts": np.array(table, dtype=np.int64).reshape(-1, len(CLASSES)),
        "steps": int(st[S_STEP]), "exit_code": code, "end_reason": "exit" if st[S_END] == 1 else "tohost",
        "stdout": bytes(m.cbuf[:m.cpos]), "pub_outs": pub_outs, "image": image,
    }


def replay_chunk(program: Program, trace: EmuTrace, input_size: int = 0, image: Image | None = None,
                 mode: int = 0, machine=None, out: np.ndarray | None = None):
    """Re-execute one chunk from its min trace (compiled, releases the GIL).

    Returns ``(end_state, counts, machine)``.  ``image`` may be shared
    between threads: replay never writes memory.  With ``WITNESS`` in
    ``mode``, ``out`` (C-contiguous int64, ``(trace.steps, N_WITNESS)``)
    receives the rows in place of a new table: every column of every row
    is written.
    """
    if image is None:
        image = image_of(program, None, input_size)
    m = (machine or _Machine)(image, image.mem, trace.start_state, REPLAY | mode)
    m.rbuf = np.ascontiguousarray(trace.mem_reads, dtype=np.uint64)
    if mode & WITNESS:
        if out is None:
            out = np.empty((trace.steps, N_WITNESS), dtype=np.int64)
        elif out.shape != (trace.steps, N_WITNESS) or out.dtype != np.int64 or not out.flags.c_contiguous:
            raise ValueError(f"chunk {trace.chunk_id}: a witness buffer of {trace.steps} rows of {N_WITNESS} "
                             f"C-contiguous int64, not {out.shape} {out.dtype}")
        m.wbuf = out
    counts = np.zeros(len(CLASSES), dtype=np.int64)
    status = m.run(trace.steps, counts) if trace.steps else ST_BUDGET
    n = int(m.st[S_STEP]) - trace.start_state.step
    if status in (ST_TRAP, ST_REPLAY_EXHAUSTED):
        m.fail(status, 0)
    if n != trace.steps:
        raise M.EmulatorError(f"chunk {trace.chunk_id}: guest ended after {n} of {trace.steps} steps")
    if m.rpos != len(m.rbuf):
        raise M.EmulatorError(f"chunk {trace.chunk_id}: consumed {m.rpos} of {len(m.rbuf)} recorded reads")
    if (status == ST_END) != trace.end:
        raise M.EmulatorError(f"chunk {trace.chunk_id}: end flag mismatch (replay ended: {status == ST_END})")
    return m.state(), counts, m

