"""The fast backend's fast path (code in a read-only segment) against the
reference, and the per-process image cache.

The committed ISA tests run from a writable segment, so the fast backend
executes them in its general step; random programs in an r-x segment
exercise the fast path with every ALU and M op, every load and store
width (misaligned ones included) and taken and untaken branches and
jumps.  With small ``chunk_steps`` every min trace's start state holds all
registers, so reference == fast compares the state every few steps.
"""

import random

import numpy as np
import pytest

from hetflow.executors.emulator import (execute, fast, mem_ops_from_min_traces, mem_plans_from_min_traces,
                                       rom_histogram_from_min_traces)
from hetflow.executors.emulator.elf import PERM_R, PERM_X, Program, Segment
from hetflow.executors.emulator.isa import BY_NAME, TABLE

from _guests import guest

BASE = 0x8000_0000
EDGES = [0, 1, -1, 2, -2, 31, 32, 63, 64, 0x7FFF_FFFF, -0x8000_0000, 0xFFFF_FFFF, 0x8000_0000,
         (1 << 63) - 1, -(1 << 63), 0x1234_5678_9ABC_DEF0, -0x1234_5678]


def enc(name, rd=0, rs1=0, rs2=0, imm=0):
    ins = TABLE[BY_NAME[name]]
    w = ins.match
    if ins.fmt in ("R", "I", "SH6", "SH5", "U", "J"):
        w |= rd << 7
    if ins.fmt in ("R", "I", "SH6", "SH5", "S", "B"):
        w |= rs1 << 15
    if ins.fmt in ("R", "S", "B"):
        w |= rs2 << 20
    if ins.fmt == "I":
        w |= (imm & 0xFFF) << 20
    elif ins.fmt in ("SH6", "SH5"):
        w |= imm << 20
    elif ins.fmt == "S":
        w |= ((imm >> 5) & 0x7F) << 25 | (imm & 0x1F) << 7
    elif ins.fmt == "B":
        w |= ((imm >> 12) & 1) << 31 | ((imm >> 5) & 0x3F) << 25 | ((imm >> 1) & 0xF) << 8 | ((imm >> 11) & 1) << 7
    elif ins.fmt == "U":
        w |= imm & 0xFFFFF000
    elif ins.fmt == "J":
        w |= ((imm >> 20) & 1) << 31 | ((imm >> 1) & 0x3FF) << 21 | ((imm >> 11) & 1) << 20 | ((imm >> 12) & 0xFF) << 12
    assert w & ins.mask == ins.match, name
    return w


ALU_R = "add sub sll slt sltu xor srl sra or and addw subw sllw srlw sraw".split()
ALU_I = "addi slti sltiu xori ori andi addiw".split()
SHIFT6, SHIFT5 = "slli srli srai".split(), "slliw srliw sraiw".split()
MULDIV = "mul mulh mulhsu mulhu div divu rem remu mulw divw divuw remw remuw".split()
LOADS, STORES = "lb lh lw ld lbu lhu lwu".split(), "sb sh sw sd".split()
BRANCHES = "beq bne blt bge bltu bgeu".split()


def random_program(seed, n=1500, rounds=4):
    """A random loop body in one r-x segment, run ``rounds`` times (the
    fast path takes an instruction from its second execution on: the
    first decodes it), and an input that seeds the registers.  x2 = sp
    stays the base of every load and store; x31 counts the rounds."""
    rng = random.Random(seed)
    regs = [r for r in range(31) if r != 2]
    values = [rng.choice(EDGES) if rng.random() < 0.4 else rng.getrandbits(64) for _ in range(32)]
    inp = b"".join((v & ((1 << 64) - 1)).to_bytes(8, "little") for v in values)
    code = [enc("ld", rd=r, rs1=10, imm=8 + 8 * r) for r in regs if r != 10] + [enc("ld", rd=10, rs1=10, imm=88)]
    code.append(enc("addi", 31, 0, imm=rounds))
    top = len(code)
    n += top
    rd = lambda: rng.choice(regs)  # noqa: E731
    rs = lambda: rng.randrange(32)  # noqa: E731
    while len(code) < n:
        kind = rng.random()
        if kind < 0.3:
            code.append(enc(rng.choice(ALU_R), rd(), rs(), rs()))
        elif kind < 0.45:
            imm = rng.choice([0, 1, -1, 2047, -2048, rng.randrange(-2048, 2048)])
            code.append(enc(rng.choice(ALU_I), rd(), rs(), imm=imm))
        elif kind < 0.55:
            name = rng.choice(SHIFT6 + SHIFT5)
            code.append(enc(name, rd(), rs(), imm=rng.randrange(64 if name in SHIFT6 else 32)))
        elif kind < 0.58:
            code.append(enc(rng.choice(["lui", "auipc"]), rd(), imm=rng.getrandbits(32)))
        elif kind < 0.7:
            code.append(enc(rng.choice(MULDIV), rd(), rs(), rs()))
        elif kind < 0.8:
            code.append(enc(rng.choice(STORES), rs1=2, rs2=rs(), imm=-rng.randrange(8, 200)))
        elif kind < 0.9:
            code.append(enc(rng.choice(LOADS), rd(), rs1=2, imm=-rng.randrange(8, 200)))
        elif kind < 0.96:                 # skips the filler after it when taken
            code += [enc(rng.choice(BRANCHES), rs1=rs(), rs2=rs(), imm=8), enc("addi", rd(), rs(), imm=1)]
        elif kind < 0.98:
            code += [enc("jal", rd(), imm=8), enc("addi", rd(), rs(), imm=1)]
        else:                             # auipc t; jalr rd, 12(t): skips the filler
            t = rng.choice(regs[1:])
            code += [enc("auipc", t), enc("jalr", rd(), t, imm=12), enc("addi", rd(), rs(), imm=1)]
    code += [enc("addi", 31, 31, imm=-1), enc("beq", rs1=31, rs2=0, imm=8)]
    code.append(enc("jal", 0, imm=4 * (top - len(code))))
    code += [enc("addi", 17, 0, imm=93), enc("ecall")]
    text = b"".join(w.to_bytes(4, "little") for w in code)
    return Program(f"random-{seed}", BASE, (Segment(BASE, text, PERM_R | PERM_X),)), inp


@pytest.mark.parametrize("seed,chunk", [(0, 2), (1, 3), (2, 5), (3, 8)])
def test_fast_path_matches_reference_every_few_steps(seed, chunk):
    # each call of the compiled loop starts in its general step, so chunks
    # of one step would never reach the fast path
    prog, inp = random_program(seed)
    ref = execute(prog, backend="reference", input=inp, chunk_steps=chunk, runners=False)
    fst = execute(prog, backend="fast", input=inp, chunk_steps=chunk, runners=False)
    assert ref.steps == fst.steps > 4 * 1200
    assert ref.same_result(fst) == []


def test_fast_path_chunked_and_replayed():
    prog, inp = random_program(7, n=3000, rounds=6)
    ref = execute(prog, backend="reference", input=inp, chunk_steps=333, runners=False)
    fst = execute(prog, backend="fast", input=inp, chunk_steps=333, runners=False)
    assert ref.same_result(fst) == []
    for i, t in enumerate(fst.min_traces[:-1]):
        state, counts, _ = fast.replay_chunk(prog, t, len(inp))
        assert state == fst.min_traces[i + 1].start_state
        assert list(counts) == list(fst.counters.table[i])


def test_fast_path_mem_ops_and_rom_histogram_match_reference_path():
    # MO and RH log from the fast path too; the reference path derives both
    # from the min traces
    prog, inp = random_program(11, n=1200, rounds=3)
    ref = execute(prog, backend="reference", input=inp, chunk_steps=500)
    ops = fast.mem_ops_runner(fast.image_of(prog, inp, len(inp)), prog, 1 << 20)
    assert np.array_equal(ops, mem_ops_from_min_traces(prog, ref.min_traces, len(inp)))
    out = execute(prog, backend="fast", input=inp, chunk_steps=500, mem_plan_rows=128)
    assert out.backend.await_mem_plans() == mem_plans_from_min_traces(prog, ref.min_traces, len(inp),
                                                                      rows_per_plan=128)
    hist = out.backend.await_rom_histogram()
    assert hist == rom_histogram_from_min_traces(prog, ref.min_traces, len(inp))
    assert int(hist.counts.max()) == 3


@pytest.mark.parametrize("name", ["isa_smc", "sort"])
def test_cached_image_is_never_written(name):
    # runs share one image per (program, input); a run that stores into its
    # data or code must not leave a trace in it
    p = guest(name)
    first = execute(p, backend="fast", chunk_steps=4096)
    shared = fast.image_of(p, b"", 0)
    assert np.array_equal(shared.mem, fast.Image(p, b"", 0).mem)
    second = execute(p, backend="fast", chunk_steps=4096)
    assert first.same_result(second) == []
    assert fast.image_of(p, b"", 0) is shared


def test_min_trace_arrays_are_exact_and_own_their_data():
    out = execute(guest("sort"), backend="fast", chunk_steps=4096, runners=False)
    reads = [t.mem_reads for t in out.min_traces]
    assert all(r.dtype == np.uint64 and r.flags.owndata and r.base is None for r in reads)
    assert sum(len(r) for r in reads) > 0
    before = reads[1].copy()
    reads[0][:] = 0
    assert np.array_equal(reads[1], before)


def test_unhashable_program_still_runs():
    p = guest("fib")
    listed = Program(p.name, p.entry, list(p.segments), p.tohost)
    assert execute(listed, backend="fast", runners=False).same_result(execute(p, backend="fast", runners=False)) == []
