"""Normalizations: ``softmax`` along an axis, ``rmsnorm`` and ``layernorm`` over the axes from ``axis`` to the last, with an optional weight (and bias).

``rmsnorm`` and ``layernorm`` follow ONNX RMSNormalization and
LayerNormalization: they normalize over ``axis``, ``axis + 1``, ..., the
last axis (``axis: -1``, the default, is the last axis alone); the weight
and bias broadcast over those normalized axes, numpy's rule (a shape
``[..., d]`` that is a suffix of them, with ones allowed).

Examples
--------
>>> import numpy as np
>>> from hetflow.executors.ops import run
>>> x = np.array([[1.0, 3.0], [3.0, 1.0]], np.float32)
>>> run(np, "layernorm", [x], {"axis": 0, "eps": 0.0}, Dtype.fp32).tolist()
[[-1.0, 1.0], [1.0, -1.0]]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hetflow.executors.base import Dtype  # noqa: F401 - the doctest's
from hetflow.executors.opdecl import FLOAT_DTYPES, Arg, Kernel, Op, Shape, ShapeError, Split, normalize_axis

__all__ = ["OPS"]


def _softmax(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    # in place in one new array, the same operations in the same order as exp(x - max) / sum: the values as
    # before, without two temporaries of the scores' size (12 heads' 512 x 512: 5.2 ms -> 4.8). Blocks of rows
    # that stay in the cache measured no better here (4.6-5.6 ms, by block size)
    out = xp.empty(x.shape, x.dtype)
    xp.subtract(x, xp.max(x, axis=args["axis"], keepdims=True), out=out)
    xp.exp(out, out=out)
    out /= xp.sum(out, axis=args["axis"], keepdims=True)
    return out


def _softmax_shape(inputs: list[Shape], args: dict) -> Shape:
    normalize_axis(args["axis"], len(inputs[0]), "softmax")
    return inputs[0]


def _norm_shape(inputs: list[Shape], args: dict) -> Shape:
    x = inputs[0]
    if not x:
        raise ShapeError("normalization needs an input of rank 1 or more")
    ax = normalize_axis(args["axis"], len(x), "normalization")
    normalized = x[ax:]
    for name, s in zip(("weight", "bias"), inputs[1:]):
        s = tuple(s)
        try:
            fits = len(s) <= len(normalized) and tuple(np.broadcast_shapes(normalized, s)) == normalized
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"normalization: {name} of shape {list(s)} must broadcast to {list(normalized)}, "
                             f"the normalized axes {ax}.. of {list(x)}")
    return x


def _axes(x: Any, args: dict) -> tuple[int, ...]:
    return tuple(range(normalize_axis(args["axis"], x.ndim, "normalization"), x.ndim))


def _rmsnorm(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    y = x / xp.sqrt(xp.mean(x * x, axis=_axes(x, args), keepdims=True) + args["eps"])
    return y * inputs[1] if len(inputs) > 1 else y


def _layernorm(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    axes = _axes(x, args)
    y = x - xp.mean(x, axis=axes, keepdims=True)
    # in place from here on, the same operations in the same order: the values as before, with one array
    y /= xp.sqrt(xp.mean(xp.square(y), axis=axes, keepdims=True) + args["eps"])
    for operand, step in zip(inputs[1:3], (xp.multiply, xp.add)):
        if operand.dtype == y.dtype and np.broadcast_shapes(operand.shape, y.shape) == y.shape:
            step(y, operand, out=y)
        else:
            y = step(y, operand)
    return y


def _norm_cost(flops_per_element: int):
    def rule(inputs: list[Shape], args: dict) -> tuple[int, int]:
        n = math.prod(inputs[0])
        return flops_per_element * n, 4 * (2 * n + sum(math.prod(s) for s in inputs[1:]))

    return rule


def _norm_split(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
    """By rows (axis 0) where axis 0 is not normalized; the weight and bias are read whole by every device."""
    x = inputs[0]
    if len(x) < 2 or normalize_axis(args["axis"], len(x), "normalization") == 0:
        return None
    return Split((0,) + (None,) * (len(inputs) - 1), 0)


_NORM_AXIS = Arg("int", default=-1, doc="the first normalized axis: axis, axis + 1, ..., the last (ONNX's axis)")

OPS = [
    Op("softmax", (1, 1), FLOAT_DTYPES, _softmax, _softmax_shape, {"axis": Arg("int", default=-1)},
       split=_norm_split, doc="softmax along one axis", wgsl=Kernel("softmax")),
    Op("rmsnorm", (1, 2), FLOAT_DTYPES, _rmsnorm, _norm_shape,
       {"eps": Arg("number", default=1e-6), "axis": _NORM_AXIS}, cost_rule=_norm_cost(4), split=_norm_split,
       doc="x / sqrt(mean(x^2) + eps) over the axes from axis to the last, times an optional weight "
           "(ONNX RMSNormalization)", wgsl=Kernel("norm", "rms")),
    Op("layernorm", (1, 3), FLOAT_DTYPES, _layernorm, _norm_shape,
       {"eps": Arg("number", default=1e-5), "axis": _NORM_AXIS}, cost_rule=_norm_cost(8), split=_norm_split,
       doc="(x - mean) / sqrt(var + eps) over the axes from axis to the last, then optional weight and bias "
           "(ONNX LayerNormalization)", wgsl=Kernel("norm", "layer")),
]
