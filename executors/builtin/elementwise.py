"""Elementwise ops: arithmetic and comparisons (with a scalar ``value`` in place of a second input), ``where``, activations and math functions, ``cast``.

Binary ops broadcast with numpy's rule; comparisons give 1 or 0. Each op
with a Vulkan kernel names its WGSL expression beside it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import ALL_DTYPES, FLOAT_DTYPES, Arg, Kernel, Op, Shape, broadcast, same

__all__ = ["OPS"]


def _with_value(f: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    """A binary body that takes its second operand from ``args.value`` when there is one input."""

    def body(xp: Any, inputs: list, args: dict) -> Any:
        other = inputs[1] if len(inputs) > 1 else np.float32(args["value"])
        return f(inputs[0], other)

    return body


def _scalar_checks(n_inputs: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    if n_inputs == 2 and args.get("value") is not None:
        return [("value", "op {op} takes a second input or args.value, not both")]
    if n_inputs == 1 and args.get("value") is None:
        return [(None, "op {op} takes a second input or args.value (a number), and has neither")]
    return []


def _scalar_shape(inputs: list[Shape], args: dict) -> Shape:
    return broadcast(inputs, args) if len(inputs) > 1 else inputs[0]


_VALUE = Arg("number?", default=None, doc="the second operand as a number, in place of a second input")


def _binary(name: str, f: Callable[[Any, Any], Any], dtypes: frozenset[Dtype], doc: str, wgsl: str) -> Op:
    def checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
        return [(k, m.replace("{op}", repr(name))) for k, m in _scalar_checks(n, args)]

    return Op(name, (1, 2), dtypes, _with_value(f), _scalar_shape, {"value": _VALUE}, doc=doc, checks=checks,
              wgsl=Kernel("binary", wgsl))


def _gelu(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    c = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + xp.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def _sigmoid(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    e = xp.exp(-xp.abs(x))  # never overflows, unlike exp(-x) for very negative x
    return xp.where(x >= 0, np.float32(1) / (np.float32(1) + e), e / (np.float32(1) + e))


_GELU = "0.5 * x * (1.0 + tanh(clamp(0.7978846 * (x + 0.044715 * x * x * x), -15.0, 15.0)))"

OPS = [
    _binary("add", lambda a, b: a + b, ALL_DTYPES, "elementwise sum, broadcasting; or x + args.value", "a + b"),
    _binary("sub", lambda a, b: a - b, ALL_DTYPES, "elementwise difference; or x - args.value", "a - b"),
    _binary("mul", lambda a, b: a * b, ALL_DTYPES, "elementwise product; or x * args.value", "a * b"),
    _binary("div", lambda a, b: a / b, FLOAT_DTYPES, "elementwise quotient; or x / args.value", "a / b"),
    _binary("eq", lambda a, b: (a == b).astype(np.float32), ALL_DTYPES, "1 where x == y (or args.value), else 0",
            "select(0.0, 1.0, a == b)"),
    _binary("lt", lambda a, b: (a < b).astype(np.float32), ALL_DTYPES, "1 where x < y (or args.value), else 0",
            "select(0.0, 1.0, a < b)"),
    _binary("gt", lambda a, b: (a > b).astype(np.float32), ALL_DTYPES, "1 where x > y (or args.value), else 0",
            "select(0.0, 1.0, a > b)"),
    Op("where", (3, 3), ALL_DTYPES, lambda xp, i, a: xp.where(i[0] != 0, i[1], i[2]), broadcast,
       doc="elementwise: b where cond is nonzero, else c (inputs: cond, b, c), broadcasting"),
    Op("relu", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.maximum(i[0], np.float32(0)), same, doc="max(x, 0)",
       wgsl=Kernel("unary", "max(x, 0.0)")),
    Op("gelu", (1, 1), FLOAT_DTYPES, _gelu, same, doc="GELU, tanh approximation", wgsl=Kernel("unary", _GELU)),
    Op("silu", (1, 1), FLOAT_DTYPES, lambda xp, i, a: i[0] / (np.float32(1) + xp.exp(-i[0])), same,
       doc="x * sigmoid(x)", wgsl=Kernel("unary", "x / (1.0 + exp(-x))")),
    Op("exp", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.exp(i[0]), same, doc="e^x"),
    Op("log", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.log(i[0]), same, doc="natural logarithm"),
    Op("sqrt", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.sqrt(i[0]), same, doc="square root"),
    Op("tanh", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.tanh(i[0]), same, doc="hyperbolic tangent"),
    Op("sigmoid", (1, 1), FLOAT_DTYPES, _sigmoid, same, doc="1 / (1 + e^-x)"),
    Op("cast", (1, 1), ALL_DTYPES, lambda xp, i, a: i[0], same, doc="convert to the stage's dtype",
       wgsl=Kernel("unary", "x")),
]
