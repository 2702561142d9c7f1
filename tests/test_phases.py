"""Emulator phases as pipeline nodes: manifest checks, plan, rounds, outputs, fast == reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine.manifest import validate as mf
from hetflow.engine.run import phases
from hetflow.engine.errors import ManifestError, RunFailed
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.plan.planner import render_dot, render_text
from hetflow.engine.run.execute import execute
from hetflow.executors import emulator as emu

GUESTS = Path(__file__).resolve().parents[1] / "examples" / "guests"

PIPELINE = """\
version: 1
name: zk
emulators:
  emu:
    backend: {backend}
    program: {program}
    chunk_steps: 128
executors:
  cpu: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: emu}}
  mem: {{phase: mem-plans, inputs: [run], args: {{rows_per_plan: 64}}}}
  rom: {{phase: rom-histogram, inputs: [run]}}
  inst: {{phase: plan, inputs: [run], args: {{sizes: {{main: 200, mem: 50}}}}}}
  wit: {{phase: witness, inputs: [run]}}
  top: {{op: max, inputs: [wit], args: {{axis: 0}}}}
outputs:
  top: top
  steps: run.steps
  exit_code: run.exit_code
  pub_outs: run.pub_outs
  plans: mem.plans
  hist: rom
  instances: inst.instances
  trace: wit
"""


def _write(tmp_path, backend="fast", program=None, text=None, name="zk.yaml"):
    path = tmp_path / name
    path.write_text(text or PIPELINE.format(backend=backend, program=program or GUESTS / "fib.elf"))
    return path


def _compile(path):
    return mf.compile_manifest(mf.load(path))


def _run(path, tmp_path):
    m = _compile(path)
    return execute(m, make_plan(m, __import__("hetflow.executors", fromlist=["probe"]).probe),
                   runs_dir=str(tmp_path / "runs"), num_workers=2)


def test_fast_and_reference_give_identical_outputs(tmp_path):
    records = {}
    for backend in ("fast", "reference"):
        result = _run(_write(tmp_path, backend, name=f"{backend}.yaml"), tmp_path)
        assert result.status == "succeeded"
        records[backend] = result.record
    fast, ref = records["fast"]["outputs"], records["reference"]["outputs"]
    assert set(fast) == {"top", "steps", "exit_code", "pub_outs", "plans", "hist", "instances", "trace"}
    for name in fast:
        assert fast[name]["digest"] == ref[name]["digest"], name
    assert fast["steps"]["value"] == emu.execute(GUESTS / "fib.elf", runners=False).steps
    assert fast["plans"]["value"] and fast["hist"]["value"]["counts"]


def test_witness_is_one_task_per_chunk_and_its_table_exactly(tmp_path):
    result = _run(_write(tmp_path), tmp_path)
    tasks = [t for t in result.record["tasks"] if t["kind"] == "witness"]
    out = emu.execute(GUESTS / "fib.elf", chunk_steps=128, runners=False)
    assert sorted(t["chunk"] for t in tasks) == list(range(len(out.min_traces)))
    assert len(out.min_traces) > 1
    table = np.load(Path(result.run_dir) / result.record["outputs"]["trace"]["file"])
    assert table.dtype == np.int64 and table.shape == (out.steps, len(emu.WITNESS_COLUMNS))
    expected = np.concatenate([emu.witness_table(GUESTS / "fib.elf", t) for t in out.min_traces])
    assert np.array_equal(table, expected)
    assert all(v == 0 for v in result.record["live_activations_after"].values())
    assert {p: e["status"] for p, e in result.record["phases"].items()} == dict.fromkeys(
        ("run", "mem", "rom", "inst", "wit"), "succeeded")
    assert result.record["phases"]["wit"]["tasks"] == len(out.min_traces) + 1, "the chunks, and handing on the table"
    (gather,) = [t for t in result.record["tasks"] if t["kind"] == "phase" and t["id"] == "wit"]
    assert gather["status"] == "succeeded" and gather["start"] >= max(t["start"] for t in tasks)


def test_the_plan_shows_the_bridge_from_the_emulator(tmp_path):
    m = _compile(_write(tmp_path))
    from hetflow.executors import probe
    p = make_plan(m, probe)
    data = p.to_json()
    (bridge,) = data["bridges"]
    assert (bridge["tensor"], bridge["source"], bridge["destination"], bridge["kind"]) == (
        "wit", "emulator:emu", "cpu", "emulator output import")
    assert set(data["phases"]) == {"run", "mem", "rom", "inst", "wit"} and "wit" not in data["nodes"]
    assert "wit@cpu: wit emulator:emu -> cpu" in render_text(p)
    assert '"bridge:wit@cpu"' in render_dot(p) and "emulator output import" in render_dot(p)
    json.dumps(data)


def test_a_trapping_guest_fails_the_run_and_leaves_no_live_activations(tmp_path):
    path = _write(tmp_path, program=GUESTS / "fault_store.elf")
    with pytest.raises(RunFailed, match="access fault"):
        _run(path, tmp_path)
    record = json.loads(next((tmp_path / "runs").rglob("record.json")).read_text())
    assert record["status"] == "failed" and record["error"]["node"] == "run"
    assert record["error"]["origin"].endswith(":11:3")
    assert all(v == 0 for v in record["live_activations_after"].values())
    assert record["phases"]["run"]["status"] == "failed" and record["phases"]["wit"]["status"] == "not run"
    assert record["nodes"]["top"]["status"] == "not run"


def test_cli_reports_a_phase_mistake_with_exit_2(tmp_path):
    import io

    from hetflow.engine.cli import main
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.format(program=GUESTS / "fib.elf", stages="  run: {phase: execute, retries: 2}\n"))
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(path)], out, err) == 2
    assert f"{path}:8:25: error: stage 'run' is an execute phase, which runs on its emulator: 'retries'" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def _errors(tmp_path, text, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ManifestError) as e:
        _compile(path)
    return [str(d).replace(str(path), "F") for d in e.value.diagnostics]


BASE = """\
version: 1
name: bad
emulators:
  emu: {{program: {program}}}
executors:
  cpu: {{vendor: cpu}}
stages:
{stages}
outputs: {{}}
"""


@pytest.mark.parametrize("program, stages, expected", [
    ("fib.elf", "  run: {phase: execute, emulator: emo}\n",
     "F:8:35: error: stage 'run' names emulator 'emo', which is not declared (declared: emu); did you mean 'emu'?"),
    ("missing.elf", "  run: {phase: execute}\n",
     "F:4:18: error: emulator 'emu': program 'missing.elf' does not exist"),
    ("fib.c", "  run: {phase: execute}\n",
     "F:4:18: error: emulator 'emu': program"),
    ("fib.elf", "  run: {phase: execute}\n  a: {op: arange, args: {stop: 4}}\n  w: {phase: witness, inputs: [a]}\n",
     "F:10:32: error: phase 'witness' of stage 'w' takes an execute phase, but 'a' is an executor stage"),
    ("fib.elf", "  run: {phase: execute}\n  x: {op: relu, inputs: [run]}\n",
     "F:9:26: error: stage 'x' takes input 'run', an execute phase, which yields data, not an array"),
    ("fib.elf", "  run: {phase: execute, op: relu}\n",
     "F:8:9: error: stages.run needs exactly one of 'op' or 'phase', found 'op' and 'phase'"),
])
def test_phase_mistakes_have_file_line_col(tmp_path, program, stages, expected):
    found = _errors(tmp_path, BASE.format(program=GUESTS / program if program != "missing.elf" else program,
                                          stages=stages))
    assert any(f.startswith(expected) for f in found), found
    if program == "fib.c":
        assert "is not a guest ELF" in found[0] and "not an ELF file" in found[0]


def test_outputs_name_phase_fields(tmp_path):
    text = BASE.format(program=GUESTS / "fib.elf", stages="  run: {phase: execute}\n  x: {op: arange, args: {stop: 4}}\n")
    text = text.replace("outputs: {}", "outputs: {a: run.stepz, b: x.steps}")
    found = _errors(tmp_path, text)
    assert any("output 'a' names 'run.stepz': an execute phase has no field 'stepz'" in f for f in found), found
    assert any("output 'b' names 'x.steps': 'x' is not an emulator phase" in f for f in found), found


def test_the_witness_activation_is_the_table_itself_extremes_included():
    table = np.zeros((2, 16), dtype=np.int64)
    table[0, :5] = [0, -1, np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0x123456789abcdef]
    portable = phases.witness_activation(table)
    assert portable.dtype.value == "int64" and portable.shape.dims == (2, 16)
    assert np.array_equal(portable.to_array(), table)
    assert np.shares_memory(np.frombuffer(portable.bytes, np.int64), table), "no copy of the table"
    with pytest.raises(ValueError):
        table[0, 0] = 1  # shared with every executor that adopts the bytes: read-only


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_chunks_fill_one_table_in_place(backend):
    out = emu.execute(GUESTS / "fib.elf", chunk_steps=64, runners=False)
    whole = np.full((out.steps, len(emu.WITNESS_COLUMNS)), -7, dtype=np.int64)
    row = 0
    for t in out.min_traces:
        part = whole[row:row + t.steps]
        assert emu.witness_table(GUESTS / "fib.elf", t, backend=backend, out=part) is part
        row += t.steps
    assert np.array_equal(whole, np.concatenate([emu.witness_table(GUESTS / "fib.elf", t) for t in out.min_traces]))
    with pytest.raises(ValueError, match="witness buffer"):
        emu.witness_table(GUESTS / "fib.elf", out.min_traces[0], backend=backend, out=whole[:1])


def test_the_plan_and_the_run_give_one_reason_a_witness_consumer_is_not_cached(tmp_path):
    import hetflow

    path = _write(tmp_path)
    runs = tmp_path / "runs"
    forecast = hetflow.plan(str(path), runs_dir=str(runs)).cache
    result = _run(path, tmp_path)
    recorded = {pid: k["reason"] for pid, k in result.record["cache"]["keys"].items()}
    readers = {pid: why for pid, why in recorded.items() if why and "emulator phase's array" in why}
    assert readers, recorded
    for pid, why in readers.items():
        assert forecast[pid] == {"status": "will run", "reason": f"not cacheable: {why}"}
        assert "reads 'wit'" in why and "cache: false" not in why


def test_the_text_log_gives_a_witness_phase_two_lines_not_two_a_chunk(tmp_path, capsys):
    from hetflow.engine.cli import main

    path = _write(tmp_path)
    assert main(["run", "--no-cache", "--runs-dir", str(tmp_path / "runs"), str(path)]) == 0
    lines = capsys.readouterr().err.splitlines()
    chunks = len(emu.execute(GUESTS / "fib.elf", chunk_steps=128, runners=False).min_traces)
    witness = [line for line in lines if "] witness " in line]
    assert len(witness) == 2 and chunks > 2, lines
    assert witness[0].endswith("witness wit: chunks started on emulator:emu")
    assert f"witness wit: {chunks} chunks finished on emulator:emu in " in witness[1]
    assert lines.index(witness[1]) < next(i for i, line in enumerate(lines) if "phase wit started" in line)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_output_names_the_registers_the_guest_ended_with(tmp_path, backend):
    text = PIPELINE.format(backend=backend, program=GUESTS / "fib.elf").replace(
        "outputs:\n", "outputs:\n  regs: run.registers\n  all: run\n", 1)
    result = _run(_write(tmp_path, backend=backend, text=text), tmp_path)
    entry = result.record["outputs"]["regs"]
    regs = np.load(Path(result.run_dir) / entry["file"]).view(np.uint64)
    out = emu.execute(GUESTS / "fib.elf", chunk_steps=128, runners=False, backend="reference")
    state = __import__("hetflow.executors.emulator.reference", fromlist=["replay_chunk"]).replay_chunk(
        emu.load_elf(str(GUESTS / "fib.elf")), out.min_traces[-1])[0]
    # an int64 array now (x0..x31, then pc), so a stage can take it; unsigned through view(np.uint64)
    assert regs.tolist() == [*state.regs, state.pc] and entry["columns"][-1] == "pc"
    assert regs[0] == 0 and regs[17] == 93, "a7 holds the exit call's number"
    assert "registers" not in result.record["outputs"]["all"]["value"], "the JSON fields only"
