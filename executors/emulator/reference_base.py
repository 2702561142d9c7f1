"""The reference interpreter's semantics of RV64IM: upper immediates, jumps,
branches, loads and stores, the integer ALU and its word forms, multiply
and divide; each registered in
:data:`hetflow.executors.emulator.reference.SEMANTICS`, one small function
per instruction, computing on Python ints (registers are truncated to 64
bits once, in :meth:`~hetflow.executors.emulator.reference.Hart.write`).
Importing :mod:`.reference` registers them.
"""

from __future__ import annotations

from .isa import sign_extend
from .ports import MASK32, MASK64
from .reference_hart import SEMANTICS, Hart, after_store, s32, s64, semantics

__all__: list[str] = []        # registers semantics; defines nothing to import


def _jump(h: Hart, target: int) -> None:
    # With C, IALIGN = 16 and every target is even (branch and jump offsets
    # are multiples of 2, jalr clears bit 0): "instruction-address-misaligned
    # exceptions are not possible on machines that support extensions with
    # 16-bit aligned instructions, such as the compressed instruction-set
    # extension, C."
    h.npc = target & MASK64


# RV64I: upper immediates and jumps

@semantics("lui")
def _lui(h, m, d): h.write(d.rd, d.imm)

@semantics("auipc")
def _auipc(h, m, d): h.write(d.rd, h.pc + d.imm)

@semantics("jal")
def _jal(h, m, d):
    _jump(h, h.pc + d.imm)
    h.write(d.rd, h.next)

@semantics("jalr")
def _jalr(h, m, d):
    # "The target address is obtained by adding the sign-extended 12-bit
    # I-immediate to the register rs1, then setting the least-significant
    # bit of the result to zero."
    target = (h.x[d.rs1] + d.imm) & ~1
    _jump(h, target)
    h.write(d.rd, h.next)


# branches

_BRANCH = {
    "beq": lambda a, b: a == b,
    "bne": lambda a, b: a != b,
    "blt": lambda a, b: s64(a) < s64(b),
    "bge": lambda a, b: s64(a) >= s64(b),
    "bltu": lambda a, b: a < b,
    "bgeu": lambda a, b: a >= b,
}


def _branch(name):
    taken = _BRANCH[name]

    def fn(h, m, d):
        if taken(h.x[d.rs1], h.x[d.rs2]):
            _jump(h, h.pc + d.imm)
    SEMANTICS[name] = fn


for _n in _BRANCH:
    _branch(_n)


# loads and stores (misaligned accesses are performed, not trapped)

_LOADS = {"lb": (1, True), "lh": (2, True), "lw": (4, True), "ld": (8, False),
          "lbu": (1, False), "lhu": (2, False), "lwu": (4, False)}
_STORES = {"sb": 1, "sh": 2, "sw": 4, "sd": 8}


def _load(name):
    size, signed = _LOADS[name]

    def fn(h, m, d):
        v = m.load((h.x[d.rs1] + d.imm) & MASK64, size)
        h.write(d.rd, sign_extend(v, 8 * size) if signed else v)
    SEMANTICS[name] = fn


def _store(name):
    size = _STORES[name]

    def fn(h, m, d):
        addr = (h.x[d.rs1] + d.imm) & MASK64
        value = h.x[d.rs2] & ((1 << (8 * size)) - 1)
        m.store(addr, size, value)
        after_store(h, addr, size, value)
    SEMANTICS[name] = fn


for _n in _LOADS:
    _load(_n)
for _n in _STORES:
    _store(_n)


# integer computational: register-immediate and register-register

_ALU = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "slt": lambda a, b: int(s64(a) < s64(b)),
    "sltu": lambda a, b: int(a < b),
    "xor": lambda a, b: a ^ b,
    "or": lambda a, b: a | b,
    "and": lambda a, b: a & b,
    # "SLL, SRL, and SRA perform logical left, logical right, and arithmetic
    # right shifts on the value in register rs1 by the shift amount held in
    # the lower 6 bits of register rs2."
    "sll": lambda a, b: a << (b & 63),
    "srl": lambda a, b: a >> (b & 63),
    "sra": lambda a, b: s64(a) >> (b & 63),
}
_ALU_IMM = {"addi": "add", "slti": "slt", "sltiu": "sltu", "xori": "xor", "ori": "or", "andi": "and",
            "slli": "sll", "srli": "srl", "srai": "sra"}


def _alu(name, fn):
    SEMANTICS[name] = lambda h, m, d: h.write(d.rd, fn(h.x[d.rs1], h.x[d.rs2]))


def _alu_imm(name, fn):
    # the immediate is sign-extended, then used as a 64-bit operand
    SEMANTICS[name] = lambda h, m, d: h.write(d.rd, fn(h.x[d.rs1], d.imm & MASK64))


for _n, _f in _ALU.items():
    _alu(_n, _f)
for _n, _base in _ALU_IMM.items():
    _alu_imm(_n, _ALU[_base])


# RV64I word forms: operate on the low 32 bits, sign-extend the 32-bit result

_ALU_W = {
    "addw": lambda a, b: a + b,
    "subw": lambda a, b: a - b,
    "sllw": lambda a, b: (a & MASK32) << (b & 31),
    "srlw": lambda a, b: (a & MASK32) >> (b & 31),
    "sraw": lambda a, b: s32(a) >> (b & 31),
}
_ALU_W_IMM = {"addiw": "addw", "slliw": "sllw", "srliw": "srlw", "sraiw": "sraw"}


def _alu_w(name, fn):
    SEMANTICS[name] = lambda h, m, d: h.write(d.rd, s32(fn(h.x[d.rs1], h.x[d.rs2])))


def _alu_w_imm(name, fn):
    SEMANTICS[name] = lambda h, m, d: h.write(d.rd, s32(fn(h.x[d.rs1], d.imm & MASK64)))


for _n, _f in _ALU_W.items():
    _alu_w(_n, _f)
for _n, _base in _ALU_W_IMM.items():
    _alu_w_imm(_n, _ALU_W[_base])


# M: multiplication and division
#
# "DIV and DIVU perform an XLEN bits by XLEN bits signed and unsigned
# integer division of rs1 by rs2, rounding towards zero."
# "The quotient of division by zero has all bits set, and the remainder of
# division by zero equals the dividend. Signed division overflow occurs
# only when the most-negative integer is divided by -1. The quotient of a
# signed division with overflow is equal to the dividend, and the
# remainder is zero."  (RISC-V unprivileged ISA, "M" extension)

def _div_s(a: int, b: int) -> int:
    """Signed division of Python ints, rounding towards zero."""
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q      # overflow: -(-2^63) = 2^63 = dividend mod 2^64


def _rem_s(a: int, b: int) -> int:
    if b == 0:
        return a
    return a - b * _div_s(a, b)                  # sign of the dividend; 0 on overflow


def _div_u(a: int, b: int) -> int:
    return (1 << 64) - 1 if b == 0 else a // b


def _rem_u(a: int, b: int) -> int:
    return a if b == 0 else a % b


_MULDIV = {
    "mul": lambda a, b: a * b,
    "mulh": lambda a, b: (s64(a) * s64(b)) >> 64,
    "mulhsu": lambda a, b: (s64(a) * b) >> 64,
    "mulhu": lambda a, b: (a * b) >> 64,
    "div": lambda a, b: _div_s(s64(a), s64(b)),
    "divu": _div_u,
    "rem": lambda a, b: _rem_s(s64(a), s64(b)),
    "remu": _rem_u,
}
_MULDIV_W = {
    "mulw": lambda a, b: a * b,
    "divw": lambda a, b: _div_s(s32(a), s32(b)),
    "divuw": lambda a, b: (MASK32 if b & MASK32 == 0 else (a & MASK32) // (b & MASK32)),
    "remw": lambda a, b: _rem_s(s32(a), s32(b)),
    "remuw": lambda a, b: _rem_u(a & MASK32, b & MASK32),
}
for _n, _f in _MULDIV.items():
    _alu(_n, _f)
for _n, _f in _MULDIV_W.items():
    _alu_w(_n, _f)
