"""Compressed code met at run time under ``isa: rv64ima`` is an illegal instruction (issue 31).

The load-time check reads the ELF's RVC flag, but a file can say nothing
and still hold 16-bit parcels (hand-written assembly, ``.option rvc``, a
jump into the upper half of a word).  These guests are real RV64 programs,
encoded instruction by instruction into minimal ELF files with the RVC flag
clear (no RISC-V compiler is needed): each runs to ``exit(0)`` under
rv64imac only because its ``c.addi`` ran, and under rv64ima traps on that
parcel with the same step, pc, instruction and message on every backend.
"""

from __future__ import annotations

import io
import struct

import pytest

from hetflow.engine import cli
from hetflow.executors import emulator as emu

BASE = 0x8000_0000
BACKENDS = ("reference", "fast", "native")
A0, A7 = 10, 17
C_ADDI_A0_1 = 0x0505            # c.addi a0, 1: funct3 000, imm[5]=0, rd=a0, imm[4:0]=1, quadrant 01
C_NOP = 0x0001
ECALL = 0x73


def addi(rd, rs1, imm):
    return (imm & 0xFFF) << 20 | rs1 << 15 | rd << 7 | 0x13


def jal(rd, offset):
    o = offset & 0x1FFFFF
    return (((o >> 20) & 1) << 31 | ((o >> 1) & 0x3FF) << 21 | ((o >> 11) & 1) << 20 | ((o >> 12) & 0xFF) << 12
            | rd << 7 | 0x6F)


def elf(text: bytes, flags: int = 0) -> bytes:
    """A static RV64 executable: ``text`` as one r-x PT_LOAD at BASE, with ``e_flags`` (RVC clear by default)."""
    header, phsize = 64, 56
    phdr = struct.pack("<IIQQQQQQ", 1, 5, header + phsize, BASE, BASE, len(text), len(text), 8)
    ehdr = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 2, 243, 1, BASE, header, 0, flags,
                                                                 header, phsize, 1, 0, 0, 0)
    return ehdr + phdr + text + bytes(-len(text) % 8)


def words(*items) -> bytes:
    """Items as 32-bit words, except ``("c", parcel)`` as one 16-bit parcel."""
    return b"".join(struct.pack("<H", w[1]) if isinstance(w, tuple) else struct.pack("<I", w) for w in items)


# a0 = 5; c.addi a0, 1; c.nop (realigns); a0 -= 6; exit(a0): exits 0 only when the c.addi ran
INLINE = words(addi(A0, 0, 5), ("c", C_ADDI_A0_1), ("c", C_NOP), addi(A0, A0, -6), addi(A7, 0, 93), ECALL)
# a0 = 5; jump into the upper half of the next word, whose upper parcel is the c.addi (its lower half, an
# addi, is never run); a0 -= 6; exit(a0)
MIDWORD = words(addi(A0, 0, 5), jal(0, 6), C_ADDI_A0_1 << 16 | 0x0013, addi(A0, A0, -6), addi(A7, 0, 93), ECALL)
# (guest, step, pc of the c.addi)
CASES = {"inline": (INLINE, 1, BASE + 4), "midword": (MIDWORD, 2, BASE + 10)}
MESSAGE = ("unhandled trap: illegal instruction (mcause 2, mtval 0x505); compressed instructions are not in rv64ima "
           "(this 16-bit parcel would be one under rv64imac): declare isa rv64imac, or build with -march=rv64ima "
           "at pc {pc:#x}, instruction 0x00000505 (step {step})")


@pytest.fixture
def guest(tmp_path):
    def write(name: str) -> str:
        path = tmp_path / f"{name}.elf"
        path.write_bytes(elf(CASES[name][0]))
        return str(path)
    return write


@pytest.fixture(autouse=True)
def _own_native_cache(tmp_path, monkeypatch):
    # a translation left by another test (or another isa) must not decide what these runs translate
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path / "native"))


@pytest.mark.parametrize("name", CASES)
def test_under_rv64imac_the_parcel_runs(guest, name):
    program = emu.load_elf(guest(name))
    outs = [emu.execute(program, backend=b, runners=False) for b in BACKENDS]
    assert [o.exit_code for o in outs] == [0, 0, 0]
    assert outs[0].steps == 6
    assert not outs[0].same_result(outs[1]) and not outs[0].same_result(outs[2])


@pytest.mark.parametrize("name", CASES)
def test_under_rv64ima_the_parcel_is_an_illegal_instruction_on_every_backend(guest, name):
    path = guest(name)
    program = emu.load_elf(path, isa="rv64ima")                   # the RVC flag is clear: the load accepts it
    _, step, pc = CASES[name]
    for backend in BACKENDS:
        # rv64imac first: a translation of the parcel in the native cache must not serve the rv64ima run
        assert emu.execute(emu.load_elf(path), backend=backend, runners=False).exit_code == 0
        with pytest.raises(emu.GuestTrap) as failed:
            emu.execute(program, backend=backend, runners=False)
        e = failed.value
        assert (backend, e.cause, e.tval, e.pc, e.insn, e.step) == (backend, 2, C_ADDI_A0_1, pc, C_ADDI_A0_1, step)
        assert str(e) == MESSAGE.format(pc=pc, step=step), backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_hetflow_emulate_isa_rv64ima_fails_with_the_reason(guest, backend):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["emulate", guest("inline"), "--isa", "rv64ima", "--backend", backend, "--no-interpreter-start"],
                    out=out, err=err)
    assert code == 1
    assert err.getvalue().splitlines()[-1].endswith(MESSAGE.format(pc=BASE + 4, step=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_handler_gets_the_same_trap_under_rv64ima(backend, tmp_path):
    """With mtvec set the parcel's trap is the guest's to handle: mcause 2 and mtval the parcel, as on hardware
    without C; the handler exits with mcause + mtval."""
    program = emu.load_elf(_handler_guest(tmp_path), isa="rv64ima")
    out = emu.execute(program, backend=backend, runners=backend != "reference")
    assert (out.exit_code, out.end_reason) == (2 + C_ADDI_A0_1, "exit")
    if backend != "reference":
        # the ROM-histogram runner runs the guest again on its own machine: it too takes the handler's path
        got, want = out.backend.await_rom_histogram(), emu.rom_histogram_from_min_traces(program, out.min_traces)
        assert (got.steps, list(got.pcs), list(got.counts)) == (want.steps, list(want.pcs), list(want.counts))
        assert BASE + 14 not in list(got.pcs)                  # the c.nop after the c.addi never ran


def _handler_guest(tmp_path) -> str:
    csrrw_mtvec_t0 = 0x30529073                              # csrw mtvec, t0
    csrr_a0_mcause, csrr_a1_mtval = 0x34202573, 0x343025F3   # csrr a0, mcause; csrr a1, mtval
    add_a0_a0_a1 = 0x00B50533
    auipc_t0 = 0x00000297                                    # auipc t0, 0
    text = words(auipc_t0, addi(5, 5, 20), csrrw_mtvec_t0, ("c", C_ADDI_A0_1), ("c", C_NOP), ECALL,
                 csrr_a0_mcause, csrr_a1_mtval, add_a0_a0_a1, addi(A7, 0, 93), ECALL)
    path = tmp_path / "handler.elf"
    path.write_bytes(elf(text))
    return str(path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_chunks_replay_and_witness_rows_agree_under_rv64ima(backend, tmp_path):
    # the re-execution of a chunk (witness, verification) decodes as the run did: the parcel traps there too
    program = emu.load_elf(_handler_guest(tmp_path), isa="rv64ima")
    out = emu.execute(program, backend="reference", chunk_steps=2, runners=False)
    emu.verify_min_traces(program, out, backend=backend)
    mine = [emu.witness_table(program, t, backend=backend) for t in out.min_traces]
    reference = [emu.witness_table(program, t, backend="reference") for t in out.min_traces]
    assert all((a == b).all() for a, b in zip(mine, reference))
    trapped = mine[1][1]                                       # step 3: the c.addi
    assert (trapped[0], trapped[1], trapped[2], trapped[3]) == (3, BASE + 12, C_ADDI_A0_1, -1)


def test_the_all_zero_parcel_is_not_blamed_on_the_isa(tmp_path):
    # zeroed memory is illegal in every ISA: the message says so plainly under rv64ima too
    path = tmp_path / "zero.elf"
    path.write_bytes(elf(words(addi(A0, 0, 1), 0)))
    texts = set()
    for backend in BACKENDS:
        with pytest.raises(emu.GuestTrap) as failed:
            emu.execute(emu.load_elf(path, isa="rv64ima"), backend=backend, runners=False)
        texts.add(str(failed.value))
    assert texts == {f"unhandled trap: illegal instruction (mcause 2, mtval 0x0) at pc {BASE + 4:#x}, "
                     f"instruction 0x00000000 (step 1)"}
