"""The native backend's MO and RH runners and its replay (witness rows
included) on translated code without numba: their arrays against the fast
and reference backends' for real guests (the SDK's, the repository's
guests, the official riscv-tests), a guest that rewrites its code, one that
prints; their errors against fast's; and a whole native pipeline phase in a
fresh process with empty caches that never imports numba."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hetflow.executors.emulator import (EmulatorError, execute, fast, load_elf, mem_ops_from_min_traces,
                                        native_runners, rom_histogram_from_min_traces, witness_table)
from hetflow.executors.emulator.layout import LOG_OPS, LOG_PCS, WITNESS
from hetflow.executors.emulator.output import EmuTrace

from _guests import GUESTS

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "data" / "riscv-tests" / "elf"

# (label, ELF, memory, input): sort and sha256 run almost all in translated code; isa_smc rewrites its code
# (writable, so the interpreter runs it); hello prints through ecall; the riscv-tests cover every ALU, M,
# load and store form, and in flat memory (rvc, fence_i) code that the suite writes and then runs
CASES = [
    ("sort", GUESTS / "sort.elf", "protected", b""),
    ("sha256_rvc", GUESTS / "sha256_rvc.elf", "protected", b"abc" * 700),
    ("isa_smc", GUESTS / "isa_smc.elf", "protected", b""),
    ("isa_amo", GUESTS / "isa_amo.elf", "protected", b""),
    ("isa_trap", GUESTS / "isa_trap.elf", "protected", b""),
    ("sdk-hello", GUESTS / "sdk" / "hello.elf", "protected", b""),
    ("rv64ui-p-ld", SUITE / "rv64ui-p-ld", "protected", b""),
    ("rv64ui-p-lh", SUITE / "rv64ui-p-lh", "protected", b""),
    ("rv64ui-p-lwu", SUITE / "rv64ui-p-lwu", "protected", b""),
    ("rv64ui-p-jalr", SUITE / "rv64ui-p-jalr", "protected", b""),
    ("rv64um-p-mulhsu", SUITE / "rv64um-p-mulhsu", "protected", b""),
    ("rv64ui-p-sb", SUITE / "rv64ui-p-sb", "protected", b""),
    ("rv64uc-p-rvc", SUITE / "rv64uc-p-rvc", "flat", b""),
    ("rv64ui-p-fence_i", SUITE / "rv64ui-p-fence_i", "flat", b""),
]
_runs = {}


def _run(label):
    if label not in _runs:
        _, path, memory, data = next(c for c in CASES if c[0] == label)
        program = load_elf(path, memory=memory)
        _runs[label] = program, data, execute(program, backend="reference", input=data, chunk_steps=997,
                                              runners=False)
    return _runs[label]


@pytest.mark.parametrize("label", [c[0] for c in CASES])
def test_mem_ops_and_rom_histogram_equal_fast_and_reference(label):
    program, data, ref = _run(label)
    nat_image = native_runners.image_of(program, data, len(data))
    fast_image = fast.image_of(program, data, len(data))
    ops = native_runners.mem_ops_runner(nat_image, program, 1 << 24)
    expected = fast.mem_ops_runner(fast_image, program, 1 << 24)
    assert ops.dtype == expected.dtype == np.int64 and ops.shape == expected.shape
    assert np.array_equal(ops, expected)
    assert np.array_equal(ops, mem_ops_from_min_traces(program, ref.min_traces, len(data)))
    hist = native_runners.rom_histogram_runner(nat_image, program, 1 << 24)
    assert hist == fast.rom_histogram_runner(fast_image, program, 1 << 24)
    assert hist == rom_histogram_from_min_traces(program, ref.min_traces, len(data))
    assert hist.counts.dtype == np.uint64 and hist.pcs.dtype == np.uint64 and hist.steps == ref.steps


@pytest.mark.parametrize("label", [c[0] for c in CASES])
def test_replay_and_witness_rows_equal_fast_and_reference(label):
    program, data, ref = _run(label)
    for t in ref.min_traces:
        state, counts, m = native_runners.replay_chunk(program, t, len(data))
        fstate, fcounts, _ = fast.replay_chunk(program, t, len(data))
        assert state == fstate and counts.tolist() == fcounts.tolist() == ref.counters.table[t.chunk_id].tolist()
        if t.chunk_id + 1 < len(ref.min_traces):
            assert state == ref.min_traces[t.chunk_id + 1].start_state
        rows = witness_table(program, t, input_size=len(data), backend="native")
        expected = witness_table(program, t, input_size=len(data), backend="reference")
        assert rows.dtype == np.int64 and rows.shape == expected.shape == (t.steps, 16)
        assert np.array_equal(rows, witness_table(program, t, input_size=len(data), backend="fast"))
        assert np.array_equal(rows, expected), f"{label}: chunk {t.chunk_id}"


def test_witness_rows_land_in_the_given_buffer_as_on_fast():
    program, data, ref = _run("sha256_rvc")
    t = ref.min_traces[1]
    table = np.full((t.steps + 4, 16), -7, dtype=np.int64)
    got = witness_table(program, t, input_size=len(data), backend="native", out=table[2:2 + t.steps])
    assert np.shares_memory(got, table) and (table[:2] == -7).all() and (table[-2:] == -7).all()
    assert np.array_equal(table[2:2 + t.steps], witness_table(program, t, input_size=len(data), backend="fast"))
    with pytest.raises(ValueError, match="C-contiguous int64"):
        witness_table(program, t, input_size=len(data), backend="native", out=table[:t.steps, :8])


def test_translated_code_does_the_work():
    # the point of the move: the interpreter runs only what translated code leaves (here the exit ecall and
    # the steps of chunks that start inside blocks are translated too)
    program, data, ref = _run("sha256_rvc")
    image = native_runners.image_of(program, data, len(data))
    for mode in (LOG_OPS, LOG_PCS):
        m = native_runners._whole_run(image, program, mode, 1 << 24, None, None)
        assert int(m.st[1]) == ref.steps and m.interpreted < ref.steps // 1000
    interpreted = sum(native_runners.replay_chunk(program, t, len(data), mode=WITNESS)[2].interpreted
                      for t in ref.min_traces)
    assert interpreted < ref.steps // 1000


def test_printed_bytes_come_from_the_guest_and_the_rows_record_the_write():
    from hetflow.executors.emulator.isa import BY_NAME

    program, data, ref = _run("sdk-hello")
    assert ref.stdout.startswith(b"sum of squares 1..100 = 338350")
    rows = np.concatenate([witness_table(program, t, backend="native") for t in ref.min_traces])
    # the write syscall's ecall writes a0 (the interpreter's row, among translated code's rows)
    writes = rows[(rows[:, 3] == BY_NAME["ecall"]) & (rows[:, 5] == 10)]
    assert len(writes) >= ref.stdout.count(b"\n") and (writes[:, 14] == -1).all()


@pytest.mark.parametrize("cut", ["short", "long"])
def test_a_wrong_min_trace_fails_as_on_fast(cut):
    program, data, ref = _run("sort")
    t = max(ref.min_traces, key=lambda t: len(t.mem_reads))
    reads = t.mem_reads[:-1] if cut == "short" else np.concatenate([t.mem_reads, t.mem_reads[:1]])
    bad = EmuTrace(t.chunk_id, t.start_state, t.steps, reads, t.end)
    errors = []
    for mod in (fast, native_runners):
        with pytest.raises(EmulatorError) as e:
            mod.replay_chunk(program, bad, len(data))
        errors.append(str(e.value))
    assert errors[0] == errors[1]


_PIPELINE = """\
version: 1
name: offnumba
emulators:
  emu:
    backend: {backend}
    program: {program}
    chunk_steps: 64
executors:
  cpu: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: emu}}
  mem: {{phase: mem-plans, inputs: [run], args: {{rows_per_plan: 512}}}}
  rom: {{phase: rom-histogram, inputs: [run]}}
  wit: {{phase: witness, inputs: [run]}}
outputs:
  steps: run.steps
  plans: mem.plans
  hist: rom
  trace: wit
"""

_SCRIPT = """\
import json, sys
from hetflow.engine.manifest import validate as mf
from hetflow.engine.plan.planner import plan
from hetflow.engine.run.execute import execute
from hetflow.executors import probe
m = mf.compile_manifest(mf.load(sys.argv[1]))
r = execute(m, plan(m, probe), runs_dir=sys.argv[2], num_workers=2)
print(json.dumps({"status": r.status, "numba": "numba" in sys.modules,
                  "digests": {k: v["digest"] for k, v in r.record["outputs"].items()}}))
"""


def _pipeline(tmp_path, backend, env=None):
    path = tmp_path / f"{backend}.yaml"
    path.write_text(_PIPELINE.format(backend=backend, program=GUESTS / "fib.elf"))
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(path), str(tmp_path / f"runs-{backend}")],
                       capture_output=True, text=True, cwd=tmp_path, env=env or os.environ.copy(), timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1]), r.stderr


def test_a_native_pipeline_phase_never_imports_numba(tmp_path):
    pytest.importorskip("llvmlite", reason="the native backend needs llvmlite")
    # fresh caches: the translations are compiled in this process (LLVM), numba's cache is empty
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("HETFLOW_NATIVE_CACHE", None)
    native, stderr = _pipeline(tmp_path, "native", env)
    assert native["status"] == "succeeded" and native["numba"] is False
    assert "compiling the fast backend" not in stderr and "translating fib.elf" in stderr
    # and its outputs are the reference backend's to the byte
    reference, _ = _pipeline(tmp_path, "reference")
    assert native["digests"] == reference["digests"] and set(native["digests"]) == {"steps", "plans", "hist",
                                                                                     "trace"}


@pytest.mark.parametrize("limit", [4999, 5000 + 3])
def test_runners_stop_at_the_step_limit_as_on_fast(limit):
    from hetflow.executors.emulator import StepLimitExceeded, TimeLimitExceeded

    program = load_elf(GUESTS / "spin.elf")
    for runner in ("mem_ops_runner", "rom_histogram_runner"):
        errors = []
        for mod in (fast, native_runners):
            with pytest.raises(StepLimitExceeded) as e:
                getattr(mod, runner)(mod.image_of(program, b"", 0), program, limit)
            errors.append((str(e.value), e.value.pc, e.value.step, e.value.insn))
        assert errors[0] == errors[1] and errors[1][2] == limit
    # a deadline already passed stops the run before its first slice of translated code
    with pytest.raises(TimeLimitExceeded):
        native_runners.mem_ops_runner(native_runners.image_of(program, b"", 0), program, 1 << 40, deadline=0.0,
                                      timeout=1.0)
