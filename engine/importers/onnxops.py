"""ONNX op types as hetflow stages: one translator per op type, in one table.

:data:`TRANSLATORS` maps an ONNX op type (default domain) to a function
that writes one node as hetflow stages. Two callers share it: the
importer (:mod:`hetflow.engine.importers.onnximport`), where a node's inputs are
graph inputs, initializers or other nodes' outputs with the shapes ONNX's
shape inference gives, and the conformance tests (``tests/onnxcases.py``),
where they are the values an ONNX node test case gives. Each implements
:class:`NodeContext`, the only thing a translator talks to.

The rules a translator follows:

- **Attributes to args.** An attribute hetflow has an arg for becomes that
  arg; one it has none for is refused by :meth:`NodeContext.only` unless
  it is at ONNX's default value, so a node is never run with a meaning it
  does not have.
- **Inputs that are arguments.** An input hetflow takes as an argument
  (Clip's ``min``, a reduction's ``axes``, Slice's ``starts``) must be a
  constant (:meth:`NodeContext.const`); a computed one is
  :class:`Inexpressible`. So are Reshape's ``shape``, Squeeze's and
  Unsqueeze's ``axes`` and Split's ``split``: the stages they become have
  the output shape written out, which a value given at run time could
  only contradict. Constants folded at import count (``x.reshape(
  x.shape[0], -1)``).
- **Outputs by position.** An omitted output (an empty name, as
  LayerNormalization's ``["y", "", "isd"]``) keeps its place:
  ``out_shape(k)`` and ``output(local, k)`` count every position of
  ``node.output``, and :meth:`NodeContext.has_output` says which are
  there.
- **Broadcasting.** hetflow's elementwise ops broadcast as numpy does,
  which is ONNX's multidirectional broadcasting, so binary ops map one to
  one. A scalar constant second operand of a float op becomes the op's
  ``value`` arg (``x / 8.0``) instead of a stage of its own.
- **Opset differences.** Softmax before opset 13 flattens the axes from
  ``axis`` on; it means hetflow's ``softmax`` only when ``axis`` is the
  last axis. Inputs that were attributes in older opsets (Clip's min/max
  before 11, Slice's starts before 10, reductions' axes before 13/18) are
  read from whichever the node has.
- **Several stages for one node.** Variadic Sum/Max/Min chain binary ops;
  Slice over several axes is one ``slice`` per axis; Split is one
  ``split`` per output. The last stage of each output has ONNX's output
  dtype.

Examples
--------
>>> hetflow_dtype(np.zeros(2, np.int64))
'int64'
>>> hetflow_dtype(np.zeros(2, np.uint16)) is None
True
>>> sorted(t for t in TRANSLATORS if t.startswith("Reduce"))
['ReduceMax', 'ReduceMean', 'ReduceMin', 'ReduceSum']
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["Inexpressible", "NodeContext", "TRANSLATORS", "CARRIED", "hetflow_dtype", "flow", "stage_spec",
           "sparse_to_array"]


_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8e4m3",
           "float8_e5m2": "fp8e5m2", "int8": "int8", "int4": "int4", "int16": "int16", "int32": "int32",
           "int64": "int64", "uint8": "uint8", "bool": "bool", "float64": "fp64"}

CARRIED = {"bf16": np.float32, "fp8e4m3": np.float32, "fp8e5m2": np.float32, "int4": np.int8}
"""How a value of a dtype ``.npz``/``.safetensors`` from numpy cannot hold travels to ``load``: a type that holds
its values exactly, the stage's ``dtype:`` naming the real one."""


class Inexpressible(Exception):
    """The node cannot be written as hetflow stages; the message says why, in one line."""


def stage_spec(op: str, inputs: list[str], args: dict | None = None, dtype: str | None = None) -> dict[str, Any]:
    """A stage's entry as a manifest writes it: ``op``, then ``inputs``, ``args`` and ``dtype`` where given.

    >>> stage_spec("add", ["a", "b"], {"value": 2.0})
    {'op': 'add', 'inputs': ['a', 'b'], 'args': {'value': 2.0}}
    >>> stage_spec("zeros", [], dtype="int64")
    {'op': 'zeros', 'dtype': 'int64'}
    """
    spec: dict[str, Any] = {"op": op}
    if inputs:
        spec["inputs"] = list(inputs)
    if args:
        spec["args"] = args
    if dtype:
        spec["dtype"] = dtype
    return spec


def hetflow_dtype(array: Any) -> str | None:
    """The hetflow dtype name of a numpy (or ml_dtypes) array's values, or None where hetflow has none."""
    return _DTYPES.get(str(np.asarray(array).dtype))


class NodeContext:
    """What a translator sees of one ONNX node: its attributes, inputs and outputs, and where stages go.

    Subclasses give the inputs (``has``, ``const``, ``folded``, ``shape``,
    ``dtype``, ``input``), the outputs (``n_outputs``, ``out_shape``,
    ``out_dtype``) and take the stages (``stage``, ``output``). ``node``
    is the ``NodeProto``; ``opset`` the model's default-domain opset.
    """

    node: Any
    opset: int
    attrs: dict[str, Any]

    def __init__(self, node: Any, opset: int) -> None:
        import onnx
        from onnx import helper, numpy_helper

        self.node, self.opset = node, opset
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for key, value in list(self.attrs.items()):
            if isinstance(value, onnx.SparseTensorProto):
                self.attrs[key] = sparse_to_array(value)
            elif hasattr(value, "dims"):
                self.attrs[key] = numpy_helper.to_array(value)
            elif isinstance(value, bytes):
                self.attrs[key] = value.decode()

    # inputs, given by subclasses

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and bool(self.node.input[i])

    def const(self, i: int) -> np.ndarray:
        """The value of input ``i``, which hetflow takes as an argument; :class:`Inexpressible` when not known."""
        raise NotImplementedError

    def folded(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` when it is a constant of the model (an initializer, a Constant), else None."""
        return None

    def shape(self, i: int) -> tuple[int, ...]:
        raise NotImplementedError

    def dtype(self, i: int) -> str:
        raise NotImplementedError

    def input(self, i: int) -> str:
        """The stage that gives input ``i``."""
        raise NotImplementedError

    # outputs and stages, given by subclasses

    def n_outputs(self) -> int:
        """How many outputs the node gives (omitted ones, with an empty name, not counted)."""
        return sum(1 for name in self.node.output if name)

    def has_output(self, k: int) -> bool:
        """Whether output position ``k`` is there: ``["y", "", "isd"]`` has 0 and 2, not 1."""
        return k < len(self.node.output) and bool(self.node.output[k])

    def out_shape(self, k: int = 0) -> list[int]:
        """The shape of the output at position ``k`` of ``node.output``."""
        raise NotImplementedError

    def out_dtype(self, k: int = 0) -> str:
        raise NotImplementedError

    def stage(self, op: str, inputs: list[str], args: dict | None = None, dtype: str | None = None) -> str:
        """Add a stage; return the local name the next stages use as an input."""
        raise NotImplementedError

    def output(self, local: str, k: int | None = None) -> None:
        """Stage ``local`` gives the output at position ``k`` (default: the next one there after the last given).

        A translator gives its outputs in the order of their positions."""
        raise NotImplementedError

    # attributes

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

    def scalar(self, i: int) -> float | None:
        """Input ``i`` as a Python float when it is a one-value float constant of the model, else None."""
        value = self.folded(i)
        if value is None or value.size != 1 or value.dtype.kind != "f":
            return None
        return float(value.reshape(-1)[0])


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


def sparse_to_array(sparse: Any) -> np.ndarray:
    """A ``SparseTensorProto`` as the dense array it stands for (ONNX's numpy_helper reads only dense ones).

    Its indices are either linear, ``[NNZ]``, or one row of coordinates per value, ``[NNZ, rank]``.
    """
    from onnx import numpy_helper

    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(dims, values.dtype)
    if indices.ndim == 2:
        dense[tuple(indices.T)] = values
    else:
        dense.reshape(-1)[indices] = values
    return dense


def flow(value: Any) -> str:
    """``value`` as YAML flow text; floats keep every digit and a point (PyYAML reads ``1e-05`` as a string).

    >>> flow({"eps": 1e-05, "shape": [2, 3], "min": float("-inf"), "name": "x"})
    '{"eps": 1.0e-05, "shape": [2, 3], "min": -.inf, "name": "x"}'
    """
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flow(k) if not isinstance(k, str) else _key(k)}: {flow(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, float):
        if np.isnan(value):
            return ".nan"
        if np.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        return text if not e or "." in mantissa else f"{mantissa}.0e{exponent}"
    import json

    return json.dumps(value)


def _key(key: str) -> str:
    import json

    return json.dumps(key)


# -- translators, one per ONNX op type --------------------------------------------------------------------------


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Equal": "eq", "Less": "lt", "Greater": "gt",
           "Pow": "pow", "Mod": "mod"}
_UNARY = {"Relu": "relu", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Tanh": "tanh", "Sigmoid": "sigmoid",
          "Abs": "abs", "Neg": "neg", "Erf": "erf"}
_FLOAT_DTYPES = frozenset({"fp32", "fp16", "bf16", "fp64"})
#: ops whose ``value`` arg stands for a second operand: ``x OP value``, the same result as broadcasting it
_VALUE_OPS = frozenset({"add", "sub", "mul", "div", "pow"})


def _binary(b: NodeContext) -> None:
    op = _BINARY[b.node.op_type]
    args: dict[str, Any] = {}
    if op == "mod":
        b.only("fmod")
        if b.attr("fmod") is not None:
            args["fmod"] = _flag(op, "fmod", b.attr("fmod"))
    else:
        b.only()
    if b.out_dtype() in _NARROW and op in _ARITHMETIC:
        wide = b.stage(op, [_as_int32(b, 0), _as_int32(b, 1)], args or None, "int32")
        b.output(_wrapped(b, wide, b.out_dtype()))
        return
    value = b.scalar(1)
    # folded only where broadcasting the scalar changes nothing: the output has x's shape and float type
    if (op in _VALUE_OPS and value is not None and b.dtype(0) in _FLOAT_DTYPES
            and list(b.shape(0)) == b.out_shape()):
        b.output(b.stage(op, [b.input(0)], {**args, "value": value}, b.out_dtype()))
        return
    b.output(b.stage(op, [b.input(0), b.input(1)], args or None, b.out_dtype()))


def _unary(b: NodeContext) -> None:
    b.only()
    op = _UNARY[b.node.op_type]
    if b.out_dtype() in _NARROW and op in _ARITHMETIC:
        b.output(_wrapped(b, b.stage(op, [_as_int32(b, 0)], None, "int32"), b.out_dtype()))
        return
    b.output(b.stage(op, [b.input(0)], None, b.out_dtype()))


# ONNX's int8 is an integer type: its arithmetic wraps, a float becomes one toward zero and a wider integer by
# dropping its high bits (Cast's rules; the node tests' int4 casts wrap too). hetflow's int8 and int4 are quantized
# activations that round and saturate. So that arithmetic, and those casts, go through int32, where they are exact
# (or wrap, which keeps the low bits), and the result is wrapped to the narrow type by ops every executor runs on
# integers (a cast to uint8 keeps the low byte everywhere; Vulkan has no integer division or remainder).
_NARROW = ("int8", "int4")
#: hetflow ops whose integer result may leave int8's range
_ARITHMETIC = frozenset({"add", "sub", "mul", "div", "mod", "pow", "neg", "abs"})


def _as_int32(b: NodeContext, i: int) -> str:
    return b.input(i) if b.dtype(i) == "int32" else b.stage("cast", [b.input(i)], None, "int32")


def _wrapped(b: NodeContext, wide: str, target: str) -> str:
    """Stage ``wide`` (int32) as ``target`` (int8 or int4), keeping its low bits, two's complement."""
    if target == "int4":
        wide = b.stage("mul", [wide], {"value": 16}, "int32")  # its low 4 bits, the high 4 of the low byte
    low = b.stage("cast", [b.stage("cast", [wide], None, "uint8")], None, "int32")  # the low byte, 0..255
    negative = b.stage("ge", [low], {"value": 128}, "bool")
    signed = b.stage("where", [negative, b.stage("sub", [low], {"value": 256}, "int32"), low], None, "int32")
    if target == "int8":
        return b.stage("cast", [signed], None, "int8")
    sixteenths = b.stage("mul", [b.stage("cast", [signed], None, "fp32")], {"value": 0.0625}, "fp32")  # exact
    return b.stage("cast", [sixteenths], None, "int4")


def _cast_node(b: NodeContext, args: dict | None) -> None:
    target, source = b.out_dtype(), b.dtype(0)
    if target in _NARROW and source not in ("bool", target) and not (source == "int4" and target == "int8"):
        b.output(_wrapped(b, _as_int32(b, 0), target))
        return
    b.output(b.stage("cast", [b.input(0)], args, target))


def _identity(b: NodeContext) -> None:
    b.only()
    b.output(b.stage("cast", [b.input(0)], None, b.out_dtype()))


def _dropout(b: NodeContext) -> None:
    """Dropout as inference runs it: its input as it is. Training (``training_mode`` true, or ``is_test`` 0 before
    opset 7) draws a random mask, which no stage of hetflow's reproduces as ONNX's would."""
    b.only("seed", "ratio", is_test=1)
    if b.opset < 7 and b.attr("is_test") != 1:
        raise Inexpressible("is_test is 0 (its default before opset 7): a random mask")
    training = b.folded(2) if b.has(2) else np.array(False)
    if training is None:
        raise Inexpressible("training_mode is computed at run time")
    ratio = b.folded(1) if b.has(1) else np.array(b.attr("ratio", 0.5))
    if bool(np.asarray(training).reshape(-1)[0]) and (ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0):
        raise Inexpressible("training_mode is true: a random mask")
    b.output(b.stage("cast", [b.input(0)], None, b.out_dtype()), 0)
    if b.has_output(1):  # inference drops nothing: the mask is all true
        b.output(b.stage("full", [], {"shape": b.out_shape(1), "value": 1}, "bool"), 1)


def _swish(b: NodeContext) -> None:
    b.only(alpha=1.0)
    b.output(b.stage("silu", [b.input(0)], None, b.out_dtype()))


def _gelu(b: NodeContext) -> None:
    b.only("approximate")
    b.output(b.stage("gelu", [b.input(0)], {"approximate": b.attr("approximate", "none")}, b.out_dtype()))


def _where(b: NodeContext) -> None:
    b.only()
    b.output(b.stage("where", [b.input(0), b.input(1), b.input(2)], None, b.out_dtype()))


def _cast(b: NodeContext) -> None:
    b.only("to", "saturate", round_mode="up")
    _cast_node(b, None if b.attr("saturate", 1) else {"saturate": 0})


def _castlike(b: NodeContext) -> None:
    b.only("saturate")
    _cast_node(b, None if b.attr("saturate", 1) else {"saturate": 0})


def _variadic(op: str, mean: bool = False) -> Callable[[NodeContext], None]:
    def translate(b: NodeContext) -> None:
        b.only()
        n = len(b.node.input)
        dtype = b.out_dtype()
        if n == 1:
            b.output(b.stage("cast", [b.input(0)], None, dtype))
            return
        acc = b.input(0)
        for i in range(1, n):
            acc = b.stage(op, [acc, b.input(i)], None, dtype)
        if mean:
            acc = b.stage("div", [acc], {"value": float(n)}, dtype)
        b.output(acc)

    return translate


def _matmul(b: NodeContext) -> None:
    b.only()
    b.output(b.stage("matmul", [b.input(0), b.input(1)], None, b.out_dtype()))


def _clip(b: NodeContext) -> None:
    b.only("min", "max")       # attributes before opset 11, inputs since
    args = {}
    for i, key in ((1, "min"), (2, "max")):
        if b.has(i):
            args[key] = _number(b.const(i))
        elif b.attr(key) is not None:
            args[key] = float(b.attr(key))
    b.output(b.stage("clip", [b.input(0)], args, b.out_dtype()))


def _softmax(b: NodeContext) -> None:
    b.only("axis")
    rank = len(b.shape(0))
    if b.opset < 13:
        # before 13: softmax over the axes from `axis` on, flattened (default 1); the same as ours on the last axis
        axis = int(b.attr("axis", 1)) % max(rank, 1)
        if axis != rank - 1:
            raise Inexpressible(f"opset {b.opset} Softmax over axes {axis}..{rank - 1} flattened "
                                "(hetflow's softmax is along one axis)")
        b.output(b.stage("softmax", [b.input(0)], {"axis": -1}, b.out_dtype()))
        return
    b.output(b.stage("softmax", [b.input(0)], {"axis": int(b.attr("axis", -1))}, b.out_dtype()))


def _reduce(op: str) -> Callable[[NodeContext], None]:
    def translate(b: NodeContext) -> None:
        b.only("keepdims", "noop_with_empty_axes", "axes")    # axes: an attribute before opset 13 (18 for most)
        keep = bool(b.attr("keepdims", 1))
        if b.has(1):
            axes = _ints(b.const(1))
        else:
            axes = [int(a) for a in b.attr("axes", [])]
        if not axes and b.attr("noop_with_empty_axes", 0):
            b.output(b.stage("cast", [b.input(0)], None, b.out_dtype()))
            return
        args: dict[str, Any] = {"keepdims": keep}
        if len(axes) == 1:
            args["axis"] = axes[0]
        elif axes:
            args["axes"] = axes
        else:
            args["axis"] = None
        b.output(b.stage(op, [b.input(0)], args, b.out_dtype()))

    return translate


def _argreduce(op: str) -> Callable[[NodeContext], None]:
    def translate(b: NodeContext) -> None:
        b.only("axis", "keepdims", "select_last_index")
        args: dict[str, Any] = {"axis": int(b.attr("axis", 0)), "keepdims": bool(b.attr("keepdims", 1))}
        if b.attr("select_last_index", 0):
            args["select_last_index"] = _flag(op, "select_last_index", b.attr("select_last_index"))
        b.output(b.stage(op, [b.input(0)], args, b.out_dtype()))

    return translate


def _transpose(b: NodeContext) -> None:
    b.only("perm")
    perm = b.attr("perm")
    b.output(b.stage("transpose", [b.input(0)], {"axes": [int(p) for p in perm] if perm is not None else None},
                     b.out_dtype()))


def _reshape_to_output(b: NodeContext) -> None:
    """Reshape, Flatten, Squeeze, Unsqueeze: the shape ONNX's attributes and inputs give, written out."""
    b.only("allowzero", "axis", "axes")
    if b.has(1):
        b.const(1)   # the shape written out is the one this value gives; one given at run time is refused
    b.output(b.stage("reshape", [b.input(0)], {"shape": b.out_shape()}, b.out_dtype()))


def _concat(b: NodeContext) -> None:
    b.only("axis")
    b.output(b.stage("concat", [b.input(i) for i in range(len(b.node.input))], {"axis": int(b.attr("axis"))},
                     b.out_dtype()))


def _split(b: NodeContext) -> None:
    b.only("axis", "num_outputs", "split")
    axis = int(b.attr("axis", 0))
    # the sizes of every part, an omitted output's too: ONNX's split (an input since opset 13, an attribute
    # before), else equal parts, the last smaller where the axis does not divide (num_outputs, opset 18)
    if b.has(1):
        sizes = _ints(b.const(1))
    elif b.attr("split") is not None:
        sizes = [int(n) for n in b.attr("split")]
    else:
        length = int(b.shape(0)[axis])
        parts = len(b.node.output)
        chunk = -(-length // parts)
        sizes = [max(0, min(chunk, length - k * chunk)) for k in range(parts)]
    x = b.input(0)
    for k in range(len(sizes)):
        if b.has_output(k):
            b.output(b.stage("split", [x], {"axis": axis, "sizes": sizes, "index": k}, b.out_dtype(k)), k)


def _slice(b: NodeContext) -> None:
    b.only()
    starts, ends = _ints(b.const(1)), _ints(b.const(2))
    rank = len(b.shape(0))
    axes = _ints(b.const(3)) if b.has(3) else list(range(len(starts)))
    steps = _ints(b.const(4)) if b.has(4) else [1] * len(starts)
    acc = b.input(0)
    for axis, start, stop, step in zip(axes, starts, ends, steps):
        acc = b.stage("slice", [acc], {"axis": axis % rank, "start": start, "stop": stop, "step": step},
                      b.out_dtype())
    b.output(acc)


def _gather(b: NodeContext) -> None:
    b.only("axis")
    b.output(b.stage("gather", [b.input(0), b.input(1)], {"axis": int(b.attr("axis", 0))}, b.out_dtype()))


def _range(b: NodeContext) -> None:
    b.only()
    args = {"start": _number(b.const(0)), "stop": _number(b.const(1)), "step": _number(b.const(2))}
    b.output(b.stage("arange", [], args, b.out_dtype()))


def _constant_of_shape(b: NodeContext) -> None:
    b.only("value")
    value = b.attr("value")
    b.output(b.stage("full", [], {"shape": _ints(b.const(0)), "value": _number(value) if value is not None else 0},
                     b.out_dtype()))


def _norm(op: str) -> Callable[[NodeContext], None]:
    def translate(b: NodeContext) -> None:
        b.only("axis", "epsilon", stash_type=1)
        shape = tuple(b.shape(0))
        axis = int(b.attr("axis", -1)) % len(shape)
        eps = float(b.attr("epsilon", 1e-5))
        if tuple(b.shape(1)) != shape[axis:]:
            raise Inexpressible(f"a scale of shape {list(b.shape(1))} that broadcasts to the normalized axes")
        inputs = [b.input(0), b.input(1)]
        if op == "layernorm" and b.has(2):
            if tuple(b.shape(2)) != shape[axis:]:
                raise Inexpressible(f"a bias of shape {list(b.shape(2))} that broadcasts to the normalized axes")
            inputs.append(b.input(2))
        args: dict[str, Any] = {"eps": eps}
        if axis != len(shape) - 1:
            args["axis"] = axis
        b.output(b.stage(op, inputs, args, b.out_dtype()), 0)
        if b.has_output(1) or b.has_output(2):
            _norm_statistics(b, shape, axis, eps)

    return translate


def _norm_statistics(b: NodeContext, shape: tuple[int, ...], axis: int, eps: float) -> None:
    """LayerNormalization's Mean and InvStdDev outputs, as the chain of hetflow ops that computes them."""
    lead, inner = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
    flat = b.stage("reshape", [b.input(0)], {"shape": [lead, inner]}, "fp32")
    mean = b.stage("mean", [flat], {"axis": -1, "keepdims": True}, "fp32")
    if b.has_output(1):
        b.output(b.stage("reshape", [mean], {"shape": b.out_shape(1)}, b.out_dtype(1)), 1)
    if b.has_output(2):
        centered = b.stage("sub", [flat, mean], None, "fp32")
        square = b.stage("mul", [centered, centered], None, "fp32")
        var = b.stage("mean", [square], {"axis": -1, "keepdims": True}, "fp32")
        std = b.stage("sqrt", [b.stage("add", [var], {"value": eps}, "fp32")], None, "fp32")
        one = b.stage("full", [], {"shape": [lead, 1], "value": 1.0}, "fp32")
        inv = b.stage("div", [one, std], None, "fp32")
        b.output(b.stage("reshape", [inv], {"shape": b.out_shape(2)}, b.out_dtype(2)), 2)


def _attention(b: NodeContext) -> None:
    b.only("q_num_heads", "kv_num_heads", "is_causal", "scale", softcap=0.0, qk_matmul_output_mode=0,
           left_window_size=-1, right_window_size=-1, softmax_precision=1)
    if any(b.has_output(k) for k in range(1, len(b.node.output))):
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
    inputs = [b.input(0), b.input(1), b.input(2)]
    if b.has(3):
        inputs.append(b.input(3))
    b.output(b.stage("attention", inputs, args, b.out_dtype()))


def _rope(b: NodeContext) -> None:
    raise Inexpressible("RotaryEmbedding takes cos/sin caches and position ids as inputs; "
                        "hetflow's rope computes its angles from base and offset")


_QUANTIZED = ("int8", "int4", "fp8e4m3", "fp8e5m2")


def _quantize(b: NodeContext) -> None:
    b.only("axis", saturate=1, precision=0, output_dtype=0, block_size=0)
    _symmetric(b)
    target = b.out_dtype()
    if target not in _QUANTIZED:
        raise Inexpressible(f"output dtype {target}: hetflow quantizes to {', '.join(_QUANTIZED)}")
    if target in _NARROW:
        # hetflow's quantize saturates symmetrically (int8 at +-127, int4 at +-7); ONNX's range is the type's,
        # down to -128 and -8, which is where a cast to int8 or int4 saturates, rounding half to even as ONNX does
        ratio = b.stage("div", [b.input(0), _scale(b)], None, "fp32")
        b.output(b.stage("cast", [ratio], None, target))
        return
    b.output(b.stage("quantize", [b.input(0), _scale(b)], None, target))


def _dequantize(b: NodeContext) -> None:
    b.only("axis", block_size=0, output_dtype=0)
    _symmetric(b)
    if b.dtype(0) not in _QUANTIZED:
        raise Inexpressible(f"input dtype {b.dtype(0)}: hetflow dequantizes {', '.join(_QUANTIZED)}")
    b.output(b.stage("dequantize", [b.input(0), _scale(b)], None, b.out_dtype()))


def _symmetric(b: NodeContext) -> None:
    if b.has(2) and np.any(np.asarray(b.const(2)).astype(np.float64) != 0):
        raise Inexpressible("a nonzero zero point: hetflow's quantization is symmetric")


def _scale(b: NodeContext) -> str:
    """The scale input, shaped to broadcast along ONNX's ``axis`` (per-axis scales are 1-D in ONNX)."""
    scale, x = b.shape(1), b.shape(0)
    if len(scale) != 1 or len(x) == 1:
        return b.input(1)
    axis = int(b.attr("axis", 1)) % len(x)
    shape = [1] * len(x)
    shape[axis] = scale[0]
    return b.stage("reshape", [b.input(1)], {"shape": shape}, b.dtype(1))


TRANSLATORS: dict[str, Callable[[NodeContext], None]] = {
    **{t: _binary for t in _BINARY}, **{t: _unary for t in _UNARY},
    "Identity": _identity, "Dropout": _dropout, "Swish": _swish, "Gelu": _gelu, "Where": _where, "Cast": _cast, "CastLike": _castlike,
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
"""ONNX op type (default domain) -> the translator that writes a node of it as hetflow stages."""
