"""The reference interpreter's hart and its table of semantics: the
architectural state (:class:`Hart`), how a run ends (:class:`End`), the
``SEMANTICS`` table with its ``@semantics("name")`` decorator, and what a
store does besides writing memory (:func:`after_store`).

:mod:`.reference_base` (RV64IM) and :mod:`.reference_system` (A, fences,
system instructions, Zicsr) register their functions here, and
:mod:`.reference` steps a hart through the table, so the dependency runs
one way: the step loop imports the semantics, which import the hart.
"""

from __future__ import annotations

from collections.abc import Callable

from . import machine as M
from .elf import Program
from .isa import BY_NAME, Decoded, sign_extend
from .output import EmuTraceStart
from .ports import MASK64, _Port

__all__ = ["Hart", "End", "SEMANTICS", "semantics", "entry_state", "after_store", "s32", "s64"]


def s64(v: int) -> int:
    return sign_extend(v, 64)


def s32(v: int) -> int:
    return sign_extend(v, 32)


class End(Exception):
    """The guest ended the run (exit ecall or tohost write)."""

    def __init__(self, reason: str, code: int):
        self.reason, self.code = reason, code


class Hart:
    def __init__(self, start: EmuTraceStart):
        self.pc = start.pc
        self.x = list(start.regs)
        self.step = start.step
        self.priv = start.priv
        self.csr = dict(zip(M.CSR_STATE, start.csrs))
        self.reservation = start.reservation
        self.npc = 0
        self.next = 0                  # pc + the current instruction's size: the link address
        self.insn: int | None = None
        self.end: End | None = None
        self.stdout = bytearray()
        self.max_output = M.MAX_OUTPUT_LIMIT       # a main run sets its own; a replay's chunk stays within it
        self.tohost: int | None = None
        self.trap = -1                 # mcause of the trap the last step took, -1 = none
        self.rvc = True                # False under rv64ima: a 16-bit parcel is an illegal instruction

    def state(self) -> EmuTraceStart:
        return EmuTraceStart(self.pc, self.step, self.priv, tuple(self.x),
                             tuple(self.csr[n] for n in M.CSR_STATE), self.reservation)

    def write(self, rd: int, value: int) -> None:
        """x[rd] = value, truncated to 64 bits; writes to x0 are discarded."""
        if rd:
            self.x[rd] = value & MASK64


def entry_state(program: Program) -> EmuTraceStart:
    pc, regs = M.initial_state(program)
    return EmuTraceStart(pc, 0, M.PRIV_M, tuple(regs), tuple(0 for _ in M.CSR_STATE), -1)


# --------------------------------------------------------------------------
# semantics: one function per instruction

Semantics = Callable[[Hart, _Port, Decoded], None]
SEMANTICS: dict[str, Semantics] = {}


def semantics(*names: str):
    def register(fn):
        for n in names:
            assert n in BY_NAME, n
            SEMANTICS[n] = fn
        return fn
    return register


def after_store(h: Hart, addr: int, size: int, value: int) -> None:
    """What a store does beyond memory: a byte to the UART is the guest's
    stdout, a nonzero word to ``tohost`` ends the run."""
    if addr == M.UART_ADDR and size == 1:
        if len(h.stdout) >= h.max_output:
            raise M.OutputLimitExceeded(h.max_output, 1, pc=h.pc, insn=h.insn, step=h.step)
        h.stdout.append(value)
    if h.tohost is not None and addr == h.tohost and value != 0:
        raise End("tohost", value >> 1 if value & 1 else value)
