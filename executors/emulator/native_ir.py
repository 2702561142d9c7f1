"""The instruction half of the ``native`` backend's translator: the
status codes and context slots the generated code shares with its runtime
(defined in :mod:`.layout`, which the runtime imports without the translator),
and the emitters of one guest instruction's LLVM IR (ALU, fetch from
writable code, loads and stores with their region checks, the memory-op
log).  :mod:`.native_translate` assembles them into blocks, parts and the
driver.
"""

from __future__ import annotations

from .elf import PERM_R, PERM_W
from .layout import (CTX_NREG, CTX_OPOS, CTX_PAGES, CTX_RLEN, CTX_RPOS, CTX_STOP, CTX_TOHOST,  # noqa: F401
                     LOG_OPS, N_CONT, N_CTX, N_MISS, N_SHORT, N_SIDE, N_STOP, PAGE_SHIFT, REC_READS, REPLAY,
                     WITNESS)
from .machine import UART_ADDR
from .native_blocks import _LOADS, _STORES, Insn

__all__ = ["N_CONT", "N_STOP", "N_SIDE", "N_SHORT", "N_MISS", "CTX_STOP", "CTX_RPOS", "CTX_RLEN", "CTX_OPOS",
           "CTX_NREG", "CTX_TOHOST", "CTX_PAGES", "N_CTX", "PAGE_SHIFT"]


def _i64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


class _Emitter:
    def __init__(self, mode: int, pages: bool = False):
        self.mode = mode
        self.pages = pages          # the translation holds writable code: stores check the page table
        self.out: list[str] = []
        self.n = 0
        # the data access of the instruction last emitted, for its witness row (:func:`_memory` sets it):
        # (mem_op, width, address, value read, value written), the values as IR operands
        self.access = (0, 0, "0", "0", "0")

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def e(self, line: str):
        self.out.append("  " + line)

    def label(self, name: str):
        self.out.append(f"{name}:")

    def op(self, text: str) -> str:
        t = self.tmp()
        self.e(f"{t} = {text}")
        return t

    def reg(self, r: int) -> str:
        return "0" if r == 0 else self.op(f"load i64, i64* %x{r}")

    def set_reg(self, r: int, v: str):
        if r:
            self.e(f"store i64 {v}, i64* %x{r}")

    def load(self, var: str) -> str:
        return self.op(f"load i64, i64* %{var}")

    def store(self, var: str, v) -> None:
        self.e(f"store i64 {v}, i64* %{var}")

    def add_to(self, var: str, k: int):
        if k:
            v = self.load(var)
            self.store(var, self.op(f"add i64 {v}, {k}"))

    def elem(self, ptr: str, idx: str) -> str:
        return self.op(f"getelementptr inbounds i64, i64* %{ptr}, i64 {idx}")


def _w(e: _Emitter, v: str) -> str:
    return e.op(f"trunc i64 {v} to i32")


def _sx(e: _Emitter, v32: str) -> str:
    return e.op(f"sext i32 {v32} to i64")


def _alu(e: _Emitter, ins: Insn) -> str:
    """rd's value for an ALU or M instruction."""
    n, imm = ins.name, ins.imm
    if n == "lui":
        return str(_i64(imm))
    if n == "auipc":
        return str(_i64(ins.pc + imm))
    a = e.reg(ins.rs1)
    simple_i = {"addi": "add", "xori": "xor", "ori": "or", "andi": "and", "slli": "shl", "srli": "lshr",
                "srai": "ashr"}
    if n in simple_i:
        return e.op(f"{simple_i[n]} i64 {a}, {imm}")
    if n in ("slti", "sltiu"):
        c = e.op(f"icmp {'slt' if n == 'slti' else 'ult'} i64 {a}, {imm}")
        return e.op(f"zext i1 {c} to i64")
    if n in ("addiw", "slliw", "srliw", "sraiw"):
        op = {"addiw": "add", "slliw": "shl", "srliw": "lshr", "sraiw": "ashr"}[n]
        return _sx(e, e.op(f"{op} i32 {_w(e, a)}, {imm}"))
    b = e.reg(ins.rs2)
    simple_r = {"add": "add", "sub": "sub", "xor": "xor", "or": "or", "and": "and", "mul": "mul"}
    if n in simple_r:
        return e.op(f"{simple_r[n]} i64 {a}, {b}")
    if n in ("sll", "srl", "sra"):
        sh = e.op(f"and i64 {b}, 63")
        return e.op(f"{ {'sll': 'shl', 'srl': 'lshr', 'sra': 'ashr'}[n]} i64 {a}, {sh}")
    if n in ("slt", "sltu"):
        c = e.op(f"icmp {'slt' if n == 'slt' else 'ult'} i64 {a}, {b}")
        return e.op(f"zext i1 {c} to i64")
    if n in ("addw", "subw", "mulw"):
        return _sx(e, e.op(f"{n[:-1]} i32 {_w(e, a)}, {_w(e, b)}"))
    if n in ("sllw", "srlw", "sraw"):
        sh = e.op(f"and i32 {_w(e, b)}, 31")
        op = {"sllw": "shl", "srlw": "lshr", "sraw": "ashr"}[n]
        return _sx(e, e.op(f"{op} i32 {_w(e, a)}, {sh}"))
    if n in ("mulh", "mulhsu", "mulhu"):
        ea = "sext" if n in ("mulh", "mulhsu") else "zext"
        eb = "sext" if n == "mulh" else "zext"
        wa = e.op(f"{ea} i64 {a} to i128")
        wb = e.op(f"{eb} i64 {b} to i128")
        p = e.op(f"mul i128 {wa}, {wb}")
        return e.op(f"trunc i128 {e.op(f'lshr i128 {p}, 64')} to i64")
    # division: "The quotient of division by zero has all bits set, and the
    # remainder of division by zero equals the dividend"; on signed overflow
    # "the quotient is equal to the dividend, and the remainder is zero" —
    # exactly what dividing by 1 gives, so the divisor becomes 1 in both cases
    word = n.endswith("w")
    t = "i32" if word else "i64"
    if word:
        a, b = _w(e, a), _w(e, b)
    signed = n in ("div", "rem", "divw", "remw")
    bz = e.op(f"icmp eq {t} {b}, 0")
    bad = bz
    if signed:
        amin = -(1 << 31) if word else -(1 << 63)
        ov = e.op(f"and i1 {e.op(f'icmp eq {t} {a}, {amin}')}, {e.op(f'icmp eq {t} {b}, -1')}")
        bad = e.op(f"or i1 {bz}, {ov}")
    sb = e.op(f"select i1 {bad}, {t} 1, {t} {b}")
    if n.startswith("div"):
        q = e.op(f"{'sdiv' if signed else 'udiv'} {t} {a}, {sb}")
        r = e.op(f"select i1 {bz}, {t} -1, {t} {q}")
    else:
        q = e.op(f"{'srem' if signed else 'urem'} {t} {a}, {sb}")
        r = e.op(f"select i1 {bz}, {t} {a}, {t} {q}")
    return _sx(e, r) if word else r


def _region_check(e: _Emitter, cache: str, addr: str, msize: int, perm: int, hit: str, side: str):
    """Branch to ``hit`` with the region cache ``cache`` holding the region of
    [addr, addr + msize) (which has ``perm``), else to ``side``."""
    base = e.load(f"{cache}base")
    size = e.load(f"{cache}size")
    dd = e.op(f"sub i64 {addr}, {base}")
    lim = e.op(f"sub i64 {size}, {msize}")
    ok = e.op(f"and i1 {e.op(f'icmp sge i64 {dd}, 0')}, {e.op(f'icmp sle i64 {dd}, {lim}')}")
    miss = f"{hit}_miss"
    e.e(f"br i1 {ok}, label %{hit}, label %{miss}")
    e.label(miss)
    ri = e.op(f"call i64 @hf_find(i64 {addr}, i64 {msize}, i64 {perm}, i64* %rtab, i64 %nreg)")
    upd = f"{hit}_upd"
    e.e(f"br i1 {e.op(f'icmp slt i64 {ri}, 0')}, label %{side}, label %{upd}")
    e.label(upd)
    k = e.op(f"mul i64 {ri}, 4")
    for j, f in enumerate(("base", "size", "off")):
        idx = e.op(f"add i64 {k}, {j}")
        e.store(f"{cache}{f}", e.op(f"load i64, i64* {e.elem('rtab', idx)}"))
    e.e(f"br label %{hit}")
    e.label(hit)


def _log_op(e: _Emitter, addr: str, i: int, is_write: int):
    if not e.mode & LOG_OPS:
        return
    pos = e.load("opos")
    step = e.op(f"add i64 {e.load('bstep')}, {i}")
    for j, v in enumerate((e.op(f"and i64 {addr}, -8"), step, str(is_write))):
        idx = e.op(f"add i64 {pos}, {j}")
        e.e(f"store i64 {v}, i64* {e.elem('obuf', idx)}")
    e.store("opos", e.op(f"add i64 {pos}, 3"))


def _fetch(e: _Emitter, ins: Insn, i: int):
    """Record the fetch of an instruction in writable code as the
    interpreters do: the aligned word(s) holding it, read from memory."""
    if ins.fetch < 0:
        return
    words = [ins.fetch] + ([ins.fetch + 8] if ins.size == 4 and ins.pc & 7 == 6 else [])
    for k, off in enumerate(words):
        addr = (ins.pc & ~7) + 8 * k
        _log_op(e, str(_i64(addr)), i, 0)
        if e.mode & REC_READS:
            wp = e.op(f"getelementptr inbounds i8, i8* %mem, i64 {off}")
            w = e.op(f"load i64, i64* {e.op(f'bitcast i8* {wp} to i64*')}, align 8")
            rp = e.load("rpos")
            e.e(f"store i64 {w}, i64* {e.elem('rbuf', rp)}")
            e.store("rpos", e.op(f"add i64 {rp}, 1"))


def _memory(e: _Emitter, ins: Insn, i: int, lab: str, side: str):
    """A load or store that stays inside one aligned word of a region with
    the right permission; anything else takes the side exit first."""
    a = e.reg(ins.rs1)
    addr = e.op(f"add i64 {a}, {ins.imm}")
    if ins.name in _LOADS:
        msize, ext = _LOADS[ins.name]
        _region_check(e, "l", addr, msize, PERM_R, f"{lab}_in", side)
        cache = "l"
    else:
        msize = _STORES[ins.name]
        c = e.op(f"or i1 {e.op(f'icmp eq i64 {addr}, {UART_ADDR}')}, {e.op(f'icmp eq i64 {addr}, %tohost')}")
        e.e(f"br i1 {c}, label %{side}, label %{lab}_notio")
        e.label(f"{lab}_notio")
        _region_check(e, "s", addr, msize, PERM_W, f"{lab}_in", side)
        cache = "s"
    base = e.load(cache + "base")
    off = e.op(f"add i64 {e.load(cache + 'off')}, {e.op(f'sub i64 {addr}, {base}')}")
    sh = e.op(f"and i64 {off}, 7")
    if msize > 1:
        fits = e.op(f"icmp ule i64 {e.op(f'add i64 {sh}, {msize}')}, 8")
        e.e(f"br i1 {fits}, label %{lab}_fit, label %{side}")
        e.label(f"{lab}_fit")
    if ins.name in _STORES and e.pages:
        # a store into a page of translated code runs in the interpreter; the runtime then invalidates the page
        page = e.op(f"lshr i64 {off}, {PAGE_SHIFT}")
        pg = e.op(f"load i8, i8* {e.op(f'getelementptr inbounds i8, i8* %pages, i64 {page}')}")
        e.e(f"br i1 {e.op(f'icmp eq i8 {pg}, 1')}, label %{side}, label %{lab}_code")
        e.label(f"{lab}_code")
    _fetch(e, ins, i)
    if ins.name in _LOADS:
        if e.mode & REPLAY:
            rp = e.load("rpos")
            e.e(f"br i1 {e.op(f'icmp slt i64 {rp}, %rlen')}, label %{lab}_rd, label %{side}")
            e.label(f"{lab}_rd")
            w = e.op(f"load i64, i64* {e.elem('rbuf', rp)}")
            e.store("rpos", e.op(f"add i64 {rp}, 1"))
        else:
            wp = e.op(f"getelementptr inbounds i8, i8* %mem, i64 {e.op(f'and i64 {off}, -8')}")
            w = e.op(f"load i64, i64* {e.op(f'bitcast i8* {wp} to i64*')}, align 8")
            if e.mode & REC_READS:
                rp = e.load("rpos")
                e.e(f"store i64 {w}, i64* {e.elem('rbuf', rp)}")
                e.store("rpos", e.op(f"add i64 {rp}, 1"))
        _log_op(e, addr, i, 0)
        v = e.op(f"lshr i64 {w}, {e.op(f'shl i64 {sh}, 3')}")
        raw = v
        if msize < 8:
            bits = 8 * msize
            part = e.op(f"trunc i64 {v} to i{bits}")
            v = e.op(f"{ext}ext i{bits} {part} to i64")
            if e.mode & WITNESS:          # the row's value read is zero-extended
                raw = v if ext == "z" else e.op(f"zext i{bits} {part} to i64")
        e.set_reg(ins.rd, v)
        e.access = (1, msize, addr, raw, "0")
    else:
        _log_op(e, addr, i, 1)
        if e.mode & WITNESS:
            b = e.reg(ins.rs2)
            e.access = (2, msize, addr, "0", b if msize == 8 else
                        e.op(f"zext i{8 * msize} {e.op(f'trunc i64 {b} to i{8 * msize}')} to i64"))
        if not e.mode & REPLAY:
            b = e.reg(ins.rs2)
            bits = 8 * msize
            v = b if msize == 8 else e.op(f"trunc i64 {b} to i{bits}")
            p = e.op(f"getelementptr inbounds i8, i8* %mem, i64 {off}")
            e.e(f"store i{bits} {v}, i{bits}* {e.op(f'bitcast i8* {p} to i{bits}*')}, align {msize}")
