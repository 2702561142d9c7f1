"""Reductions: ``sum``, ``mean``, ``max``, ``min`` over ``axis``, ``axes`` or all axes, and ``argmax``/``argmin`` along one axis.

``axis`` (one axis) and ``axes`` (ONNX's list) name the axes reduced;
with neither, every axis is. An empty ``axes`` list reduces every axis
too, unless ``noop_with_empty_axes`` (ONNX's attribute) makes it the
identity.

Integers and bools are reduced as they are (``sum`` wraps in the output
dtype). A reduction over no elements gives its identity, as ONNX does:
``sum`` 0, ``max`` -inf (the dtype's minimum for integers, false for
bool), ``min`` +inf (the maximum, true); ``mean`` of nothing is NaN (0 /
0). ``argmax``/``argmin`` give int64 indices, the first extreme unless
``select_last_index: 1``; NaN counts as the extreme, as numpy's does.

Examples
--------
>>> import numpy as np
>>> from hetflow.executors.ops import run
>>> run(np, "max", [np.zeros((2, 0), np.float32)], {"axis": 1}, Dtype.fp32).tolist()
[-inf, -inf]
>>> run(np, "min", [np.zeros((0, 3), np.int32)], {"axes": [0]}, Dtype.int32).tolist()
[2147483647, 2147483647, 2147483647]
>>> run(np, "argmax", [np.array([[1, 5, 5], [9, 0, 9]], np.int64)], {"axis": 1, "select_last_index": 1}, Dtype.int64).tolist()
[2, 2]
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import (ALL_DTYPES, INT_DTYPES, NUMERIC_DTYPES, Arg, Kernel, Op, Shape,
                                      ShapeError, Split, normalize_axis)

__all__ = ["OPS"]


def _axis(axis: int, rank: int, op: str) -> int:
    """:func:`normalize_axis`, refusing every axis of a scalar: normalize_axis lets axis 0 through at rank 0,
    and the bodies, which pass the axes as a tuple or index the shape with them, then fail when the stage runs."""
    if rank == 0:
        raise ShapeError(f"{op}: axis {axis} is out of range for rank 0 (the input is a scalar)")
    return normalize_axis(axis, rank, op)


def _axes(shape: Shape, args: Mapping[str, Any], op: str) -> tuple[int, ...] | None:
    """The axes reduced, sorted; None: all of them; () with ``noop_with_empty_axes``: none."""
    axis, axes = args.get("axis"), args.get("axes")
    if axis is not None and axes is not None:
        raise ShapeError(f"{op}: give axis (one axis) or axes (a list), not both")
    if axis is not None:
        return (_axis(axis, len(shape), op),)
    if axes is None or (not axes and not args.get("noop_with_empty_axes")):
        return None
    found = tuple(sorted(_axis(a, len(shape), op) for a in axes))
    if len(set(found)) != len(found):
        raise ShapeError(f"{op}: axes {list(axes)} name an axis twice")
    return found


def _reduce_shape_of(op: str):
    def rule(inputs: list[Shape], args: dict) -> Shape:
        shape = inputs[0]
        axes = _axes(shape, args, op)
        if axes is None:
            axes = tuple(range(len(shape)))
        if args["keepdims"]:
            return tuple(1 if i in axes else n for i, n in enumerate(shape))
        return tuple(n for i, n in enumerate(shape) if i not in axes)

    return rule


def _identity(dtype: Any, largest: bool) -> Any:
    """The identity of max (``largest`` false: the type's least value) or min (true) for numpy ``dtype``."""
    if dtype == np.bool_:
        return largest
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.max if largest else info.min)
    return math.inf if largest else -math.inf


def _extreme(name: str):
    """The body of ``max`` or ``min``: an empty reduction gives the identity instead of numpy's error."""
    f = np.max if name == "max" else np.min

    def body(xp: Any, inputs: list, args: dict) -> Any:
        x = inputs[0]
        axes = _axes(tuple(x.shape), args, name)
        if axes == ():
            return x
        reduce = getattr(xp, name)
        if x.size:
            return reduce(x, axis=axes, keepdims=args["keepdims"])
        shape = _reduce_shape_of(name)([tuple(x.shape)], args)
        return xp.full(shape, _identity(x.dtype, largest=f is np.min), dtype=x.dtype)

    return body


def _sum(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    axes = _axes(tuple(x.shape), args, "sum")
    if axes == ():
        return x
    if x.dtype == np.bool_:
        x = x.astype(np.int64)
    return xp.sum(x, axis=axes, keepdims=args["keepdims"])


def _mean(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    axes = _axes(tuple(x.shape), args, "mean")
    if axes == ():
        return x
    count = math.prod(x.shape[a] for a in (range(x.ndim) if axes is None else axes))
    wide = np.float64 if x.dtype.kind in "iub" or x.dtype == np.float64 else x.dtype
    total = xp.sum(x, axis=axes, keepdims=args["keepdims"], dtype=wide)
    return total / count if count else xp.full(total.shape, math.nan, dtype=wide)


def _arg(name: str):
    def body(xp: Any, inputs: list, args: dict) -> Any:
        x = inputs[0]
        if x.dtype.kind not in "iubf":
            x = x.astype(np.float32)  # bf16, fp8, int4 in ml_dtypes: float32 holds them exactly, order kept
        find = xp.argmax if name == "argmax" else xp.argmin
        axis = args["axis"]
        if axis is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = _axis(axis, x.ndim, name)
        if args["select_last_index"]:
            n = x.shape[axis]
            index = (n - 1) - find(xp.flip(x, axis=axis), axis=axis)
        else:
            index = find(x, axis=axis)
        index = index.astype(np.int64)
        if args["keepdims"]:
            index = xp.reshape(index, _arg_shape([tuple(inputs[0].shape)], args))
        return index

    return body


def _arg_shape(inputs: list[Shape], args: dict) -> Shape:
    shape, axis = inputs[0], args["axis"]
    if axis is None:
        if not math.prod(shape):
            raise ShapeError("argmax/argmin of an empty tensor has no index")
        return tuple(1 for _ in shape) if args["keepdims"] else ()
    ax = _axis(axis, len(shape), "argmax/argmin")
    if shape[ax] == 0:
        raise ShapeError(f"argmax/argmin over axis {axis} of length 0 has no index")
    if args["keepdims"]:
        return shape[:ax] + (1,) + shape[ax + 1 :]
    return shape[:ax] + shape[ax + 1 :]


def _reduce_split(combine: str):
    """By rows where axis 0 is kept; where it is reduced, each device reduces its rows and ``combine`` joins
    the partial results."""

    def rule(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
        shape = inputs[0]
        if not shape:
            return None
        axes = _axes(shape, args, combine)
        if axes is not None and 0 not in axes:
            return Split((0,), 0)
        return Split((0,), None, combine=combine)

    return rule


def _arg_split(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
    """By rows where the searched axis is another one (a flat index, or an index along rows, is not divided)."""
    shape, axis = inputs[0], args["axis"]
    if axis is None or len(shape) < 2 or normalize_axis(axis, len(shape), "argmax/argmin") == 0:
        return None
    return Split((0,), 0)


def _reduce_cost(inputs: list[Shape], args: dict) -> tuple[int, int]:
    """One operation per input element; the input read and the (smaller) output written, 4 bytes each."""
    n = math.prod(inputs[0])
    return n, 4 * n + 4 * len(inputs[0])


_AXES = {"axis": Arg("axis", doc="one axis to reduce; with axes null too, every axis"),
         "axes": Arg("axes", doc="the axes to reduce (ONNX's list); null or [] (see noop_with_empty_axes): every axis"),
         "keepdims": Arg("bool", default=False, doc="keep the reduced axes with length 1"),
         "noop_with_empty_axes": Arg("int", default=0, doc="1: axes [] leaves the input as it is (ONNX's 0 or 1)")}
_ARG = {"axis": Arg("axis", doc="the axis searched; null: the flattened tensor (a flat index)"),
        "keepdims": Arg("bool", default=False, doc="keep the searched axis with length 1"),
        "select_last_index": Arg("int", default=0, doc="1: the last index of the extreme, 0: the first (ONNX's)")}


def _flags(*names: str):
    """Checks that ONNX's 0-or-1 attributes ``names`` are 0 or 1."""

    def checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
        return [(k, f"argument {k!r} must be 0 or 1 (ONNX's values), got {args[k]!r}")
                for k in names if args.get(k, 0) not in (0, 1)]

    return checks


def _to_int64(inputs: list[Dtype], args: Mapping[str, Any]) -> Dtype:
    return Dtype.int64


_INDEX_DTYPES = INT_DTYPES | {Dtype.fp32, Dtype.fp64}

_REDUCE = {"exact": True, "checks": _flags("noop_with_empty_axes"), "cost_rule": _reduce_cost}
_SEARCH = {"moves": True, "result": _to_int64, "checks": _flags("select_last_index"), "cost_rule": _reduce_cost}

OPS = [
    Op("sum", (1, 1), NUMERIC_DTYPES, _sum, _reduce_shape_of("sum"), _AXES, **_REDUCE, split=_reduce_split("sum"),
       doc="sum over axis, axes or every axis; 0 over no elements; integers wrap", wgsl=Kernel("reduce", "sum")),
    Op("mean", (1, 1), NUMERIC_DTYPES, _mean, _reduce_shape_of("mean"), _AXES, **_REDUCE, split=_reduce_split("mean"),
       doc="mean over axis, axes or every axis; NaN over no elements; integers are summed exactly and the "
           "quotient rounds toward zero in an integer output (ONNX ReduceMean)", wgsl=Kernel("reduce", "mean")),
    Op("max", (1, 1), ALL_DTYPES, _extreme("max"), _reduce_shape_of("max"), _AXES, **_REDUCE, split=_reduce_split("max"),
       doc="maximum over axis, axes or every axis; -inf over no elements (the least integer, false)",
       wgsl=Kernel("reduce", "max")),
    Op("min", (1, 1), ALL_DTYPES, _extreme("min"), _reduce_shape_of("min"), _AXES, **_REDUCE, split=_reduce_split("min"),
       doc="minimum over axis, axes or every axis; +inf over no elements (the largest integer, true)",
       wgsl=Kernel("reduce", "min")),
    Op("argmax", (1, 1), _INDEX_DTYPES, _arg("argmax"), _arg_shape, _ARG, **_SEARCH, split=_arg_split,
       doc="index of the first maximum along axis (flat index when axis is null), as int64 (ONNX ArgMax)",
       wgsl=Kernel("reduce", "argmax")),
    Op("argmin", (1, 1), _INDEX_DTYPES, _arg("argmin"), _arg_shape, _ARG, **_SEARCH, split=_arg_split,
       doc="index of the first minimum along axis (flat index when axis is null), as int64 (ONNX ArgMin)",
       wgsl=Kernel("reduce", "argmin")),
]
