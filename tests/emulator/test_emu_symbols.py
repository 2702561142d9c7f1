"""Trap and limit messages name the pc's function and offset from the ELF's ``.symtab``, the same on every
backend; without symbols the message is as before."""

import io

import pytest
from elftools.elf.elffile import ELFFile

from hetflow.executors.emulator import GuestError, GuestTrap, StepLimitExceeded, execute, load_elf
from hetflow.executors.emulator.elf import PERM_R, PERM_X, Program, Segment, symbol_at

from _guests import GUESTS


def _function_of(path, pc):
    """The STT_FUNC symbol holding pc, by pyelftools, independently of the emulator's table."""
    elf = ELFFile(io.BytesIO(path.read_bytes()))
    for sym in elf.get_section_by_name(".symtab").iter_symbols():
        if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"] <= pc < sym["st_value"] + sym["st_size"]:
            return f"{sym.name}+{pc - sym['st_value']:#x}"
    return None


@pytest.mark.parametrize("max_steps", [300, 1000, 3001])
def test_step_limit_names_the_c_function(backend, max_steps):
    path = GUESTS / "sha256.elf"
    with pytest.raises(StepLimitExceeded) as e:
        execute(load_elf(path), backend=backend, input=b"abc", max_steps=max_steps, chunk_steps=97)
    where = _function_of(path, e.value.pc)
    assert where is not None and e.value.symbol == where
    assert f"at pc {e.value.pc:#x} ({where}), instruction " in str(e.value)


def test_trap_names_the_assembly_label(backend):
    with pytest.raises(GuestTrap) as e:
        execute(load_elf(GUESTS / "fault_store.elf"), backend=backend)
    assert e.value.symbol == "_start+0x8"
    assert str(e.value).endswith("at pc 0x80000008 (_start+0x8), instruction 0x0002a023 (step 2)")


def test_no_symbols_no_name(backend):
    illegal = Program("bare", 0x8000_0000, (Segment(0x8000_0000, bytes(8), PERM_R | PERM_X),))
    with pytest.raises(GuestError) as e:
        execute(illegal, backend=backend)
    assert e.value.symbol is None
    assert "at pc 0x80000000, instruction 0x00000000 (step 0)" in str(e.value)


def test_symbol_table_skips_what_names_nothing():
    program = load_elf(GUESTS.parents[1] / "tests" / "data" / "riscv-tests" / "elf" / "rv64ui-p-add")
    names = [n for _, _, n in program.symbols]
    # riscv-test-env's labels name the code; clang's .L locals and the data symbols (tohost) do not
    assert names[:3] == ["_start", "trap_vector", "handle_exception"] and "test_2" in names
    assert not any(n.startswith((".L", "$")) for n in names) and "tohost" not in names
    assert symbol_at(program.symbols, program.symbols[-1][1]) is None
