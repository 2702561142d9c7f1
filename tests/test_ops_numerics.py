"""Numerics of the op library against straightforward numpy references.

Every float op here computes in float32 and rounds its result to the stage's dtype,
so each case compares against a float64 reference with a tolerance of
about one unit in the last place of the output dtype (:data:`TOLERANCE`,
relative and absolute), after rounding the reference through that dtype. Integer outputs and the layout ops are exact.
"""

import math
import zlib

import ml_dtypes
import numpy as np
import pytest

from hetflow.executors import ops
from hetflow.executors.base import Dtype
from hetflow.executors.ops import QUANT_MAX, REGISTRY, ShapeError

# (rtol, atol) per output dtype: rtol about one ulp of the format's
# mantissa, atol about the smallest subnormal, plus float32's own error.
TOLERANCE = {
    Dtype.fp32: (2e-5, 1e-5),
    Dtype.fp16: (1e-3, 1e-4),
    Dtype.bf16: (8e-3, 1e-3),
    Dtype.fp8e4m3: (0.07, 4e-3),
    Dtype.fp8e5m2: (0.13, 1e-4),
}
FLOATS = list(TOLERANCE)

rng = np.random.default_rng(42)


@pytest.fixture(autouse=True)
def _own_numbers(request):
    """Each test draws the same numbers however the suite is ordered or split among workers: a module's one
    generator gave each test what the tests before it left, so a test's inputs depended on which ran first."""
    global rng
    rng = np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def run(name, inputs, dtype=Dtype.fp32, **args):
    out = ops.run(np, name, inputs, args, dtype)
    op = REGISTRY[name]
    assert out.dtype == dtype.numpy
    assert tuple(out.shape) == op.shape([x.shape for x in inputs], args), "shape rule and body disagree"
    return out


def close(got, ref, dtype):
    rtol, atol = TOLERANCE[dtype]
    got = np.asarray(got).astype(np.float64)
    # Rounded through the output dtype like the op's result, so an overflow
    # is NaN (fp8e4m3) or inf on both sides.
    ref = np.asarray(ref, dtype=np.float64).astype(np.float32).astype(dtype.numpy).astype(np.float64)
    assert got.shape == ref.shape
    bad = ~(np.abs(got - ref) <= rtol * np.abs(ref) + atol) & ~(np.isnan(got) & np.isnan(ref))
    assert not bad.any(), f"{bad.sum()} of {bad.size} values off at {dtype}: got {got[bad][:5]}, want {ref[bad][:5]}"


# -- elementwise ------------------------------------------------------------------

UNARY = {
    "exp": (np.exp, lambda: normal(64) * 3),
    "log": (np.log, lambda: np.abs(normal(64)) + 1e-3),
    "sqrt": (np.sqrt, lambda: np.abs(normal(64)) * 10),
    "tanh": (np.tanh, lambda: normal(64) * 3),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda: normal(64) * 6),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, dtype):
    ref, make = UNARY[name]
    x = make()
    close(run(name, [x], dtype), ref(x.astype(np.float64)), dtype)


def test_sigmoid_does_not_overflow_at_the_extremes():
    x = np.array([-1e4, -100.0, 0.0, 100.0, 1e4], np.float32)
    with np.errstate(over="raise"):
        assert run("sigmoid", [x]).tolist() == [0.0, pytest.approx(math.exp(-100), rel=1e-5, abs=1e-44), 0.5, 1.0, 1.0]


def test_log_and_sqrt_outside_their_domain_give_nan_like_numpy():
    with np.errstate(invalid="ignore", divide="ignore"):
        assert np.isnan(run("log", [np.array([-1.0], np.float32)])).all()
        assert run("log", [np.array([0.0], np.float32)]).tolist() == [-math.inf]
        assert np.isnan(run("sqrt", [np.array([-4.0], np.float32)])).all()


# -- normalization ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rmsnorm(dtype):
    x, w = normal(4, 32).astype(np.float64), normal(32).astype(np.float64)
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    close(run("rmsnorm", [x.astype(np.float32), w.astype(np.float32)], dtype), ref, dtype)
    close(run("rmsnorm", [x.astype(np.float32)], dtype, eps=0.5), x / np.sqrt((x * x).mean(-1, keepdims=True) + 0.5), dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_layernorm(dtype):
    x, w, b = (normal(*s).astype(np.float64) for s in ((3, 5, 16), (16,), (16,)))
    norm = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    f = [a.astype(np.float32) for a in (x, w, b)]
    close(run("layernorm", f, dtype), norm * w + b, dtype)
    close(run("layernorm", f[:1], dtype), norm, dtype)


def test_norm_weight_must_match_the_normalized_axes():
    with pytest.raises(ShapeError, match=r"weight of shape \[8\] must broadcast to \[16\]"):
        REGISTRY["rmsnorm"].shape([(4, 16), (8,)], {})
    with pytest.raises(ShapeError, match=r"bias of shape \[4, 16\] must broadcast to \[16\]"):
        REGISTRY["layernorm"].shape([(4, 16), (16,), (4, 16)], {})
    assert REGISTRY["layernorm"].shape([(2, 4, 16), (4, 16), (1, 16)], {"axis": 1}) == (2, 4, 16)


# -- attention and rope -------------------------------------------------------------


def attention_ref(q, k, v, causal=False, scale=None, past_length=0):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    lq, lk = q.shape[-2], k.shape[-2]
    if causal:
        allowed = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + past_length
        s = np.where(allowed, s, -np.inf)
    out = np.zeros(s.shape[:-1] + (v.shape[-1],))
    for idx in np.ndindex(s.shape[:-1]):
        row = s[idx]
        if np.isinf(row).all():
            continue  # a query that may see no key gets zeros
        w = np.exp(row - row.max())
        out[idx] = (w / w.sum()) @ v[idx[:-1]]
    return out


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention(dtype, causal):
    q, k, v = normal(2, 3, 6, 8), normal(2, 3, 6, 8), normal(2, 3, 6, 4)
    close(run("attention", [q, k, v], dtype, causal=causal), attention_ref(q, k, v, causal), dtype)


def test_attention_causal_is_upper_left_and_past_length_shifts_it_to_a_kv_cache():
    q, k, v = normal(2, 8), normal(5, 8), normal(5, 3)
    # ONNX's rule without a cache: query i sees keys 0..i, whatever the lengths
    got = run("attention", [q, k, v], causal=True, scale=0.5)
    close(got, attention_ref(q, k, v, causal=True, scale=0.5), Dtype.fp32)
    close(got[0], v[0], Dtype.fp32)
    # a query block that continues three cached keys: the last query sees every key
    got = run("attention", [q, k, v], causal=True, scale=0.5, past_length=3)
    close(got, attention_ref(q, k, v, causal=True, scale=0.5, past_length=3), Dtype.fp32)
    close(got[-1], attention_ref(q[-1:], k, v, scale=0.5)[0], Dtype.fp32)


def test_attention_query_that_sees_no_key_gets_zeros():
    q, k, v = normal(4, 8), normal(2, 8), normal(2, 3)
    got = run("attention", [q, k, v], causal=True, past_length=-2)
    assert got[:2].tolist() == [[0.0] * 3] * 2
    close(got, attention_ref(q, k, v, causal=True, past_length=-2), Dtype.fp32)


def test_attention_shape_errors():
    with pytest.raises(ShapeError, match="differ in their last axis"):
        REGISTRY["attention"].shape([(4, 8), (4, 6), (4, 2)], {})
    with pytest.raises(ShapeError, match="differ in their length axis"):
        REGISTRY["attention"].shape([(4, 8), (5, 8), (4, 2)], {})


def rope_ref(x, base=10000.0, offset=0, interleaved=False):
    x = x.astype(np.float64)
    length, d = x.shape[-2], x.shape[-1]
    out = np.empty_like(x)
    for p in range(length):
        for i in range(d // 2):
            theta = (p + offset) * base ** (-2 * i / d)
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
            xa, xb = x[..., p, a], x[..., p, b]
            out[..., p, a] = xa * math.cos(theta) - xb * math.sin(theta)
            out[..., p, b] = xb * math.cos(theta) + xa * math.sin(theta)
    return out


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
def test_rope(dtype, interleaved):
    x = normal(2, 7, 16)
    close(run("rope", [x], dtype, interleaved=interleaved, offset=3), rope_ref(x, offset=3, interleaved=interleaved), dtype)


def test_rope_at_position_zero_is_the_identity_and_keeps_norms():
    x = normal(5, 8)
    y = run("rope", [x], base=500.0)
    assert np.array_equal(y[0], x[0])
    halves = lambda a: np.hypot(a[..., :4], a[..., 4:])  # noqa: E731
    np.testing.assert_allclose(halves(y), halves(x), rtol=1e-5)


def test_rope_needs_an_even_last_axis():
    with pytest.raises(ShapeError, match="even dim"):
        REGISTRY["rope"].shape([(4, 7)], {})


# -- layout ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(Dtype), ids=str)
def test_concat_split_slice_are_exact(dtype):
    # made in the dtype first: the layout ops move values as they are, so they must come out bit for bit
    a = ops.to_dtype(np, np.clip(np.rint(normal(2, 3) * 3), -8, 7), dtype)
    b = ops.to_dtype(np, np.clip(np.rint(normal(2, 5) * 3), -8, 7), dtype)
    both = np.concatenate([a, b], axis=1)
    assert np.array_equal(run("concat", [a, b], dtype, axis=1).view(np.uint8), both.view(np.uint8))
    parts = [run("split", [both], dtype, axis=-1, sizes=[3, 1, 4], index=i) for i in range(3)]
    assert [p.shape for p in parts] == [(2, 3), (2, 1), (2, 4)]
    assert np.array_equal(np.concatenate(parts, axis=1), both.astype(dtype.numpy))
    halves = [run("split", [both], dtype, axis=1, sections=2, index=i) for i in range(2)]
    assert np.array_equal(np.concatenate(halves, axis=1), both.astype(dtype.numpy))
    assert np.array_equal(run("slice", [both], dtype, axis=1, start=6, stop=1, step=-2), both[:, 6:1:-2].astype(dtype.numpy))
    assert np.array_equal(run("slice", [both], dtype, axis=0, start=-1), both[-1:].astype(dtype.numpy))


def test_layout_shape_errors_name_the_problem():
    with pytest.raises(ShapeError, match="does not divide into 3 equal parts"):
        REGISTRY["split"].shape([(4, 8)], {"axis": 1, "sections": 3, "index": 0})
    with pytest.raises(ShapeError, match="add up to 7, not the length 8"):
        REGISTRY["split"].shape([(4, 8)], {"axis": 1, "sizes": [3, 4], "index": 0})
    with pytest.raises(ShapeError, match="exactly one of 'sections'"):
        REGISTRY["split"].shape([(4, 8)], {"index": 0})
    with pytest.raises(ShapeError, match="index 2 is out of range for 2 parts"):
        REGISTRY["split"].shape([(4, 8)], {"sections": 2, "index": 2})
    with pytest.raises(ShapeError, match=r"shape \[2, 4\] does not match \[2, 3\] outside axis 0"):
        REGISTRY["concat"].shape([(2, 3), (2, 4)], {"axis": 0})
    with pytest.raises(ShapeError, match="step must not be 0"):
        REGISTRY["slice"].shape([(4,)], {"step": 0})


def test_slice_follows_python_slice_rules():
    x = np.arange(10, dtype=np.float32)
    for start, stop, step in [(None, None, 1), (2, 100, 3), (-3, None, 1), (None, None, -1), (8, -12, -3), (5, 2, 1)]:
        got = run("slice", [x], start=start, stop=stop, step=step)
        assert got.tolist() == x[start:stop:step].tolist(), (start, stop, step)


# -- reductions --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(Dtype), ids=str)
def test_max(dtype):
    x = np.clip(np.rint(normal(3, 4, 5) * 3), -8, 7)
    for axis, keep in [(None, False), (1, True), (-1, False)]:
        want = x.max(axis=axis, keepdims=keep)
        if dtype is Dtype.uint8:  # floats become integers saturating: a negative maximum is 0 (numpy's astype wraps)
            want = np.clip(want, 0, None)
        assert np.array_equal(run("max", [x], dtype, axis=axis, keepdims=keep), want.astype(dtype.numpy))


def test_argmax_returns_the_first_maximum():
    x = np.array([[1, 5, 5, 2], [9, 0, 9, 9]], np.float32)
    assert run("argmax", [x], Dtype.int64, axis=1).tolist() == [1, 0]
    assert run("argmax", [x], Dtype.int64).tolist() == 4
    assert run("argmax", [x], Dtype.int64, axis=0, keepdims=True).tolist() == [[1, 0, 1, 1]]
    assert run("argmax", [x], Dtype.fp32, axis=1).tolist() == [1.0, 0.0]  # fp32 indices, as before, when asked
    assert ops.default_dtype(REGISTRY["argmax"], [Dtype.fp32], {}) is Dtype.int64


# -- quantization ---------------------------------------------------------------------

QUANT = [Dtype.int8, Dtype.int4, Dtype.fp8e4m3, Dtype.fp8e5m2]


def quantize_ref(x, scale, dtype):
    y = np.clip(x / scale, -QUANT_MAX[dtype], QUANT_MAX[dtype]).astype(np.float32)
    if dtype in (Dtype.int8, Dtype.int4):
        return np.rint(y).astype(np.int8).astype(dtype.numpy)
    return y.astype(dtype.numpy)


@pytest.mark.parametrize("dtype", QUANT, ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1], ids=["per-tensor", "per-channel-0", "per-channel-1"])
def test_quantize_dequantize(dtype, axis):
    x = normal(6, 10) * np.linspace(0.1, 5, 10, dtype=np.float32)
    scale = run("quantize.scale", [x], target=dtype.value, axis=axis)
    if axis is None:
        want_scale = np.float32(np.abs(x).max()) / np.float32(QUANT_MAX[dtype])
    else:
        other = 1 - axis
        want_scale = np.abs(x).max(axis=other, keepdims=True) / np.float32(QUANT_MAX[dtype])
    assert np.array_equal(scale, want_scale)

    q = run("quantize", [x, scale], dtype)
    assert np.array_equal(q.view(np.uint8), quantize_ref(x, scale, dtype).view(np.uint8)), "bit-exact quantization"
    assert np.abs(q.astype(np.float32)).max() == pytest.approx(QUANT_MAX[dtype])

    back = run("dequantize", [q, scale])
    assert np.array_equal(back, q.astype(np.float32) * scale)
    err = np.abs(back - x)
    if dtype in (Dtype.int8, Dtype.int4):
        assert (err <= scale / 2 * (1 + 1e-6)).all()  # rounding to the nearest step of the scale
    else:
        mantissa = 3 if dtype is Dtype.fp8e4m3 else 2
        assert (err <= np.abs(x) * 2.0 ** -(mantissa + 1) * (1 + 1e-6) + scale * 2.0 ** -9).all()


@pytest.mark.parametrize("dtype", QUANT, ids=str)
def test_quantize_saturates_instead_of_overflowing(dtype):
    x = np.array([1e6, -1e6, np.inf, 1.0], np.float32)
    q = run("quantize", [x, np.float32(1.0).reshape(())], dtype).astype(np.float32)
    top = QUANT_MAX[dtype]
    assert q.tolist() == [top, -top, top, 1.0]


def test_quantize_scale_of_zeros_is_one():
    assert run("quantize.scale", [np.zeros((2, 3), np.float32)], target="int8", axis=1).tolist() == [[1.0, 1.0, 1.0]]


def test_quantize_shape_rules():
    assert REGISTRY["quantize.scale"].shape([(4, 8)], {"target": "int4", "axis": -1}) == (1, 8)
    assert REGISTRY["quantize.scale"].shape([(4, 8)], {"target": "int4"}) == ()
    with pytest.raises(ShapeError, match="target must be one of int8, int4, fp8e4m3, fp8e5m2, got 'fp16'"):
        REGISTRY["quantize.scale"].shape([(4, 8)], {"target": "fp16"})
    with pytest.raises(ShapeError, match=r"scale of shape \[4, 8, 2\] must broadcast to the tensor's shape \[4, 8\]"):
        REGISTRY["quantize"].shape([(4, 8), (4, 8, 2)], {})


def test_every_new_op_declares_dtypes_args_and_a_doc():
    for name in ["rmsnorm", "layernorm", "attention", "rope", "concat", "split", "slice", "argmax", "max", "exp",
                 "log", "sqrt", "tanh", "sigmoid", "quantize.scale", "quantize", "dequantize"]:
        op = REGISTRY[name]
        assert op.dtypes and op.doc, name
    assert REGISTRY["quantize"].dtypes == frozenset(QUANT)
    assert ops.check_args(REGISTRY["quantize.scale"], {"target": "int3"}) == [
        ("target", "argument 'target' of op 'quantize.scale' must be a dtype name (fp32, fp16, bf16, fp8e4m3, "
                   "fp8e5m2, int8, int4, int16, int32, int64, uint8, bool, fp64), got 'int3'")
    ]
    assert ops.check_args(REGISTRY["attention"], {"scale": None}) == []
    assert ml_dtypes.finfo(Dtype.fp8e4m3.numpy).max == QUANT_MAX[Dtype.fp8e4m3]
    assert ml_dtypes.finfo(Dtype.fp8e5m2.numpy).max == QUANT_MAX[Dtype.fp8e5m2]


def _nearest(value: float, dtype) -> float:
    """The representable value of ``dtype`` nearest ``value``, ties to even, by search over every bit pattern."""
    bits = np.arange(2 ** (8 * np.dtype(dtype).itemsize), dtype=np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint8)
    values = bits.view(dtype).astype(np.float64)
    finite = np.isfinite(values)
    values, bits = values[finite], bits[finite]
    gaps = np.abs(values - value)
    best = np.flatnonzero(gaps == gaps.min())
    even = [i for i in best if int(bits[i]) % 2 == 0]
    return float(values[(even or list(best))[0]])


@pytest.mark.parametrize("dtype", [Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2])
def test_narrow_floats_from_float64_and_wide_integers_round_once(dtype):
    """Through float32 the value would round twice: each of these lands on a float32 tie of the target."""
    from hetflow.executors.opdecl import to_dtype

    target = dtype.numpy
    mantissa = {Dtype.bf16: 7, Dtype.fp8e4m3: 3, Dtype.fp8e5m2: 2}[dtype]
    half = 2.0 ** -(mantissa + 1)          # half a unit in the last place of the target at 1.0
    cases = [1 + half + 2.0 ** -40, 1 + half - 2.0 ** -40, -(1 + 3 * half + 2.0 ** -45), 1 + half]
    got = to_dtype(np, np.array(cases, np.float64), dtype).astype(np.float64).tolist()
    assert got == [_nearest(c, target) for c in cases]
    if dtype is Dtype.bf16:
        ints = np.array([2 ** 24 + 2 ** 16 + 1, -(2 ** 24 + 2 ** 16 + 1), 2 ** 24 + 2 ** 16, 2 ** 31 - 1], np.int32)
        for wide in (ints, ints.astype(np.int64)):
            assert to_dtype(np, wide, dtype).astype(np.float64).tolist() == [_nearest(float(v), target) for v in ints]


def test_erf_on_the_host_is_the_c_librarys_within_a_few_ulps_and_every_float32_result_equal():
    import math

    from hetflow.executors.builtin.elementwise import erf

    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(200_000) * 3, rng.uniform(-30, 30, 100_000), rng.uniform(-0.5, 0.5, 100_000),
                        [0.0, -0.0, np.inf, -np.inf, 1e-300, -1e-17, 0.46875, -0.46875, 4.0, 26.543, 26.6, 5e-324]])
    want = np.array([math.erf(v) for v in x])
    got = erf(np, x)
    assert got.dtype == np.float64 and np.isnan(erf(np, np.array([np.nan]))).all()
    ulps = np.abs(got.view(np.int64) - want.view(np.int64))
    assert ulps.max() <= 8 and (ulps == 0).mean() > 0.5
    x32 = x.astype(np.float32)
    assert np.array_equal(erf(np, x32), np.array([math.erf(float(v)) for v in x32]).astype(np.float32))
    assert np.signbit(erf(np, np.array(-0.0))) and erf(np, np.float32(0.5)).dtype == np.float32


def test_a_stage_whose_values_meet_nan_or_inf_is_named_in_the_record_and_warned_at_its_place(tmp_path):
    # numpy printed "RuntimeWarning: invalid value encountered in log" with hetflow's own source line, naming no
    # stage; the record said nothing
    import io
    import json

    from hetflow.engine.cli import main

    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: nan\nexecutors: {cpu: {vendor: cpu}}\nstages:\n"
                    "  x: {op: full, args: {shape: [2], value: -1.0}}\n"
                    "  y: {op: log, inputs: [x]}\n"
                    "  z: {op: exp, inputs: [w]}\n"
                    "  w: {op: full, args: {shape: [2], value: 1000.0}}\n"
                    "  fine: {op: relu, inputs: [x]}\n"
                    "outputs: {y: y, z: z, fine: fine}\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs")], out, err) == 0, err.getvalue()
    said = err.getvalue()
    # a run that takes the stages from the cache says what the run that computed them met
    cached = io.StringIO()
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "cached")], io.StringIO(), io.StringIO()) == 0
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "cached")], io.StringIO(), cached) == 0
    assert f"{path}:6:3: warning: stage 'y' (log) met invalid value (NaN) in its values" in cached.getvalue()
    assert f"{path}:6:3: warning: stage 'y' (log) met invalid value (NaN) in its values" in said, said
    assert f"{path}:7:3: warning: stage 'z' (exp) met overflow (inf) in its values" in said, said
    assert "RuntimeWarning" not in said and "stage 'fine'" not in said, said
    record = json.loads(next((tmp_path / "runs").glob("*/record.json")).read_text())
    assert record["nodes"]["y"]["numeric"] == ["invalid value (NaN)"]
    assert "numeric" not in record["nodes"]["fine"]
    out = io.StringIO()
    assert main(["runs", "--runs-dir", str(tmp_path / "runs"), "show", "latest"], out, io.StringIO()) == 0
    assert "warning: stage 'y' met invalid value (NaN) in its values" in out.getvalue()
