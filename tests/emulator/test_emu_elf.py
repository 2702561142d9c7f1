from pathlib import Path

import pytest

from hetflow.executors.emulator import ElfError, load_elf
from hetflow.executors.emulator.elf import PERM_R, PERM_W, PERM_X

from _guests import GUESTS


def test_segments_permissions_and_entry():
    p = load_elf(GUESTS / "sort.elf")
    assert p.entry == 0x80000000
    assert p.segments[0].perm == PERM_R | PERM_X
    assert any(s.perm == PERM_R | PERM_W for s in p.segments)
    assert p.tohost is None


def test_all_flags_clear_is_rwx_and_tohost_found():
    p = load_elf(GUESTS / "isa_alu.elf")
    assert [s.perm for s in p.segments] == [PERM_R | PERM_W | PERM_X]
    assert p.tohost is not None and p.segments[0].vaddr <= p.tohost < p.segments[0].end


def _patched(offset, value):
    raw = bytearray((GUESTS / "fib.elf").read_bytes())
    raw[offset:offset + len(value)] = value
    return bytes(raw)


def _first_load() -> int:
    """The file offset of fib.elf's first PT_LOAD program header."""
    import struct

    raw = (GUESTS / "fib.elf").read_bytes()
    phoff, = struct.unpack_from("<Q", raw, 32)
    return next(phoff + 56 * k for k in range(struct.unpack_from("<H", raw, 56)[0])
                if struct.unpack_from("<I", raw, phoff + 56 * k)[0] == 1)


@pytest.mark.parametrize("data, message", [
    (b"", "not an ELF file"),
    (b"#!/bin/sh\necho hi\n", "not an ELF file (expected magic 7f 45 4c 46, found 23 21 2f 62)"),
    (_patched(4, b"\x01"), "32-bit ELF; expected a 64-bit (ELFCLASS64) RISC-V executable"),
    (_patched(18, (62).to_bytes(2, "little")), "not a RISC-V ELF (e_machine is EM_X86_64); expected EM_RISCV"),
    (_patched(16, (3).to_bytes(2, "little")), "expected a static executable (ET_EXEC)"),
    ((GUESTS / "fib.elf").read_bytes()[:80], "malformed ELF"),
    (_patched(24, (0x12345678).to_bytes(8, "little")), "entry point 0x12345678 is not inside an executable PT_LOAD"),
    (_patched(32, (2**63 + 5).to_bytes(8, "little")), "malformed ELF: the program header table (3 entries of 56 bytes at "
                                                      "offset 0x8000000000000005) ends past the file's"),
    (_patched(56, (65535).to_bytes(2, "little")), "malformed ELF: the program header table (65535 entries"),
    (_patched(60, (65535).to_bytes(2, "little")), "malformed ELF: the section header table (65535 entries"),
    (_patched(54, (12).to_bytes(2, "little")), "program header entries of 12 bytes (e_phentsize); an ELF64 one has 56"),
    (_patched(_first_load() + 8, (2**64 - 16).to_bytes(8, "little")), "bytes at offset 0xfffffffffffffff0, past the file's"),
    ((GUESTS / "fib.elf").read_bytes()[:63], "malformed ELF: truncated header (63 bytes; an ELF64 header has 64)"),
])
def test_bad_files_raise_elf_error(data, message):
    with pytest.raises(ElfError) as e:
        load_elf(data, name="bad.elf")
    assert message in str(e.value)
    assert str(e.value).startswith("bad.elf: ")
    # pyelftools' own words for what it read past the end: never the user's
    assert "expected 4, found 0" not in str(e.value) and "OverflowError" not in str(e.value)


def test_missing_file():
    with pytest.raises(ElfError, match="cannot read"):
        load_elf(GUESTS / "no-such.elf")


def test_hardware_float_code_under_soft_float_abi_refused_at_load():
    # e_flags say rv64imac/lp64; only the RISC-V attributes say F and D, which would otherwise fail at the first
    # float instruction (step 12) as a bare illegal instruction
    with pytest.raises(ElfError, match=r"float_lp64\.elf: this ELF was built for rv64i2p1_m2p0_a2p1_f2p2_d2p2_c2p0\S* "
                                       r"\(its RISC-V attributes\), which has F, D, Zcd: .*-march=rv64imac"):
        load_elf(Path(__file__).resolve().parents[1] / "data" / "guests" / "float_lp64.elf")


def test_unsupported_extension_in_attributes_refused_and_supported_ones_load():
    raw = (GUESTS / "fib.elf").read_bytes()
    assert b"_zmmul1p0" in raw
    with pytest.raises(ElfError, match="which has Zbkb: "):
        load_elf(raw.replace(b"_zmmul1p0", b"_zbkb11p0"), "fib.elf")
    # the arch strings of the committed guests (with and without C, Zaamo/Zalrsc) all load
    for name in ("fib", "sort_rvc", "isa_rvc", "isa_amo"):
        load_elf(GUESTS / f"{name}.elf")
    load_elf(raw.replace(b"_zmmul1p0", b"_zca1p0__"), "fib.elf")
    # cycle, time and instret are implemented: a program built with Zicntr (rdcycle) runs
    load_elf(raw.replace(b"_zmmul1p0", b"_zicntr20"), "fib.elf")
