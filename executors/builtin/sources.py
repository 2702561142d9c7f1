"""Ops that make a tensor from their arguments alone: random draws, constants, ranges.

Random ops draw float32 values from numpy's ``default_rng(seed)`` on the
host, so a seed gives the same tensor on every executor; on Vulkan every
op here is computed on the host and uploaded (``Kernel("host")``).
``zeros``, ``ones``, ``full`` and ``arange`` make integer and bool
tensors in their own type, so an int64 ``arange`` is exact past 2^24.

Examples
--------
>>> from hetflow.executors.ops import run
>>> run(np, "arange", [], {"start": 2**40, "stop": 2**40 + 3}, Dtype.int64).tolist()
[1099511627776, 1099511627777, 1099511627778]
>>> run(np, "full", [], {"shape": [2], "value": 2**53 + 1}, Dtype.int64).tolist()
[9007199254740993, 9007199254740993]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import (ALL_DTYPES, FLOAT_DTYPES, Arg, Kernel, Op, Shape, ShapeError, Split, from_shape_arg,
                                      to_dtype)

__all__ = ["OPS"]


def _normal(xp: Any, inputs: list, args: dict) -> Any:
    rng = np.random.default_rng(args["seed"])
    host = rng.standard_normal(tuple(args["shape"]), dtype=np.float32)
    return xp.asarray(host * np.float32(args["std"]) + np.float32(args["mean"]))


def _uniform(xp: Any, inputs: list, args: dict) -> Any:
    rng = np.random.default_rng(args["seed"])
    host = rng.random(tuple(args["shape"]), dtype=np.float32)
    low, high = np.float32(args["low"]), np.float32(args["high"])
    return xp.asarray(host * (high - low) + low)


def _arange_shape(inputs: list[Shape], args: dict) -> Shape:
    for name in ("start", "stop", "step"):
        value = args[name]
        if isinstance(value, float) and not math.isfinite(value):
            raise ShapeError(f"arange: {name} must be finite, got {value}")
        if isinstance(value, int) and not -(1 << 63) <= value < 1 << 63:
            raise ShapeError(f"arange: {name} must fit in 64 bits (numpy's int64), got {value}")
    if args["step"] == 0:
        raise ShapeError("arange: step must not be 0")
    try:
        return (max(0, math.ceil((args["stop"] - args["start"]) / args["step"])),)
    except OverflowError:
        raise ShapeError(f"arange: [{args['start']}, {args['stop']}) in steps of {args['step']} has more elements "
                         "than a tensor can hold") from None


_SHAPE = Arg("shape", required=True, doc="output shape")
_SEED = Arg("seed", required=True, doc="seed of numpy's default_rng; null draws fresh entropy (nondeterministic)")


def _made(dtype: Dtype) -> Any:
    """The numpy type a constant is made in: the dtype itself for integers and bool, float64 for fp64, else
    float32 (the numeric rule converts it to the stage's dtype)."""
    if dtype.is_exact:
        return dtype.numpy
    return np.float64 if dtype is Dtype.fp64 else np.float32


def _full(xp: Any, inputs: list, args: dict, dtype: Dtype) -> Any:
    value = args["value"]
    if dtype.is_exact and not isinstance(value, int):
        # a float value for an integer tensor: the numeric rule's conversion (toward zero, saturating)
        return to_dtype(xp, xp.full(tuple(args["shape"]), value, dtype=np.float64), dtype)
    if dtype.is_exact and dtype is not Dtype.bool:
        # an integer out of the type's range wraps, as every integer conversion does
        bits = dtype.itemsize_bits
        value %= 1 << bits
        if dtype is not Dtype.uint8 and value >= 1 << (bits - 1):
            value -= 1 << bits
    return xp.full(tuple(args["shape"]), value != 0 if dtype is Dtype.bool else value, dtype=_made(dtype))


def _arange(xp: Any, inputs: list, args: dict, dtype: Dtype) -> Any:
    start, stop, step = args["start"], args["stop"], args["step"]
    if dtype.is_exact and all(isinstance(v, int) for v in (start, stop, step)):
        return to_dtype(xp, xp.arange(start, stop, step, dtype=np.int64), dtype)
    return xp.arange(start, stop, step, dtype=np.float64).astype(_made(dtype))


_HOST = Kernel("host")


def _made_split(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
    """By rows: each device makes its rows (the ``shape`` argument cut at axis 0). Random draws are not
    divided: a device's rows would have to be the same draws the whole tensor makes."""
    return Split((), 0, shape_arg="shape") if out else None

OPS = [
    Op("random.normal", (0, 0), FLOAT_DTYPES, _normal, from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "mean": Arg("number", default=0.0), "std": Arg("number", default=1.0)},
       doc="normally distributed values (drawn as float32)", wgsl=_HOST),
    Op("random.uniform", (0, 0), FLOAT_DTYPES, _uniform, from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "low": Arg("number", default=0.0), "high": Arg("number", default=1.0)},
       doc="uniformly distributed values in [low, high) (drawn as float32)", wgsl=_HOST),
    Op("zeros", (0, 0), ALL_DTYPES, lambda xp, i, a, d: xp.zeros(tuple(a["shape"]), _made(d)),
       from_shape_arg, {"shape": _SHAPE}, doc="a tensor of zeros", wgsl=_HOST, dtype_aware=True, split=_made_split),
    Op("ones", (0, 0), ALL_DTYPES, lambda xp, i, a, d: xp.ones(tuple(a["shape"]), _made(d)),
       from_shape_arg, {"shape": _SHAPE}, doc="a tensor of ones", wgsl=_HOST, dtype_aware=True, split=_made_split),
    Op("arange", (0, 0), ALL_DTYPES, _arange, _arange_shape,
       {"start": Arg("number", default=0), "stop": Arg("number", required=True), "step": Arg("number", default=1)},
       doc="evenly spaced values in [start, stop); integer bounds make integer dtypes exactly", wgsl=_HOST,
       dtype_aware=True),
    Op("full", (0, 0), ALL_DTYPES, _full, from_shape_arg,
       {"shape": _SHAPE, "value": Arg("number", required=True, doc="the value of every element")},
       doc="a tensor of one value; an integer value makes integer dtypes exactly (wrapping outside their range)",
       wgsl=_HOST, dtype_aware=True, split=_made_split),
]
