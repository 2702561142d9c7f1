"""The op library: one registry, written once against an array module.

Every op is an :class:`Op` entry in :data:`REGISTRY`: its name, how many
inputs it takes, the arguments it accepts, the output dtypes it supports,
a shape rule the planner uses before anything runs, and a body that takes
the array namespace ``xp`` explicitly (numpy on the host, cupy on a GPU),
so every executor shares one implementation.

Numeric rule, the same for every op and executor (:mod:`hetflow.executors.opdecl`):
inputs are widened to the call's compute type, float32 unless an input
or the output is fp64 (float64), or, for an op that computes on integers
or only moves values, the inputs' own integer or bool type; the result is
converted to the stage's output dtype. Float outputs round to nearest even (ml_dtypes'
conversion); int8 and int4 outputs round to nearest even and saturate to
the type's range, NaN becoming 0; the integers take floats toward zero,
saturating, and other integers by wrapping. Random ops draw float32 values from
numpy's ``default_rng(seed)`` on the host, so a seed gives the same tensor
on every executor.

What an op is (:class:`Op`, :class:`Arg`, :class:`Kernel`) and the
numeric rule are in :mod:`hetflow.executors.opdecl`; the built-in ops are
declared family by family in :mod:`hetflow.executors.builtin`; users' ops
join the registry through :mod:`hetflow.executors.plugins`.

Examples
--------
>>> import numpy as np
>>> op = REGISTRY["matmul"]
>>> op.shape([(2, 3), (3, 5)], {})
(2, 5)
>>> run(np, "add", [np.ones(2, np.float32), np.ones(2, np.float32)], {}, Dtype.fp32).tolist()
[2.0, 2.0]
>>> run(np, "cast", [np.array([300.0, -1.5], np.float32)], {}, Dtype.int8).tolist()
[127, -2]
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.builtin import ENTRIES
from hetflow.executors.builtin.loading import LOAD_FORMATS, lossy_load, ml_finfo_max, read_array  # noqa: F401
from hetflow.executors.opdecl import (  # noqa: F401 - the registry's types, imported from here by the engine and plugins
    ALL_DTYPES,
    EXACT_DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    NUMERIC_DTYPES,
    QUANT_DTYPES,
    QUANT_MAX,
    Arg,
    Kernel,
    Op,
    Shape,
    ShapeError,
    check_args,
    compute_type,
    default_dtype,
    dtype_of,
    is_deterministic,
    to_dtype,
    widen,
)
from hetflow.executors.opdecl import check_value as _check_value  # noqa: F401 - the schema generator asks it

__all__ = ["Op", "Arg", "Kernel", "ShapeError", "BUILTIN", "QUANT_MAX", "QUANT_DTYPES", "compute", "REGISTRY", "FLOAT_DTYPES", "ALL_DTYPES", "run", "to_dtype", "check_args", "is_deterministic"]


def run(xp: Any, name: str, inputs: Sequence[Any], args: Mapping[str, Any], dtype: Dtype, vendor: Any = None) -> Any:
    """Run op ``name`` on arrays of namespace ``xp`` and return its output at ``dtype``."""
    return to_dtype(xp, compute(xp, name, inputs, args, dtype, vendor), dtype)


def compute(xp: Any, name: str, inputs: Sequence[Any], args: Mapping[str, Any], dtype: Dtype, vendor: Any = None) -> Any:
    """Op ``name``'s result in its compute type (:func:`compute_type`), before conversion to ``dtype``.

    The inputs are widened here to the compute type. Executors that carry
    a dtype in another form on their device (the CUDA executor's fp8
    bytes) decode it around this themselves. ``vendor`` (a :class:`Vendor`
    or its name) picks the op's kernel for that vendor where it has one.
    """
    op = REGISTRY[name]
    to = compute_type(op, inputs, dtype)
    inputs = [widen(xp, x, to) for x in inputs]
    full = op.with_defaults(args)
    vendor = getattr(vendor, "value", vendor)
    if op.invoke is not None:
        out = op.invoke(xp, vendor, inputs, full, dtype)
    else:
        body = op.kernels.get(vendor, op.body) if op.kernels else op.body
        out = body(xp, inputs, full, dtype) if op.dtype_aware else body(xp, inputs, full)
    return xp.asarray(out) if to is None else xp.asarray(out, dtype=to)


REGISTRY: dict[str, Op] = {op.name: op for op in ENTRIES}
"""Every op by name: the built-in ones, then users' ops as their plugins load."""

BUILTIN: frozenset[str] = frozenset(REGISTRY)
"""The names of the built-in ops, which no plugin may define."""
