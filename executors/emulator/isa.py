"""The RV64IMA + Zicsr + Zifencei instruction set, as one table.

One line per instruction, in the spirit of riscv-opcodes: the name, the
encoding format, the bit pattern (``0``/``1`` fixed, ``.`` free; bit 31 on
the left), and the operation class that the per-chunk counters use.  The
pattern compiles into ``match``/``mask``: a 32-bit word ``w`` is that
instruction when ``w & mask == match``.  Both backends decode from this
table: the reference backend through :func:`decode`, the fast backend
through :func:`decode_arrays` (the same table as numpy arrays, with an
index per major opcode).  ``tests/emulator/test_isa.py`` checks that no
two entries can match the same word.

Formats and the fields :func:`decode` extracts (``imm`` is sign-extended
to a Python int unless noted):

======  ==========================================================
R       rd, rs1, rs2
I       rd, rs1, imm = inst[31:20]
SH6     rd, rs1, imm = shamt = inst[25:20] (RV64 shifts)
SH5     rd, rs1, imm = shamt = inst[24:20] (the *W shifts)
S       rs1, rs2, imm = inst[31:25] | inst[11:7]
B       rs1, rs2, imm = branch offset (multiple of 2)
U       rd, imm = inst[31:12] << 12
J       rd, imm = jump offset (multiple of 2)
CSR     rd, rs1, imm = csr number inst[31:20] (unsigned)
CSRI    rd, rs1 = uimm[4:0] (the rs1 field), imm = csr number
A       rd, rs1, rs2 (aq/rl are accepted and ignored: one hart)
N       no operands (fences, ecall, ebreak, mret, wfi)
======  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "CLASSES",
    "FORMATS",
    "Instr",
    "TABLE",
    "BY_NAME",
    "Decoded",
    "decode",
    "decode_arrays",
    "sign_extend",
    "USE_RS1",
    "USE_RS2",
    "USE_RD",
    "operand_use",
]

#: operation classes of the per-chunk counters, in counter-column order
CLASSES = ("alu", "muldiv", "load", "store", "branch", "jump", "csr", "atomic", "system")
FORMATS = ("R", "I", "SH6", "SH5", "S", "B", "U", "J", "CSR", "CSRI", "A", "N")


@dataclass(frozen=True)
class Instr:
    name: str
    fmt: str
    match: int
    mask: int
    cls: str

    @property
    def opcode(self) -> int:
        return self.match & 0x7F


def _pattern(bits: str) -> tuple[int, int]:
    bits = bits.replace(" ", "")
    if len(bits) != 32 or set(bits) - set("01."):
        raise ValueError(f"bad encoding pattern {bits!r}")
    match = mask = 0
    for ch in bits:
        match = (match << 1) | (ch == "1")
        mask = (mask << 1) | (ch != ".")
    return match, mask


#        name          fmt    pattern (bit 31 ... bit 0)                      class
_ROWS = [
    # RV64I base: upper immediates, jumps, branches
    ("lui",        "U",   "....................  ..... 0110111",            "alu"),
    ("auipc",      "U",   "....................  ..... 0010111",            "alu"),
    ("jal",        "J",   "....................  ..... 1101111",            "jump"),
    ("jalr",       "I",   "............ ..... 000 ..... 1100111",          "jump"),
    ("beq",        "B",   "....... ..... ..... 000 ..... 1100011",        "branch"),
    ("bne",        "B",   "....... ..... ..... 001 ..... 1100011",        "branch"),
    ("blt",        "B",   "....... ..... ..... 100 ..... 1100011",        "branch"),
    ("bge",        "B",   "....... ..... ..... 101 ..... 1100011",        "branch"),
    ("bltu",       "B",   "....... ..... ..... 110 ..... 1100011",        "branch"),
    ("bgeu",       "B",   "....... ..... ..... 111 ..... 1100011",        "branch"),
    # loads and stores
    ("lb",         "I",   "............ ..... 000 ..... 0000011",          "load"),
    ("lh",         "I",   "............ ..... 001 ..... 0000011",          "load"),
    ("lw",         "I",   "............ ..... 010 ..... 0000011",          "load"),
    ("ld",         "I",   "............ ..... 011 ..... 0000011",          "load"),
    ("lbu",        "I",   "............ ..... 100 ..... 0000011",          "load"),
    ("lhu",        "I",   "............ ..... 101 ..... 0000011",          "load"),
    ("lwu",        "I",   "............ ..... 110 ..... 0000011",          "load"),
    ("sb",         "S",   "....... ..... ..... 000 ..... 0100011",        "store"),
    ("sh",         "S",   "....... ..... ..... 001 ..... 0100011",        "store"),
    ("sw",         "S",   "....... ..... ..... 010 ..... 0100011",        "store"),
    ("sd",         "S",   "....... ..... ..... 011 ..... 0100011",        "store"),
    # integer register-immediate
    ("addi",       "I",   "............ ..... 000 ..... 0010011",          "alu"),
    ("slti",       "I",   "............ ..... 010 ..... 0010011",          "alu"),
    ("sltiu",      "I",   "............ ..... 011 ..... 0010011",          "alu"),
    ("xori",       "I",   "............ ..... 100 ..... 0010011",          "alu"),
    ("ori",        "I",   "............ ..... 110 ..... 0010011",          "alu"),
    ("andi",       "I",   "............ ..... 111 ..... 0010011",          "alu"),
    ("slli",       "SH6", "000000 ...... ..... 001 ..... 0010011",         "alu"),
    ("srli",       "SH6", "000000 ...... ..... 101 ..... 0010011",         "alu"),
    ("srai",       "SH6", "010000 ...... ..... 101 ..... 0010011",         "alu"),
    # integer register-register
    ("add",        "R",   "0000000 ..... ..... 000 ..... 0110011",        "alu"),
    ("sub",        "R",   "0100000 ..... ..... 000 ..... 0110011",        "alu"),
    ("sll",        "R",   "0000000 ..... ..... 001 ..... 0110011",        "alu"),
    ("slt",        "R",   "0000000 ..... ..... 010 ..... 0110011",        "alu"),
    ("sltu",       "R",   "0000000 ..... ..... 011 ..... 0110011",        "alu"),
    ("xor",        "R",   "0000000 ..... ..... 100 ..... 0110011",        "alu"),
    ("srl",        "R",   "0000000 ..... ..... 101 ..... 0110011",        "alu"),
    ("sra",        "R",   "0100000 ..... ..... 101 ..... 0110011",        "alu"),
    ("or",         "R",   "0000000 ..... ..... 110 ..... 0110011",        "alu"),
    ("and",        "R",   "0000000 ..... ..... 111 ..... 0110011",        "alu"),
    # RV64I word forms
    ("addiw",      "I",   "............ ..... 000 ..... 0011011",          "alu"),
    ("slliw",      "SH5", "0000000 ..... ..... 001 ..... 0011011",        "alu"),
    ("srliw",      "SH5", "0000000 ..... ..... 101 ..... 0011011",        "alu"),
    ("sraiw",      "SH5", "0100000 ..... ..... 101 ..... 0011011",        "alu"),
    ("addw",       "R",   "0000000 ..... ..... 000 ..... 0111011",        "alu"),
    ("subw",       "R",   "0100000 ..... ..... 000 ..... 0111011",        "alu"),
    ("sllw",       "R",   "0000000 ..... ..... 001 ..... 0111011",        "alu"),
    ("srlw",       "R",   "0000000 ..... ..... 101 ..... 0111011",        "alu"),
    ("sraw",       "R",   "0100000 ..... ..... 101 ..... 0111011",        "alu"),
    # fences (Zifencei adds fence.i), system
    ("fence",      "N",   "............ ..... 000 ..... 0001111",          "system"),
    ("fence.i",    "N",   "............ ..... 001 ..... 0001111",          "system"),
    ("ecall",      "N",   "000000000000 00000 000 00000 1110011",          "system"),
    ("ebreak",     "N",   "000000000001 00000 000 00000 1110011",          "system"),
    ("mret",       "N",   "001100000010 00000 000 00000 1110011",          "system"),
    ("wfi",        "N",   "000100000101 00000 000 00000 1110011",          "system"),
    # Zicsr
    ("csrrw",      "CSR", "............ ..... 001 ..... 1110011",          "csr"),
    ("csrrs",      "CSR", "............ ..... 010 ..... 1110011",          "csr"),
    ("csrrc",      "CSR", "............ ..... 011 ..... 1110011",          "csr"),
    ("csrrwi",     "CSRI", "............ ..... 101 ..... 1110011",         "csr"),
    ("csrrsi",     "CSRI", "............ ..... 110 ..... 1110011",         "csr"),
    ("csrrci",     "CSRI", "............ ..... 111 ..... 1110011",         "csr"),
    # M
    ("mul",        "R",   "0000001 ..... ..... 000 ..... 0110011",        "muldiv"),
    ("mulh",       "R",   "0000001 ..... ..... 001 ..... 0110011",        "muldiv"),
    ("mulhsu",     "R",   "0000001 ..... ..... 010 ..... 0110011",        "muldiv"),
    ("mulhu",      "R",   "0000001 ..... ..... 011 ..... 0110011",        "muldiv"),
    ("div",        "R",   "0000001 ..... ..... 100 ..... 0110011",        "muldiv"),
    ("divu",       "R",   "0000001 ..... ..... 101 ..... 0110011",        "muldiv"),
    ("rem",        "R",   "0000001 ..... ..... 110 ..... 0110011",        "muldiv"),
    ("remu",       "R",   "0000001 ..... ..... 111 ..... 0110011",        "muldiv"),
    ("mulw",       "R",   "0000001 ..... ..... 000 ..... 0111011",        "muldiv"),
    ("divw",       "R",   "0000001 ..... ..... 100 ..... 0111011",        "muldiv"),
    ("divuw",      "R",   "0000001 ..... ..... 101 ..... 0111011",        "muldiv"),
    ("remw",       "R",   "0000001 ..... ..... 110 ..... 0111011",        "muldiv"),
    ("remuw",      "R",   "0000001 ..... ..... 111 ..... 0111011",        "muldiv"),
]

# A: LR/SC and the AMOs, word (funct3 010) and doubleword (011) forms
_AMO_FUNCT5 = [
    ("lr", "00010"), ("sc", "00011"), ("amoswap", "00001"), ("amoadd", "00000"),
    ("amoxor", "00100"), ("amoand", "01100"), ("amoor", "01000"), ("amomin", "10000"),
    ("amomax", "10100"), ("amominu", "11000"), ("amomaxu", "11100"),
]
for _width, _f3 in (("w", "010"), ("d", "011")):
    for _op, _f5 in _AMO_FUNCT5:
        _rs2 = "00000" if _op == "lr" else "....."
        _ROWS.append((f"{_op}.{_width}", "A", f"{_f5} .. {_rs2} ..... {_f3} ..... 0101111", "atomic"))


def _build() -> tuple[Instr, ...]:
    table = []
    for name, fmt, pattern, cls in _ROWS:
        assert fmt in FORMATS and cls in CLASSES, name
        match, mask = _pattern(pattern)
        table.append(Instr(name, fmt, match, mask, cls))
    return tuple(table)


#: the table; an instruction's index in it is its op id in both backends
TABLE: tuple[Instr, ...] = _build()
BY_NAME: dict[str, int] = {ins.name: i for i, ins in enumerate(TABLE)}

# candidates per major opcode, so decoding scans a handful of rows
_BY_OPCODE: dict[int, list[int]] = {}
for _i, _ins in enumerate(TABLE):
    _BY_OPCODE.setdefault(_ins.opcode, []).append(_i)


#: operand-use bits of :func:`operand_use`
USE_RS1, USE_RS2, USE_RD = 1, 2, 4
_FORMAT_USE = {"R": 7, "I": 5, "SH6": 5, "SH5": 5, "S": 3, "B": 3, "U": 4, "J": 4, "CSR": 5, "CSRI": 4, "A": 7,
               "N": 0}


def operand_use(op: int) -> int:
    """Which register fields instruction ``op`` reads (USE_RS1, USE_RS2)
    and writes (USE_RD), from its format: what a witness row records.

    >>> operand_use(BY_NAME["sd"]) == USE_RS1 | USE_RS2
    True
    """
    return _FORMAT_USE[TABLE[op].fmt]


def sign_extend(value: int, bits: int) -> int:
    """Interpret the low ``bits`` bits of ``value`` as a two's-complement int."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


class Decoded(NamedTuple):
    op: int      # index into TABLE
    rd: int
    rs1: int
    rs2: int
    imm: int


def _imm(fmt: str, w: int) -> int:
    if fmt == "I":
        return sign_extend(w >> 20, 12)
    if fmt == "SH6":
        return (w >> 20) & 0x3F
    if fmt == "SH5":
        return (w >> 20) & 0x1F
    if fmt == "S":
        return sign_extend(((w >> 25) << 5) | ((w >> 7) & 0x1F), 12)
    if fmt == "B":
        imm = (((w >> 31) & 1) << 12) | (((w >> 7) & 1) << 11) | (((w >> 25) & 0x3F) << 5) | (((w >> 8) & 0xF) << 1)
        return sign_extend(imm, 13)
    if fmt == "U":
        return sign_extend(w & 0xFFFFF000, 32)
    if fmt == "J":
        imm = (((w >> 31) & 1) << 20) | (((w >> 12) & 0xFF) << 12) | (((w >> 20) & 1) << 11) | (((w >> 21) & 0x3FF) << 1)
        return sign_extend(imm, 21)
    if fmt in ("CSR", "CSRI"):
        return (w >> 20) & 0xFFF
    return 0


def decode(word: int) -> Decoded | None:
    """Decode a 32-bit instruction word; ``None`` if no table row matches.

    >>> TABLE[decode(0x00A58533).op].name     # add a0, a1, a0
    'add'
    >>> decode(0x00000000) is None             # all zeros is illegal
    True
    """
    for i in _BY_OPCODE.get(word & 0x7F, ()):
        ins = TABLE[i]
        if word & ins.mask == ins.match:
            return Decoded(i, (word >> 7) & 0x1F, (word >> 15) & 0x1F, (word >> 20) & 0x1F, _imm(ins.fmt, word))
    return None


def decode_arrays() -> dict[str, np.ndarray]:
    """The table as numpy arrays, for compiled decoders.

    ``match``, ``mask``, ``fmt`` (index into FORMATS), ``cls`` (index into
    CLASSES), ``use`` (:func:`operand_use`) per row; ``order`` lists row indices grouped by major opcode
    and ``start``/``stop`` (length 128) delimit each opcode's group.
    """
    n = len(TABLE)
    order = np.array(sorted(range(n), key=lambda i: (TABLE[i].opcode, i)), dtype=np.int64)
    start = np.zeros(128, dtype=np.int64)
    stop = np.zeros(128, dtype=np.int64)
    for pos, i in enumerate(order):
        op = TABLE[i].opcode
        if stop[op] == 0:
            start[op] = pos
        stop[op] = pos + 1
    return {
        "match": np.array([t.match for t in TABLE], dtype=np.int64),
        "mask": np.array([t.mask for t in TABLE], dtype=np.int64),
        "fmt": np.array([FORMATS.index(t.fmt) for t in TABLE], dtype=np.int64),
        "cls": np.array([CLASSES.index(t.cls) for t in TABLE], dtype=np.int64),
        "use": np.array([_FORMAT_USE[t.fmt] for t in TABLE], dtype=np.int64),
        "order": order,
        "start": start,
        "stop": stop,
    }
