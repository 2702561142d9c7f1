"""Products: ``matmul`` with numpy's rules, scaled dot-product ``attention``, and ``rope``, the rotary position embedding it is used with."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hetflow.executors.opdecl import ALL_DTYPES, FLOAT_DTYPES, Arg, Kernel, Op, Shape, ShapeError

__all__ = ["OPS"]


def _matmul_shape(inputs: list[Shape], args: dict) -> Shape:
    a, b = inputs
    if not a or not b:
        raise ShapeError("matmul needs inputs of rank 1 or more")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {list(a)} @ {list(b)}")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions do not broadcast: {list(a)} @ {list(b)}") from None
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _attention_shape(inputs: list[Shape], args: dict) -> Shape:
    q, k, v = inputs
    if min(len(q), len(k), len(v)) < 2:
        raise ShapeError("attention needs q, k and v of rank 2 or more ([..., length, dim])")
    if q[-1] != k[-1]:
        raise ShapeError(f"attention: q {list(q)} and k {list(k)} differ in their last axis")
    if k[-2] != v[-2]:
        raise ShapeError(f"attention: k {list(k)} and v {list(v)} differ in their length axis")
    try:
        batch = tuple(np.broadcast_shapes(q[:-2], k[:-2], v[:-2]))
    except ValueError:
        raise ShapeError(f"attention: batch axes of {list(q)}, {list(k)}, {list(v)} do not broadcast") from None
    return batch + (q[-2], v[-1])


def _attention(xp: Any, inputs: list, args: dict) -> Any:
    q, k, v = inputs
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = np.float32(args["scale"] if args["scale"] is not None else 1.0 / math.sqrt(max(d, 1)))
    scores = xp.matmul(q, xp.swapaxes(k, -1, -2)) * scale
    if args["causal"]:
        # Aligned to the bottom right: query i sees keys up to i + (lk - lq),
        # so a query block that continues a longer key sequence (a KV cache)
        # sees everything before it; with lq == lk this is the usual lower triangle.
        rows = xp.arange(lq).reshape(lq, 1)
        cols = xp.arange(lk).reshape(1, lk)
        scores = xp.where(cols <= rows + (lk - lq), scores, np.float32(-np.inf))
    top = xp.max(scores, axis=-1, keepdims=True) if lk else xp.zeros(scores.shape[:-1] + (1,), np.float32)
    top = xp.where(xp.isfinite(top), top, np.float32(0))
    e = xp.exp(scores - top)
    total = xp.sum(e, axis=-1, keepdims=True)
    weights = e / xp.where(total > 0, total, np.float32(1))
    return xp.matmul(weights, v)


def _rope_shape(inputs: list[Shape], args: dict) -> Shape:
    x = inputs[0]
    if len(x) < 2 or x[-1] % 2:
        raise ShapeError(f"rope needs an input [..., length, dim] with an even dim, got {list(x)}")
    return x


def _rope(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    length, d = x.shape[-2], x.shape[-1]
    # Angles in float64 on the host: position * frequency loses digits in
    # float32 long before the positions a model uses.
    inv = float(args["base"]) ** (-np.arange(0, d // 2, dtype=np.float64) * 2.0 / d)
    angles = (np.arange(length, dtype=np.float64) + args["offset"])[:, None] * inv[None, :]
    cos, sin = xp.asarray(np.cos(angles).astype(np.float32)), xp.asarray(np.sin(angles).astype(np.float32))
    if args["interleaved"]:
        a, b = x[..., 0::2], x[..., 1::2]
        out = xp.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return xp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


OPS = [
    Op("matmul", (2, 2), ALL_DTYPES, lambda xp, i, a: xp.matmul(i[0], i[1]), _matmul_shape,
       doc="matrix product with numpy's matmul rules", wgsl=Kernel("matmul")),
    Op("attention", (3, 3), FLOAT_DTYPES, _attention, _attention_shape,
       {"causal": Arg("bool", default=False), "scale": Arg("number?", default=None)},
       doc="softmax(q @ k^T * scale) @ v; scale defaults to 1/sqrt(dim); causal masks later keys"),
    Op("rope", (1, 1), FLOAT_DTYPES, _rope, _rope_shape,
       {"base": Arg("number", default=10000.0), "offset": Arg("int", default=0),
        "interleaved": Arg("bool", default=False)},
       doc="rotary position embedding over [..., length, dim]; halves rotate (interleaved: pairs)"),
]
