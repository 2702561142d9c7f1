"""ONNX's operator conformance cases as hetflow manifests, run through the CLI.

The ``onnx`` wheel ships its node test cases (``onnx.backend.test.case.node``):
a model of one node, or of Constants feeding one node, with its inputs and
the outputs ONNX's reference gives. This module turns each case whose op type
means what a hetflow op means into stages of a manifest, runs many cases in one
manifest through ``python -m hetflow.engine.cli run``, and compares what the
run wrote with ONNX's outputs.

Translation. Every input the node reads from the graph becomes a ``load``
stage of an ``.npz`` written beside the manifest, with ONNX's dtype named in
``dtype:`` (values of bf16, fp8 and int4 travel as the float32 or int8 that
holds them exactly). An input whose value the case fixes and hetflow takes as
an argument (Clip's ``min``/``max``, Reshape's ``shape``, a reduction's
``axes``, Slice's ``starts``...) becomes that argument. The node becomes one
stage, or a short chain where ONNX packs several hetflow ops into one
(variadic ``Max`` -> chained ``maximum``, a Slice over three axes -> three
``slice`` stages); the last stage of each output names ONNX's output dtype.
A case that cannot be written so is :class:`Inexpressible`, with a one-line
reason: a dtype hetflow lacks (uint16, uint4, float8 "fnuz"...), an input or
attribute with no hetflow counterpart (attention's ``past_key``, ``softcap``).

Running. Case ``i`` gets the stage names ``c{i}_...`` and the outputs
``c{i}_o{k}`` (plain: inputs and op on executor ``a``) and ``c{i}_b{k}``
(bridged: inputs on ``a``, the op on ``b``, so a bridge carries every input),
each stage on one line of the manifest. A diagnostic of ``validate`` names a
line, hence a case; a failed run names its failed stages in the record, hence
their cases. Those cases are set aside with the message and the rest run again,
until a run succeeds.

Comparing. Shape and dtype exactly; values exactly for ops that only move,
select, compare or cast, and for integer and bool results; otherwise within
rtol 1e-4 / atol 1e-5 (NaN equal to NaN); for an output narrower than fp32,
within two units in its last place: hetflow computes fp16 and bf16 in float32
and rounds once, where ONNX's reference rounds its intermediates to the narrow
type (``attention_4d_causal_bf16``: the exact value 0.481159 rounds to
0.480469 in bf16, hetflow's result; ONNX's reference gives 0.484375). The
bridged output must have the same bytes as the plain one.

Examples
--------
>>> hetflow_dtype(np.zeros(2, np.int64))
'int64'
>>> hetflow_dtype(np.zeros(2, np.uint16)) is None
True
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import ml_dtypes
import numpy as np

__all__ = ["Inexpressible", "Translation", "Outcome", "TODAY", "NEW", "ALSO_NEW", "DOCUMENTED", "hetflow_dtype",
           "collect", "translate", "run_cases", "summarize", "CHUNK"]

CHUNK = 60
"""Cases per manifest: one CLI process runs them all."""

TODAY = ("Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Where", "Relu", "Gelu", "Swish", "Exp", "Log",
         "Sqrt", "Tanh", "Sigmoid", "Cast", "CastLike", "Identity", "MatMul", "Attention", "RotaryEmbedding",
         "Softmax", "RMSNormalization", "LayerNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ArgMax",
         "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "QuantizeLinear",
         "DequantizeLinear", "Sum", "Mean", "Range", "ConstantOfShape")
"""ONNX op types that a hetflow op of today means (or a short chain of them: Sum, Mean)."""

NEW = ("Gather", "ArgMin", "ReduceMin", "Min", "Max", "Abs", "Pow", "Erf", "Clip")
"""The nine ONNX op types issue 28 adds ops for."""

ALSO_NEW = ("Neg", "Mod")
"""ONNX op types the issue's new ops (``neg``, ``mod``) also cover."""

DOCUMENTED = {
    "test_cast_FLOAT_to_INT4": "float -> int4 out of range: ONNX leaves it undefined, hetflow saturates",
    "test_cast_FLOAT16_to_INT4": "float -> int4 out of range: ONNX leaves it undefined, hetflow saturates",
    "test_castlike_FLOAT_to_INT4_expanded": "float -> int4 out of range: ONNX leaves it undefined, hetflow saturates",
    "test_castlike_FLOAT16_to_INT4_expanded": "float -> int4 out of range: ONNX leaves it undefined, hetflow saturates",
    "test_castlike_FLOAT_to_INT4": "float -> int4 out of range: ONNX leaves it undefined, hetflow saturates",
    "test_castlike_FLOAT16_to_INT4": "float -> int4 out of range: ONNX leaves it undefined, hetflow saturates",
}
"""Expressible cases whose difference from ONNX is hetflow's documented rule where ONNX defines none."""

_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8e4m3",
           "float8_e5m2": "fp8e5m2", "int8": "int8", "int4": "int4", "int16": "int16", "int32": "int32",
           "int64": "int64", "uint8": "uint8", "bool": "bool", "float64": "fp64"}

_CARRIED = {"bf16": np.float32, "fp8e4m3": np.float32, "fp8e5m2": np.float32, "int4": np.int8}
"""How an input of a dtype numpy's ``.npz`` cannot hold travels to ``load``: a type that holds its values exactly."""

_EXACT_OPS = frozenset({"Cast", "CastLike", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                        "Concat", "Split", "Slice", "Gather", "Where", "Equal", "Less", "Greater", "ArgMax", "ArgMin",
                        "ReduceMax", "ReduceMin", "Max", "Min", "Abs", "Neg", "Clip", "ConstantOfShape", "Relu"})
"""Op types that only move, select, compare or cast: their results must be equal, not close."""


class Inexpressible(Exception):
    """The case cannot be written as hetflow stages; the message says why, in one line."""


def hetflow_dtype(array: Any) -> str | None:
    """The hetflow dtype name of a numpy (or ml_dtypes) array's values, or None where hetflow has none."""
    return _DTYPES.get(str(np.asarray(array).dtype))


def _array(value: Any) -> Any:
    from onnx import numpy_helper

    if isinstance(value, np.generic):
        return np.asarray(value)
    return numpy_helper.to_array(value) if hasattr(value, "dims") else value


@dataclass
class Translation:
    """One case as stages: ``loads`` (local name -> array, dtype), ``stages`` (local name -> spec), ``outputs``."""

    name: str
    op_type: str
    loads: dict[str, tuple[np.ndarray, str]] = field(default_factory=dict)
    stages: dict[str, dict] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    expected: list[np.ndarray] = field(default_factory=list)
    exact: bool = False


@dataclass
class Outcome:
    """What became of one case: ``status`` is ``inexpressible``, ``passed`` or ``failed``; ``reason`` says why."""

    name: str
    op_type: str
    status: str
    reason: str = ""


# -- collecting and translating -------------------------------------------------------------------------------


def collect(op_types: Iterable[str] | None = None) -> list[Any]:
    """ONNX's node cases whose graph is one node (after its Constants) of a mapped op type, in ONNX's order."""
    from onnx.backend.test.case.node import collect_testcases

    wanted = set(op_types) if op_types is not None else set(TRANSLATORS)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = collect_testcases(None)
    picked = []
    for case in found:
        main = [n for n in case.model.graph.node if n.op_type != "Constant"]
        if len(main) == 1 and main[0].op_type in wanted:
            picked.append(case)
    return picked


def op_type_of(case: Any) -> str:
    return next(n.op_type for n in case.model.graph.node if n.op_type != "Constant")


class _Builder:
    """Builds one case's stages; translators ask it for inputs, values and stages."""

    def __init__(self, case: Any):
        from onnx import helper

        self.case = case
        self.node = next(n for n in case.model.graph.node if n.op_type != "Constant")
        self.attrs = {a.name: helper.get_attribute_value(a) for a in self.node.attribute}
        for key, value in list(self.attrs.items()):
            if hasattr(value, "dims"):
                self.attrs[key] = _array(value)
            elif isinstance(value, bytes):
                self.attrs[key] = value.decode()
        if len(case.data_sets) != 1:
            raise Inexpressible(f"{len(case.data_sets)} data sets")
        inputs, outputs = case.data_sets[0]
        self.values: dict[str, Any] = {}
        for info, value in zip(case.model.graph.input, inputs):
            self.values[info.name] = _array(value)
        for n in case.model.graph.node:
            if n.op_type == "Constant":
                if len(n.attribute) != 1 or n.attribute[0].name != "value":
                    raise Inexpressible(f"a Constant with {n.attribute[0].name}")
                self.values[n.output[0]] = _array(helper.get_attribute_value(n.attribute[0]))
        self.t = Translation(case.name, self.node.op_type)
        for value in outputs:
            value = _array(value)
            if not isinstance(value, np.ndarray):
                raise Inexpressible(f"an output of type {type(value).__name__} "
                                    "(sequences and optionals have no hetflow type)")
            self.t.expected.append(value)
        if len(self.t.expected) != sum(1 for name in self.node.output if name):
            raise Inexpressible("outputs the case does not give")
        for i, name in enumerate(self.node.input):
            if name:
                value = self.values.get(name)
                if not isinstance(value, np.ndarray):
                    raise Inexpressible(f"input {i} of type {type(value).__name__} "
                                        "(sequences and optionals have no hetflow type)")
                if hetflow_dtype(value) is None:
                    raise Inexpressible(f"dtype {value.dtype}, which hetflow lacks")
        for k, value in enumerate(self.t.expected):
            if hetflow_dtype(value) is None:
                raise Inexpressible(f"dtype {value.dtype}, which hetflow lacks")
        self._count = 0

    # inputs

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and bool(self.node.input[i])

    def value(self, i: int) -> np.ndarray | None:
        """The value the case gives input ``i`` (None where the node leaves it out)."""
        return self.values[self.node.input[i]] if self.has(i) else None

    def dtype(self, i: int) -> str:
        return hetflow_dtype(self.value(i))  # type: ignore[return-value]

    def load(self, i: int) -> str:
        """A ``load`` stage for input ``i``."""
        local = f"in{i}"
        if local not in self.t.loads:
            array = self.value(i)
            self.t.loads[local] = (array, self.dtype(i))
        return local

    # stages

    def stage(self, op: str, inputs: list[str], args: dict | None = None, dtype: str | None = None) -> str:
        self._count += 1
        local = f"s{self._count}"
        spec: dict[str, Any] = {"op": op}
        if inputs:
            spec["inputs"] = list(inputs)
        if args:
            spec["args"] = args
        if dtype:
            spec["dtype"] = dtype
        self.t.stages[local] = spec
        return local

    def out_dtype(self, k: int = 0) -> str:
        return hetflow_dtype(self.t.expected[k])  # type: ignore[return-value]

    def out_shape(self, k: int = 0) -> list[int]:
        return [int(n) for n in self.t.expected[k].shape]

    def output(self, local: str) -> None:
        self.t.outputs.append(local)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def only(self, *names: str, **defaults: Any) -> None:
        """Refuse attributes other than ``names``, and those of ``defaults`` unless at their default value."""
        for key, value in self.attrs.items():
            if key in names:
                continue
            if key in defaults and _same(value, defaults[key]):
                continue
            raise Inexpressible(f"attribute {key}={_show(value)}")


def _same(a: Any, b: Any) -> bool:
    return np.array_equal(np.asarray(a), np.asarray(b))


def _show(value: Any) -> str:
    return str(value.tolist() if isinstance(value, np.ndarray) else value)


def _ints(array: Any) -> list[int]:
    return [int(v) for v in np.asarray(array).reshape(-1)]


def _flag(op: str, key: str, value: Any) -> bool | int:
    """ONNX's 0/1 attribute ``value`` as the kind op ``op`` declares for ``key``: true/false or ONNX's integer."""
    from hetflow.executors.ops import REGISTRY

    spec = REGISTRY[op].args.get(key) if op in REGISTRY else None
    return bool(value) if spec is not None and spec.kind == "bool" else int(value)


def _number(array: Any) -> int | float | bool:
    v = np.asarray(array).reshape(-1)[0]
    if v.dtype.kind == "b":
        return bool(v)
    return int(v) if v.dtype.kind in "iu" else float(v)


# -- translators, one per ONNX op type --------------------------------------------------------------------------


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Equal": "eq", "Less": "lt", "Greater": "gt",
           "Pow": "pow", "Mod": "mod"}
_UNARY = {"Relu": "relu", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Tanh": "tanh", "Sigmoid": "sigmoid",
          "Abs": "abs", "Neg": "neg", "Erf": "erf"}


def _binary(b: _Builder) -> None:
    op = _BINARY[b.node.op_type]
    args = {}
    if op == "mod":
        b.only("fmod")
        if b.attr("fmod") is not None:
            args["fmod"] = _flag(op, "fmod", b.attr("fmod"))
    else:
        b.only()
    if op in ("div", "mod", "pow") and "int8" in (b.dtype(0), b.dtype(1)):
        raise Inexpressible("int8 is a quantized activation in hetflow (computed in float32, rounded back): "
                            f"ONNX's integer {op} of int8 has no counterpart")
    b.output(b.stage(op, [b.load(0), b.load(1)], args, b.out_dtype()))


def _unary(b: _Builder) -> None:
    b.only()
    b.output(b.stage(_UNARY[b.node.op_type], [b.load(0)], None, b.out_dtype()))


def _identity(b: _Builder) -> None:
    b.only()
    b.output(b.stage("cast", [b.load(0)], None, b.out_dtype()))


def _swish(b: _Builder) -> None:
    b.only(alpha=1.0)
    b.output(b.stage("silu", [b.load(0)], None, b.out_dtype()))


def _gelu(b: _Builder) -> None:
    b.only("approximate")
    b.output(b.stage("gelu", [b.load(0)], {"approximate": b.attr("approximate", "none")}, b.out_dtype()))


def _where(b: _Builder) -> None:
    b.only()
    b.output(b.stage("where", [b.load(0), b.load(1), b.load(2)], None, b.out_dtype()))


def _cast(b: _Builder) -> None:
    b.only("to", "saturate", round_mode="up")
    args = None if b.attr("saturate", 1) else {"saturate": 0}
    b.output(b.stage("cast", [b.load(0)], args, b.out_dtype()))


def _castlike(b: _Builder) -> None:
    b.only("saturate")
    args = None if b.attr("saturate", 1) else {"saturate": 0}
    b.output(b.stage("cast", [b.load(0)], args, b.out_dtype()))


def _variadic(op: str, mean: bool = False) -> Callable[[_Builder], None]:
    def translate(b: _Builder) -> None:
        b.only()
        n = len(b.node.input)
        dtype = b.out_dtype()
        if n == 1:
            b.output(b.stage("cast", [b.load(0)], None, dtype))
            return
        acc = b.load(0)
        for i in range(1, n):
            acc = b.stage(op, [acc, b.load(i)], None, dtype)
        if mean:
            acc = b.stage("div", [acc], {"value": float(n)}, dtype)
        b.output(acc)

    return translate


def _matmul(b: _Builder) -> None:
    b.only()
    b.output(b.stage("matmul", [b.load(0), b.load(1)], None, b.out_dtype()))


def _clip(b: _Builder) -> None:
    b.only()
    args = {}
    for i, key in ((1, "min"), (2, "max")):
        if b.has(i):
            args[key] = _number(b.value(i))
    b.output(b.stage("clip", [b.load(0)], args, b.out_dtype()))


def _softmax(b: _Builder) -> None:
    if _opset(b.case) < 13:
        raise Inexpressible("opset < 13 Softmax flattens the axes after 'axis'")
    b.only("axis")
    b.output(b.stage("softmax", [b.load(0)], {"axis": int(b.attr("axis", -1))}, b.out_dtype()))


def _opset(case: Any) -> int:
    return max((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _reduce(op: str) -> Callable[[_Builder], None]:
    def translate(b: _Builder) -> None:
        b.only("keepdims", "noop_with_empty_axes")
        keep = bool(b.attr("keepdims", 1))
        axes = _ints(b.value(1)) if b.has(1) else []
        if not axes and b.attr("noop_with_empty_axes", 0):
            b.output(b.stage("cast", [b.load(0)], None, b.out_dtype()))
            return
        args: dict[str, Any] = {"keepdims": keep}
        if len(axes) == 1:
            args["axis"] = axes[0]
        elif axes:
            args["axes"] = axes
        else:
            args["axis"] = None
        b.output(b.stage(op, [b.load(0)], args, b.out_dtype()))

    return translate


def _argreduce(op: str) -> Callable[[_Builder], None]:
    def translate(b: _Builder) -> None:
        b.only("axis", "keepdims", "select_last_index")
        args: dict[str, Any] = {"axis": int(b.attr("axis", 0)), "keepdims": bool(b.attr("keepdims", 1))}
        if b.attr("select_last_index", 0):
            args["select_last_index"] = _flag(op, "select_last_index", b.attr("select_last_index"))
        b.output(b.stage(op, [b.load(0)], args, b.out_dtype()))

    return translate


def _transpose(b: _Builder) -> None:
    b.only("perm")
    perm = b.attr("perm")
    b.output(b.stage("transpose", [b.load(0)], {"axes": [int(p) for p in perm] if perm is not None else None},
                     b.out_dtype()))


def _reshape_to_output(b: _Builder) -> None:
    """Reshape, Flatten, Squeeze, Unsqueeze: the shape ONNX's attributes and inputs give, written out."""
    b.only("allowzero", "axis")
    b.output(b.stage("reshape", [b.load(0)], {"shape": b.out_shape()}, b.out_dtype()))


def _concat(b: _Builder) -> None:
    b.only("axis")
    b.output(b.stage("concat", [b.load(i) for i in range(len(b.node.input))], {"axis": int(b.attr("axis"))},
                     b.out_dtype()))


def _split(b: _Builder) -> None:
    b.only("axis", "num_outputs")
    axis = int(b.attr("axis", 0))
    sizes = [int(e.shape[axis]) for e in b.t.expected]
    x = b.load(0)
    for k in range(len(sizes)):
        b.output(b.stage("split", [x], {"axis": axis, "sizes": sizes, "index": k}, b.out_dtype(k)))


def _slice(b: _Builder) -> None:
    b.only()
    starts, ends = _ints(b.value(1)), _ints(b.value(2))
    rank = b.value(0).ndim
    axes = _ints(b.value(3)) if b.has(3) else list(range(len(starts)))
    steps = _ints(b.value(4)) if b.has(4) else [1] * len(starts)
    acc = b.load(0)
    for axis, start, stop, step in zip(axes, starts, ends, steps):
        acc = b.stage("slice", [acc], {"axis": axis % rank, "start": start, "stop": stop, "step": step},
                      b.out_dtype())
    b.output(acc)


def _gather(b: _Builder) -> None:
    b.only("axis")
    b.output(b.stage("gather", [b.load(0), b.load(1)], {"axis": int(b.attr("axis", 0))}, b.out_dtype()))


def _range(b: _Builder) -> None:
    b.only()
    args = {"start": _number(b.value(0)), "stop": _number(b.value(1)), "step": _number(b.value(2))}
    b.output(b.stage("arange", [], args, b.out_dtype()))


def _constant_of_shape(b: _Builder) -> None:
    b.only("value")
    value = b.attr("value")
    b.output(b.stage("full", [], {"shape": _ints(b.value(0)), "value": _number(value) if value is not None else 0},
                     b.out_dtype()))


def _norm(op: str) -> Callable[[_Builder], None]:
    def translate(b: _Builder) -> None:
        b.only("axis", "epsilon", stash_type=1)
        x = b.value(0)
        axis = int(b.attr("axis", -1)) % x.ndim
        eps = float(b.attr("epsilon", 1e-5))
        weight = b.load(1)
        if b.value(1).shape != x.shape[axis:]:
            raise Inexpressible(f"a scale of shape {list(b.value(1).shape)} that broadcasts to the normalized axes")
        inputs = [b.load(0), weight]
        if op == "layernorm" and b.has(2):
            if b.value(2).shape != x.shape[axis:]:
                raise Inexpressible(f"a bias of shape {list(b.value(2).shape)} that broadcasts to the normalized axes")
            inputs.append(b.load(2))
        args: dict[str, Any] = {"eps": eps}
        if axis != x.ndim - 1:
            args["axis"] = axis
        b.output(b.stage(op, inputs, args, b.out_dtype()))
        if len(b.t.expected) > 1:
            _norm_statistics(b, axis, eps)

    return translate


def _norm_statistics(b: _Builder, axis: int, eps: float) -> None:
    """LayerNormalization's Mean and InvStdDev outputs, as the chain of hetflow ops that computes them."""
    x = b.value(0)
    lead, inner = int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64))
    flat = b.stage("reshape", [b.load(0)], {"shape": [lead, inner]}, "fp32")
    mean = b.stage("mean", [flat], {"axis": -1, "keepdims": True}, "fp32")
    b.output(b.stage("reshape", [mean], {"shape": b.out_shape(1)}, b.out_dtype(1)))
    if len(b.t.expected) > 2:
        centered = b.stage("sub", [flat, mean], None, "fp32")
        square = b.stage("mul", [centered, centered], None, "fp32")
        var = b.stage("mean", [square], {"axis": -1, "keepdims": True}, "fp32")
        std = b.stage("sqrt", [b.stage("add", [var], {"value": eps}, "fp32")], None, "fp32")
        one = b.stage("full", [], {"shape": [lead, 1], "value": 1.0}, "fp32")
        inv = b.stage("div", [one, std], None, "fp32")
        b.output(b.stage("reshape", [inv], {"shape": b.out_shape(2)}, b.out_dtype(2)))


def _attention(b: _Builder) -> None:
    b.only("q_num_heads", "kv_num_heads", "is_causal", "scale", softcap=0.0, qk_matmul_output_mode=0,
           left_window_size=-1, right_window_size=-1, softmax_precision=1)
    if len(b.t.expected) > 1:
        raise Inexpressible("outputs beyond Y (present key/value, qk_matmul_output)")
    for i, what in ((4, "past_key"), (5, "past_value"), (6, "nonpad_kv_seqlen")):
        if b.has(i):
            raise Inexpressible(f"input {what}")
    args: dict[str, Any] = {}
    if b.attr("is_causal", 0):
        args["causal"] = True
    if b.attr("scale") is not None:
        args["scale"] = float(b.attr("scale"))
    for key in ("q_num_heads", "kv_num_heads"):
        if b.attr(key) is not None:
            args[key] = int(b.attr(key))
    inputs = [b.load(0), b.load(1), b.load(2)]
    if b.has(3):
        inputs.append(b.load(3))
    b.output(b.stage("attention", inputs, args, b.out_dtype()))


def _rope(b: _Builder) -> None:
    raise Inexpressible("RotaryEmbedding takes cos/sin caches (here random) and position ids as inputs; "
                        "hetflow's rope computes its angles from base and offset")


def _quantize(b: _Builder) -> None:
    b.only("axis", saturate=1, precision=0, output_dtype=0, block_size=0)
    _symmetric(b)
    target = b.out_dtype()
    if target not in ("int8", "int4", "fp8e4m3", "fp8e5m2"):
        raise Inexpressible(f"output dtype {target}: hetflow quantizes to int8, int4, fp8e4m3, fp8e5m2")
    b.output(b.stage("quantize", [b.load(0), _scale(b)], None, target))


def _dequantize(b: _Builder) -> None:
    b.only("axis", block_size=0, output_dtype=0)
    _symmetric(b)
    if b.dtype(0) not in ("int8", "int4", "fp8e4m3", "fp8e5m2"):
        raise Inexpressible(f"input dtype {b.dtype(0)}: hetflow dequantizes int8, int4, fp8e4m3, fp8e5m2")
    b.output(b.stage("dequantize", [b.load(0), _scale(b)], None, b.out_dtype()))


def _symmetric(b: _Builder) -> None:
    if b.has(2) and np.any(np.asarray(b.value(2)).astype(np.float64) != 0):
        raise Inexpressible("a nonzero zero point: hetflow's quantization is symmetric")


def _scale(b: _Builder) -> str:
    """The scale input, shaped to broadcast along ONNX's ``axis`` (per-axis scales are 1-D in ONNX)."""
    scale, x = b.value(1), b.value(0)
    if scale.ndim != 1 or x.ndim == 1:
        return b.load(1)
    axis = int(b.attr("axis", 1)) % x.ndim
    shape = [1] * x.ndim
    shape[axis] = scale.shape[0]
    return b.stage("reshape", [b.load(1)], {"shape": shape}, b.dtype(1))


TRANSLATORS: dict[str, Callable[[_Builder], None]] = {
    **{t: _binary for t in _BINARY}, **{t: _unary for t in _UNARY},
    "Identity": _identity, "Swish": _swish, "Gelu": _gelu, "Where": _where, "Cast": _cast, "CastLike": _castlike,
    "Sum": _variadic("add"), "Mean": _variadic("add", mean=True), "Max": _variadic("maximum"),
    "Min": _variadic("minimum"), "MatMul": _matmul, "Clip": _clip, "Softmax": _softmax,
    "ReduceSum": _reduce("sum"), "ReduceMean": _reduce("mean"), "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"), "ArgMax": _argreduce("argmax"), "ArgMin": _argreduce("argmin"),
    "Transpose": _transpose, "Reshape": _reshape_to_output, "Flatten": _reshape_to_output,
    "Squeeze": _reshape_to_output, "Unsqueeze": _reshape_to_output, "Concat": _concat, "Split": _split,
    "Slice": _slice, "Gather": _gather, "Range": _range, "ConstantOfShape": _constant_of_shape,
    "LayerNormalization": _norm("layernorm"), "RMSNormalization": _norm("rmsnorm"), "Attention": _attention,
    "RotaryEmbedding": _rope, "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize,
}


def translate(case: Any) -> Translation:
    """Case ``case`` as stages; :class:`Inexpressible` with the reason when it cannot be."""
    b = _Builder(case)
    TRANSLATORS[b.node.op_type](b)
    b.t.exact = b.node.op_type in _EXACT_OPS or all(hetflow_dtype(e) not in _FLOATS for e in b.t.expected)
    return b.t


_FLOATS = frozenset({"fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2", "fp64"})


# -- manifests, runs, comparison --------------------------------------------------------------------------------


def _flow(value: Any) -> str:
    """``value`` as YAML flow text; floats keep every digit and a point (PyYAML reads ``1e-05`` as a string).

    >>> _flow({"eps": 1e-05, "shape": [2, 3], "min": float("-inf"), "name": "x"})
    '{"eps": 1.0e-05, "shape": [2, 3], "min": -.inf, "name": "x"}'
    """
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, float):
        if np.isnan(value):
            return ".nan"
        if np.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return text if not e or "." in mantissa else f"{mantissa}.0e{exponent}"
    return json.dumps(value)


def write_manifest(batch: dict[int, Translation], folder: str, name: str) -> tuple[str, dict[int, int]]:
    """Write ``name``.yaml and its ``.npz`` into ``folder``; return its path and line -> case index."""
    arrays, lines, owner = {}, ["version: 1", f"name: {name}", "executors: {a: {vendor: cpu}, b: {vendor: cpu}}",
                                "stages:"], {}
    outputs = []
    for i, t in batch.items():
        def emit(text: str) -> None:
            lines.append(text)
            owner[len(lines)] = i

        for local, (array, dtype) in t.loads.items():
            key = f"c{i}_{local}"
            carried = _CARRIED.get(dtype)
            arrays[key] = np.asarray(array).astype(carried) if carried is not None else np.asarray(array)
            spec = {"op": "load", "args": {"path": f"{name}.npz", "key": key}, "dtype": dtype, "executor": "a"}
            emit(f"  {key}: {_flow(spec)}")
        for variant, executor in (("o", "a"), ("b", "b")):
            if variant == "b" and not t.loads:
                # a source op has no input to carry: the bridge carries its result to b instead
                for k, local in enumerate(t.outputs):
                    spec = {"op": "reshape", "inputs": [f"c{i}_o_{local}"],
                            "args": {"shape": [int(n) for n in t.expected[k].shape]},
                            "dtype": hetflow_dtype(t.expected[k]), "executor": "b"}
                    emit(f"  c{i}_b_{local}: {_flow(spec)}")
            else:
                for local, spec in t.stages.items():
                    spec = dict(spec, executor=executor)
                    if "inputs" in spec:
                        spec["inputs"] = [f"c{i}_{x}" if x in t.loads else f"c{i}_{variant}_{x}"
                                          for x in spec["inputs"]]
                    emit(f"  c{i}_{variant}_{local}: {_flow(spec)}")
            for k, local in enumerate(t.outputs):
                outputs.append((i, f"c{i}_{variant}{k}", f"c{i}_{variant}_{local}"))
    lines.append("outputs:")
    for i, out, stage in outputs:
        lines.append(f"  {out}: {stage}")
        owner[len(lines)] = i
    path = os.path.join(folder, f"{name}.yaml")
    np.savez(os.path.join(folder, f"{name}.npz"), **arrays)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path, owner


def _cli(path: str, runs: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", path, "--runs-dir", runs, "--no-cache",
                           "--quiet", "--json"], capture_output=True, text=True, timeout=600)
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"hetflow run {path} printed no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}")


_STAGE = re.compile(r"stage '?c(\d+)_")


def run_batch(batch: dict[int, Translation], folder: str, name: str) -> tuple[dict[int, str], dict[int, tuple]]:
    """Run ``batch`` through the CLI: (case -> why it failed, case -> (plain outputs, bridged outputs))."""
    from hetflow.engine.records import load_output

    failed: dict[int, str] = {}
    pending = dict(batch)
    for attempt in range(len(batch) + 1):
        if not pending:
            return failed, {}
        path, owner = write_manifest(pending, folder, f"{name}_{attempt}")
        result = _cli(path, os.path.join(folder, "runs"))
        if result.get("status") == "error":
            blamed = {}
            for d in result.get("diagnostics") or []:
                i = owner.get(d.get("line")) if d.get("file", "").endswith(".yaml") else None
                if i is None:
                    found = _STAGE.search(d.get("message", ""))
                    i = int(found.group(1)) if found else None
                if i is not None and i in pending:
                    blamed.setdefault(i, f"validate: {d['message']}")
            if not blamed:
                raise RuntimeError(f"hetflow run {path} refused it without naming a case: {result.get('message')}")
        elif result.get("status") == "succeeded":
            run_dir = os.path.dirname(result["record"])
            got = {}
            for i, t in pending.items():
                got[i] = tuple([load_output(run_dir, f"c{i}_{v}{k}") for k in range(len(t.outputs))] for v in "ob")
            return failed, got
        else:
            with open(result["record"], encoding="utf-8") as f:
                record = json.load(f)
            blamed = {}
            for stage, node in record.get("nodes", {}).items():
                found = _STAGE.match(stage)
                if node.get("status") == "failed" and found and int(found.group(1)) in pending:
                    blamed.setdefault(int(found.group(1)), f"run: {node.get('error', '')}")
            if not blamed:
                found = _STAGE.search(result.get("error", ""))
                if not found:
                    raise RuntimeError(f"hetflow run {path} failed without naming a case: {result.get('error')}")
                blamed[int(found.group(1))] = f"run: {result.get('error')}"
        for i, why in blamed.items():
            failed[i] = why.splitlines()[0]
            pending.pop(i)
    return failed, {}


def compare(t: Translation, got: list, bridged: list) -> str | None:
    """Why ``got`` is not ONNX's result (or the bridged run's bytes differ), or None."""
    for k, (want, have, other) in enumerate(zip(t.expected, got, bridged)):
        tag = f"output {k}: " if len(t.expected) > 1 else ""
        if tuple(have.shape) != tuple(want.shape):
            return f"{tag}shape {list(have.shape)}, ONNX {list(want.shape)}"
        if hetflow_dtype(have) != hetflow_dtype(want):
            return f"{tag}dtype {hetflow_dtype(have)}, ONNX {hetflow_dtype(want)}"
        if have.tobytes() != other.tobytes():
            return f"{tag}the bridged run gave other bytes than the plain one"
        problem = _values(t, want, have)
        if problem:
            return tag + problem
    return None


def _values(t: Translation, want: np.ndarray, have: np.ndarray) -> str | None:
    dtype = hetflow_dtype(want)
    if dtype in _FLOATS:
        w, h = want.astype(np.float64), have.astype(np.float64)
        if t.exact:
            bad = ~((w == h) | (np.isnan(w) & np.isnan(h)))
        else:
            rtol = max(1e-4, 2 * float(ml_dtypes.finfo(want.dtype).eps)) if dtype not in ("fp32", "fp64") else 1e-4
            bad = ~np.isclose(h, w, rtol=rtol, atol=1e-5, equal_nan=True)
    else:
        w, h = want.astype(np.int64), have.astype(np.int64)
        bad = w != h
    if not bad.any():
        return None
    where = tuple(int(v) for v in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} values differ{' (exact op)' if t.exact and dtype in _FLOATS else ''}; "
            f"first at {list(where)}: got {h[where]!r}, ONNX {w[where]!r}")


def run_cases(cases: list[Any], folder: str, chunk: int = CHUNK) -> list[Outcome]:
    """Translate, run and compare ``cases``; one :class:`Outcome` per case, in order."""
    outcomes: list[Outcome | None] = [None] * len(cases)
    expressible: dict[int, Translation] = {}
    for i, case in enumerate(cases):
        try:
            expressible[i] = translate(case)
        except Inexpressible as e:
            outcomes[i] = Outcome(case.name, op_type_of(case), "inexpressible", str(e))
    order = sorted(expressible, key=lambda i: (expressible[i].op_type, i))
    for start in range(0, len(order), chunk):
        batch = {i: expressible[i] for i in order[start:start + chunk]}
        failed, got = run_batch(batch, folder, f"onnx{start // chunk}")
        for i, t in batch.items():
            why = failed.get(i) or compare(t, *got[i])
            outcomes[i] = Outcome(t.name, t.op_type, "failed" if why else "passed", why or "")
    return outcomes  # type: ignore[return-value]


def summarize(outcomes: list[Outcome]) -> str:
    """A table per op type (cases, expressible, passed, failed), totals per group, and the reasons grouped."""
    rows: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        rows[o.op_type]["cases"] += 1
        rows[o.op_type][o.status] += 1
    lines = [f"{'op type':<20} {'cases':>5} {'expr':>5} {'pass':>5} {'fail':>5}"]
    for group, types in (("today's op types", TODAY), ("issue 28's nine", NEW), ("also new (neg, mod)", ALSO_NEW)):
        total = Counter()
        for op_type in types:
            if op_type not in rows:
                continue
            r = rows[op_type]
            expr = r["passed"] + r["failed"]
            total.update({"types": 1, "cases": r["cases"], "expr": expr, "passed": r["passed"], "failed": r["failed"]})
            lines.append(f"{op_type:<20} {r['cases']:>5} {expr:>5} {r['passed']:>5} {r['failed']:>5}")
        lines.append(f"{'= ' + group:<20} {total['cases']:>5} {total['expr']:>5} {total['passed']:>5} "
                     f"{total['failed']:>5}   ({total['types']} op types)")
        lines.append("")
    all_expr = sum(o.status != "inexpressible" for o in outcomes)
    passed, failed = (sum(o.status == s for o in outcomes) for s in ("passed", "failed"))
    lines.append(f"total: {len(outcomes)} cases, {all_expr} expressible, {passed} pass, {failed} fail")
    for status in ("failed", "inexpressible"):
        groups: dict[str, list[str]] = defaultdict(list)
        for o in outcomes:
            if o.status == status:
                groups[f"{o.op_type}: {_general(o.reason)}"].append(o.name.removeprefix("test_"))
        if groups:
            lines.append("")
            lines.append(f"{status}, grouped by reason:")
            for reason, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                lines.append(f"  {len(names):>3}  {reason}")
                lines.append(f"       {', '.join(names)}")
    return "\n".join(lines)


def _general(reason: str) -> str:
    """A reason with its case-specific details (stage names, positions, values) blurred, so like ones group."""
    reason = re.sub(r"c\d+_[ob]?_?\w*", "STAGE", reason)
    reason = re.sub(r"\.yaml:\d+:\d+", ".yaml", reason)
    reason = re.sub(r"first at .*", "", reason)
    return re.sub(r"^\d+ of \d+ values", "values", reason).strip()
