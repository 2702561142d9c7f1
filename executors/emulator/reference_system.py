"""The reference interpreter's semantics of the A extension (LR/SC and the
AMOs), the fences, the system instructions (``ecall``, ``ebreak``,
``mret``) and Zicsr: each registered in
:data:`hetflow.executors.emulator.reference.SEMANTICS` like the integer
ops there, one small function per instruction.  Importing
:mod:`.reference` registers them.
"""

from __future__ import annotations

from . import machine as M
from .elf import PERM_R, PERM_W
from .isa import BY_NAME, sign_extend
from .ports import MASK64, Trap
from .reference_hart import SEMANTICS, End, Hart, after_store, semantics

__all__ = ["csr_read", "csr_write"]


# A: load-reserved / store-conditional and the AMOs (naturally aligned only)

_AMO = {
    "amoswap": lambda old, src: src,
    "amoadd": lambda old, src: old + src,
    "amoxor": lambda old, src: old ^ src,
    "amoand": lambda old, src: old & src,
    "amoor": lambda old, src: old | src,
    "amomin": lambda old, src: min(old, src),     # on sign-extended values
    "amomax": lambda old, src: max(old, src),
    "amominu": lambda old, src: min(old, src),    # on zero-extended values
    "amomaxu": lambda old, src: max(old, src),
}


def _atomic_width(name: str) -> int:
    return 4 if name.endswith(".w") else 8


def _amo(name):
    op, width = name.split(".")[0], _atomic_width(name)
    fn, signed = _AMO[op], op in ("amomin", "amomax", "amoswap", "amoadd", "amoxor", "amoand", "amoor")

    def run_amo(h, m, d):
        addr = h.x[d.rs1]
        if addr & (width - 1):
            raise Trap(6, addr)
        old = m.load(addr, width, fault=7, perm=PERM_R | PERM_W)
        src = h.x[d.rs2] & ((1 << (8 * width)) - 1)
        if signed:
            old_v, src_v = sign_extend(old, 8 * width), sign_extend(src, 8 * width)
        else:
            old_v, src_v = old, src
        new = fn(old_v, src_v) & ((1 << (8 * width)) - 1)
        m.store(addr, width, new)
        h.write(d.rd, sign_extend(old, 8 * width))
        after_store(h, addr, width, new)
    SEMANTICS[name] = run_amo


def _lr(name):
    width = _atomic_width(name)

    def fn(h, m, d):
        addr = h.x[d.rs1]
        if addr & (width - 1):
            raise Trap(4, addr)
        v = m.load(addr, width)
        h.reservation = addr
        h.write(d.rd, sign_extend(v, 8 * width))
    SEMANTICS[name] = fn


def _sc(name):
    width = _atomic_width(name)

    def fn(h, m, d):
        addr = h.x[d.rs1]
        if addr & (width - 1):
            raise Trap(6, addr)
        if m.region(addr, width, PERM_W) is None:
            raise Trap(7, addr)
        # "SC.W conditionally writes a word in rs2 to the address in rs1: the
        # SC.W succeeds only if the reservation is still valid ... If the
        # SC.W succeeds, the instruction writes the word in rs2 to memory,
        # and it writes zero to rd. If the SC.W fails, the instruction does
        # not write to memory, and it writes a nonzero value to rd.
        # Regardless of success or failure, executing an SC.W instruction
        # invalidates any reservation held by this hart."
        ok = h.reservation == addr
        h.reservation = -1
        if ok:
            value = h.x[d.rs2] & ((1 << (8 * width)) - 1)
            m.store(addr, width, value)
            after_store(h, addr, width, value)
        h.write(d.rd, 0 if ok else 1)
    SEMANTICS[name] = fn


for _n in list(BY_NAME):
    if _n.startswith("amo"):
        _amo(_n)
    elif _n.startswith("lr."):
        _lr(_n)
    elif _n.startswith("sc."):
        _sc(_n)


# fences, system

@semantics("fence", "fence.i", "wfi")
def _nop(h, m, d):
    # fence.i: fetches always read current memory, so stores are already visible
    pass


@semantics("ecall")
def _ecall(h, m, d):
    a7 = h.x[17]
    if a7 == M.SYS_EXIT:
        raise End("exit", h.x[10])
    if a7 == M.SYS_WRITE:
        fd, buf, n = h.x[10], h.x[11], h.x[12]
        if fd not in (1, 2):
            h.write(10, -9)
            return
        data = m.read_buffer(buf, n) if n < (1 << 32) else None
        if data is None:
            h.write(10, -14)
            return
        if len(h.stdout) + len(data) > h.max_output:
            raise M.OutputLimitExceeded(h.max_output, len(data), pc=h.pc, insn=h.insn, step=h.step)
        h.stdout += data
        h.write(10, n)
        return
    raise Trap(8 if h.priv == M.PRIV_U else 11, 0)


@semantics("ebreak")
def _ebreak(h, m, d):
    raise Trap(3, h.pc)


@semantics("mret")
def _mret(h, m, d):
    if h.priv != M.PRIV_M:
        raise Trap(2, h.insn)
    st = h.csr["mstatus"]
    mpp = (st >> 11) & 3
    st = (st & ~M.MSTATUS_MIE) | (M.MSTATUS_MIE if st & M.MSTATUS_MPIE else 0)
    st |= M.MSTATUS_MPIE
    st &= ~M.MSTATUS_MPP                          # MPP := U, the least-privileged mode
    if mpp != M.PRIV_M:
        st &= ~M.MSTATUS_MPRV
    h.csr["mstatus"] = st
    h.priv = mpp
    h.npc = h.csr["mepc"]


# Zicsr

_ZERO_CSRS = {0x302, 0x303, 0x344, 0x180, 0x306, 0x30A, 0x320, *range(0x3A0, 0x3F0), *range(0x323, 0x340),
              *range(0xB03, 0xB20)}
_COUNTERS = {0xB00, 0xB02, 0xC00, 0xC01, 0xC02}
_CONST_CSRS = {0x301: M.MISA, 0xF11: 0, 0xF12: M.ARCH_ID_ZISK, 0xF13: 0, 0xF14: 0, 0xF15: 0,
               **{c: 0 for c in range(0xC03, 0xC20)}}
_STATE_CSRS = {0x300: "mstatus", 0x305: "mtvec", 0x341: "mepc", 0x342: "mcause", 0x343: "mtval",
               0x340: "mscratch", 0x304: "mie"}


def csr_read(h: Hart, csr: int) -> int:
    if csr in _STATE_CSRS:
        v = h.csr[_STATE_CSRS[csr]]
        return v | M.MSTATUS_UXL64 if csr == 0x300 else v
    if csr in _COUNTERS:
        return h.step
    if csr in _CONST_CSRS:
        return _CONST_CSRS[csr]
    return 0


def csr_write(h: Hart, csr: int, v: int) -> None:
    v &= MASK64
    name = _STATE_CSRS.get(csr)
    if name == "mstatus":
        v &= M.MSTATUS_WMASK
        if (v >> 11) & 3 in (1, 2):                # WARL: no S-mode; keep MPP legal
            v &= ~M.MSTATUS_MPP
    elif name == "mtvec":
        v &= ~2                                    # MODE 0 (direct) or 1 (vectored)
    elif name == "mepc":
        v &= ~1                                    # "mepc[0] is always zero" (IALIGN = 16)
    elif name == "mie":
        v &= M.MIE_WMASK
    if name is not None:
        h.csr[name] = v
    # every other accepted CSR ignores writes (read-only-zero WARL or counters)


def _csr_access(h: Hart, csr: int, writes: bool) -> None:
    known = csr in _STATE_CSRS or csr in _ZERO_CSRS or csr in _COUNTERS or csr in _CONST_CSRS
    if not known or (csr >> 8) & 3 > h.priv or (writes and csr >> 10 == 3):
        raise Trap(2, h.insn)


def _csr(name):
    kind, imm = name[3:5], name.endswith("i")     # rw / rs / rc

    def fn(h, m, d):
        src = d.rs1 if imm else h.x[d.rs1]
        writes = kind == "rw" or d.rs1 != 0
        _csr_access(h, d.imm, writes)
        old = csr_read(h, d.imm) if (kind != "rw" or d.rd != 0) else 0
        if writes:
            new = src if kind == "rw" else (old | src if kind == "rs" else old & ~src)
            csr_write(h, d.imm, new)
        h.write(d.rd, old)
    SEMANTICS[name] = fn


for _n in ("csrrw", "csrrs", "csrrc", "csrrwi", "csrrsi", "csrrci"):
    _csr(_n)

assert set(SEMANTICS) == set(BY_NAME), set(BY_NAME) - set(SEMANTICS)
