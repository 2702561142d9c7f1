"""Symmetric quantization: ``quantize.scale`` (absmax over the tensor or per channel), ``quantize`` to int8, int4 or fp8, ``dequantize``."""

from __future__ import annotations

from typing import Any

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import FLOAT_DTYPES, QUANT_DTYPES, QUANT_MAX, Arg, Op, Shape, ShapeError, normalize_axis

__all__ = ["OPS"]


def _scale_axes(shape: Shape, axis: int | None) -> tuple[int, ...] | None:
    if axis is None:
        return None
    ax = normalize_axis(axis, len(shape), "quantize.scale")
    return tuple(i for i in range(len(shape)) if i != ax)


def _scale_shape(inputs: list[Shape], args: dict) -> Shape:
    if Dtype(args["target"]) not in QUANT_DTYPES:
        raise ShapeError(f"quantize.scale: target must be one of {', '.join(d.value for d in QUANT_MAX)}, got {args['target']!r}")
    shape = inputs[0]
    if args["axis"] is None:
        return ()
    ax = normalize_axis(args["axis"], len(shape), "quantize.scale")
    return tuple(n if i == ax else 1 for i, n in enumerate(shape))


def _scale(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    axes = _scale_axes(tuple(x.shape), args["axis"])
    keep = axes is not None
    top = xp.max(xp.abs(x), axis=axes, keepdims=keep) if x.size else xp.zeros((1,) * x.ndim if keep else (), np.float32)
    scale = top / np.float32(QUANT_MAX[Dtype(args["target"])])
    return xp.where(scale > 0, scale, np.float32(1))


def _quant_shape(inputs: list[Shape], args: dict) -> Shape:
    try:
        out = tuple(np.broadcast_shapes(*inputs))
    except ValueError:
        out = None
    if out != inputs[0]:
        raise ShapeError(f"the scale of shape {list(inputs[1])} must broadcast to the tensor's shape {list(inputs[0])}")
    return out


def _quantize(xp: Any, inputs: list, args: dict, dtype: Dtype) -> Any:
    limit = np.float32(QUANT_MAX[dtype])
    # Saturate first: fp8e4m3 has no infinity, so an overflow would become NaN.
    return xp.clip(inputs[0] / inputs[1], -limit, limit)


OPS = [
    Op("quantize.scale", (1, 1), frozenset({Dtype.fp32}), _scale, _scale_shape,
       {"target": Arg("dtype", required=True), "axis": Arg("axis", default=None)},
       doc="symmetric scale absmax / max(target): per tensor, or per channel along `axis`"),
    Op("quantize", (2, 2), QUANT_DTYPES, _quantize, _quant_shape, dtype_aware=True,
       doc="x / scale, saturated and rounded to the stage's int8, int4 or fp8 dtype"),
    Op("dequantize", (2, 2), FLOAT_DTYPES, lambda xp, i, a: i[0] * i[1], _quant_shape,
       doc="q * scale"),
]
