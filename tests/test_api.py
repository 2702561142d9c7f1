"""The Python API (``import hetflow``): plan, run, inputs, failures, open_run, and the CLI on top of it."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.engine import cli
from hetflow.engine.store.records import digest_portable
from hetflow.executors.base import Dtype, PortableActivation

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart.yaml"
GUESTS = REPO / "examples" / "guests"

SPLIT = """\
version: 1
name: split
params: {n: 6, k: 2.0}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: "${n}"}, executor: a}
  y: {op: mul, inputs: [x, x], executor: b}
outputs: {y: y}
"""

# One input stage per dtype, each persisted as it came and once more after a bridge to another executor.
DTYPES = [d.value for d in Dtype]
EVERY_DTYPE = "version: 1\nname: dtypes\nexecutors: {a: {vendor: cpu}, b: {vendor: cpu}}\nstages:\n" + "".join(
    f"  in_{d}: {{op: input, args: {{shape: [3, 5], dtype: {d}}}, dtype: {d}, executor: a}}\n"
    f"  via_{d}: {{op: cast, inputs: [in_{d}], dtype: {d}, executor: b}}\n" for d in DTYPES
) + "outputs: {" + ", ".join(f"{d}: in_{d}, {d}_bridged: via_{d}" for d in DTYPES) + "}\n"


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def _values(dtype: Dtype, rng: np.random.Generator) -> np.ndarray:
    """Values every dtype holds exactly, in its own numpy type."""
    if dtype is Dtype.int4:
        return rng.integers(-8, 8, (3, 5)).astype(dtype.numpy)
    if dtype is Dtype.int8:
        return rng.integers(-128, 128, (3, 5)).astype(dtype.numpy)
    return rng.standard_normal((3, 5)).astype(np.float32).astype(dtype.numpy)


def test_public_names_are_exported_and_documented():
    assert set(hetflow.__all__) >= {"run", "plan", "validate", "open_run", "sweep", "Run", "Plan", "Failure", "Sweep",
                                    "ManifestError", "UsageError", "HetflowError", "LockHeld", "__version__"}
    for name in hetflow.__all__:
        assert hasattr(hetflow, name), name
    for name in ("run", "plan", "validate", "open_run", "sweep", "Run", "Plan"):
        assert getattr(hetflow, name).__doc__, name
    assert issubclass(hetflow.ManifestError, hetflow.HetflowError) and issubclass(hetflow.UsageError, hetflow.HetflowError)


def test_version_flag_prints_the_package_version():
    assert _cli("--version") == (0, f"hetflow {hetflow.__version__}\n", "")
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, f"hetflow {hetflow.__version__}\n")


def test_plan_with_params_is_the_data_plan_json_prints(manifest_file):
    path = manifest_file(SPLIT)
    p = hetflow.plan(path, params={"n": 9})
    assert p.nodes["x"]["shape"] == [9] and p.nodes["y"]["executor"] == "b"
    assert [b["tensor"] for b in p.bridges] == ["x"]
    assert [part["nodes"] for part in p.partitions] == [["x"], ["y"]]
    code, out, _ = _cli("plan", path, "-p", "n=9", "--format", "json")
    assert code == 0
    printed = json.loads(out)
    assert printed["nodes"] == p.nodes and printed["partitions"] == p.partitions and printed["bridges"] == p.bridges
    assert p.to_json() == printed
    svg = p._repr_svg_()
    assert svg.startswith("<svg") and "plan-graph" in svg and ">x<" in svg.replace("</tspan>", "<")
    assert "2 partitions, 1 bridges" in p._repr_html_()


def test_run_with_params_reads_outputs_and_record(manifest_file, tmp_path):
    runs = tmp_path / "runs"
    r = hetflow.run(manifest_file(SPLIT), params={"n": 4}, runs_dir=runs)
    assert (r.status, r.failures) == ("succeeded", [])
    assert r.path == str(runs / r.run_id) and os.path.isfile(os.path.join(r.path, "record.json"))
    assert r.outputs["y"].tolist() == [0.0, 1.0, 4.0, 9.0]
    assert r.record["params"] == {"n": 4, "k": 2.0} and r.record["overrides"] == {"n": 4}
    assert r.record["inputs"] == {}
    html = r._repr_html_()
    assert r.run_id in html and "succeeded" in html and r.record["outputs"]["y"]["digest"][:23] in html
    again = hetflow.open_run(r.run_id, runs_dir=runs)
    assert again.record == r.record and again.outputs["y"].tolist() == r.outputs["y"].tolist()
    assert hetflow.open_run(r.path).run_id == r.run_id
    assert hetflow.open_run(Path(r.path)).run_id == r.run_id  # a pathlib.Path as its text (AttributeError before)
    with pytest.raises(hetflow.UsageError, match="no run 'nope' in"):
        hetflow.open_run("nope", runs_dir=runs)
    with pytest.raises(KeyError, match="the run has no output 'z' \\(outputs: y\\)"):
        r.outputs["z"]


def test_a_change_to_a_runs_record_is_no_later_runs(manifest_file, tmp_path, monkeypatch):
    """A run's record shares its resolved manifest, plan and params with the process's kept manifest: changed
    through one run's ``record``, they were written into the next run's record.json, which then failed verify."""
    path = manifest_file(SPLIT)
    monkeypatch.chdir(tmp_path)
    runs = "runs"  # the run's path is then relative, as the runs folder was named
    first = hetflow.run(path, runs_dir=runs, cache=False)
    first.record["manifest"]["resolved"]["params"]["n"] = 99
    first.record["plan"]["nodes"]["x"]["op"] = "bogus"
    first.record["params"]["k"] = -1.0
    second = hetflow.run(path, runs_dir=runs, cache=False)
    on_disk = json.loads(Path(second.record_path).read_text())
    assert on_disk["manifest"]["resolved"]["params"] == {"n": 6, "k": 2.0}
    assert on_disk["plan"]["nodes"]["x"]["op"] == "arange" and on_disk["params"] == {"n": 6, "k": 2.0}
    assert second.record["params"] == {"n": 6, "k": 2.0}
    code, out, err = _cli("verify", second.run_id, "--runs-dir", runs)
    assert code == 0, err
    # read from the folder it ran in, whatever the working directory is now; a folder gone is the output's loss
    monkeypatch.chdir(tmp_path.parent)
    assert second.outputs["y"].tolist() == [0.0, 1.0, 4.0, 9.0, 16.0, 25.0]
    assert not os.path.isabs(first.path)
    shutil.rmtree(tmp_path / first.path)
    with pytest.raises(hetflow.OutputDamaged, match="output 'y': y.npy is not in"):
        first.outputs["y"]


@pytest.mark.parametrize("seed", [2**64, 3**90])
def test_a_seed_beyond_64_bits_runs_is_recorded_as_given_and_verifies(manifest_file, tmp_path, seed):
    """A seed may be any integer (numpy's SeedSequence takes them all). orjson writes none past 64 bits and reads
    one back as a float, without a word: the sub-graph plan held ``null`` and the run ended in an internal error."""
    import numpy as np

    text = ("version: 1\nname: bigseed\nparams: {seed: 1}\nexecutors: {a: {vendor: cpu}, b: {vendor: cpu}}\n"
            "stages:\n  x: {op: random.normal, args: {shape: [4], seed: \"${seed}\"}, executor: a}\n"
            "  y: {op: mul, inputs: [x, x], executor: b}\noutputs: {y: y}\n")
    path, runs = manifest_file(text), tmp_path / "runs"
    r = hetflow.run(path, params={"seed": seed}, runs_dir=runs)
    assert r.status == "succeeded", r.failures
    expected = np.random.default_rng(seed).standard_normal(4, dtype=np.float32)
    assert r.outputs["y"].tolist() == (expected * expected).tolist()
    again = hetflow.open_run(r.run_id, runs_dir=runs)
    assert again.record["params"]["seed"] == seed and type(again.record["params"]["seed"]) is int
    hit = hetflow.run(path, params={"seed": seed}, runs_dir=runs)
    assert hit.record["cache"]["hits"] == ["p0", "p1"] and hit.outputs["y"].tolist() == r.outputs["y"].tolist()
    code, out, err = _cli("verify", r.run_id, "--runs-dir", str(runs))
    assert code == 0, err


def test_outputs_of_every_dtype_read_back_exactly(manifest_file, tmp_path):
    rng = np.random.default_rng(5)
    arrays = {f"in_{d.value}": _values(d, rng) for d in Dtype}
    r = hetflow.run(manifest_file(EVERY_DTYPE), inputs=arrays, runs_dir=tmp_path / "runs")
    assert r.status == "succeeded", r.error
    for d in Dtype:
        given = arrays[f"in_{d.value}"]
        for name in (d.value, f"{d.value}_bridged"):
            got = r.outputs[name]
            assert got.dtype == np.dtype(d.numpy) and got.shape == (3, 5), name
            assert got.tobytes() == given.tobytes(), name
        digest = digest_portable(PortableActivation.from_array(given, d))
        assert r.record["inputs"][f"in_{d.value}"] == {"shape": [3, 5], "dtype": d.value,
                                                       "bytes": d.nbytes(15), "digest": digest}
        assert r.record["outputs"][d.value]["digest"] == digest
    assert hetflow.open_run(r.run_id, runs_dir=tmp_path / "runs").outputs["int4_bridged"].tobytes() == arrays["in_int4"].tobytes()


def test_scalar_outputs_of_a_phase_are_values(tmp_path):
    path = tmp_path / "emu.yaml"
    path.write_text(f"version: 1\nname: emu\nemulators: {{emu: {{backend: reference, program: {GUESTS / 'exit3.elf'}, accept_exit: [3]}}}}\n"
                    "executors: {cpu: {vendor: cpu}}\nstages:\n  go: {phase: execute}\n"
                    "outputs: {steps: go.steps, code: go.exit_code}\n")
    r = hetflow.run(path, runs_dir=tmp_path / "runs")
    assert r.status == "succeeded", r.error
    assert r.outputs["code"] == 3 and isinstance(r.outputs["steps"], int) and r.outputs["steps"] > 0


# an input stage, which takes its array from Python (inputs=) or a file (--input)
TAKES = """\
version: 1
name: takes
executors: {host: {vendor: cpu}}
stages:
  x: {op: input, args: {shape: [2, 3], dtype: fp32}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def test_inputs_are_checked_before_anything_runs(manifest_file, tmp_path):
    path = manifest_file(TAKES)
    runs = tmp_path / "runs"
    good = np.ones((2, 3), np.float32)
    cases = [
        ({"x": np.ones((3, 2), np.float32)},
         f"inputs['x']: stage 'x' ({path}:5:3) takes an array with shape [2, 3] and dtype fp32 (numpy float32); "
         "got shape [3, 2] and numpy dtype float32"),
        ({"x": good.astype(np.float64)}, "got shape [2, 3] and numpy dtype float64"),
        ({"x": [[1.0] * 3] * 2}, "inputs['x']: expected a numpy array with shape [2, 3] and dtype fp32 (numpy float32), got list"),
        (None, f"{path}:5:3: stage 'x' is an input: its array comes from Python, "
               "hetflow.run(..., inputs={'x': array}) with shape [2, 3] and dtype fp32 (numpy float32)"),
        ({"x": good, "z": good}, f"inputs: {path} has no input stage 'z' (input stages: x)"),
    ]
    for inputs, message in cases:
        with pytest.raises(hetflow.UsageError) as caught:
            hetflow.run(path, inputs=inputs, runs_dir=runs)
        assert message in str(caught.value)
    assert not runs.exists(), "a rejected run must leave nothing behind"
    code, out, err = _cli("run", path, "--runs-dir", str(runs))
    assert (code, out) == (2, "")
    assert err == (f"hetflow: error: {path}:5:3: stage 'x' is an input: give its array with --input x=PATH "
                   "(a .npy file, or a .npz or .safetensors file with :KEY) holding shape [2, 3] and dtype fp32 "
                   "(numpy float32)\n")
    assert not runs.exists()
    r = hetflow.run(path, inputs={"x": good * -1}, runs_dir=runs)
    assert r.status == "succeeded" and r.outputs["y"].tolist() == [[0.0] * 3] * 2
    # the same values in the other byte order are the same array (refused as "float32, got float32" before)
    swapped = hetflow.run(path, inputs={"x": (good * 2).astype(">f4" if sys.byteorder == "little" else "<f4")},
                          runs_dir=runs, cache=False)
    native = hetflow.run(path, inputs={"x": good * 2}, runs_dir=runs, cache=False)
    assert swapped.ok and swapped.record["inputs"]["x"]["digest"] == native.record["inputs"]["x"]["digest"]
    assert swapped.outputs["y"].tolist() == native.outputs["y"].tolist()


def test_the_cache_key_covers_the_arrays_handed_in(manifest_file, tmp_path):
    path = manifest_file("""\
        version: 1
        name: cached
        executors: {host: {vendor: cpu}}
        stages:
          x: {op: input, args: {shape: [4], dtype: fp32}}
          y: {op: add, inputs: [x, x]}
        outputs: {y: y}
        """)
    runs = tmp_path / "runs"
    one = hetflow.run(path, inputs={"x": np.arange(4, dtype=np.float32)}, runs_dir=runs)
    same = hetflow.run(path, inputs={"x": np.arange(4, dtype=np.float32)}, runs_dir=runs)
    other = hetflow.run(path, inputs={"x": np.ones(4, np.float32)}, runs_dir=runs)
    assert one.record["cache"]["hits"] == [] and same.record["cache"]["hits"] != []
    assert other.record["cache"]["hits"] == [] and other.outputs["y"].tolist() == [2.0] * 4
    assert same.outputs["y"].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_failed_run_is_returned_with_its_failures(manifest_file, tmp_path):
    # a draw of 4 M values takes tens of milliseconds: far past a 1 ms timeout
    path = manifest_file("""\
        version: 1
        name: fails
        executors: {a: {vendor: cpu}, b: {vendor: cpu}}
        stages:
          x: {op: random.normal, args: {shape: [2048, 2048], seed: 1}, executor: a, timeout: 0.001}
          y: {op: relu, inputs: [x], executor: b}
        outputs: {y: y}
        """)
    r = hetflow.run(path, runs_dir=tmp_path / "runs")
    assert r.status == "failed" and not r.ok
    assert len(r.outputs) == 0
    [failure] = r.failures
    assert (failure.stage, failure.op, failure.status) == ("x", "random.normal", "timed out")
    assert failure.origin == f"{path}:5:3"
    assert failure.message == "timed out after 0.001 s" and "stage 'x' failed: timed out" in r.error
    assert failure.traceback_file == os.path.join(r.path, "traceback.txt")
    text = Path(failure.traceback_file).read_text()
    assert "Traceback (most recent call last)" in text and "StageTimedOut: timed out after 0.001 s" in text
    assert r.record["nodes"]["y"]["status"] == "not run"
    assert "timed out after 0.001 s" in r._repr_html_()


def test_manifest_errors_carry_every_position(manifest_file):
    path = manifest_file("""\
        version: 1
        name: broken
        executors: {a: {vendor: cpu}}
        stages:
          x: {op: arange, args: {stop: 4}}
          y: {op: relu2, inputs: [x]}
          z: {op: relu, inputs: [w]}
        outputs: {z: z}
        """)
    for call in (hetflow.validate, hetflow.plan, hetflow.run):
        with pytest.raises(hetflow.ManifestError) as caught:
            call(path)
        found = [(d.origin.file, d.origin.line, d.origin.col, d.message) for d in caught.value.diagnostics]
        assert found == [
            (path, 6, 11, "unknown op 'relu2' in stage 'y'; did you mean 'relu'?"),
            (path, 7, 26, "stage 'z' takes input 'w', which is not a stage"),
        ], found
    with pytest.raises(hetflow.UsageError, match="declares no param 'n'"):
        hetflow.validate(path, params={"n": 1})
    with pytest.raises(hetflow.ManifestError, match="no such file"):
        hetflow.run(Path(path).with_name("missing.yaml"))


def test_api_and_cli_give_the_same_digests(tmp_path):
    r = hetflow.run(QUICKSTART, params={"batch": 4}, runs_dir=tmp_path / "api", cache=False)
    code, out, _ = _cli("run", str(QUICKSTART), "-p", "batch=4", "--runs-dir", str(tmp_path / "cli"), "--no-cache",
                        "--json", "--quiet")
    assert code == 0
    printed = json.loads(out)
    assert printed["outputs"] == {k: v["digest"] for k, v in r.record["outputs"].items()}
    assert printed["outputs"] and r.record["manifest"]["digest"] == hetflow.open_run(
        printed["run_id"], runs_dir=tmp_path / "cli").record["manifest"]["digest"]


def test_a_matrix_manifest_needs_a_point_or_a_sweep(manifest_file, tmp_path):
    path = manifest_file(SPLIT.replace("outputs:", "matrix: {n: [2, 3]}\noutputs:"))
    with pytest.raises(hetflow.UsageError, match="has a matrix of 2 points: give point= to run one"):
        hetflow.run(path, runs_dir=tmp_path / "runs")
    one = hetflow.run(path, point="n=3", runs_dir=tmp_path / "runs")
    assert one.outputs["y"].tolist() == [0.0, 1.0, 4.0] and one.record["matrix_point"]["name"] == "split[n=3]"
    rows = []
    s = hetflow.sweep(path, runs_dir=tmp_path / "runs", on_point=rows.append)
    assert s.status == "succeeded" and [row["name"] for row in rows] == ["split[n=2]", "split[n=3]"]
    assert [run.outputs["y"].tolist() for run in s.runs] == [[0.0, 1.0], [0.0, 1.0, 4.0]]


def test_an_on_point_that_raises_ends_the_sweep_and_its_summary_says_so(manifest_file, tmp_path):
    """The summary said ``failed`` with every run succeeded and a point pending, and nothing of why."""
    path = manifest_file(SPLIT.replace("outputs:", "matrix: {n: [2, 3, 4]}\noutputs:"))
    runs = tmp_path / "runs"

    def broken(row: dict) -> None:
        if row["name"] == "split[n=3]":
            raise ValueError("the caller's bug")

    with pytest.raises(ValueError, match="the caller's bug"):
        hetflow.sweep(path, runs_dir=runs, on_point=broken)
    (summary_file,) = runs.glob("*/sweep.json")
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "failed" and [p["status"] for p in summary["points"]] == [
        "succeeded", "succeeded", "pending"]
    assert summary["error"] == {"message": "the sweep ended early: ValueError: the caller's bug",
                                "pending": ["split[n=4]"]}
    code, out, _ = _cli("runs", "show", summary["sweep_id"], "--runs-dir", str(runs))
    assert code == 0 and "the sweep ended early: ValueError: the caller's bug; hetflow run " in out
    again = hetflow.sweep(path, runs_dir=runs, resume="latest")  # as hetflow run --resume names it
    assert again.status == "succeeded" and "error" not in json.loads(summary_file.read_text())


def test_a_sweep_resumed_after_its_file_changed_runs_the_rest_as_it_began_and_says_so(manifest_file, tmp_path):
    """Its points not yet run compiled from the file as it was by then: one sweep of two manifests, said nowhere."""
    path = manifest_file(SPLIT.replace("outputs:", "matrix: {n: [2, 3, 4, 5]}\noutputs:"))
    runs = tmp_path / "runs"

    def stop_after(name: str) -> Callable[[dict], None]:
        def stop(row: dict) -> None:
            if row["name"] == name:
                raise ValueError(f"stopped after {name}")
        return stop

    with pytest.raises(ValueError, match="stopped after"):
        hetflow.sweep(path, runs_dir=runs, on_point=stop_after("split[n=2]"))
    (folder,) = [p.parent for p in runs.glob("*/sweep.json")]
    text = Path(path).read_text()
    assert (folder / "manifest.yaml").read_text() == text
    # a comment alone changes no point: nothing to say
    Path(path).write_text(text + "# a comment\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", hetflow.SourceChanged)
        with pytest.raises(ValueError, match="stopped after"):
            hetflow.sweep(path, runs_dir=runs, resume="latest", on_point=stop_after("split[n=3]"))
    Path(path).write_text(text.replace("op: mul, inputs: [x, x]", "op: add, inputs: [x, x]"))
    with pytest.warns(hetflow.SourceChanged, match=r"has changed since sweep \S+ began \(point split\[n=4\] resolves "
                                                      r"to another manifest now\): the points not yet run run as the "
                                                      r"sweep began \(\S+manifest\.yaml\)"), \
            pytest.raises(ValueError, match="stopped after"):
        hetflow.sweep(path, runs_dir=runs, resume="latest", on_point=stop_after("split[n=4]"))
    # the CLI says it as its own warning, before the point runs
    code, out, err = _cli("run", path, "--runs-dir", str(runs), "--resume", "latest", "--quiet")
    assert code == 0 and err.startswith(f"hetflow: warning: {path} has changed since sweep {folder.name} began "
                                        "(point split[n=5] resolves to another manifest now)"), err
    done = hetflow.Sweep(folder)
    assert done.status == "succeeded"
    # a copy that is gone is said, and the file as it is taken in its place
    (folder / "manifest.yaml").write_text(text + "# edited by hand\n")
    summary = json.loads((folder / "sweep.json").read_text())
    summary["points"][-1]["status"] = "failed"
    (folder / "sweep.json").write_text(json.dumps(summary))
    with pytest.warns(hetflow.SourceChanged, match=r"the copy of \S+ that sweep \S+ kept when it began \(\S+\) is "
                                                    r"gone or damaged: the points not yet run run \S+ as it is now"):
        hetflow.sweep(path, runs_dir=runs, resume="latest")
    assert [run.outputs["y"].tolist() for run in done.runs] == [[0, 1], [0, 1, 4], [0, 1, 4, 9], [0, 1, 4, 9, 16]]
    assert {run.record["manifest"]["resolved"]["stages"]["y"]["op"] for run in done.runs} == {"mul"}


def test_a_sweep_resumed_after_a_block_library_or_a_plugin_changed_says_so(manifest_file, tmp_path):
    """The sweep keeps its manifest's text, not its block libraries nor its plugins: edited between the attempts,
    the points not yet run ran the new ones, and the sweep mixed the two without a word."""
    (tmp_path / "lib.yaml").write_text("version: 1\nblocks:\n  b:\n    params: {a: 1}\n    inputs: [x]\n"
                                       "    stages: {y: {op: add, inputs: [x], args: {value: \"${a}\"}}}\n"
                                       "    outputs: {y: y}\n")
    (tmp_path / "ops.py").write_text("from hetflow import op\n\n\n@op('t.id')\ndef ident(xp, x):\n    return x\n")
    path = manifest_file("version: 1\nname: libs\nplugins: [ops.py]\nparams: {n: 1}\nmatrix: {n: [1, 2, 3]}\n"
                         "executors: {h: {vendor: cpu}}\nstages:\n  x: {op: full, args: {shape: [2], value: \"${n}\"}}\n"
                         "  u: {use: lib.yaml#b, inputs: {x: x}}\n  z: {op: t.id, inputs: [u]}\noutputs: {z: z}\n")
    runs = tmp_path / "runs"

    def stop(row: dict) -> None:
        if row["name"] == "libs[n=1]":
            raise ValueError("stopped after the first point")

    for edit, said in ((lambda: (tmp_path / "lib.yaml").write_text((tmp_path / "lib.yaml").read_text().replace(
            "a: 1", "a: 100")), "a block library it uses resolves to other stages now"),
                       (lambda: (tmp_path / "ops.py").write_text((tmp_path / "ops.py").read_text().replace(
                           "return x", "return x * 2")), "plugin ops.py's code changed")):
        with pytest.raises(ValueError, match="stopped after the first point"):
            hetflow.sweep(path, runs_dir=runs, on_point=stop)
        edit()
        with pytest.warns(hetflow.SourceChanged, match=rf"sweep \S+ began with other code than it has now \({said}, "
                                                        r"against point libs\[n=1\]'s run\): the points not yet run"):
            hetflow.sweep(path, runs_dir=runs, resume="latest")


def stop_after_first_partition(event: dict) -> None:
    """An on_event that stops a run once its first partition has finished: a run to resume."""
    if event.get("kind") == "partition" and event.get("event") == "finished":
        raise RuntimeError("stopped after the first partition")


def test_a_run_resumed_after_its_file_changed_goes_on_as_it_began_and_says_so(manifest_file, tmp_path):
    runs = tmp_path / "runs"

    path = manifest_file(SPLIT)
    with pytest.raises(RuntimeError, match="stopped after the first partition"):
        hetflow.run(path, runs_dir=runs, on_event=stop_after_first_partition)
    Path(path).write_text(SPLIT.replace("op: mul, inputs: [x, x]", "op: add, inputs: [x, x]"))
    with pytest.warns(hetflow.SourceChanged, match=r"has changed since run \S+ began \(it resolves to another "
                                                      r"manifest now\): the run goes on as it began"):
        again = hetflow.run(path, runs_dir=runs, resume="latest")
    assert again.outputs["y"].tolist() == [0.0, 1.0, 4.0, 9.0, 16.0, 25.0]
    other = manifest_file(SPLIT, "other.yaml")
    with pytest.raises(RuntimeError, match="stopped after the first partition"):
        hetflow.run(other, runs_dir=runs, on_event=stop_after_first_partition)
    Path(other).write_text("version: [")
    with pytest.warns(hetflow.SourceChanged, match=r"\(it no longer compiles: \S+:1:11: error: YAML syntax"):
        again = hetflow.run(other, runs_dir=runs, resume="latest")
    assert again.status == "succeeded" and again.outputs["y"].tolist() == [0.0, 1.0, 4.0, 9.0, 16.0, 25.0]


def test_a_run_resumed_after_a_file_it_loads_changed_reads_it_as_it_is_and_says_so(manifest_file, tmp_path):
    """The resumed run read the file's new bytes, silently: its record's data named them, and its first attempt's
    digest was gone."""
    runs, data = tmp_path / "runs", tmp_path / "d.npy"
    np.save(data, np.arange(4, dtype=np.float32))
    path = manifest_file("version: 1\nname: loads\nexecutors: {a: {vendor: cpu}, b: {vendor: cpu}}\nstages:\n"
                         "  x: {op: ones, args: {shape: [4]}, executor: a}\n"
                         f"  d: {{op: load, args: {{path: {data}}}, executor: b}}\n"
                         "  y: {op: add, inputs: [x, d], executor: b}\noutputs: {y: y}\n")

    with pytest.raises(RuntimeError, match="stopped after the first partition"):
        hetflow.run(path, runs_dir=runs, on_event=stop_after_first_partition)
    first = hetflow.open_run("latest", runs_dir=runs).record["data"]["d"]["digest"]
    np.save(data, np.arange(4, dtype=np.float32) * 10)
    with pytest.warns(hetflow.SourceChanged, match=r"d\.npy \(read by stage 'd'\) has changed since run \S+'s last "
                                                    r"attempt: the stages that read it, and those after them, run on "
                                                    rf"its bytes now \(sha256:\w+, not {first[:19]}\)"):
        again = hetflow.run(path, runs_dir=runs, resume="latest")
    assert again.status == "succeeded" and again.outputs["y"].tolist() == [1.0, 11.0, 21.0, 31.0]
    assert again.record["attempts"][0]["data"] == {"d": first} and again.record["data"]["d"]["digest"] != first
    with warnings.catch_warnings():  # the same bytes again: nothing to say
        warnings.simplefilter("error", hetflow.SourceChanged)
        with pytest.raises(RuntimeError, match="stopped after the first partition"):
            hetflow.run(path, runs_dir=runs, on_event=stop_after_first_partition)
        assert hetflow.run(path, runs_dir=runs, resume="latest").status == "succeeded"


def test_a_run_resumed_after_its_plugin_changed_says_so(manifest_file, tmp_path):
    """A resumed run ran a plugin's edited code for what was left, silently: its record named the new code, and
    nothing said the attempts ran two codes."""
    runs = tmp_path / "runs"
    ops = tmp_path / "twice_ops.py"
    ops.write_text("from hetflow import op\n\n\n@op('t.twice')\ndef twice(xp, x):\n    return x * 2\n")
    path = manifest_file("version: 1\nname: plug\nplugins: [twice_ops.py]\n"
                         "executors: {a: {vendor: cpu}, b: {vendor: cpu}}\nstages:\n"
                         "  x: {op: ones, args: {shape: [4]}, executor: a}\n"
                         "  y: {op: t.twice, inputs: [x], executor: b}\noutputs: {y: y}\n")

    with pytest.raises(RuntimeError, match="stopped after the first partition"):
        hetflow.run(path, runs_dir=runs, on_event=stop_after_first_partition)
    first = hetflow.open_run("latest", runs_dir=runs).record["plugins"][0]["digest"]
    ops.write_text(ops.read_text().replace("x * 2", "x * 3"))
    with pytest.warns(hetflow.SourceChanged, match=r"plugin twice_ops\.py has changed since run \S+'s last attempt: "
                                                    rf"the partitions that use it run its code as it is now \(sha256:\w+, "
                                                    rf"not {first[:19]}\)"):
        again = hetflow.run(path, runs_dir=runs, resume="latest")
    assert again.status == "succeeded" and again.outputs["y"].tolist() == [3.0] * 4
    assert again.record["attempts"][0]["plugins"] == {"twice_ops.py": first}


def test_resume_takes_the_names_the_cli_takes(manifest_file, tmp_path):
    """``hetflow run --resume latest`` resumed the newest run; ``hetflow.run(resume="latest")`` said no such run."""
    runs = tmp_path / "runs"

    with pytest.raises(RuntimeError, match="stopped after the first partition"):
        hetflow.run(manifest_file(SPLIT), runs_dir=runs, on_event=stop_after_first_partition)
    (folder,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    again = hetflow.run(manifest_file(SPLIT), runs_dir=runs, resume="latest")
    assert (again.status, again.run_id) == ("succeeded", folder.name)
    assert again.record["resumed"] and again.outputs["y"].tolist() == [0.0, 1.0, 4.0, 9.0, 16.0, 25.0]
    with pytest.raises(hetflow.UsageError, match="no run 'nope' in"):
        hetflow.run(manifest_file(SPLIT), runs_dir=runs, resume="nope")


def test_resume_of_a_run_whose_arrays_came_from_memory_takes_them_again_and_speaks_python(manifest_file, tmp_path):
    """``hetflow.run(resume=..., inputs={"x": array})`` raised TypeError (``os.fspath`` of the array, as if it were
    ``--input x=PATH``), and its messages asked for ``--input``."""
    path = manifest_file(TAKES)
    runs = tmp_path / "runs"
    good = np.arange(6, dtype=np.float32).reshape(2, 3) - 2

    def stop(event: dict) -> None:
        if event.get("kind") == "partition" and event.get("event") == "started":
            raise RuntimeError("stopped at the first partition")

    with pytest.raises(RuntimeError, match="stopped at the first partition"):
        hetflow.run(path, inputs={"x": good}, runs_dir=runs, on_event=stop)
    (folder,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    refusals = [
        (None, f"resume: run {folder.name} took the array of input stage 'x' from memory (hetflow.run(inputs=)); its "
               "record keeps the array's digest (sha256:"),
        (None, "give the same array with inputs={'x': array} (or the path of a file: a .npy file"),
        ({"x": good + 1}, f"resume: inputs['x'] holds other values than run {folder.name} had for input stage 'x'"),
        ({"x": good.T.copy()}, "inputs['x']: stage 'x' "),
    ]
    for inputs, message in refusals:
        with pytest.raises(hetflow.UsageError) as caught:
            hetflow.run(path, runs_dir=runs, resume=folder.name, inputs=inputs)
        assert message in str(caught.value) and "--input" not in str(caught.value)
    again = hetflow.run(path, runs_dir=runs, resume=folder.name, inputs={"x": good.copy()})
    assert (again.status, again.run_id) == ("succeeded", folder.name)
    assert again.outputs["y"].tolist() == np.maximum(good, 0).tolist()


def test_messages_name_the_python_keywords_in_python_and_the_options_on_the_command_line(manifest_file, tmp_path):
    """The API's refusals named CLI options (``--point``, ``--resume ... -p``, ``--scheduler``) to Python callers."""
    path = manifest_file(SPLIT)
    runs = tmp_path / "runs"
    hetflow.run(path, runs_dir=runs)
    said = [
        (lambda: hetflow.run(path, runs_dir=runs, point="n=2"), ["run", path, "--point", "n=2"],
         f"{path} has no matrix, so point='n=2' names no point of it",
         f"{path} has no matrix, so --point n=2 names no point of it"),
        (lambda: hetflow.run(path, runs_dir=runs, resume="latest", params={"n": 2}),
         ["run", path, "--resume", "latest", "-p", "n=2"],
         "resume= continues a run exactly as it was; it takes no point= or params=",
         "--resume continues a run exactly as it was; it takes no --point or -p"),
        (lambda: hetflow.run(path, runs_dir=runs, scheduler="nowhere"), ["run", path, "--scheduler", "nowhere"],
         "scheduler= expects tcp://HOST:PORT or a scheduler file", "--scheduler expects tcp://HOST:PORT"),
        (lambda: hetflow.run(path, runs_dir=runs, schedule_slot="2026-01-01T00:00:00Z"),
         ["run", path, "--schedule-slot", "2026-01-01T00:00:00Z"],
         "so schedule_slot='2026-01-01T00:00:00Z' names no slot of it",
         "so --schedule-slot 2026-01-01T00:00:00Z names no slot of it"),
    ]
    for call, argv, in_python, on_the_command_line in said:
        with pytest.raises(hetflow.UsageError) as caught:
            call()
        assert in_python in str(caught.value)
        code, out, err = _cli(*argv, "--runs-dir", str(runs))
        assert code == 2 and on_the_command_line in err, err
    with pytest.raises(hetflow.UsageError) as caught:  # and after a command, Python is spoken to again
        hetflow.run(path, runs_dir=runs, point="n=2")
    assert "point='n=2'" in str(caught.value)


def test_a_run_its_on_event_callback_stopped_says_so_in_its_record(manifest_file, tmp_path):
    """The record said ``ValueError: ...`` alone, which reads as the engine's or a stage's error."""
    runs = tmp_path / "runs"
    for kind, moment in (("run", "started"), ("partition", "finished")):
        def stop(event: dict) -> None:
            if (event.get("kind"), event.get("event")) == (kind, moment):
                raise ValueError(f"the caller's bug at {kind} {moment}")

        with pytest.raises(ValueError, match="the caller's bug"):
            hetflow.run(manifest_file(SPLIT), runs_dir=runs, on_event=stop)
        failed = hetflow.open_run("latest", runs_dir=runs)
        assert failed.status == "failed"
        assert failed.record["error"]["message"] == f"its on_event callback raised ValueError: the caller's bug at {kind} {moment}"
        code, out, _ = _cli("runs", "show", failed.run_id, "--runs-dir", str(runs))
        assert code == 0 and "its on_event callback raised ValueError" in out

    def leave(event: dict) -> None:  # sys.exit() in the callback: not an Exception, and said as plainly
        if event.get("kind") == "partition":
            sys.exit(3)

    with pytest.raises(SystemExit):
        hetflow.run(manifest_file(SPLIT), runs_dir=runs, on_event=leave)
    assert hetflow.open_run("latest", runs_dir=runs).record["error"]["message"] == \
        "its on_event callback raised SystemExit: 3"


def test_what_an_on_event_callback_does_to_its_event_is_not_the_records(manifest_file, tmp_path):
    """A callback that put a value no JSON holds in the event it was given left the record ``running`` for ever
    (a raw TypeError); one that emptied it failed the run with the engine's KeyError."""
    runs = tmp_path / "runs"
    for change in (lambda e: e.__setitem__("mine", object()), lambda e: e.clear()):
        done = hetflow.run(manifest_file(SPLIT), runs_dir=runs, on_event=change, cache=False)
        assert done.status == "succeeded"
        on_disk = hetflow.open_run(done.run_id, runs_dir=runs).record
        assert on_disk["status"] == "succeeded" and on_disk["tasks"]
        assert not any("mine" in e for e in on_disk["events"])


def test_a_big_sweeps_runs_are_read_from_disk_as_they_are_asked_for(manifest_file, tmp_path):
    """A sweep kept every point's record in memory while it ran and in its result (260 kB a point of a 300-stage
    manifest), and every point's compiled manifest and plan until its end."""
    from hetflow.engine import results

    n = results.KEPT_RUNS + 20
    path = manifest_file("version: 1\nname: wide\nparams: {k: 0}\nmatrix: {k: [" + ", ".join(map(str, range(n)))
                         + "]}\nexecutors: {cpu: {vendor: cpu}}\nstages:\n  x: {op: full, args: {shape: [2], "
                         "value: \"${k}\"}}\noutputs: {x: x}\n")
    s = hetflow.sweep(path, runs_dir=tmp_path / "runs", max_points=n, cache=False)
    assert s.status == "succeeded" and len(s.runs) == n
    assert len(s.runs._read) == 0  # nothing read before it is asked for
    assert [r.outputs["x"].tolist() for r in s.runs] == [[float(k)] * 2 for k in range(n)]
    assert len(s.runs._read) == results.KEPT_RUNS
    assert s.runs[-1].record["matrix_point"] == {"name": f"wide[k={n - 1}]", "values": {"k": n - 1},
                                                  "sweep": s.sweep_id}
    assert [r.run_id for r in s.runs[2:4]] == [p["run_id"] for p in s.summary["points"][2:4]]
    assert hetflow.Sweep(s.path).runs[0].run_id == s.summary["points"][0]["run_id"]


def test_run_from_threads(manifest_file, tmp_path):
    paths = [manifest_file(SPLIT.replace("name: split", f"name: split{i}"), f"m{i}.yaml") for i in range(2)]
    results: dict[int, object] = {}

    def go(i: int) -> None:
        results[i] = hetflow.run(paths[i], params={"n": 3 + i}, runs_dir=tmp_path / "runs")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [results[i].outputs["y"].tolist() for i in range(2)] == [[0.0, 1.0, 4.0], [0.0, 1.0, 4.0, 9.0]]


def test_run_inside_a_running_client_uses_it(manifest_file, tmp_path):
    distributed = pytest.importorskip("distributed")
    path = manifest_file(SPLIT)
    threaded = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    with pytest.raises(hetflow.UsageError, match="scheduler='current' needs a running distributed.Client"):
        hetflow.run(path, runs_dir=tmp_path / "runs", scheduler="current")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as lc, distributed.Client(lc) as client:
        r = hetflow.run(path, runs_dir=tmp_path / "runs", scheduler="current", cache=False)
        assert r.status == "succeeded", r.error
        assert r.record["scheduler"]["kind"] == "client"
        assert r.record["scheduler"]["address"] == client.scheduler.address
        assert {e["worker"] for e in r.record["tasks"] if e["kind"] == "partition"} == set(client.scheduler_info()["workers"])
        assert r.record["outputs"] == threaded.record["outputs"]
        assert client.status == "running", "hetflow must leave the caller's client open"
        assert client.submit(lambda: 41 + 1).result() == 42

        async def on_its_loop() -> tuple[str, str]:
            async with distributed.Client(lc.scheduler_address, asynchronous=True) as ac:
                with pytest.raises(hetflow.UsageError, match="asynchronous, called on its event loop") as refused:
                    hetflow.run(path, runs_dir=tmp_path / "runs", scheduler=ac, cache=False)
                # the way out the message gives: the same call in a thread
                done = await asyncio.to_thread(hetflow.run, path, runs_dir=tmp_path / "runs", scheduler=ac, cache=False)
                return str(refused.value), done.status

        message, status = asyncio.run(on_its_loop())
        assert "asyncio.to_thread" in message and status == "succeeded"
    # a closed client has no scheduler handle: a clear refusal, not Dask's AttributeError on None
    for call in (hetflow.run, hetflow.plan):
        with pytest.raises(hetflow.UsageError, match="distributed.Client that is closed"):
            call(path, runs_dir=tmp_path / "runs", scheduler=client)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")) == sorted(
        [threaded.run_id, r.run_id, done_id(tmp_path / "runs", exclude={threaded.run_id, r.run_id})])


def done_id(runs: Path, exclude: set[str]) -> str:
    """The one run folder besides ``exclude``: the refused calls left none."""
    (only,) = [p.name for p in runs.iterdir() if not p.name.startswith(".") and p.name not in exclude]
    return only


@pytest.mark.parametrize("keyword, value, words", [
    ("workers", "2", "workers= takes a whole number of at least 1, got str '2'"),
    ("workers", 0, "workers= takes a whole number of at least 1, got int 0"),
    ("threads", 1.5, "threads= takes a whole number of at least 1, got float 1.5"),
    ("threads", True, "threads= takes a whole number"),
    ("max_points", 0, "max_points= takes a whole number"),
    ("runs_dir", 5, "runs_dir= takes a folder's path"),
    ("cache", "no", "cache= takes True or False"),
    ("on_event", 5, "on_event= takes a function"),
    ("point", 3, "point= takes a str"),
    ("place", ["a"], "place= takes a mapping"),
])
def test_api_arguments_of_the_wrong_kind_are_refused_by_keyword(manifest_file, tmp_path, keyword, value, words):
    path = manifest_file(SPLIT)
    kwargs = {"runs_dir": tmp_path / "runs", keyword: value}
    with pytest.raises(hetflow.UsageError) as refused:
        hetflow.run(path, **kwargs)
    assert str(refused.value).startswith(words)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "refused before any run"


def test_api_takes_numpys_integers_as_counts_and_refuses_a_path_that_is_not_one(manifest_file, tmp_path):
    path = manifest_file(SPLIT)
    assert hetflow.run(path, runs_dir=tmp_path / "runs", threads=np.int64(2), cache=False).status == "succeeded"
    for call in (hetflow.validate, hetflow.plan, hetflow.run):
        with pytest.raises(hetflow.UsageError, match="path= takes a manifest file's path .* got int 123"):
            call(123)
    with pytest.raises(hetflow.UsageError, match="run_id= takes a run's name or its folder's path .* got int 5"):
        hetflow.open_run(5)
    with pytest.raises(hetflow.UsageError, match="runs_dir= takes a folder's path .* got int 5"):
        hetflow.open_run("latest", 5)


def test_the_api_example_runs(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "examples" / "api.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=240, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "succeeded" in done.stdout and "failed" in done.stdout and "rejected" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_script_that_starts_a_local_cluster_without_the_main_guard_is_told_the_guard(tmp_path, workers):
    """Each worker of a local cluster imports the script that started it first; unguarded, its top level starts a
    cluster again there. That failed deep in Dask ("bootstrapping phase", once per worker, then "Nanny failed to
    start worker process"), naming no fix; the script is now told before any worker starts."""
    (tmp_path / "split.yaml").write_text(SPLIT)
    script = tmp_path / "unguarded.py"
    call = f"hetflow.run({str(tmp_path / 'split.yaml')!r}, runs_dir={str(tmp_path / 'runs')!r}, workers={workers})"
    script.write_text(f"import hetflow\n\n\ndef main():\n    return {call}\n\n\nprint(main().status)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1] == (
        f"hetflow.engine.errors.UsageError: hetflow.run() with workers={workers} is called from the top level of "
        f"{script} (line 8), outside `if __name__ == \"__main__\":`: each worker of a local cluster starts by "
        "importing that script (Python's multiprocessing spawn), which would call it again there and the cluster "
        "could not start; put that call under `if __name__ == \"__main__\":`")
    assert "Nanny" not in done.stderr and "bootstrapping phase" not in done.stderr
    assert not (tmp_path / "runs").exists()
    # under the guard, the same call runs
    script.write_text(script.read_text().replace("print(main().status)", "if __name__ == \"__main__\":\n"
                                                                         "    print(main().status)"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "succeeded\n"), done.stderr


def test_params_of_numpys_kinds_are_their_numbers_and_other_kinds_are_refused_by_name(manifest_file, tmp_path):
    # np.int64(4) was refused as "must be a list of non-negative integers, got [np.int64(4)]", a Decimal was a
    # raw TypeError from deep in the resolver, and a tuple passed where a list was refused
    import decimal
    import fractions

    path = manifest_file(SPLIT)
    r = hetflow.run(path, params={"n": np.int64(4), "k": np.float32(3.0)}, runs_dir=tmp_path / "runs", cache=False)
    assert r.ok and r.outputs["y"].tolist() == [0.0, 1.0, 4.0, 9.0]
    assert r.record["overrides"] == {"n": 4, "k": 3.0} and type(r.record["overrides"]["n"]) is int
    for value, said in [(decimal.Decimal("1.5"), "param 'k' is a decimal.Decimal, which a manifest cannot hold"),
                        (fractions.Fraction(1, 3), "param 'k' is a fractions.Fraction"),
                        (np.arange(3), "param 'k' is an array, which a manifest cannot hold"),
                        ((1, 2), "param 'k' is a single value, not a list or map")]:
        with pytest.raises(hetflow.UsageError, match=re.escape(said)):
            hetflow.validate(path, params={"k": value})
    with pytest.raises(hetflow.ManifestError, match="a path cannot hold a NUL character"):
        hetflow.validate(str(path) + "\0x")
    with pytest.raises(hetflow.UsageError, match="holds a NUL character"):
        hetflow.run(path, runs_dir=str(tmp_path / "r\0s"))


def test_a_sweep_folder_that_is_not_one_is_a_usage_error(tmp_path):
    with pytest.raises(hetflow.UsageError, match="no sweep summary \\(sweep.json\\) here"):
        hetflow.Sweep(tmp_path / "nope")
    (tmp_path / "sweep.json").write_text("{")
    with pytest.raises(hetflow.UsageError, match=r"sweep.json:\d+:\d+: error: not valid JSON"):
        hetflow.Sweep(tmp_path)


def test_op_without_its_name_or_with_one_dtype_as_text_is_refused_at_the_decorator():
    from hetflow.executors.userops import PluginError

    with pytest.raises(PluginError, match=r"@op needs the op's name: write @op\('ns.name'\) above def nameless"):
        @hetflow.op
        def nameless(xp, x):
            return x
    with pytest.raises(PluginError, match=r"dtypes= is a list of dtype names \(dtypes=\['fp32'\]\), not 'fp32'"):
        hetflow.op("t.text_dtypes", dtypes="fp32")


def test_callbacks_that_are_not_functions_are_refused_by_what_they_are_called_with(manifest_file, tmp_path):
    with pytest.raises(hetflow.UsageError, match="on_event= takes a function called with each event, got int 1"):
        hetflow.run(manifest_file(SPLIT), runs_dir=tmp_path / "runs", on_event=1)
    with pytest.raises(hetflow.UsageError, match="on_point= takes a function called with each point's row of sweep.json"):
        hetflow.sweep(manifest_file(SPLIT.replace("params: {n: 6, k: 2.0}", "params: {n: 6, k: 2.0}\nmatrix: {n: [2, 3]}")),
                      runs_dir=tmp_path / "runs", on_point=1)


def test_empty_names_nul_characters_and_a_file_for_a_folder_are_refused_before_anything_is_written(manifest_file,
                                                                                                  tmp_path):
    """resume='' ran in the runs folder itself (its record.json at the top, a run no listing saw); a NUL in
    cache_dir, in plan's runs_dir or in an input's path was a raw ValueError, the first after a failed run was
    written; cache_dir naming a file was taken, and the record called every cache entry damaged."""
    path = manifest_file(SPLIT)
    runs = tmp_path / "runs"
    (tmp_path / "file").write_text("x")
    for call, said in [
        (lambda: hetflow.run(path, runs_dir=runs, resume=""), "resume= takes a name, got an empty one"),
        (lambda: hetflow.sweep(path, runs_dir=runs, resume=""), "resume= takes a name, got an empty one"),
        (lambda: hetflow.run(path, runs_dir=runs, point=""), "point= takes a name, got an empty one"),
        (lambda: hetflow.run(path, runs_dir=""), "runs_dir= takes a folder's path, got an empty one"),
        (lambda: hetflow.run(path, runs_dir=runs, cache_dir=""), "cache_dir= takes a folder's path, got an empty one"),
        (lambda: hetflow.run(path, runs_dir=runs, cache_dir="c\0"), "cache_dir= 'c\\x00' cannot be a folder's name: "
                                                                    "it holds a NUL character"),
        (lambda: hetflow.plan(path, runs_dir="r\0"), "runs_dir= 'r\\x00' cannot be a folder's name"),
        (lambda: hetflow.run(path, runs_dir=runs, cache_dir=tmp_path / "file"), "is a file, not a folder"),
        # every entry's write failed, and the record called each entry damaged
        (lambda: hetflow.run(path, runs_dir=runs, cache_dir=tmp_path / "file" / "sub"),
         f"is inside a file, {tmp_path / 'file'}, not a folder"),
    ]:
        with pytest.raises(hetflow.UsageError) as e:
            call()
        assert said in str(e.value), (said, str(e.value))
        assert not runs.exists()
    with pytest.raises(hetflow.UsageError, match="cannot be a file's name: it holds a NUL character"):
        from hetflow.engine.run.inputs import parse_source

        parse_source("a\0.npy")


def test_a_run_opened_while_it_ran_is_read_as_it_ended(manifest_file, tmp_path):
    """Run and Sweep kept the record they first read: once the process that ran them was gone, a run or sweep
    opened while it ran read 'died', where it had succeeded."""
    from hetflow.engine.store import owner

    path = manifest_file(SPLIT)
    done = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    record_file = Path(done.path) / "record.json"
    ended = record_file.read_bytes()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    # the record as it was while the run ran, owned by a process that has since ended
    running = {**json.loads(ended), "status": "running", "outputs": {}, "ended_at": None,
               "owner": {**owner.current(), "pid": gone.pid, "start_ticks": None}}
    record_file.write_text(json.dumps(running))
    seen = hetflow.open_run(done.run_id, runs_dir=tmp_path / "runs")
    assert seen.status == "died"  # as it reads now
    record_file.write_bytes(ended)  # the run's end, written after it was opened
    assert seen.status == "succeeded" and seen.outputs["y"].tolist() == done.outputs["y"].tolist()
    assert seen.record["status"] == "succeeded"


@pytest.mark.parametrize("change, said", [
    ({"error": "disk gone"}, "failures"), ({"error": 5}, "error"), ({"outputs": {"y": "y.npy"}}, "output"),
    ({"outputs": [1, 2]}, "output"), ({"nodes": [1]}, "failures"), ({"nodes": 5}, "failures"), ({"status": 5}, "status"),
])
def test_a_record_edited_into_other_types_is_read_without_a_crash(manifest_file, tmp_path, change, said):
    """A record whose fields were edited into other types raised AttributeError and TypeError from inside Run."""
    path = manifest_file(SPLIT)
    done = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    record_file = Path(done.path) / "record.json"
    record_file.write_text(json.dumps({**json.loads(record_file.read_text()), **change}))
    run = hetflow.open_run(done.path, runs_dir=tmp_path / "runs")
    if said == "failures":
        assert all(isinstance(f.message, str) for f in run.failures)
    elif said == "error":
        assert run.error == "5"
    elif said == "status":
        assert run.status == "unknown"
    else:
        with pytest.raises(hetflow.OutputDamaged):
            run.outputs["y"]
    assert isinstance(run._repr_html_(), str) and repr(run)
    for broken in ("null", "[]", '"x"'):
        record_file.write_text(broken)
        with pytest.raises(hetflow.UsageError, match="not a run record: its JSON is"):
            hetflow.open_run(done.path, runs_dir=tmp_path / "runs")


def test_an_on_point_that_raises_fails_a_parallel_sweep_as_it_fails_one_point_at_a_time(manifest_file, tmp_path):
    """With parallel=2 the summary said cancelled: stopping the other points was taken for a Ctrl-C."""
    path = manifest_file(SPLIT.replace("outputs:", "matrix: {n: [2, 3, 4, 5]}\noutputs:"))
    runs = tmp_path / "runs"

    def broken(row: dict) -> None:
        raise ValueError("the caller's bug")

    with pytest.raises(ValueError, match="the caller's bug"):
        hetflow.sweep(path, runs_dir=runs, on_point=broken, parallel=2)
    (summary_file,) = runs.glob("*/sweep.json")
    summary = json.loads(summary_file.read_text())
    # on a loaded machine the other thread may have run every point before this one's error stopped the sweep
    ended_all = all(p["status"] == "succeeded" for p in summary["points"])
    said = "the sweep failed after its last point ended" if ended_all else "the sweep ended early"
    assert summary["status"] == "failed" and summary["error"]["message"] == (
        f"{said}: ValueError: the caller's bug"), summary
    again = hetflow.sweep(path, runs_dir=runs, resume="latest", parallel=2)
    assert again.status == "succeeded"


@pytest.mark.parametrize("parallel", [1, 2])
def test_an_on_point_that_raises_on_the_last_point_fails_the_sweep_without_calling_it_early(manifest_file, tmp_path,
                                                                                          parallel):
    """Raised for the last point, the summary said succeeded beside "the sweep ended early" with nothing pending."""
    path = manifest_file(SPLIT.replace("outputs:", "matrix: {n: [2, 3, 4]}\noutputs:"))
    runs, seen = tmp_path / "runs", []

    def last(row: dict) -> None:
        seen.append(row["name"])
        if len(seen) == 3:
            raise ValueError("the caller's bug")

    with pytest.raises(ValueError, match="the caller's bug"):
        hetflow.sweep(path, runs_dir=runs, on_point=last, parallel=parallel)
    (summary_file,) = runs.glob("*/sweep.json")
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "failed" and summary["error"] == {
        "message": "the sweep failed after its last point ended: ValueError: the caller's bug", "pending": []}
    assert {p["status"] for p in summary["points"]} == {"succeeded"}


def test_a_ctrl_c_that_finds_every_point_ended_is_a_keyboard_interrupt_and_the_summary_says_succeeded(manifest_file,
                                                                                                        tmp_path):
    """It raised RunCancelled ("cancelled by SIGINT: 3 of 3 points had finished") beside a summary that said
    succeeded; the docs say the summary says how the sweep ended and a KeyboardInterrupt follows."""
    path = manifest_file(SPLIT.replace("outputs:", "matrix: {n: [2, 3, 4]}\noutputs:"))
    runs = tmp_path / "runs"

    def ctrl_c_at_the_last(row: dict) -> None:
        if row["name"] == "split[n=4]":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as e:
        hetflow.sweep(path, runs_dir=runs, on_point=ctrl_c_at_the_last)
    assert not isinstance(e.value, hetflow.RunCancelled)
    (summary_file,) = runs.glob("*/sweep.json")
    assert json.loads(summary_file.read_text())["status"] == "succeeded"


@pytest.mark.parametrize("define", [
    lambda: hetflow.op("relu")(lambda xp, x: x),
    lambda: hetflow.op("api.twice", dtypes="fp32"),
    lambda: hetflow.op("api.kernel")(lambda xp, x: x).kernel("tpu"),
])
def test_a_malformed_op_defined_from_python_is_a_hetflow_error(define):
    from hetflow.executors import ops

    before = dict(ops.REGISTRY)
    try:
        # a notebook's `except hetflow.HetflowError` did not catch it: it was an Exception of its own
        with pytest.raises(hetflow.HetflowError) as e:
            define()
    finally:
        ops.REGISTRY.clear()
        ops.REGISTRY.update(before)
    assert e.value.exit_code == 2 and "op " in str(e.value)


def test_a_run_begun_in_a_thread_after_the_scripts_main_thread_ended_is_refused_saying_why(tmp_path):
    """Python shuts down once the main thread ends, and its thread pools take no new work: the call failed as a
    RuntimeError from inside an import of hetflow's ("can't register atexit after shutdown")."""
    script = tmp_path / "late.py"
    runs = tmp_path / "runs"
    script.write_text("import threading\nimport hetflow\n\n\ndef late():\n    threading.main_thread().join()\n"
                      f"    hetflow.run({str(REPO / 'examples' / 'quickstart.yaml')!r}, params={{'batch': 4}}, "
                      f"runs_dir={str(runs)!r})\n\n\nthreading.Thread(target=late).start()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "hetflow.engine.errors.UsageError: hetflow.run() was called in a thread after the main thread ended" \
        in done.stderr, done.stderr
    assert "atexit" not in done.stderr and "new futures" not in done.stderr
    assert not runs.exists()
