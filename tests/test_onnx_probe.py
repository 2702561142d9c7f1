"""``hetflow import onnx`` against the findings of an outside probe: each model gave wrong numbers, ran code its
file name carried, crashed, or was refused, and here gives onnxruntime's (or ONNX's reference's) result or a
clean refusal naming the node (exit 2, nothing written)."""

from __future__ import annotations

import ast
import io
import os

import numpy as np
import pytest
import yaml

onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install -e .[dev])")

import hetflow  # noqa: E402
from hetflow.engine.cli import main  # noqa: E402

from onnx import TensorProto as T, helper as h, numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

vi = h.make_tensor_value_info


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _save(path, nodes, inputs, outputs, inits=(), opset=17, **graph) -> str:
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits), **graph)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 19 else 9
    onnx.save(m, str(path))
    return str(path)


def _import_and_run(tmp_path, model: str, feeds: dict, *extra: str) -> dict:
    out = tmp_path / "out"
    code, _, err = _cli("import", "onnx", model, "-o", str(out), *extra)
    assert code == 0, err
    manifest = next(out.glob("*.yaml"))
    run = hetflow.run(manifest, inputs=feeds, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.failures
    return {k: np.asarray(v) for k, v in run.outputs.items()}


def _loop(x_is_constant: bool) -> tuple[list, list, list]:
    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Add", ["acc_in", "x"], ["acc_out"])], "body",
                        [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("acc_in", T.FLOAT, [2, 3])],
                        [vi("c_out", T.BOOL, []), vi("acc_out", T.FLOAT, [2, 3])])
    inits = [nh.from_array(np.array(3, np.int64), "M"), nh.from_array(np.zeros((2, 3), np.float32), "z")]
    nodes = [h.make_node("Loop", ["M", "", "z"], ["y"], body=body, name="loop")]
    if x_is_constant:
        inits.append(nh.from_array(np.full((2, 3), 10.0, np.float32), "x"))
        nodes.append(h.make_node("Add", ["y", "u"], ["v"]))
        return nodes, [vi("u", T.FLOAT, [2, 3])], inits
    return nodes, [vi("x", T.FLOAT, [2, 3])], inits


def test_a_loop_whose_body_reads_a_runtime_tensor_is_not_folded_to_its_initial_value(tmp_path):
    """The Loop's body adds graph input x; the evaluator, given only M and z, returned z (zeros) unchanged, and
    that was written as a weight."""
    nodes, inputs, inits = _loop(x_is_constant=False)
    model = _save(tmp_path / "loop.onnx", nodes, inputs, [vi("y", T.FLOAT, [2, 3])], inits)
    code, out, err = _cli("import", "onnx", model, "-o", str(tmp_path / "out"))
    assert (code, out) == (2, "") and "  Loop x1: no hetflow op: loop\n" in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_loop_whose_body_reads_an_outer_initializer_folds_with_it(tmp_path):
    nodes, inputs, inits = _loop(x_is_constant=True)
    model = _save(tmp_path / "loop.onnx", nodes, inputs, [vi("v", T.FLOAT, [2, 3])], inits)
    u = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = _import_and_run(tmp_path, model, {"u": u})["v"]
    assert got.tolist() == (u + 30.0).tolist()


def test_outputs_are_matched_by_their_position_where_one_is_omitted(tmp_path):
    """LayerNormalization ["y", "", "isd"] bound the Mean stage to isd; Split ["", "b"] wrote sizes [2] for an
    axis of 3, a manifest hetflow then refused."""
    x = np.array([[1, 2, 6], [0, 4, 8]], np.float32)
    ln = _save(tmp_path / "ln.onnx", [h.make_node("LayerNormalization", ["x", "s"], ["y", "", "isd"], axis=-1)],
               [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [2, 3]), vi("isd", T.FLOAT, [2, 1])],
               [nh.from_array(np.ones(3, np.float32), "s")])
    want = ReferenceEvaluator(ln).run(None, {"x": x})
    got = _import_and_run(tmp_path / "a", ln, {"x": x})
    np.testing.assert_allclose(got["isd"], want[1], rtol=1e-5)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-6)

    for opset, split in ((11, {"split": [1, 2]}), (18, {"num_outputs": 2})):
        nodes = [h.make_node("Split", ["x"], ["", "b"], axis=1, **split)]
        width = 2 if opset == 11 else 1
        model = _save(tmp_path / f"split{opset}.onnx", nodes, [vi("x", T.FLOAT, [2, 3])],
                      [vi("b", T.FLOAT, [2, width])], opset=opset)
        got = _import_and_run(tmp_path / f"s{opset}", model, {"x": x})["b"]
        assert got.tolist() == ReferenceEvaluator(model).run(None, {"x": x})[0].tolist(), opset


def _unary(op: str, path) -> str:
    return _save(path, [h.make_node(op, ["x"], ["y"])], [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2])])


def test_a_file_name_with_a_line_break_adds_no_line_to_the_manifest(tmp_path, monkeypatch):
    """``m\\nplugins: [pwn.py]\\n#.onnx`` wrote a ``plugins:`` line, and validate imported pwn.py."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pwn.py").write_text("open('PWNED', 'w').write('plugin ran')\n")
    name = "m\nplugins: [pwn.py]\n#\u2028.onnx"
    _unary("Relu", tmp_path / name)
    code, _, err = _cli("import", "onnx", name, "-o", ".")
    assert code == 0, err
    text = (tmp_path / "m_plugins_pwn.py.yaml").read_text()
    doc = yaml.safe_load(text)
    assert "plugins" not in doc and doc["description"] == f"ONNX model {name}"
    assert text.splitlines()[0] == ('# Imported from "m\\nplugins: [pwn.py]\\n#\\u2028.onnx" by `hetflow import '
                                    f"onnx` (hetflow {hetflow.__version__}):")
    assert _cli("validate", "m_plugins_pwn.py.yaml")[0] == 0
    assert not (tmp_path / "PWNED").exists()


def test_strings_of_the_model_in_the_stub_are_literals_not_code(tmp_path, monkeypatch):
    """A file name with ``\"\"\"`` ended the stub's docstring, and the rest of it ran on validate; op types and node
    names of another domain are the model's to choose too."""
    monkeypatch.chdir(tmp_path)
    name = 'x"""+__import__("os").system("touch PWNED")+""".onnx'
    op_type = 'Foo"""\n__import__("os").system("touch PWNED2")#'
    node = h.make_node(op_type, ["x"], ["t"], domain="com.example", name="n\"\"\"'\n")
    g = h.make_graph([node, h.make_node("Cos", ["t"], ["y"], name="cos")], "g", [vi("x", T.FLOAT, [2])],
                     [vi("y", T.FLOAT, [2])], value_info=[vi("t", T.FLOAT, [2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 1)])
    m.ir_version = 8
    onnx.save(m, name)
    code, _, err = _cli("import", "onnx", name, "-o", ".", "--allow-missing")
    assert code == 0, err
    stub = next(tmp_path.glob("*_missing.py"))
    tree = ast.parse(stub.read_text())
    kinds = [type(s).__name__ for s in tree.body]
    assert kinds == ["Expr", "ImportFrom", "Assign", "FunctionDef"] + ["Assign", "FunctionDef"] * 2, kinds
    assert ast.literal_eval(tree.body[2].value) == name
    ops = sorted(ast.literal_eval(f.decorator_list[0].args[0]) for f in tree.body if isinstance(f, ast.FunctionDef)
                 and f.decorator_list)
    assert ops == sorted(["onnx.Cos", 'onnx.Foo______import____os___system__touch_PWNED2___'])
    tables = [ast.literal_eval(s.value) for s in tree.body if isinstance(s, ast.Assign) and s.targets[0].id != "MODEL"]
    assert {"n\"\"\"'\n": [((2,), "fp32")]} in tables
    assert _cli("validate", next(tmp_path.glob("*.yaml")).name)[0] == 0
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()


@pytest.mark.parametrize("target,low", [(T.INT8, -128), (T.INT4, -8)])
def test_quantize_linear_saturates_at_the_types_own_range(tmp_path, target, low):
    """hetflow's quantize saturates symmetrically: -300 became -127 (int4: -7), where ONNX gives -128 (-8)."""
    x = np.array([-300, -127.5, -7.5, 0.5, 1.5, 300], np.float32)
    zero = nh.from_array(np.array(0, np.int8), "zp") if target == T.INT8 else h.make_tensor("zp", T.INT4, [], [0])
    model = _save(tmp_path / "q.onnx", [h.make_node("QuantizeLinear", ["x", "sc", "zp"], ["y"])],
                  [vi("x", T.FLOAT, [6])], [vi("y", target, [6])],
                  [nh.from_array(np.array(1.0, np.float32), "sc"), zero], opset=21)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0].astype(np.int64)
    got = _import_and_run(tmp_path, model, {"x": x})["y"].astype(np.int64)
    assert got.tolist() == want.tolist() and got.min() == low


@pytest.mark.parametrize("op,attrs,second,out", [
    ("Reshape", {}, vi("s", T.INT64, [2]), [3, 2]),
    ("Unsqueeze", {}, vi("s", T.INT64, [1]), [1, 2, 3]),
    ("Split", {"axis": 1}, vi("s", T.INT64, [1]), [2, 3]),
])
def test_a_shape_given_at_run_time_is_refused_not_ignored(tmp_path, op, attrs, second, out):
    """The manifest wrote the declared output shape, and the run took the runtime shape input and ignored it."""
    model = _save(tmp_path / "r.onnx", [h.make_node(op, ["x", "s"], ["y"], name="the_node", **attrs)],
                  [vi("x", T.FLOAT, [2, 3]), second], [vi("y", T.FLOAT, out)])
    code, out_text, err = _cli("import", "onnx", model, "-o", str(tmp_path / "out"))
    assert (code, out_text) == (2, ""), err
    assert (f"  {op} x1: input 1 ('s') is computed at run time, and hetflow takes it as an argument: "
            "the_node\n") in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_the_exporters_flatten_pattern_imports_at_every_opset(tmp_path, opset):
    """x.reshape(x.shape[0], -1): inference's data propagation stops short at opsets 11 and 13, and the Reshape
    was refused for an output with no static shape, although its shape folds to a constant."""
    nodes = [h.make_node("Shape", ["x"], ["sh"]), h.make_node("Gather", ["sh", "zero"], ["b"], axis=0),
             h.make_node("Unsqueeze", ["b", "ax0"] if opset >= 13 else ["b"], ["bu"],
                         **({} if opset >= 13 else {"axes": [0]})),
             h.make_node("Concat", ["bu", "m1"], ["ns"], axis=0), h.make_node("Reshape", ["x", "ns"], ["y"])]
    inits = [nh.from_array(np.array(0, np.int64), "zero"), nh.from_array(np.array([-1], np.int64), "m1")]
    if opset >= 13:
        inits.append(nh.from_array(np.array([0], np.int64), "ax0"))
    model = _save(tmp_path / "flat.onnx", nodes, [vi("x", T.FLOAT, [2, 3, 4])], [vi("y", T.FLOAT, ["a", "b"])], inits,
                  opset=opset)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert _import_and_run(tmp_path, model, {"x": x})["y"].tolist() == x.reshape(2, -1).tolist()


def test_sparse_constants_and_initializers_are_read_as_dense(tmp_path):
    def sparse(name):
        return h.make_sparse_tensor(nh.from_array(np.array([5., 6.], np.float32), name),
                                    nh.from_array(np.array([1, 4], np.int64), "idx"), [2, 3])

    dense = np.array([[0, 5, 0], [0, 6, 0]], np.float32)
    x = np.ones((2, 3), np.float32)
    const = _save(tmp_path / "c.onnx", [h.make_node("Constant", [], ["c"], sparse_value=sparse("v")),
                                        h.make_node("Add", ["x", "c"], ["y"])], [vi("x", T.FLOAT, [2, 3])],
                  [vi("y", T.FLOAT, [2, 3])])
    assert _import_and_run(tmp_path / "c", const, {"x": x})["y"].tolist() == (x + dense).tolist()
    init = _save(tmp_path / "i.onnx", [h.make_node("Add", ["x", "w"], ["y"])], [vi("x", T.FLOAT, [2, 3])],
                 [vi("y", T.FLOAT, [2, 3])], sparse_initializer=[sparse("w")])
    assert _import_and_run(tmp_path / "i", init, {"x": x})["y"].tolist() == (x + dense).tolist()


def test_an_output_folder_below_a_file_is_bad_input(tmp_path):
    model = _unary("Relu", tmp_path / "m.onnx")
    (tmp_path / "afile").write_text("mine")
    code, out, err = _cli("import", "onnx", model, "-o", str(tmp_path / "afile" / "sub"))
    assert (code, out) == (2, "")
    assert err == f"hetflow: error: -o {tmp_path / 'afile' / 'sub'}: {tmp_path / 'afile'} is not a folder\n"


def test_an_initializer_named_like_safetensors_own_header_is_stored_under_another_key(tmp_path):
    model = _save(tmp_path / "meta.onnx", [h.make_node("Add", ["x", "__metadata__"], ["y"]),
                                           h.make_node("Add", ["y", "__metadata___"], ["z"])],
                  [vi("x", T.FLOAT, [2])], [vi("z", T.FLOAT, [2])],
                  [nh.from_array(np.ones(2, np.float32), "__metadata__"),
                   nh.from_array(np.full(2, 10, np.float32), "__metadata___")])
    got = _import_and_run(tmp_path, model, {"x": np.ones(2, np.float32)})["z"]
    assert got.tolist() == [12.0, 12.0]


def test_nodes_of_one_name_get_rows_of_their_own_in_the_stubs_shape_table(tmp_path):
    model = _save(tmp_path / "dup.onnx", [h.make_node("Cos", ["x"], ["a"], name="n"),
                                          h.make_node("Transpose", ["a"], ["t"]),
                                          h.make_node("Cos", ["t"], ["y"], name="n")],
                  [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [3, 2])])
    code, _, err = _cli("import", "onnx", model, "-o", str(tmp_path / "out"), "--allow-missing")
    assert code == 0, err
    stages = yaml.safe_load((tmp_path / "out" / "dup.yaml").read_text())["stages"]
    keys = [stages["n"]["args"]["node"], stages["n_2"]["args"]["node"]]
    tree = ast.parse((tmp_path / "out" / "dup_missing.py").read_text())
    table = next(ast.literal_eval(s.value) for s in tree.body if isinstance(s, ast.Assign)
                 and s.targets[0].id == "COS_SHAPES")
    assert keys[0] != keys[1] and [table[k] for k in keys] == [[((2, 3), "fp32")], [((3, 2), "fp32")]]


def test_a_model_with_external_data_is_checked_by_its_path(tmp_path, monkeypatch):
    """The checker and inference were given the model with its external data read in, which protobuf cannot
    serialize past 2 GB; every tensor is external here, the Reshape's shape too, which inference needs."""
    from onnx.external_data_helper import convert_model_to_external_data

    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Reshape", ["m", "s"], ["y"])], "g",
                     [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [4])],
                     [nh.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "w"),
                      nh.from_array(np.array([4], np.int64), "s")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location="ext.bin", size_threshold=0)
    onnx.save(m, str(tmp_path / "ext.onnx"))
    checked = []
    real = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model",
                        lambda model, *a, **k: (checked.append(model), real(model, *a, **k)))
    x = np.ones((2, 3), np.float32)
    got = _import_and_run(tmp_path, str(tmp_path / "ext.onnx"), {"x": x})["y"]
    assert checked == [str(tmp_path / "ext.onnx")]
    assert got.tolist() == (x @ np.arange(6, dtype=np.float32).reshape(3, 2)).reshape(-1).tolist()


def test_inference_dropout_a_node_no_output_needs_and_local_functions_import(tmp_path):
    """Dropout (an identity at inference) was refused; a node that feeds no graph output blocked the import when it
    had no hetflow op; a model's own functions were refused as an unknown domain."""
    x = vi("x", T.FLOAT, [2, 3])
    nodes = [h.make_node("Dropout", ["x"], ["d", "mask"]),
             h.make_node("Cos", ["x"], ["unused"]),  # hetflow has no Cos; nothing reads it
             h.make_node("Twice", ["d"], ["y"], domain="lab.local")]
    twice = h.make_function("lab.local", "Twice", ["a"], ["b"], [h.make_node("Add", ["a", "a"], ["b"])],
                            [h.make_opsetid("", 17)])
    g = h.make_graph(nodes, "g", [x], [vi("y", T.FLOAT, [2, 3]), vi("mask", T.BOOL, [2, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("lab.local", 1)], functions=[twice])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    u = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = _import_and_run(tmp_path, str(tmp_path / "m.onnx"), {"x": u})
    expected = ReferenceEvaluator(m).run(None, {"x": u})
    assert got["y"].tolist() == expected[0].tolist() == (u * 2).tolist()
    assert got["mask"].tolist() == expected[1].tolist() == [[True] * 3] * 2
    text = next((tmp_path / "out").glob("*.yaml")).read_text()
    assert "# 1 nodes feed no graph output and were left out." in text
    # in training, Dropout draws a mask: refused, saying so
    nodes[0] = h.make_node("Dropout", ["x", "r", "t"], ["d"])
    inits = [nh.from_array(np.array(0.3, np.float32), "r"), nh.from_array(np.array(True), "t")]
    model = _save(tmp_path / "train.onnx", nodes[:1], [x], [vi("d", T.FLOAT, [2, 3])], inits)
    code, _, err = _cli("import", "onnx", model, "-o", str(tmp_path / "train"))
    assert code == 2 and "training_mode is true: a random mask" in err, err
