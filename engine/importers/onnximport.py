"""``hetflow import onnx``: an ONNX model as a manifest, its weights as a safetensors file.

:func:`import_onnx` reads ``MODEL.onnx`` and writes, into one folder:

- ``MODEL.yaml``, a normal manifest: one ``cpu`` executor, one ``input``
  stage per graph input, one ``load`` stage per initializer (or constant)
  a node reads as a tensor, the nodes' stages, and ``outputs:`` naming the
  stage of each graph output;
- ``MODEL.safetensors``, the arrays those ``load`` stages read, under their
  ONNX names (``__metadata__``, safetensors' own, gets ``_`` after it);
- with ``allow_missing`` and nodes hetflow cannot run,
  ``MODEL_missing.py``, a plugin named in ``plugins:`` with one op per
  missing op type (``onnx.TopK``) that raises ``NotImplementedError``
  until it is filled in.

The passes, in order (:func:`import_onnx` lists them):

1. **read**: ``onnx.load`` (external data beside the model, read in after
   inference where large), the checker (by the file's path where there is
   external data: protobuf serializes no model past 2 GB), and ONNX's
   shape inference, which gives every value's static shape and element
   type. A graph input with a dimension of no fixed size is
   refused: hetflow's stages have static shapes.
2. **values**: every tensor name -> :class:`_Value` (shape, dtype, the
   constant array where the model fixes it, the stage that gives it).
   Initializers and ``Constant`` nodes are constants; so is the output of
   a node whose inputs are all constants (folded at import by ONNX's
   reference evaluator, as onnxruntime folds them; a node with subgraphs
   only where what they read of the outer graph is constant too), and
   ``Shape`` of a static shape. Shape arithmetic of exported models thus disappears.
3. **translate**: each remaining node goes through its op type's
   translator in :data:`hetflow.engine.importers.onnxops.TRANSLATORS` (the one
   table of ONNX -> hetflow op correspondences, which the conformance
   tests also run), seen through :class:`_ImportNode`. A node with no
   translator, or one its translator refuses (an attribute hetflow has no
   arg for), is *missing*: it gets a stub stage so that the nodes after it
   still translate, and every missing node is reported, grouped by op
   type and reason, with its name.
4. **write**: when nothing is missing (or ``allow_missing``), the manifest,
   weights and stub are written to temporary files in the folder and then
   renamed into place; on any refusal nothing is written.

Stage ids keep ONNX's names (:func:`stage_id`): each run of characters
outside ``[A-Za-z0-9_-]`` becomes ``_``, a name that does not start with a
letter or ``_`` gets ``n_`` before it, an empty name becomes
``OPTYPE_INDEX``, ids are cut to 64 characters, and a taken id gets
``_2``, ``_3``... A node written as several stages names the stage of its
output after the node (``NAME``, or ``NAME_K`` for output K of a node with
several) and the stages before it ``NAME__1``, ``NAME__2``... Each stage's
``description:`` says where it came from: op type, node name, domain and
opset.

Examples
--------
>>> stage_id("/h.0/attn/MatMul_1", set())
'h_0_attn_MatMul_1'
>>> stage_id("0conv", {"n_0conv"})
'n_0conv_2'
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hetflow.engine.errors import UsageError
from hetflow.engine.importers.onnxops import (CARRIED, TRANSLATORS, Inexpressible, NodeContext, flow, hetflow_dtype,
                                              sparse_to_array, stage_spec)

__all__ = ["import_onnx", "imported_files", "OnnxImportError", "Missing", "stage_id"]

_ONNX_DOMAINS = ("", "ai.onnx")
#: ops whose result is not a function of their inputs: never folded at import
_UNFOLDABLE = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                         "Bernoulli", "Dropout"})
_MAX_ID = 64


@dataclass(frozen=True)
class Missing:
    """One node hetflow cannot run: its op type, domain, name and why."""

    op_type: str
    domain: str
    name: str
    reason: str
    #: why ``--allow-missing`` cannot give it a stub either ("" where it can)
    no_stub: str = ""


class OnnxImportError(UsageError):
    """The model cannot be imported (exit 2); ``missing`` lists the nodes hetflow cannot run, if that is why."""

    def __init__(self, message: str, missing: list[Missing] | None = None) -> None:
        super().__init__(message)
        self.missing = missing or []


@dataclass
class _Value:
    shape: tuple[int, ...] | None
    dtype: str | None              # hetflow's name; None: a type hetflow lacks
    onnx_type: str
    const: np.ndarray | None = None
    stage: str | None = None
    origin: str = ""               # what a load stage of this constant says it is
    blocked: str = ""              # why no stage can give it: the node it comes from has neither op nor stub


@dataclass
class _Result:
    """What the translate pass made: stages in order, the weights to write, outputs, the missing nodes."""

    stages: dict[str, dict] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    missing: list[Missing] = field(default_factory=list)
    #: op type -> {node: [(shape, dtype) or None where the output is omitted, by output position]}
    stubs: dict[str, dict] = field(default_factory=dict)
    stub_ops: dict[str, str] = field(default_factory=dict)   # op type -> the stub's op name
    nodes: int = 0
    dead: int = 0  # nodes no graph output depends on, left out
    #: graph outputs no stage gives, each with why: they come from a node with neither op nor stub
    unreached: list[str] = field(default_factory=list)


def stage_id(name: str, taken: set[str], fallback: str = "node") -> str:
    """``name`` as a stage id no one has taken yet (the rule in the module's docstring); adds it to ``taken``."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or fallback
    if not re.match(r"[A-Za-z_]", base):
        base = "n_" + base
    base = base[:_MAX_ID]
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        candidate = base[:_MAX_ID - len(suffix)] + suffix
    taken.add(candidate)
    return candidate


def import_onnx(path: str | os.PathLike, out_dir: str | os.PathLike, allow_missing: bool = False,
                name: str | None = None) -> Path:
    """Import the ONNX model at ``path`` into ``out_dir``; return the manifest's path.

    Parameters
    ----------
    path
        the ``.onnx`` file (external data is read from beside it).
    out_dir
        the folder to write ``NAME.yaml`` and ``NAME.safetensors`` into
        (made if missing; files of those names are replaced, unless one is the
        model or its external data: :class:`~hetflow.engine.errors.UsageError`).
    allow_missing
        write the manifest even when nodes have no hetflow op: with a
        plugin stub, ``NAME_missing.py``, whose ops raise
        ``NotImplementedError`` until they are written.
    name
        the manifest's ``name:`` and the files' stem (default: the
        model file's stem).

    Raises
    ------
    OnnxImportError
        (a :class:`~hetflow.engine.errors.UsageError`, exit 2) the file is
        not a valid ONNX model, an input has no fixed shape, or nodes have
        no hetflow op (without ``allow_missing``): every one of them,
        grouped by op type. Nothing is written then.
    """
    return imported_files(path, out_dir, allow_missing, name)[0]


def imported_files(path: str | os.PathLike, out_dir: str | os.PathLike, allow_missing: bool = False,
                   name: str | None = None) -> list[Path]:
    """:func:`import_onnx`, returning every file written: the manifest, the weights, the stub if any."""
    path = Path(path)
    model, sources = _read(path)
    stem = _manifest_name(name or path.stem)
    try:
        result = _translate(model, stem)
    except OnnxImportError as e:  # what the graph holds: said of the model's file, as reading it is
        raise OnnxImportError(f"{path}: {e}", e.missing) from None
    if result.missing and (not allow_missing or result.unreached):
        raise OnnxImportError(_missing_message(path, result), result.missing)
    if result.unreached:
        raise OnnxImportError(f"{path}: " + "; ".join(result.unreached))
    return _write(path, model, result, Path(out_dir), stem, sources)


# -- 1. read ---------------------------------------------------------------------------------------------------


def _read(path: Path) -> Any:
    try:
        import onnx
    except ImportError:
        raise OnnxImportError("hetflow import onnx needs the onnx package: pip install onnx") from None
    if not path.is_file():
        from hetflow.executors.files import not_a_file

        # a directory or a FIFO is no missing file: say what it is
        raise OnnxImportError(f"{path}: {not_a_file(str(path))}")
    from onnx import external_data_helper as ext

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf's and onnx's errors alike mean "not a model we can read"
        raise OnnxImportError(f"{path}: not a readable ONNX model: {_one_line(e)}") from None
    if model.functions:
        # the model's own functions (an exporter's for a module it keeps whole), written out where they are called
        from onnx import inliner

        try:
            model = inliner.inline_local_functions(model)
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"{path}: its local functions cannot be inlined: {_one_line(e)}") from None
    _check_opsets(model, path)
    # a Constant node's tensor (and a subgraph's) may be external too: onnx saves them so with convert_attribute
    external = [t for t in _tensors(model.graph) if ext.uses_external_data(t)]
    # the files the model is read from, which the import must not write over
    sources = [path, *dict.fromkeys(path.parent / ext.ExternalDataInfo(t).location for t in external)]
    try:
        # the checker and inference serialize the model they are given, which protobuf limits to 2 GB: a model
        # with external data is checked by its path, and inferred before its large tensors are read in
        onnx.checker.check_model(str(path) if external else model)
    except Exception as e:  # noqa: BLE001
        raise OnnxImportError(f"{path}: ONNX's checker refuses the model: {_one_line(e)}") from None
    try:
        # inference reads small constants (a Reshape's shape) by value: those come in now, the rest after it
        for tensor in external:
            if _nbytes(tensor) <= _EXTERNAL_INLINE:
                ext.load_external_data_for_tensor(tensor, str(path.parent))
        try:
            # strict: where a node computes another shape than the model declares for its output, ONNX's lenient
            # inference keeps the declared one, and the import would write a reshape to a shape the node never
            # makes
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"{path}: ONNX's shape inference fails: {_one_line(e)}") from None
        ext.load_external_data_for_model(model, str(path.parent))
    except OnnxImportError:
        raise
    except Exception as e:  # noqa: BLE001 - external data missing, short, or outside the model's folder
        raise OnnxImportError(f"{path}: not a readable ONNX model: {_one_line(e)}") from None
    return model, sources


def _tensors(graph: Any):
    """Every tensor the graph holds: its initializers, and the tensors of its nodes' attributes, subgraphs' too."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for g in attr.graphs:
                yield from _tensors(g)


def _check_opsets(model: Any, path: Path) -> None:
    """Refuse an ai.onnx opset newer than the installed onnx knows: its ops would be read by an older opset's
    definitions, which the checker and shape inference quietly fall back to."""
    import onnx

    known = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in _ONNX_DOMAINS and o.version > known:
            raise OnnxImportError(f"{path}: the model imports opset {o.version} of ai.onnx, newer than the {known} "
                                  f"this onnx ({onnx.__version__}) knows; export it at opset {known} or lower, or "
                                  "upgrade onnx")


#: external tensors up to this size are read in before shape inference, which may need their values
_EXTERNAL_INLINE = 1 << 20


def _nbytes(tensor: Any) -> int:
    from onnx import helper

    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:  # noqa: BLE001 - a type numpy has no counterpart for: taken as large
        return _EXTERNAL_INLINE + 1
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _manifest_name(stem: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._-") or "model"
    return name[:100] if re.match(r"[A-Za-z0-9]", name) else "m" + name[:99]


# -- 2. values -------------------------------------------------------------------------------------------------


def _type_of(info: Any) -> tuple[tuple[int, ...] | None, str | None, str]:
    """(static shape or None, hetflow dtype or None, ONNX's type name) of a ValueInfoProto."""
    from onnx import TensorProto

    t = info.type
    if not t.HasField("tensor_type"):
        return None, None, t.WhichOneof("value") or "unknown"
    elem = t.tensor_type.elem_type
    onnx_type = TensorProto.DataType.Name(elem) if elem else "UNDEFINED"
    dtype = _dtype_of(elem)
    if not t.tensor_type.HasField("shape"):
        return None, dtype, onnx_type
    dims = t.tensor_type.shape.dim
    # a negative size is what some exporters write for a dimension they leave open, as a dim_param is
    if any(not d.HasField("dim_value") or d.dim_value < 0 for d in dims):
        return None, dtype, onnx_type
    return tuple(int(d.dim_value) for d in dims), dtype, onnx_type


def _dtype_of(elem: int) -> str | None:
    from onnx import helper

    try:
        return hetflow_dtype(np.zeros(0, helper.tensor_dtype_to_np_dtype(elem)))
    except Exception:  # noqa: BLE001 - an element type numpy has no counterpart for
        return None


def _constant(value: np.ndarray, origin: str) -> _Value:
    value = np.asarray(value)
    return _Value(tuple(int(n) for n in value.shape), hetflow_dtype(value), str(value.dtype), value, origin=origin)


def _constant_node(node: Any) -> np.ndarray:
    from onnx import helper, numpy_helper

    attr = node.attribute[0]
    value = helper.get_attribute_value(attr)
    if attr.name == "value":
        return numpy_helper.to_array(value)
    if attr.name == "sparse_value":
        return sparse_to_array(value)
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if attr.name not in kinds:
        raise Inexpressible(f"a Constant given by {attr.name}")
    return np.asarray(value, kinds[attr.name])


def _values(model: Any) -> dict[str, _Value]:
    from onnx import numpy_helper

    values: dict[str, _Value] = {}
    for info in list(model.graph.value_info) + list(model.graph.output):
        shape, dtype, onnx_type = _type_of(info)
        values[info.name] = _Value(shape, dtype, onnx_type)
    for node in model.graph.node:
        for name in node.output:
            if name and name not in values:  # ONNX's inference gives nothing for an op it does not know
                values[name] = _Value(None, None, "unknown to ONNX's shape inference")
    for init in model.graph.initializer:
        values[init.name] = _constant(numpy_helper.to_array(init), f'ONNX initializer "{init.name}"')
    for sparse in model.graph.sparse_initializer:
        name = sparse.values.name
        values[name] = _constant(sparse_to_array(sparse), f'ONNX sparse initializer "{name}"')
    unfixed = []
    for info in model.graph.input:
        if info.name in values and values[info.name].const is not None:
            continue    # an input with an initializer: ONNX's default value, imported as a weight
        shape, dtype, onnx_type = _type_of(info)
        if not info.type.HasField("tensor_type"):
            kind = onnx_type.removesuffix("_type").replace("_", " ")
            raise OnnxImportError(f"graph input {_q(info.name)} is a {kind}, which hetflow lacks: a stage's "
                                  "inputs and outputs are tensors")
        if shape is None:
            dims = [_text(d.dim_param) or "?" if not d.HasField("dim_value") else str(d.dim_value)
                    for d in info.type.tensor_type.shape.dim]
            unfixed.append(f"{_text(info.name)} [{', '.join(dims)}]")
        values[info.name] = _Value(shape, dtype, onnx_type)
    if unfixed:
        raise OnnxImportError(
            "graph inputs without a fixed size in every dimension: " + "; ".join(unfixed)
            + ". hetflow's stages have static shapes: fix the dimensions first (python -m "
              "onnxruntime.tools.make_dynamic_shape_fixed, or re-export with fixed shapes) and import again")
    return values


# -- 3. translate ----------------------------------------------------------------------------------------------


class _ImportNode(NodeContext):
    """One node of the model as its translator sees it: inputs are values of the graph, shapes ONNX inferred."""

    def __init__(self, node: Any, opsets: dict[str, int], domain_opset: int, index: int, values: dict[str, _Value],
                 result: _Result, taken: set[str]) -> None:
        super().__init__(node, opsets.get("", 0))
        self.values, self.result, self.taken, self.opsets = values, result, taken, opsets
        self.index = index
        domain = node.domain or "ai.onnx"
        self.origin = f'ONNX {node.op_type} node "{node.name}" ({domain}, opset {domain_opset})'
        self.local: list[tuple[str, dict]] = []
        self.outs: list[tuple[int, str]] = []   # (output position, local stage)

    def _value(self, i: int) -> _Value:
        return self.values[self.node.input[i]]

    def const(self, i: int) -> np.ndarray:
        v = self._value(i)
        if v.const is None:
            raise Inexpressible(f"input {i} ('{self.node.input[i]}') is computed at run time, "
                                "and hetflow takes it as an argument")
        return v.const

    def folded(self, i: int) -> np.ndarray | None:
        return self._value(i).const if self.has(i) else None

    def shape(self, i: int) -> tuple[int, ...]:
        v = self._value(i)
        if v.shape is None:
            raise Inexpressible(f"input {i} ('{self.node.input[i]}') has no static shape after ONNX's shape inference")
        return v.shape

    def dtype(self, i: int) -> str:
        v = self._value(i)
        if v.dtype is None:
            raise Inexpressible(f"input {i} ('{self.node.input[i]}') of type {v.onnx_type}, which hetflow lacks")
        return v.dtype

    def input(self, i: int) -> str:
        return _stage_of(self.node.input[i], self.values, self.result, self.taken)

    def _out(self, k: int) -> _Value:
        if not self.has_output(k):
            raise Inexpressible(f"output {k} is omitted, and the node's stages need it")
        name = self.node.output[k]
        v = self.values.get(name)
        if v is not None and v.shape is None:
            _infer_alone(self.node, self.values, self.opsets)
        if v is None or v.shape is None:
            raise Inexpressible(f"output {k} ({_q(name)}) has no static shape after ONNX's shape inference")
        if v.dtype is None:
            raise Inexpressible(f"output {k} ({_q(name)}) of type {v.onnx_type}, which hetflow lacks")
        return v

    def out_shape(self, k: int = 0) -> list[int]:
        return list(self._out(k).shape)  # type: ignore[arg-type]

    def out_dtype(self, k: int = 0) -> str:
        return self._out(k).dtype  # type: ignore[return-value]

    def stage(self, op: str, inputs: list[str], args: dict | None = None, dtype: str | None = None) -> str:
        local = f"#{len(self.local) + 1}"
        self.local.append((local, stage_spec(op, inputs, args, dtype)))
        return local

    def output(self, local: str, k: int | None = None) -> None:
        if k is None:
            after = self.outs[-1][0] + 1 if self.outs else 0
            k = next(i for i in range(after, len(self.node.output)) if self.node.output[i])
        self.outs.append((k, local))

    def commit(self) -> None:
        """Give the stages their ids (the output's after the node, the steps before it ``__N``) and keep them."""
        base = self.node.name or f"{self.node.op_type}_{self.index}"
        single = self.n_outputs() == 1
        ids: dict[str, str] = {}
        for k, local in self.outs:
            ids[local] = stage_id(base if single else f"{base}_{k}", self.taken, self.node.op_type)
        step = 0
        for local, _ in self.local:
            if local not in ids:
                step += 1
                ids[local] = stage_id(f"{base}__{step}", self.taken, self.node.op_type)
        given = {local for _, local in self.outs}
        for local, spec in self.local:
            if "inputs" in spec:
                spec["inputs"] = [ids.get(x, x) for x in spec["inputs"]]
            spec["description"] = self.origin + ("" if local in given else f", step {local[1:]}")
            self.result.stages[ids[local]] = spec
        for k, local in self.outs:
            self.values[self.node.output[k]].stage = ids[local]


#: the most elements a constant input may have to be given to :func:`_infer_alone` by value (a shape, axes, sizes)
_INFER_CONST_MAX = 4096


def _infer_alone(node: Any, values: dict[str, _Value], opsets: dict[str, int]) -> None:
    """Give the outputs of ``node`` that have no static shape the shapes ONNX's inference finds for it alone.

    Inference over the whole model does not see the constants the import folds: a Reshape to ``Concat(Shape(x)[0],
    -1)`` has no static shape at opsets 11 and 13, where data propagation stops short. Alone, with those constants
    as initializers, the node's output shape follows from them.
    """
    import onnx
    from onnx import helper

    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return   # its subgraphs read the outer graph, which the node alone lacks
    inputs, initializers = [], []
    for name in dict.fromkeys(n for n in node.input if n):
        v = values.get(name)
        if v is None or v.shape is None or v.dtype is None:
            return
        try:
            if v.const is not None and v.const.size <= _INFER_CONST_MAX:
                initializers.append(onnx.numpy_helper.from_array(v.const, name))
                continue
            elem = (helper.np_dtype_to_tensor_dtype(v.const.dtype) if v.const is not None
                    else onnx.TensorProto.DataType.Value(v.onnx_type))
        except Exception:  # noqa: BLE001 - a type ONNX's helpers cannot write: nothing to infer from
            return
        inputs.append(helper.make_tensor_value_info(name, elem, list(v.shape)))
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], "alone", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:  # noqa: BLE001 - no better than before: the output stays without a static shape
        return
    for info in list(inferred.graph.output) + list(inferred.graph.value_info):
        v = values.get(info.name)
        if info.name in node.output and v is not None and v.shape is None:
            shape, dtype, onnx_type = _type_of(info)
            if shape is not None:
                v.shape, v.dtype, v.onnx_type = shape, dtype, onnx_type


def _stage_of(name: str, values: dict[str, _Value], result: _Result, taken: set[str]) -> str:
    """The stage that gives tensor ``name``: a constant gets its ``load`` stage the first time it is read."""
    v = values[name]
    if v.stage is None:
        if v.const is None:
            # a model out of topological order, if not a node with neither op nor stub
            raise Inexpressible(v.blocked or f"tensor {_q(name)} has no stage")
        if v.dtype is None:
            raise Inexpressible(f"constant {_q(name)} of type {v.const.dtype}, which hetflow lacks")
        v.stage = stage_id(name, taken, "const")
        carried = CARRIED.get(v.dtype)
        key = name
        # safetensors keeps its own header under __metadata__: a tensor of that name makes the file unreadable
        while key == "__metadata__" or key in result.weights:
            key += "_"
        result.weights[key] = np.ascontiguousarray(v.const.astype(carried) if carried is not None else v.const)
        result.stages[v.stage] = {"op": "load", "args": {"path": None, "key": key}, "dtype": v.dtype,
                                  "description": v.origin}
    return v.stage


def _opsets(model: Any) -> dict[str, int]:
    return {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}


def _translate(model: Any, stem: str) -> _Result:
    if not model.graph.output:
        # the manifest's outputs: would be empty, which no manifest may be, and nothing the model computes kept
        raise OnnxImportError("its graph has no outputs; a manifest names at least one output to keep")
    values = _values(model)
    opsets = _opsets(model)
    result = _Result()
    taken: set[str] = set()
    for info in model.graph.input:
        v = values[info.name]
        if v.const is not None:
            continue
        v.stage = stage_id(info.name, taken, "input")
        if v.dtype is None:
            raise OnnxImportError(f"graph input {_q(info.name)} is of type {v.onnx_type}, which hetflow lacks")
        result.stages[v.stage] = {"op": "input", "args": {"shape": list(v.shape), "dtype": v.dtype},
                                  "dtype": v.dtype, "description": f'ONNX graph input "{info.name}"'}
    live = _live_nodes(model.graph)
    for index, node in enumerate(model.graph.node):
        if index not in live:
            result.dead += 1
            continue
        if _fold(node, values, opsets):
            continue
        result.nodes += 1
        domain = node.domain if node.domain not in _ONNX_DOMAINS else ""
        ctx = _ImportNode(node, opsets, opsets.get(domain, 0), index, values, result, taken)
        translator = TRANSLATORS.get(node.op_type) if domain == "" else None
        reason = ""
        if translator is None:
            reason = "no hetflow op" if domain == "" else f"domain {node.domain}, which hetflow has no ops of"
        else:
            try:
                translator(ctx)
                ctx.commit()
                continue
            except Inexpressible as e:
                reason = str(e)
        name = node.name or f"#{index}"
        no_stub = _stub(node, index, ctx, values, result, taken)
        result.missing.append(Missing(node.op_type, node.domain or "ai.onnx", name, reason, no_stub))
        if no_stub:
            for out in node.output:
                if out and values[out].stage is None and values[out].const is None:
                    values[out].blocked = (f"tensor {_q(out)} comes from {_text(node.op_type)} node {_text(name)}, which has neither "
                                           "a hetflow op nor a stub")
    for info in model.graph.output:
        try:
            stage = _stage_of(info.name, values, result, taken)
        except Inexpressible as e:
            result.unreached.append(f"graph output {_q(info.name)}: {e}")
            continue
        # each output is a file OUTPUT.npy: names that differ only by case would be one file on some systems
        tried, folded = set(result.outputs), {o.casefold() for o in result.outputs}
        name = stage_id(info.name, tried, "output")
        while name.casefold() in folded:
            name = stage_id(info.name, tried, "output")
        result.outputs[name] = stage
    for spec in result.stages.values():
        if spec["op"] == "load":
            spec["args"]["path"] = f"{stem}.safetensors"
    return result


def _live_nodes(graph: Any) -> set[int]:
    """The indexes of the nodes some graph output depends on: a node whose outputs nothing reads (an exporter's
    leftover) is left out, rather than refused or stubbed for an op it never needed."""
    needed = {o.name for o in graph.output}
    live: set[int] = set()
    for index in range(len(graph.node) - 1, -1, -1):
        node = graph.node[index]
        if any(o and o in needed for o in node.output):
            live.add(index)
            needed.update(n for n in node.input if n)
            needed.update(_outer_names(node))
    return live


def _fold(node: Any, values: dict[str, _Value], opsets: dict[str, int]) -> bool:
    """Compute a node whose inputs are all constants at import (its outputs become constants); True if done."""
    if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS:
        try:
            values[node.output[0]] = _constant(_constant_node(node), f'ONNX Constant "{node.name or node.output[0]}"')
        except Inexpressible:
            return False
        return True
    if node.op_type == "Shape" and node.domain in _ONNX_DOMAINS and values[node.input[0]].shape is not None:
        shape = values[node.input[0]].shape
        start, end = 0, len(shape)
        for a in node.attribute:
            if a.name == "start":
                start = a.i
            elif a.name == "end":
                end = a.i
        values[node.output[0]] = _constant(np.array(shape[start:end], np.int64),
                                           f'ONNX Shape "{node.name}", folded at import')
        return True
    inputs = [n for n in node.input if n]
    if (not inputs or node.op_type in _UNFOLDABLE or node.domain not in _ONNX_DOMAINS
            or any(values[n].const is None for n in inputs)):
        return False
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    # a subgraph (Loop's body, If's branches) reads tensors of the graph around it besides the node's inputs;
    # an evaluator not given them does not always fail, it may compute something else (Loop's body adding
    # nothing), so the node folds only with every one of them a constant it is given
    outer = _outer_names(node)
    if any(n not in values or values[n].const is None for n in outer):
        return False
    feeds = {n: values[n].const for n in dict.fromkeys([*inputs, *sorted(outer)])}
    try:
        if node.op_type == "Loop" and (len(node.input) < 2 or not node.input[1]):
            # ONNX's reference runs a Loop without its cond zero times, where ONNX says it runs M times
            node = onnx.NodeProto.FromString(node.SerializeToString())
            cond = next(f"cond{k}" for k in range(len(values) + 1) if f"cond{k}" not in values)
            given = [*node.input, ""][:max(2, len(node.input))]
            given[1] = cond
            del node.input[:]
            node.input.extend(given)
            feeds[cond] = np.array(True)
        # a model of the one node, not the node alone: the evaluator then takes the model's opsets (given a node,
        # it ran opset 11's Unsqueeze, axes an attribute, as opset 13's) and gives subgraphs the feeds they read
        graph = helper.make_graph([node], "fold", [helper.make_empty_tensor_value_info(n) for n in feeds],
                                  [helper.make_empty_tensor_value_info(n) for n in node.output if n])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
        named = iter(ReferenceEvaluator(model).run(None, feeds))
        results = [next(named) if n else None for n in node.output]
    except Exception:  # noqa: BLE001 - ONNX's reference cannot fold it: translate it as a node instead
        return False
    for name, value in zip([n for n in node.output], results):
        if name:
            values[name] = _constant(value, f'ONNX tensor "{name}", computed at import by '
                                            f'{node.op_type} node "{node.name}" from constants')
    return True


def _outer_names(node: Any) -> set[str]:
    """The tensors of the enclosing graph that the subgraphs of ``node`` read (through subgraphs of theirs too)."""
    import onnx
    from onnx.reference.op_run import OpRun

    names: set[str] = set()
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            graphs = [attr.g]
        elif attr.type == onnx.AttributeProto.GRAPHS:
            graphs = list(attr.graphs)
        else:
            continue
        for graph in graphs:
            inside = ({i.name for i in graph.initializer} | {i.name for i in graph.sparse_initializer}
                      | {i.name for i in graph.input} | {o for n in graph.node for o in n.output})
            names.update(OpRun.implicit_inputs(graph))
            for inner in graph.node:
                names.update(_outer_names(inner) - inside)
    names.discard("")
    return names


def _stub(node: Any, index: int, ctx: _ImportNode, values: dict[str, _Value], result: _Result,
          taken: set[str]) -> str:
    """Stages of the stub op for a missing node, so that the nodes after it translate (and the stub has shapes).

    Returns why no stub can be made ("" once it is): a stub's outputs need static shapes and types hetflow has,
    and its inputs stages. The node's consumers then go missing too, each said why.
    """
    outputs = [(k, n) for k, n in enumerate(node.output) if n]
    known = [values[n] for _, n in outputs]
    if any(v.shape is None for v in known):
        _infer_alone(node, values, ctx.opsets)
    for (_, name), v in zip(outputs, known):
        if v.shape is None:
            return f"output {_q(name)} has no static shape after ONNX's shape inference"
        if v.dtype is None:
            return f"output {_q(name)} is of type {v.onnx_type}, which hetflow lacks"
    inputs = []
    for name in node.input:
        if name:
            try:
                inputs.append(_stage_of(name, values, result, taken))
            except Inexpressible as e:
                return str(e)
    base = node.name or f"{node.op_type}_{index}"
    table = result.stubs.setdefault(node.op_type, {})
    # the checker lets two nodes share a name; each needs its own row of the stub's shape table
    key = base if base not in table else f"{base} (node #{index})"
    shapes: list[tuple[list[int], str] | None] = [None] * len(node.output)
    for (k, _), v in zip(outputs, known):
        shapes[k] = (list(v.shape), v.dtype)  # type: ignore[arg-type]
    table[key] = shapes  # type: ignore[assignment]
    for (k, name), v in zip(outputs, known):
        sid = stage_id(base if len(outputs) == 1 else f"{base}_{k}", taken, node.op_type)
        args: dict[str, Any] = {"node": key}
        if len(outputs) > 1:
            args["output"] = k
        spec: dict[str, Any] = {"op": _stub_op(node.op_type, result)}
        if inputs:
            spec["inputs"] = list(inputs)
        spec.update({"args": args, "dtype": v.dtype,  # type: ignore[union-attr]
                     "description": ctx.origin + " (missing: fill in the stub op)"})
        result.stages[sid] = spec
        v.stage = sid
    return ""


def _stub_op(op_type: str, result: _Result) -> str:
    """The stub's op for ``op_type``: ``onnx.OPTYPE``, where characters an op name cannot hold become ``_``."""
    if op_type not in result.stub_ops:
        base = "onnx." + re.sub(r"[^A-Za-z0-9_-]", "_", op_type)
        name, n, taken = base, 1, set(result.stub_ops.values())
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        result.stub_ops[op_type] = name
    return result.stub_ops[op_type]


def _missing_message(path: Path, result: _Result) -> str:
    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for m in result.missing:
        groups[(_text(m.op_type), _text(m.domain), m.reason)].append(_text(m.name))
    n = len(result.missing)
    if result.unreached:  # a stub would not get the model's outputs either
        then = ("--allow-missing cannot write it either: the graph's outputs come from nodes that cannot have a "
                "plugin stub, below")
    else:
        then = "--allow-missing writes the manifest with a plugin stub of these ops to fill in"
    lines = [f"{path.name}: {n} of {result.nodes} nodes have no hetflow op, in {len(groups)} "
             f"group{'s' if len(groups) != 1 else ''} (nothing written; {then}):"]
    for (op_type, domain, reason), names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        where = "" if domain == "ai.onnx" else f" ({domain})"
        lines.append(f"  {op_type}{where} x{len(names)}: {reason}: {_shown(names)}")
    if result.unreached:
        unstubbed = [m for m in result.missing if m.no_stub]
        lines.append(f"  no stub for {len(unstubbed)} of them (a stub needs its outputs' static shapes, of types "
                     "hetflow has, and its inputs' stages):")
        lines += [f"    {_text(m.name)} ({_text(m.op_type)}): {m.no_stub}" for m in unstubbed[:20]]
        if len(unstubbed) > 20:
            lines.append(f"    ... and {len(unstubbed) - 20} more")
        lines += [f"  {u}" for u in result.unreached[:20]]
    return "\n".join(lines)


def _text(name: str) -> str:
    """A name of the model as an error shows it: as it is, or, where it holds a line break or another character
    that is not text, as a JSON string, so that each line of the error stays the one it is about."""
    return name if name.isprintable() else json.dumps(name)


def _q(name: str) -> str:
    """A name of the model quoted in an error: ``'x'``, or its JSON string where :func:`_text` writes one."""
    return f"'{name}'" if name.isprintable() else json.dumps(name)


def _shown(names: list[str]) -> str:
    return ", ".join(names[:20]) + (f", ... and {len(names) - 20} more" if len(names) > 20 else "")


# -- 4. write --------------------------------------------------------------------------------------------------


def _write(path: Path, model: Any, result: _Result, out_dir: Path, stem: str, sources: list[Path]) -> list[Path]:
    from safetensors.numpy import save_file

    import hetflow

    made = not out_dir.exists()
    if not made and not out_dir.is_dir():
        raise UsageError(f"-o {out_dir}: not a folder; the import writes a manifest and its weights into a folder")
    plugin = f"{stem}_missing.py" if result.stubs else None
    for filename in (f"{stem}.yaml", f"{stem}.safetensors", plugin):
        final = out_dir / filename if filename else None
        source = next((s for s in sources if final and final.exists() and s.exists() and os.path.samefile(final, s)),
                      None)
        if source is not None:
            # replacing it would lose the model, or leave it reading hetflow's weights as its own raw bytes
            what = "the model itself" if source == path else "the external data the model reads"
            raise UsageError(f"-o {out_dir}: the import would write {final} over {source}, {what}; give another "
                             "folder (-o) or name (--name)")
    blocking = next((p for p in out_dir.parents if p.exists() and not p.is_dir()), None) if made else None
    if blocking is not None:
        raise UsageError(f"-o {out_dir}: {blocking} is not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except (FileNotFoundError, NotADirectoryError) as e:
        # a place no folder can be made (under /proc, or a parent removed meanwhile): the -o given, not the disk
        raise UsageError(f"-o {out_dir}: cannot make this folder: {e.strerror or e}") from None
    # the file's name is the model's to choose: quoted as JSON quotes it, a line break in it stays in the comment
    lines = [f"# Imported from {json.dumps(path.name)} by `hetflow import onnx` (hetflow {hetflow.__version__}):",
             f"# {result.nodes} ONNX nodes as {len(result.stages)} stages; weights in {stem}.safetensors."]
    if result.dead:
        lines.append(f"# {result.dead} nodes feed no graph output and were left out.")
    if plugin:
        lines.append(f"# {len(result.missing)} nodes have no hetflow op: write their ops in {plugin}.")
    producer = " ".join(x for x in (model.producer_name, model.producer_version) if x)
    lines += ["version: 1", f"name: {flow(stem)}",
              f"description: {flow(f'ONNX model {path.name}' + (f' from {producer}' if producer else ''))}"]
    if plugin:
        lines.append(f"plugins: [{flow(plugin)}]")
    lines += ["executors:", "  cpu: {vendor: cpu}", "stages:"]
    lines += [f"  {sid}: {flow(spec)}" for sid, spec in result.stages.items()]
    lines.append("outputs:")
    lines += [f"  {key}: {stage}" for key, stage in result.outputs.items()]
    files: dict[str, Any] = {f"{stem}.yaml": "\n".join(lines) + "\n"}
    if plugin:
        files[plugin] = _stub_module(path, result)
    _remove_left_behind(out_dir, [*files, f"{stem}.safetensors"])
    staged: list[tuple[str, Path]] = []
    try:
        for filename, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{filename}.", dir=out_dir)
            staged.append((tmp, out_dir / filename))
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:  # named for the file it was for, not its temporary (a flush names none)
                e.filename = str(out_dir / filename)
                raise
        fd, tmp = tempfile.mkstemp(prefix=f".{stem}.safetensors.", dir=out_dir)
        os.close(fd)
        staged.append((tmp, out_dir / f"{stem}.safetensors"))
        _save_weights(save_file, result.weights, tmp, out_dir / f"{stem}.safetensors", {"source": path.name})
        for tmp, final in staged:
            os.chmod(tmp, 0o666 & ~_umask())
        for tmp, final in staged:
            os.replace(tmp, final)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if made and not any(os.path.exists(final) for _, final in staged):
            with contextlib.suppress(OSError):  # the folder this import made, left empty by a write that failed
                out_dir.rmdir()
    return [final for _, final in staged]


def _remove_left_behind(out_dir: Path, names: list[str], idle_s: float = 60.0) -> None:
    """Remove the temporary files an import killed before its renames left for ``names`` (``.NAME.XXXXXXXX``,
    a weights file of gigabytes perhaps); not one written in the last ``idle_s`` seconds, which may be another
    import's under way."""
    import time

    before = time.time() - idle_s
    for entry in os.listdir(out_dir):
        if not any(entry.startswith(f".{name}.") for name in names):
            continue
        path = out_dir / entry
        with contextlib.suppress(OSError):
            if path.is_file() and path.stat().st_mtime < before:
                path.unlink()


def _save_weights(save_file: Callable[..., None], weights: dict, tmp: str, final: Path, metadata: dict) -> None:
    """``save_file`` of safetensors, whose failure to write is a ``SafetensorError`` that quotes the I/O
    error as Rust prints it (``... (os error 28)``): raised again as that ``OSError``, for ``final``, so
    that a full disk is the environment's (exit 5) and not a crash."""
    from safetensors import SafetensorError

    try:
        save_file(weights, tmp, metadata=metadata)
    except SafetensorError as e:
        code = re.search(r"\(os error (\d+)\)", str(e))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(final)) from e


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _stub_module(path: Path, result: _Result) -> str:
    """The plugin with one op per missing op type: shapes and dtypes per node, the body to write.

    Every string the model gives (its file's name, op types, node names) is written as a ``repr`` literal, never
    inside a docstring, a comment or an f-string, where a quote or a line break in it would be Python code.
    """
    lines = ['"""Ops of the ONNX model MODEL that hetflow has none of: write each body, then run the manifest.',
             "",
             "Each op gets the node's inputs (arrays of the executor's array module ``xp``) and ``node``, the",
             "ONNX node's name; ``OPTYPE_SHAPES`` holds what each node must return: its output shapes and dtypes",
             "by output position (None for an output the node omits), as ONNX's shape inference gives them.",
             '"""', "", "from hetflow import op", "", f"MODEL = {path.name!r}", "", "",
             "def _missing(op_type: str, node: str) -> NotImplementedError:",
             '    return NotImplementedError(f"ONNX {op_type} (node {node!r}) has no hetflow op yet: write it in '
             '{__file__}")', ""]
    taken: set[str] = set()
    for op_type, nodes in sorted(result.stubs.items()):
        py = _py_name(result.stub_ops[op_type].removeprefix("onnx."), taken)
        const = f"{py.removeprefix('onnx_').upper()}_SHAPES"
        dtypes = sorted({out[1] for outs in nodes.values() for out in outs if out is not None})
        multi = any(len(outs) > 1 for outs in nodes.values())
        lines += ["", f"{const} = {{"]
        lines += [f"    {node!r}: {[(tuple(o[0]), o[1]) if o is not None else None for o in outs]!r},"
                  for node, outs in nodes.items()]
        lines += ["}", "", ""]
        out_arg = ", output: int = 0" if multi else ""
        out_use = "output" if multi else "0"
        lines += [f"@op({result.stub_ops[op_type]!r}, dtypes={dtypes!r},",
                  f"    shape=lambda *inputs, node, output=0: {const}[node][output][0])",
                  f"def {py}(xp, *inputs, node: str{out_arg}):",
                  f'    """Output ``{out_use}`` of node ``node`` of the op type above ({const} gives its shape)."""',
                  f"    raise _missing({op_type!r}, node)", ""]
    return "\n".join(lines)


def _py_name(op_type: str, taken: set[str]) -> str:
    """A Python name for the op of ``op_type`` that no other op type of the stub has."""
    base = "onnx_" + re.sub(r"[^A-Za-z0-9_]", "_", op_type).lower()
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name
