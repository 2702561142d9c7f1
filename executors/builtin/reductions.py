"""Reductions over one axis, or all axes when ``axis`` is null: ``sum``, ``mean``, ``max``, ``argmax``."""

from __future__ import annotations

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import ALL_DTYPES, FLOAT_DTYPES, Arg, Kernel, Op, Shape, normalize_axis

__all__ = ["OPS"]


def _reduce_shape(inputs: list[Shape], args: dict) -> Shape:
    shape, axis, keep = inputs[0], args["axis"], args["keepdims"]
    if axis is None:
        return tuple(1 for _ in shape) if keep else ()
    ax = normalize_axis(axis, len(shape), "reduction")
    if keep:
        return shape[:ax] + (1,) + shape[ax + 1 :]
    return shape[:ax] + shape[ax + 1 :]


_AXIS = {"axis": Arg("axis"), "keepdims": Arg("bool", default=False)}


OPS = [
    Op("sum", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.sum(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, _AXIS, doc="sum over one axis, or all axes when axis is null", wgsl=Kernel("reduce", "sum")),
    Op("mean", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.mean(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, _AXIS, doc="mean over one axis, or all axes when axis is null", wgsl=Kernel("reduce", "mean")),
    Op("max", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.max(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, _AXIS, doc="maximum over one axis, or all axes when axis is null",
       wgsl=Kernel("reduce", "max")),
    Op("argmax", (1, 1), frozenset({Dtype.fp32}),
       lambda xp, i, a: xp.argmax(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, _AXIS, doc="index of the first maximum (flat index when axis is null), as fp32",
       wgsl=Kernel("reduce", "argmax")),
]
