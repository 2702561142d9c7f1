"""Fetch protection, a documented choice (machine.py, "Fetch protection"):
``executable`` faults on fetches outside PF_X segments, ``any`` fetches
from every mapped region as the ISA lets M-mode without PMP."""

import pytest

from hetflow.engine.cli import main
from hetflow.executors.emulator import GuestTrap, execute, load_elf, verify_min_traces
from hetflow.executors.emulator.elf import PERM_R, PERM_W, PERM_X, Program, Segment

from _guests import GUESTS

BASE = 0x8000_0000
JUMP_TO_DATA = bytes.fromhex("b70208009b8212009392c200e7800200")   # li t0, 0x80001000; jalr t0
EXIT_7 = bytes.fromhex("130570009308d00573000000")                   # li a0, 7; li a7, 93; ecall


def _program(fetch):
    return Program("fetch", BASE, (Segment(BASE, JUMP_TO_DATA, PERM_R | PERM_X),
                                   Segment(BASE + 0x1000, EXIT_7, PERM_R | PERM_W)), None, fetch)


def test_executable_protection_faults_on_data(backend):
    with pytest.raises(GuestTrap) as e:
        execute(_program("executable"), backend=backend, runners=False)
    assert (e.value.cause, e.value.tval, e.value.pc) == (1, BASE + 0x1000, BASE + 0x1000)


def test_any_fetches_from_data_as_the_isa_allows(backend):
    out = execute(_program("any"), backend=backend, chunk_steps=3)
    assert (out.exit_code, out.steps) == (7, 7)
    # the data segment is writable: its fetches are recorded reads, so chunks replay alone
    assert sum(len(t.mem_reads) for t in out.min_traces) == 3
    verify_min_traces(_program("any"), out, backend=backend)
    if backend == "fast":
        hist = out.backend.await_rom_histogram()
        assert {int(p): int(n) for p, n in zip(hist.pcs, hist.counts)}[BASE + 0x1000] == 1


def test_backends_identical_under_any():
    ref = execute(_program("any"), backend="reference", chunk_steps=2)
    fst = execute(_program("any"), backend="fast", chunk_steps=2)
    assert ref.same_result(fst) == []


def test_unknown_protection_is_refused():
    with pytest.raises(ValueError, match="unknown fetch protection 'rwx'; expected one of executable, any"):
        load_elf(GUESTS / "fib.elf", fetch="rwx")


def test_emulate_fetch_flag(capsys):
    assert main(["emulate", str(GUESTS / "fib.elf"), "--fetch", "any"]) == 0
    assert "exit code 0" in capsys.readouterr().out
    assert main(["emulate", str(GUESTS / "fib.elf"), "--fetch", "rwx"]) == 2
