"""Input stages fed from files: ``--input STAGE=PATH`` on run, plan and verify; ``plan(inputs=)``'s cache forecast."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.engine import cli
from hetflow.engine.store.records import digest_portable
from hetflow.executors.base import Dtype, PortableActivation

# ids feeds a chain across two executors; w is a partition of its own that no input reaches
TWO = """\
version: 1
name: fed
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  ids: {op: input, args: {shape: [2, 3], dtype: int32}, executor: a}
  mask: {op: input, args: {shape: [3], dtype: fp32}, executor: a}
  f: {op: cast, inputs: [ids], dtype: fp32, executor: a}
  g: {op: mul, inputs: [f, mask], executor: b}
  h: {op: relu, inputs: [g], executor: a}
  w: {op: arange, args: {stop: 3}, executor: b}
  v: {op: add, inputs: [w, w], executor: b}
outputs: {h: h, v: v}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def project(tmp_path, manifest_file):
    path = manifest_file(TWO)
    np.save(tmp_path / "ids.npy", np.array([[1, -2, 3], [4, 5, -6]], np.int64))
    np.savez(tmp_path / "masks.npz", mask=np.array([1.0, 0.5, 2.0]), other=np.zeros(4))
    return tmp_path, path


def test_run_with_files_records_them_and_verify_reruns_with_them(project):
    folder, path = project
    runs = str(folder / "runs")
    code, out, err = _cli("run", path, "--input", f"ids={folder / 'ids.npy'}", "--input",
                          f"mask={folder / 'masks.npz'}:mask", "--runs-dir", runs, "--quiet")
    assert code == 0, err
    run = hetflow.open_run(out.strip().splitlines()[-1], runs_dir=runs)
    assert run.outputs["h"].tolist() == [[1.0, 0.0, 6.0], [4.0, 2.5, 0.0]]
    ids = run.record["inputs"]["ids"]
    expected = PortableActivation.from_array(np.array([[1, -2, 3], [4, 5, -6]], np.int32), Dtype.int32)
    assert ids["path"] == str(folder / "ids.npy") and ids["key"] is None
    assert ids["dtype"] == "int32" and ids["digest"] == digest_portable(expected)
    assert ids["file_digest"].startswith("sha256:")
    assert run.record["inputs"]["mask"]["key"] == "mask"

    code, out, err = _cli("verify", run.run_id, "--runs-dir", runs)
    assert code == 0, err
    assert out.splitlines()[-1].startswith(f"verify {run.run_id}: all outputs match")

    np.save(folder / "ids.npy", np.array([[1, -2, 3], [4, 5, 7]], np.int64))
    before = sorted(os.listdir(runs))
    code, out, err = _cli("verify", run.run_id, "--runs-dir", runs)
    assert (code, out) == (2, "")
    assert err.startswith(f"hetflow: error: verify: input stage 'ids' of run {run.run_id} read {folder / 'ids.npy'}, "
                          f"which changed since the run ({ids['file_digest'][:19]} then, sha256:")
    assert err.endswith("now); verify reruns a run with the inputs it had: restore the file, or give one holding the "
                        "same array with --input ids=PATH (a .npy file, or a .npz or .safetensors file with :KEY)\n")
    assert sorted(os.listdir(runs)) == before, "a refused verify writes nothing"

    # the same array from another file is the run's input again
    np.savez(folder / "again.npz", ids=np.array([[1, -2, 3], [4, 5, -6]], np.int16))
    code, out, err = _cli("verify", run.run_id, "--runs-dir", runs, "--input", f"ids={folder / 'again.npz'}")
    assert code == 0, err
    code, out, err = _cli("verify", run.run_id, "--runs-dir", runs, "--input", f"ids={folder / 'ids.npy'}")
    assert code == 2 and "verify: --input ids=" in err and "holds other values than run" in err


def test_verify_of_arrays_from_memory_refuses_with_the_reason(project):
    folder, path = project
    runs = str(folder / "runs")
    run = hetflow.run(path, inputs={"ids": np.ones((2, 3), np.int32), "mask": np.ones(3, np.float32)}, runs_dir=runs)
    assert run.ok and "path" not in run.record["inputs"]["ids"]
    before = sorted(os.listdir(runs))
    code, out, err = _cli("verify", run.run_id, "--runs-dir", runs)
    assert (code, out) == (2, "")
    digest = run.record["inputs"]["ids"]["digest"][:19]
    assert err == (f"hetflow: error: verify: run {run.run_id} took the array of input stage 'ids' from memory "
                   f"(hetflow.run(inputs=)); its record keeps the array's digest ({digest}), not the array, so it "
                   "cannot be rerun as it was: give the same array with --input ids=PATH (a .npy file, or a .npz or "
                   ".safetensors file with :KEY)\n")
    assert sorted(os.listdir(runs)) == before, "no verification run is left behind"
    code, out, _ = _cli("verify", run.run_id, "--runs-dir", runs, "--json")
    assert code == 2 and json.loads(out)["error"] == "bad-input"

    np.save(folder / "ones.npy", np.ones((2, 3), np.int32))
    np.save(folder / "mask1.npy", np.ones(3, np.float32))
    code, out, err = _cli("verify", run.run_id, "--runs-dir", runs, "--input", f"ids={folder / 'ones.npy'}",
                          "--input", f"mask={folder / 'mask1.npy'}")
    assert code == 0, err


@pytest.mark.parametrize("flag, message", [
    ("nope=ids.npy", "--input nope=ids.npy: {path} has no input stage 'nope' (input stages: ids, mask)"),
    ("g=ids.npy", "--input g=ids.npy: stage 'g' ({path}:8:3) runs op 'mul', not input: only an input stage takes "
                  "an array (input stages: ids, mask)"),
    ("ids", "--input expects STAGE=PATH (a .npy file, or a .npz or .safetensors file with :KEY), got 'ids'"),
    ("ids=absent.npy", "--input ids=absent.npy: {folder}/absent.npy: no such file"),
    ("ids=masks.npz", "--input ids=masks.npz: masks.npz holds 2 arrays: say which as PATH:KEY (one of: mask, other)"),
    ("ids=masks.npz:nope", "--input ids=masks.npz:nope: masks.npz has no array 'nope' (it holds: mask, other)"),
    ("ids=masks.npz:other", "--input ids=masks.npz:other: stage 'ids' ({path}:5:3) takes shape [2, 3]; the file's "
                            "array has shape [4] (float64)"),
    ("ids=frac.npy", "--input ids=frac.npy: float64 values such as 0.5 are not whole numbers, which int32 holds; "
                     "stage 'ids' ({path}:5:3) takes dtype int32: convert the file's values yourself, or declare a "
                     "dtype that holds them"),
    ("ids=words.npy", "--input ids=words.npy: words.npy holds <U1 values; an input takes numbers (bool, integer, "
                      "float or complex)"),
    ("ids=m.yaml", "--input ids=m.yaml: m.yaml: an input is read from a .npy, .npz or .safetensors file, not .yaml"),
])
def test_bad_input_files_are_exit_2_with_nothing_written(project, monkeypatch, flag, message):
    folder, path = project
    monkeypatch.chdir(folder)
    np.save(folder / "frac.npy", np.full((2, 3), 0.5))
    np.save(folder / "words.npy", np.array([["a"] * 3] * 2))
    np.save(folder / "mask.npy", np.ones(3))
    for command in ("run", "plan"):
        code, out, err = _cli(command, path, "--input", flag, "--input", "mask=mask.npy", "--runs-dir", "runs")
        assert (code, out) == (2, ""), (command, err)
        assert err == f"hetflow: error: {message.format(path=path, folder=folder)}\n", command
    assert not (folder / "runs").exists()


def test_a_missing_input_names_the_flag_on_the_command_line(project):
    folder, path = project
    code, _, err = _cli("run", path, "--input", f"mask={folder / 'masks.npz'}:mask", "--runs-dir", str(folder / "runs"))
    assert code == 2
    assert err == (f"hetflow: error: {path}:5:3: stage 'ids' is an input: give its array with --input ids=PATH "
                   "(a .npy file, or a .npz or .safetensors file with :KEY) holding shape [2, 3] and dtype int32 "
                   "(numpy int32)\n")
    assert not (folder / "runs").exists()


def test_safetensors_and_python_paths(project):
    from safetensors.numpy import save_file

    folder, path = project
    save_file({"ids": np.arange(6, dtype=np.int32).reshape(2, 3), "mask": np.ones(3, np.float16)},
              str(folder / "t.safetensors"))
    run = hetflow.run(path, inputs={"ids": folder / "t.safetensors:ids", "mask": f"{folder}/t.safetensors:mask"},
                      runs_dir=folder / "runs")
    assert run.ok and run.outputs["h"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert run.record["inputs"]["mask"]["key"] == "mask" and run.record["inputs"]["mask"]["dtype"] == "fp32"


def test_plan_with_inputs_forecasts_exactly_the_cache_hits_of_the_run(project):
    folder, path = project
    runs = folder / "runs"
    given = {"ids": folder / "ids.npy", "mask": f"{folder / 'masks.npz'}:mask"}
    first = hetflow.run(path, inputs=given, runs_dir=runs)
    assert first.ok and first.record["cache"]["hits"] == []

    def forecast(inputs) -> set[str]:
        cache = hetflow.plan(path, inputs=inputs, runs_dir=runs).cache
        assert {s["status"] for s in cache.values()} <= {"cached", "will run"}, cache
        return {pid for pid, s in cache.items() if s["status"] == "cached"}

    same = forecast(given)
    assert same == set(first.record["cache"]["keys"]), "every partition was stored by the first run"
    assert set(hetflow.run(path, inputs=given, runs_dir=runs).record["cache"]["hits"]) == same

    np.save(folder / "ids2.npy", np.array([[7, 8, 9], [1, 2, 3]], np.int32))
    other = {**given, "ids": str(folder / "ids2.npy")}
    cache = hetflow.plan(path, inputs=other, runs_dir=runs).cache
    expected = {pid for pid, s in cache.items() if s["status"] == "cached"}
    assert expected and expected != same, cache
    assert {s["reason"].split(":")[0] for pid, s in cache.items() if pid not in expected} <= {"definition changed",
                                                                                               "input changed"}
    assert set(hetflow.run(path, inputs=other, runs_dir=runs).record["cache"]["hits"]) == expected

    # the CLI's plan forecasts the same with --input; without the inputs what depends on them is unknown
    code, out, err = _cli("plan", path, "--runs-dir", str(runs), "--format", "json", "--input",
                          f"ids={folder / 'ids.npy'}", "--input", f"mask={folder / 'masks.npz'}:mask")
    assert code == 0, err
    assert {p for p, s in json.loads(out)["cache"].items() if s["status"] == "cached"} == same
    unknown = hetflow.plan(path, runs_dir=runs).cache
    reading = {pid for pid, s in unknown.items() if s["status"] == "unknown"}
    assert reading and all("whose array is not given" in unknown[p]["reason"] for p in reading)
    assert {unknown[p]["status"] for p in set(unknown) - reading} == {"cached"}


def test_resume_reads_the_files_the_run_read(project):
    folder, path = project
    runs = folder / "runs"

    def stop(event: dict) -> None:
        if event.get("event") == "finished" and event.get("kind") != "run":
            raise RuntimeError("stopped after its first task")

    with pytest.raises(RuntimeError, match="stopped after its first task"):
        hetflow.run(path, inputs={"ids": folder / "ids.npy", "mask": f"{folder / 'masks.npz'}:mask"}, runs_dir=runs,
                    on_event=stop)
    (record,) = runs.glob("*/record.json")
    assert json.loads(record.read_text())["status"] == "failed"
    np.save(folder / "ids.npy", np.zeros((2, 3), np.int32))
    with pytest.raises(hetflow.UsageError, match=r"^resume: input stage 'ids' of run .* changed since the run .* give one holding the same array with inputs=\{'ids': array\}"):
        hetflow.run(path, resume=record.parent.name, runs_dir=runs)


def test_a_resumed_sweep_goes_on_with_the_arrays_its_points_took(project):
    """A sweep resumed with other arrays (or a file changed since) ran its last points on them and its first on
    the old ones; without ``--input``, the command line refused what a resumed run reads from its record."""
    folder, path = project
    swept = Path(path).read_text().replace("executors:", "params: {k: 1}\nmatrix: {k: [1, 2, 3]}\nexecutors:", 1)
    Path(path).write_text(swept)
    runs = str(folder / "runs")
    ids, mask = folder / "ids.npy", f"{folder / 'masks.npz'}:mask"

    def stop(event: dict) -> None:
        if event.get("kind") == "run" and event.get("event") == "finished":
            raise RuntimeError("stopped after the first point")

    with pytest.raises(RuntimeError, match="stopped after the first point"):
        hetflow.sweep(path, inputs={"ids": ids, "mask": mask}, runs_dir=runs, on_event=stop)
    (summary_file,) = Path(runs).glob("*/sweep.json")
    assert [p["status"] for p in json.loads(summary_file.read_text())["points"]][1:] == ["pending", "pending"]
    np.save(folder / "other.npy", np.zeros((2, 3), np.int32))
    code, out, err = _cli("run", path, "--resume", "latest", "--input", f"ids={folder / 'other.npy'}",
                          "--runs-dir", runs, "--quiet")
    assert code == 2 and "--resume: --input ids=" in err and "holds other values than run" in err, err
    np.save(ids, np.ones((2, 3), np.int32))
    code, out, err = _cli("run", path, "--resume", "latest", "--runs-dir", runs, "--quiet")
    assert code == 2 and "--resume: input stage 'ids' of run " in err and "changed since the run" in err, err
    assert [p["status"] for p in json.loads(summary_file.read_text())["points"]][1:] == ["pending", "pending"]
    np.save(ids, np.array([[1, -2, 3], [4, 5, -6]], np.int64))
    code, out, err = _cli("run", path, "--resume", "latest", "--runs-dir", runs, "--quiet")
    assert code == 0, err
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "succeeded"
    records = [hetflow.open_run(p["run_id"], runs_dir=runs).record for p in summary["points"]]
    assert len({json.dumps(r["inputs"], sort_keys=True) for r in records}) == 1
    assert all(hetflow.open_run(p["run_id"], runs_dir=runs).outputs["h"].tolist() == [[1.0, 0.0, 6.0], [4.0, 2.5, 0.0]]
               for p in summary["points"])


NARROW_OUT = """\
version: 1
name: narrow-out
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [3, 4], seed: 1, std: 3}}
  b: {op: cast, inputs: [x], dtype: bf16}
  f: {op: cast, inputs: [x], dtype: fp8e5m2}
  i: {op: cast, inputs: [x], dtype: int4}
outputs: {b: b, f: f, i: i}
"""

NARROW_IN = """\
version: 1
name: narrow-in
executors: {host: {vendor: cpu}}
stages:
  b: {op: input, args: {shape: [3, 4], dtype: bf16}, dtype: bf16}
  f: {op: input, args: {shape: [3, 4], dtype: fp8e5m2}, dtype: fp8e5m2}
  i: {op: input, args: {shape: [3, 4], dtype: int4}, dtype: int4}
  s: {op: add, inputs: [b, b], dtype: fp32}
outputs: {b: b, f: f, i: i, s: s}
"""


def test_a_bf16_fp8_or_int4_output_of_one_run_is_the_input_of_the_next(tmp_path, manifest_file):
    """hetflow writes those outputs as raw bytes of their width (|V2, |V1), and --input refused its own files:
    "holds |V2 values; an input takes numbers". A file of raw bytes of another width is refused, saying so."""
    import ml_dtypes

    runs = str(tmp_path / "runs")
    code, out, err = _cli("run", manifest_file(NARROW_OUT), "--runs-dir", runs, "--quiet", "--no-cache")
    assert code == 0, err
    first = os.path.join(runs, out.strip().splitlines()[-1])
    given = [f"{name}={os.path.join(first, name + '.npy')}" for name in ("b", "f", "i")]
    code, out, err = _cli("run", manifest_file(NARROW_IN), "--runs-dir", runs, "--quiet", "--no-cache",
                          *[x for g in given for x in ("--input", g)])
    assert code == 0, err
    second = os.path.join(runs, out.strip().splitlines()[-1])
    for name in ("b", "f", "i"):
        assert Path(first, name + ".npy").read_bytes() == Path(second, name + ".npy").read_bytes(), name
    b = np.load(os.path.join(first, "b.npy")).view(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(np.load(os.path.join(second, "s.npy")), b + b)
    assert hetflow.open_run(os.path.basename(second), runs_dir=runs).record["inputs"]["f"]["dtype"] == "fp8e5m2"

    code, out, err = _cli("run", manifest_file(NARROW_IN), "--runs-dir", runs, "--quiet", "--no-cache",
                          "--input", given[1].replace("f=", "b=", 1), "--input", given[1], "--input", given[2])
    assert code == 2 and out == "", err
    assert ("f.npy: it holds raw 1-byte values, as hetflow writes fp8e4m3, fp8e5m2 and int4 outputs, not bf16 ones; "
            "stage 'b' (") in err and err.endswith(") takes dtype bf16\n"), err
    assert "Traceback" not in err


def test_a_masked_array_is_refused_rather_than_its_mask_dropped(project):
    folder, path = project
    masked = np.ma.masked_array(np.ones(3, np.float32), mask=[False, True, False])
    with pytest.raises(hetflow.UsageError, match=r"'mask'.*a masked array; .*array\.filled\(value\)"):
        hetflow.run(path, inputs={"ids": np.ones((2, 3), np.int32), "mask": masked}, runs_dir=str(folder / "runs"))
    assert not (folder / "runs").exists() or not [d for d in os.listdir(folder / "runs") if not d.startswith(".")]
    run = hetflow.run(path, inputs={"ids": np.ones((2, 3), np.int32), "mask": masked.filled(0)},
                      runs_dir=str(folder / "runs"))
    assert run.ok and run.outputs["h"].tolist() == [[1, 0, 1], [1, 0, 1]]
