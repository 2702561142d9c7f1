"""Ops that move values without computing on them: ``transpose``, ``reshape``, ``concat``, ``split``, ``slice``.

Each takes its inputs as they are, at any dtype (``moves``): an int64 or
bool tensor comes out bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

from hetflow.executors.opdecl import ALL_DTYPES, Arg, Kernel, Op, Shape, ShapeError, normalize_axis

__all__ = ["OPS"]


def _axis(axis: int, rank: int, op: str) -> int:
    """:func:`normalize_axis`, refusing every axis of a scalar: normalize_axis lets axis 0 through at rank 0,
    and a scalar has no axis to cut, join or slice along (its shape rule would index past its shape)."""
    if rank == 0:
        raise ShapeError(f"{op}: axis {axis} is out of range for rank 0 (the input is a scalar)")
    return normalize_axis(axis, rank, op)


def _transpose_shape(inputs: list[Shape], args: dict) -> Shape:
    shape, axes = inputs[0], args["axes"]
    if axes is None:
        return tuple(reversed(shape))
    rank = len(shape)
    for a in axes:
        if not -rank <= a < rank:
            within = f"axes run from {-rank} to {rank - 1}" if rank else "a scalar has no axes"
            raise ShapeError(f"transpose: axis {a} in axes {axes} is out of range for an input of rank {rank} "
                             f"({within})")
    if sorted(a % rank for a in axes) != list(range(rank)):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {rank} axes")
    return tuple(shape[a] for a in axes)


def _reshape_shape(inputs: list[Shape], args: dict) -> Shape:
    new = tuple(args["shape"])
    if math.prod(new) != math.prod(inputs[0]):
        raise ShapeError(f"reshape: cannot reshape {list(inputs[0])} into {list(new)}")
    return new


def _concat_shape(inputs: list[Shape], args: dict) -> Shape:
    first = inputs[0]
    ax = _axis(args["axis"], len(first), "concat")
    for s in inputs[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != ax):
            raise ShapeError(f"concat: shape {list(s)} does not match {list(first)} outside axis {args['axis']}")
    return first[:ax] + (sum(s[ax] for s in inputs),) + first[ax + 1 :]


def _split_bounds(shape: Shape, args: dict) -> tuple[int, int, int]:
    """(axis, start, stop) of the part ``index`` of ``shape`` that split keeps."""
    ax = _axis(args["axis"], len(shape), "split")
    n = shape[ax]
    if (args["sections"] is None) == (args["sizes"] is None):
        raise ShapeError("split needs exactly one of 'sections' (equal parts) and 'sizes' (the length of each part)")
    if args["sections"] is not None:
        if args["sections"] < 1 or n % args["sections"]:
            raise ShapeError(f"split: axis {args['axis']} of length {n} does not divide into {args['sections']} equal parts")
        sizes = [n // args["sections"]] * args["sections"]
    else:
        sizes = list(args["sizes"])
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} add up to {sum(sizes)}, not the length {n} of axis {args['axis']}")
    if not 0 <= args["index"] < len(sizes):
        raise ShapeError(f"split: index {args['index']} is out of range for {len(sizes)} parts")
    start = sum(sizes[: args["index"]])
    return ax, start, start + sizes[args["index"]]


def _split_shape(inputs: list[Shape], args: dict) -> Shape:
    ax, start, stop = _split_bounds(inputs[0], args)
    return inputs[0][:ax] + (stop - start,) + inputs[0][ax + 1 :]


def _split(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    ax, start, stop = _split_bounds(tuple(x.shape), args)
    # a view, as slice gives: take copied the part (three 1.5 MB copies for a GPT-2 layer's q, k and v)
    return x[(slice(None),) * ax + (slice(start, stop),)]


def _slice_range(shape: Shape, args: dict) -> tuple[int, range]:
    ax = _axis(args["axis"], len(shape), "slice")
    if args["step"] == 0:
        raise ShapeError("slice: step must not be 0")
    return ax, range(*slice(args["start"], args["stop"], args["step"]).indices(shape[ax]))


def _slice_shape(inputs: list[Shape], args: dict) -> Shape:
    ax, picked = _slice_range(inputs[0], args)
    return inputs[0][:ax] + (len(picked),) + inputs[0][ax + 1 :]


def _slice(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    ax, picked = _slice_range(tuple(x.shape), args)
    index = [slice(None)] * x.ndim
    index[ax] = slice(picked.start, picked.stop if picked.stop >= 0 else None, picked.step)
    return x[tuple(index)]


OPS = [
    Op("transpose", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.transpose(i[0], a["axes"]), _transpose_shape,
       {"axes": Arg("axes")}, doc="permute axes (reverse them when axes is null)", wgsl=Kernel("permute"),
       moves=True),
    Op("reshape", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.reshape(i[0], tuple(a["shape"])), _reshape_shape,
       {"shape": Arg("shape", required=True, doc="output shape")}, doc="same values, new shape",
       wgsl=Kernel("unary", "x"), moves=True),
    Op("concat", (1, 64), ALL_DTYPES, lambda xp, i, a: xp.concatenate(i, axis=a["axis"]), _concat_shape,
       {"axis": Arg("int", default=0)}, doc="join inputs along one axis", moves=True),
    Op("split", (1, 1), ALL_DTYPES, _split, _split_shape,
       {"axis": Arg("int", default=0), "sections": Arg("int"), "sizes": Arg("shape"),
        "index": Arg("int", required=True)},
       doc="part `index` of the input cut along `axis` into `sections` equal parts or parts of `sizes`", moves=True),
    Op("slice", (1, 1), ALL_DTYPES, _slice, _slice_shape,
       {"axis": Arg("int", default=0), "start": Arg("int?", default=None), "stop": Arg("int?", default=None),
        "step": Arg("int", default=1)},
       doc="x[start:stop:step] along one axis, Python's slice rules", moves=True),
]
