import random

import numpy as np
import pytest

from hetflow.executors.emulator import fast, isa, reference


def test_table_has_no_overlapping_encodings():
    t = isa.TABLE
    for i in range(len(t)):
        for j in range(i + 1, len(t)):
            common = t[i].mask & t[j].mask
            assert (t[i].match ^ t[j].match) & common != 0, f"{t[i].name} and {t[j].name} overlap"


def test_table_covers_rv64ima_zicsr_zifencei():
    names = set(isa.BY_NAME)
    assert len(names) == len(isa.TABLE)
    for n in ["lui", "auipc", "jal", "jalr", "ld", "sd", "lwu", "addiw", "sraw", "fence", "fence.i", "ecall",
              "ebreak", "mret", "wfi", "csrrci", "mulhsu", "remuw", "lr.w", "sc.d", "amomaxu.d"]:
        assert n in names
    assert len([n for n in names if n.startswith(("lr.", "sc.", "amo"))]) == 22
    assert set(reference.SEMANTICS) == names


def test_both_decoders_agree():
    rng = random.Random(5)
    words = [ins.match for ins in isa.TABLE] + [rng.getrandbits(32) for _ in range(20000)]
    words += [ins.match | (rng.getrandbits(32) & ~ins.mask & 0xFFFFFFFF) for ins in isa.TABLE for _ in range(50)]
    words += [ins.match for ins in isa.C_TABLE] + list(range(0, 1 << 16, 7))
    arr = isa.decode_arrays()
    ctab = isa.compressed_arrays()
    dc = np.zeros((1, 8), dtype=np.int32)
    row = dc[0]
    for w in words:
        d = isa.decode_insn(w)
        fast._decode(w, arr["match"], arr["mask"], arr["fmt"], arr["order"], arr["start"], arr["stop"], dc, 0, ctab)
        if d is None:
            assert row[1] == -1, hex(w)
        else:
            assert tuple(int(v) for v in row[1:7]) == tuple(d), (hex(w), isa.TABLE[d.op].name)


def test_decode_examples():
    assert isa.TABLE[isa.decode(0x00A58533).op].name == "add"
    d = isa.decode(0xFFF00513)          # addi a0, x0, -1
    assert isa.TABLE[d.op].name == "addi" and d.rd == 10 and d.imm == -1
    assert isa.decode(0) is None


def test_compressed_table_order():
    # first match wins: a line may only overlap lines after it, and only
    # where it is the more specific (its mask covers the later one's)
    t = isa.C_TABLE
    for i in range(len(t)):
        for j in range(i + 1, len(t)):
            common = t[i].mask & t[j].mask
            if (t[i].match ^ t[j].match) & common == 0:
                assert t[i].mask & t[j].mask == t[j].mask and t[i].mask != t[j].mask, (t[i].name, t[j].name)
        assert t[i].match & 3 != 3 and t[i].mask & 3 == 3, t[i].name


def test_every_parcel_decodes_alike_in_both_forms():
    table = isa.compressed_arrays()
    for p in range(1 << 16):
        d = isa.decode_compressed(p) if p & 3 != 3 else None
        if d is None:
            assert table[p, 0] == -1, hex(p)
        else:
            assert tuple(int(v) for v in table[p]) == tuple(d[:5]) and d.size == 2, hex(p)


@pytest.mark.parametrize("parcel, expected", [
    (0x0000, None),                             # all zeros: c.addi4spn with nzuimm = 0
    (0x0040, ("addi", 8, 2, 0, 4)),             # c.addi4spn s0, sp, 4
    (0x6101, None),                             # c.addi16sp with nzimm = 0: reserved
    (0x7101, ("addi", 2, 2, 0, -512)),          # c.addi16sp sp, -512
    (0x6105, ("addi", 2, 2, 0, 32)),            # c.addi16sp sp, 32
    (0x6505, ("lui", 10, 0, 0, 1 << 12)),       # c.lui a0, 1
    (0x7541, ("lui", 10, 0, 0, -16 << 12)),     # c.lui a0, 0xffff0: nzimm sign-extends from bit 17
    (0x6501, None),                             # c.lui with nzimm = 0: reserved
    (0x4002, None),                             # c.lwsp with rd = x0: reserved
    (0x6002, None),                             # c.ldsp with rd = x0: reserved
    (0x8082, ("jalr", 0, 1, 0, 0)),             # c.jr ra (ret)
    (0x8002, None),                             # c.jr with rs1 = x0: reserved
    (0x9502, ("jalr", 1, 10, 0, 0)),            # c.jalr a0
    (0x9002, ("ebreak", 0, 0, 0, 0)),           # c.ebreak
    (0x852E, ("add", 10, 0, 11, 0)),            # c.mv a0, a1
    (0x952E, ("add", 10, 10, 11, 0)),           # c.add a0, a1
    (0x2001, None),                             # c.addiw with rd = x0: reserved
    (0x2000, None),                             # c.fld: no D extension
    (0x9C21, ("addw", 8, 8, 8, 0)),             # c.addw s0, s0
    (0x9C41, None),                             # reserved CA form (100 1 11 ... 10 ... 01)
    (0x9C81, ("subw", 9, 9, 8, 0)),             # c.subw s1, s0
    (0x0001, ("addi", 0, 0, 0, 0)),             # c.nop
    (0x0002, ("slli", 0, 0, 0, 0)),             # c.slli x0, 0: a HINT, executes as a no-op
    (0xBFFD, ("jal", 0, 0, 0, -2)),             # c.j -2
    (0xFC7D, ("bne", 0, 8, 0, -2)),             # c.bnez s0, -2
    (0x4108, ("lw", 10, 10, 0, 0)),             # c.lw a0, 0(a0)
    (0xE188, ("sd", 0, 11, 10, 0)),             # c.sd a0, 0(a1)
    (0xFC2A, ("sd", 0, 2, 10, 56)),             # c.sdsp a0, 56(sp)
])
def test_compressed_edge_encodings(parcel, expected):
    d = isa.decode_compressed(parcel)
    if expected is None:
        assert d is None
    else:
        assert (isa.TABLE[d.op].name, d.rd, d.rs1, d.rs2, d.imm) == expected
