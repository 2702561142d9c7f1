"""How each dtype is carried in a cupy array, and the codecs between a carrier and float32.

cupy has no float8 and no int4, and its bfloat16 (v14+) is partial, so
each dtype lives on the device in a *carrier* array whose bytes are the
dtype's bytes (:data:`CARRIERS`): fp32, fp16, fp64, int8, int16, int32,
int64, uint8 and bool as themselves (bool one byte, 0 or 1), bf16 as the
uint16 of its bits, fp8e4m3 and fp8e5m2 as the uint8 of their bits, int4
as one int8 per value in [-8, 7].

Before an op, :func:`widen` decodes a carrier into values cupy computes
on: bf16 by a bit shift and fp8 by a 256-entry table to float32, fp16,
int8 and int4 to float32 (the quantized activations compute as float32),
and the dtypes cupy holds natively (:data:`NATIVE`: the integers, bool,
fp64) as they are, so the op's compute type (:func:`hetflow.executors.opdecl.compute_type`)
is what it is on the CPU: integers as they are, float64 where an input
or the output is fp64. After it, :func:`narrow` converts the result to
the stage's dtype by the op library's rule (:func:`~hetflow.executors.opdecl.to_dtype`):
round to nearest even in integer arithmetic for bf16, a nearest-value
search with ties to the even code for fp8, saturating rounding for
int8/int4, toward zero and saturating from floats into the integers,
wrapping between integers, ``!= 0`` into bool. Both are written against
an array namespace ``xp`` and agree bit for bit with ml_dtypes and the CPU
executor on numpy, which is how they are tested on machines without a
GPU. (A float64 result narrowed to bf16 or fp8 goes through float32
first, as ml_dtypes' bf16 does.)

Examples
--------
>>> import numpy as np
>>> carrier = narrow(np, np.array([1.0, 0.1, -448.0, 1000.0], np.float32), Dtype.fp8e4m3)
>>> carrier.dtype, widen(np, carrier, Dtype.fp8e4m3).tolist()
(dtype('uint8'), [1.0, 0.1015625, -448.0, nan])
>>> unpack_int4(np, pack_int4(np, np.array([-8, 7, 3], np.int8)), 3).tolist()
[-8, 7, 3]
>>> narrow(np, np.array([2.0**60 + 2.0**40, -1e30, 2.9]), Dtype.int64).tolist()
[1152922604118474752, -9223372036854775808, 2]
>>> widen(np, np.array([2**62 + 1]), Dtype.int64).tolist()  # integers reach the op as they are
[4611686018427387905]
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import to_dtype

__all__ = ["CARRIERS", "NATIVE", "widen", "narrow", "pack_int4", "unpack_int4"]

CARRIERS: dict[Dtype, np.dtype] = {
    Dtype.fp32: np.dtype(np.float32),
    Dtype.fp16: np.dtype(np.float16),
    Dtype.bf16: np.dtype(np.uint16),
    Dtype.fp8e4m3: np.dtype(np.uint8),
    Dtype.fp8e5m2: np.dtype(np.uint8),
    Dtype.int8: np.dtype(np.int8),
    Dtype.int4: np.dtype(np.int8),
    Dtype.int16: np.dtype(np.int16),
    Dtype.int32: np.dtype(np.int32),
    Dtype.int64: np.dtype(np.int64),
    Dtype.uint8: np.dtype(np.uint8),
    Dtype.bool: np.dtype(np.bool_),
    Dtype.fp64: np.dtype(np.float64),
}
"""The device array dtype each hetflow dtype is carried in."""

NATIVE = frozenset({Dtype.int16, Dtype.int32, Dtype.int64, Dtype.uint8, Dtype.bool, Dtype.fp64})
"""The dtypes an op receives as they are carried: cupy computes on them natively."""

_FP8 = (Dtype.fp8e4m3, Dtype.fp8e5m2)


@lru_cache(maxsize=None)
def _fp8_tables(dtype: Dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(decode table, ascending non-negative values, their codes) of an fp8 dtype, from ml_dtypes.

    The value list ends with a *sentinel* one step past the largest finite
    value, coded as what an overflow becomes (NaN for fp8e4m3, which has no
    infinity; +inf for fp8e5m2), so rounding past the top is the same
    nearest-value search as everywhere else.
    """
    codes = np.arange(256, dtype=np.uint8)
    decoded = codes.view(dtype.numpy).astype(np.float32)
    positive = (codes < 0x80) & np.isfinite(decoded)
    values, order = np.unique(decoded[positive], return_index=True)
    kept = codes[positive][order]
    top, below = values[-1], values[-2]
    if dtype is Dtype.fp8e4m3:
        sentinel, code = np.float32(top + (top - below)), np.uint8(0x7F)
    else:
        sentinel, code = np.float32(2 * top - below), np.uint8(0x7C)
    return decoded, np.append(values, sentinel).astype(np.float32), np.append(kept, code).astype(np.uint8)


def widen(xp: Any, carrier: Any, dtype: Dtype) -> Any:
    """The values of a carrier array of ``dtype``: as they are for :data:`NATIVE` dtypes, else float32."""
    if dtype is Dtype.fp32 or dtype in NATIVE:
        return carrier
    if dtype is Dtype.bf16:
        return (carrier.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if dtype in _FP8:
        return xp.asarray(_fp8_tables(dtype)[0])[carrier]
    return carrier.astype(np.float32)


def narrow(xp: Any, values: Any, dtype: Dtype) -> Any:
    """The carrier array of an op's result ``values`` (its compute type) converted to ``dtype`` by the op library's rule."""
    if dtype in NATIVE or dtype is Dtype.fp16 or dtype is Dtype.fp32:
        return to_dtype(xp, values, dtype)  # one rounding from whatever the op computed in, as on the CPU
    values = values.astype(np.float32, copy=False)
    if dtype is Dtype.int8:
        return to_dtype(xp, values, Dtype.int8)
    if dtype is Dtype.int4:
        return to_dtype(xp, xp.clip(values, np.float32(-8), np.float32(7)), Dtype.int8)
    if dtype is Dtype.bf16:
        bits = values.view(np.uint32)
        rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
        quiet = (bits >> np.uint32(16)) | np.uint32(0x0040)
        return xp.where(xp.isnan(values), quiet, rounded).astype(np.uint16)
    _, table, codes = _fp8_tables(dtype)
    table, codes = xp.asarray(table), xp.asarray(codes)
    magnitude = xp.abs(values)
    hi = xp.clip(xp.searchsorted(table, magnitude), 0, table.size - 1)
    lo = xp.clip(hi - 1, 0, table.size - 1)
    below, above = magnitude - table[lo], table[hi] - magnitude
    # Nearest value; on a tie the even code, which is the even mantissa.
    take_lo = (below < above) | ((below == above) & (codes[lo] % 2 == 0))
    code = xp.where(take_lo, codes[lo], codes[hi])
    nan_code = np.uint8(0x7F) if dtype is Dtype.fp8e4m3 else np.uint8(0x7E)
    code = xp.where(xp.isnan(values), nan_code, code)
    sign = xp.signbit(values).astype(np.uint8) << np.uint8(7)
    return (code | sign).astype(np.uint8)


def pack_int4(xp: Any, carrier: Any) -> Any:
    """Portable int4 bytes of an int8 carrier: two per byte, low nibble first."""
    nibbles = carrier.reshape(-1).view(np.uint8) & np.uint8(0x0F)
    if nibbles.size % 2:
        nibbles = xp.concatenate([nibbles, xp.zeros(1, np.uint8)])
    return nibbles[0::2] | (nibbles[1::2] << np.uint8(4))


def unpack_int4(xp: Any, packed: Any, count: int) -> Any:
    """The int8 carrier of ``count`` int4 values from their portable bytes."""
    nibbles = xp.empty(packed.size * 2, np.uint8)
    nibbles[0::2] = packed & np.uint8(0x0F)
    nibbles[1::2] = packed >> np.uint8(4)
    return ((nibbles[:count].astype(np.int16) ^ 8) - 8).astype(np.int8)
