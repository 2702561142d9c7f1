"""Integer tables of what a guest leaves (issue 31): registers, min traces, the mem-plans and instance tables
as int64 array fields a stage reads as ``PHASE.FIELD`` and ``outputs:`` persists as ``.npy``.

Every run is of a shipped guest on each backend. The expected values come from the emulator's own Python
API (``execute``, ``replay_chunk``, ``mem_ops_from_min_traces``, ``plan_instances``) and from what the tables
must mean (a min trace read back re-executes its chunk to the same witness rows), not from the engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine.manifest import validate as mf
from hetflow.engine.manifest import phasedecl as phases
from hetflow.engine.run import phases as phaserun
from hetflow.engine.errors import ManifestError
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import execute
from hetflow.executors import emulator as emu
from hetflow.executors import probe
from hetflow.executors.emulator import memplan, output, reference

GUESTS = Path(__file__).resolve().parents[1] / "examples" / "guests"
SIZES = {"main": 200, "binary": 150, "mem": 50}

PIPELINE = """\
version: 1
name: tables
emulators:
  emu: {{backend: {backend}, program: {program}, chunk_steps: 128, max_steps: 100000}}
executors:
  cpu: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: emu}}
  mem: {{phase: mem-plans, inputs: [run], args: {{rows_per_plan: 64}}}}
  inst: {{phase: plan, inputs: [run], args: {{sizes: {sizes}}}}}
  reg_top: {{op: max, inputs: [run.registers], args: {{axis: 0}}}}
  mem_top: {{op: max, inputs: [mem.table], args: {{axis: 0}}}}
  writes: {{op: sum, inputs: [mem.rows], args: {{axis: 0}}}}
  inst_rows: {{op: sum, inputs: [inst.instances_table], args: {{axis: 0}}}}
  lengths: {{op: sum, inputs: [run.min_trace_index], args: {{axis: 0}}}}
  words: {{op: relu, inputs: [run.min_trace]}}
outputs:
  registers: run.registers
  min_trace: run.min_trace
  min_trace_index: run.min_trace_index
  mem_table: mem.table
  mem_rows: mem.rows
  instances: inst.instances_table
  reg_top: reg_top
  mem_top: mem_top
  writes: writes
  inst_rows: inst_rows
  lengths: lengths
  words: words
  steps: run.steps
"""


# what each backend compiles with; a machine without it skips that backend's cases, saying so
_NEEDS = {"reference": None, "fast": "numba", "native": "llvmlite"}


def _available(backend: str) -> bool:
    import importlib.util

    return _NEEDS[backend] is None or importlib.util.find_spec(_NEEDS[backend]) is not None


def _backends() -> list:
    return [name if _available(name) else
            pytest.param(name, marks=pytest.mark.skip(reason=f"backend {name} needs {_NEEDS[name]}, not installed"))
            for name in emu.BACKENDS]


def _write(tmp_path, backend="fast", program="fib.elf", text=None):
    path = tmp_path / f"{backend}.yaml"
    path.write_text(text or PIPELINE.format(backend=backend, program=GUESTS / program, sizes=json.dumps(SIZES)))
    return path


def _run(path, tmp_path, **kwargs):
    m = mf.compile_manifest(mf.load(path))
    return execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "runs"), use_cache=False, num_workers=2, **kwargs)


def _arrays(result) -> dict[str, np.ndarray]:
    return {name: np.load(Path(result.run_dir) / entry["file"]) for name, entry in result.record["outputs"].items()
            if "file" in entry}


def test_the_phase_table_names_the_columns_the_builders_write():
    kinds = phases.PHASES
    assert kinds["execute"].array_field("registers").columns == output.REGISTER_COLUMNS
    assert kinds["execute"].array_field("min_trace").columns == output.MIN_TRACE_COLUMNS
    assert kinds["mem-plans"].array_field("table").columns == memplan.MEM_PLAN_COLUMNS
    assert kinds["mem-plans"].array_field("rows").columns == memplan.MEM_ROW_COLUMNS
    assert kinds["plan"].array_field("instances_table").columns == output.INSTANCE_COLUMNS
    assert list(emu.STATE_MACHINES) == ["main", "binary", "arith", "mem"], "the documented machine ids"


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("program", ["fib.elf", "sha256.elf"])
def test_each_array_equals_what_the_python_api_gives(tmp_path, backend, program):
    result = _run(_write(tmp_path, backend, program), tmp_path)
    assert result.status == "succeeded", result.record.get("error")
    got = _arrays(result)
    elf = emu.load_elf(str(GUESTS / program))
    out = emu.execute(elf, backend="reference", chunk_steps=128, runners=False)

    end, _, _ = reference.replay_chunk(elf, out.min_traces[-1])
    assert got["registers"].dtype == np.int64 and got["registers"].view(np.uint64).tolist() == [*end.regs, end.pc]
    assert got["registers"][17] == 93 and got["registers"][0] == 0, "a7 holds the exit call, x0 is zero"

    # the word stream reads back as the run's own min traces, and each chunk re-executes from its slice alone
    index, words = got["min_trace_index"], got["min_trace"]
    assert index.shape == (len(out.min_traces), 2) and index[:, 1].sum() == len(words)
    assert index[1:, 0].tolist() == np.cumsum(index[:, 1])[:-1].tolist()
    assert output.min_traces_from_array(words, index) == out.min_traces
    last = output.min_traces_from_array(words[index[-1, 0]:index[-1].sum()], [[0, index[-1, 1]]])[0]
    assert np.array_equal(emu.witness_table(elf, last, backend="reference"),
                          emu.witness_table(elf, out.min_traces[-1], backend="reference"))

    # one row a plan: counts cover every memory operation, sorted by (address, step), rows_per_plan at most
    ops = memplan.mem_ops_from_min_traces(elf, out.min_traces)
    table = got["mem_table"]
    assert table.shape == (-(-len(ops) // 64), len(memplan.MEM_PLAN_COLUMNS))
    assert table[:, 2].sum() == len(ops) and table[:, 2].max() <= 64 and table[-1, 7] == 1 and table[:-1, 7].sum() == 0
    order = np.lexsort((ops[:, 1], ops[:, 0].view(np.uint64)))
    assert table[0, 3:5].tolist() == ops[order[0], :2].tolist()
    assert table[-1, 5:7].tolist() == ops[order[-1], :2].tolist()
    # the rows themselves: every operation once, by (address, step); each plan's first and last row are its own
    rows_ = got["mem_rows"]
    assert rows_.tolist() == ops[order].tolist() and set(rows_[:, 2].tolist()) <= {0, 1}
    assert rows_[table[:, 1], :2].tolist() == table[:, 3:5].tolist()
    assert rows_[table[:, 1] + table[:, 2] - 1, :2].tolist() == table[:, 5:7].tolist()

    # one row an instance; a machine's rows add up to its classes' counts over the run
    instances = emu.plan_instances(out.counters, SIZES)
    rows = got["instances"]
    assert rows.shape == (len(instances), len(output.INSTANCE_COLUMNS))
    for machine, size in SIZES.items():
        mine = rows[rows[:, 0] == list(emu.STATE_MACHINES).index(machine)]
        totals = out.counters.totals()
        assert mine[:, 3].sum() == sum(totals[c] for c in emu.STATE_MACHINES[machine])
        assert (mine[:, 2] == size).all() and mine[-1, 8] == 1
    assert [(r[4], r[5], r[6], r[7]) for r in rows.tolist()] == [
        (i.slices[0][0], i.slices[0][1], i.slices[-1][0], i.slices[-1][2]) for i in instances]

    # the stages that read them computed on the same tables
    assert got["reg_top"] == got["registers"].max()
    assert got["mem_top"].tolist() == table.max(axis=0).tolist()
    assert got["writes"][2] == ops[:, 2].sum() > 0
    assert got["inst_rows"].tolist() == rows.sum(axis=0).tolist()
    assert got["lengths"].tolist() == [index[:, 0].sum(), len(words)]
    assert got["words"].tolist() == np.maximum(words, 0).tolist()


def test_the_record_lists_each_arrays_columns_and_the_backends_agree(tmp_path):
    records = {}
    for backend in [b for b in _backends() if isinstance(b, str)]:
        records[backend] = _run(_write(tmp_path, backend), tmp_path).record["outputs"]
    first = next(iter(records.values()))
    for name, entry in first.items():
        assert {r[name]["digest"] for r in records.values()} == {entry["digest"]}, name
    assert first["registers"]["columns"][-1] == "pc" and first["registers"]["shape"] == [33]
    assert first["mem_table"]["columns"] == list(memplan.MEM_PLAN_COLUMNS)
    assert first["mem_rows"]["columns"] == ["address", "step", "is_write"]
    assert first["instances"]["field"] == "instances_table" and first["instances"]["dtype"] == "int64"
    assert first["min_trace"]["columns"][:3] == ["chunk_id", "steps", "end"]


def test_the_plan_shows_each_arrays_shape_and_its_bridge(tmp_path):
    m = mf.compile_manifest(mf.load(_write(tmp_path)))
    data = make_plan(m, probe).to_json()
    nodes = data["phases"]
    assert (nodes["run.registers"]["shape"], nodes["run.registers"]["size"]) == ([33], "exact")
    assert (nodes["run.min_trace"]["shape"], nodes["run.min_trace"]["size"]) == (None, "unknown")
    assert (nodes["run.min_trace_index"]["shape"], nodes["run.min_trace_index"]["size"]) == ([782, 2], "bound")
    # at most one row of a machine a step: 100000 / 200 main + 100000 / 150 binary + 100000 / 50 mem
    assert nodes["inst.instances_table"]["shape"] == [500 + 667 + 2000, 9]
    assert nodes["run"]["arrays"]["registers"]["columns"] == list(output.REGISTER_COLUMNS)
    assert {b["tensor"]: b["kind"] for b in data["bridges"]}["mem.table"] == phases.EMULATOR_BRIDGE
    dtypes = {n: v["dtype"] for n, v in data["nodes"].items()}
    assert dtypes["reg_top"] == dtypes["words"] == "int64", "a stage without dtype: takes its array's"
    shapes = {n: v["shape"] for n, v in data["nodes"].items()}
    assert shapes["reg_top"] == [] and shapes["inst_rows"] == [9] and shapes["words"] is None


def test_the_plan_text_lists_an_array_fields_node_with_its_shape(tmp_path):
    from hetflow.engine.plan.planner import render_text

    text = render_text(make_plan(mf.compile_manifest(mf.load(_write(tmp_path))), probe))
    assert "  run.registers         array         on emulator:emu  inputs: run; yields array [33] int64 (264 B" in text
    assert "run.min_trace@cpu: run.min_trace emulator:emu -> cpu, unknown size, emulator output import; " \
           "consumers: words" in text


@pytest.mark.parametrize("backend", _backends())
def test_an_array_field_reaches_the_cpu_executor_without_a_copy(tmp_path, backend):
    import dask.threaded

    from hetflow.executors.cpu import CpuExecutor

    m = mf.compile_manifest(mf.load(_write(tmp_path, backend)))
    runner = phaserun.PhaseRunner(m.emulators, m.phases, lambda *a, **k: None)
    first = runner.round1()
    dask.threaded.get(first, list(first))
    second = runner.round2()
    portable = dask.threaded.get(second, "phase:mem.table")
    table = runner.array("mem", "table")
    assert np.shares_memory(np.frombuffer(portable.bytes, np.int64), table) and not table.flags.writeable
    cpu = CpuExecutor()
    handle = cpu.import_activation(portable)
    try:
        assert np.shares_memory(cpu._get(handle), table), "the executor adopts the table's bytes"
    finally:
        cpu.release_activation(handle)


BAD = """\
version: 1
name: bad
emulators:
  emu: {{backend: reference, program: {program}}}
executors:
  cpu: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: emu}}
  wit: {{phase: witness, inputs: [run]}}
  top: {{op: max, inputs: [{ref}]}}
outputs:
  steps: run.steps
"""


@pytest.mark.parametrize("ref, message", [
    ("run.steps", "stage 'top' takes input 'run.steps': field 'steps' of an execute phase is data, not an array "
                  "(arrays: registers, min_trace, min_trace_index); name it under outputs: instead"),
    ("run.regs", "stage 'top' takes input 'run.regs': an execute phase has no field 'regs' "
                 "(arrays: registers, min_trace, min_trace_index)"),
    ("wit.rows", "stage 'top' takes input 'wit.rows': a witness phase is an array itself: name 'wit' alone"),
    ("run", "stage 'top' takes input 'run', an execute phase, which yields data, not an array; an executor stage "
            "can take the output of a witness phase, or an array field of this one ('run.registers', "
            "'run.min_trace', 'run.min_trace_index')"),
])
def test_a_stage_naming_no_array_field_fails_validation_where_it_says_so(tmp_path, ref, message):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD.format(program=GUESTS / "fib.elf", ref=ref))
    with pytest.raises(ManifestError) as err:
        mf.compile_manifest(mf.load(path))
    assert str(err.value) == f"{path}:10:27: error: {message}"


def test_an_output_naming_an_unknown_field_lists_the_fields_and_the_arrays(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD.format(program=GUESTS / "fib.elf", ref="wit").replace("run.steps", "run.regs"))
    with pytest.raises(ManifestError) as err:
        mf.compile_manifest(mf.load(path))
    assert str(err.value) == (
        f"{path}:12:10: error: output 'steps' names 'run.regs': an execute phase has no field 'regs' (fields: steps, "
        "exit_code, pub_outs, stdout, chunks, end_reason, counters; arrays: registers, min_trace, min_trace_index)")


def test_an_array_fields_dtype_is_checked_like_a_stages(tmp_path):
    text = BAD.format(program=GUESTS / "fib.elf", ref="wit").replace(
        "  top: {op: max, inputs: [wit]}\n",
        "  f: {op: cast, inputs: [run.registers], dtype: fp32}\n"
        "  fine: {op: gather, inputs: [f, run.min_trace_index]}\n"
        "  bad: {op: gather, inputs: [run.registers, f]}\n")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as err:
        mf.compile_manifest(mf.load(path))
    problems = str(err.value).splitlines()
    assert len(problems) == 1 and problems[0].startswith(
        f"{path}:12:29: error: stage 'bad' takes 'run.registers' (int64), 'f' (fp32): op 'gather': "), problems


def test_the_cli_exits_2_with_the_position_and_no_traceback(tmp_path, capsys):
    from hetflow.engine.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(BAD.format(program=GUESTS / "fib.elf", ref="run.regs"))
    for command in (["validate", str(path)], ["run", "--runs-dir", str(tmp_path / "runs"), str(path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"{path}:10:27: error: stage 'top' takes input 'run.regs'" in err and "Traceback" not in err


def test_arrays_reach_stages_on_a_cluster_as_in_process(tmp_path):
    pytest.importorskip("distributed")
    from hetflow.engine.run.distributed import Cluster

    path = _write(tmp_path, "reference")  # every machine has it
    here = _run(path, tmp_path)
    m = mf.compile_manifest(mf.load(path))
    with Cluster.local(1, 1) as cluster:
        there = execute(m, cluster.place(make_plan(m, cluster.probe), m), runs_dir=str(tmp_path / "cluster"),
                        cluster=cluster, use_cache=False)
    assert there.status == "succeeded", there.record.get("error")
    digests = {name: (entry["digest"], there.record["outputs"][name]["digest"])
               for name, entry in here.record["outputs"].items()}
    assert all(a == b for a, b in digests.values()), digests
    scattered = {e["key"] for e in there.record["events"] if e.get("event") == "scattered"}
    assert {"phase:run.registers", "phase:mem.table", "phase:inst.instances_table"} <= scattered


def test_a_native_pipeline_reads_its_registers_without_numba(tmp_path):
    """The registers replay the last chunk on the backend's own code: a native run never loads numba for them."""
    import subprocess
    import sys

    if not _available("native"):
        pytest.skip("backend native needs llvmlite, not installed")
    path = _write(tmp_path, "native")
    script = (
        "import sys\n"
        "from hetflow.engine.manifest import validate as mf\n"
        "from hetflow.engine.plan.planner import plan\n"
        "from hetflow.engine.run.execute import execute\n"
        "from hetflow.executors import probe\n"
        f"m = mf.compile_manifest(mf.load({str(path)!r}))\n"
        f"r = execute(m, plan(m, probe), runs_dir={str(tmp_path / 'runs')!r}, use_cache=False)\n"
        "print(r.status, 'numba' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.stdout.split()[-2:] == ["succeeded", "False"], done.stdout + done.stderr
