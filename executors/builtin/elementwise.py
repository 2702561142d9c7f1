"""Elementwise ops: arithmetic and comparisons (with a scalar ``value`` in place of a second input), ``where``, activations and math functions, ``cast``.

Binary ops broadcast with numpy's rule. Each op with a Vulkan kernel
names its WGSL expression beside it.

Dtypes, following ONNX where ONNX defines the op. Arithmetic on integers
(``add``, ``sub``, ``mul``, ``div``, ``mod``, ``pow``, ``neg``, ``abs``,
``maximum``, ``minimum``, ``clip``, ``relu``) computes on the integers as
they are and wraps (two's complement), never through floats; a bool
operand counts as 0 or 1. Comparisons (``eq``, ``lt``, ``le``, ``gt``,
``ge``) give ``bool``. ``where`` takes a bool condition (any nonzero value
of another dtype is true) and gives its branches' type. ``cast`` only
converts, by the numeric rule of :mod:`hetflow.executors.opdecl`.

Integer ``div`` truncates toward zero (C's rule, and ONNX's reference:
``-7 / 2`` is ``-3``); an integer divided by zero gives 0, as ONNX's
reference implementation gives, and ``INT_MIN / -1`` wraps to ``INT_MIN``.
``mod`` is ONNX Mod: with ``fmod: 0`` the result takes the divisor's sign
(Python's ``%``: ``-7 mod 2`` is ``1``), with ``fmod: 1`` the dividend's
(C's ``fmod``: ``-1``); an integer mod zero gives 0, a float one NaN.

Examples
--------
>>> import numpy as np
>>> from hetflow.executors.ops import run
>>> run(np, "div", [np.array([-7, 7, 5, -2**63], np.int64), np.array([2, -2, 0, -1], np.int64)], {}, Dtype.int64).tolist()
[-3, -3, 0, -9223372036854775808]
>>> run(np, "mod", [np.array([-7, 7], np.int32), np.array([2, -2], np.int32)], {}, Dtype.int32).tolist()
[1, -1]
>>> run(np, "mod", [np.array([-7, 7], np.int32), np.array([2, -2], np.int32)], {"fmod": 1}, Dtype.int32).tolist()
[-1, 1]
>>> run(np, "lt", [np.array([1, 5], np.int64)], {"value": 3}, Dtype.bool).tolist()
[True, False]
>>> run(np, "pow", [np.array([2, -1, 3], np.int64), np.array([62, -3, -1], np.int64)], {}, Dtype.int64).tolist()
[4611686018427387904, -1, 0]
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Mapping

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.opdecl import (split_rows, ALL_DTYPES, FLOAT_DTYPES, NUMERIC_DTYPES, QUANT_DTYPES, QUANT_MAX, Arg, Kernel,
                                      Op, Shape, broadcast, dtype_of, same)

__all__ = ["OPS", "erf"]


def _operand(xp: Any, x: Any, value: int | float) -> tuple[Any, Any]:
    """``x`` and ``args.value`` as arrays of one type: the value takes ``x``'s type where it fits in it.

    An integer tensor with an integer value stays integer (widened to int64
    only when the value does not fit its type, which the output dtype then
    wraps back); a float value makes the computation float64.
    """
    kind = x.dtype.kind
    if kind == "f":
        return x, xp.asarray(value, dtype=x.dtype)
    if isinstance(value, int) and not isinstance(value, bool):
        if kind in "iu":
            info = np.iinfo(x.dtype)
            if info.min <= value <= info.max:
                return x, xp.asarray(value, dtype=x.dtype)
        if -(2**63) <= value < 2**63:
            return x.astype(np.int64), xp.asarray(value, dtype=np.int64)
    return x.astype(np.float64), xp.asarray(value, dtype=np.float64)


def _with_value(f: Callable[[Any, Any, Any], Any]) -> Callable[..., Any]:
    """A binary body that takes its second operand from ``args.value`` when there is one input."""

    def body(xp: Any, inputs: list, args: dict) -> Any:
        a, b = (inputs[0], inputs[1]) if len(inputs) > 1 else _operand(xp, inputs[0], args["value"])
        with np.errstate(all="ignore"):  # integer overflow wraps and x/0 follows IEEE: both documented results
            return f(xp, a, b)

    return body


def _numeric(x: Any) -> Any:
    """Bools as the integers 0 and 1 (numpy's ``True + True`` is ``True``)."""
    return x.astype(np.int64) if x.dtype == np.bool_ else x


def _is_int(x: Any) -> bool:
    return x.dtype.kind in "iub"


def _div(xp: Any, a: Any, b: Any) -> Any:
    a, b = _numeric(a), _numeric(b)
    if not (_is_int(a) and _is_int(b)):
        return a / b
    # Truncated toward zero (ONNX's reference: C's rule), in integers: a float
    # quotient would round values above 2^53.
    zero = b == 0
    safe = xp.where(zero, 1, b)
    q = a // safe
    q = q + ((q * safe != a) & ((a < 0) != (safe < 0))).astype(q.dtype)
    return xp.where(zero, 0, q)


def _mod(fmod: int) -> Callable[..., Any]:
    def f(xp: Any, a: Any, b: Any) -> Any:
        a, b = _numeric(a), _numeric(b)
        if not (_is_int(a) and _is_int(b)):
            return xp.fmod(a, b) if fmod else xp.mod(a, b)
        zero = b == 0
        safe = xp.where(zero, 1, b)
        return xp.where(zero, 0, xp.fmod(a, safe) if fmod else xp.mod(a, safe))

    return f


def _mod_body(xp: Any, inputs: list, args: dict) -> Any:
    return _with_value(_mod(args["fmod"]))(xp, inputs, args)


def _pow(xp: Any, a: Any, b: Any) -> Any:
    a, b = _numeric(a), _numeric(b)
    if not (_is_int(a) and _is_int(b)):
        out = xp.power(a, b)
        if b.size == 1 and float(b.reshape(-1)[0]) == 0.5:
            # numpy's power takes sqrt for a lone exponent of 0.5: sqrt(-0) is -0 and sqrt(-inf) NaN, where C's pow
            # gives +0 and +inf
            out = xp.where(xp.isneginf(a), xp.asarray(xp.inf, dtype=out.dtype), out + xp.asarray(0.0, dtype=out.dtype))
        return out
    negative = b < 0
    raised = xp.power(a, xp.where(negative, 0, b))  # numpy's integer power wraps
    # a^-n = 1 / a^n toward zero: 1 for a = 1, +-1 for a = -1, 0 otherwise (0^-n included)
    inverse = xp.where(a == 1, 1, xp.where(a == -1, xp.where(b % 2 == 0, 1, -1), 0))
    return xp.where(negative, inverse, raised)


def _scalar_checks(n_inputs: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    if n_inputs == 2 and args.get("value") is not None:
        return [("value", "op {op} takes a second input or args.value, not both")]
    if n_inputs == 1 and args.get("value") is None:
        return [(None, "op {op} takes a second input or args.value (a number), and has neither")]
    return []


def _scalar_shape(inputs: list[Shape], args: dict) -> Shape:
    return broadcast(inputs, args) if len(inputs) > 1 else inputs[0]


_VALUE = Arg("number?", default=None, doc="the second operand as a number, in place of a second input")


def _to_bool(inputs: list[Dtype], args: Mapping[str, Any]) -> Dtype:
    return Dtype.bool


def _common(dtypes: list[Dtype]) -> Dtype:
    """The type a stage whose values come from ``dtypes`` keeps: theirs when they agree, numpy's promotion of
    integers, fp64 when one is, else fp32 (the floats' usual default)."""
    if not dtypes:
        return Dtype.fp32
    if all(d is dtypes[0] for d in dtypes) and (dtypes[0].is_exact or dtypes[0] is Dtype.fp64):
        return dtypes[0]
    if all(d.is_exact for d in dtypes):
        found = np.result_type(*(d.numpy for d in dtypes))
        try:
            return dtype_of(np.empty(0, found))
        except KeyError:  # uint16 and wider unsigned types: hetflow's widest integer
            return Dtype.int64
    return Dtype.fp64 if Dtype.fp64 in dtypes else Dtype.fp32


def _base_type(inputs: list[Dtype], args: Mapping[str, Any]) -> Dtype:
    """ONNX Pow's output type: the base's."""
    return _common(inputs[:1])


def _branch_type(inputs: list[Dtype], args: Mapping[str, Any]) -> Dtype:
    return _common(inputs[1:3])


def _binary(name: str, f: Callable[[Any, Any, Any], Any], dtypes: frozenset[Dtype], doc: str, wgsl: str | None,
            **extra: Any) -> Op:
    def checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
        return [(k, m.replace("{op}", repr(name))) for k, m in _scalar_checks(n, args)]

    return Op(name, (1, 2), dtypes, _with_value(f), _scalar_shape, {"value": _VALUE}, doc=doc, checks=checks,
              wgsl=Kernel("binary", wgsl) if wgsl else None, exact=True, **extra)


def _compare(name: str, f: Callable[[Any, Any], Any], wgsl: str, says: str) -> Op:
    return _binary(name, lambda xp, a, b: f(a, b), ALL_DTYPES,
                   f"true where {says} (or args.value), as bool (ONNX {name.capitalize()})", wgsl, result=_to_bool)


def _mod_checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    problems = [(k, m.replace("{op}", "'mod'")) for k, m in _scalar_checks(n, args)]
    if args.get("fmod", 0) not in (0, 1):
        problems.append(("fmod", f"argument 'fmod' of op 'mod' must be 0 (the divisor's sign) or 1 (the dividend's), "
                                 f"got {args['fmod']!r}"))
    return problems


def _where(xp: Any, inputs: list, args: dict) -> Any:
    cond, a, b = inputs
    cond = cond if cond.dtype == np.bool_ else cond != 0
    if xp is not np:
        return xp.where(cond, a, b)
    # the larger branch copied whole, the other over it where chosen: a plain copy and a masked one beat where's
    # three-way select (a causal mask over 12 heads' 512 x 512 scores: 1.4 ms against 2.8)
    out = np.empty(np.broadcast_shapes(cond.shape, a.shape, b.shape), np.result_type(a, b))
    if b.size > a.size:
        np.copyto(out, b)
        np.copyto(out, a, where=cond)
    else:
        np.copyto(out, a)
        np.copyto(out, b, where=~cond)
    return out


def int_clip_bounds(lo: float | None, hi: float | None, low: int, high: int) -> tuple[int | None, int | None]:
    """``clip``'s bounds on an integer type whose values are ``low``..``high``, as integers of it; None: no bound on
    that side.

    A bound outside the type's range clips nothing on that side, or
    everything to the type's extreme on the other (uint8 with max -2 is
    all 0), an infinite one too; inside it, it is exact in the type. Min
    above max makes every value max, as ONNX says.

    >>> int_clip_bounds(-0.5, float("inf"), 0, 255), int_clip_bounds(float("inf"), None, -128, 127)
    ((0, None), (127, None))
    """
    lo = None if lo is None or lo <= low else high if lo >= high else math.ceil(lo)
    hi = None if hi is None or hi >= high else low if hi <= low else math.floor(hi)
    if lo is not None and hi is not None and lo > hi:
        lo = hi
    return lo, hi


def _clip(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    lo, hi = args["min"], args["max"]
    if _is_int(x):
        # a bool is the integer 0 or 1, as ONNX computes it: min -1 leaves False as it is, where numpy would make
        # -1 True
        low, high = (0, 1) if x.dtype == np.bool_ else (int(np.iinfo(x.dtype).min), int(np.iinfo(x.dtype).max))
        lo, hi = (None if b is None else xp.asarray(b, dtype=x.dtype) for b in int_clip_bounds(lo, hi, low, high))
    else:
        lo = None if lo is None else xp.asarray(lo, dtype=x.dtype)
        hi = None if hi is None else xp.asarray(hi, dtype=x.dtype)
    # maximum, then minimum: NaN stays NaN, and min > max gives max (ONNX's reference, numpy's clip)
    if lo is not None:
        x = xp.maximum(x, lo)
    if hi is not None:
        x = xp.minimum(x, hi)
    return x


def _cast(xp: Any, inputs: list, args: dict, dtype: Dtype) -> Any:
    x = inputs[0]
    if not args["saturate"] or dtype not in QUANT_DTYPES or dtype.kind != "float" or x.dtype == np.bool_:
        return x  # the numeric rule converts it
    # fp8 has no room above its largest finite value (e4m3 no infinity at all): saturate there, as ONNX does
    if x.dtype.kind not in "f":
        x = x.astype(np.float32)
    top = QUANT_MAX[dtype]
    return xp.clip(x, -top, top)


def _clip_checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    # NaN bounds no integer type can hold, and NaN's order WGSL leaves to the device
    return [(name, f"argument {name!r} of op 'clip' is NaN: a bound is a number, or null for none")
            for name in ("min", "max") if isinstance(args.get(name), float) and math.isnan(args[name])]


def _cast_checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    if args.get("saturate", 1) not in (0, 1):
        return [("saturate", f"argument 'saturate' of op 'cast' must be 0 or 1 (ONNX's values), "
                             f"got {args['saturate']!r}")]
    return []


def _gelu(xp: Any, inputs: list, args: dict) -> Any:
    # the formulas' own operations in their order, in two new arrays instead of one per step: each step's
    # array is a fresh allocation, and points of a sweep running at once wait on each other's
    x = inputs[0]
    if args["approximate"] == "none":
        t = _erf_op(xp, x / math.sqrt(2.0))
    else:
        t = xp.multiply(x, 0.044715)
        t *= x
        t *= x
        t += x
        t *= math.sqrt(2.0 / math.pi)
        xp.tanh(t, out=t)
    t += 1.0
    out = xp.multiply(x, 0.5)
    out *= t
    return out


def _gelu_checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    if args.get("approximate", "tanh") not in ("none", "tanh"):
        return [("approximate", f"argument 'approximate' of op 'gelu' must be 'none' (exact, with erf) or 'tanh', "
                                f"got {args['approximate']!r}")]
    return []


def _sigmoid(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    e = xp.exp(-xp.abs(x))  # never overflows, unlike exp(-x) for very negative x
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# W. J. Cody's rational approximations of erf and erfc (Math. Comp. 23 (1969), 631-637; the coefficients of his
# CALERF, netlib specfun): near-minimax to better than float64's precision on each interval
_ERF_A = (3.1611237438705656, 113.864154151050156, 377.485237685302021, 3209.37758913846947, 0.185777706184603153)
_ERF_B = (23.6012909523441209, 244.024637934444173, 1282.61652607737228, 2844.23683343917062)
_ERFC_C = (0.564188496988670089, 8.88314979438837594, 66.1191906371416295, 298.635138197400131,
           881.95222124176909, 1712.04761263407058, 2051.07837782607147, 1230.33935479799725, 2.15311535474403846e-8)
_ERFC_D = (15.7449261107098347, 117.693950891312499, 537.181101862009858, 1621.38957456669019,
           3290.79923573345963, 4362.61909014324716, 3439.36767414372164, 1230.33935480374942)
_ERFC_P = (0.305326634961232344, 0.360344899949804439, 0.125781726111229246, 0.0160837851487422766,
           6.58749161529837803e-4, 0.0163153871373020978)
_ERFC_Q = (2.56852019228982242, 1.87295284992346047, 0.527905102951428412, 0.0605183413124413191,
           0.00233520497626869185)
_SQRT_PI_INV = 0.56418958354775628695


def _host_erf(x: np.ndarray) -> np.ndarray:
    """erf of a float64 array, vectorized: Cody's approximations on their intervals, chosen per element.

    Within a few ulps of the C library's ``erf`` (at most 5 over a
    million values, 72 % of them equal; every float32 result equal:
    ``tests/test_ops_numerics.py``), and 6x faster than calling it per
    element through ``np.frompyfunc`` (1.5 M values: 40 ms against 400).
    """
    with np.errstate(all="ignore"):  # an infinity makes NaNs in the intervals it is not in, never chosen
        if x.size <= _ERF_PIECE:
            return _cody_erf(x)
        # in pieces that stay in the cache: the thirty passes of the formulas over 1.5 M values took twice as long
        # through memory
        flat, out = x.reshape(-1), np.empty(x.shape, np.float64)
        whole = out.reshape(-1)
        for i in range(0, flat.size, _ERF_PIECE):
            whole[i:i + _ERF_PIECE] = _cody_erf(flat[i:i + _ERF_PIECE])
        return out


_ERF_PIECE = 16384


def _cody_erf(x: np.ndarray) -> np.ndarray:
    y = np.abs(x)
    ysq = y * y
    num, den = _ERF_A[4] * ysq, ysq
    for a, b in zip(_ERF_A[:3], _ERF_B[:3]):
        num, den = (num + a) * ysq, (den + b) * ysq
    near = x * (num + _ERF_A[3]) / (den + _ERF_B[3])
    u = np.minimum(y, 4.0)
    num, den = _ERFC_C[8] * u, u
    for c, d in zip(_ERFC_C[:7], _ERFC_D[:7]):
        num, den = (num + c) * u, (den + d) * u
    erfc = (num + _ERFC_C[7]) / (den + _ERFC_D[7])
    far = y > 4.0
    if far.any():
        w = y[far]
        inv = 1.0 / (w * w)
        num, den = _ERFC_P[5] * inv, inv
        for p, q in zip(_ERFC_P[:4], _ERFC_Q[:4]):
            num, den = (num + p) * inv, (den + q) * inv
        erfc[far] = (_SQRT_PI_INV - inv * (num + _ERFC_P[4]) / (den + _ERFC_Q[4])) / w
    # exp(-y^2) as exp(-s^2) exp(-(y - s)(y + s)), s = y cut to 1/16: y^2's rounding error is not amplified
    s = np.trunc(y * 16.0) / 16.0
    erfc *= np.exp(-s * s) * np.exp(-(y - s) * (y + s))
    erfc[y >= 26.543] = 0.0  # it underflows there (infinities included): erf is +-1
    return np.where(y <= 0.46875, near, np.copysign((0.5 - erfc) + 0.5, x))


def erf(xp: Any, x: Any) -> Any:
    """The error function of ``x``, elementwise, computed in float64 and returned in ``x``'s float type.

    numpy has no ``erf``: on the host it is W. J. Cody's rational
    approximations, vectorized (:func:`_host_erf`; within an ulp of the C
    library's ``math.erf``); cupy's arrays go through
    ``cupyx.scipy.special.erf``.

    >>> import math
    >>> values = (-3.0, -0.5, 0.0, 1.0, 2.0, 7.0, float("inf"), -30.0)
    >>> want = np.array([math.erf(v) for v in values])
    >>> bool((np.abs(erf(np, np.array(values)) - want) <= np.spacing(np.abs(want))).all())
    True
    """
    out_type = x.dtype
    wide = x.astype(np.float64)
    if xp is np:
        return _host_erf(np.atleast_1d(wide)).reshape(np.shape(wide)).astype(out_type)
    from cupyx.scipy.special import erf as device_erf

    return device_erf(wide).astype(out_type)


# erf in float32 (:func:`_host_erf32`), the form of N. Juffa's erff: erf(x) = x + x P(x^2) below _ERF32_SPLIT, and
# 1 - exp(t (Q(t) - 1)), t = |x|, above it. The coefficients are this module's own weighted minimax fits (Lawson's
# iteration on 4,001 Chebyshev nodes; bench/erf32_fit.py fits them again): P's relative error is 1.5e-8, the
# exponent's error times erfc 2.9e-9, both far under float32's half ulp, so the float32 rounding of the dozen steps
# decides the result: within 1 ulp of the correctly rounded erf over every 7th float32 in [2^-126, 6], both signs
# (83 % equal; tests/test_onnx_kernels.py checks a sample of them)
_ERF32_P = tuple(np.float32(c) for c in (0.12837915170157424, -0.3761250580590889, 0.11281928045984388,
                                          -0.026770255180217892, 0.0049980284368906286, -0.0006013511246048189))
_ERF32_Q = tuple(np.float32(c) for c in (-0.1285101589916044, -0.6357329501443627, -0.10524202330359203,
                                          0.02287693172134307, -0.0032107977700553654, 0.00021347024033799476))
_ERF32_SPLIT = np.float32(0.921875)
_ERF32_PIECE = 65536


def _erf32_piece(x: np.ndarray, out: np.ndarray) -> None:
    t = np.abs(x)
    s = t * t
    near = np.multiply(_ERF32_P[5], s, out=out)
    for p in _ERF32_P[4:0:-1]:
        near += p
        near *= s
    near += _ERF32_P[0]
    near *= x
    near += x
    # erfc(4) < 2^-25: at t >= 4 erf rounds to +-1 in float32, and the clamp keeps Q(t) where it was fitted
    u = np.minimum(t, np.float32(4.0))
    far = _ERF32_Q[5] * u
    for q in _ERF32_Q[4:0:-1]:
        far += q
        far *= u
    far += _ERF32_Q[0] - np.float32(1.0)
    far *= u
    np.exp(far, out=far)
    np.subtract(np.float32(1.0), far, out=far)
    np.copysign(far, x, out=far)
    np.copyto(out, far, where=t > _ERF32_SPLIT)  # NaN stays in the near form, which keeps it NaN


def _host_erf32(x: np.ndarray) -> np.ndarray:
    """erf of a float32 array, computed in float32: within 1 ulp of the correctly rounded result.

    Both forms are computed over each piece and one chosen per element: a
    boolean gather of the far elements cost more than the far form itself
    (17 ms against 9.4 for 1.5 M values). Pieces of 64 Ki values keep the
    twenty-odd passes in the cache. 1.5 M values: 9.4 ms, against 46 ms
    for :func:`_host_erf` in float64.

    >>> import math
    >>> values = np.array([-3.0, -0.5, 0.0, 1e-30, 0.921875, 2.0, 7.0, np.inf], np.float32)
    >>> got = _host_erf32(values)
    >>> want = np.array([math.erf(float(v)) for v in values], np.float32)
    >>> bool((np.abs(got.view(np.int32) - want.view(np.int32)) <= 1).all()), got.dtype
    (True, dtype('float32'))
    """
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(flat.shape, np.float32)
    with np.errstate(all="ignore"):  # far from the split the unchosen form over- or underflows
        for i in range(0, flat.size, _ERF32_PIECE):
            _erf32_piece(flat[i:i + _ERF32_PIECE], out[i:i + _ERF32_PIECE])
    return out.reshape(np.shape(x))


def _erf_op(xp: Any, x: Any) -> Any:
    """The ``erf`` op's values: float32 on the host where the op computes in float32, else :func:`erf`."""
    if xp is np and x.dtype == np.float32:
        return _host_erf32(x)
    return erf(xp, x)


OPS = [
    _binary("add", lambda xp, a, b: _numeric(a) + _numeric(b), NUMERIC_DTYPES,
            "elementwise sum, broadcasting; or x + args.value. Integers wrap", "a + b"),
    _binary("sub", lambda xp, a, b: _numeric(a) - _numeric(b), NUMERIC_DTYPES,
            "elementwise difference; or x - args.value. Integers wrap", "a - b"),
    _binary("mul", lambda xp, a, b: _numeric(a) * _numeric(b), NUMERIC_DTYPES,
            "elementwise product; or x * args.value. Integers wrap", "a * b"),
    _binary("div", _div, NUMERIC_DTYPES,
            "elementwise quotient; or x / args.value. Integers: truncated toward zero, x / 0 is 0, "
            "INT_MIN / -1 wraps (ONNX Div's reference)", "a / b"),
    Op("mod", (1, 2), NUMERIC_DTYPES, _mod_body, _scalar_shape, {"value": _VALUE, "fmod": Arg(
        "int", default=0, doc="0: the result takes the divisor's sign (Python's %); 1: the dividend's (C's fmod)")},
       doc="elementwise remainder of x / y (or args.value), ONNX Mod; an integer mod 0 is 0, a float one NaN",
       checks=_mod_checks, exact=True),
    _binary("pow", _pow, NUMERIC_DTYPES,
            "x to the power y (or args.value), ONNX Pow: the output takes x's type; integers wrap, and a negative "
            "integer exponent gives 1 / x^n toward zero (1 for x = 1, +-1 for x = -1, else 0)", "pow_f32(a, b)",
            result=_base_type),
    _binary("maximum", lambda xp, a, b: xp.maximum(a, b), NUMERIC_DTYPES,
            "elementwise larger of x and y (or args.value); NaN wins", "max_f32(a, b)"),
    _binary("minimum", lambda xp, a, b: xp.minimum(a, b), NUMERIC_DTYPES,
            "elementwise smaller of x and y (or args.value); NaN wins", "min_f32(a, b)"),
    _compare("eq", lambda a, b: a == b, "select(0.0, 1.0, a == b)", "x == y"),
    _compare("lt", lambda a, b: a < b, "select(0.0, 1.0, a < b)", "x < y"),
    _compare("le", lambda a, b: a <= b, "select(0.0, 1.0, a <= b)", "x <= y"),
    _compare("gt", lambda a, b: a > b, "select(0.0, 1.0, a > b)", "x > y"),
    _compare("ge", lambda a, b: a >= b, "select(0.0, 1.0, a >= b)", "x >= y"),
    Op("where", (3, 3), ALL_DTYPES, _where, broadcast, moves=True, result=_branch_type,
       doc="elementwise: b where cond is true, else c (inputs: cond, b, c), broadcasting (ONNX Where). cond is "
           "bool (any nonzero value of another dtype is true); the output takes the branches' type",
       wgsl=Kernel("where")),
    Op("neg", (1, 1), NUMERIC_DTYPES, lambda xp, i, a: -_numeric(i[0]), same, exact=True,
       doc="-x; integers wrap (-INT_MIN is INT_MIN)", wgsl=Kernel("unary", "-x")),
    Op("abs", (1, 1), NUMERIC_DTYPES, lambda xp, i, a: xp.abs(_numeric(i[0])), same, exact=True,
       doc="|x|; integers wrap (|INT_MIN| is INT_MIN)", wgsl=Kernel("unary", "abs(x)")),
    Op("clip", (1, 1), NUMERIC_DTYPES, _clip, same,
       {"min": Arg("number?", default=None, doc="the lower bound; null: none"),
        "max": Arg("number?", default=None, doc="the upper bound; null: none")}, exact=True,
       doc="x limited to [min, max] (ONNX Clip); NaN stays NaN, and min above max makes every value max; on "
           "integers an infinite bound or one beyond the type's range is its extreme",
       wgsl=Kernel("unary", "clip_f32(x, s0, s1)"), checks=_clip_checks),
    Op("relu", (1, 1), NUMERIC_DTYPES, lambda xp, i, a: xp.maximum(_numeric(i[0]), 0), same, doc="max(x, 0)",
       wgsl=Kernel("unary", "relu_f32(x)"), exact=True),
    Op("gelu", (1, 1), FLOAT_DTYPES, _gelu, same,
       {"approximate": Arg("str", default="tanh", doc="'tanh' (the default, as before) or 'none': exact, with erf")},
       doc="GELU, x * Phi(x); approximate: tanh (the default) uses the tanh approximation, none the exact erf form "
           "(ONNX Gelu's default is none)", wgsl=Kernel("unary", "gelu_f32(x, s0)"), checks=_gelu_checks),
    Op("silu", (1, 1), FLOAT_DTYPES, lambda xp, i, a: i[0] / (1.0 + xp.exp(-i[0])), same,
       doc="x * sigmoid(x)", wgsl=Kernel("unary", "x / (1.0 + exp_f32(-x))")),
    Op("exp", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.exp(i[0]), same, doc="e^x", wgsl=Kernel("unary", "exp_f32(x)")),
    Op("log", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.log(i[0]), same, doc="natural logarithm", wgsl=Kernel("unary", "log_f32(x)")),
    Op("sqrt", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.sqrt(i[0]), same, doc="square root", wgsl=Kernel("unary", "sqrt(x)")),
    Op("tanh", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.tanh(i[0]), same, doc="hyperbolic tangent", wgsl=Kernel("unary", "tanh_f32(x)")),
    Op("sigmoid", (1, 1), FLOAT_DTYPES, _sigmoid, same, doc="1 / (1 + e^-x)", wgsl=Kernel("unary", "sigmoid_f32(x)")),
    Op("erf", (1, 1), FLOAT_DTYPES, lambda xp, i, a: _erf_op(xp, i[0]), same,
       doc="the error function; fp64 computes in float64 (within a few ulps of the C library's erf), narrower "
           "floats in float32 on the host (within 1 ulp of the correctly rounded value), float64 on a GPU",
       wgsl=Kernel("unary", "erf_f32(x)")),
    Op("cast", (1, 1), ALL_DTYPES, _cast, same, {"saturate": Arg(
        "int", default=1, doc="fp8 outputs: 1 saturates at the largest finite value, 0 overflows to inf (e5m2) or "
                              "NaN (e4m3), ONNX's saturate")}, moves=True, dtype_aware=True, checks=_cast_checks,
       doc="convert to the stage's dtype: float to integer toward zero, saturating (NaN: 0); integer to integer "
           "wraps; to bool: x != 0; to int8/int4 rounds to nearest even and saturates (the quantization rule); to "
           "fp8 saturates at the largest finite value unless saturate: 0, NaN staying NaN (ONNX Cast's rule)",
       wgsl=Kernel("unary", "x")),
]

# Every elementwise op divides by rows across an executor's devices; a broadcast operand is read whole.
OPS = [replace(op, split=split_rows) for op in OPS]
