"""``hetflow import onnx`` of models at the edges of what ONNX allows: a Constant whose tensor lives in an external
file, an opset newer than the installed onnx knows, a graph with no outputs. Each is imported as ONNX means it or
refused with its reason (exit 2, nothing written)."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install -e .[dev])")

from onnx import TensorProto, helper  # noqa: E402

from hetflow.engine.cli import main  # noqa: E402


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _vector(name: str):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [4])


def _save(path, nodes, outputs, opset: int = 18, initializer=()) -> str:
    graph = helper.make_graph(nodes, path.stem, [_vector("x")], outputs, initializer=list(initializer))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path.write_bytes(model.SerializeToString())
    return str(path)


def _external(name: str, location: str) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def test_a_constant_whose_tensor_is_external_data_beside_the_model_is_read_from_there(tmp_path):
    # onnx.save_model(..., save_as_external_data=True, convert_attribute=True) moves a Constant's tensor out too
    (tmp_path / "w.bin").write_bytes(np.array([1, 2, 3, 4], np.float32).tobytes())
    model = _save(tmp_path / "const.onnx", [helper.make_node("Constant", [], ["W"], value=_external("W", "w.bin")),
                                            helper.make_node("Add", ["x", "W"], ["y"], name="add")], [_vector("y")])
    out = tmp_path / "out"
    code, _, err = _cli("import", "onnx", model, "-o", str(out))
    assert code == 0, err
    from safetensors.numpy import load_file

    assert load_file(str(out / "const.safetensors"))["W"].tolist() == [1, 2, 3, 4]
    # and one that points outside the model's folder is still refused unread
    (tmp_path / "inner").mkdir()
    outside = _save(tmp_path / "inner" / "outside.onnx",
                    [helper.make_node("Constant", [], ["W"], value=_external("W", "../w.bin")),
                     helper.make_node("Add", ["x", "W"], ["y"], name="add")], [_vector("y")])
    code, _, err = _cli("import", "onnx", outside, "-o", str(tmp_path / "out2"))
    assert code == 2 and f"{outside}: ONNX's checker refuses the model" in err and "points outside" in err, err
    assert not (tmp_path / "out2").exists()


def test_an_opset_newer_than_onnx_knows_is_refused_naming_it(tmp_path):
    newest = onnx.defs.onnx_opset_version()
    relu = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    model = _save(tmp_path / "future.onnx", relu, [_vector("y")], opset=newest + 1)
    code, _, err = _cli("import", "onnx", model, "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"hetflow: error: {model}: the model imports opset {newest + 1} of ai.onnx, newer than "
                              f"the {newest} this onnx ({onnx.__version__}) knows; export it at opset {newest} or "
                              "lower, or upgrade onnx\n")
    assert not (tmp_path / "out").exists()
    code, _, err = _cli("import", "onnx", _save(tmp_path / "now.onnx", relu, [_vector("y")], opset=newest),
                        "-o", str(tmp_path / "out"))
    assert code == 0, err


def test_a_graph_without_outputs_is_refused_not_imported_as_a_manifest_that_fails_to_validate(tmp_path):
    model = _save(tmp_path / "silent.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")], [])
    code, _, err = _cli("import", "onnx", model, "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"hetflow: error: {model}: its graph has no outputs; a manifest names at least one "
                              "output to keep\n")
    assert not (tmp_path / "out").exists()


def test_a_model_path_that_is_a_folder_or_a_fifo_is_refused_saying_what_it_is(tmp_path):
    folder = tmp_path / "model.onnx"
    folder.mkdir()
    code, _, err = _cli("import", "onnx", str(folder), "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"hetflow: error: {folder}: is a directory, not a file\n")
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    code, _, err = _cli("import", "onnx", str(fifo), "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"hetflow: error: {fifo}: is a FIFO (a named pipe), not a file it can read\n")
    assert not (tmp_path / "out").exists()


def test_an_import_into_the_models_folder_never_writes_over_the_model_or_its_external_data(tmp_path):
    """model.onnx with its weights in model.safetensors (a name Hugging Face folders also give their PyTorch
    weights): an import with -o the same folder replaced them with hetflow's, and the next import read hetflow's
    file as the model's raw bytes and wrote a manifest of wrong weights."""
    weights = onnx.numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32), "W")   # raw bytes: saved apart
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add")], "g", [_vector("x")],
                              [_vector("y")], initializer=[weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="model.safetensors", size_threshold=0)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, _, err = _cli("import", "onnx", str(path), "-o", str(tmp_path))
    assert (code, err) == (2, f"hetflow: error: -o {tmp_path}: the import would write {tmp_path / 'model.safetensors'} "
                              f"over {tmp_path / 'model.safetensors'}, the external data the model reads; give another "
                              "folder (-o) or name (--name)\n")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    # the model's own file, where its name is the manifest's
    yaml_model = tmp_path / "net.yaml"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(yaml_model))
    code, _, err = _cli("import", "onnx", str(yaml_model), "-o", str(tmp_path))
    assert code == 2 and f"the import would write {yaml_model} over {yaml_model}, the model itself" in err, err
    # another name beside them is written as before
    code, _, err = _cli("import", "onnx", str(path), "-o", str(tmp_path), "--name", "imported")
    assert code == 0, err
    from safetensors.numpy import load_file

    assert load_file(str(tmp_path / "imported.safetensors"))["W"].tolist() == [1, 2, 3, 4]
    assert (tmp_path / "model.safetensors").read_bytes() == before["model.safetensors"]


def test_an_output_folder_no_folder_can_be_made_at_is_bad_input_not_an_internal_error(tmp_path):
    if not os.path.isdir("/proc/self"):
        pytest.skip("needs Linux's /proc, where mkdir answers ENOENT")
    model = _save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r")], [_vector("y")])
    code, _, err = _cli("import", "onnx", model, "-o", "/proc/hetflow-import")
    assert (code, err) == (2, "hetflow: error: -o /proc/hetflow-import: cannot make this folder: No such file or "
                              "directory\n")


def test_names_with_line_breaks_stay_on_their_line_of_the_error(tmp_path):
    """Node, op and input names are the model's to choose: one holding a line break split a line of the error
    (a one-line refusal became two, a node of the missing-ops listing looked like a group of its own)."""
    node = helper.make_node("Cos", ["x"], ["y"], name="n\nCos x9: no hetflow op: fake")
    model = _save(tmp_path / "names.onnx", [node], [_vector("y")])
    code, _, err = _cli("import", "onnx", model, "-o", str(tmp_path / "out"))
    assert code == 2 and err.splitlines()[1:] == ['  Cos x1: no hetflow op: "n\\nCos x9: no hetflow op: fake"'], err
    graph = helper.make_graph([helper.make_node("Relu", ["x\n"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x\n", TensorProto.FLOAT, ["b\n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b\n", 4])])
    path = tmp_path / "open.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    code, _, err = _cli("import", "onnx", str(path), "-o", str(tmp_path / "out"))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f'{path}: graph inputs without a fixed size in every dimension: "x\\n" ["b\\n", 4].' in err
    assert not (tmp_path / "out").exists()
