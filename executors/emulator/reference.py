"""The ``reference`` backend: plain Python, to be read beside the ISA manual.

Algorithm
---------
A :class:`Hart` holds the architectural state (pc, x0..x31 as unsigned
64-bit Python ints, privilege, the live CSRs, the LR reservation, the step
index).  :func:`step` executes one instruction slot:

1. *fetch* the instruction at pc through the memory port: its first
   16-bit parcel, and the second when the first's low bits are 11 (an
   access fault if a parcel is not in fetchable memory);
2. *decode* it with :func:`hetflow.executors.emulator.isa.decode_insn`
   (the shared tables; a compressed parcel decodes into the base
   instruction it stands for; no match is an illegal instruction, and
   so is every 16-bit parcel of a program whose isa is rv64ima);
3. *execute* the row's function from ``SEMANTICS`` (one small function per
   instruction, registered with ``@semantics("name")``; the A extension,
   fences, system instructions and Zicsr in :mod:`.reference_system`).  Functions compute
   on Python ints and registers are truncated to 64 bits once, in
   :meth:`Hart.write`;
4. a :class:`Trap` raised anywhere in 1–3 is taken: mepc/mcause/mtval are
   set, mstatus.MPIE/MIE/MPP updated, privilege becomes M, pc = mtvec.

Memory goes through a *port* (:mod:`.ports`).  :class:`LivePort` owns the memory image
and appends every word it reads to ``reads`` (the min trace).
:class:`ReplayPort` owns no writable memory: it pops the words a chunk
read from its min trace, so :func:`replay_chunk` re-executes one chunk
alone.  Both ports can also log memory operations (for the memory
planner) and instruction addresses (for the ROM histogram), which is how
the reference path derives mem plans and the histogram from min traces.
:func:`witness_step` wraps :func:`step` and returns the step's witness
row (the port notes the step's data access in ``access``).
"""

from __future__ import annotations

from . import machine as M
# RV64IM's semantics and those of A, fences, system instructions and Zicsr: importing them registers them
from . import reference_base, reference_system  # noqa: F401
from .elf import Program
from .isa import BY_NAME, CLASSES, TABLE, USE_RD, USE_RS1, USE_RS2, decode_insn, instruction_size, operand_use
from .output import EmuTrace
from .ports import MASK32, MASK64, LivePort, ReplayPort, Trap, _Port  # noqa: F401 (the ports, re-exported)
# the hart and the semantics table, re-exported: the step loop and its callers know them by this module
from .reference_hart import SEMANTICS, End, Hart, entry_state, s32, s64, semantics  # noqa: F401

__all__ = ["Hart", "LivePort", "ReplayPort", "Trap", "step", "run", "replay_chunk", "SEMANTICS"]

_CLASS_INDEX = {c: i for i, c in enumerate(CLASSES)}
_SYSTEM = _CLASS_INDEX["system"]
_ECALL = BY_NAME["ecall"]


# --------------------------------------------------------------------------
# the step and the run loops

def take_trap(h: Hart, t: Trap) -> None:
    h.trap = t.cause
    if h.csr["mtvec"] == 0:
        raise M.GuestTrap(t.cause, t.tval, pc=h.pc, insn=h.insn, step=h.step)
    h.csr["mepc"] = h.pc
    h.csr["mcause"] = t.cause
    h.csr["mtval"] = t.tval
    st = h.csr["mstatus"]
    st = (st & ~M.MSTATUS_MPIE) | (M.MSTATUS_MPIE if st & M.MSTATUS_MIE else 0)
    st = (st & ~M.MSTATUS_MIE & ~M.MSTATUS_MPP) | (h.priv << 11)
    h.csr["mstatus"] = st
    h.priv = M.PRIV_M
    h.npc = h.csr["mtvec"] & ~3


def step(h: Hart, m: _Port, counts: list[int]) -> None:
    """Execute one instruction slot; sets ``h.end`` when the guest ends."""
    m.step = h.step
    h.insn = None
    h.trap = -1
    try:
        h.insn = m.fetch(h.pc)
        d = decode_insn(h.insn) if h.rvc or h.insn & 3 == 3 else None
        h.next = h.npc = (h.pc + instruction_size(h.insn)) & MASK64
        if d is None:
            counts[_SYSTEM] += 1
            raise Trap(2, h.insn)
        counts[_CLASS_INDEX[TABLE[d.op].cls]] += 1
        SEMANTICS[TABLE[d.op].name](h, m, d)
    except Trap as t:
        if h.insn is None:
            counts[_SYSTEM] += 1
        take_trap(h, t)
    except End as e:
        # kept without its traceback: its frames would hold the caller's arrays (a witness chunk's rows in a
        # shared mapping that then cannot be closed) until the next garbage collection
        h.end = e.with_traceback(None)
    h.pc = h.npc
    h.step += 1


#: steps between two looks at the clock when a run has a deadline (about 0.1 s here)
CLOCK_STEPS = 1 << 15
#: words read between two looks at the clock, whatever the steps: one ecall may read megabytes
CLOCK_READS = 1 << 16


def _chunks(h: Hart, m: _Port, chunk_steps: int, max_steps: int, deadline: float | None = None,
            timeout: float | None = None):
    """Yield (start, steps, counts, reads) per chunk until the guest ends.

    ``deadline`` (a :func:`time.monotonic` time) ends the run with
    :class:`~.machine.TimeLimitExceeded` once passed, looked at every
    :data:`CLOCK_STEPS` steps."""
    import time

    reads = m.reads
    look_at = len(reads) + CLOCK_READS
    while True:
        start = h.state()
        counts = [0] * len(CLASSES)
        first_read = len(reads)
        n = 0
        while n < chunk_steps and h.end is None:
            if h.step >= max_steps:
                raise M.StepLimitExceeded(max_steps, pc=h.pc, insn=m.peek_insn(h.pc), step=h.step)
            # a write ecall reads its whole buffer in one step: the words read count toward the next look too
            if deadline is not None and (not h.step % CLOCK_STEPS or len(reads) > look_at):
                look_at = len(reads) + CLOCK_READS
                if time.monotonic() > deadline:
                    raise M.TimeLimitExceeded(timeout, pc=h.pc, insn=m.peek_insn(h.pc), step=h.step)
            step(h, m, counts)
            n += 1
        yield start, n, counts, first_read
        if h.end is not None:
            return


def run(program: Program, input_bytes: bytes = b"", chunk_steps: int = 1 << 18, max_steps: int = M.DEFAULT_MAX_STEPS,
        log_ops: bool = False, log_pcs: bool = False, deadline: float | None = None, timeout: float | None = None,
        max_output: int = M.DEFAULT_MAX_OUTPUT):
    """Run a program from its entry point.

    Returns a dict: traces (list of EmuTrace), counts (n_chunks x classes),
    steps, exit_code, end_reason, stdout, pub_outs, and the port (whose
    ``ops``/``pcs`` logs are filled when requested).  A failure raises a
    :class:`~.machine.GuestError` holding the output so far.
    """
    import numpy as np

    regions = M.build_regions(program, len(input_bytes), input_bytes)
    h = Hart(entry_state(program))
    h.tohost, h.rvc, h.max_output = program.tohost, program.isa != "rv64ima", max_output
    port = LivePort(regions, log_ops, log_pcs, program.fetch)
    traces, table = [], []
    try:
        for start, n, counts, first_read in _chunks(h, port, chunk_steps, max_steps, deadline, timeout):
            reads = np.array(port.reads[first_read:], dtype=np.uint64)
            del port.reads[first_read:]
            traces.append(EmuTrace(len(traces), start, n, reads, h.end is not None))
            table.append(counts)
    except M.GuestError as e:
        raise M.with_output(M.explain(e, regions, program.symbols, program.isa), h.stdout, [(i, port.peek(M.OUTPUT_ADDR + 4 * i, 4)) for i in range(M.N_OUTPUTS)])
    pub_outs = [(i, port.peek(M.OUTPUT_ADDR + 4 * i, 4)) for i in range(M.N_OUTPUTS)]
    return {
        "traces": traces, "counts": np.array(table, dtype=np.int64).reshape(-1, len(CLASSES)),
        "steps": h.step, "exit_code": h.end.code, "end_reason": h.end.reason,
        "stdout": bytes(h.stdout), "pub_outs": pub_outs, "port": port,
    }


def witness_step(h: Hart, m: _Port, counts: list[int]) -> tuple[int, ...]:
    """Execute one step and return its witness row (the columns of
    :data:`hetflow.executors.emulator.witness.COLUMNS`), as unsigned ints."""
    pc, at, a7, before = h.pc, h.step, h.x[17], tuple(h.x)
    m.access = [0, 0, 0, 0, 0]
    step(h, m, counts)
    if h.insn is None:
        op, d = -2, None
    else:
        d = decode_insn(h.insn) if h.rvc or h.insn & 3 == 3 else None
        op = -1 if d is None else d.op
    use = operand_use(op) if op >= 0 else 0
    trapped = h.trap >= 0
    rd = 0
    if not trapped and use & USE_RD:
        rd = d.rd
    elif not trapped and op == _ECALL and a7 == M.SYS_WRITE:
        rd = 10
    access = [0, 0, 0, 0, 0] if trapped else m.access
    return (at, pc, -1 if h.insn is None else h.insn, op,
            _CLASS_INDEX[TABLE[op].cls] if op >= 0 else _SYSTEM, rd, h.x[rd],
            before[d.rs1] if use & USE_RS1 else 0, before[d.rs2] if use & USE_RS2 else 0,
            *access, h.trap, h.pc)


def replay_chunk(program: Program, trace: EmuTrace, input_size: int = 0,
                 log_ops: bool = False, log_pcs: bool = False, witness: bool = False):
    """Re-execute one chunk from its min trace alone.

    Returns ``(end_state, counts, port)``; raises EmulatorError if the
    chunk does not consume exactly its recorded reads or does not end
    where the trace says it ends.  With ``witness=True`` the port's
    ``rows`` holds one witness row per step.
    """
    regions = M.build_regions(program, input_size)
    h = Hart(trace.start_state)
    h.tohost, h.rvc = program.tohost, program.isa != "rv64ima"
    port = ReplayPort(regions, trace.mem_reads, log_ops, log_pcs, program.fetch)
    counts = [0] * len(CLASSES)
    port.rows = [] if witness else None
    for _ in range(trace.steps):
        if h.end is not None:
            raise M.EmulatorError(f"chunk {trace.chunk_id}: guest ended before the chunk's {trace.steps} steps")
        if witness:
            port.rows.append(witness_step(h, port, counts))
        else:
            step(h, port, counts)
    if port.pos != len(port.reads):
        raise M.EmulatorError(f"chunk {trace.chunk_id}: consumed {port.pos} of {len(port.reads)} recorded reads")
    if (h.end is not None) != trace.end:
        raise M.EmulatorError(f"chunk {trace.chunk_id}: end flag mismatch (replay ended: {h.end is not None})")
    return h.state(), counts, port
