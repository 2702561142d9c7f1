"""The CLI in-process through main(argv) and, for the real entry point, as a subprocess."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine import cli
from hetflow.engine.plan import planner

REPO = Path(__file__).resolve().parent.parent

OK = """
version: 1
name: ok
params: {n: 3}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: "${n}"}, executor: a}
  y: {op: mul, inputs: [x, x], executor: b}
outputs: {y: y}
"""


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_validate_ok_and_bad(manifest_file):
    good = manifest_file(OK, "good.yaml")
    bad = manifest_file(OK.replace("op: mul", "op: mull"), "bad.yaml")
    code, out, err = run_cli("validate", good)
    assert (code, out, err) == (0, f"{good}: ok\nnot checked without the machine: which vendor each executor gets "
                                   "there, whether it has the devices each executor names (device:, devices:) and "
                                   "their memory, and what each partition holds at once where the machine places its "
                                   "stages (hetflow plan checks them)\n", "")
    code, out, err = run_cli("validate", good, bad)
    assert code == 2
    assert err == f"{bad}:8:11: error: unknown op 'mull' in stage 'y'; did you mean 'mul'?\n"


def test_run_exit_0_prints_where_the_record_went(manifest_file, tmp_path):
    path = manifest_file(OK)
    code, out, err = run_cli("run", path, "--runs-dir", str(tmp_path / "runs"), "-p", "n=4")
    assert code == 0, err
    *_, record_line, run_id = out.strip().splitlines()
    assert record_line.startswith("record: ")
    assert Path(record_line.removeprefix("record: ")).parent.name == run_id
    record = json.loads(Path(record_line.removeprefix("record: ")).read_text())
    assert record["params"] == {"n": 4} and record["overrides"] == {"n": 4}
    assert record["outputs"]["y"]["shape"] == [4]


def test_run_exit_1_when_a_stage_fails(manifest_file, tmp_path):
    (tmp_path / "boom.py").write_text("from hetflow import op\n\n\n@op('t.boom', shape=lambda: (3,))\n"
                                      "def boom(xp):\n    raise RuntimeError('no data today')\n")
    path = manifest_file("plugins: [boom.py]\n" + OK.replace("op: arange, args: {stop: \"${n}\"}", "op: t.boom"))
    code, out, err = run_cli("run", path, "--runs-dir", str(tmp_path / "runs"))
    assert code == 1
    assert f"hetflow: run failed: {path}:8:3: stage 'x' failed: " in err and "RuntimeError: no data today (boom.py:6)" in err
    assert "record: " in err
    assert "Traceback" not in err


def test_exit_2_for_bad_input_never_a_traceback(manifest_file, tmp_path):
    path = manifest_file(OK)
    assert run_cli("run", path, "-p", "nope=1")[0] == 2
    absent = tmp_path / "absent.yaml"
    # a problem with no place in a file is said as the program's own, as every error without a place is
    for argv in (["run", str(absent)], ["plan", str(absent)], ["validate", str(absent)]):
        assert run_cli(*argv)[0::2] == (2, f"hetflow: error: {absent}: no such file\n"), argv
    code, _, err = run_cli("plan", path, "--format", "yaml")
    assert code == 2 and "invalid choice" in err
    code, _, err = run_cli("frobnicate")
    assert code == 2 and "Traceback" not in err


def test_exit_3_for_internal_errors_with_log(manifest_file, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(planner, "plan", broken)
    code, _, err = run_cli("plan", manifest_file(OK))
    assert code == 3
    assert err.startswith("hetflow: internal error: RuntimeError: planner exploded (traceback in ")
    log = err.split("traceback in ")[1].split(";")[0]
    assert "Traceback (most recent call last)" in Path(log).read_text()
    assert "Traceback" not in err
    code, _, err = run_cli("--debug", "plan", manifest_file(OK))
    assert code == 3 and "Traceback (most recent call last)" in err


def test_plan_text_and_json(manifest_file):
    path = manifest_file(OK)
    code, out, _ = run_cli("plan", path)
    assert code == 0 and "x@b: x a -> b, 12 B, portable host staging; consumers: y" in out
    code, out, _ = run_cli("plan", path, "--format", "json")
    data = json.loads(out)
    assert data["totals"]["bridges"] == 1 and data["nodes"]["y"]["executor"] == "b"


def test_plan_output_file_takes_its_format_from_its_suffix_and_a_bad_path_is_bad_input(manifest_file, tmp_path):
    path = manifest_file(OK)
    code, _, err = run_cli("plan", path, "-o", str(tmp_path / "p.json"))
    assert code == 0 and err.strip() == f"{tmp_path / 'p.json'}: plan written (json)"
    assert json.loads((tmp_path / "p.json").read_text())["totals"]["bridges"] == 1
    code, _, _ = run_cli("plan", path, "-o", str(tmp_path / "p.gv"))
    assert code == 0 and (tmp_path / "p.gv").read_text().startswith("digraph")
    code, _, _ = run_cli("plan", path, "-o", str(tmp_path / "p.json.txt"))
    assert code == 0 and "x@b: x a -> b" in (tmp_path / "p.json.txt").read_text()
    code, _, _ = run_cli("plan", path, "--format", "text", "-o", str(tmp_path / "t.json"))
    assert code == 0 and "x@b: x a -> b" in (tmp_path / "t.json").read_text()
    (tmp_path / "a-file").write_text("")
    for bad, why in ((tmp_path / "a-file" / "p.json", "Not a directory"), (tmp_path / "none" / "p.json", "No such file"),
                     (tmp_path, "Is a directory")):
        code, out, err = run_cli("plan", path, "-o", str(bad))
        assert code == 2 and err.startswith(f"hetflow: error: -o {bad}: cannot write: {why}"), err
        assert "internal error" not in err and "Traceback" not in err
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_executors_lists_vendors_and_ops():
    code, out, _ = run_cli("executors", "--json")
    offers = {o["vendor"]: o for o in json.loads(out)}
    assert code == 0 and offers["cpu"]["available"] and set(offers) == {"cpu", "cuda", "rocm", "vulkan"}
    code, out, _ = run_cli("executors")
    assert "\ncpu     available    numpy on the host\n" in out
    code, out, _ = run_cli("executors", "--ops", "--json")
    ops = {o["op"]: o for o in json.loads(out)}
    assert ops["matmul"]["inputs"] == [2, 2] and "int4" in ops["matmul"]["dtypes"]
    assert "int8" not in ops["softmax"]["dtypes"]


def test_console_script_runs_the_quickstart(tmp_path):
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "hetflow.engine.cli", "run", str(REPO / "examples" / "quickstart.yaml"),
         "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "record: " in proc.stdout


@pytest.mark.parametrize("sweep", [False, True])
def test_a_run_its_plan_refuses_writes_nothing(tmp_path, sweep):
    """An executor's memory too small for what a partition must hold is found by the plan: run said so with exit 2
    and left the runs folder and its .locks behind, made for a run that never started. (Each stage fits alone; with
    one executor, validate knows the partition and refuses it alike.)"""
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: m\nparams: {k: 1}\n" + ("matrix: {k: [1, 2]}\n" if sweep else "")
                        + "executors: {h: {vendor: cpu, memory: 10}}\nstages:\n"
                        "  z: {op: full, args: {shape: [1], value: \"${k}\"}}\n  y: {op: relu, inputs: [z]}\n"
                        "  w: {op: relu, inputs: [y]}\noutputs: {w: w}\n")
    for argv in (["validate"], ["run", "--runs-dir", str(tmp_path / "runs")]):
        code, out, err = run_cli(argv[0], str(manifest), *argv[1:])
        assert code == 2 and out == "", err
        assert f"{manifest}:{7 if sweep else 6}:3: error: partition p0 on executor 'h' holds 12 B" in err, err
    assert not (tmp_path / "runs").exists()


def test_resume_of_a_run_that_succeeded_is_refused_and_leaves_it_as_it_was(tmp_path):
    """``--resume`` of a succeeded run ran its attempt again in its own folder, its outputs replaced by those of the
    inputs as they are now, under the same id."""
    data = tmp_path / "a.npy"
    np.save(data, np.arange(4, dtype=np.float32))
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: m\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                        "  a: {op: load, args: {path: a.npy}}\n  z: {op: relu, inputs: [a]}\noutputs: {z: z}\n")
    runs = tmp_path / "runs"
    code, out, err = run_cli("run", str(manifest), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    (folder,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    np.save(data, -np.arange(4, dtype=np.float32))
    code, out, err = run_cli("run", str(manifest), "--runs-dir", str(runs), "--resume", folder.name)
    assert (code, out) == (2, "")
    assert err == (f"hetflow: error: run {folder.name} succeeded: there is nothing to resume; --resume continues a run "
                   "that was cancelled, failed or died (hetflow verify reruns a run to compare its outputs, and a run "
                   "without it starts a new one)\n")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_an_empty_point_is_bad_input_not_the_whole_sweep(tmp_path):
    manifest = tmp_path / "sw.yaml"
    manifest.write_text("version: 1\nname: sw\nparams: {k: 0}\nmatrix: {k: [1, 2, 3]}\nexecutors: {h: {vendor: cpu}}\n"
                        "stages:\n  z: {op: full, args: {shape: [2], value: \"${k}\"}}\noutputs: {z: z}\n")
    code, out, err = run_cli("run", str(manifest), "--point", "", "--runs-dir", str(tmp_path / "runs"))
    assert (code, out, err) == (2, "", "hetflow: error: --point takes a name, got an empty one\n")
    assert not (tmp_path / "runs").exists()


def test_examples_copy_where_no_folder_can_be_made_is_the_environments_not_a_crash(tmp_path):
    (tmp_path / "file").write_text("")
    for where in (tmp_path / "file" / "sub", Path("/proc/hetflow-examples")):
        code, out, err = run_cli("examples", "copy", str(where))
        assert code == 5 and err.startswith(f"hetflow: error: {where}: the folder could not be made or written: "), err


def test_examples_copy_into_a_path_too_long_for_the_system_is_bad_input(tmp_path):
    code, out, err = run_cli("examples", "copy", str(tmp_path / ("a" * 5000)))
    assert code == 2 and "File name too long" in err and "internal error" not in err


def test_emulate_input_from_a_closed_standard_input_is_bad_input():
    import subprocess
    import sys

    guest = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "guests", "fib.elf")
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", guest, "--input", "-"],
                          stdin=None, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.close(0))
    assert done.returncode == 2 and "--input -: standard input is closed" in done.stderr, done.stderr
