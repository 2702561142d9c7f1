"""The official riscv-tests (rv64ui, rv64um, rv64ua, rv64uc p-tests: 87) on every backend in flat memory.

The ELFs ship prebuilt in ``tests/data/riscv-tests/elf`` (built from the
sources beside them by ``build.py``).  A test ends as riscv-test-env's
``env/p/riscv_test.h`` has it: ``RVTEST_PASS`` is ``li gp, 1; li a7, 93;
li a0, 0; ecall``, ``RVTEST_FAIL`` the same with ``a0 = (n << 1) | 1``
for failed test n, and the emulator takes an ``ecall`` with a7 = 93 as
the exit syscall, so a pass is an exit with code 0 and gp (TESTNUM) = 1.
A trap the test did not expect goes to its handler, which writes
``gp | 1337`` to ``tohost``, which ends the run too (machine.py, "Guest
ABI").
"""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.engine.cli import main
from hetflow.executors.emulator import (GuestTrap, execute, load_elf, mem_plans_from_min_traces, reexecute_chunk,
                                        rom_histogram_from_min_traces, verify_min_traces, witness_table)
from hetflow.executors.emulator.elf import PERM_R, PERM_X, Program, Segment

SUITE = Path(__file__).resolve().parents[1] / "data" / "riscv-tests"
# the build script beside the ELFs names the tests and builds them: one list for both
_spec = importlib.util.spec_from_file_location("riscv_tests_build", SUITE / "build.py")
_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_build)
TESTS, build, compiler = _build.TESTS, _build.build, _build.compiler

GP = 3
_runs = {}


def run(name, backend, memory="flat"):
    key = (name, backend, memory)
    if key not in _runs:
        program = load_elf(SUITE / "elf" / name, memory=memory)
        # small chunks: every test spans several, so the replay below checks the chain of states, not one chunk
        _runs[key] = program, execute(program, backend=backend, chunk_steps=61, runners=False)
    return _runs[key]


def test_every_test_of_the_makefrags_ships():
    assert sorted(os.listdir(SUITE / "elf")) == sorted(TESTS)
    assert len(TESTS) == 87
    assert (SUITE / "LICENSE").read_text().startswith("Copyright (c) 2012-2015, The Regents of the University")


@pytest.mark.parametrize("name", sorted(TESTS))
def test_passes_in_flat_memory(backend, name):
    program, out = run(name, backend)
    end, _ = reexecute_chunk(program, out.min_traces[-1], backend=backend)
    assert (out.end_reason, out.exit_code, end.regs[GP]) == ("exit", 0, 1), \
        f"{name}: failed test {end.regs[GP] >> 1} (exit code {out.exit_code}, {out.end_reason})"
    if backend != "reference":
        # the same run to the last field: min traces, counters, steps, output
        assert out.same_result(run(name, "reference")[1]) == []
    verify_min_traces(program, out, backend=backend)


@pytest.mark.parametrize("name", sorted(TESTS))
def test_witness_rows_agree_step_by_step(name):
    # one row a step (pc, instruction, operands, the memory access): the interpreters' replays of the same
    # chunks, row for row, in flat memory where code is writable and every fetch is a recorded read
    program, out = run(name, "reference")
    for t in out.min_traces:
        ref, fst = witness_table(program, t, backend="reference"), witness_table(program, t, backend="fast")
        assert ref.shape == (t.steps, ref.shape[1]) and (ref == fst).all(), f"{name}: chunk {t.chunk_id} differs"


def test_protected_memory_fails_where_the_suite_assumes_flat(backend):
    # rv64uc-p-rvc's test 6 stores into its code segment; the store faults, and the test's handler reports
    # gp | 1337 through tohost (exit code v >> 1 of an odd v)
    _, out = run("rv64uc-p-rvc", backend, memory="protected")
    assert (out.end_reason, out.exit_code) == ("tohost", (6 | 1337) >> 1)
    # fence_i writes instructions into .data and jumps there: an instruction access fault under fetch "executable"
    _, out = run("rv64ui-p-fence_i", backend, memory="protected")
    assert out.end_reason == "tohost" and out.exit_code != 0


@pytest.mark.parametrize("other", ["fast", "native"])
@pytest.mark.parametrize("name", ["rv64uc-p-rvc", "rv64ui-p-fence_i", "rv64ua-p-lrsc"])
def test_runners_agree_with_the_min_traces_in_flat_memory(name, other):
    # the MO and RH runners re-run the guest on a machine of their own: in flat memory too, their plans and
    # histogram are the ones the min traces give
    program = load_elf(SUITE / "elf" / name, memory="flat")
    out = execute(program, backend=other, chunk_steps=61, mem_plan_rows=64)
    plans, _ = out.backend.await_mem_plans()
    assert len(plans) > 1
    assert plans == mem_plans_from_min_traces(program, out.min_traces, rows_per_plan=64)[0]
    assert out.backend.await_rom_histogram() == rom_histogram_from_min_traces(program, out.min_traces)


def test_flat_memory_makes_code_writable_and_recorded():
    program = load_elf(SUITE / "elf" / "rv64uc-p-rvc", memory="flat")
    assert program.fetch == "any"
    _, out = run("rv64uc-p-rvc", "reference")
    # the code segment is writable code now: each fetch is a recorded read, so a chunk replays from its trace
    assert sum(len(t.mem_reads) for t in out.min_traces) >= out.steps
    rows = sum(len(witness_table(program, t)) for t in out.min_traces)
    assert rows == out.steps


def test_emulate_memory_flag(backend, capsys):
    elf = str(SUITE / "elf" / "rv64uc-p-rvc")
    # from the first step on the backend itself: a guest this short would otherwise end in the interpreter
    assert main(["emulate", elf, "--memory", "flat", "--backend", backend, "--no-interpreter-start"]) == 0
    assert "exit code 0 (exit ecall)" in capsys.readouterr().out
    assert main(["emulate", elf, "--backend", backend, "--no-interpreter-start"]) == 1
    assert "exit code 671 (tohost write)" in capsys.readouterr().out
    assert main(["emulate", elf, "--memory", "flat", "--fetch", "executable"]) == 2
    assert capsys.readouterr().err == ("hetflow: error: --memory flat fetches from any mapped memory (it implies "
                                       "--fetch any); drop --fetch executable, or drop --memory flat\n")


def test_unknown_memory_mode_is_refused():
    with pytest.raises(ValueError, match="unknown memory mode 'rwx'; expected one of protected, flat"):
        load_elf(SUITE / "elf" / "rv64ui-p-add", memory="rwx")


@pytest.mark.skipif(importlib.util.find_spec("ziglang") is None,
                    reason="the compiler is absent: pip install ziglang (zig's clang and lld) to rebuild riscv-tests")
def test_rebuilt_from_source_passes(tmp_path, backend):
    name = "rv64ua-p-lrsc"
    built = build(name, str(tmp_path), compiler())
    program = load_elf(built, memory="flat")
    shipped = load_elf(SUITE / "elf" / name, memory="flat")
    if importlib.metadata.version("ziglang") == "0.17.0":     # the compiler SOURCE names: the same bytes
        # what the tests above ran is what build.py makes from src/
        assert [s.data for s in program.segments] == [s.data for s in shipped.segments]
    out = execute(program, backend=backend, runners=False)
    assert (out.end_reason, out.exit_code) == ("exit", 0)


def test_build_script_runs_as_documented(tmp_path):
    if compiler() is None:
        pytest.skip("the compiler is absent: pip install ziglang (zig's clang and lld) to rebuild riscv-tests")
    done = subprocess.run([sys.executable, str(SUITE / "build.py"), "--out", str(tmp_path), "rv64ui-p-simple"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path) == ["rv64ui-p-simple"]


MANIFEST = """\
version: 1
name: riscv-tests
emulators:
  guest: {{backend: reference, program: {elf}, {memory}}}
executors:
  host: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: guest}}
outputs:
  steps: run.steps
"""


@pytest.mark.parametrize("memory", ["memory: flat", "memory: protected", ""])
def test_memory_in_the_manifest_reaches_the_emulator(tmp_path, capsys, memory):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.format(elf=SUITE / "elf" / "rv64uc-p-rvc", memory=memory))
    code = main(["run", str(path), "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    record = json.loads((tmp_path / "runs" / out.split()[-1] / "record.json").read_text())
    if memory == "memory: flat":
        assert (code, record["status"]) == (0, "succeeded"), err
        assert record["outputs"]["steps"]["value"] == run("rv64uc-p-rvc", "reference")[1].steps
    else:                       # test 6's store into the code segment faults: exit code 671 is not accepted
        assert (code, record["status"]) == (1, "failed")
        assert "671" in json.dumps(record["error"]), record["error"]


def test_flat_memory_with_fetch_executable_is_refused_in_the_manifest(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.format(elf=SUITE / "elf" / "rv64uc-p-rvc", memory="memory: flat, fetch: executable"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert (f"{path}:4:" in err and "emulator 'guest': memory: flat fetches from any mapped memory (it implies "
            "fetch: any); drop fetch: executable, or drop memory: flat" in err), err


# auipc t0, 0; lw t1, 28(t0); sw t1, 16(t0); fence.i; li a0, 3; li a7, 93; ecall; .word <li a0, 7>
# (llvm-mc -triple=riscv64 -mattr=-c): the store rewrites "li a0, 3" in the program's own code to "li a0, 7"
PATCH_OWN_CODE = bytes.fromhex("9702000003a3c20123a862000f100000130530009308d005730000001305" "7000")


def _patching(memory):
    return Program("patch", 0x8000_0000, (Segment(0x8000_0000, PATCH_OWN_CODE, PERM_R | PERM_X),), memory=memory,
                   fetch="any" if memory == "flat" else "executable")


def test_code_rewritten_in_flat_memory_runs_as_rewritten(backend):
    # the riscv-tests store into their code but never run what they stored: here the patched word runs, on a
    # backend that translated it before the store (native) as on the interpreters
    with pytest.raises(GuestTrap) as e:
        execute(_patching("protected"), backend=backend, runners=False)
    assert (e.value.cause, e.value.tval) == (7, 0x8000_0010)
    out = execute(_patching("flat"), backend=backend, chunk_steps=3, runners=False)
    assert (out.exit_code, out.steps) == (7, 7)
    assert out.same_result(execute(_patching("flat"), backend="reference", chunk_steps=3)) == []
    verify_min_traces(_patching("flat"), out, backend=backend)


def test_flat_memory_with_executable_fetch_is_refused_by_every_backend(backend):
    program = _patching("flat")._replace(fetch="executable")
    with pytest.raises(ValueError, match="patch: flat memory fetches from anywhere mapped; its fetch protection "
                                         "must be 'any', not 'executable'"):
        execute(program, backend=backend, runners=False)
