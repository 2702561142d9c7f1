"""``hetflow import onnx``: a GPT-2-style decoder imported, planned and run as any manifest, against onnxruntime.

The model (``tests/onnxgpt2.py``) is written node by node as exporters
write it: 2 layers, d_model 64, 4 heads, seq 16, random weights. The
imported manifest runs on CPU, then split across two executors (a second
CPU one, and Vulkan where wgpu finds an adapter); its logits must be
onnxruntime's within fp32 rtol 1e-4. A model with ops hetflow lacks is
refused by the CLI with every such node listed (exit 2, nothing written),
or imported with a plugin stub under ``--allow-missing``.
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest
import yaml

onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install -e .[dev])")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install -e .[dev]): "
                                                "it computes the reference logits")

sys.path.insert(0, os.path.dirname(__file__))

import onnxcases  # noqa: E402
import onnxgpt2  # noqa: E402

import hetflow  # noqa: E402
from hetflow.engine.importers import onnxops  # noqa: E402
from hetflow.engine.cli import main  # noqa: E402
from hetflow.engine.importers.onnximport import OnnxImportError, import_onnx  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """(model path, imported manifest path, input ids, onnxruntime's logits)."""
    folder = tmp_path_factory.mktemp("gpt2")
    model = folder / "gpt2.onnx"
    onnx.save(onnxgpt2.gpt2(layers=2, d_model=64, heads=4, seq=16), str(model))
    code, out, err = _cli("import", "onnx", str(model), "-o", str(folder / "imported"))
    assert code == 0, err
    manifest = folder / "imported" / "gpt2.yaml"
    assert out.strip() == str(manifest)
    ids = np.random.default_rng(1).integers(0, 256, (1, 16)).astype(np.int64)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return model, manifest, ids, session.run(None, {"input_ids": ids})[0]


def test_the_conformance_cases_use_the_importers_table():
    assert onnxcases.TRANSLATORS is onnxops.TRANSLATORS


def test_the_manifest_keeps_onnx_names_and_says_where_each_stage_came_from(gpt2):
    _, manifest, _, _ = gpt2
    doc = yaml.safe_load(manifest.read_text())
    stages = doc["stages"]
    assert doc["executors"] == {"cpu": {"vendor": "cpu"}}
    assert doc["outputs"] == {"logits": "lm_head_MatMul"}
    assert stages["input_ids"] == {"op": "input", "args": {"shape": [1, 16], "dtype": "int64"}, "dtype": "int64",
                                   "description": 'ONNX graph input "input_ids"'}
    assert stages["wte_weight"]["op"] == "load"
    assert stages["wte_weight"]["args"] == {"path": "gpt2.safetensors", "key": "wte.weight"}
    assert stages["h_0_attn_MatMul"]["description"] == 'ONNX MatMul node "/h.0/attn/MatMul" (ai.onnx, opset 18)'
    # one stage per output of Split; the scalar divisor folded into div's value
    assert [stages[f"h_0_attn_Split_{k}"]["args"]["index"] for k in range(3)] == [0, 1, 2]
    assert stages["h_0_attn_Div"]["args"] == {"value": 4.0}      # sqrt of the head size, 16
    assert stages["h_1_mlp_act_Tanh"]["op"] == "tanh" and stages["h_0_mlp_act_Erf"]["op"] == "erf"
    # Transpose of the tied embedding computes from constants: folded at import, loaded as a weight
    assert stages["lm_head_Transpose_output_0"]["op"] == "load"
    assert all("description" in s for s in stages.values())
    hetflow.validate(manifest)


def test_the_imported_decoder_gives_onnxruntimes_logits_and_caches(gpt2, tmp_path):
    _, manifest, ids, want = gpt2
    runs = tmp_path / "runs"
    first = hetflow.run(manifest, runs_dir=runs, inputs={"input_ids": ids})
    assert first.status == "succeeded", first.failures
    got = first.outputs["logits"]
    assert got.shape == want.shape == (1, 16, 256) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    again = hetflow.run(manifest, runs_dir=runs, inputs={"input_ids": ids})
    assert again.status == "succeeded"
    assert np.array_equal(again.outputs["logits"], got)
    assert first.record["cache"]["hits"] == []
    assert again.record["cache"]["hits"] == list(again.record["cache"]["keys"]), "every partition from the cache"


def _split(manifest, second: dict, stages_on_second) -> str:
    """A copy of the imported manifest with ``second`` as executor ``b`` and the stages named pinned there."""
    doc = yaml.safe_load(manifest.read_text())
    doc["executors"]["b"] = second
    for sid in stages_on_second:
        doc["stages"][sid]["executor"] = "b"
    for sid, spec in doc["stages"].items():
        spec.setdefault("executor", "cpu")
    path = manifest.parent / f"split_{second['vendor']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("vendor", ["cpu", "vulkan"])
def test_the_decoder_split_across_two_executors_gives_the_same_logits(gpt2, tmp_path, vendor):
    _, manifest, ids, want = gpt2
    if vendor == "vulkan":
        from hetflow.executors import probe
        from hetflow.executors.base import Vendor

        offer = probe(Vendor.vulkan)
        if not offer.available:
            pytest.skip(f"vulkan executor unavailable here: {offer.reason}")
    from hetflow.executors.ops import REGISTRY

    stages = list(yaml.safe_load(manifest.read_text())["stages"].items())
    # the second half of the graph: layer 1 and the head, where the executor runs the op
    later = [sid for sid, spec in stages[len(stages) // 2:] if REGISTRY[spec["op"]].runs_on(vendor)]
    path = _split(manifest, {"vendor": vendor}, later)
    plan = hetflow.plan(path, inputs={"input_ids": ids}, runs_dir=tmp_path / "runs")
    executors = {n["executor"] for n in plan.to_json()["nodes"].values()}
    assert executors == {"cpu", "b"}
    assert plan.to_json()["bridges"], "a graph split across executors crosses at least one bridge"
    r = hetflow.run(path, runs_dir=tmp_path / "runs", inputs={"input_ids": ids})
    assert r.status == "succeeded", r.failures
    np.testing.assert_allclose(r.outputs["logits"], want, rtol=RTOL, atol=ATOL)


def _model_with_missing_ops(opset: int = 18):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Cos", ["x"], ["c1"], name="/block/Cos"),
             helper.make_node("Relu", ["c1"], ["r"], name="/block/Relu"),
             helper.make_node("Cos", ["r"], ["c2"], name="/block/Cos_1"),
             helper.make_node("Softmax", ["c2"], ["s"], name="/block/Softmax", axis=0),
             helper.make_node("TopK", ["s", "k"], ["values", "indices"], name="/head/TopK", axis=-1)]
    graph = helper.make_graph(nodes, "missing", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("values", TensorProto.FLOAT, [4, 3]),
                               helper.make_tensor_value_info("indices", TensorProto.INT64, [4, 3])],
                              initializer=[onnx.numpy_helper.from_array(np.array([3], np.int64), "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def test_a_model_with_ops_hetflow_lacks_is_refused_with_every_one_listed(tmp_path):
    model = tmp_path / "partial.onnx"
    onnx.save(_model_with_missing_ops(), str(model))
    out_dir = tmp_path / "out"
    code, out, err = _cli("import", "onnx", str(model), "-o", str(out_dir))
    assert code == 2
    assert out == ""
    assert err == (
        "hetflow: error: partial.onnx: 4 of 5 nodes have no hetflow op, in 3 groups (nothing written; "
        "--allow-missing writes the manifest with a plugin stub of these ops to fill in):\n"
        "  Cos x2: no hetflow op: /block/Cos, /block/Cos_1\n"
        "  Softmax x1: opset 11 Softmax over axes 0..1 flattened (hetflow's softmax is along one axis): "
        "/block/Softmax\n"
        "  TopK x1: no hetflow op: /head/TopK\n")
    assert "Traceback" not in err
    assert not out_dir.exists()
    with pytest.raises(OnnxImportError) as e:
        import_onnx(model, out_dir)
    assert sorted(m.op_type for m in e.value.missing) == ["Cos", "Cos", "Softmax", "TopK"]


def test_allow_missing_writes_a_stub_plugin_and_the_manifest_validates(tmp_path):
    model = tmp_path / "partial.onnx"
    onnx.save(_model_with_missing_ops(), str(model))
    out_dir = tmp_path / "out"
    code, out, err = _cli("import", "onnx", str(model), "-o", str(out_dir), "--allow-missing")
    assert code == 0, err
    assert sorted(os.listdir(out_dir)) == ["partial.safetensors", "partial.yaml", "partial_missing.py"]
    doc = yaml.safe_load((out_dir / "partial.yaml").read_text())
    assert doc["plugins"] == ["partial_missing.py"]
    stages = doc["stages"]
    assert stages["block_Cos"]["op"] == "onnx.Cos" and stages["block_Relu"]["op"] == "relu"
    assert stages["head_TopK_1"] == {"op": "onnx.TopK", "inputs": ["block_Softmax", "k"],
                                     "args": {"node": "/head/TopK", "output": 1}, "dtype": "int64",
                                     "description": 'ONNX TopK node "/head/TopK" (ai.onnx, opset 11) '
                                                    "(missing: fill in the stub op)"}
    assert doc["outputs"] == {"values": "head_TopK_0", "indices": "head_TopK_1"}
    hetflow.validate(out_dir / "partial.yaml")
    # the stub runs as far as its first op, which says what to write and where
    r = hetflow.run(out_dir / "partial.yaml", runs_dir=tmp_path / "runs",
                    inputs={"x": np.ones((4, 8), np.float32)})
    assert r.status == "failed"
    assert any("ONNX Cos (node '/block/Cos') has no hetflow op yet" in f.message for f in r.failures), r.failures


def test_a_node_no_stub_can_stand_in_for_is_named_with_why_where_its_output_had_no_stage(tmp_path):
    """A node of another domain, whose outputs ONNX's inference knows nothing of, crashed the import with a KeyError;
    a Cast to UINT4 that is a graph output was refused as "tensor 'Z' has no stage", with or without
    --allow-missing, which could not stub it either; a sequence input was taken for one of no fixed size."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])

    def save(name: str, nodes: list, inputs: list, outputs: list, opsets: list, value_info=()) -> str:
        graph = helper.make_graph(nodes, name, inputs, outputs, value_info=list(value_info))
        path = tmp_path / f"{name}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]), str(path))
        return str(path)

    custom = [helper.make_node("Foo", ["X"], ["T"], domain="com.example", name="foo"),
              helper.make_node("Relu", ["T"], ["Y"], name="relu")]
    unknown = save("unknown", custom, [x], [y], [("", 17), ("com.example", 1)])
    for extra in ((), ("--allow-missing",)):
        code, out, err = _cli("import", "onnx", unknown, "-o", str(tmp_path / "out"), *extra)
        assert (code, out) == (2, ""), err
        assert err.startswith("hetflow: error: unknown.onnx: 2 of 2 nodes have no hetflow op, in 2 groups (nothing "
                              "written; --allow-missing cannot write it either:"), err
        assert "  Foo (com.example) x1: domain com.example, which hetflow has no ops of: foo\n" in err
        assert "    foo (Foo): output 'T' has no static shape after ONNX's shape inference\n" in err
        assert err.endswith("  graph output 'Y': tensor 'Y' comes from Relu node relu, which has neither a hetflow "
                            "op nor a stub\n"), err
        assert not (tmp_path / "out").exists()
    # where the model says what the node gives, a stub stands in for it and the rest translates
    declared = save("declared", custom, [x], [y], [("", 17), ("com.example", 1)],
                    [helper.make_tensor_value_info("T", TensorProto.FLOAT, [2, 3])])
    code, _, err = _cli("import", "onnx", declared, "-o", str(tmp_path / "declared"), "--allow-missing")
    assert code == 0, err
    stages = yaml.safe_load((tmp_path / "declared" / "declared.yaml").read_text())["stages"]
    assert stages["foo"]["op"] == "onnx.Foo" and stages["relu"] == {**stages["relu"], "op": "relu", "inputs": ["foo"]}

    z = helper.make_tensor_value_info("Z", TensorProto.UINT4, [2, 3])
    narrow = save("narrow", [helper.make_node("Cast", ["X"], ["Z"], to=TensorProto.UINT4, name="c")], [x], [z],
                  [("", 21)])
    code, _, err = _cli("import", "onnx", narrow, "-o", str(tmp_path / "out"), "--allow-missing")
    assert code == 2 and "  Cast x1: output 0 ('Z') of type UINT4, which hetflow lacks: c\n" in err, err
    assert "    c (Cast): output 'Z' is of type UINT4, which hetflow lacks\n" in err and "no stage" not in err

    s = helper.make_tensor_sequence_value_info("S", TensorProto.FLOAT, [2, 3])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [])
    sequence = save("sequence", [helper.make_node("SequenceAt", ["S", "i"], ["Y"])], [s, i], [y], [("", 17)])
    code, _, err = _cli("import", "onnx", sequence, "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"hetflow: error: {sequence}: graph input 'S' is a sequence, which hetflow lacks: a "
                              "stage's inputs and outputs are tensors\n")


def test_bad_models_are_bad_input_without_a_traceback(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf")
    code, out, err = _cli("import", "onnx", str(junk), "-o", str(tmp_path / "out"))
    assert code == 2 and "junk.onnx: not a readable ONNX model" in err and "Traceback" not in err
    code, _, err = _cli("import", "onnx", str(tmp_path / "absent.onnx"), "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"hetflow: error: {tmp_path / 'absent.onnx'}: no such file\n")

    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "dyn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    dynamic = tmp_path / "dynamic.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(dynamic))
    code, _, err = _cli("import", "onnx", str(dynamic), "-o", str(tmp_path / "out"))
    assert code == 2 and f"{dynamic}: graph inputs without a fixed size in every dimension: x [batch, 8]" in err
    assert not (tmp_path / "out").exists()


def test_a_model_whose_declared_shapes_its_nodes_contradict_is_refused_not_imported_as_declared(tmp_path):
    """A Reshape to [3, 2] whose graph output says [2, 3]: ONNX's lenient inference keeps the declared shape, and
    the import wrote a reshape to [2, 3], a model that computes something else; a size of -1, which some exporters
    write for an open dimension, was written into the manifest, which then failed to validate."""
    from onnx import TensorProto, helper

    def save(name: str, target: list[int], x_dims: list[int]) -> str:
        shape = helper.make_tensor("s", TensorProto.INT64, [2], vals=target)
        graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], name,
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=[shape])
        path = tmp_path / f"{name}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
        return str(path)

    out = tmp_path / "out"
    code, _, err = _cli("import", "onnx", save("contradicted", [3, 2], [2, 3]), "-o", str(out))
    assert code == 2 and "contradicted.onnx: ONNX's shape inference fails:" in err, err
    assert "Inferred shape and existing shape differ" in err and "Traceback" not in err
    code, _, err = _cli("import", "onnx", save("overflow", [2**40, 2**40], [2, 3]), "-o", str(out))
    assert code == 2 and "overflow.onnx: ONNX's shape inference fails:" in err, err
    code, _, err = _cli("import", "onnx", save("open", [2, 3], [-1, 3]), "-o", str(out))
    assert code == 2 and "graph inputs without a fixed size in every dimension: x [-1, 3]" in err, err
    assert not out.exists()
    code, _, err = _cli("import", "onnx", save("agreed", [2, 3], [3, 2]), "-o", str(out))
    assert code == 0, err


def test_graph_outputs_that_differ_only_by_case_become_outputs_that_do_not(tmp_path):
    # an output is a file OUTPUT.npy; Y.npy and y.npy would be one file where the file system ignores case
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("Y", "y", "y_2")]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["Y"]), helper.make_node("Neg", ["x"], ["y"]),
                               helper.make_node("Abs", ["x"], ["y_2"])], "cases", [x], outs)
    model = tmp_path / "cases.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    code, out, err = _cli("import", "onnx", str(model), "-o", str(tmp_path / "imported"))
    assert code == 0, err
    manifest = tmp_path / "imported" / "cases.yaml"
    names = list(yaml.safe_load(manifest.read_text())["outputs"])
    assert names[0] == "Y" and len({n.casefold() for n in names}) == 3, names
    assert _cli("validate", str(manifest))[0] == 0
    x_value = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    run = hetflow.run(manifest, inputs={"x": x_value}, runs_dir=tmp_path / "runs", cache=False)
    got = {name: run.outputs[name] for name in names}
    assert [got[n].tolist() for n in names] == [np.maximum(x_value, 0).tolist(), (-x_value).tolist(),
                                               np.abs(x_value).tolist()]


@pytest.mark.parametrize("vendor", ["cpu", "vulkan"])
def test_int8_arithmetic_and_casts_to_int8_and_int4_keep_onnxs_integer_rules(tmp_path, vendor):
    """ONNX's int8 wraps and its casts to int8 and int4 take floats toward zero and integers by their low bits;
    hetflow's own int8 rounds and saturates: 100 + 100 was 127, not -56, and a float 2.7 cast to int8 was 3."""
    from onnx import TensorProto as T, helper
    from onnx.reference import ReferenceEvaluator

    if vendor == "vulkan":
        from hetflow.executors import probe
        from hetflow.executors.base import Vendor

        offer = probe(Vendor.vulkan)
        if not offer.available:
            pytest.skip(f"vulkan executor unavailable here: {offer.reason}")
    values = {
        "a": (T.INT8, np.array([100, -100, 3, 64, -128, 127, 0, 12], np.int8)),
        "b": (T.INT8, np.array([100, -100, 5, 64, -1, 2, 7, -12], np.int8)),
        "f": (T.FLOAT, np.array([2.7, -2.7, 2.5, -9.0, 8.0, 15.0, 200.0, -0.5], np.float32)),
        "i": (T.INT32, np.array([200, -200, 127, 300, -129, 65535, 7, -8], np.int32)),
        "u": (T.UINT8, np.array([200, 255, 127, 128, 0, 1, 15, 16], np.uint8)),
    }
    nodes = [helper.make_node("Add", ["a", "b"], ["add"]), helper.make_node("Sub", ["a", "b"], ["sub"]),
             helper.make_node("Mul", ["a", "b"], ["mul"]), helper.make_node("Div", ["a", "b"], ["div"]),
             helper.make_node("Mod", ["a", "b"], ["mod"]), helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1),
             helper.make_node("Neg", ["a"], ["neg"]), helper.make_node("Abs", ["a"], ["abs"])]
    if vendor == "vulkan":  # Vulkan has no integer division or remainder: those stay on the CPU
        nodes = [n for n in nodes if n.op_type not in ("Div", "Mod")]
    outputs = {n.output[0]: T.INT8 for n in nodes}
    for source in ("f", "i", "u", "a"):
        for target, code in (("int8", T.INT8), ("int4", T.INT4)):
            if (source, target) == ("a", "int8"):
                continue
            nodes.append(helper.make_node("Cast", [source], [f"{source}_{target}"], to=code))
            outputs[f"{source}_{target}"] = code
    graph = helper.make_graph(nodes, "ints", [helper.make_tensor_value_info(k, t, [8]) for k, (t, _) in values.items()],
                              [helper.make_tensor_value_info(k, t, [8]) for k, t in outputs.items()])
    model = tmp_path / "ints.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(model))
    feeds = {k: v for k, (_, v) in values.items()}
    want = dict(zip(outputs, ReferenceEvaluator(str(model)).run(None, feeds)))
    code, _, err = _cli("import", "onnx", str(model), "-o", str(tmp_path / "imported"))
    assert code == 0, err
    manifest = tmp_path / "imported" / "ints.yaml"
    if vendor == "vulkan":
        manifest.write_text(manifest.read_text().replace("cpu: {vendor: cpu}", "cpu: {vendor: vulkan}"))
    run = hetflow.run(manifest, inputs=feeds, runs_dir=tmp_path / "runs", cache=False)
    assert {n["executor"] for n in run.record["nodes"].values()} == {"cpu"}
    for name in outputs:
        got = np.asarray(run.outputs[name]).astype(np.int64)
        assert got.tolist() == np.asarray(want[name]).astype(np.int64).tolist(), name
    assert want["add"].tolist()[:2] == [-56, 56] and want["f_int8"].tolist()[:2] == [2, -2]


def test_an_import_ended_by_sigterm_leaves_no_temporary_file_and_the_next_removes_those_a_sigkill_left(
        tmp_path, monkeypatch):
    """A SIGTERM during the weights' write ended the process with its temporary files left (up to the model's
    size); a SIGKILL's were never removed by a later import either."""
    import signal
    import time

    from onnx import TensorProto, helper, numpy_helper

    from hetflow.engine.importers import onnximport

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "m",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], [w])
    model, out = tmp_path / "m.onnx", tmp_path / "out"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    out.mkdir()
    killed, fresh = out / ".m.safetensors.k1ll3d", out / ".m.yaml.wr1t1ng"
    killed.write_bytes(b"\0" * 1000)
    fresh.write_text("another import's, under way")
    an_hour_ago = time.time() - 3600
    os.utime(killed, (an_hour_ago, an_hour_ago))
    real = onnximport._save_weights

    def terminated_while_saving(*args):
        real(*args)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(onnximport, "_save_weights", terminated_while_saving)
    code, _, err = _cli("import", "onnx", str(model), "-o", str(out))
    assert (code, err) == (143, "hetflow: interrupted by SIGTERM\n")
    assert sorted(p.name for p in out.iterdir()) == [fresh.name]  # its own gone, the SIGKILLed one's too
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    monkeypatch.undo()
    code, _, err = _cli("import", "onnx", str(model), "-o", str(out))
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == sorted([fresh.name, "m.safetensors", "m.yaml"])


def test_an_output_folder_that_is_a_file_is_bad_input(gpt2, tmp_path):
    model = gpt2[0]
    taken = tmp_path / "taken"
    taken.write_text("mine")
    code, out, err = _cli("import", "onnx", str(model), "-o", str(taken))
    assert (code, out) == (2, "") and f"-o {taken}: not a folder" in err and taken.read_text() == "mine"
