"""Guest programs built byte by byte to do what compilers rarely emit, run on every backend: each must end as
the reference interpreter ends it, never as an internal error of one backend."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.executors.emulator import execute, load_elf

BACKENDS = ("reference", "fast", "native")
BASE = 0x8000_0000


def _addi(rd: int, rs1: int, imm: int) -> int:
    return (imm & 0xFFF) << 20 | rs1 << 15 | rd << 7 | 0x13


def _branch(funct3: int, offset: int) -> int:
    """``beq``/``bne`` x0, x0, offset."""
    o = offset & 0x1FFF
    return (o >> 12 & 1) << 31 | (o >> 5 & 0x3F) << 25 | funct3 << 12 | (o >> 1 & 0xF) << 8 | (o >> 11 & 1) << 7 | 0x63


def _elf(words: list[int], bss: tuple[int, int, int] | None = None) -> bytes:
    """A static ELF64 RISC-V executable of one r-x PT_LOAD at BASE holding ``words``, entered at its start, and
    with ``bss`` = (vaddr, memsz, p_offset) an rw- PT_LOAD of zeros alone (no bytes in the file)."""
    text = b"".join(struct.pack("<I", w) for w in words)
    count = 1 if bss is None else 2
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack(
        "<HHIQQQIHHHHHH", 2, 243, 1, BASE, 64, 0, 0, 64, 56, count, 64, 0, 0)
    at = 64 + 56 * count
    phdrs = struct.pack("<IIQQQQQQ", 1, 5, at, BASE, BASE, len(text), len(text), 8)
    if bss is not None:
        vaddr, memsz, offset = bss
        phdrs += struct.pack("<IIQQQQQQ", 1, 6, offset, vaddr, vaddr, 0, memsz, 8)
    return header + phdrs + text


@pytest.mark.parametrize("taken, exit_code", [(False, 3), (True, 0x4000_0000)])
def test_code_entered_in_the_middle_of_an_instruction_runs_alike_on_every_backend(tmp_path, monkeypatch, taken,
                                                                                      exit_code):
    # the branch's two targets decode the same bytes two ways: the 4-byte `li a0, 3` at +4, and at +6 its upper
    # half, the compressed `c.addi4spn a2, sp, 8`; both run on into `li a7, 93` at +8
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path / "native"))
    program = load_elf(_elf([_branch(0 if taken else 1, 6), _addi(10, 0, 3), _addi(17, 0, 93), 0x73]), "split.elf")
    runs = {b: execute(program, backend=b, chunk_steps=2, max_steps=100) for b in BACKENDS}
    assert (runs["reference"].exit_code, runs["reference"].end_reason, runs["reference"].steps) == (exit_code, "exit", 4)
    assert runs["reference"].same_result(runs["fast"]) == []
    assert runs["reference"].same_result(runs["native"]) == []


def _lui(rd: int, imm20: int) -> int:
    return (imm20 & 0xFFFFF) << 12 | rd << 7 | 0x37


def _sd(rs2: int, rs1: int) -> int:
    return rs2 << 20 | rs1 << 15 | 3 << 12 | 0x23


def _ld(rd: int, rs1: int) -> int:
    return rs1 << 15 | 3 << 12 | rd << 7 | 0x03


@pytest.mark.parametrize("offset", [0, (1 << 64) - 1, 1 << 63])
def test_a_segment_of_zeros_alone_loads_wherever_its_file_offset_points(tmp_path, monkeypatch, offset):
    """p_offset means nothing where p_filesz is 0 (a .bss of its own): one past the file, or past what Python
    can index, was refused as "malformed ELF: OverflowError: Python int too large to convert to C ssize_t"."""
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path / "native"))
    # t0 = 0x9000_0000 (lui sign-extends: 0x90000 << 12 with its upper bits cleared by the shifts); store 7 there,
    # load it back into a0 and exit with it
    words = [_lui(5, 0x90000), 5 << 15 | 32 << 20 | 1 << 12 | 5 << 7 | 0x13, 5 << 15 | 32 << 20 | 5 << 12 | 5 << 7
             | 0x13, _addi(6, 0, 7), _sd(6, 5), _ld(10, 5), _addi(17, 0, 93), 0x73]
    path = tmp_path / "bss.elf"
    path.write_bytes(_elf(words, bss=(0x9000_0000, 0x1000, offset)))
    for backend in BACKENDS:
        out = execute(load_elf(path), backend=backend, max_steps=100)
        assert (out.exit_code, out.end_reason, out.steps) == (7, "exit", 8), backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_segment_over_the_machines_ram_is_refused_naming_the_file_as_given(tmp_path, backend):
    (tmp_path / "guests").mkdir()
    path = tmp_path / "guests" / "ram.elf"
    raw = bytearray(_elf([_addi(10, 0, 0), _addi(17, 0, 93), 0x73]))
    struct.pack_into("<Q", raw, 24, 0xA000_0000)                    # the entry, and the segment's p_vaddr
    struct.pack_into("<Q", raw, 64 + 16, 0xA000_0000)
    path.write_bytes(bytes(raw))
    p = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", str(path), "--backend", backend],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HETFLOW_NATIVE_CACHE": str(tmp_path / "native")})
    assert (p.returncode, p.stdout) == (2, ""), p.stderr
    assert p.stderr == (f"hetflow: error: {path}: memory regions collide: segment0[r-x] [0xa0000000, 0xa0000010) "
                        "and ram [0xa0000000, 0xa0400000); link the program at 0x80000000 and keep segments 8-byte "
                        "apart\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_program_file_larger_than_any_guest_is_refused_before_it_is_read(tmp_path, backend):
    path = tmp_path / "huge.elf"
    with open(path, "wb") as f:                       # sparse: the size without the bytes
        f.write(_elf([_addi(10, 0, 0), _addi(17, 0, 93), 0x73]))
        f.truncate((2 << 30) + 1)
    p = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", str(path), "--backend", backend],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HETFLOW_NATIVE_CACHE": str(tmp_path / "native")})
    assert (p.returncode, p.stdout) == (2, ""), p.stderr
    assert p.stderr == (f"hetflow: error: {path}: 2,147,483,649 bytes; a guest program's ELF file is at most "
                        "2,147,483,648 (its segments load at most 1,073,741,824)\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_symbol_name_with_a_line_break_or_an_escape_stays_on_the_traps_one_line(tmp_path, backend):
    """The ELF names its functions: ``_start`` renamed ``_s<LF><ESC>[1`` (same length) broke the trap's one-line
    message in two and sent an escape sequence to the terminal."""
    guests = Path(__file__).resolve().parents[2] / "examples" / "guests"
    raw = bytearray((guests / "illegal.elf").read_bytes())
    at = raw.index(b"_start\x00")
    raw[at:at + 6] = b"_s\n\x1b[1"
    path = tmp_path / "named.elf"
    path.write_bytes(bytes(raw))
    p = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", str(path), "--backend", backend],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HETFLOW_NATIVE_CACHE": str(tmp_path / "native")})
    assert p.returncode == 1, p.stderr
    assert p.stderr.splitlines()[-1] == (
        f"hetflow: emulate failed: {path}: unhandled trap: illegal instruction (mcause 2, mtval 0x0) at pc 0x80000004 "
        "(_s\\n\\x1b[1+0x4), instruction 0x00000000 (step 1)")
    assert "\x1b" not in p.stdout + p.stderr
