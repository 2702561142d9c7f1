"""The native backend's MO and RH runners and its chunk replay, without numba.

Algorithm
---------
A :class:`Runner` is one run of translated code for one ``mode``
(:mod:`.layout`): ``LOG_OPS`` (MO, :func:`mem_ops_runner`), ``LOG_PCS``
(RH, :func:`rom_histogram_runner`), ``REPLAY`` (re-execution of one chunk
from its min trace, :func:`replay_chunk`) and ``REPLAY | WITNESS`` (the
same, writing the chunk's witness rows).  Its state is numpy arrays that
the translated function ``hf_run`` (:mod:`.native_translate`) reads and
writes through their addresses: ``regs``, ``st`` (pc and step), ``ctx``,
``counts``, the region table, the memory image, the min trace (``rbuf``,
popped on replay), the operation log ``obuf`` (MO; on witness the chunk's
table, with ``ctx[CTX_OPOS]`` its first step), the histogram ``hist`` (RH).

:meth:`Runner.run` calls the translated code up to a step count; where it
returns (:mod:`.native`'s list: an instruction it does not translate, an
access that would fault or touch the UART or ``tohost``, writable code,
an exhausted min trace, a pc discovery did not reach) the reference
interpreter (:func:`hetflow.executors.emulator.reference.step`, or
:func:`~.reference.witness_step` for a row) runs those steps on the same
state, as :mod:`.native_main` does for MT: registers, pc and step are
copied into a :class:`~.reference.Hart` that keeps privilege, CSRs and the
reservation throughout, and its port reads and writes the same memory
(MO, RH) or pops the same min trace (replay).  The port's operation log,
pc log and witness row land where the translated code would have put
them (:meth:`Runner._interpret`), so the outputs are the fast and
reference backends' array for array.

Nothing here imports numba, and the translation comes from the disk cache
(:func:`.native_compile.translation`) without LLVM when it is there.
"""

from __future__ import annotations

import functools
import time
import weakref

import numpy as np

from . import machine as M
from . import reference
from .background import check as _check_stop, spawn  # noqa: F401 - the runners' threads, re-exported
from .elf import Program
from .isa import CLASSES
from .layout import (CTX_NREG, CTX_OPOS, CTX_RLEN, CTX_RPOS, CTX_STOP, CTX_TOHOST, LOG_OPS, LOG_PCS, N_CTX, N_MISS,
                     N_SHORT, REPLAY, ST_BUDGET, ST_END, U64, WITNESS, region_layout, to_i64)
from .native_main import RETRANSLATE_AFTER, WRITABLE_BURST
from .output import EmuTrace, EmuTraceStart, RomHistogram
from .ports import _Port, _words

__all__ = ["Image", "image_of", "Runner", "mem_ops_runner", "rom_histogram_runner", "replay_chunk", "spawn",
           "histogram_from_slots", "N_WITNESS"]

#: witness columns (:data:`.witness.COLUMNS`)
N_WITNESS = 16
#: steps per call of translated code: MO's log grows by at most 3 values a step before the runner looks again
SLICE = 1 << 20
_NCLS = len(CLASSES)


class Image:
    """Memory and region tables for one program and input size: the
    attributes of :class:`.fast.Image` that the runners and translation
    read (either image works here), built without the fast backend."""

    def __init__(self, program: Program, input_bytes: bytes | None, input_size: int):
        regions = M.build_regions(program, input_size, input_bytes)
        self.xperm = M.fetch_permission(program.fetch)
        self.rvc = program.isa != "rv64ima"        # whether 16-bit parcels decode (translation and interpreter)
        offs, slots, hslots, self.nslot, self.nhist, size = region_layout(regions, self.xperm)
        self.mem = np.zeros(size, dtype=np.uint8)
        for r, o in zip(regions, offs):
            if r.name not in ("ram", "stack"):     # already zero
                self.mem[o:o + r.size] = np.frombuffer(r.data, dtype=np.uint8)
        self.regions = regions
        self.rbase = np.array([r.base for r in regions], dtype=np.int64)
        self.rsize = np.array([r.size for r in regions], dtype=np.int64)
        self.roff = np.array(offs, dtype=np.int64)
        self.rperm = np.array([r.perm for r in regions], dtype=np.int64)
        self.rslot = np.array(slots, dtype=np.int64)
        self.rhslot = np.array(hslots, dtype=np.int64)
        self.tohost = -1 if program.tohost is None else program.tohost

    def copy_mem(self) -> np.ndarray:
        mem = np.zeros(self.mem.shape[0], dtype=np.uint8)     # RAM and stack stay zero pages until touched
        for r, o in zip(self.regions, self.roff):
            if r.name not in ("ram", "stack"):
                mem[o:o + r.size] = self.mem[o:o + r.size]
        return mem


def image_of(program: Program, input_bytes: bytes | None, input_size: int) -> Image:
    """The :class:`Image` of a program and input, built once per process
    (the last 8 kept, as :func:`.fast.image_of`): runners copy its memory,
    replays only read it."""
    try:
        return _cached_image(program, input_bytes, input_size)
    except TypeError:
        return Image(program, input_bytes, input_size)


@functools.lru_cache(maxsize=8)
def _cached_image(program: Program, input_bytes: bytes | None, input_size: int) -> Image:
    return Image(program, input_bytes, input_size)


class _Sink:
    """A live run's ``reads``: MO and RH keep no min trace."""

    def extend(self, words) -> None:
        pass


class _LivePort(_Port):
    """The reference port over a runner's memory (MO, RH)."""

    def __init__(self, image, mem: np.ndarray, log_ops: bool, log_pcs: bool, fetch: str):
        super().__init__(image.regions, log_ops, log_pcs, fetch)
        view = memoryview(mem)
        self.mem = [view[int(o):int(o) + r.size] for r, o in zip(image.regions, image.roff)]
        self.reads = _Sink()

    def read_words(self, addr, size):
        return [self._word(w) for w in _words(addr, size)]

    _word = reference.LivePort._word
    write_bytes = reference.LivePort.write_bytes
    peek_insn = reference.LivePort.peek_insn


class _ReplayPort(_Port):
    """The reference port popping the runner's min trace at its position."""

    def __init__(self, image, runner: "Runner", fetch: str):
        super().__init__(image.regions, False, False, fetch)
        # weakly: a runner and its port in a cycle kept the runner, and the witness rows it wrote into the
        # caller's table (a shared mapping that then cannot be closed), until a garbage collection
        self.runner = weakref.ref(runner)

    def read_words(self, addr, size):
        r = self.runner()
        n = len(_words(addr, size))
        if r.rpos + n > r.rbuf.shape[0]:
            raise _Exhausted
        words = r.rbuf[r.rpos:r.rpos + n].tolist()
        r.rpos += n
        return words

    def write_bytes(self, region, addr, data):
        pass


class _Exhausted(Exception):
    """The min trace holds no more words (a replay of a wrong trace)."""


def _translation(image, mode: int, pc: int, extra=frozenset()):
    from .native_compile import translation   # the translation and its disk cache (llvmlite only to compile)

    return translation(image, mode, pc, extra)


class Runner:
    """One run of translated code with the reference interpreter beside it
    (see the module docstring); ``mem`` is the image's own memory on
    replay (never written) and a copy otherwise."""

    def __init__(self, image, program: Program, start: EmuTraceStart, mode: int):
        self.image, self.mode = image, mode
        self.mem = image.mem if mode & REPLAY else image.copy_mem()
        self.regs = np.array([to_i64(v) for v in start.regs], dtype=np.int64)
        self.st = np.array([to_i64(start.pc), start.step], dtype=np.int64)
        self.ctx = np.zeros(N_CTX, dtype=np.int64)
        self.ctx[CTX_NREG] = len(image.regions)
        self.ctx[CTX_TOHOST] = image.tohost
        self.rtab = np.ascontiguousarray(np.stack([image.rbase, image.rsize, image.roff, image.rperm], axis=1))
        self.counts = np.zeros(_NCLS, dtype=np.int64)
        self.rbuf = np.zeros(1, dtype=np.uint64)
        self.rpos = 0
        self.obuf = np.zeros(3 * 1024 if mode & LOG_OPS else 1, dtype=np.int64)
        self.opos = 0
        self.hist = np.zeros(image.nhist if mode & LOG_PCS else 1, dtype=np.int64)
        self.wbuf: np.ndarray | None = None     # WITNESS: the chunk's table (:func:`replay_chunk` sets it)
        self.first = start.step                 # the witness table's row 0
        self.hart = reference.Hart(start)
        self.hart.tohost, self.hart.rvc = program.tohost, program.isa != "rv64ima"
        if mode & REPLAY:
            self.port = _ReplayPort(image, self, program.fetch)
        else:
            self.port = _LivePort(image, self.mem, bool(mode & LOG_OPS), bool(mode & LOG_PCS), program.fetch)
        self.code = _translation(image, mode, start.pc)
        self.missed: set[int] = set()
        self.n_missed = 0
        self.interpreted = 0                    # steps the reference interpreter ran (the rest: translated code)

    def _in_code(self, pc: int) -> bool:
        from .native_compile import _in_code

        return _in_code(self.image, pc)

    def _ptr(self, a: np.ndarray) -> int:
        return a.ctypes.data

    def run(self, budget: int, deadline: float | None = None, timeout: float | None = None) -> int:
        """Up to ``budget`` steps: translated code where there is some, the
        interpreter for the rest; ``ST_END`` when the guest ended."""
        st, ctx = self.st, self.ctx
        first = int(st[1])
        out = self.wbuf if self.mode & WITNESS else None
        while True:
            _check_stop()
            done = int(st[1]) - first
            if done >= budget:
                return ST_BUDGET
            if deadline is not None and time.monotonic() > deadline:
                pc = int(st[0]) & U64
                raise M.TimeLimitExceeded(timeout, pc=pc, insn=self._peek_insn(pc), step=int(st[1]))
            b = min(budget - done, SLICE)
            stop = int(st[1]) + b
            if self.mode & LOG_OPS:
                self._room(3 * b)
            ctx[CTX_STOP] = stop
            ctx[CTX_RPOS] = self.rpos
            ctx[CTX_OPOS] = self.first if out is not None else self.opos
            ctx[CTX_RLEN] = self.rbuf.shape[0]
            status = self.code.fn(self._ptr(self.regs), self._ptr(st), self._ptr(self.mem), self._ptr(self.rbuf),
                                  self._ptr(ctx), self._ptr(self.counts), self._ptr(self.rtab),
                                  self._ptr(out if out is not None else self.obuf), self._ptr(self.hist))
            self.rpos = int(ctx[CTX_RPOS])
            if out is None:
                self.opos = int(ctx[CTX_OPOS])
            left = stop - int(st[1])
            if left == 0:
                continue
            k = 1
            if status == N_SHORT:
                k = left
            elif status == N_MISS:
                pc = int(st[0]) & U64
                if pc in self.code.tails:          # inside a block: the interpreter finishes it
                    k = min(left, self.code.tails[pc])
                elif self._in_code(pc):
                    self.missed.add(pc)
                    self.n_missed += 1
                    if self.n_missed >= RETRANSLATE_AFTER:
                        self.code = _translation(self.image, self.mode, pc, self.missed)
                        self.n_missed = 0
                        continue
                else:
                    k = min(left, WRITABLE_BURST)
            if self._interpret(k):
                return ST_END

    def _room(self, need: int) -> None:
        if self.opos + need > self.obuf.shape[0]:
            grown = np.empty(max(self.opos + need, 2 * self.obuf.shape[0]), dtype=np.int64)
            grown[:self.opos] = self.obuf[:self.opos]
            self.obuf = grown

    def _interpret(self, k: int) -> bool:
        """Up to ``k`` steps in the reference interpreter; whether the guest ended."""
        h, port, st = self.hart, self.port, self.st
        h.pc = int(st[0]) & U64
        h.step = int(st[1])
        h.x = self.regs.view(np.uint64).tolist()
        counts = [0] * _NCLS
        witness = self.mode & WITNESS
        try:
            for _ in range(k):
                if witness:
                    row = reference.witness_step(h, port, counts)
                    self.wbuf[row[0] - self.first] = [to_i64(v) for v in row]
                else:
                    reference.step(h, port, counts)
                if h.end is not None:
                    break
        except _Exhausted:
            raise M.EmulatorError(f"min trace exhausted at pc {h.pc:#x} (step {h.step})") from None
        finally:
            self.interpreted += h.step - int(st[1])
            self.regs[:] = np.array(h.x, dtype=np.uint64).view(np.int64)
            st[0], st[1] = to_i64(h.pc), h.step
            self.counts += counts
            if port.ops:
                self._room(3 * len(port.ops))
                self.obuf[self.opos:self.opos + 3 * len(port.ops)] = np.array(port.ops, dtype=np.int64).ravel()
                self.opos += 3 * len(port.ops)
                port.ops.clear()
            if port.pcs:
                im = self.image
                for pc in port.pcs:
                    for r, slot in zip(im.regions, im.rhslot):
                        if slot >= 0 and r.base <= pc < r.end:
                            self.hist[slot + (pc - r.base) // 2] += 1
                            break
                port.pcs.clear()
        return h.end is not None

    def _peek_insn(self, pc: int):
        return None if self.mode & REPLAY else self.port.peek_insn(pc)

    def state(self) -> EmuTraceStart:
        h, st = self.hart, self.st
        return EmuTraceStart(int(st[0]) & U64, int(st[1]), h.priv, tuple(self.regs.view(np.uint64).tolist()),
                             tuple(h.csr[c] for c in M.CSR_STATE), h.reservation)


def _entry(program: Program) -> EmuTraceStart:
    pc, regs = M.initial_state(program)
    return EmuTraceStart(pc, 0, M.PRIV_M, tuple(regs), tuple(0 for _ in M.CSR_STATE), -1)


def _whole_run(image, program: Program, mode: int, max_steps: int, deadline: float | None,
               timeout: float | None, max_output: int = M.DEFAULT_MAX_OUTPUT) -> Runner:
    """The whole program in one runner (MO, RH), under the main execution's
    step limit, deadline and output bound, failing as the fast backend's runners do."""
    m = Runner(image, program, _entry(program), mode)
    m.hart.max_output = max_output
    if m.run(max_steps, deadline, timeout) == ST_END:
        return m
    pc = int(m.st[0]) & U64
    raise M.StepLimitExceeded(max_steps, pc=pc, insn=m._peek_insn(pc), step=int(m.st[1]))


def mem_ops_runner(image, program: Program, max_steps: int, deadline: float | None = None,
                   timeout: float | None = None, max_output: int = M.DEFAULT_MAX_OUTPUT) -> np.ndarray:
    """MO: every word access of the run as an (n, 3) int64 array
    ``[word address, step, is_write]`` in execution order (:func:`.fast.mem_ops_runner`'s)."""
    m = _whole_run(image, program, LOG_OPS, max_steps, deadline, timeout, max_output)
    return m.obuf[:m.opos].reshape(-1, 3).copy()


def rom_histogram_runner(image, program: Program, max_steps: int, deadline: float | None = None,
                         timeout: float | None = None, max_output: int = M.DEFAULT_MAX_OUTPUT) -> RomHistogram:
    """RH: executions per instruction address (:func:`.fast.rom_histogram_runner`'s)."""
    m = _whole_run(image, program, LOG_PCS, max_steps, deadline, timeout, max_output)
    return histogram_from_slots(image, m.hist, int(m.st[1]))


def histogram_from_slots(image, hist: np.ndarray, steps: int) -> RomHistogram:
    """The histogram of the per-slot counts ``hist`` (:func:`.fast.histogram_from_slots`)."""
    pcs = [np.zeros(0, dtype=np.uint64)] * len(image.regions)
    for i, (r, slot) in enumerate(zip(image.regions, image.rhslot)):
        if slot >= 0:
            pcs[i] = np.arange(r.base, r.base + r.size, 2, dtype=np.uint64)
    order = np.argsort(image.rhslot, kind="stable")
    pcs = np.concatenate([pcs[i] for i in order])
    hist = hist[:len(pcs)]
    nz = hist != 0
    return RomHistogram(steps, pcs[nz], hist[nz].astype(np.uint64))


def replay_chunk(program: Program, trace: EmuTrace, input_size: int = 0, image=None, mode: int = 0,
                 out: np.ndarray | None = None):
    """Re-execute one chunk from its min trace (:func:`.fast.replay_chunk`:
    ``(end_state, counts, runner)``, the runner's ``wbuf`` the witness
    rows with ``WITNESS`` in ``mode``, into ``out`` when given)."""
    if image is None:
        image = image_of(program, None, input_size)
    m = Runner(image, program, trace.start_state, REPLAY | mode)
    m.rbuf = np.ascontiguousarray(trace.mem_reads, dtype=np.uint64)
    if m.rbuf.shape[0] == 0:
        m.rbuf = np.zeros(1, dtype=np.uint64)[:0]
    if mode & WITNESS:
        if out is None:
            out = np.empty((trace.steps, N_WITNESS), dtype=np.int64)
        elif out.shape != (trace.steps, N_WITNESS) or out.dtype != np.int64 or not out.flags.c_contiguous:
            raise ValueError(f"chunk {trace.chunk_id}: a witness buffer of {trace.steps} rows of {N_WITNESS} "
                             f"C-contiguous int64, not {out.shape} {out.dtype}")
        m.wbuf = out
    ended = m.run(trace.steps) == ST_END if trace.steps else False
    n = int(m.st[1]) - trace.start_state.step
    if n != trace.steps:
        raise M.EmulatorError(f"chunk {trace.chunk_id}: guest ended after {n} of {trace.steps} steps")
    if m.rpos != len(m.rbuf):
        raise M.EmulatorError(f"chunk {trace.chunk_id}: consumed {m.rpos} of {len(m.rbuf)} recorded reads")
    if ended != trace.end:
        raise M.EmulatorError(f"chunk {trace.chunk_id}: end flag mismatch (replay ended: {ended})")
    return m.state(), m.counts, m


