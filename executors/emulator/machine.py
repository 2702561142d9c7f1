"""The machine both backends emulate: memory map, CSRs, traps, guest ABI.

Memory map (addresses as in ZisK where ZisK has one)
----------------------------------------------------
==============================  =====  =====================================
0x4000_0000  INPUT_ADDR         r--    u64 little-endian length n, then the
                                       n input bytes (read-only, sized to fit)
ELF PT_LOAD segments            p_flags  the program (link it at 0x8000_0000)
0xA000_0000  RAM_ADDR           rw-    RAM_SIZE bytes of zeroed RAM
0xA000_0200  UART_ADDR                 a byte stored here is captured output
0xA001_0000  OUTPUT_ADDR               public outputs: u32 at OUTPUT_ADDR+4*i
RAM_ADDR + RAM_SIZE                    initial sp (the stack grows down)
==============================  =====  =====================================

Every region is 8-byte aligned in base and size (ELF segments are widened
to whole 8-byte words); segments that collide after widening, or with the
fixed regions, are an :class:`~hetflow.executors.emulator.elf.ElfError`.
An access is allowed when all its bytes lie in one region with the needed
permission (r for loads, w for stores, r+w for AMOs, and for fetches
what the fetch protection below asks); otherwise it is an access fault.
Misaligned loads and stores are performed (no trap); LR/SC and AMOs must
be naturally aligned.

Instructions (RV64IMAC)
-----------------------
An instruction is 2 or 4 bytes: a 16-bit parcel whose low bits are not
11 is a compressed instruction, otherwise a second parcel follows.  pc is
always even (IALIGN = 16), so no jump or branch can raise
instruction-address-misaligned, and a 4-byte instruction may sit at any
even address, across an 8-byte word or from one region into the next:
each parcel is fetched (and may fault) on its own, and an access fault
on the second names pc + 2 in mtval while mepc names pc.

Fetch protection
----------------
By the privileged ISA, a machine-mode hart without PMP may fetch from any
memory.  A program runs under one of two protections
(:attr:`~hetflow.executors.emulator.elf.Program.fetch`):

* ``executable`` (the default): only ELF segments with PF_X may be
  fetched from; a jump into data, the stack or the input is an
  instruction access fault, which catches wild jumps early.
* ``any``: every mapped region may be fetched from, as the ISA has it
  (code copied to RAM at run time, a trampoline on the stack).

Memory modes
------------
A program's :attr:`~hetflow.executors.emulator.elf.Program.memory` is one
of two:

* ``protected`` (the default): each region has the permissions in the
  table above (ELF segments their p_flags), under the fetch protection
  the program asked for.
* ``flat``: every mapped region may be fetched from, loaded from and
  stored to (its regions all get r and w, and the fetch protection is
  ``any``), as a machine-mode hart without PMP sees memory.  This is what
  the official riscv-tests assume (``rv64uc-p-rvc`` stores into its code
  segment, ``rv64ui-p-fence_i`` runs code it writes).  Unmapped addresses,
  the stack's guard included, still fault.  A code segment made writable
  is *writable code*: its fetches are recorded reads (below), as RAM's are
  under fetch protection ``any``.

Registers at the entry point: all zero except sp = STACK_TOP,
a0 = INPUT_ADDR, a1 = OUTPUT_ADDR (ZisK's BIOS passes the same a0/a1).
The hart starts in M-mode.

Guest ABI: how a run ends and what it emits
-------------------------------------------
* ``ecall`` with a7 = 93 (exit): the run ends, exit code = a0.
* ``ecall`` with a7 = 64 (write): fd = a0, buf = a1, len = a2.  For fd 1
  or 2 the bytes are appended to the captured output and a0 = len; for
  another fd a0 = -9 (EBADF); for a buffer outside readable memory
  a0 = -14 (EFAULT).  The buffer's words count as memory reads.
* any other ``ecall`` traps to mtvec (mcause 8 from U-mode, 11 from M).
* a store to the ``tohost`` symbol's address (the ISA test convention)
  of a nonzero value v ends the run: exit code v >> 1 when v is odd
  (1 = pass, (n << 1) | 1 = test n failed), else v itself.
* a byte store to UART_ADDR appends that byte to the captured output.
* the captured output holds at most ``max_output`` bytes (default
  :data:`DEFAULT_MAX_OUTPUT`, 16 MiB): a write or UART store that would
  take it past them does not run, and the run fails with
  :class:`OutputLimitExceeded` at that instruction, on every backend.
* public outputs: at the end, pub_outs[i] = the u32 at OUTPUT_ADDR + 4*i,
  i < 64 (ZisK's layout; no ecall involved).
* a trap taken while mtvec = 0 has no handler: the run fails with a
  :class:`GuestTrap` naming the cause, pc and instruction word; the pc
  is named as ``function+offset`` too where the ELF's ``.symtab`` has a
  code symbol that holds it (``pc 0x80000124 (main+0x24)``).
* ``max_steps`` steps without an end (default :data:`DEFAULT_MAX_STEPS`,
  2^28): :class:`StepLimitExceeded`; a wall-clock ``timeout`` passed:
  :class:`TimeLimitExceeded`.  Every :class:`GuestError` holds the
  guest's ``stdout`` and ``pub_outs`` as they were when it failed.

Steps and counters
------------------
A *step* is one instruction slot: an instruction that completes, or one
that traps (the trap is its effect).  ``cycle``, ``time`` and ``instret``
(and ``mcycle``/``minstret``, whose writes are ignored) all read the step
index: the number of steps before the reading instruction.

CSRs
----
mstatus (MIE, MPIE, MPP, MPRV writable; UXL reads 2), misa (RV64IMACU,
read-only), mhartid/mvendorid/mimpid = 0, marchid = 0xFFFEEEE (ZisK's
ARCH_ID, so ZisK guests write their outputs to OUTPUT_ADDR), mtvec (BASE
plus MODE bit 0; exceptions go to BASE), mepc (bit 0 reads 0), mcause,
mtval, mscratch, mie (MSIE/MTIE/MEIE).  medeleg, mideleg, mip, satp,
pmpcfg*, pmpaddr*, mcounteren, mcountinhibit, menvcfg, mhpm* are accepted
and read 0 (M/U harts have nothing to delegate, no paging, no PMP
entries; no interrupt ever becomes pending).  An unknown CSR, a write to
a read-only CSR, or a CSR above the current privilege is an illegal
instruction.  Only the "live" CSRs (CSR_STATE) are part of a chunk's
start state.

Self-modifying code
-------------------
Both backends fetch every instruction from current memory, so a store is
visible to the very next fetch; ``fence.i`` is therefore a no-op, which
the spec allows (fetches may observe stores earlier than FENCE.I
guarantees).  For min traces, an instruction fetched from a *writable*
region counts as a memory read (the aligned 8-byte word holding it is
recorded: both words when a 4-byte instruction spans two); so does a
fetch from any region that is not a read-only executable segment of the
program (the input, or RAM under fetch protection ``any``).  Fetches from
read-only executable segments come from the program itself.
"""

from __future__ import annotations

from collections.abc import Callable

from .elf import (FETCH_MODES, INPUT_ADDR, N_OUTPUTS, OUTPUT_ADDR, PERM_R, PERM_W, PERM_X, RAM_ADDR,
                  RAM_SIZE, STACK_GUARD, STACK_TOP, UART_ADDR, ElfError, Program, check_places, stack_guard,
                  symbol_at)
from .tuples import FieldTuple, getters

__all__ = [
    "INPUT_ADDR", "RAM_ADDR", "RAM_SIZE", "UART_ADDR", "OUTPUT_ADDR", "N_OUTPUTS", "STACK_TOP",
    "ARCH_ID_ZISK", "MISA", "CSR_STATE", "Region", "build_regions", "initial_state",
    "EmulatorError", "GuestError", "GuestTrap", "StepLimitExceeded", "TimeLimitExceeded", "CAUSES",
    "OutputLimitExceeded", "DEFAULT_MAX_STEPS", "DEFAULT_MAX_OUTPUT", "MAX_OUTPUT_LIMIT", "with_output", "StackOverflow", "STACK_GUARD", "stack_guard", "explain",
    "SYS_EXIT", "SYS_WRITE", "fetch_permission",
]


#: the step limit of a run that sets none, everywhere: ``execute``, manifests (the schema's default) and
#: ``hetflow emulate``; a guest that never exits fails within a second on native, and a witness bound from
#: it (128 B a step) stays near a large machine's memory instead of a terabyte
DEFAULT_MAX_STEPS = 1 << 28

#: the captured output's bound where a run sets none: it is held in memory, printed whole and kept in a
#: pipeline run's record, and a guest that prints in a loop reaches the step limit with terabytes written
DEFAULT_MAX_OUTPUT = 1 << 24
#: the largest bound a run may set (the guest's output is one bytes object)
MAX_OUTPUT_LIMIT = 1 << 30

SYS_WRITE = 64
SYS_EXIT = 93

ARCH_ID_ZISK = 0x0FFFEEEE
#: MXL=2 (64-bit) and the extensions A, C, I, M, U
MISA = (2 << 62) | (1 << 0) | (1 << 2) | (1 << 8) | (1 << 12) | (1 << 20)

PRIV_U, PRIV_M = 0, 3

#: the CSRs that are architectural state (everything else is constant)
CSR_STATE = ("mstatus", "mtvec", "mepc", "mcause", "mtval", "mscratch", "mie")

MSTATUS_MIE = 1 << 3
MSTATUS_MPIE = 1 << 7
MSTATUS_MPP = 3 << 11
MSTATUS_MPRV = 1 << 17
MSTATUS_WMASK = MSTATUS_MIE | MSTATUS_MPIE | MSTATUS_MPP | MSTATUS_MPRV
MSTATUS_UXL64 = 2 << 32
MIE_WMASK = (1 << 3) | (1 << 7) | (1 << 11)

CAUSES = {
    0: "instruction address misaligned",
    1: "instruction access fault",
    2: "illegal instruction",
    3: "breakpoint",
    4: "load address misaligned",
    5: "load access fault",
    6: "store/AMO address misaligned",
    7: "store/AMO access fault",
    8: "environment call from U-mode",
    11: "environment call from M-mode",
}


class EmulatorError(Exception):
    """Base class of the emulator's errors."""


class GuestError(EmulatorError):
    """The guest program failed: ``pc``, instruction word and step say where."""

    def __init__(self, message: str, *, pc: int, insn: int | None, step: int, symbol: str | None = None):
        self.pc, self.insn, self.step = pc, insn, step
        self.reason = message
        #: pc as ``function+offset`` (:func:`~.elf.symbol_at`), or None where no symbol holds it
        self.symbol = symbol
        # what the guest had emitted when it failed (the backend's run fills these in): a guest's last
        # printf is often the reason it failed
        self.stdout: bytes = b""
        self.pub_outs: list[tuple[int, int]] = []
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"pc {self.pc:#x}" + (f" ({self.symbol})" if self.symbol else "")
        where += f", instruction {self.insn:#010x}" if self.insn is not None else ""
        return f"{self.reason} at {where} (step {self.step})"


class GuestTrap(GuestError):
    """A trap with no handler (mtvec = 0)."""

    def __init__(self, cause: int, tval: int, *, pc: int, insn: int | None, step: int):
        self.cause, self.tval = cause, tval
        super().__init__(f"unhandled trap: {CAUSES.get(cause, cause)} (mcause {cause}, mtval {tval:#x})",
                         pc=pc, insn=insn, step=step)


class StepLimitExceeded(GuestError):
    def __init__(self, max_steps: int, *, pc: int, insn: int | None, step: int):
        self.max_steps = max_steps
        super().__init__(f"step limit reached: {max_steps} steps without an exit", pc=pc, insn=insn, step=step)


class OutputLimitExceeded(GuestError):
    """A write (or UART store) that would take the captured output past ``max_output`` bytes: it did not run."""

    def __init__(self, max_output: int, wanted: int, *, pc: int, insn: int | None, step: int):
        self.max_output, self.wanted = max_output, wanted
        super().__init__(f"output limit reached: a write of {wanted} more bytes would take the guest's output past "
                         f"{max_output} bytes", pc=pc, insn=insn, step=step)


class TimeLimitExceeded(GuestError):
    """The run's wall-clock ``timeout`` passed before the guest ended."""

    def __init__(self, timeout: float, *, pc: int, insn: int | None, step: int, symbol: str | None = None):
        self.timeout = timeout
        super().__init__(f"time limit reached: {timeout:g} s without an exit, {step} steps done", pc=pc, insn=insn,
                         step=step, symbol=symbol)


class StackOverflow(GuestTrap):
    """An access into the stack's guard: the stack grew past the size the program was linked with."""

    def __init__(self, trap: GuestTrap, guard: tuple[int, int]):
        self.cause, self.tval, self.guard = trap.cause, trap.tval, guard
        what = "load" if trap.cause == 5 else "store"
        GuestError.__init__(self, f"stack overflow: {what} at {trap.tval:#x} in the stack's guard "
                                  f"[{guard[0]:#x}, {guard[1]:#x}) (stack {guard[1]:#x}-{STACK_TOP:#x}; link with a "
                                  f"larger __stack_size)", pc=trap.pc, insn=trap.insn, step=trap.step)


def explain(e: GuestError, regions, symbols=(), isa: str = "rv64imac") -> GuestError:
    """``e``, or the :class:`StackOverflow` it is when it is an access fault in the stack's guard, with its
    pc named by the program's ``symbols`` (:attr:`~.elf.Program.symbols`) where one holds it, and an
    illegal 16-bit parcel under ``isa`` rv64ima said to be compressed code.

    Every backend's run passes its failure through here, so their messages are the same text.
    """
    # the all-zero parcel is illegal in every ISA (running into zeroed memory), so it is not blamed on the ISA
    if (type(e) is GuestTrap and e.cause == 2 and isa == "rv64ima" and e.insn is not None and e.insn & 3 != 3
            and e.insn & 0xFFFF):
        e.reason += ("; compressed instructions are not in rv64ima (this 16-bit parcel would be one under "
                     "rv64imac): declare isa rv64imac, or build with -march=rv64ima")
    if type(e) is GuestTrap and e.cause in (5, 7):
        for a, b in zip(regions, regions[1:]):
            if b.name == "stack" and a.end <= e.tval < b.base:
                e = StackOverflow(e, (a.end, b.base))
                break
    e.symbol = symbol_at(symbols, e.pc) if symbols else None
    e.args = (e._text(),)
    return e


def with_output(e: GuestError, stdout: bytes, pub_outs) -> GuestError:
    """``e`` holding what the guest had printed and its public outputs when it failed."""
    e.stdout, e.pub_outs = bytes(stdout), [(int(i), int(v)) for i, v in pub_outs]
    return e


# a FieldTuple, not a namedtuple: ``hetflow emulate`` starts without compiling a namedtuple's __new__
class Region(FieldTuple):
    # name: str; base: int; size: int; perm: int; data: bytes, the initial contents, len == size
    __slots__ = ()
    _fields = ("name", "base", "size", "perm", "data")
    name, base, size, perm, data = getters(5)

    def __new__(cls, name, base, size, perm, data):
        return tuple.__new__(cls, (name, base, size, perm, data))

    @property
    def end(self) -> int:
        return self.base + self.size


def _down8(x: int) -> int:
    return x & ~7


def _up8(x: int) -> int:
    return (x + 7) & ~7


def build_regions(program: Program, input_size: int, input_bytes: bytes | None = None) -> tuple[Region, ...]:
    """The memory regions of a run, sorted by address.

    ``input_bytes`` may be omitted (re-execution needs only the sizes and
    the read-only program, never the writable contents).
    """
    # (name, base, size, perm, its bytes when asked): the places are checked before any region's bytes are made,
    # so a segment of a GiB that collides costs nothing
    planned: list[tuple[str, int, int, int, Callable[[], bytes]]] = []
    for i, seg in enumerate(program.segments):
        lo, hi = _down8(seg.vaddr), _up8(seg.end)
        planned.append((f"segment{i}[{seg.perm_text()}]", lo, hi - lo, seg.perm,
                        lambda seg=seg, lo=lo, hi=hi: bytes(seg.vaddr - lo) + seg.data + bytes(hi - seg.end)))
    if input_bytes is None:
        input_bytes = bytes(input_size)
    blob = len(input_bytes).to_bytes(8, "little") + input_bytes
    blob += bytes(_up8(len(blob)) - len(blob))
    planned.append(("input", INPUT_ADDR, len(blob), PERM_R, lambda: blob))
    guard = stack_guard(program)
    if guard is None:
        planned.append(("ram", RAM_ADDR, RAM_SIZE, PERM_R | PERM_W, lambda: bytes(RAM_SIZE)))
    else:                     # RAM in two, with the guard between them mapped to nothing
        low, high = guard
        planned.append(("ram", RAM_ADDR, low - RAM_ADDR, PERM_R | PERM_W, lambda: bytes(low - RAM_ADDR)))
        planned.append(("stack", high, STACK_TOP - high, PERM_R | PERM_W, lambda: bytes(STACK_TOP - high)))
    if program.memory == "flat" and program.fetch != "any":
        # every backend takes the fetch permission from Program.fetch; load_elf sets "any" for flat
        raise ValueError(f"{program.name}: flat memory fetches from anywhere mapped; its fetch protection must "
                         f"be 'any', not {program.fetch!r}")
    planned.sort(key=lambda r: r[1])
    check_places(program.name, [r[:3] for r in planned])
    # "Memory modes": flat memory is all of it loadable and storable
    extra = PERM_R | PERM_W if program.memory == "flat" else 0
    regions = [Region(name, base, size, perm | extra, make()) for name, base, size, perm, make in planned]
    return tuple(regions)


def fetch_permission(fetch: str) -> int:
    """The permission a region needs to be fetched from under a fetch
    protection: PERM_X, or nothing beyond being mapped.

    >>> fetch_permission("executable") == PERM_X, fetch_permission("any")
    (True, 0)
    """
    if fetch not in FETCH_MODES:
        raise ValueError(f"unknown fetch protection {fetch!r}; expected one of {', '.join(FETCH_MODES)}")
    return PERM_X if fetch == "executable" else 0


def initial_state(program: Program):
    """(pc, regs) at the entry point."""
    regs = [0] * 32
    regs[2] = STACK_TOP
    regs[10] = INPUT_ADDR
    regs[11] = OUTPUT_ADDR
    return program.entry, regs

