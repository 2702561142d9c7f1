"""Guest programs built byte by byte to do what compilers rarely emit, run on every backend: each must end as
the reference interpreter ends it, never as an internal error of one backend."""

from __future__ import annotations

import struct

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


def _elf(words: list[int]) -> bytes:
    """A static ELF64 RISC-V executable of one r-x PT_LOAD at BASE holding ``words``, entered at its start."""
    text = b"".join(struct.pack("<I", w) for w in words)
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack(
        "<HHIQQQIHHHHHH", 2, 243, 1, BASE, 64, 0, 0, 64, 56, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 128, BASE, BASE, len(text), len(text), 8)
    return header + phdr + bytes(128 - 64 - 56) + text


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
