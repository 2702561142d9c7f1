"""Normalizations: ``softmax`` along an axis, ``rmsnorm`` and ``layernorm`` over the last axis with an optional weight (and bias)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hetflow.executors.opdecl import FLOAT_DTYPES, Arg, Kernel, Op, Shape, ShapeError, normalize_axis

__all__ = ["OPS"]


def _softmax(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    e = xp.exp(x - xp.max(x, axis=args["axis"], keepdims=True))
    return e / xp.sum(e, axis=args["axis"], keepdims=True)


def _softmax_shape(inputs: list[Shape], args: dict) -> Shape:
    normalize_axis(args["axis"], len(inputs[0]), "softmax")
    return inputs[0]


def _norm_shape(inputs: list[Shape], args: dict) -> Shape:
    x = inputs[0]
    if not x:
        raise ShapeError("normalization needs an input of rank 1 or more")
    for name, s in zip(("weight", "bias"), inputs[1:]):
        if tuple(s) != x[-1:]:
            raise ShapeError(f"normalization: {name} of shape {list(s)} must be [{x[-1]}], the last axis of {list(x)}")
    return x


def _rmsnorm(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    y = x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + np.float32(args["eps"]))
    return y * inputs[1] if len(inputs) > 1 else y


def _layernorm(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    centered = x - xp.mean(x, axis=-1, keepdims=True)
    y = centered / xp.sqrt(xp.mean(centered * centered, axis=-1, keepdims=True) + np.float32(args["eps"]))
    if len(inputs) > 1:
        y = y * inputs[1]
    return y + inputs[2] if len(inputs) > 2 else y


OPS = [
    Op("softmax", (1, 1), FLOAT_DTYPES, _softmax, _softmax_shape, {"axis": Arg("int", default=-1)},
       doc="softmax along one axis", wgsl=Kernel("softmax")),
    Op("rmsnorm", (1, 2), FLOAT_DTYPES, _rmsnorm, _norm_shape, {"eps": Arg("number", default=1e-6)},
       doc="x / sqrt(mean(x^2) + eps) over the last axis, times an optional weight", wgsl=Kernel("norm", "rms")),
    Op("layernorm", (1, 3), FLOAT_DTYPES, _layernorm, _norm_shape, {"eps": Arg("number", default=1e-5)},
       doc="(x - mean) / sqrt(var + eps) over the last axis, then optional weight and bias",
       wgsl=Kernel("norm", "layer")),
]
