"""The native backend's main execution on ctypes (:mod:`.native_main`, what
``hetflow emulate --backend native`` runs): every field equal to the fast
backend's on the repository's guests and random programs, chunk boundaries
inside blocks, the same errors, writable code translated and invalidated
when it is written, and a run from the disk cache that loads neither
numba nor llvmlite."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hetflow.executors.emulator import GuestTrap, StepLimitExceeded, fast, load_elf, native_main
from hetflow.executors.emulator.elf import PERM_R, PERM_W, PERM_X, Program, Segment

from _guests import GUESTS
from test_emu_fast_path import random_program

CASES = [("fib", b""), ("sort", b""), ("sha256", bytes(range(200)) * 3), ("isa_alu", b""), ("isa_mem", b""),
         ("isa_muldiv", b""), ("isa_amo", b""), ("isa_trap", b""), ("isa_smc", b""), ("isa_rvc", b"")]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path_factory.getbasetemp() / "native-main-cache"))


def _same(a: dict, b: dict) -> None:
    for k in ("steps", "exit_code", "end_reason", "stdout", "pub_outs"):
        assert a[k] == b[k], k
    assert np.array_equal(np.asarray(a["counts"]), np.asarray(b["counts"]))
    assert len(a["traces"]) == len(b["traces"])
    for s, t in zip(a["traces"], b["traces"]):
        assert s == t, s.chunk_id


@pytest.mark.parametrize("name,data", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("chunk", [97, 1 << 18])
def test_guests_equal_the_fast_backend(name, data, chunk):
    prog = load_elf(GUESTS / f"{name}.elf")
    _same(native_main.run(prog, data, chunk), fast.run(prog, data, chunk))


def test_the_sdk_guest_equals_the_fast_backend():
    prog = load_elf(GUESTS / "sdk/hello.elf")
    _same(native_main.run(prog, b"", 1000), fast.run(prog, b"", 1000))


@pytest.mark.parametrize("seed,chunk", [(0, 2), (1, 5), (2, 64), (3, 1000)])
def test_random_programs_equal_the_fast_backend(seed, chunk):
    prog, inp = random_program(seed, n=500, rounds=3)
    r = native_main.run(prog, inp, chunk)
    _same(r, fast.run(prog, inp, chunk))
    assert r["translation"]["instructions"] > 400


@pytest.mark.parametrize("name", ["fault_store", "illegal"])
def test_traps_are_the_fast_backends(name):
    prog = load_elf(GUESTS / f"{name}.elf")
    with pytest.raises(GuestTrap) as nat:
        native_main.run(prog)
    with pytest.raises(GuestTrap) as fst:
        fast.run(prog)
    assert str(nat.value) == str(fst.value)
    assert (nat.value.pc, nat.value.insn, nat.value.step) == (fst.value.pc, fst.value.insn, fst.value.step)


@pytest.mark.parametrize("limit", [1, 999, 12_345])
def test_step_limit_is_exact(limit):
    prog = load_elf(GUESTS / "spin.elf")
    with pytest.raises(StepLimitExceeded) as nat:
        native_main.run(prog, b"", 100, limit)
    with pytest.raises(StepLimitExceeded) as fst:
        fast.run(prog, b"", 100, limit)
    assert str(nat.value) == str(fst.value) and nat.value.step == limit


def test_self_modifying_code_invalidates_its_translation():
    # isa_smc rewrites an instruction of its own (writable) code, then runs it
    prog = load_elf(GUESTS / "isa_smc.elf")
    r = native_main.run(prog, b"", 97)
    _same(r, fast.run(prog, b"", 97))
    assert r["translation"]["instructions"] > 20 and r["translation"]["invalidations"] == 1


def test_writable_code_left_alone_stays_translated():
    prog, inp = random_program(5, n=300, rounds=2)
    seg = prog.segments[0]
    rwx = Program(prog.name, prog.entry, (Segment(seg.vaddr, seg.data, PERM_R | PERM_W | PERM_X),))
    r, ro = native_main.run(rwx, inp, 500), native_main.run(prog, inp, 500)
    _same(r, fast.run(rwx, inp, 500))
    assert r["translation"]["invalidations"] == 0 and r["translation"]["instructions"] > 250
    # every fetch from writable code is a recorded read, as on the interpreters
    assert sum(len(t.mem_reads) for t in r["traces"]) >= sum(len(t.mem_reads) for t in ro["traces"]) + r["steps"]


_PROBE = """
import sys
from hetflow.engine.cli import main
code = main(sys.argv[1:])
print("LOADED", sorted(m for m in ("numba", "llvmlite.binding") if m in sys.modules))
sys.exit(code)
"""


def test_a_cached_translation_runs_without_numba_or_llvm(tmp_path):
    env = {**os.environ, "HETFLOW_NATIVE_CACHE": str(tmp_path)}
    argv = ["emulate", str(GUESTS / "sort.elf"), "--backend", "native", "--json"]
    first = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env)
    second = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    a, b = (json.loads(r.stdout.splitlines()[0]) for r in (first, second))
    assert a["translation"]["cached"] is False and b["translation"]["cached"] is True
    assert a["ran_on"] == b["ran_on"] == "native"
    assert {k: a[k] for k in ("steps", "pub_outs", "counters", "chunks")} == \
        {k: b[k] for k in ("steps", "pub_outs", "counters", "chunks")}
    assert "llvmlite.binding" in first.stdout and second.stdout.splitlines()[-1] == "LOADED []"
    assert list(tmp_path.glob("*.meta")) and list(tmp_path.glob("*.o"))


def test_an_unseen_short_guest_starts_in_the_interpreter(tmp_path):
    env = {**os.environ, "HETFLOW_NATIVE_CACHE": str(tmp_path)}
    argv = ["emulate", str(GUESTS / "fib.elf"), "--backend", "native", "--json"]
    r = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env)
    out = json.loads(r.stdout.splitlines()[0])
    assert (r.returncode, out["ran_on"], out["steps"]) == (0, "reference", 516)
    assert r.stdout.splitlines()[-1] == "LOADED []"


class _Counting(native_main.MainRun):
    """The main execution, counting the steps it leaves to the interpreter."""

    interpreted = 0

    def interpret(self, k, counts):
        before = self.st[1]
        status = super().interpret(k, counts)
        self.interpreted += self.st[1] - before
        return status


@pytest.mark.parametrize("chunk", [5, 97, 1000])
def test_chunk_boundaries_inside_blocks_stay_in_translated_code(chunk):
    # SHA-256's blocks are long: most boundaries fall inside one, which its part's stepwise
    # function reaches and resumes from; only the ecalls are the interpreter's
    prog = load_elf(GUESTS / "sha256.elf")
    data = bytes(range(256)) * 4
    m = _Counting(prog, data)
    got = m.run(chunk, 1 << 32)
    _same(got, fast.run(prog, data, chunk))
    assert len(got["traces"]) > 10
    assert m.interpreted <= 8, m.interpreted


@pytest.mark.parametrize("chunk", [1, 5, 97, 1 << 18])
def test_a_block_looping_on_itself_equals_the_fast_backend(chunk):
    # loop.elf's loop is one block that branches to itself: its iterations are counted at its head and
    # its steps and counters added once it leaves, however the chunk boundaries fall
    prog = load_elf(GUESTS / "loop.elf")
    data = (2000).to_bytes(8, "little")
    m = _Counting(prog, data)
    got = m.run(chunk, 1 << 32)
    _same(got, fast.run(prog, data, chunk))
    assert got["steps"] > 6000 and m.interpreted <= 8, m.interpreted


class _Calls(native_main.MainRun):
    """The main execution, counting its calls of the translated code."""

    def use(self, code):
        code = super().use(code)
        fn = code.fn
        self.calls = 0

        def counted(*args):
            self.calls += 1
            return fn(*args)

        code.fn = counted
        return code


@pytest.mark.parametrize("records,words", [(native_main.RECORDS, native_main.BATCH_WORDS), (3, native_main.BATCH_WORDS),
                                           (native_main.RECORDS, 0)], ids=["default", "3 records", "1 chunk of reads"])
@pytest.mark.parametrize("name,data,chunk", [("loop", (30_000).to_bytes(8, "little"), 100),
                                             ("sha256", bytes(range(256)) * 8, 500)])
def test_one_call_runs_many_chunks(monkeypatch, records, words, name, data, chunk):
    # chunks that end in translated code end there: the records of a call make the same min traces and
    # counter rows as the other backends'; a call returns when either buffer is full
    monkeypatch.setattr(native_main, "RECORDS", records)
    monkeypatch.setattr(native_main, "BATCH_WORDS", words)
    prog = load_elf(GUESTS / f"{name}.elf")
    m = _Calls(prog, data)
    got = m.run(chunk, 1 << 32)
    want = fast.run(prog, data, chunk)
    _same(got, want)
    n = len(got["traces"])
    assert n > 80
    assert [type(v) for v in got["traces"][5].start_state] == [type(v) for v in want["traces"][5].start_state]
    assert all(type(row) is list for row in got["counts"])
    if records == 3:
        assert m.calls >= n // 3
    elif words == 0 and name == "sha256":         # its chunks read memory: the next chunk's room is not there
        assert m.calls >= 10, m.calls
    else:
        assert m.calls <= 12, m.calls


@pytest.mark.parametrize("chunk", [100, 250, 1000])
def test_a_step_limit_on_a_chunk_boundary_is_exact(chunk):
    prog = load_elf(GUESTS / "spin.elf")
    with pytest.raises(StepLimitExceeded) as nat:
        native_main.run(prog, b"", chunk, 5_000)
    with pytest.raises(StepLimitExceeded) as fst:
        fast.run(prog, b"", chunk, 5_000)
    assert str(nat.value) == str(fst.value) and nat.value.step == 5_000
