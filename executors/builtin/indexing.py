"""Indexing: ``gather``, values picked by integer indices along one axis (ONNX Gather), the embedding lookup.

The output's shape is ``data.shape[:axis] + indices.shape +
data.shape[axis + 1:]``. An index ``i`` in ``[-n, n)`` picks entry ``i``
of the axis of length ``n``, a negative one counting from the end (ONNX's
rule); an index outside that range fails the stage, naming it. The
indices must be integers (``int16``, ``int32``, ``int64``, ``uint8``);
the data any dtype, moved as it is.

Examples
--------
>>> import numpy as np
>>> from hetflow.executors.ops import run
>>> table = np.arange(12, dtype=np.int64).reshape(4, 3)
>>> run(np, "gather", [table, np.array([[3, -4]], np.int64)], {}, Dtype.int64).tolist()
[[[9, 10, 11], [0, 1, 2]]]
>>> run(np, "gather", [table, np.array([2, -1], np.int32)], {"axis": 1}, Dtype.int64).tolist()
[[2, 2], [5, 5], [8, 8], [11, 11]]
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import ALL_DTYPES, INT_DTYPES, Arg, Kernel, Op, Shape, ShapeError, Split, normalize_axis

__all__ = ["OPS"]


def _gather_shape(inputs: list[Shape], args: dict) -> Shape:
    data, indices = inputs
    if not data:
        raise ShapeError("gather needs data of rank 1 or more")
    ax = normalize_axis(args["axis"], len(data), "gather")
    return data[:ax] + tuple(indices) + data[ax + 1 :]


def _gather_split(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
    """By rows of the ids: each device picks its rows' values from the whole data."""
    data, indices = inputs
    if not indices:
        return None
    return Split((None, 0), normalize_axis(args["axis"], len(data), "gather"))


def _gather(xp: Any, inputs: list, args: dict) -> Any:
    data, indices = inputs
    ax = normalize_axis(args["axis"], data.ndim, "gather")
    n = data.shape[ax]
    indices = indices.astype(np.int64)
    if indices.size:
        low, high = int(indices.min()), int(indices.max())
        if low < -n or high >= n:
            bad = low if low < -n else high
            raise IndexError(f"gather: index {bad} is out of range for axis {args['axis']} of length {n} "
                             f"(indices lie in [-{n}, {n}))")
    return xp.take(data, xp.where(indices < 0, indices + n, indices), axis=ax)


def _data_type(inputs: list[Dtype], args: Mapping[str, Any]) -> Dtype:
    """The data's type where it keeps it (integers, bool, fp64); fp32 for the other floats, as every op's default."""
    if inputs and (inputs[0].is_exact or inputs[0] is Dtype.fp64):
        return inputs[0]
    return Dtype.fp32


def _gather_dtypes(inputs: list[Dtype], args: Mapping[str, Any]) -> str | None:
    if len(inputs) > 1 and inputs[1] not in INT_DTYPES:
        kinds = ", ".join(d.value for d in Dtype if d in INT_DTYPES)
        return (f"gather's indices must be integers ({kinds}), got {inputs[1].value}; "
                "make them with dtype: int64, or convert them (op: cast, dtype: int64)")
    return None


def _gather_cost(inputs: list[Shape], args: dict) -> tuple[int, int]:
    """No arithmetic: the indices read, and each picked value read and written."""
    out = math.prod(_gather_shape(inputs, args))
    return 0, 8 * math.prod(inputs[1]) + 2 * 4 * out


OPS = [
    Op("gather", (2, 2), ALL_DTYPES, _gather, _gather_shape,
       {"axis": Arg("int", default=0, doc="the axis of data the indices pick along")},
       moves=True, result=_data_type, input_dtypes=_gather_dtypes, cost_rule=_gather_cost, split=_gather_split, wgsl=Kernel("gather"),
       doc="entries of data (input 1) along axis at integer indices (input 2), ONNX Gather: an embedding lookup; "
           "negative indices count from the end"),
]
