"""Ops that make a tensor from their arguments alone: random draws, constants, ranges.

Random ops draw float32 values from numpy's ``default_rng(seed)`` on the
host, so a seed gives the same tensor on every executor; on Vulkan every
op here is computed on the host and uploaded (``Kernel("host")``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hetflow.executors.opdecl import ALL_DTYPES, FLOAT_DTYPES, Arg, Kernel, Op, ShapeError, Shape, from_shape_arg

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
    if args["step"] == 0:
        raise ShapeError("arange: step must not be 0")
    return (max(0, math.ceil((args["stop"] - args["start"]) / args["step"])),)


_SHAPE = Arg("shape", required=True, doc="output shape")
_SEED = Arg("seed", required=True, doc="seed of numpy's default_rng; null draws fresh entropy (nondeterministic)")


_HOST = Kernel("host")

OPS = [
    Op("random.normal", (0, 0), FLOAT_DTYPES, _normal, from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "mean": Arg("number", default=0.0), "std": Arg("number", default=1.0)},
       doc="normally distributed values", wgsl=_HOST),
    Op("random.uniform", (0, 0), FLOAT_DTYPES, _uniform, from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "low": Arg("number", default=0.0), "high": Arg("number", default=1.0)},
       doc="uniformly distributed values in [low, high)", wgsl=_HOST),
    Op("zeros", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.zeros(tuple(a["shape"]), np.float32),
       from_shape_arg, {"shape": _SHAPE}, doc="a tensor of zeros", wgsl=_HOST),
    Op("ones", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.ones(tuple(a["shape"]), np.float32),
       from_shape_arg, {"shape": _SHAPE}, doc="a tensor of ones", wgsl=_HOST),
    Op("arange", (0, 0), ALL_DTYPES,
       lambda xp, i, a: xp.arange(a["start"], a["stop"], a["step"], dtype=np.float64).astype(np.float32),
       _arange_shape,
       {"start": Arg("number", default=0), "stop": Arg("number", required=True), "step": Arg("number", default=1)},
       doc="evenly spaced values in [start, stop)", wgsl=_HOST),
    Op("full", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.full(tuple(a["shape"]), np.float32(a["value"]), np.float32),
       from_shape_arg, {"shape": _SHAPE, "value": Arg("number", required=True, doc="the value of every element")},
       doc="a tensor of one value", wgsl=_HOST),
]
