"""The RV64IMAC + Zicsr + Zifencei instruction set, as one table.

One line per instruction, in the spirit of riscv-opcodes: the name, the
encoding format, the bit pattern (``0``/``1`` fixed, ``.`` free; bit 31 on
the left), and the operation class that the per-chunk counters use.  The
pattern compiles into ``match``/``mask``: a 32-bit word ``w`` is that
instruction when ``w & mask == match``.  Both backends decode from this
table: the reference backend through :func:`decode`, the fast backend
through :func:`decode_arrays` (the same table as numpy arrays, with an
index per major opcode).  ``tests/emulator/test_emu_isa.py`` checks that no
two entries can match the same word.

The C extension is a second, smaller table (:data:`C_TABLE`): one line
per 16-bit form with its pattern (bit 15 on the left), the base
instruction it stands for and where that instruction's operands come
from.  A compressed parcel decodes *into the main table*: its
:class:`Decoded` has the base instruction's op id and ``size`` 2, so both
backends execute one set of semantics and the counters, witness rows and
histograms never see a separate compressed opcode ("each RVC instruction
expands into a single base instruction", RISC-V unprivileged ISA, "C"
extension).  Lines are tried in order and the first that matches wins;
a line may overlap only lines after it, and only where it is the more
specific.  A line whose base is ``None`` marks a reserved encoding, and
``nonzero`` names an operand the encoding reserves when zero (all-zero
``c.addi4spn``, ``c.lwsp`` with rd = x0, ...): both decode to ``None``,
an illegal instruction.  The F/D forms (c.fld, c.fsd, c.fldsp, c.fsdsp)
have no line: without F and D they are illegal too.

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

import functools
from .tuples import FieldTuple, getters

__all__ = [
    "CLASSES",
    "FORMATS",
    "Instr",
    "TABLE",
    "BY_NAME",
    "Decoded",
    "decode",
    "decode_arrays",
    "CInstr",
    "C_TABLE",
    "decode_compressed",
    "compressed_arrays",
    "instruction_size",
    "decode_insn",
    "sign_extend",
    "USE_RS1",
    "USE_RS2",
    "USE_RD",
    "operand_use",
]

#: operation classes of the per-chunk counters, in counter-column order
CLASSES = ("alu", "muldiv", "load", "store", "branch", "jump", "csr", "atomic", "system")
FORMATS = ("R", "I", "SH6", "SH5", "S", "B", "U", "J", "CSR", "CSRI", "A", "N")


# a FieldTuple, not typing's NamedTuple nor a namedtuple: ``hetflow emulate`` starts without the typing module
# (3 ms) and without compiling a namedtuple's __new__ (0.1 ms a class)
class Instr(FieldTuple):
    # name: str; fmt: str (FORMATS); match: int; mask: int; cls: str (CLASSES)
    __slots__ = ()
    _fields = ("name", "fmt", "match", "mask", "cls")
    name, fmt, match, mask, cls = getters(5)

    def __new__(cls, name, fmt, match, mask, cls_):
        return tuple.__new__(cls, (name, fmt, match, mask, cls_))

    @property
    def opcode(self) -> int:
        return self.match & 0x7F


def _pattern(bits: str) -> tuple[int, int]:
    bits = bits.replace(" ", "")
    if len(bits) != 32 or set(bits) - set("01."):
        raise ValueError(f"bad encoding pattern {bits!r}")
    # int() reads the bits at C speed: the table is built at every start of ``hetflow emulate``
    return int(bits.replace(".", "0"), 2), int(bits.replace("0", "1").replace(".", "0"), 2)


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


class Decoded(FieldTuple):
    # op: int, index into TABLE; rd, rs1, rs2, imm: int; size: int, bytes: 2 for a compressed parcel
    __slots__ = ()
    _fields = ("op", "rd", "rs1", "rs2", "imm", "size")
    op, rd, rs1, rs2, imm, size = getters(6)

    def __new__(cls, op, rd, rs1, rs2, imm, size=4):
        return tuple.__new__(cls, (op, rd, rs1, rs2, imm, size))


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


def decode_arrays() -> dict:
    """The table as numpy arrays, for compiled decoders.

    ``match``, ``mask``, ``fmt`` (index into FORMATS), ``cls`` (index into
    CLASSES), ``use`` (:func:`operand_use`) per row; ``order`` lists row indices grouped by major opcode
    and ``start``/``stop`` (length 128) delimit each opcode's group.
    """
    import numpy as np               # only compiled decoders need it: the interpreters start without it

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


# --------------------------------------------------------------------------
# C: the compressed forms

def _bits(p, hi: int, lo: int):
    """p[hi:lo]; works on a Python int and elementwise on an int64 array."""
    return (p >> lo) & ((1 << (hi - lo + 1)) - 1)


def _sext(v, bits: int):
    """Sign-extend the low ``bits`` bits (an int or an int64 array)."""
    sign = 1 << (bits - 1)
    return ((v & ((1 << bits) - 1)) ^ sign) - sign


# where a compressed form's operands come from: rd', rs1', rs2' are
# x8..x15 ("the eight most popular registers"), r = inst[11:7], r2 = inst[6:2]
_C_REGS = {
    "r": lambda p: _bits(p, 11, 7),
    "r2": lambda p: _bits(p, 6, 2),
    "r'": lambda p: 8 + _bits(p, 9, 7),        # rs1'/rd' of CL, CS, CA, CB
    "r2'": lambda p: 8 + _bits(p, 4, 2),       # rd' of CIW/CL, rs2' of CS/CA
}

# the immediates, bit by bit as the spec's format tables scatter them
_C_IMMS = {
    "0": lambda p: p & 0,
    "addi4spn": lambda p: _bits(p, 12, 11) << 4 | _bits(p, 10, 7) << 6 | _bits(p, 6, 6) << 2 | _bits(p, 5, 5) << 3,
    "lw": lambda p: _bits(p, 12, 10) << 3 | _bits(p, 6, 6) << 2 | _bits(p, 5, 5) << 6,
    "ld": lambda p: _bits(p, 12, 10) << 3 | _bits(p, 6, 5) << 6,
    "i6": lambda p: _sext(_bits(p, 12, 12) << 5 | _bits(p, 6, 2), 6),
    "u6": lambda p: _bits(p, 12, 12) << 5 | _bits(p, 6, 2),
    "addi16sp": lambda p: _sext(_bits(p, 12, 12) << 9 | _bits(p, 6, 6) << 4 | _bits(p, 5, 5) << 6
                                | _bits(p, 4, 3) << 7 | _bits(p, 2, 2) << 5, 10),
    "lui": lambda p: _sext(_bits(p, 12, 12) << 17 | _bits(p, 6, 2) << 12, 18),
    "j": lambda p: _sext(_bits(p, 12, 12) << 11 | _bits(p, 11, 11) << 4 | _bits(p, 10, 9) << 8
                         | _bits(p, 8, 8) << 10 | _bits(p, 7, 7) << 6 | _bits(p, 6, 6) << 7
                         | _bits(p, 5, 3) << 1 | _bits(p, 2, 2) << 5, 12),
    "b": lambda p: _sext(_bits(p, 12, 12) << 8 | _bits(p, 11, 10) << 3 | _bits(p, 6, 5) << 6
                         | _bits(p, 4, 3) << 1 | _bits(p, 2, 2) << 5, 9),
    "lwsp": lambda p: _bits(p, 12, 12) << 5 | _bits(p, 6, 4) << 2 | _bits(p, 3, 2) << 6,
    "ldsp": lambda p: _bits(p, 12, 12) << 5 | _bits(p, 6, 5) << 3 | _bits(p, 4, 2) << 6,
    "swsp": lambda p: _bits(p, 12, 9) << 2 | _bits(p, 8, 7) << 6,
    "sdsp": lambda p: _bits(p, 12, 10) << 3 | _bits(p, 9, 7) << 6,
}


class CInstr(FieldTuple):
    """One compressed form: ``base`` is the TABLE instruction it stands for
    (None: a reserved encoding); rd/rs1/rs2 are a key of the register
    fields or a fixed register number; imm a key of the immediates."""

    __slots__ = ()
    _fields = ("name", "match", "mask", "base", "rd", "rs1", "rs2", "imm", "nonzero")
    name, match, mask, base, rd, rs1, rs2, imm, nonzero = getters(9)

    def __new__(cls, name, match, mask, base, rd, rs1, rs2, imm, nonzero):
        return tuple.__new__(cls, (name, match, mask, base, rd, rs1, rs2, imm, nonzero))
    # name: str; match: int; mask: int; base: str | None; rd, rs1, rs2: str | int; imm: str; nonzero: str | None


def _c_pattern(bits: str) -> tuple[int, int]:
    bits = bits.replace(" ", "")
    if len(bits) != 16 or set(bits) - set("01."):
        raise ValueError(f"bad compressed pattern {bits!r}")
    return _pattern("0" * 16 + bits)


#         name          pattern (bit 15 ... bit 0)   base     rd     rs1    rs2    imm         nonzero
_C_ROWS = [
    # quadrant 0
    ("c.addi4spn", "000 ........ ... 00",       "addi",  "r2'", 2,     0,     "addi4spn", "imm"),
    ("c.lw",       "010 ... ... .. ... 00",     "lw",    "r2'", "r'",  0,     "lw",       None),
    ("c.ld",       "011 ... ... .. ... 00",     "ld",    "r2'", "r'",  0,     "ld",       None),
    ("c.sw",       "110 ... ... .. ... 00",     "sw",    0,     "r'",  "r2'", "lw",       None),
    ("c.sd",       "111 ... ... .. ... 00",     "sd",    0,     "r'",  "r2'", "ld",       None),
    # quadrant 1 (c.addi with rd = x0 is c.nop; nonzero-immediate rules there are HINTs, not reserved)
    ("c.addi",     "000 . ..... ..... 01",      "addi",  "r",   "r",   0,     "i6",       None),
    ("c.addiw",    "001 . ..... ..... 01",      "addiw", "r",   "r",   0,     "i6",       "rd"),
    ("c.li",       "010 . ..... ..... 01",      "addi",  "r",   0,     0,     "i6",       None),
    ("reserved",   "011 0 00010 00000 01",      None,    0,     0,     0,     "0",        None),   # c.addi16sp 0
    ("c.addi16sp", "011 . 00010 ..... 01",      "addi",  2,     2,     0,     "addi16sp", None),
    ("c.lui",      "011 . ..... ..... 01",      "lui",   "r",   0,     0,     "lui",      "imm"),
    ("c.srli",     "100 . 00 ... ..... 01",     "srli",  "r'",  "r'",  0,     "u6",       None),
    ("c.srai",     "100 . 01 ... ..... 01",     "srai",  "r'",  "r'",  0,     "u6",       None),
    ("c.andi",     "100 . 10 ... ..... 01",     "andi",  "r'",  "r'",  0,     "i6",       None),
    ("c.sub",      "100 0 11 ... 00 ... 01",    "sub",   "r'",  "r'",  "r2'", "0",        None),
    ("c.xor",      "100 0 11 ... 01 ... 01",    "xor",   "r'",  "r'",  "r2'", "0",        None),
    ("c.or",       "100 0 11 ... 10 ... 01",    "or",    "r'",  "r'",  "r2'", "0",        None),
    ("c.and",      "100 0 11 ... 11 ... 01",    "and",   "r'",  "r'",  "r2'", "0",        None),
    ("c.subw",     "100 1 11 ... 00 ... 01",    "subw",  "r'",  "r'",  "r2'", "0",        None),
    ("c.addw",     "100 1 11 ... 01 ... 01",    "addw",  "r'",  "r'",  "r2'", "0",        None),
    ("c.j",        "101 ........... 01",        "jal",   0,     0,     0,     "j",        None),
    ("c.beqz",     "110 ... ... ..... 01",      "beq",   0,     "r'",  0,     "b",        None),
    ("c.bnez",     "111 ... ... ..... 01",      "bne",   0,     "r'",  0,     "b",        None),
    # quadrant 2 (c.slli with rd = x0 or shamt = 0 is a HINT)
    ("c.slli",     "000 . ..... ..... 10",      "slli",  "r",   "r",   0,     "u6",       None),
    ("c.lwsp",     "010 . ..... ..... 10",      "lw",    "r",   2,     0,     "lwsp",     "rd"),
    ("c.ldsp",     "011 . ..... ..... 10",      "ld",    "r",   2,     0,     "ldsp",     "rd"),
    ("c.ebreak",   "100 1 00000 00000 10",      "ebreak", 0,    0,     0,     "0",        None),
    ("c.jr",       "100 0 ..... 00000 10",      "jalr",  0,     "r",   0,     "0",        "rs1"),
    ("c.jalr",     "100 1 ..... 00000 10",      "jalr",  1,     "r",   0,     "0",        None),
    ("c.mv",       "100 0 ..... ..... 10",      "add",   "r",   0,     "r2",  "0",        None),
    ("c.add",      "100 1 ..... ..... 10",      "add",   "r",   "r",   "r2",  "0",        None),
    ("c.swsp",     "110 . ..... ..... 10",      "sw",    0,     2,     "r2",  "swsp",     None),
    ("c.sdsp",     "111 . ..... ..... 10",      "sd",    0,     2,     "r2",  "sdsp",     None),
]


def _build_c() -> tuple[CInstr, ...]:
    rows = []
    for name, pattern, base, rd, rs1, rs2, imm, nonzero in _C_ROWS:
        assert base is None or base in BY_NAME, name
        assert all(isinstance(r, int) or r in _C_REGS for r in (rd, rs1, rs2)) and imm in _C_IMMS, name
        match, mask = _c_pattern(pattern)
        rows.append(CInstr(name, match, mask, base, rd, rs1, rs2, imm, nonzero))
    return tuple(rows)


#: the compressed forms, in decoding order (first match wins)
C_TABLE: tuple[CInstr, ...] = _build_c()


def _c_operands(row: CInstr, p):
    """(rd, rs1, rs2, imm) of compressed parcel(s) ``p`` under ``row``."""
    def reg(r):
        return r if isinstance(r, int) else _C_REGS[r](p)
    return reg(row.rd), reg(row.rs1), reg(row.rs2), _C_IMMS[row.imm](p)


def instruction_size(parcel: int) -> int:
    """Bytes of the instruction whose first 16-bit parcel is ``parcel``:
    2 unless its two low bits are 11.

    >>> instruction_size(0x4501), instruction_size(0x0513)   # c.li a0, 0 / addi ...
    (2, 4)
    """
    return 4 if parcel & 3 == 3 else 2


def decode_compressed(parcel: int) -> Decoded | None:
    """Decode a 16-bit parcel into the main table; ``None`` if illegal.

    >>> d = decode_compressed(0x4505)                  # c.li a0, 1
    >>> TABLE[d.op].name, d.rd, d.rs1, d.imm, d.size
    ('addi', 10, 0, 1, 2)
    >>> decode_compressed(0x0000) is None              # the all-zero parcel is illegal
    True
    """
    for row in C_TABLE:
        if parcel & row.mask == row.match:
            if row.base is None:
                return None
            rd, rs1, rs2, imm = _c_operands(row, parcel)
            if row.nonzero and {"rd": rd, "rs1": rs1, "imm": imm}[row.nonzero] == 0:
                return None
            return Decoded(BY_NAME[row.base], rd, rs1, rs2, imm, 2)
    return None


def compressed_arrays():
    """Every 16-bit parcel decoded at once, for compiled decoders: an
    (65536, 5) int64 array of ``[op, rd, rs1, rs2, imm]`` per parcel,
    op = -1 where the parcel is illegal or not compressed (low bits 11).
    Built from :data:`C_TABLE` with the same operand rules as
    :func:`decode_compressed`, elementwise."""
    import numpy as np

    p = np.arange(1 << 16, dtype=np.int64)
    out = np.zeros((1 << 16, 5), dtype=np.int64)
    out[:, 0] = -1
    todo = (p & 3) != 3
    for row in C_TABLE:
        hit = todo & ((p & row.mask) == row.match)
        todo &= ~hit
        if row.base is None:
            continue
        rd, rs1, rs2, imm = (np.broadcast_to(v, p.shape) for v in _c_operands(row, p))
        if row.nonzero:
            hit &= {"rd": rd, "rs1": rs1, "imm": imm}[row.nonzero] != 0
        out[hit, 0] = BY_NAME[row.base]
        out[hit, 1], out[hit, 2], out[hit, 3], out[hit, 4] = rd[hit], rs1[hit], rs2[hit], imm[hit]
    return out


@functools.lru_cache(maxsize=1 << 14)    # a program's instructions: decoded once each, not once per step
def decode_insn(insn: int) -> Decoded | None:
    """Decode a fetched instruction of either size (what a fetch returns:
    a 16-bit parcel or a 32-bit word).

    >>> [TABLE[decode_insn(i).op].name for i in (0x9002, 0x00100073)]   # c.ebreak, ebreak
    ['ebreak', 'ebreak']
    """
    return decode(insn) if insn & 3 == 3 else decode_compressed(insn & 0xFFFF)
