"""The native backend's main execution (MT) on ctypes: no numpy, numba or llvmlite.

``hetflow emulate --backend native`` runs here.  A whole process is Python's
start, the imports, the ELF load, the translation's load and the run, so
this module keeps the first three small: the machine's state is ctypes
arrays (``regs``, ``st``, ``ctx``, ``counts``, the min-trace buffer ``rbuf``)
and one 8-byte aligned buffer holding every region back to back (the
layout of :mod:`.layout`, which the generated code addresses), and the
translation is a shared object in the disk cache loaded with
:class:`ctypes.CDLL`.  Only a program not seen before (or a host without a
linker) imports the compiler (:mod:`.native_compile`) and llvmlite to
translate it.

What the translated code does not run (``ecall``, CSRs, atomics, a load or
store that would fault or touch the UART or ``tohost``, writable code
that was invalidated or entered in the middle of a block; see
:mod:`.native`) runs in the reference interpreter
(:func:`hetflow.executors.emulator.reference.step`), one step at a time, on
the same state: the hart's registers and pc are copied in and out around
it, its privilege, CSRs and reservation live in the hart throughout (the
translated code never reads them), and its memory port reads and writes
the same buffer, appending each word it reads to the same min trace.  So
the min traces, counters, outputs, traps and the step limit are the
other backends', field for field (``tests/emulator`` compare them).

One call of the translated code runs many chunks: where a chunk ends
inside translated code, the driver appends a *chunk record* (the next
chunk's pc, first step and registers, the ended chunk's counters and
where its reads end in the min-trace buffer; :mod:`.layout`'s ``REC_*``)
and goes on, so the code returns only where the interpreter or a
retranslation must step in, at the step limit, or when the record buffer
(:data:`RECORDS`) or the min-trace buffer (:data:`BATCH_WORDS` beyond a
chunk's worst case) is full.  :meth:`MainRun._records` then makes the
chunks' min traces and counter rows from the records in one pass.

The cache (:mod:`.cache`, :func:`cache_dir`) keeps, per translation key
(the code digest, the mode and the seeds), the object code (``.o``), the
shared object linked from it (``.so``) and what the runtime needs to know
about it (``.meta``: the blocks' first pcs and the steps from any other
translated pc to its block's end), and per digest of an ELF file's bytes
what a run needs of the file (:func:`load_program`), so that a program
seen before loads without pyelftools.  This module loads from it
(:func:`load_cached`); the compiler (:mod:`.native_compile`) writes to it
and never imports this module, which imports the compiler only on a miss.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import operator
import os
from array import array

from . import machine as M
from . import reference
# the disk cache, re-exported: callers and tests know its functions by this module
from .cache import (ELF_VERSION, VERSION, cache_dir, cache_path, code_digest, code_regions,  # noqa: F401
                    host_identity, load_program, read_meta, remember_seeds, sha256, stored_seeds, translation_key,
                    write_atomic, write_meta)
from .elf import PERM_W, PERM_X, Program
from .isa import CLASSES
from .layout import (CTX_CEND, CTX_CHUNK, CTX_LIMIT, CTX_NREC, CTX_NREG, CTX_OPOS, CTX_PAGES, CTX_RCAP, CTX_RECS,
                     CTX_RLEN, CTX_RPOS, CTX_STOP, CTX_TOHOST, N_CTX, N_MISS, N_SHORT, N_STOP, PAGE_SHIFT, REC_COUNTS,
                     REC_PC, REC_READS, REC_RPOS, REC_STEP, ST_BUDGET, ST_END, U64, record_width, region_layout)
from .machine import Region
from .output import EmuTrace, EmuTraceStart

__all__ = ["VERSION", "RETRANSLATE_AFTER", "cache_dir", "host_identity", "code_digest", "translation_key",
           "stored_seeds", "remember_seeds", "write_atomic", "load_cached", "Loaded", "MainRun", "run", "cache_path",
           "load_program", "ELF_VERSION"]

RETRANSLATE_AFTER = 64
WRITABLE_BURST = 256
#: chunk records a call of translated code may append before it returns
RECORDS = 1024
#: min-trace words beyond one chunk's worst case (three a step): while the reads so far leave this much, a
#: call goes on to the next chunk
BATCH_WORDS = 1 << 22

_CSRS = operator.itemgetter(*M.CSR_STATE)
# EmuTraceStart's fields in order, made without its Python-level __new__ (once per chunk)
_new_start = functools.partial(tuple.__new__, EmuTraceStart)
_I64P = ctypes.c_void_p
_SIG = (ctypes.c_int64, *[_I64P] * 9)


class Loaded:
    """A translation as the runtime sees it: the compiled function and
    which pcs it covers (``heads``: blocks' first pcs; ``tails``: any
    other translated pc -> steps to its block's end)."""

    def __init__(self, fn, heads, tails, report: dict, seeds=frozenset(), keep=None, pages=()):
        self.fn, self.heads, self.tails, self.seeds, self.keep = fn, frozenset(heads), tails, frozenset(seeds), keep
        self.pages = list(pages)      # flat-memory pages holding translated writable code
        self._report = report

    def report(self) -> dict:
        return dict(self._report)


def load_cached(key: str, seeds=frozenset()) -> Loaded | None:
    """The shared object cached under ``key`` with its description, or None."""
    import time

    t0 = time.perf_counter()
    base = os.path.join(cache_path(), key)
    try:
        meta = read_meta(f"{base}.meta")
        lib = ctypes.CDLL(f"{base}.so")
    except (OSError, ValueError):
        return None
    fn = ctypes.CFUNCTYPE(*_SIG)(("hf_run", lib))
    report = dict(meta["report"], seconds=time.perf_counter() - t0, cached=True)
    return Loaded(fn, meta["heads"], {int(k): v for k, v in meta["tails"].items()}, report, seeds, lib,
                  meta.get("pages", ()))


def _buffer(ctype, n: int):
    """A zeroed array of ``n`` ``ctype``: anonymous memory whose pages the
    OS zeroes when first touched, so 4 MiB of RAM cost nothing until used."""
    import mmap

    n = max(n, 1)
    mem = mmap.mmap(-1, n * ctypes.sizeof(ctype))
    arr = (ctype * n).from_buffer(mem)
    return arr


class _Reads:
    """The min-trace buffer as the reference interpreter's ``reads`` list:
    a word it reads lands where the translated code would have put it."""

    def __init__(self, run: "MainRun"):
        self.run = run

    def extend(self, words) -> None:
        r = self.run
        words = list(words)
        r.room(len(words))
        for w in words:
            r.rbuf[r.rpos] = w
            r.rpos += 1


class _Port(reference.LivePort):
    """The reference interpreter's memory port over the run's buffer."""

    def __init__(self, regions, fetch: str, views, run: "MainRun"):
        reference._Port.__init__(self, regions, False, False, fetch)
        self.mem = views
        self.reads = _Reads(run)


class MainRun:
    """One main execution: the state, the translation and the chunk loop."""

    def __init__(self, program: Program, input_bytes: bytes, translate: bool = True):
        regions = M.build_regions(program, len(input_bytes), input_bytes)
        xperm = M.fetch_permission(program.fetch)
        offs, slots, _, _, _, size = region_layout(regions, xperm)
        self.program, self.regions, self.slots, self.offs = program, regions, slots, offs
        self.memory = _buffer(ctypes.c_uint64, size // 8)
        self.view = view = memoryview(self.memory).cast("B")
        for r, o in zip(regions, offs):
            if r.name not in ("ram", "stack"):    # already zero
                view[o:o + r.size] = r.data
        self.port = _Port(regions, program.fetch, [view[o:o + r.size] for r, o in zip(regions, offs)], self)
        self.rtab = _buffer(ctypes.c_int64, 4 * len(regions))
        for i, (r, o) in enumerate(zip(regions, offs)):
            self.rtab[4 * i:4 * i + 4] = [r.base, r.size, o, r.perm]
        self.tohost = -1 if program.tohost is None else program.tohost
        self.ctx = _buffer(ctypes.c_int64, N_CTX)
        self.ctx[CTX_NREG] = len(regions)
        self.ctx[CTX_TOHOST] = self.tohost
        # per page of flat memory: 0 no translated code, 1 translated writable code, 2 invalidated
        self.pages = _buffer(ctypes.c_uint8, (size >> PAGE_SHIFT) + 2)
        self.ctx[CTX_PAGES] = ctypes.addressof(self.pages)
        self.snapshots: dict[int, bytes] = {}          # page -> its bytes when its code was translated
        self.invalidations = 0
        self.regs = _buffer(ctypes.c_int64, 32)
        self.st = _buffer(ctypes.c_int64, 2)                 # pc and step: all the translated code keeps
        # the same memory as unsigned words: the hart's view, converted by ctypes at C speed
        self.uregs = (ctypes.c_uint64 * 32).from_buffer(self.regs)
        self._uregs_view = memoryview(self.uregs).cast("B").cast("Q")
        self.ust = (ctypes.c_uint64 * 2).from_buffer(self.st)
        self.rbuf = _buffer(ctypes.c_uint64, 1024)
        self.rbytes = memoryview(self.rbuf).cast("B")          # the same buffer, bytewise
        self.rpos = 0
        self._keep_reads = True
        self._width = record_width(len(CLASSES))
        self._regs_at = REC_COUNTS + len(CLASSES)
        self.recs = _buffer(ctypes.c_uint64, RECORDS * self._width)
        self._recs_view = memoryview(self.recs).cast("B").cast("Q")
        self.hart = reference.Hart(reference.entry_state(program))
        self.hart.tohost, self.hart.rvc = program.tohost, program.isa != "rv64ima"
        self._from_hart()
        # the buffers the translated function takes that stay where they are for the whole run
        self._head = tuple(ctypes.addressof(a) for a in (self.regs, self.st, self.memory))
        self._ctx_at, self._rtab_at = ctypes.addressof(self.ctx), ctypes.addressof(self.rtab)
        self.code = None
        self.missed: set[int] = set()
        self.n_missed = 0
        self._code_ranges = [(r.base, r.end) for r, _ in code_regions(regions, slots)]
        self._writable_code = [(r.base, r.end, o) for r, o in zip(regions, offs) if r.perm & (PERM_W | PERM_X) ==
                               PERM_W | PERM_X]
        # every translation's time, the first and those a run makes of code it met later ("seconds", "count")
        self.translating = {"seconds": 0.0, "count": 0}
        self.code = _translate(self, self.hart.pc, set(), compile=translate)
        if self.code is not None:
            self.use(self.code)

    def translate(self) -> None:
        """Translate the program if the disk cache held no translation
        (``MainRun(..., translate=False)`` only looks there)."""
        if self.code is None:
            self.code = self.use(_translate(self, self.hart.pc, set()))

    def in_code(self, pc: int) -> bool:
        """Whether pc lies in code that translation covers: read-only
        executable code, or writable executable code in a page not
        invalidated."""
        if any(lo <= pc < hi for lo, hi in self._code_ranges):
            return True
        return any(lo <= pc < hi and self.pages[(o + pc - lo) >> PAGE_SHIFT] != 2 for lo, hi, o in self._writable_code)

    def use(self, code: "Loaded") -> "Loaded":
        """Start using a translation: its writable code's pages are marked
        in the page table and their bytes kept to compare against."""
        for p in code.pages:
            if self.pages[p] == 0:
                self.pages[p] = 1
                self.snapshots[p] = bytes(self.view[p << PAGE_SHIFT:(p + 1) << PAGE_SHIFT])
        return code

    def check_pages(self) -> None:
        """Invalidate every page of translated code whose bytes changed: the
        translated code's blocks there exit to the interpreter from now on
        (``N_MISS``), which runs the code as it is in memory."""
        for p, old in list(self.snapshots.items()):
            if self.view[p << PAGE_SHIFT:(p + 1) << PAGE_SHIFT] != old:
                self.pages[p] = 2
                del self.snapshots[p]
                self.invalidations += 1

    def room(self, n: int) -> None:
        """Make room for ``n`` more words in the min-trace buffer."""
        if self.rpos + n > len(self.rbuf):
            grown = _buffer(ctypes.c_uint64, max(self.rpos + n, 2 * len(self.rbuf)))
            ctypes.memmove(grown, self.rbuf, 8 * self.rpos)
            self.rbuf = grown
            self.rbytes = memoryview(grown).cast("B")

    # the hart and the arrays hold the same pc, step and registers between calls
    def _to_hart(self) -> None:
        h = self.hart
        h.pc = self.ust[0]
        h.step = self.st[1]
        h.x = self.uregs[:]

    def _from_hart(self) -> None:
        h = self.hart
        self.uregs[:] = h.x
        self.ust[0] = h.pc
        self.st[1] = h.step

    def state(self) -> EmuTraceStart:
        h = self.hart
        # once per chunk: the registers through a memoryview and the CSRs by one itemgetter, at C speed
        return _new_start((self.ust[0], self.st[1], h.priv, tuple(self._uregs_view), _CSRS(h.csr), h.reservation))

    def interpret(self, k: int, counts) -> int:
        """Up to ``k`` steps in the reference interpreter."""
        h, port = self.hart, self.port
        self._to_hart()
        step = reference.step
        for _ in range(k):
            step(h, port, counts)
            if h.end is not None:
                break
        self._from_hart()
        if self.snapshots:
            self.check_pages()
        return ST_END if h.end is not None else ST_BUDGET

    def run(self, chunk_steps: int, max_steps: int, deadline: float | None = None,
            timeout: float | None = None, reads: bool = True, max_output: int = M.DEFAULT_MAX_OUTPUT) -> dict:
        """The chunk loop: the same dict as :func:`.fast.run`, min traces'
        reads as ``array('Q')``.  ``deadline`` (:func:`time.monotonic`) is
        looked at each time translated code returns (it runs at most to
        the step limit); a failure raises a :class:`~.machine.GuestError`
        holding the output so far.  With ``reads=False`` the min traces'
        ``mem_reads`` are None: the reads are recorded as ever, but not
        copied out of the buffer, for a caller that only counts and reports
        (``hetflow emulate``: at 1 G steps/s the copies cost a third of the
        run)."""
        self._keep_reads = reads
        self.hart.max_output = max_output
        # Each chunk leaves a few tuples and no cycles; the collector would walk every trace so far, over and over
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(chunk_steps, max_steps, deadline, timeout)
        except M.GuestError as e:
            raise M.with_output(M.explain(e, self.regions, self.program.symbols, self.program.isa), self.hart.stdout,
                                [(i, self.port.peek(M.OUTPUT_ADDR + 4 * i, 4)) for i in range(M.N_OUTPUTS)])
        finally:
            if enabled:
                gc.enable()

    def _run(self, chunk_steps: int, max_steps: int, deadline: float | None, timeout: float | None) -> dict:
        """Translated code runs from chunk boundary to chunk boundary by
        itself, appending a record per boundary (:func:`_chunk_boundary
        <.native_translate._chunk_boundary>`) that :meth:`_records` turns
        into min traces and counter rows; the chunk in progress is
        ``self.start`` with its counters in ``counts`` and its reads in
        ``rbuf[:rpos]``.  The code returns here where it needs the
        interpreter, a retranslation, or room in a buffer."""
        traces, table = [], []
        counts = (ctypes.c_int64 * len(CLASSES))()
        st, ctx = self.st, self.ctx
        self.start = self.state()
        self.rpos = 0
        # room for several chunks' reads (pages are touched only when written), so that a call runs many chunks
        self.room(3 * min(chunk_steps, max_steps) + BATCH_WORDS)
        ctx[CTX_CHUNK] = chunk_steps
        ctx[CTX_LIMIT] = max_steps
        ctx[CTX_RECS] = ctypes.addressof(self.recs)
        ctx[CTX_RCAP] = len(self.recs) // self._width
        head, addressof = self._head, ctypes.addressof
        tail = (self._ctx_at, addressof(counts), self._rtab_at, None, None)
        if deadline is not None:
            from time import monotonic
        while True:
            at = st[1]
            if deadline is not None and monotonic() > deadline:
                pc = st[0] & U64
                raise M.TimeLimitExceeded(timeout, pc=pc, insn=self.port.peek_insn(pc), step=at)
            end = self.start.step + chunk_steps
            stop = min(end, max_steps)
            if at >= stop:
                if at != end:
                    pc = st[0] & U64
                    raise M.StepLimitExceeded(max_steps, pc=pc, insn=self.port.peek_insn(pc), step=at)
                self._close(traces, table, counts, chunk_steps, False)
                self.start = self.state()
                continue
            if self.rpos + 3 * (stop - at) > len(self.rbuf):   # a translated step reads at most three words
                self.room(3 * (stop - at))
            ctx[CTX_STOP] = stop
            ctx[CTX_CEND] = end
            ctx[CTX_RPOS] = self.rpos
            ctx[CTX_OPOS] = 0
            ctx[CTX_RLEN] = len(self.rbuf)
            ctx[CTX_NREC] = 0
            status = self.code.fn(*head, addressof(self.rbuf), *tail)
            self.rpos = ctx[CTX_RPOS]
            if ctx[CTX_NREC]:
                self._records(ctx[CTX_NREC], traces, table, chunk_steps)
                end = self.start.step + chunk_steps
                stop = min(end, max_steps)
            left = stop - st[1]
            if left == 0 or status == N_STOP:
                continue
            k = 1
            if status == N_SHORT:
                k = left
            elif status == N_MISS:
                pc = st[0] & U64
                if pc in self.code.tails:          # inside a block: the interpreter finishes it
                    k = min(left, self.code.tails[pc])
                elif self.in_code(pc):
                    self.missed.add(pc)
                    self.n_missed += 1
                    if self.n_missed >= RETRANSLATE_AFTER:
                        self.code = self.use(_translate(self, pc, self.missed))
                        self.n_missed = 0
                        continue
                else:
                    k = min(left, WRITABLE_BURST)
            if self.interpret(k, counts) != ST_BUDGET:
                self._close(traces, table, counts, chunk_steps, True)
                break
        h = self.hart
        return {"traces": traces, "counts": table, "steps": st[1], "exit_code": h.end.code & U64,
                "end_reason": h.end.reason, "stdout": bytes(h.stdout),
                "pub_outs": [(i, self.port.peek(M.OUTPUT_ADDR + 4 * i, 4)) for i in range(M.N_OUTPUTS)],
                "translation": {**self.code.report(), "invalidations": self.invalidations,
                                "seconds": self.translating["seconds"], "translations": self.translating["count"]}}

    def _close(self, traces: list, table: list, counts, chunk_steps: int, ended: bool) -> None:
        """The chunk in progress ends here: its min trace and counter row."""
        reads = None
        if self._keep_reads:
            reads = array("Q")
            reads.frombytes(self.rbytes[:8 * self.rpos])
        traces.append(EmuTrace(len(traces), self.start, self.st[1] - self.start.step, reads, ended))
        table.append(counts[:])                 # a list, sliced in C (list() would go through Python's item protocol)
        ctypes.memset(counts, 0, ctypes.sizeof(counts))
        self.rpos = 0

    def _records(self, n: int, traces: list, table: list, chunk_steps: int) -> None:
        """The ``n`` chunks translated code ended since the last call, from
        its records: each record closes the chunk in progress and starts
        the next.  Privilege, CSRs and the reservation are the hart's: the
        translated code neither reads nor changes them."""
        h = self.hart
        priv, csrs, res = h.priv, _CSRS(h.csr), h.reservation
        rec, width, rbytes, keep = self._recs_view, self._width, self.rbytes, self._keep_reads
        start, prev = self.start, 0
        append_trace, append_row = traces.append, table.append
        for o in range(0, n * width, width):
            rend = rec[o + REC_RPOS]
            reads = None
            if keep:
                reads = array("Q")
                reads.frombytes(rbytes[8 * prev:8 * rend])
            append_trace(EmuTrace(len(traces), start, chunk_steps, reads, False))
            append_row(rec[o + REC_COUNTS:o + self._regs_at].tolist())
            start = _new_start((rec[o + REC_PC], rec[o + REC_STEP], priv, tuple(rec[o + self._regs_at:o + width]),
                                csrs, res))
            prev = rend
        self.start = start
        # the chunk in progress reads from the buffer's start again
        k = self.rpos - prev
        if k and prev:
            ctypes.memmove(self.rbuf, ctypes.addressof(self.rbuf) + 8 * prev, 8 * k)
        self.rpos = k


def _translate(run: MainRun, pc: int, extra: set[int], compile: bool = True) -> Loaded | None:
    """The translation covering ``pc`` (and ``extra``): from the disk cache
    when it holds one, else made by :mod:`.native` (which loads llvmlite),
    or None when ``compile`` is false. Its time is added to the run's
    ``translating``."""
    import time

    t0 = time.perf_counter()
    try:
        got = _translation(run, pc, extra, compile)
    finally:
        run.translating["seconds"] += time.perf_counter() - t0
    if got is not None:
        run.translating["count"] += 1
    return got


def _translation(run: MainRun, pc: int, extra: set[int], compile: bool) -> Loaded | None:
    # writable executable code is translated as it is in memory now, except in invalidated pages
    regions = tuple(Region(r.name, r.base, r.size, r.perm, bytes(run.view[o:o + r.size]))
                    if r.perm & (PERM_W | PERM_X) == PERM_W | PERM_X else r for r, o in zip(run.regions, run.offs))
    excluded = frozenset(p for p, v in enumerate(run.pages) if v == 2) if run.invalidations else frozenset()
    digest = code_digest(regions, run.slots, run.hart.rvc)
    if run._writable_code:
        h = sha256(digest.encode())
        for r, o in zip(regions, run.offs):
            if r.perm & (PERM_W | PERM_X) == PERM_W | PERM_X:
                h.update(f"{r.base}:{o}:".encode())
                h.update(r.data)
        h.update(repr(sorted(excluded)).encode())
        digest = h.hexdigest()
    want = set(extra)
    if run.in_code(pc):
        want.add(pc)
    stored = stored_seeds(digest)
    seeds = want | stored | (set(run.code.seeds) if run.code is not None else set())
    if not want - stored:
        got = load_cached(translation_key(digest, REC_READS, seeds), seeds)
        if got is not None:
            return got
    if not compile:
        return None
    from .native_compile import translate_regions     # llvmlite, only to translate

    t = translate_regions(regions, run.slots, digest, REC_READS, seeds, run.offs, excluded, run.hart.rvc)
    remember_seeds(digest, seeds)
    return Loaded(t.fn, t.heads, t.tails, t.report(), t.seeds, t, t.pages)


def run(program: Program, input_bytes: bytes = b"", chunk_steps: int = 1 << 18, max_steps: int = M.DEFAULT_MAX_STEPS,
        deadline: float | None = None, timeout: float | None = None, max_output: int = M.DEFAULT_MAX_OUTPUT) -> dict:
    """Main execution (MT) on translated code: the dict of :func:`.fast.run`
    (``counts`` as a list of rows, min traces' reads as ``array('Q')``) and
    the translation's ``report`` under ``"translation"``."""
    return MainRun(program, input_bytes).run(chunk_steps, max_steps, deadline, timeout, max_output=max_output)
