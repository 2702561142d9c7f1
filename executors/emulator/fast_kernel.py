"""The ``fast`` backend's compiled interpreter: numba kernels.

:func:`_run` executes up to ``budget`` steps of the machine on the flat
state arrays of :mod:`.layout` (the algorithm is described in
:mod:`.fast`, which runs it).  It is one function of about 700 lines on
purpose: the interpreter's step is its hot path (185 M steps/s with min
traces, the median of 20 benchmark programs; SHA-256 of 1 MiB runs 92 M
steps in about 0.3 s), and numba keeps a step's state in registers only
inside one function; the helpers it calls (``_alu``, ``_find``,
``_decode``, the CSR functions) are inlined or small.  Splitting the step
across functions that numba does not inline would cost a call per step.

Everything here is ``nogil=True`` and ``cache=True``.
"""

from __future__ import annotations

import numba
import numpy as np

from . import machine as M
from .elf import PERM_R, PERM_W, PERM_X
from .isa import BY_NAME, CLASSES, TABLE, compressed_arrays, decode_arrays
# the mode bits, statuses and st indices: compile-time constants in the jitted code
from .layout import (LOG_OPS, LOG_PCS, REC_READS, REPLAY, S_CNEED, S_CODE, S_EINSN, S_END, S_ETVAL, S_ECAUSE,
                     S_MCAUSE, S_MEPC, S_MIE, S_MSCRATCH, S_MSTATUS, S_MTVAL, S_MTVEC, S_NEED, S_PC, S_PRIV, S_RES, S_STEP,
                     ST_BUDGET, ST_END, ST_GROW, ST_REPLAY_EXHAUSTED, ST_TRAP, WITNESS)

__all__ = ["N_WITNESS"]

N_WITNESS = 16
_SLICE = 1 << 18                       # steps per call of the compiled loop (bounds buffer headroom)
assert M.CSR_STATE == ("mstatus", "mtvec", "mepc", "mcause", "mtval", "mscratch", "mie")

# op ids (compile-time constants in the jitted code)
globals().update({"OP_" + n.upper().replace(".", "_"): i for n, i in BY_NAME.items()})
C_ALU, C_MULDIV, C_LOAD, C_STORE, C_BRANCH, C_JUMP, C_SYSTEM = (
    CLASSES.index(c) for c in ("alu", "muldiv", "load", "store", "branch", "jump", "system"))

# fast-path kinds, decode-cache column 7 (0: the op always takes the general step)
K_ALU, K_MULDIV, K_LOAD, K_STORE, K_BRANCH, K_JAL, K_JALR = 1, 2, 3, 4, 5, 6, 7
K_C = 8                                # added to the kind of a compressed instruction
_KIND_CLASS = {K_ALU: "alu", K_MULDIV: "muldiv", K_LOAD: "load", K_STORE: "store", K_BRANCH: "branch",
               K_JAL: "jump", K_JALR: "jump"}

_TAB = decode_arrays()
_CTAB = compressed_arrays()
_F_I, _F_SH6, _F_SH5, _F_S, _F_B, _F_U, _F_J, _F_CSR, _F_CSRI = 1, 2, 3, 4, 5, 6, 7, 8, 9

_MSTATUS_WMASK = M.MSTATUS_WMASK
_MIE_WMASK = M.MIE_WMASK
_UXL64 = M.MSTATUS_UXL64
_MISA_LO = M.MISA & 0xFFFFFFFF          # MISA does not fit a positive int64 literal
_UART = M.UART_ADDR
_ARCH = M.ARCH_ID_ZISK

_jit = numba.njit(nogil=True, cache=True, error_model="numpy")


@_jit
def _sx(v, bits):
    """Sign-extend the low ``bits`` bits of an int64."""
    sh = 64 - bits
    return (v << sh) >> sh


@_jit
def _srl(v, sh):
    return np.int64(np.uint64(v) >> np.uint64(sh))


@_jit
def _ltu(a, b):
    return np.uint64(a) < np.uint64(b)


@_jit
def _mulhu(a, b):
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    ua, ub = np.uint64(a), np.uint64(b)
    a0, a1 = ua & m32, ua >> s32
    b0, b1 = ub & m32, ub >> s32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p01 & m32) + (p10 & m32)
    return np.int64(p11 + (p01 >> s32) + (p10 >> s32) + (mid >> s32))


@_jit
def _divs(a, b, bits):
    """Signed division rounding towards zero; bits = 64 or 32 (inputs sign-extended)."""
    if b == 0:
        return np.int64(-1)
    neg = (a < 0) != (b < 0)
    ua = np.uint64(-a) if a < 0 else np.uint64(a)
    ub = np.uint64(-b) if b < 0 else np.uint64(b)
    q = np.int64(ua // ub)
    return -q if neg else q          # overflow: wraps to the dividend, as the spec says


@_jit
def _rems(a, b, bits):
    if b == 0:
        return a
    return a - b * _divs(a, b, bits)


@_jit
def _divu(a, b):
    if b == 0:
        return np.int64(-1)
    return np.int64(np.uint64(a) // np.uint64(b))


@_jit
def _remu(a, b):
    if b == 0:
        return a
    return np.int64(np.uint64(a) % np.uint64(b))


@numba.njit(inline="always", cache=True)
def _alu(op, a, b, imm, pc):
    """rd's new value for every op that only computes rd from rs1 (a),
    rs2 (b), the immediate and pc: the K_ALU and K_MULDIV ops.

    Both the fast path and the general step call it; ``inline="always"``
    inlines it at numba-IR level into each, so the shared semantics costs
    no call and LLVM turns each copy's equality chain on ``op`` into a
    jump table.
    """
    if op == OP_ADDI:
        return a + imm
    elif op == OP_SLLI:
        return a << imm
    elif op == OP_ADD:
        return a + b
    elif op == OP_ADDIW:
        return _sx(a + imm, 32)
    elif op == OP_SRLIW:
        return _sx(_srl(a & 0xFFFFFFFF, imm), 32)
    elif op == OP_SLLIW:
        return _sx(a << imm, 32)
    elif op == OP_XOR:
        return a ^ b
    elif op == OP_OR:
        return a | b
    elif op == OP_ADDW:
        return _sx(a + b, 32)
    elif op == OP_AND:
        return a & b
    elif op == OP_LUI:
        return imm
    elif op == OP_AUIPC:
        return pc + imm
    elif op == OP_SLTI:
        return np.int64(1) if a < imm else np.int64(0)
    elif op == OP_SLTIU:
        return np.int64(1) if _ltu(a, imm) else np.int64(0)
    elif op == OP_XORI:
        return a ^ imm
    elif op == OP_ORI:
        return a | imm
    elif op == OP_ANDI:
        return a & imm
    elif op == OP_SRLI:
        return _srl(a, imm)
    elif op == OP_SRAI:
        return a >> imm
    elif op == OP_SUB:
        return a - b
    elif op == OP_SLL:
        return a << (b & 63)
    elif op == OP_SLT:
        return np.int64(1) if a < b else np.int64(0)
    elif op == OP_SLTU:
        return np.int64(1) if _ltu(a, b) else np.int64(0)
    elif op == OP_SRL:
        return _srl(a, b & 63)
    elif op == OP_SRA:
        return a >> (b & 63)
    elif op == OP_SRAIW:
        return _sx(a, 32) >> imm
    elif op == OP_SUBW:
        return _sx(a - b, 32)
    elif op == OP_SLLW:
        return _sx(a << (b & 31), 32)
    elif op == OP_SRLW:
        return _sx(_srl(a & 0xFFFFFFFF, b & 31), 32)
    elif op == OP_SRAW:
        return _sx(a, 32) >> (b & 31)
    elif op == OP_MUL:
        return a * b
    elif op == OP_MULH:
        h = _mulhu(a, b)
        if a < 0:
            h -= b
        if b < 0:
            h -= a
        return h
    elif op == OP_MULHSU:
        h = _mulhu(a, b)
        if a < 0:
            h -= b
        return h
    elif op == OP_MULHU:
        return _mulhu(a, b)
    elif op == OP_DIV:
        return _divs(a, b, 64)
    elif op == OP_DIVU:
        return _divu(a, b)
    elif op == OP_REM:
        return _rems(a, b, 64)
    elif op == OP_REMU:
        return _remu(a, b)
    elif op == OP_MULW:
        return _sx(a * b, 32)
    elif op == OP_DIVW:
        return _sx(_divs(_sx(a, 32), _sx(b, 32), 32), 32)
    elif op == OP_DIVUW:
        return _sx(_divu(a & 0xFFFFFFFF, b & 0xFFFFFFFF), 32)
    elif op == OP_REMW:
        return _sx(_rems(_sx(a, 32), _sx(b, 32), 32), 32)
    else:                                    # OP_REMUW
        return _sx(_remu(a & 0xFFFFFFFF, b & 0xFFFFFFFF), 32)


_ALU_OPS = ("lui auipc addi slti sltiu xori ori andi slli srli srai add sub sll slt sltu xor srl sra or and "
            "addiw slliw srliw sraiw addw subw sllw srlw sraw").split()
_MULDIV_OPS = "mul mulh mulhsu mulhu div divu rem remu mulw divw divuw remw remuw".split()


def _kinds() -> np.ndarray:
    """Fast-path kind per op id (0: general step only).  Each kind has one
    counter class, so the fast path's counter index is a constant."""
    kind = np.zeros(len(TABLE), dtype=np.int64)
    for names, k in ((_ALU_OPS, K_ALU), (_MULDIV_OPS, K_MULDIV), ("beq bne blt bge bltu bgeu".split(), K_BRANCH),
                     ("lb lh lw ld lbu lhu lwu".split(), K_LOAD), ("sb sh sw sd".split(), K_STORE),
                     (("jal",), K_JAL), (("jalr",), K_JALR)):
        for name in names:
            kind[BY_NAME[name]] = k
    for k, cls in _KIND_CLASS.items():
        assert {TABLE[i].cls for i in np.flatnonzero(kind == k)} == {cls}, (k, cls)
    return kind


_TAB["kind"] = _kinds()

@_jit
def _find(addr, size, nreg, rbase, rsize):
    for i in range(nreg):
        d = addr - rbase[i]
        if d >= 0 and d <= rsize[i] - size:
            return i
    return -1


@_jit
def _decode(w, match, mask, fmt, order, start, stop, dc, slot, ctab):
    """Fill decode-cache row ``dc[slot]`` = [raw, op, rd, rs1, rs2, imm, size] for the
    instruction w: a 16-bit parcel (looked up in ``ctab``, the compressed table
    decoded for every parcel) or a 32-bit word."""
    dc[slot, 0] = _sx(w, 32)
    if (w & 3) != 3:
        for j in range(5):
            dc[slot, 1 + j] = ctab[w & 0xFFFF, j]
        dc[slot, 6] = 2
        return
    dc[slot, 6] = 4
    dc[slot, 1] = -1
    opc = w & 0x7F
    for k in range(start[opc], stop[opc]):
        i = order[k]
        if (w & mask[i]) == match[i]:
            dc[slot, 1] = i
            break
    dc[slot, 2] = (w >> 7) & 0x1F
    dc[slot, 3] = (w >> 15) & 0x1F
    dc[slot, 4] = (w >> 20) & 0x1F
    f = fmt[dc[slot, 1]] if dc[slot, 1] >= 0 else 0
    imm = np.int64(0)
    if f == _F_I:
        imm = _sx(w >> 20, 12)
    elif f == _F_SH6:
        imm = (w >> 20) & 0x3F
    elif f == _F_SH5:
        imm = (w >> 20) & 0x1F
    elif f == _F_S:
        imm = _sx(((w >> 25) << 5) | ((w >> 7) & 0x1F), 12)
    elif f == _F_B:
        imm = _sx((((w >> 31) & 1) << 12) | (((w >> 7) & 1) << 11) | (((w >> 25) & 0x3F) << 5) | (((w >> 8) & 0xF) << 1), 13)
    elif f == _F_U:
        imm = _sx(w & 0xFFFFF000, 32)
    elif f == _F_J:
        imm = _sx((((w >> 31) & 1) << 20) | (((w >> 12) & 0xFF) << 12) | (((w >> 20) & 1) << 11) | (((w >> 21) & 0x3FF) << 1), 21)
    elif f == _F_CSR or f == _F_CSRI:
        imm = (w >> 20) & 0xFFF
    dc[slot, 5] = imm


@_jit
def _grow(buf, need):
    if need <= buf.shape[0]:
        return buf
    n = max(need, 2 * buf.shape[0] + 16)
    new = np.empty(n, dtype=buf.dtype)
    new[:buf.shape[0]] = buf
    return new


@_jit
def _csr_known(c):
    if c == 0x300 or c == 0x305 or c == 0x341 or c == 0x342 or c == 0x343 or c == 0x340 or c == 0x304:
        return True
    if c == 0x302 or c == 0x303 or c == 0x344 or c == 0x180 or c == 0x306 or c == 0x30A or c == 0x320:
        return True
    if (0x3A0 <= c < 0x3F0) or (0x323 <= c < 0x340) or (0xB03 <= c < 0xB20) or (0xC03 <= c < 0xC20):
        return True
    if c == 0xB00 or c == 0xB02 or c == 0xC00 or c == 0xC01 or c == 0xC02:
        return True
    return c == 0x301 or (0xF11 <= c <= 0xF15)


@_jit
def _csr_read(c, st):
    if c == 0x300:
        return st[S_MSTATUS] | _UXL64
    if c == 0x305:
        return st[S_MTVEC]
    if c == 0x341:
        return st[S_MEPC]
    if c == 0x342:
        return st[S_MCAUSE]
    if c == 0x343:
        return st[S_MTVAL]
    if c == 0x340:
        return st[S_MSCRATCH]
    if c == 0x304:
        return st[S_MIE]
    if c == 0xB00 or c == 0xB02 or c == 0xC00 or c == 0xC01 or c == 0xC02:
        return st[S_STEP]
    if c == 0x301:
        return np.int64(_MISA_LO) | np.int64(-9223372036854775808)   # MXL = 2: bit 63
    if c == 0xF12:
        return np.int64(_ARCH)
    return np.int64(0)


@_jit
def _csr_write(c, v, st):
    if c == 0x300:
        v &= _MSTATUS_WMASK
        mpp = (v >> 11) & 3
        if mpp == 1 or mpp == 2:
            v &= ~(3 << 11)
        st[S_MSTATUS] = v
    elif c == 0x305:
        st[S_MTVEC] = v & ~2
    elif c == 0x341:
        st[S_MEPC] = v & ~1
    elif c == 0x342:
        st[S_MCAUSE] = v
    elif c == 0x343:
        st[S_MTVAL] = v
    elif c == 0x340:
        st[S_MSCRATCH] = v
    elif c == 0x304:
        st[S_MIE] = v & _MIE_WMASK


@_jit
def _run(mem, mem64, mem32, rbase, rsize, roff, rperm, rslot, dc,
         t_match, t_mask, t_fmt, t_cls, t_order, t_start, t_stop,
         regs, st, counts, tohost, budget, mode,
         rbuf, rpos, obuf, opos, hist, cbuf, cpos, t_use, wbuf, wofs, t_kind, ctab, rhslot, xperm):
    nreg = rbase.shape[0]
    scratch = dc.shape[0] - 1               # the decode row of regions without slots of their own
    wit = (mode & WITNESS) != 0
    rec = (mode & REC_READS) != 0
    logops = (mode & LOG_OPS) != 0
    logpcs = (mode & LOG_PCS) != 0
    replay = (mode & REPLAY) != 0
    pc = st[S_PC]
    step = st[S_STEP]
    priv = st[S_PRIV]
    res = st[S_RES]
    step0 = step
    stop = step + budget
    endk = st[S_END]
    status = ST_BUDGET
    fr = 0                                   # region of the last fetch
    # Fast path: a step whose instruction sits in a read-only executable
    # region (its decode-cache row can never go stale) and needs nothing but
    # registers and one aligned-within-a-word access of a data region.  It
    # logs what MO and RH need; witness rows come from the general step
    # alone.  Any other case, or any condition that could trap, print or end
    # the guest, falls through to the general step below before any state
    # has changed.
    quick = not wit
    xb = np.int64(0)                         # read-only executable region: base, last offset, first slot
    xlim = np.int64(-1)
    xslot = np.int64(0)
    dr = 0                                   # region of the last fast load or store
    while step < stop:
        if quick:
            d = pc - xb
            if d >= 0 and d <= xlim:
                # unsigned indices: numba then skips its negative-index wraparound
                us = np.uint64(xslot + (d >> 1))
                k = dc[us, 7]
                if k > 0:                    # a fast-path op (rows start as -1: not decoded yet)
                    if logpcs:               # taken back below if the step leaves the fast path
                        hist[us] += 1
                    urd = np.uint64(dc[us, 2])
                    a = regs[np.uint64(dc[us, 3])]
                    b = regs[np.uint64(dc[us, 4])]
                    imm = np.int64(dc[us, 5])
                    # The hottest kind has a copy per instruction size, so that
                    # pc advances by a constant (no load in the pc chain).
                    if k == K_ALU:
                        regs[urd] = _alu(np.int64(dc[us, 1]), a, b, imm, pc)
                        regs[np.uint64(0)] = 0
                        counts[C_ALU] += 1
                        pc += 4
                        step += 1
                        continue
                    if k == K_ALU + K_C:
                        regs[urd] = _alu(np.int64(dc[us, 1]), a, b, imm, pc)
                        regs[np.uint64(0)] = 0
                        counts[C_ALU] += 1
                        pc += 2
                        step += 1
                        continue
                    # A branch, not a select: the store keeps LLVM from turning
                    # this into a conditional move, which would put the load
                    # of k into the chain of pc values from step to step.
                    ilen = np.int64(4)
                    if k > K_C:
                        k -= K_C
                        ilen = np.int64(2)
                        st[S_NEED] = 0
                    if k == K_BRANCH:
                        op = np.int64(dc[us, 1])
                        if op == OP_BNE:
                            t = a != b
                        elif op == OP_BEQ:
                            t = a == b
                        elif op == OP_BLT:
                            t = a < b
                        elif op == OP_BGE:
                            t = a >= b
                        elif op == OP_BLTU:
                            t = _ltu(a, b)
                        else:
                            t = not _ltu(a, b)
                        counts[C_BRANCH] += 1
                        pc = pc + imm if t else pc + ilen
                        step += 1
                        continue
                    elif k == K_LOAD:
                        op = np.int64(dc[us, 1])
                        addr = a + imm
                        msize = 1 << ((op - OP_LB) & 3) if op < OP_LBU else 1 << (op - OP_LBU)
                        dd = addr - rbase[dr]
                        if not (dd >= 0 and dd <= rsize[dr] - msize and (rperm[dr] & PERM_R) != 0):
                            ri = _find(addr, msize, nreg, rbase, rsize)
                            if ri >= 0 and (rperm[ri] & PERM_R) != 0:
                                dr = ri
                                dd = addr - rbase[dr]
                            else:
                                dd = -1
                        off = roff[dr] + dd
                        sh = off & 7
                        if dd >= 0 and sh + msize <= 8 and not (replay and rpos >= rbuf.shape[0]):
                            if replay:
                                w0 = np.int64(rbuf[np.uint64(rpos)])
                                rpos += 1
                            else:
                                w0 = np.int64(mem64[np.uint64(off >> 3)])
                                if rec:
                                    rbuf[np.uint64(rpos)] = np.uint64(w0)
                                    rpos += 1
                            v = _srl(w0, sh * 8)
                            if op == OP_LD:
                                pass
                            elif op == OP_LW:
                                v = _sx(v, 32)
                            elif op == OP_LBU:
                                v &= 0xFF
                            elif op == OP_LB:
                                v = _sx(v, 8)
                            elif op == OP_LH:
                                v = _sx(v, 16)
                            elif op == OP_LHU:
                                v &= 0xFFFF
                            else:
                                v &= 0xFFFFFFFF
                            regs[urd] = v
                            regs[np.uint64(0)] = 0
                            if logops:
                                obuf[np.uint64(opos)] = addr & ~7
                                obuf[np.uint64(opos + 1)] = step
                                obuf[np.uint64(opos + 2)] = 0
                                opos += 3
                            counts[C_LOAD] += 1
                            pc += ilen
                            step += 1
                            continue
                    elif k == K_STORE:
                        op = np.int64(dc[us, 1])
                        addr = a + imm
                        msize = 1 << (op - OP_SB)
                        dd = addr - rbase[dr]
                        if not (dd >= 0 and dd <= rsize[dr] - msize and (rperm[dr] & PERM_W) != 0):
                            ri = _find(addr, msize, nreg, rbase, rsize)
                            if ri >= 0 and (rperm[ri] & PERM_W) != 0:
                                dr = ri
                                dd = addr - rbase[dr]
                            else:
                                dd = -1
                        off = roff[dr] + dd
                        sh = off & 7
                        if dd >= 0 and sh + msize <= 8 and addr != _UART and addr != tohost:
                            if not replay:
                                if msize == 8:
                                    mem64[np.uint64(off >> 3)] = np.uint64(b)
                                else:
                                    m = ((np.int64(1) << (8 * msize)) - 1) << (8 * sh)
                                    old = np.int64(mem64[np.uint64(off >> 3)])
                                    mem64[np.uint64(off >> 3)] = np.uint64((old & ~m) | ((b << (8 * sh)) & m))
                            if logops:
                                obuf[np.uint64(opos)] = addr & ~7
                                obuf[np.uint64(opos + 1)] = step
                                obuf[np.uint64(opos + 2)] = 1
                                opos += 3
                            counts[C_STORE] += 1
                            pc += ilen
                            step += 1
                            continue
                    elif k == K_MULDIV:
                        regs[urd] = _alu(np.int64(dc[us, 1]), a, b, imm, pc)
                        regs[np.uint64(0)] = 0
                        counts[C_MULDIV] += 1
                        pc += ilen
                        step += 1
                        continue
                    else:                        # K_JAL, K_JALR
                        npc = pc + imm if k == K_JAL else (a + imm) & ~1
                        regs[urd] = pc + ilen
                        regs[np.uint64(0)] = 0
                        counts[C_JUMP] += 1
                        pc = npc
                        step += 1
                        continue
                    if logpcs:
                        hist[us] -= 1
        npc = pc
        rpos0 = rpos
        opos0 = opos
        slot = 0
        hs = 0
        cls = C_SYSTEM
        d = np.int64(0)
        cause = -1
        tval = np.int64(0)
        raw = np.int64(-1)
        a = np.int64(0)
        b = np.int64(0)
        wpc = pc
        wa7 = regs[17]
        wm_op = 0
        wm_w = 0
        wm_addr = np.int64(0)
        wm_r = np.int64(0)
        wm_wv = np.int64(0)
        # ---- fetch: the first parcel, then the second if the first's low bits are 11
        d = pc - rbase[fr]
        if not (d >= 0 and d <= rsize[fr] - 2 and (rperm[fr] & xperm) == xperm):
            fr = _find(pc, 2, nreg, rbase, rsize)
            if fr < 0 or (rperm[fr] & xperm) != xperm:
                fr = 0
                cause = 1
                tval = pc
            else:
                d = pc - rbase[fr]
        if cause < 0:
            fa = pc                              # the parcel being fetched: its address, region, offset
            ff = fr
            fd = d
            for part in range(2):
                off = roff[ff] + fd
                if (rperm[ff] & (PERM_W | PERM_X)) == PERM_X:
                    w = np.int64(mem64[off >> 3])     # the program's read-only code: not a recorded read
                else:
                    if replay:
                        if rpos >= rbuf.shape[0]:
                            status = ST_REPLAY_EXHAUSTED
                            break
                        w = np.int64(rbuf[rpos])
                        rpos += 1
                    else:
                        w = np.int64(mem64[off >> 3])
                        if rec:
                            rbuf[rpos] = np.uint64(w)
                            rpos += 1
                    if logops:
                        obuf[opos] = fa & ~7
                        obuf[opos + 1] = step
                        obuf[opos + 2] = 0
                        opos += 3
                if part == 1:
                    raw |= (w & 0xFFFF) << 16
                    break
                sh = (off & 7) * 8
                raw = _srl(w, sh) & 0xFFFF
                if (raw & 3) != 3:
                    break
                if sh != 48:
                    raw = _srl(w, sh) & 0xFFFFFFFF
                    break
                fa = pc + 2                      # a 4-byte instruction across two words
                fd = d + 2
                if not (fd <= rsize[ff] - 2):
                    ff = _find(fa, 2, nreg, rbase, rsize)
                    if ff < 0 or (rperm[ff] & xperm) != xperm:
                        cause = 1
                        tval = fa
                        raw = np.int64(-1)
                        break
                    fd = fa - rbase[ff]
            if status == ST_REPLAY_EXHAUSTED:
                break
        if cause < 0:
            if rslot[fr] >= 0:
                slot = rslot[fr] + (d >> 1)
            else:
                slot = scratch
            hs = rhslot[fr] + (d >> 1)
            if (rperm[fr] & (PERM_W | PERM_X)) == PERM_X:
                xb = rbase[fr]
                xlim = rsize[fr] - 4
                xslot = rslot[fr]
            if np.int64(dc[slot, 0]) != _sx(raw, 32):
                _decode(raw, t_match, t_mask, t_fmt, t_order, t_start, t_stop, dc, slot, ctab)
                dc[slot, 7] = t_kind[dc[slot, 1]] if dc[slot, 1] >= 0 else 0
                if dc[slot, 7] > 0 and dc[slot, 6] == 2:
                    dc[slot, 7] += K_C
            if logpcs:
                hist[hs] += 1
            op = np.int64(dc[slot, 1])
            npc = pc + np.int64(dc[slot, 6])
            if op >= 0:
                cls = t_cls[op]
            counts[cls] += 1
        else:
            op = np.int64(-2)
            counts[C_SYSTEM] += 1
        if op == -1:
            cause = 2
            tval = raw
        elif op >= 0:
            rd = np.int64(dc[slot, 2])
            a = regs[dc[slot, 3]]
            b = regs[dc[slot, 4]]
            imm = np.int64(dc[slot, 5])
            # ---- loads and stores (and the memory side of atomics)
            msize = 0
            is_load = False
            is_store = False
            sval = np.int64(0)
            if (dc[slot, 7] & 7) == K_ALU or (dc[slot, 7] & 7) == K_MULDIV:
                regs[rd] = _alu(op, a, b, imm, pc)
            elif op == OP_LD:
                msize = 8
                is_load = True
            elif op == OP_SD:
                msize = 8
                is_store = True
            elif op == OP_BNE:
                if a != b:
                    npc = pc + imm
            elif op == OP_BEQ:
                if a == b:
                    npc = pc + imm
            elif op == OP_LW:
                msize = 4
                is_load = True
            elif op == OP_SW:
                msize = 4
                is_store = True
            elif op == OP_LBU:
                msize = 1
                is_load = True
            elif op == OP_LB:
                msize = 1
                is_load = True
            elif op == OP_LH:
                msize = 2
                is_load = True
            elif op == OP_LHU:
                msize = 2
                is_load = True
            elif op == OP_LWU:
                msize = 4
                is_load = True
            elif op == OP_SB:
                msize = 1
                is_store = True
            elif op == OP_SH:
                msize = 2
                is_store = True
            elif op == OP_BLT:
                if a < b:
                    npc = pc + imm
            elif op == OP_BGE:
                if a >= b:
                    npc = pc + imm
            elif op == OP_BLTU:
                if _ltu(a, b):
                    npc = pc + imm
            elif op == OP_BGEU:
                if not _ltu(a, b):
                    npc = pc + imm
            elif op == OP_JAL:
                regs[rd] = npc
                npc = pc + imm
            elif op == OP_JALR:
                regs[rd] = npc
                npc = (a + imm) & ~1
            elif op == OP_FENCE or op == OP_FENCE_I or op == OP_WFI:
                pass
            elif op == OP_ECALL:
                a7 = regs[17]
                if a7 == 93:
                    st[S_END] = 1
                    endk = 1
                    st[S_CODE] = regs[10]
                elif a7 == 64:
                    fd, buf, ln = regs[10], regs[11], regs[12]
                    if fd != 1 and fd != 2:
                        regs[10] = -9
                    elif ln == 0:
                        regs[10] = 0
                    else:
                        ri = -1
                        if ln > 0 and ln < 4294967296:
                            ri = _find(buf, ln, nreg, rbase, rsize)
                        if ri < 0 or (rperm[ri] & PERM_R) == 0:
                            regs[10] = -14
                        else:
                            first = buf & ~7
                            last = (buf + ln - 1) & ~7
                            nw = ((last - first) >> 3) + 1
                            # the buffers were sized for 3 reads and 3 logged operations a step of the
                            # slice: the steps after this one keep theirs
                            left = stop - step
                            if (cpos + ln > cbuf.shape[0] or (rec and rpos + nw + 3 * left > rbuf.shape[0])
                                    or (logops and opos + 3 * nw + 9 * left > obuf.shape[0])):
                                st[S_NEED] = nw
                                st[S_CNEED] = ln
                                status = ST_GROW
                                break
                            boff = roff[ri] + (first - rbase[ri])
                            k = 0
                            wa = first
                            while wa <= last:
                                if replay:
                                    if rpos >= rbuf.shape[0]:
                                        status = ST_REPLAY_EXHAUSTED
                                        break
                                    w = np.int64(rbuf[rpos])
                                    rpos += 1
                                else:
                                    w = np.int64(mem64[(boff >> 3) + k])
                                    if rec:
                                        rbuf[rpos] = np.uint64(w)
                                        rpos += 1
                                if logops:
                                    obuf[opos] = wa
                                    obuf[opos + 1] = step
                                    obuf[opos + 2] = 0
                                    opos += 3
                                for j in range(8):
                                    ba = wa + j
                                    if ba >= buf and ba < buf + ln:
                                        cbuf[cpos] = np.uint8(_srl(w, 8 * j) & 0xFF)
                                        cpos += 1
                                wa += 8
                                k += 1
                            if status == ST_REPLAY_EXHAUSTED:
                                break
                            regs[10] = ln
                else:
                    cause = 8 if priv == 0 else 11
            elif op == OP_EBREAK:
                cause = 3
                tval = pc
            elif op == OP_MRET:
                if priv != 3:
                    cause = 2
                    tval = raw
                else:
                    s = st[S_MSTATUS]
                    mpp = (s >> 11) & 3
                    s = (s & ~(1 << 3)) | ((1 << 3) if (s & (1 << 7)) != 0 else 0)
                    s |= 1 << 7
                    s &= ~(3 << 11)
                    if mpp != 3:
                        s &= ~(1 << 17)
                    st[S_MSTATUS] = s
                    priv = mpp
                    npc = st[S_MEPC]
            elif op >= OP_CSRRW and op <= OP_CSRRCI:
                c = imm
                isimm = op >= OP_CSRRWI
                src = np.int64(dc[slot, 3]) if isimm else a
                kind = (op - OP_CSRRW) % 3            # 0 rw, 1 rs, 2 rc
                writes = kind == 0 or dc[slot, 3] != 0
                if (not _csr_known(c)) or ((c >> 8) & 3) > priv or (writes and (c >> 10) == 3):
                    cause = 2
                    tval = raw
                else:
                    st[S_STEP] = step
                    old = np.int64(0)
                    if kind != 0 or rd != 0:
                        old = _csr_read(c, st)
                    if writes:
                        if kind == 0:
                            nv = src
                        elif kind == 1:
                            nv = old | src
                        else:
                            nv = old & ~src
                        _csr_write(c, nv, st)
                    regs[rd] = old
            else:
                # ---- A extension
                isd = op >= OP_LR_D
                width = 8 if isd else 4
                base = OP_LR_D if isd else OP_LR_W
                k = op - base                  # 0 lr, 1 sc, 2.. amo in _AMO_FUNCT5 order
                addr = a
                if (addr & (width - 1)) != 0:
                    cause = 4 if k == 0 else 6
                    tval = addr
                else:
                    ri = _find(addr, width, nreg, rbase, rsize)
                    need = PERM_R if k == 0 else (PERM_W if k == 1 else PERM_R | PERM_W)
                    if ri < 0 or (rperm[ri] & need) != need:
                        cause = 5 if k == 0 else 7
                        tval = addr
                    elif k == 1:
                        if res == addr:
                            msize = width
                            is_store = True
                            sval = b
                            regs[rd] = 0
                        else:
                            regs[rd] = 1
                        res = -1
                    else:
                        off = roff[ri] + (addr - rbase[ri])
                        if replay:
                            if rpos >= rbuf.shape[0]:
                                status = ST_REPLAY_EXHAUSTED
                                break
                            w = np.int64(rbuf[rpos])
                            rpos += 1
                        else:
                            w = np.int64(mem64[off >> 3])
                            if rec:
                                rbuf[rpos] = np.uint64(w)
                                rpos += 1
                        if logops:
                            obuf[opos] = addr & ~7
                            obuf[opos + 1] = step
                            obuf[opos + 2] = 0
                            opos += 3
                        if wit:
                            wm_op = 1
                            wm_w = width
                            wm_addr = addr
                            wm_r = w if isd else _srl(w, (off & 7) * 8) & 0xFFFFFFFF
                        if isd:
                            old = w
                            src = b
                        else:
                            old = _sx(_srl(w, (off & 7) * 8), 32)
                            src = _sx(b, 32)
                        if k == 0:
                            res = addr
                        else:
                            if k == 2:
                                nv = src
                            elif k == 3:
                                nv = old + src
                            elif k == 4:
                                nv = old ^ src
                            elif k == 5:
                                nv = old & src
                            elif k == 6:
                                nv = old | src
                            elif k == 7:
                                nv = old if old < src else src
                            elif k == 8:
                                nv = old if old > src else src
                            elif k == 9:
                                nv = old if _ltu(old, src) else src
                            else:
                                nv = old if _ltu(src, old) else src
                            msize = width
                            is_store = True
                            sval = nv
                        regs[rd] = old
            # ---- the memory access of loads and stores
            if msize > 0 and cause < 0:
                if op >= OP_LR_W:
                    addr = a
                else:
                    addr = a + imm
                    sval = b
                ri = _find(addr, msize, nreg, rbase, rsize)
                if is_load:
                    if ri < 0 or (rperm[ri] & PERM_R) == 0:
                        cause = 5
                        tval = addr
                    else:
                        off = roff[ri] + (addr - rbase[ri])
                        sh = off & 7
                        two = sh + msize > 8
                        if replay:
                            if rpos + (2 if two else 1) > rbuf.shape[0]:
                                status = ST_REPLAY_EXHAUSTED
                                break
                            w0 = np.int64(rbuf[rpos])
                            w1 = np.int64(rbuf[rpos + 1]) if two else np.int64(0)
                            rpos += 2 if two else 1
                        else:
                            w0 = np.int64(mem64[off >> 3])
                            w1 = np.int64(mem64[(off >> 3) + 1]) if two else np.int64(0)
                            if rec:
                                rbuf[rpos] = np.uint64(w0)
                                rpos += 1
                                if two:
                                    rbuf[rpos] = np.uint64(w1)
                                    rpos += 1
                        if logops:
                            obuf[opos] = addr & ~7
                            obuf[opos + 1] = step
                            obuf[opos + 2] = 0
                            opos += 3
                            if two:
                                obuf[opos] = (addr & ~7) + 8
                                obuf[opos + 1] = step
                                obuf[opos + 2] = 0
                                opos += 3
                        v = _srl(w0, sh * 8)
                        if two:
                            v |= w1 << ((8 - sh) * 8)
                        if wit:
                            wm_op = 1
                            wm_w = msize
                            wm_addr = addr
                            wm_r = v if msize == 8 else v & ((np.int64(1) << (8 * msize)) - 1)
                        if msize == 8:
                            pass
                        elif op == OP_LB:
                            v = _sx(v, 8)
                        elif op == OP_LH:
                            v = _sx(v, 16)
                        elif op == OP_LW:
                            v = _sx(v, 32)
                        elif msize == 1:
                            v &= 0xFF
                        elif msize == 2:
                            v &= 0xFFFF
                        else:
                            v &= 0xFFFFFFFF
                        regs[rd] = v
                else:
                    if addr == _UART and msize == 1 and cpos >= cbuf.shape[0] and ri >= 0 and (rperm[ri] & PERM_W) != 0:
                        st[S_NEED] = 0
                        st[S_CNEED] = 1
                        status = ST_GROW
                        break
                    if ri < 0 or (rperm[ri] & PERM_W) == 0:
                        cause = 7
                        tval = addr
                    else:
                        if msize < 8:
                            sval &= (np.int64(1) << (8 * msize)) - 1
                        if wit:
                            wm_op |= 2
                            wm_w = msize
                            wm_addr = addr
                            wm_wv = sval
                        off = roff[ri] + (addr - rbase[ri])
                        sh = off & 7
                        two = sh + msize > 8
                        if logops:
                            obuf[opos] = addr & ~7
                            obuf[opos + 1] = step
                            obuf[opos + 2] = 1
                            opos += 3
                            if two:
                                obuf[opos] = (addr & ~7) + 8
                                obuf[opos + 1] = step
                                obuf[opos + 2] = 1
                                opos += 3
                        if not replay:
                            if msize == 8 and sh == 0:
                                mem64[off >> 3] = np.uint64(sval)
                            elif not two:
                                m = ((np.int64(1) << (8 * msize)) - 1) << (8 * sh)
                                old = np.int64(mem64[off >> 3])
                                mem64[off >> 3] = np.uint64((old & ~m) | (sval << (8 * sh)))
                            else:
                                for j in range(msize):
                                    mem[off + j] = np.uint8(_srl(sval, 8 * j) & 0xFF)
                        if addr == _UART and msize == 1:
                            cbuf[cpos] = np.uint8(sval)
                            cpos += 1
                        if tohost != -1 and addr == tohost and sval != 0:
                            st[S_END] = 2
                            endk = 2
                            st[S_CODE] = _srl(sval, 1) if (sval & 1) != 0 else sval
        # ---- traps
        if cause >= 0:
            if st[S_MTVEC] == 0:
                st[S_ECAUSE] = cause
                st[S_ETVAL] = tval
                st[S_EINSN] = raw
                status = ST_TRAP
                break
            st[S_MEPC] = pc
            st[S_MCAUSE] = cause
            st[S_MTVAL] = tval
            s = st[S_MSTATUS]
            s = (s & ~(1 << 7)) | ((1 << 7) if (s & (1 << 3)) != 0 else 0)
            s = (s & ~(1 << 3) & ~(3 << 11)) | (priv << 11)
            st[S_MSTATUS] = s
            priv = 3
            npc = st[S_MTVEC] & ~3
        regs[0] = 0
        if wit:
            wn = wofs + step - step0
            wbuf[wn, 0] = step
            wbuf[wn, 1] = wpc
            wbuf[wn, 2] = raw
            wbuf[wn, 3] = op
            wbuf[wn, 4] = cls
            use = t_use[op] if op >= 0 else 0
            wrd = 0
            if cause < 0:
                if (use & 4) != 0:
                    wrd = np.int64(dc[slot, 2])
                elif op == OP_ECALL and wa7 == 64:
                    wrd = 10
            else:
                wm_op = 0
                wm_w = 0
                wm_addr = 0
                wm_r = 0
                wm_wv = 0
            wbuf[wn, 5] = wrd
            wbuf[wn, 6] = regs[wrd]
            wbuf[wn, 7] = a if (use & 1) != 0 else 0
            wbuf[wn, 8] = b if (use & 2) != 0 else 0
            wbuf[wn, 9] = wm_op
            wbuf[wn, 10] = wm_w
            wbuf[wn, 11] = wm_addr
            wbuf[wn, 12] = wm_r
            wbuf[wn, 13] = wm_wv
            wbuf[wn, 14] = cause
            wbuf[wn, 15] = npc
        pc = npc
        step += 1
        if endk != 0:
            status = ST_END
            break
    st[S_PC] = pc
    st[S_STEP] = step
    st[S_PRIV] = priv
    st[S_RES] = res
    if status == ST_GROW:                  # undo the fetch of the step that did not run
        counts[cls] -= 1
        if logpcs:
            hist[hs] -= 1
        rpos = rpos0
        opos = opos0
    return status, step - step0, rpos, opos, cpos
