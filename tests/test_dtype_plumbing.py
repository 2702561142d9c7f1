"""The new dtypes through the contract (issue 28): inference, validation, inputs and outputs, placement, costs, users' ops.

Every manifest here runs through the same calls a user makes (the CLI's
``main``, ``hetflow.run``, the planner with a machine's offers); the
plugin ops are real modules written into the test's folder.
"""

import io
import json
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.engine import cli
from hetflow.engine.plan.costs import CostModel
from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan, render_text
from hetflow.executors import probe
from hetflow.executors.base import Dtype, Vendor
from hetflow.executors.probing import Offer

PLUGIN = '''
from hetflow import op


@op("plumb.ridge", dtypes=["fp32", "fp64"], shape=lambda x, y, **args: (x[1],))
def ridge(xp, x, y, *, lam: float = 0.5):
    """argmin_w |x w - y|^2 + lam |w|^2, solved in the inputs' precision."""
    return xp.linalg.solve(x.T @ x + lam * xp.eye(x.shape[1], dtype=x.dtype), x.T @ y)


@op("plumb.hash", dtypes=["int64", "int32"])
def hash_ids(xp, ids, *, mult: int = 2654435761):
    """Multiplicative hashing: wraps as 64-bit integers do."""
    return ids * mult + (ids >> 3)


@op("plumb.narrow", dtypes=["int32"], exact=True)
def narrow(xp, ids):
    return ids


@op("plumb.lookup", dtypes=["fp32", "fp64"], moves=True, shape=lambda table, ids: tuple(ids) + (table[1],),
    input_dtypes=lambda table, ids: None if ids in ("int16", "int32", "int64", "uint8") else
    f"the ids (its second input) must be an integer dtype, not {ids}")
def lookup(xp, table, ids):
    return table[ids]
'''


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


def write(folder, stages: str, outputs: str, executors: str = "{h: {vendor: cpu}}", name: str = "m.yaml",
          extra: str = ""):
    (folder / "plumbing_ops.py").write_text(PLUGIN)
    text = (f"version: 1\nname: plumbing\n{extra}plugins: [plumbing_ops.py]\nexecutors: {executors}\n"
            f"stages:\n{stages}outputs: {outputs}\n")
    path = folder / name
    path.write_text(text)
    return path, text


# -- the dtype a stage without dtype: gets ------------------------------------------------------


@pytest.mark.parametrize("order", ["file order", "out of order"])
def test_a_stage_without_dtype_takes_its_inputs_type_in_either_order(tmp_path, order):
    ids = np.array([1, 2**40, -7], np.int64)
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "x.npy", np.arange(6.0).reshape(3, 2))
    np.save(tmp_path / "y.npy", np.array([1.0, -2.0, 0.25]))
    lines = [
        "  ids: {op: load, args: {path: ids.npy}}\n",
        "  h: {op: plumb.hash, inputs: [ids]}\n",
        "  h2: {op: plumb.hash, inputs: [h]}\n",
        "  x: {op: load, args: {path: x.npy}, dtype: fp64}\n",
        "  y: {op: load, args: {path: y.npy}, dtype: fp64}\n",
        "  w: {op: plumb.ridge, inputs: [x, y]}\n",
        "  w2: {op: plumb.ridge, inputs: [x, y], dtype: fp32}\n",
    ]
    if order == "out of order":
        lines.reverse()  # every consumer above its producers: inferred once all are known
    path, _ = write(tmp_path, "".join(lines), "{h2: h2, w: w}")
    code, text, err = run_cli("plan", str(path), "--format", "json")
    assert code == 0, err
    nodes = json.loads(text)["nodes"]
    assert {n: nodes[n]["dtype"] for n in ("ids", "h", "h2", "x", "y", "w", "w2")} == {
        "ids": "int64", "h": "int64", "h2": "int64", "x": "fp64", "y": "fp64", "w": "fp64", "w2": "fp32"}
    assert nodes["h2"]["bytes"] == 24 and nodes["w"]["bytes"] == 16
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.error
    with np.errstate(over="ignore"):
        h = ids * np.int64(2654435761) + (ids >> 3)
        h2 = h * np.int64(2654435761) + (h >> 3)
    assert run.outputs["h2"].dtype == np.int64 and run.outputs["h2"].tolist() == h2.tolist()
    assert run.outputs["w"].dtype == np.float64


def test_a_dtype_the_inputs_make_but_the_op_lacks_is_an_error_naming_them(tmp_path):
    np.save(tmp_path / "ids.npy", np.array([1, 2], np.int64))
    path, text = write(tmp_path, "  n: {op: plumb.narrow, inputs: [ids]}\n  ids: {op: load, args: {path: ids.npy}}\n",
                       "{n: n}")
    code, _, err = run_cli("validate", str(path))
    assert code == 2 and err.strip() == (
        f"{path}:{position(text, 'n: {op', 'n:')}: error: stage 'n' names no dtype and its inputs 'ids' (int64) make it "
        "fp32, which op 'plumb.narrow' does not support (supported: int32); say dtype: on the stage")
    path.write_text(text.replace("inputs: [ids]}", "inputs: [ids], dtype: int32}"))
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.error
    assert run.outputs["n"].dtype == np.int32 and run.outputs["n"].tolist() == [1, 2]


def test_an_ops_rule_for_its_inputs_dtypes_is_checked_at_the_stages_inputs(tmp_path):
    np.save(tmp_path / "table.npy", np.arange(12.0).reshape(4, 3))
    np.save(tmp_path / "ids.npy", np.array([3, 0], np.int64))
    stages = ("  t: {op: load, args: {path: table.npy}}\n"
              "  bad: {op: plumb.lookup, inputs: [t, f]}\n"
              "  f: {op: load, args: {path: table.npy}}\n"
              "  ids: {op: load, args: {path: ids.npy}}\n"
              "  good: {op: plumb.lookup, inputs: [t, ids]}\n")
    path, text = write(tmp_path, stages, "{good: good}")
    code, _, err = run_cli("validate", str(path))
    assert code == 2 and "Traceback" not in err
    assert err.strip() == (
        f"{path}:{position(text, 'bad: {op', '[t, f]')}: error: stage 'bad' takes 't' (fp32), 'f' (fp32): op "
        "'plumb.lookup': the ids (its second input) must be an integer dtype, not fp32")
    path.write_text(text.replace("  bad: {op: plumb.lookup, inputs: [t, f]}\n", ""))
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.error
    np.testing.assert_array_equal(run.outputs["good"], np.arange(12.0, dtype=np.float32).reshape(4, 3)[[3, 0]])


# -- users' ops at fp64 and on integers ----------------------------------------------------------


def test_a_float64_plugin_op_solves_in_float64_and_its_output_stays_fp64(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((50, 4))
    y = x @ np.array([1.0, -2.0, 1e-9, 3.0]) + 1e-12 * rng.standard_normal(50)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    path, _ = write(tmp_path, ("  x: {op: load, args: {path: x.npy}, dtype: fp64}\n"
                               "  y: {op: load, args: {path: y.npy}, dtype: fp64}\n"
                               "  w: {op: plumb.ridge, inputs: [x, y], args: {lam: 0.25}}\n"
                               "  w32: {op: plumb.ridge, inputs: [x, y], args: {lam: 0.25}, dtype: fp32}\n"),
                    "{w: w, w32: w32}", executors="{a: {vendor: cpu}, b: {vendor: cpu}}")
    path.write_text(path.read_text().replace("dtype: fp64}\n  w:", "dtype: fp64, executor: a}\n  w:")
                    .replace("args: {lam: 0.25}}", "args: {lam: 0.25}, executor: b}"))
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.error
    want = np.linalg.solve(x.T @ x + 0.25 * np.eye(4), x.T @ y)
    assert run.outputs["w"].dtype == np.float64
    assert run.outputs["w"].tobytes() == want.tobytes()  # bit for bit, across a bridge from a to b
    assert run.outputs["w32"].dtype == np.float32 and run.outputs["w32"].tobytes() == want.astype(np.float32).tobytes()
    saved = np.load(Path(run.record_path).parent / run.record["outputs"]["w"]["file"])
    assert saved.dtype == np.float64 and saved.tobytes() == want.tobytes()


def test_an_integer_plugin_op_gets_its_inputs_as_they_are_and_wraps():
    from hetflow.executors import ops

    import importlib.util
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp())
    (folder / "plumbing_direct.py").write_text(PLUGIN.replace("plumb.", "plumbdirect."))
    spec = importlib.util.spec_from_file_location("plumbing_direct", folder / "plumbing_direct.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["plumbing_direct"] = module
    spec.loader.exec_module(module)
    op = ops.REGISTRY["plumbdirect.hash"]
    assert op.exact and not op.moves and not ops.REGISTRY["plumbdirect.ridge"].exact
    ids = np.array([2**62, -1, 12345], np.int64)
    out = ops.run(np, "plumbdirect.hash", [ids], {}, Dtype.int64)
    with np.errstate(over="ignore"):
        assert out.dtype == np.int64 and out.tolist() == (ids * np.int64(2654435761) + (ids >> 3)).tolist()
    # int32 ids stay int32 in the body (numpy's promotion with the Python int), then the stage's int32 wraps
    small = np.array([2**30, -3], np.int32)
    out = ops.run(np, "plumbdirect.hash", [small], {"mult": 5}, Dtype.int32)
    with np.errstate(over="ignore"):
        assert out.dtype == np.int32 and out.tolist() == (small * np.int32(5) + (small >> 3)).tolist()


# -- inputs, outputs and sources at the new dtypes ------------------------------------------------


def test_inputs_of_every_new_dtype_come_back_unconverted_in_python_and_on_disk(tmp_path):
    arrays = {
        Dtype.int16: np.array([-32768, 7, 32767], np.int16),
        Dtype.int32: np.array([[-2**31, 2**31 - 1]], np.int32),
        Dtype.int64: np.array([2**62 + 1, -1, 2**53 + 1], np.int64),
        Dtype.uint8: np.array([0, 128, 255], np.uint8),
        Dtype.bool: np.array([[True, False], [False, True]]),
        Dtype.fp64: np.array([0.1, 1 / 3, 1e300]),
    }
    stages = "".join(f"  {d.value}: {{op: input, args: {{shape: {list(a.shape)}, dtype: {d.value}}}, executor: a}}\n"
                     for d, a in arrays.items())
    # each also crosses a CPU -> CPU bridge into a stage that only moves it
    stages += "".join(f"  {d.value}_b: {{op: input, args: {{shape: {list(a.shape)}, dtype: {d.value}}}, executor: b}}\n"
                      for d, a in arrays.items())
    path, _ = write(tmp_path, stages, "{" + ", ".join(f"{d.value}: {d.value}" for d in arrays) + "}",
                    executors="{a: {vendor: cpu}, b: {vendor: cpu}}")
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False,
                      inputs={**{d.value: a for d, a in arrays.items()}, **{f"{d.value}_b": a for d, a in arrays.items()}})
    assert run.status == "succeeded", run.error
    record = run.record
    for d, a in arrays.items():
        got = run.outputs[d.value]
        assert got.dtype == a.dtype and got.tobytes() == a.tobytes(), d
        entry = record["outputs"][d.value]
        assert entry["dtype"] == d.value and entry["bytes"] == a.nbytes
        on_disk = np.load(tmp_path / "runs" / record["run_id"] / entry["file"])
        assert on_disk.dtype == a.dtype and on_disk.tobytes() == a.tobytes()  # plain numpy reads it back
        assert record["inputs"][d.value]["dtype"] == d.value
    # an array of another dtype than the stage declares is refused, not converted
    with pytest.raises(hetflow.UsageError, match="dtype int64 .numpy int64.; got shape .3. and numpy dtype int32"):
        hetflow.run(path, runs_dir=tmp_path / "runs", inputs={**{d.value: a for d, a in arrays.items()},
                                                             **{f"{d.value}_b": a for d, a in arrays.items()},
                                                             "int64": arrays[Dtype.int64].astype(np.int32)})


def test_sources_make_exact_integers_and_params_feed_their_dtype(tmp_path):
    path, _ = write(tmp_path, (
        "  z: {op: zeros, args: {shape: [2]}, dtype: '${dt}'}\n"
        "  o: {op: ones, args: {shape: [2]}, dtype: '${dt}'}\n"
        "  f: {op: full, args: {shape: [2], value: '${big}'}, dtype: '${dt}'}\n"
        "  r: {op: arange, args: {start: '${start}', stop: '${stop}'}, dtype: '${dt}'}\n"
        "  m: {op: full, args: {shape: [1], value: 1}, dtype: bool}\n"), "{z: z, o: o, f: f, r: r, m: m}",
        extra="params: {dt: int64, big: 9007199254740993, start: 16777216, stop: 16777220}\n")
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.error
    out = run.outputs
    assert out["z"].dtype == out["o"].dtype == out["f"].dtype == out["r"].dtype == np.int64
    assert out["z"].tolist() == [0, 0] and out["o"].tolist() == [1, 1]
    assert out["f"].tolist() == [2**53 + 1] * 2
    assert out["r"].tolist() == [2**24, 2**24 + 1, 2**24 + 2, 2**24 + 3]
    assert out["m"].dtype == np.bool_ and out["m"].tolist() == [True]
    # -p overrides reach both the dtype and the args
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False,
                      params={"dt": "int32", "start": -3, "stop": 0, "big": 2**31 - 1})
    assert run.status == "succeeded", run.error
    assert run.outputs["r"].dtype == np.int32 and run.outputs["r"].tolist() == [-3, -2, -1]
    assert run.outputs["f"].tolist() == [2**31 - 1] * 2
    code, _, err = run_cli("plan", str(path), "-p", "dt=int65")
    assert code == 2 and "must be one of" in err and "int64, uint8, bool, fp64" in err


# -- placement: a device must import what a bridge brings it ---------------------------------------


def no_64_bit_vulkan(vendor):
    """This machine's offers, the Vulkan device's as a device without 64-bit types declares them."""
    offer = probe(vendor)
    if vendor is Vendor.vulkan:
        return Offer(vendor, True, "a device without shaderInt64 or shaderFloat64", offer.devices,
                     tuple(d for d in Dtype if d not in (Dtype.int64, Dtype.fp64)), offer.ops)
    return offer


def test_a_stage_is_kept_off_an_executor_that_cannot_import_its_inputs(tmp_path):
    np.save(tmp_path / "ids.npy", np.arange(4, dtype=np.int64))
    path, text = write(tmp_path, ("  ids: {op: load, args: {path: ids.npy}, executor: h}\n"
                                  "  r: {op: relu, inputs: [ids], dtype: fp32}\n"),
                       "{r: r}", executors="{h: {vendor: cpu}, v: {vendor: vulkan}}")
    p = plan(compile_manifest(load(str(path))), no_64_bit_vulkan)
    shown = render_text(p)
    assert "on h" in next(line for line in shown.splitlines() if line.strip().startswith("r "))
    assert ("capability: only 'h' runs relu at fp32 with int64 inputs ('v' (vulkan) does not support int64)" in shown), shown
    # pinned there, it is an error at the stage's inputs naming the tensor and its dtype
    path.write_text(text.replace("dtype: fp32}", "dtype: fp32, executor: v}"))
    with pytest.raises(ManifestError) as info:
        plan(compile_manifest(load(str(path))), no_64_bit_vulkan)
    supported = ", ".join(d.value for d in Dtype if d not in (Dtype.int64, Dtype.fp64))
    assert str(info.value) == (
        f"{path}:{position(path.read_text(), 'r: {op', '[ids]')}: error: stage 'r' takes 'ids' at int64, which executor 'v' "
        f"(vulkan) cannot import (supported: {supported}); cast it to a supported dtype first, or run the stage elsewhere")


def test_the_cost_model_reads_and_writes_each_dtype_at_its_width():
    model = CostModel()
    shape = (1000,)
    for dtype, read, written in ((Dtype.int64, 8, 8), (Dtype.uint8, 1, 1), (Dtype.fp64, 8, 8), (Dtype.bool, 4, 1),
                                 (Dtype.fp16, 4, 2), (Dtype.int32, 4, 4)):
        w = model.work("add", [shape, shape], shape, dtype)
        assert w.bytes == 1000 * (2 * read + written), dtype
    assert model.work("matmul", [(8, 16), (16, 4)], (8, 4), Dtype.fp64).bytes == 8 * (128 + 64) + 8 * 32
