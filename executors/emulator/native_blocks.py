"""Discovery for the ``native`` backend: the guest's code as blocks, and
the blocks as parts.

:func:`find_blocks` starts from the *seeds* (the entry point, plus any pc
the runtime later reports as missed) and follows control flow through
the program's executable segments (read-only ones always; writable ones
on the main execution, as they are in memory then), decoding with the
shared ISA table (:func:`hetflow.executors.emulator.isa.decode_insn`).
Branch targets, fall-throughs after a branch, jump targets, return
addresses (the instruction after a ``jal``/``jalr`` that links) and the
instruction after anything it does not translate become *leaders*; a
*block* runs from a leader to the next leader, a control transfer, an
instruction it does not translate, or :data:`MAX_BLOCK` instructions.
Translated: every ALU and M op, loads, stores, branches, ``jal``,
``jalr`` and the no-op fences and ``wfi``.  Not translated (the block
ends before it and the interpreter runs it): ``ecall``, ``ebreak``,
``mret``, CSR instructions, atomics, illegal words, and any instruction
outside an executable segment or crossing its end.

:func:`parts` cuts the blocks into the runs that become one LLVM
function each (:mod:`.native_translate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .elf import PERM_W, PERM_X
from .isa import CLASSES, TABLE, decode_insn

__all__ = ["Insn", "Block", "find_blocks", "parts", "TRANSLATED", "MAX_BLOCK", "PART_INSNS"]

#: at most this many instructions a block: a chunk boundary inside a block leaves the steps before it to
#: the interpreter, so shorter blocks cost fewer interpreted steps per chunk (SHA-256 of 1 MiB: 0.107 s at 64,
#: 0.088 s at 16) for one more compare per 16 instructions
MAX_BLOCK = 16
#: instructions per part (one LLVM function each); :func:`parts` reads it when called
PART_INSNS = 64

_ALU = set("lui auipc addi slti sltiu xori ori andi slli srli srai add sub sll slt sltu xor srl sra or and "
           "addiw slliw srliw sraiw addw subw sllw srlw sraw "
           "mul mulh mulhsu mulhu div divu rem remu mulw divw divuw remw remuw".split())
_LOADS = {"lb": (1, "s"), "lh": (2, "s"), "lw": (4, "s"), "ld": (8, ""), "lbu": (1, "z"), "lhu": (2, "z"),
          "lwu": (4, "z")}
_STORES = {"sb": 1, "sh": 2, "sw": 4, "sd": 8}
_BRANCHES = {"beq": "eq", "bne": "ne", "blt": "slt", "bge": "sge", "bltu": "ult", "bgeu": "uge"}
_NOPS = {"fence", "fence.i", "wfi"}
TRANSLATED = _ALU | set(_LOADS) | set(_STORES) | set(_BRANCHES) | _NOPS | {"jal", "jalr"}


@dataclass(frozen=True)
class Insn:
    pc: int
    name: str
    rd: int
    rs1: int
    rs2: int
    imm: int
    size: int
    cls: int            # index into CLASSES
    hslot: int          # histogram slot of this pc
    fetch: int = -1     # in writable code: the flat-memory offset of pc's aligned word (fetches are recorded)
    word: int = 0       # the raw instruction (a compressed one's 16-bit parcel) and its row of the ISA table:
    op: int = -1        # what a witness row records


@dataclass(frozen=True)
class Block:
    pc: int
    insns: tuple[Insn, ...]


def _code_reader(regions, rslot, offs=None, excluded=frozenset()):
    """fetch(pc) -> (raw instruction, histogram slot, fetch offset) from
    read-only executable regions, and from writable executable ones when
    their flat-memory offsets ``offs`` are given (fetch offset -1 for
    read-only code), or None where the interpreter must fetch (and in the
    pages of flat memory listed in ``excluded``)."""
    code = []
    for i, (r, s) in enumerate(zip(regions, rslot)):
        if r.perm & (PERM_W | PERM_X) == PERM_X:
            code.append((r.base, r.data, s, -1))
        elif r.perm & PERM_X and offs is not None:
            code.append((r.base, r.data, s, offs[i]))

    def fetch(pc):
        for base, data, slot, off in code:
            d = pc - base
            if 0 <= d <= len(data) - 2:
                at = -1 if off < 0 else off + (d & ~7)
                if at >= 0 and ((off + d) >> 12 in excluded or (off + d + 2) >> 12 in excluded):
                    return None
                lo = int.from_bytes(data[d:d + 2], "little")
                if lo & 3 != 3:
                    return lo, slot + d // 2, at
                if d + 4 > len(data) or (at >= 0 and (off + d + 3) >> 12 in excluded):
                    return None
                return int.from_bytes(data[d:d + 4], "little"), slot + d // 2, at
        return None
    return fetch


def find_blocks(regions, rslot, seeds, offs=None, excluded=frozenset(), rvc: bool = True) -> list[Block]:
    """The blocks reachable from ``seeds`` in the read-only executable
    regions (``rslot``: each region's first histogram slot), and in the
    writable executable ones when their flat-memory offsets ``offs`` are
    given, except in the flat-memory pages ``excluded`` (see
    :func:`_code_reader`).

    >>> from hetflow.executors.emulator.machine import Region
    >>> code = bytes.fromhex("13051000" "9308d005" "73000000")   # li a0,1; li a7,93; ecall
    >>> [(hex(b.pc), [i.name for i in b.insns]) for b in find_blocks([Region("t", 0x1000, 12, 5, code)], [0], [0x1000])]
    [('0x1000', ['addi', 'addi'])]
    """
    fetch = _code_reader(regions, rslot, offs, excluded)
    insns: dict[int, Insn | None] = {}
    leaders: set[int] = set()
    work = list(seeds)
    leaders.update(work)
    while work:
        pc = work.pop()
        while pc not in insns:
            got = fetch(pc)
            # without rvc (rv64ima) a 16-bit parcel is left to the interpreter, which traps on it
            d = decode_insn(got[0]) if got and (rvc or got[0] & 3 == 3) else None
            name = TABLE[d.op].name if d is not None else None
            if name not in TRANSLATED:
                insns[pc] = None
                if name is not None and name not in ("mret", "ebreak"):
                    leaders.add(pc + d.size)          # where the interpreter hands back
                    work.append(pc + d.size)
                break
            ins = Insn(pc, name, d.rd, d.rs1, d.rs2, d.imm, d.size, CLASSES.index(TABLE[d.op].cls), got[1], got[2],
                       got[0], d.op)
            insns[pc] = ins
            nxt = pc + d.size
            if name in _BRANCHES:
                for t in (pc + d.imm, nxt):
                    leaders.add(t)
                    work.append(t)
                break
            if name == "jal":
                leaders.add(pc + d.imm)
                work.append(pc + d.imm)
                if d.rd:
                    leaders.add(nxt)
                    work.append(nxt)
                break
            if name == "jalr":
                if d.rd:
                    leaders.add(nxt)
                    work.append(nxt)
                break
            pc = nxt
    # Two decodings of the same bytes can meet again: a jump into the second half of a 4-byte instruction reads
    # a compressed one there, after which both run on through the same pc. Each instruction belongs to one
    # block (its label is unique in a part), so such a meeting point starts a block of its own.
    falls_into: dict[int, int] = {}
    for pc, ins in insns.items():
        if ins is not None and ins.name not in _BRANCHES and ins.name not in ("jal", "jalr"):
            falls_into[pc + ins.size] = falls_into.get(pc + ins.size, 0) + 1
    leaders.update(pc for pc, n in falls_into.items() if n > 1)
    blocks = []
    starts = sorted(p for p in leaders if insns.get(p) is not None)
    while starts:
        start = starts.pop()
        body, pc = [], start
        while True:
            ins = insns.get(pc)
            if ins is None or (body and pc in leaders):
                break
            if len(body) == MAX_BLOCK:            # a long run goes on in a block of its own
                leaders.add(pc)
                starts.append(pc)
                break
            body.append(ins)
            if ins.name in _BRANCHES or ins.name in ("jal", "jalr"):
                break
            pc += ins.size
        blocks.append(Block(start, tuple(body)))
    return sorted(blocks, key=lambda b: b.pc)


def parts(blocks: list[Block], size: int | None = None) -> list[list[Block]]:
    """The blocks in address order, cut into runs that each become one
    function: the blocks that start in one aligned window of ``4 * size``
    bytes (so that a translation that adds blocks in one window leaves the
    others' functions as they were).  A run is not cut inside
    a loop (between a backward branch or jump and its target) of up to
    about twice ``size`` instructions, so a loop's blocks branch to each
    other directly.  ``size`` defaults to :data:`PART_INSNS`."""
    size = size or PART_INSNS
    blocks = sorted(blocks, key=lambda b: b.pc)
    loops = []
    for b in blocks:
        last = b.insns[-1]
        target = last.pc + last.imm
        if (last.name in _BRANCHES or (last.name == "jal" and not last.rd)) and 0 <= b.pc - target <= 8 * size:
            loops.append((target, b.pc))
    inside = []                              # merged (first, last) pcs of loops
    for lo, hi in sorted(loops):
        if inside and lo <= inside[-1][1] and max(hi, inside[-1][1]) - inside[-1][0] <= 8 * size:
            inside[-1] = (inside[-1][0], max(hi, inside[-1][1]))
        else:
            inside.append((lo, hi))
    out, window, k = [], None, 0
    for b in blocks:
        while k < len(inside) and inside[k][1] < b.pc:
            k += 1
        in_loop = k < len(inside) and inside[k][0] < b.pc <= inside[k][1]
        if not out or (b.pc // (4 * size) != window and not in_loop):
            out.append([])
        window = b.pc // (4 * size)
        out[-1].append(b)
    return out
