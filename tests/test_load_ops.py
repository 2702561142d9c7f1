"""Data in (issue 14): load of .npy/.npz/.safetensors, lossy values, full, the scalar value form, eq/lt/gt/where."""

import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import hetflow
from hetflow.engine import cli

HEAD = "version: 1\nname: data\nexecutors: {h: {vendor: cpu}}\nstages:\n"


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def position(text: str, line_has: str, token: str) -> str:
    """LINE:COL of ``token`` on the first line of ``text`` that contains ``line_has``."""
    for n, line in enumerate(text.splitlines(), 1):
        if line_has in line:
            return f"{n}:{line.index(token) + 1}"
    raise AssertionError(f"no line with {line_has!r}")


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def data(tmp_path):
    """A folder with one file of each format the tests load."""
    rng = np.random.default_rng(7)
    np.save(tmp_path / "x.npy", rng.standard_normal((4, 3)).astype(np.float32))
    np.savez(tmp_path / "set.npz", features=rng.standard_normal((4, 3)).astype(np.float32),
             labels=np.array([0, 2, 1, 2], np.int64))
    np.savez(tmp_path / "one.npz", only=np.arange(12, dtype=np.float64).reshape(4, 3))
    save_file({"w": rng.standard_normal((4, 3)).astype(np.float32), "b": np.ones(3, np.float32)},
              str(tmp_path / "weights.safetensors"))
    return tmp_path


def manifest(folder: Path, stages: str, outputs: str, name: str = "m.yaml") -> tuple[Path, str]:
    text = HEAD + stages + f"outputs: {outputs}\n"
    path = folder / name
    path.write_text(text)
    return path, text


def test_load_reads_each_format_in_a_run_and_the_record_holds_every_files_digest(data):
    path, _ = manifest(data, (
        "  a: {op: load, args: {path: x.npy}}\n"
        "  f: {op: load, args: {path: set.npz, key: features}}\n"
        "  o: {op: load, args: {path: one.npz}}\n"
        "  w: {op: load, args: {path: weights.safetensors, key: w}}\n"
        "  b: {op: load, args: {path: weights.safetensors, key: b}}\n"
        "  s: {op: add, inputs: [a, f]}\n"
        "  t: {op: add, inputs: [w, b]}\n"), "{a: a, f: f, o: o, w: w, s: s, t: t}")
    assert run_cli("validate", str(path))[0] == 0
    run = hetflow.run(path, runs_dir=data / "runs")
    assert run.status == "succeeded", run.error
    x = np.load(data / "x.npy")
    with np.load(data / "set.npz") as archive:
        features = archive["features"]
    from safetensors.numpy import load_file

    weights = load_file(str(data / "weights.safetensors"))
    np.testing.assert_array_equal(run.outputs["a"], x)
    np.testing.assert_array_equal(run.outputs["f"], features)
    np.testing.assert_array_equal(run.outputs["o"], np.arange(12, dtype=np.float32).reshape(4, 3))
    np.testing.assert_array_equal(run.outputs["w"], weights["w"])
    np.testing.assert_array_equal(run.outputs["s"], x + features)
    np.testing.assert_array_equal(run.outputs["t"], weights["w"] + weights["b"])
    assert run.record["data"] == {
        "a": {"path": str(data / "x.npy"), "key": None, "digest": sha256(data / "x.npy")},
        "f": {"path": str(data / "set.npz"), "key": "features", "digest": sha256(data / "set.npz")},
        "o": {"path": str(data / "one.npz"), "key": None, "digest": sha256(data / "one.npz")},
        "w": {"path": str(data / "weights.safetensors"), "key": "w", "digest": sha256(data / "weights.safetensors")},
        "b": {"path": str(data / "weights.safetensors"), "key": "b", "digest": sha256(data / "weights.safetensors")},
    }
    # a changed file is a changed digest in the next run's record
    np.save(data / "x.npy", x + 1)
    again = hetflow.run(path, runs_dir=data / "runs")
    assert again.record["data"]["a"]["digest"] == sha256(data / "x.npy") != run.record["data"]["a"]["digest"]
    np.testing.assert_array_equal(again.outputs["s"], x + 1 + features)


def _damaged(folder: Path) -> None:
    (folder / "table.csv").write_text("1,2\n3,4\n")
    (folder / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    (folder / "bad.npz").write_bytes(b"PK\x03\x04 not really a zip")
    np.savez(folder / "good.npz", x=np.arange(1000, dtype=np.float32))
    raw = (folder / "good.npz").read_bytes()
    (folder / "cut.npz").write_bytes(raw[:2000])
    flipped = bytearray(raw)
    flipped[1500] ^= 0xFF  # inside x.npy's data: only the member's CRC notices
    (folder / "crc.npz").write_bytes(bytes(flipped))
    (folder / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    save_file({"w": np.arange(1000, dtype=np.float32)}, str(folder / "w.safetensors"))
    (folder / "cut.safetensors").write_bytes((folder / "w.safetensors").read_bytes()[:500])
    np.save(folder / "words.npy", np.array(["cat", "dog"]))
    (folder / "empty.npy").write_bytes(b"")


@pytest.mark.parametrize("args, at, message", [
    ("{path: table.csv}", "path", "table.csv: load reads .npy, .npz, .safetensors files, not .csv"),
    ("{path: missing.npy}", "path", "{dir}/missing.npy: no such file"),
    ("{path: bad.npy}", "path", "bad.npy does not parse as .npy"),
    ("{path: bad.npz}", "path", "bad.npz does not parse as .npz: BadZipFile"),
    ("{path: cut.npz, cast: true}", "path", "cut.npz does not parse as .npz: BadZipFile"),
    ("{path: crc.npz, cast: true}", "path", "crc.npz does not parse as .npz: BadZipFile: Bad CRC-32 for file 'x.npy'"),
    ("{path: bad.safetensors, key: w}", "path", "bad.safetensors is not a readable safetensors file"),
    ("{path: cut.safetensors, key: w}", "path", "cut.safetensors is not a readable safetensors file"),
    ("{path: good.npz, key: y}", "key", "good.npz has no array 'y' (it holds: x)"),
    ("{path: w.safetensors, key: v}", "key", "w.safetensors has no array 'v' (it holds: w)"),
    ("{path: good.npz.npy}", "path", "{dir}/good.npz.npy: no such file"),
    ("{path: words.npy, cast: true}", "path", "words.npy holds <U3 values; load reads numbers"),
    ("{path: empty.npy}", "path", "empty.npy does not parse as .npy: the file is empty (0 bytes) or ends inside its header"),
])
def test_a_file_load_cannot_read_is_exit_2_at_its_position_before_anything_runs(tmp_path, args, at, message):
    _damaged(tmp_path)
    path, text = manifest(tmp_path, f"  x: {{op: load, args: {args}}}\n", "{x: x}")
    line, col = position(text, "op: load", f"{at}: ").split(":")
    where = f"{line}:{int(col) + len(at) + 2}"  # the value of the arg
    for command in ("validate", "plan", "run"):
        extra = ["--runs-dir", str(tmp_path / "runs")] if command == "run" else []
        code, _, err = run_cli(command, str(path), *extra)
        assert code == 2, (command, err)
        assert err.startswith(f"{path}:{where}: error: stage 'x': " + message.format(dir=tmp_path)), err
        assert "Traceback" not in err and "internal error" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_several_arrays_and_no_key_is_an_error_naming_them(data):
    for file in ("set.npz", "weights.safetensors"):
        path, text = manifest(data, f"  x: {{op: load, args: {{path: {file}}}}}\n", "{x: x}")
        code, _, err = run_cli("validate", str(path))
        names = "features, labels" if file == "set.npz" else "b, w"
        assert code == 2 and err.strip() == (
            f"{path}:{position(text, 'op: load', file)}: error: stage 'x': {file} holds 2 arrays: "
            f"say which with 'key' (one of: {names})")


UNSAID = "say dtype: on the stage, or cast: true in its args, to convert anyway"
SAID = "say cast: true in its args to convert anyway"
LOSSY = [
    # file, values, what the stage says beyond the path, the problem, how it ends; cast: true converts by the numeric rule
    ("complex.npy", np.array([1 + 2j, 3 - 1j]), "", "complex128 values have an imaginary part, which fp32 drops", UNSAID),
    ("huge.npy", np.array([1.0, 1e39]), "", "float64 values up to 1e+39 are beyond the range of fp32 (largest 3.40282e+38)",
     UNSAID),
    ("wide.npy", np.array([3, 2**64 - 1], np.uint64), "",
     "uint64 values such as 18446744073709551615 are beyond the range of int64 (-9223372036854775808 to 9223372036854775807)",
     UNSAID),
    ("ids.npy", np.array([3, 2**24 + 1], np.int64), ", dtype: fp32",
     "int64 values such as 16777217 do not survive conversion to fp32", SAID),
    ("big.npz", np.array([2**40 + 1, 5], np.int64), ", dtype: int32",
     "int64 values such as 1099511627777 are beyond the range of int32 (-2147483648 to 2147483647)", SAID),
    ("half.npy", np.array([0.5, 2.0]), ", dtype: int64", "float64 values such as 0.5 are not whole numbers, which int64 holds",
     SAID),
    ("flags.npy", np.array([0, 1, 2], np.int16), ", dtype: bool", "int16 values such as 2 are neither 0 nor 1, which bool holds",
     SAID),
]


@pytest.mark.parametrize("file, values, said, problem, fix", LOSSY)
def test_lossy_values_are_an_error_unless_cast_says_so(tmp_path, file, values, said, problem, fix):
    if file.endswith(".npz"):
        np.savez(tmp_path / file, v=values)
        args = f"{{path: {file}, key: v}}"
        shown = f"{file} [v]"
    else:
        np.save(tmp_path / file, values)
        args = f"{{path: {file}}}"
        shown = file
    path, text = manifest(tmp_path, f"  x: {{op: load, args: {args}{said}}}\n", "{x: x}")
    code, _, err = run_cli("validate", str(path))
    assert code == 2 and err.strip() == (
        f"{path}:{position(text, 'op: load', file)}: error: stage 'x' loads {shown}: {problem}; {fix}")
    assert run_cli("run", str(path), "--runs-dir", str(tmp_path / "runs"))[0] == 2
    # cast: true converts anyway, by the numeric rule (toward zero and saturating into integers, != 0 into bool)
    from hetflow.executors.base import Dtype
    from hetflow.executors.opdecl import to_dtype

    dtype = Dtype(said.partition("dtype: ")[2]) if said else Dtype.int64 if values.dtype.kind == "u" else Dtype.fp32
    with np.errstate(over="ignore"):
        expected = to_dtype(np, np.real(values) if values.dtype.kind == "c" else values, dtype)
    path, _ = manifest(tmp_path, f"  x: {{op: load, args: {args.replace('}', ', cast: true}')}{said}}}\n", "{x: x}", "ok.yaml")
    assert run_cli("validate", str(path))[0] == 0
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.error
    assert run.outputs["x"].dtype == dtype.numpy
    np.testing.assert_array_equal(run.outputs["x"], expected)


def test_values_that_survive_load_without_being_asked(tmp_path):
    """Integers and bools keep their type and values; floats become fp32; a named dtype that holds the values takes them."""
    np.save(tmp_path / "labels.npy", np.array([0, 9, 3, 2**24 + 1, -2**62], np.int64))
    np.save(tmp_path / "f64.npy", np.array([0.1, -2.5e30, 1 / 3]))
    np.save(tmp_path / "mask.npy", np.array([True, False]))
    np.save(tmp_path / "small.npy", np.array([-128, 127], np.int64))
    np.save(tmp_path / "pixels.npy", np.array([0, 255], np.uint8))
    np.save(tmp_path / "u32.npy", np.array([0, 2**32 - 1], np.uint32))
    path, _ = manifest(tmp_path, (
        "  l: {op: load, args: {path: labels.npy}}\n"
        "  f: {op: load, args: {path: f64.npy}}\n"
        "  d: {op: load, args: {path: f64.npy}, dtype: fp64}\n"
        "  m: {op: load, args: {path: mask.npy}}\n"
        "  s: {op: load, args: {path: small.npy}, dtype: int8}\n"
        "  p: {op: load, args: {path: pixels.npy}}\n"
        "  u: {op: load, args: {path: u32.npy}}\n"
        "  i: {op: load, args: {path: pixels.npy}, dtype: int16}\n"), "{l: l, f: f, d: d, m: m, s: s, p: p, u: u, i: i}")
    assert run_cli("validate", str(path))[0] == 0
    run = hetflow.run(path, runs_dir=tmp_path / "runs")
    assert run.status == "succeeded", run.error
    out = run.outputs
    assert out["l"].dtype == np.int64 and out["l"].tolist() == [0, 9, 3, 2**24 + 1, -2**62]
    np.testing.assert_array_equal(out["f"], np.array([0.1, -2.5e30, 1 / 3]).astype(np.float32))
    assert out["f"].dtype == np.float32
    assert out["d"].dtype == np.float64 and out["d"].tolist() == [0.1, -2.5e30, 1 / 3]
    assert out["m"].dtype == np.bool_ and out["m"].tolist() == [True, False]
    assert out["s"].dtype == np.int8 and out["s"].tolist() == [-128, 127]
    assert out["p"].dtype == np.uint8 and out["p"].tolist() == [0, 255]
    assert out["u"].dtype == np.int64 and out["u"].tolist() == [0, 2**32 - 1]  # uint32: the signed type that holds it
    assert out["i"].dtype == np.int16 and out["i"].tolist() == [0, 255]
    # the plan shows the dtypes the files gave
    code, text, _ = run_cli("plan", str(path), "--format", "json")
    assert code == 0
    import json

    dtypes = {sid: node["dtype"] for sid, node in json.loads(text)["nodes"].items()}
    assert {k: dtypes[k] for k in "lfdmspui"} == {"l": "int64", "f": "fp32", "d": "fp64", "m": "bool", "s": "int8",
                                                   "p": "uint8", "u": "int64", "i": "int16"}


def test_full_is_a_constant_tensor_of_the_stages_dtype(tmp_path):
    path, text = manifest(tmp_path, (
        "  a: {op: full, args: {shape: [2, 3], value: 2.5}}\n"
        "  b: {op: full, args: {shape: [4], value: -3}, dtype: int8}\n"
        "  c: {op: full, args: {shape: [], value: 7}}\n"
        "  d: {op: add, inputs: [a, c]}\n"), "{a: a, b: b, c: c, d: d}")
    run = hetflow.run(path, runs_dir=tmp_path / "runs")
    assert run.status == "succeeded", run.error
    np.testing.assert_array_equal(run.outputs["a"], np.full((2, 3), 2.5, np.float32))
    assert run.outputs["b"].dtype == np.int8 and run.outputs["b"].tolist() == [-3] * 4
    assert run.outputs["c"].shape == () and float(run.outputs["c"]) == 7.0
    np.testing.assert_array_equal(run.outputs["d"], np.full((2, 3), 9.5, np.float32))
    bad, text = manifest(tmp_path, "  a: {op: full, args: {shape: [2], value: lots}}\n  z: {op: full, args: {shape: [2]}}\n",
                         "{a: a, z: z}", "bad.yaml")
    code, _, err = run_cli("validate", str(bad))
    assert code == 2 and err.strip().splitlines() == [
        f"{bad}:{position(text, 'a: {op: full', 'lots')}: error: argument 'value' of op 'full' must be a number, got 'lots'",
        f"{bad}:{position(text, 'z: {op: full', '{shape')}: error: op 'full' needs argument 'value'",
    ]


@pytest.mark.parametrize("op, f", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide)])
def test_the_scalar_value_form_of_the_binary_ops_equals_numpy(data, op, f):
    path, _ = manifest(data, (
        "  x: {op: load, args: {path: x.npy}}\n"
        f"  y: {{op: {op}, inputs: [x], args: {{value: 1.7}}}}\n"
        f"  z: {{op: {op}, inputs: [x], args: {{value: -3}}}}\n"
        f"  w: {{op: {op}, inputs: [x, y]}}\n"), "{y: y, z: z, w: w}")
    run = hetflow.run(path, runs_dir=data / "runs")
    assert run.status == "succeeded", run.error
    x = np.load(data / "x.npy")
    y = f(x, np.float32(1.7))
    np.testing.assert_array_equal(run.outputs["y"], y)
    np.testing.assert_array_equal(run.outputs["z"], f(x, np.float32(-3)))
    np.testing.assert_array_equal(run.outputs["w"], f(x, y))
    assert run.outputs["y"].dtype == np.float32


def test_the_scalar_value_form_is_checked_at_its_position(data):
    path, text = manifest(data, (
        "  x: {op: load, args: {path: x.npy}}\n"
        "  a: {op: mul, inputs: [x, x], args: {value: 2}}\n"
        "  b: {op: sub, inputs: [x]}\n"
        "  c: {op: div, inputs: [x], args: {value: half}}\n"
        "  d: {op: add, inputs: [], args: {value: 1}}\n"), "{a: a}")
    code, _, err = run_cli("validate", str(path))
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"{path}:{position(text, 'a: {op: mul', '2}')}: error: op 'mul' takes a second input or args.value, not both",
        f"{path}:{position(text, 'b: {op: sub', 'b:')}: error: op 'sub' takes a second input or args.value (a number), "
        "and has neither",
        f"{path}:{position(text, 'c: {op: div', 'half')}: error: argument 'value' of op 'div' must be a number or null, got 'half'",
        f"{path}:{position(text, 'd: {op: add', '[]')}: error: op 'add' takes 1 to 2 inputs, stage 'd' gives 0",
    ]


def test_an_accuracy_from_argmax_eq_and_mean_equals_numpys(tmp_path):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((64, 10)).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    labels[:20] = logits[:20].argmax(axis=1)  # some right, most wrong
    np.savez(tmp_path / "eval.npz", logits=logits, labels=labels)
    path, _ = manifest(tmp_path, (
        "  logits: {op: load, args: {path: eval.npz, key: logits}}\n"
        "  labels: {op: load, args: {path: eval.npz, key: labels}}\n"
        "  pred: {op: argmax, inputs: [logits], args: {axis: 1}}\n"
        "  hit: {op: eq, inputs: [pred, labels]}\n"
        "  accuracy: {op: mean, inputs: [hit]}\n"
        "  sure: {op: gt, inputs: [logits], args: {value: 1.0}}\n"
        "  unsure: {op: lt, inputs: [logits, sure]}\n"
        "  is3: {op: eq, inputs: [labels], args: {value: 3}}\n"
        "  zero: {op: full, args: {shape: [64, 10], value: 0}}\n"
        "  kept: {op: where, inputs: [sure, logits, zero]}\n"), "{accuracy: accuracy, hit: hit, sure: sure, "
        "unsure: unsure, is3: is3, kept: kept}")
    run = hetflow.run(path, runs_dir=tmp_path / "runs")
    assert run.status == "succeeded", run.error
    expected = np.mean(logits.argmax(axis=1) == labels)
    assert run.outputs["accuracy"].shape == ()
    assert float(run.outputs["accuracy"]) == pytest.approx(expected, abs=1e-7) and 20 / 64 <= expected < 1
    np.testing.assert_array_equal(run.outputs["hit"], (logits.argmax(axis=1) == labels).astype(np.float32))
    sure = (logits > 1.0).astype(np.float32)
    np.testing.assert_array_equal(run.outputs["sure"], sure)
    np.testing.assert_array_equal(run.outputs["unsure"], (logits < sure).astype(np.float32))
    np.testing.assert_array_equal(run.outputs["is3"], (labels == 3).astype(np.float32))
    np.testing.assert_array_equal(run.outputs["kept"], np.where(sure != 0, logits, np.float32(0)))
    # where takes exactly three inputs, broadcasting like numpy's
    bad, text = manifest(tmp_path, "  z: {op: full, args: {shape: [2], value: 1}}\n  w: {op: where, inputs: [z, z]}\n",
                         "{w: w}", "bad.yaml")
    code, _, err = run_cli("validate", str(bad))
    assert code == 2 and err.strip() == (
        f"{bad}:{position(text, 'w: {op: where', '[z, z]')}: error: op 'where' takes 3 inputs, stage 'w' gives 2")


def test_the_comparisons_keep_numpys_broadcasting_in_a_run(tmp_path):
    np.save(tmp_path / "col.npy", np.arange(3, dtype=np.float32).reshape(3, 1))
    np.save(tmp_path / "row.npy", np.array([0.0, 1.0, 5.0, 2.0], np.float32))
    path, _ = manifest(tmp_path, (
        "  c: {op: load, args: {path: col.npy}}\n"
        "  r: {op: load, args: {path: row.npy}}\n"
        "  e: {op: eq, inputs: [c, r]}\n"
        "  l: {op: lt, inputs: [c, r]}\n"
        "  g: {op: gt, inputs: [c, r]}\n"
        "  w: {op: where, inputs: [g, c, r]}\n"), "{e: e, l: l, g: g, w: w}")
    run = hetflow.run(path, runs_dir=tmp_path / "runs")
    assert run.status == "succeeded", run.error
    c, r = np.load(tmp_path / "col.npy"), np.load(tmp_path / "row.npy")
    for name, expected in (("e", c == r), ("l", c < r), ("g", c > r)):
        assert run.outputs[name].shape == (3, 4)
        np.testing.assert_array_equal(run.outputs[name], expected.astype(np.float32))
    np.testing.assert_array_equal(run.outputs["w"], np.where(c > r, c, r))


def test_a_damaged_archive_member_is_found_even_when_only_its_header_is_needed(tmp_path):
    np.savez(tmp_path / "good.npz", x=np.arange(1000, dtype=np.float32))
    raw = bytearray((tmp_path / "good.npz").read_bytes())
    with zipfile.ZipFile(tmp_path / "good.npz") as z:
        info = z.getinfo("x.npy")
    raw[info.header_offset + 200] ^= 0xFF
    (tmp_path / "damaged.npz").write_bytes(bytes(raw))
    from hetflow.executors.ops import read_array

    assert read_array(str(tmp_path / "good.npz"), "x", header=True) == ((1000,), np.dtype(np.float32))
    with pytest.raises(ValueError, match="damaged.npz does not parse as .npz: BadZipFile: Bad CRC-32"):
        read_array(str(tmp_path / "damaged.npz"), "x", header=True)
