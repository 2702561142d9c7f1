"""Products: ``matmul`` with numpy's rules, scaled dot-product ``attention``, and ``rope``, the rotary position embedding it is used with."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import FLOAT_DTYPES, NUMERIC_DTYPES, Arg, Kernel, Op, Shape, ShapeError, Split

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


def _matmul_split(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
    """By the output's rows (a's rows; b read whole by every device), or by its columns where a is a vector."""
    a, b = inputs
    if len(a) >= 2:
        return Split((len(a) - 2, None), len(out) - 2 if len(b) >= 2 else len(out) - 1)
    if len(b) >= 2:
        return Split((None, len(b) - 1), len(out) - 1)
    return None


def _attention_split(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
    """By heads, each device with its heads' keys and values; packed 3-D inputs by their batch axis."""
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    if len(q) == len(k) == len(v) == 4 and q[1] == k[1] == v[1] and q[0] == k[0] == v[0]:
        # grouped-query attention (fewer kv heads) is not divided: a device would need another device's kv head
        m = None if mask is None else (1 if len(mask) == 4 and mask[1] == q[1] and q[1] > 1 else None)
        return Split((1, 1, 1) + (() if mask is None else (m,)), 1)
    if len(q) == len(k) == len(v) == 3 and q[0] == k[0] == v[0] and (mask is None or len(mask) < 3):
        return Split((0, 0, 0) + (() if mask is None else (None,)), 0)
    return None


def _rows_split(inputs: list[Shape], args: dict, out: Shape) -> Split | None:
    """rope: by rows of [..., length, dim] where it has axes before the length (each row rotates alone)."""
    return Split((0,), 0) if len(inputs[0]) >= 3 else None


def _heads_layout(q: Shape, k: Shape, v: Shape, args: dict) -> tuple[bool, int, int]:
    """(packed, q heads, kv heads): whether q, k, v are 3-D ``[batch, seq, heads * dim]`` and their head counts."""
    qh, kvh = args["q_num_heads"], args["kv_num_heads"]
    ranks = {len(q), len(k), len(v)}
    if qh is None and kvh is None:
        # 3-D inputs without head counts are one head each: [batch, seq, dim]
        return ranks == {3}, 1, 1
    if qh is None or kvh is None:
        raise ShapeError("attention: q_num_heads and kv_num_heads go together")
    if qh < 1 or kvh < 1:
        raise ShapeError(f"attention: q_num_heads {qh} and kv_num_heads {kvh} must be 1 or more")
    if ranks == {4}:
        if (q[1], k[1], v[1]) != (qh, kvh, kvh):
            raise ShapeError(f"attention: 4-D inputs {list(q)}, {list(k)}, {list(v)} carry their heads in axis 1, "
                             f"which does not match q_num_heads {qh} and kv_num_heads {kvh}")
        return False, qh, kvh
    if ranks != {3}:
        raise ShapeError("attention: q_num_heads and kv_num_heads are for 3-D q, k and v "
                         f"[batch, seq, heads * dim], got {list(q)}, {list(k)}, {list(v)}")
    for name, s, h in (("q", q, qh), ("k", k, kvh), ("v", v, kvh)):
        if s[2] % h:
            raise ShapeError(f"attention: the last axis of {name} {list(s)} does not divide into {h} heads")
    return True, qh, kvh


def _unpacked(s: Shape, heads: int) -> Shape:
    return (s[0], heads, s[1], s[2] // heads)


def _attention_shapes(inputs: list[Shape], args: dict) -> tuple[bool, Shape, Shape, Shape, int, Shape]:
    """(packed, q, k, v as [..., heads, seq, dim] or [..., seq, dim], kv head repeats, scores' shape)."""
    q, k, v = (tuple(s) for s in inputs[:3])
    if min(len(q), len(k), len(v)) < 2:
        raise ShapeError("attention needs q, k and v of rank 2 or more ([..., length, dim])")
    packed, qh, kvh = _heads_layout(q, k, v, args)
    if packed:
        q, k, v = _unpacked(q, qh), _unpacked(k, kvh), _unpacked(v, kvh)
    if q[-1] != k[-1]:
        raise ShapeError(f"attention: q {list(q)} and k {list(k)} differ in their last axis")
    if k[-2] != v[-2]:
        raise ShapeError(f"attention: k {list(k)} and v {list(v)} differ in their length axis")
    repeats = 1
    if min(len(q), len(k), len(v)) >= 3 and q[-3] != k[-3] and k[-3] != 1:
        # grouped-query attention: each kv head serves q_heads / kv_heads consecutive q heads (ONNX's repeat)
        if k[-3] != v[-3] or q[-3] % k[-3]:
            raise ShapeError(f"attention: {q[-3]} q heads cannot share {k[-3]} k heads and {v[-3]} v heads "
                             "(grouped-query attention needs as many k as v heads, dividing the q heads)")
        repeats = q[-3] // k[-3]
    grown = [s[:-3] + (s[-3] * repeats,) + s[-2:] if repeats > 1 else s for s in (k, v)]
    try:
        batch = tuple(np.broadcast_shapes(q[:-2], grown[0][:-2], grown[1][:-2]))
    except ValueError:
        raise ShapeError(f"attention: batch axes of {list(q)}, {list(k)}, {list(v)} do not broadcast") from None
    scores = batch + (q[-2], k[-2])
    if len(inputs) > 3:
        m = tuple(inputs[3])
        try:
            fits = len(m) >= 1 and m[-1] <= k[-2] and tuple(np.broadcast_shapes(m[:-1] + (k[-2],), scores)) == scores
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"attention: mask of shape {list(m)} does not broadcast to the scores' shape "
                             f"{list(scores)} (its last axis may be shorter than the keys: the rest is masked)")
    return packed, q, k, v, repeats, scores


def _attention_shape(inputs: list[Shape], args: dict) -> Shape:
    packed, q, k, v, repeats, scores = _attention_shapes(inputs, args)
    out = scores[:-1] + (v[-1],)
    return (out[0], out[2], out[1] * out[3]) if packed else out


def _attention_cost(inputs: list[Shape], args: dict) -> tuple[int, int]:
    """Two products over the scores (q @ k^T, weights @ v) and about five operations a score for the softmax."""
    packed, q, k, v, repeats, scores = _attention_shapes(inputs, args)
    n = math.prod(scores)
    return n * (2 * q[-1] + 2 * v[-1] + 5), 4 * (sum(math.prod(s) for s in inputs) + math.prod(scores[:-1]) * v[-1])


def _mask_bias(xp: Any, mask: Any, keys: int, wide: Any) -> Any:
    """The mask as an additive bias: a bool mask is 0 where true (attend) and -inf where false; a float one is
    added as it is. A mask shorter than the keys masks the rest (ONNX's padding)."""
    if mask.dtype == np.bool_:
        bias = xp.where(mask, 0.0, -math.inf).astype(wide)
    else:
        bias = mask.astype(wide)
    pad = keys - bias.shape[-1]
    if pad > 0:
        bias = xp.concatenate([bias, xp.full(bias.shape[:-1] + (pad,), -math.inf, dtype=wide)], axis=-1)
    return bias


def _attention(xp: Any, inputs: list, args: dict, dtype: Dtype) -> Any:
    shapes = [tuple(x.shape) for x in inputs]
    packed, qs, ks, vs, repeats, _ = _attention_shapes(shapes, args)
    q, k, v = inputs[:3]
    # the op moves its inputs in as they are, so that a bool mask stays bool: widen q, k, v here
    wide = np.float64 if dtype is Dtype.fp64 or any(x.dtype == np.float64 for x in inputs) else np.float32
    q, k, v = (x if x.dtype == wide else x.astype(wide) for x in (q, k, v))
    if packed:
        q, k, v = (xp.transpose(xp.reshape(x, (x.shape[0], x.shape[1], s[1], s[3])), (0, 2, 1, 3))
                   for x, s in ((q, qs), (k, ks), (v, vs)))
    if repeats > 1:
        k, v = xp.repeat(k, repeats, axis=-3), xp.repeat(v, repeats, axis=-3)
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = args["scale"] if args["scale"] is not None else 1.0 / math.sqrt(max(d, 1))
    scores = xp.matmul(q, xp.swapaxes(k, -1, -2)) * xp.asarray(scale, dtype=wide)
    bias = _mask_bias(xp, inputs[3], lk, wide) if len(inputs) > 3 else None
    if args["causal"]:
        # ONNX's rule: query i sees keys j <= i + past_length (its position among the keys); with no past the
        # upper-left triangle, whatever the lengths
        rows = xp.arange(lq).reshape(lq, 1)
        cols = xp.arange(lk).reshape(1, lk)
        causal = xp.where(cols <= rows + args["past_length"], 0.0, -math.inf).astype(wide)
        bias = causal if bias is None else bias + causal
    if bias is not None:
        scores = scores + bias
    if lk:
        top = xp.max(scores, axis=-1, keepdims=True)
    else:
        top = xp.zeros(scores.shape[:-1] + (1,), dtype=wide)
    top = xp.where(xp.isfinite(top), top, xp.asarray(0.0, dtype=wide))
    e = xp.exp(scores - top)
    total = xp.sum(e, axis=-1, keepdims=True)
    weights = e / xp.where(total > 0, total, xp.asarray(1.0, dtype=wide))
    if bias is not None and lk:
        # a query whose bias masks every key gets zeros, decided on the bias as ONNX does (not on the scores)
        hidden = xp.isneginf(xp.max(bias, axis=-1, keepdims=True))
        weights = xp.where(hidden, xp.asarray(0.0, dtype=wide), weights)
    out = xp.matmul(weights, v)
    if packed:
        out = xp.reshape(xp.transpose(out, (0, 2, 1, 3)), (out.shape[0], lq, out.shape[1] * out.shape[3]))
    return out


def _attention_dtypes(inputs: list[Dtype], args: Any) -> str | None:
    if len(inputs) > 3 and inputs[3] is not Dtype.bool and inputs[3].kind != "float":
        return (f"attention's mask must be bool (true: attend) or a float added to the scores, got {inputs[3].value}; "
                "cast it (op: cast, dtype: bool)")
    return None


def _matmul(xp: Any, inputs: list, args: dict) -> Any:
    a, b = (x.astype(np.int64) if x.dtype == np.bool_ else x for x in inputs)
    return xp.matmul(a, b)


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
    cos, sin = xp.asarray(np.cos(angles).astype(x.dtype)), xp.asarray(np.sin(angles).astype(x.dtype))
    if args["interleaved"]:
        a, b = x[..., 0::2], x[..., 1::2]
        out = xp.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return xp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


OPS = [
    Op("matmul", (2, 2), NUMERIC_DTYPES, _matmul, _matmul_shape, exact=True, split=_matmul_split,
       doc="matrix product with numpy's matmul rules; integers wrap", wgsl=Kernel("matmul")),
    Op("attention", (3, 4), FLOAT_DTYPES, _attention, _attention_shape,
       {"causal": Arg("bool", default=False, doc="query i sees keys j <= i + past_length only (ONNX's is_causal)"),
        "scale": Arg("number?", default=None, doc="the scores' scale; null: 1/sqrt(head dim)"),
        "q_num_heads": Arg("int?", default=None, doc="heads of q packed in its last axis (3-D inputs)"),
        "kv_num_heads": Arg("int?", default=None, doc="heads of k and v packed in their last axis (3-D inputs)"),
        "past_length": Arg("int", default=0, doc="keys before the query block (a KV cache): shifts causal")},
       moves=True, dtype_aware=True, input_dtypes=_attention_dtypes, cost_rule=_attention_cost,
       wgsl=Kernel("attention"), split=_attention_split,
       doc="softmax(q @ k^T * scale + mask) @ v (ONNX Attention): q, k, v as [..., heads, seq, dim], or 3-D "
           "[batch, seq, heads * dim] with q_num_heads and kv_num_heads; fewer kv heads than q heads is "
           "grouped-query attention (each kv head serves consecutive q heads). The optional mask is bool (true: "
           "attend) or float (added), broadcast to [..., heads, q_seq, kv_seq]; causal adds ONNX's upper-left "
           "triangle (shifted by past_length) to it. A query that may see no key gives zeros"),
    Op("rope", (1, 1), FLOAT_DTYPES, _rope, _rope_shape,
       {"base": Arg("number", default=10000.0), "offset": Arg("int", default=0),
        "interleaved": Arg("bool", default=False)}, split=_rows_split,
       doc="rotary position embedding over [..., length, dim]; halves rotate (interleaved: pairs)"),
]
