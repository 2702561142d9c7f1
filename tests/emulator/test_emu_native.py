"""The native backend beyond the conformance suite: random programs (every
ALU, M, load, store, branch and jump form in translated code) against
the reference every few steps, chunk boundaries that fall inside blocks,
native MO and RH runners, re-execution from min traces, the exact step
limit, indirect jumps that discovery cannot see, self-modifying code, and
the disk cache."""

import json
import subprocess
import sys

import numpy as np
import pytest

from hetflow.executors.emulator import (INPUT_ADDR, StepLimitExceeded, execute, fast, mem_ops_from_min_traces,
                                        mem_plans_from_min_traces, native, native_main, reexecute_chunk,
                                        rom_histogram_from_min_traces)
from hetflow.executors.emulator.elf import PERM_R, PERM_X, Program, Segment
from hetflow.executors.emulator.native_translate import MAX_BLOCK

from _guests import GUESTS, guest, run
from test_emu_fast_path import BASE, enc, random_program


@pytest.mark.parametrize("seed,chunk", [(0, 2), (1, 3), (2, 7), (3, 64), (4, 1000)])
def test_random_programs_match_reference(seed, chunk):
    # small chunks put a boundary inside most blocks: the interpreter takes
    # the steps up to it, and the next chunk starts inside a block
    prog, inp = random_program(seed, n=600, rounds=3)
    ref = execute(prog, backend="reference", input=inp, chunk_steps=chunk, runners=False)
    nat = execute(prog, backend="native", input=inp, chunk_steps=chunk, runners=False)
    assert ref.steps == nat.steps > 3 * 500
    assert ref.same_result(nat) == []
    assert nat.extra["translation"]["instructions"] > 500


def test_random_program_replayed_on_every_backend():
    prog, inp = random_program(7, n=800, rounds=4)
    nat = execute(prog, backend="native", input=inp, chunk_steps=333, runners=False)
    for i, t in enumerate(nat.min_traces[:-1]):
        for backend in ("native", "fast"):
            state, counts = reexecute_chunk(prog, t, input_size=len(inp), backend=backend)
            assert state == nat.min_traces[i + 1].start_state
            assert counts == nat.counters.chunk(i)


def test_native_runners_equal_reference_path():
    prog, inp = random_program(11, n=600, rounds=3)
    ref = execute(prog, backend="reference", input=inp, chunk_steps=500)
    ops = native.mem_ops_runner(fast.image_of(prog, inp, len(inp)), prog, 1 << 20)
    assert np.array_equal(ops, mem_ops_from_min_traces(prog, ref.min_traces, len(inp)))
    out = execute(prog, backend="native", input=inp, chunk_steps=500, mem_plan_rows=128)
    assert out.backend.kind == "native"
    assert out.backend.await_mem_plans() == mem_plans_from_min_traces(prog, ref.min_traces, len(inp),
                                                                      rows_per_plan=128)
    with pytest.raises(Exception, match="already consumed"):
        out.backend.await_mem_plans()
    hist = out.backend.await_rom_histogram()
    assert hist == rom_histogram_from_min_traces(prog, ref.min_traces, len(inp))
    assert out.backend.await_rom_histogram() is None


@pytest.mark.parametrize("name, data", [("sort", b""), ("sha256_rvc", b"abc" * 40), ("isa_smc", b"")])
def test_guest_runners_equal_reference_path(name, data):
    p = guest(name)
    ref = run(name, "reference", input=data, chunk_steps=50_000)
    out = execute(p, backend="native", input=data, chunk_steps=50_000, mem_plan_rows=4096)
    assert ref.same_result(out) == []
    assert out.backend.await_mem_plans() == mem_plans_from_min_traces(p, ref.min_traces, len(data),
                                                                      rows_per_plan=4096)
    assert out.backend.await_rom_histogram() == rom_histogram_from_min_traces(p, ref.min_traces, len(data))


@pytest.mark.parametrize("limit", [4999, 5000, 5001, 3 * MAX_BLOCK + 1])
def test_step_limit_is_exact(limit):
    errors = []
    for backend in ("fast", "native"):
        with pytest.raises(StepLimitExceeded) as e:
            execute(guest("spin"), backend=backend, max_steps=limit, chunk_steps=1000, runners=False)
        errors.append((str(e.value), e.value.pc, e.value.step, e.value.insn))
    assert errors[0] == errors[1] and errors[1][2] == limit


def test_long_straight_line_code_in_several_blocks():
    # 3 * MAX_BLOCK + 5 additions with no branch, then exit
    n = 3 * MAX_BLOCK + 5
    words = [enc("addi", 10, 10, imm=3)] * n + [enc("addi", 17, 0, imm=93), enc("ecall")]
    prog = Program("straight", BASE, (Segment(BASE, b"".join(w.to_bytes(4, "little") for w in words),
                                               PERM_R | PERM_X),))
    for chunk in (1, MAX_BLOCK - 1, MAX_BLOCK + 1, 10_000):
        ref = execute(prog, backend="reference", chunk_steps=chunk, runners=False)
        nat = execute(prog, backend="native", chunk_steps=chunk, runners=False)
        assert ref.same_result(nat) == [] and nat.steps == n + 2


def _indirect_program(calls):
    """A loop that calls a routine through a register (auipc + addi +
    jalr), which discovery cannot follow: the routine is reached only
    through misses until it is translated again with them as seeds."""
    words = [enc("addi", 9, 0, imm=calls),                  # s1 = calls
             enc("auipc", 5, imm=0),                        # t0 = pc of this auipc
             enc("addi", 5, 5, imm=4 * 6),                  # t0 -> routine
             enc("jalr", 1, 5, imm=0),                      # loop: call routine
             enc("addi", 9, 9, imm=-1),
             enc("bne", rs1=9, rs2=0, imm=-8),
             enc("jal", 0, imm=4 * 3),                      # -> exit
             enc("addi", 10, 10, imm=7),                    # routine: a0 += 7
             enc("jalr", 0, 1, imm=0),                      # ret
             enc("addi", 17, 0, imm=93), enc("ecall")]
    return Program(f"indirect-{calls}", BASE, (Segment(BASE, b"".join(w.to_bytes(4, "little") for w in words),
                                                        PERM_R | PERM_X),))


def test_indirect_targets_are_translated_after_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path))
    prog = _indirect_program(500)
    ref = execute(prog, backend="reference", chunk_steps=100, runners=False)
    nat = execute(prog, backend="native", chunk_steps=100, runners=False)
    assert ref.same_result(nat) == [] and nat.exit_code == INPUT_ADDR + 7 * 500     # a0 starts at INPUT_ADDR
    routine = BASE + 4 * 7
    t = native.translation(fast.image_of(prog, b"", 0), fast.REC_READS, BASE)
    assert routine in t.heads and routine in t.seeds
    assert routine in set(native_main.read_meta(str(next(tmp_path.glob("*.seeds.meta")))))


def test_translation_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path))
    prog, inp = random_program(21, n=300, rounds=2)
    first = execute(prog, backend="native", input=inp, runners=False)
    assert first.extra["translation"]["cached"] is False and list(tmp_path.glob("*.o"))
    native._loaded.clear()                           # a new process would start with nothing loaded
    second = execute(prog, backend="native", input=inp, runners=False)
    assert second.extra["translation"]["cached"] is True
    assert first.same_result(second) == []
    assert second.extra["translation"]["seconds"] < first.extra["translation"]["seconds"]


def test_writable_code_is_translated_and_invalidated_when_written():
    # isa_smc's code is writable: translated, then its page invalidated when it rewrites an instruction
    out = run("isa_smc", "native")
    assert out.extra["translation"]["instructions"] > 20 and out.extra["translation"]["invalidations"] == 1
    assert (out.end_reason, out.exit_code) == ("tohost", 0)
    assert out.same_result(run("isa_smc", "reference")) == []


def test_cli_native_backend(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", str(GUESTS / "loop.elf"), "--backend",
                        "native", "--input", "-", "--json", "--no-interpreter-start"],
                       input=(10_000).to_bytes(8, "little"), capture_output=True, env={
                           **__import__("os").environ, "HETFLOW_NATIVE_CACHE": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["backend"], out["ran_on"], out["steps"], out["pub_outs"][0]) == ("native", "native", 30_010,
                                                                               10_000 * 10_001 // 2)
    assert out["translation"]["blocks"] >= 2 and out["translation"]["cached"] is False
