import random

import numpy as np

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
    arr = isa.decode_arrays()
    dc = np.zeros((1, 8), dtype=np.int64)
    row = dc[0]
    for w in words:
        d = isa.decode(w)
        fast._decode(w, arr["match"], arr["mask"], arr["fmt"], arr["order"], arr["start"], arr["stop"], dc, 0)
        if d is None:
            assert row[1] == -1, hex(w)
        else:
            assert tuple(int(v) for v in row[1:6]) == tuple(d), (hex(w), isa.TABLE[d.op].name)


def test_decode_examples():
    assert isa.TABLE[isa.decode(0x00A58533).op].name == "add"
    d = isa.decode(0xFFF00513)          # addi a0, x0, -1
    assert isa.TABLE[d.op].name == "addi" and d.rd == 10 and d.imm == -1
    assert isa.decode(0) is None
