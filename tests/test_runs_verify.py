"""verify names each mismatching output and its likely cause; its reruns are marked and never a baseline."""

import io
import json
from pathlib import Path

import numpy as np

from hetflow.engine.cli import main
from hetflow.engine.store.runs import latest_record

MANIFEST = """\
version: 1
name: ver
executors: {h: {vendor: cpu}}
stages:
  d: {op: load, args: {path: data.npy}}
  y: {op: mul, inputs: [d], args: {value: 2.0}}
  r: {op: random.normal, args: {shape: [4], seed: SEED}}
  k: {op: ones, args: {shape: [2]}}
outputs: {y: y, r: r, k: k}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def setup(tmp_path: Path, seed: str) -> tuple[str, str, str]:
    np.save(tmp_path / "data.npy", np.arange(6, dtype=np.float32))
    path = tmp_path / "ver.yaml"
    path.write_text(MANIFEST.replace("SEED", seed))
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(path), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    return str(path), runs, json.loads(out)["run_id"]


def test_verify_names_the_changed_input_file_and_the_unseeded_op(tmp_path):
    path, runs, run_id = setup(tmp_path, "null")
    np.save(tmp_path / "data.npy", np.arange(6, dtype=np.float32) + 1)
    code, out, _ = cli("verify", run_id[:24], "--runs-dir", runs)
    assert code == 1
    changed = f"input file changed: {tmp_path / 'data.npy'} (read by stage 'd') is not the file the run read"
    assert f"  y: likely cause: {changed}\n" in out
    assert "  r: likely cause: nondeterministic op: stage 'r' (random.normal) has no seed" in out
    assert "k: likely cause" not in out
    assert f"verify {run_id}: MISMATCH in y, r (rerun " in out
    code, out, _ = cli("verify", run_id, "--runs-dir", runs, "--json")
    rows = {r["output"]: r for r in json.loads(out)["outputs"]}
    assert rows["k"]["match"] and "causes" not in rows["k"]
    assert rows["y"]["causes"] == [changed]


def test_verification_runs_are_marked_and_never_the_baseline_of_plan(tmp_path):
    path, runs, run_id = setup(tmp_path, "3")
    code, out, _ = cli("verify", run_id, "--runs-dir", runs, "--json")
    assert code == 0
    rerun = json.loads(out)["rerun_id"]
    record = json.loads(Path(runs, rerun, "record.json").read_text())
    assert record["verifies"] == run_id
    assert latest_record(runs, "ver")["run_id"] == run_id
    code, out, _ = cli("runs", "--runs-dir", runs)
    assert f"succeeded (verifies {run_id})" in next(line for line in out.splitlines() if line.startswith(rerun))
    code, out, _ = cli("runs", "--runs-dir", runs, "show", rerun)
    assert f"verification run of {run_id}" in out


def test_verify_json_gives_the_runs_own_id_whatever_name_it_was_given(tmp_path):
    path, runs, run_id = setup(tmp_path, "1")
    code, out, err = cli("verify", "latest", "--runs-dir", runs, "--json")
    assert code == 0 and json.loads(out)["run_id"] == run_id, (out, err)


def test_verify_of_a_run_whose_load_file_is_gone_says_where_the_manifest_reads_it(tmp_path):
    """The rerun compiles the record's resolved manifest, which has no positions: it said m.yaml:1:1."""
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: vv\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                        "  a: {op: load, args: {path: a.npy}}\n  z: {op: relu, inputs: [a]}\noutputs: {z: z}\n")
    runs = tmp_path / "runs"
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(manifest), "--runs-dir", str(runs), "--quiet"], out=out, err=err) == 0, err.getvalue()
    run_id = out.getvalue().split()[-1]
    (tmp_path / "a.npy").unlink()
    out, err = io.StringIO(), io.StringIO()
    assert main(["verify", run_id, "--runs-dir", str(runs)], out=out, err=err) == 2
    assert err.getvalue() == f"{manifest}:5:30: error: stage 'a': {tmp_path / 'a.npy'}: no such file\n"


def test_verify_and_diff_name_an_emulators_program_that_changed(tmp_path):
    """The record kept no trace of the guest program: replacing the ELF changed the outputs, and verify said "no
    cause visible", runs diff showed the outputs alone."""
    import shutil

    guests = Path(__file__).resolve().parent.parent / "examples" / "guests"
    shutil.copy(guests / "fib.elf", tmp_path / "prog.elf")
    path = tmp_path / "prog.yaml"
    path.write_text("version: 1\nname: prog\nemulators:\n  guest: {program: prog.elf}\nexecutors: {host: {vendor: cpu}}\n"
                    "stages:\n  run: {phase: execute, emulator: guest}\n  s: {op: mul, inputs: [run.registers], "
                    "args: {value: 2}, executor: host}\noutputs: {steps: run.steps, s: s}\n")
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(path), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    first = json.loads(out)["run_id"]
    record = json.loads((tmp_path / "runs" / first / "record.json").read_text())
    assert record["programs"]["guest"]["path"] == str(tmp_path / "prog.elf")
    shutil.copy(guests / "sort.elf", tmp_path / "prog.elf")
    code, out, err = cli("verify", first, "--runs-dir", runs)
    assert code == 1
    said = f"likely cause: emulator program changed: {tmp_path / 'prog.elf'} (emulator 'guest') is not the program"
    assert f"  steps: {said}" in out and f"  s: {said}" in out, out
    assert f"emulator 'guest' runs {tmp_path / 'prog.elf'}, whose bytes changed since the run" in err
    code, out, err = cli("run", str(path), "--runs-dir", runs, "--quiet", "--json")
    second = json.loads(out)["run_id"]
    code, out, err = cli("runs", "diff", first, second, "--runs-dir", runs, "--json")
    assert [row[0] for row in json.loads(out)["programs"]] == ["guest"], out
