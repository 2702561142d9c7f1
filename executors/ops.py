"""The op library: one registry, written once against an array module.

Every op is an :class:`Op` entry in :data:`REGISTRY`: its name, how many
inputs it takes, the arguments it accepts, the output dtypes it supports,
a shape rule the planner uses before anything runs, and a body that takes
the array namespace ``xp`` explicitly (numpy on the host, cupy on a GPU),
so every executor shares one implementation.

Numeric rule, the same for every op and executor: inputs are widened to
float32, the body computes in float32, and the result is converted to the
stage's output dtype. Float outputs round to nearest even (ml_dtypes'
conversion); int8 and int4 outputs round to nearest even and saturate to
the type's range, NaN becoming 0. Random ops draw float32 values from
numpy's ``default_rng(seed)`` on the host, so a seed gives the same tensor
on every executor.

Examples
--------
>>> import numpy as np
>>> op = REGISTRY["matmul"]
>>> op.shape([(2, 3), (3, 5)], {})
(2, 5)
>>> run(np, "add", [np.ones(2, np.float32), np.ones(2, np.float32)], {}, Dtype.fp32).tolist()
[2.0, 2.0]
>>> run(np, "cast", [np.array([300.0, -1.5], np.float32)], {}, Dtype.int8).tolist()
[127, -2]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hetflow.executors.base import Dtype

__all__ = ["Op", "Arg", "ShapeError", "REGISTRY", "FLOAT_DTYPES", "ALL_DTYPES", "run", "to_dtype", "check_args"]

Shape = tuple[int, ...]

FLOAT_DTYPES = frozenset({Dtype.fp32, Dtype.fp16, Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2})
ALL_DTYPES = frozenset(Dtype)


class ShapeError(ValueError):
    """The inputs' shapes or the arguments do not fit the op."""


@dataclass(frozen=True)
class Arg:
    """One argument an op accepts.

    ``kind`` is one of ``shape`` (list of non-negative ints), ``int``,
    ``number``, ``axis`` (an int or null), ``axes`` (list of ints or null),
    ``bool``, ``path`` (a file, relative to the manifest's folder).
    """

    kind: str
    required: bool = False
    default: Any = None
    doc: str = ""


@dataclass(frozen=True)
class Op:
    name: str
    arity: tuple[int, int]
    dtypes: frozenset[Dtype]
    body: Callable[..., Any] = field(repr=False)
    shape_rule: Callable[[list[Shape | None], dict], Shape | None] = field(repr=False)
    args: Mapping[str, Arg] = field(default_factory=dict)
    outputs: int = 1
    doc: str = ""

    def shape(self, inputs: Sequence[Shape | None], args: Mapping[str, Any]) -> Shape | None:
        """Output shape, or None where an input's shape is not known before the run."""
        full = self.with_defaults(args)
        if any(s is None for s in inputs) and self.arity[1] > 0:
            return None
        return self.shape_rule([tuple(s) for s in inputs], full)  # type: ignore[arg-type]

    def with_defaults(self, args: Mapping[str, Any]) -> dict:
        full = {k: a.default for k, a in self.args.items()}
        full.update(args)
        return full


def _check_value(kind: str, value: Any) -> str | None:
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind == "shape":
        if not isinstance(value, list) or not all(is_int(v) and v >= 0 for v in value):
            return "a list of non-negative integers"
        if len(value) > 8:
            return "a shape of rank at most 8"
    elif kind == "int" and not is_int(value):
        return "an integer"
    elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return "a number"
    elif kind == "axis" and value is not None and not is_int(value):
        return "an integer axis or null"
    elif kind == "axes" and value is not None and not (
        isinstance(value, list) and all(is_int(v) for v in value)
    ):
        return "a list of integer axes or null"
    elif kind == "bool" and not isinstance(value, bool):
        return "true or false"
    elif kind == "path" and not (isinstance(value, str) and value):
        return "a file path"
    return None


def check_args(op: Op, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    """Problems with ``args`` for ``op``: (argument name or None, message) pairs."""
    problems: list[tuple[str | None, str]] = []
    for key, value in args.items():
        spec = op.args.get(key)
        if spec is None:
            accepted = ", ".join(op.args) or "no arguments"
            problems.append((key, f"op {op.name!r} has no argument {key!r} (accepted: {accepted})"))
            continue
        expected = _check_value(spec.kind, value)
        if expected:
            problems.append((key, f"argument {key!r} of op {op.name!r} must be {expected}, got {value!r}"))
    for key, spec in op.args.items():
        if spec.required and key not in args:
            problems.append((None, f"op {op.name!r} needs argument {key!r}"))
    return problems


def to_dtype(xp: Any, array: Any, dtype: Dtype) -> Any:
    """Convert a computed array to the stage's output dtype (the module's numeric rule)."""
    if dtype.is_float:
        return array.astype(dtype.numpy)
    lo, hi = (-128, 127) if dtype is Dtype.int8 else (-8, 7)
    finite = xp.nan_to_num(array.astype(np.float32), nan=0.0, posinf=hi, neginf=lo)
    return xp.clip(xp.rint(finite), lo, hi).astype(np.int8).astype(dtype.numpy)


def _widen(xp: Any, array: Any) -> Any:
    return array if array.dtype == np.float32 else array.astype(np.float32)


def run(xp: Any, name: str, inputs: Sequence[Any], args: Mapping[str, Any], dtype: Dtype) -> Any:
    """Run op ``name`` on arrays of namespace ``xp`` and return its output at ``dtype``."""
    op = REGISTRY[name]
    out = op.body(xp, [_widen(xp, x) for x in inputs], op.with_defaults(args))
    return to_dtype(xp, xp.asarray(out, dtype=np.float32), dtype)


# -- shape rules ----------------------------------------------------------------


def _normalize_axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _same(inputs: list[Shape], args: dict) -> Shape:
    return inputs[0]


def _from_shape_arg(inputs: list[Shape], args: dict) -> Shape:
    return tuple(args["shape"])


def _broadcast(inputs: list[Shape], args: dict) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*inputs))
    except ValueError:
        raise ShapeError(
            "shapes " + " and ".join(str(list(s)) for s in inputs) + " do not broadcast"
        ) from None


def _matmul_shape(inputs: list[Shape], args: dict) -> Shape:
    a, b = inputs
    if not a or not b:
        raise ShapeError("matmul needs inputs of rank 1 or more")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {list(a)} @ {list(b)}")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions do not broadcast: {list(a)} @ {list(b)}") from None
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _reduce_shape(inputs: list[Shape], args: dict) -> Shape:
    shape, axis, keep = inputs[0], args["axis"], args["keepdims"]
    if axis is None:
        return tuple(1 for _ in shape) if keep else ()
    ax = _normalize_axis(axis, len(shape), "reduction")
    if keep:
        return shape[:ax] + (1,) + shape[ax + 1 :]
    return shape[:ax] + shape[ax + 1 :]


def _softmax_shape(inputs: list[Shape], args: dict) -> Shape:
    _normalize_axis(args["axis"], len(inputs[0]), "softmax")
    return inputs[0]


def _transpose_shape(inputs: list[Shape], args: dict) -> Shape:
    shape, axes = inputs[0], args["axes"]
    if axes is None:
        return tuple(reversed(shape))
    if sorted(a % max(len(shape), 1) for a in axes) != list(range(len(shape))):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {len(shape)} axes")
    return tuple(shape[a] for a in axes)


def _reshape_shape(inputs: list[Shape], args: dict) -> Shape:
    new = tuple(args["shape"])
    if math.prod(new) != math.prod(inputs[0]):
        raise ShapeError(f"reshape: cannot reshape {list(inputs[0])} into {list(new)}")
    return new


def _arange_shape(inputs: list[Shape], args: dict) -> Shape:
    if args["step"] == 0:
        raise ShapeError("arange: step must not be 0")
    return (max(0, math.ceil((args["stop"] - args["start"]) / args["step"])),)


def _load_shape(inputs: list[Shape], args: dict) -> Shape | None:
    try:
        return tuple(np.load(args["path"], mmap_mode="r", allow_pickle=False).shape)
    except (OSError, ValueError):
        return None


# -- bodies ---------------------------------------------------------------------


def _normal(xp: Any, inputs: list, args: dict) -> Any:
    rng = np.random.default_rng(args["seed"])
    host = rng.standard_normal(tuple(args["shape"]), dtype=np.float32)
    return xp.asarray(host * np.float32(args["std"]) + np.float32(args["mean"]))


def _uniform(xp: Any, inputs: list, args: dict) -> Any:
    rng = np.random.default_rng(args["seed"])
    host = rng.random(tuple(args["shape"]), dtype=np.float32)
    low, high = np.float32(args["low"]), np.float32(args["high"])
    return xp.asarray(host * (high - low) + low)


def _gelu(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    c = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + xp.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def _softmax(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    e = xp.exp(x - xp.max(x, axis=args["axis"], keepdims=True))
    return e / xp.sum(e, axis=args["axis"], keepdims=True)


def _load(xp: Any, inputs: list, args: dict) -> Any:
    host = np.load(args["path"], allow_pickle=False)
    return xp.asarray(host.astype(np.float32))


_SHAPE = Arg("shape", required=True, doc="output shape")
_SEED = Arg("int", required=True, doc="seed of numpy's default_rng")

_ENTRIES = [
    Op("random.normal", (0, 0), FLOAT_DTYPES, _normal, _from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "mean": Arg("number", default=0.0), "std": Arg("number", default=1.0)},
       doc="normally distributed values"),
    Op("random.uniform", (0, 0), FLOAT_DTYPES, _uniform, _from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "low": Arg("number", default=0.0), "high": Arg("number", default=1.0)},
       doc="uniformly distributed values in [low, high)"),
    Op("zeros", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.zeros(tuple(a["shape"]), np.float32),
       _from_shape_arg, {"shape": _SHAPE}, doc="a tensor of zeros"),
    Op("ones", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.ones(tuple(a["shape"]), np.float32),
       _from_shape_arg, {"shape": _SHAPE}, doc="a tensor of ones"),
    Op("arange", (0, 0), ALL_DTYPES,
       lambda xp, i, a: xp.arange(a["start"], a["stop"], a["step"], dtype=np.float64).astype(np.float32),
       _arange_shape,
       {"start": Arg("number", default=0), "stop": Arg("number", required=True), "step": Arg("number", default=1)},
       doc="evenly spaced values in [start, stop)"),
    Op("add", (2, 2), ALL_DTYPES, lambda xp, i, a: i[0] + i[1], _broadcast, doc="elementwise sum, broadcasting"),
    Op("sub", (2, 2), ALL_DTYPES, lambda xp, i, a: i[0] - i[1], _broadcast, doc="elementwise difference"),
    Op("mul", (2, 2), ALL_DTYPES, lambda xp, i, a: i[0] * i[1], _broadcast, doc="elementwise product"),
    Op("div", (2, 2), FLOAT_DTYPES, lambda xp, i, a: i[0] / i[1], _broadcast, doc="elementwise quotient"),
    Op("matmul", (2, 2), ALL_DTYPES, lambda xp, i, a: xp.matmul(i[0], i[1]), _matmul_shape,
       doc="matrix product with numpy's matmul rules"),
    Op("relu", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.maximum(i[0], np.float32(0)), _same, doc="max(x, 0)"),
    Op("gelu", (1, 1), FLOAT_DTYPES, _gelu, _same, doc="GELU, tanh approximation"),
    Op("silu", (1, 1), FLOAT_DTYPES, lambda xp, i, a: i[0] / (np.float32(1) + xp.exp(-i[0])), _same,
       doc="x * sigmoid(x)"),
    Op("softmax", (1, 1), FLOAT_DTYPES, _softmax, _softmax_shape, {"axis": Arg("int", default=-1)},
       doc="softmax along one axis"),
    Op("sum", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.sum(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, {"axis": Arg("axis"), "keepdims": Arg("bool", default=False)},
       doc="sum over one axis, or all axes when axis is null"),
    Op("mean", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.mean(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, {"axis": Arg("axis"), "keepdims": Arg("bool", default=False)},
       doc="mean over one axis, or all axes when axis is null"),
    Op("transpose", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.transpose(i[0], a["axes"]), _transpose_shape,
       {"axes": Arg("axes")}, doc="permute axes (reverse them when axes is null)"),
    Op("reshape", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.reshape(i[0], tuple(a["shape"])), _reshape_shape,
       {"shape": _SHAPE}, doc="same values, new shape"),
    Op("cast", (1, 1), ALL_DTYPES, lambda xp, i, a: i[0], _same, doc="convert to the stage's dtype"),
    Op("load", (0, 0), ALL_DTYPES, _load, _load_shape, {"path": Arg("path", required=True)},
       doc="read a .npy file (path relative to the manifest's folder)"),
]

REGISTRY: dict[str, Op] = {op.name: op for op in _ENTRIES}
