"""Ops on integer, bool and double tensors, and the ops real models need, against numpy and ONNX's semantics.

Exact ops (integer arithmetic, comparisons, indices, casts, moves) are
compared bit for bit; float ops against a float64 reference. The last
tests run manifests through :func:`hetflow.run`, so the validator infers
each stage's dtype from its inputs as a user's pipeline would.
"""

import math
import zlib

import numpy as np
import pytest

import hetflow
from hetflow.executors import ops
from hetflow.executors.base import Dtype
from hetflow.executors.ops import REGISTRY, ShapeError

rng = np.random.default_rng(28)
INTS = [Dtype.int16, Dtype.int32, Dtype.int64, Dtype.uint8]


@pytest.fixture(autouse=True)
def _own_numbers(request):
    """Each test draws the same numbers however the suite is ordered or split among workers."""
    global rng
    rng = np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def run(name, inputs, dtype=None, **args):
    """The op's output at ``dtype`` (default: the dtype a stage naming none gets), checked against its shape rule."""
    op = REGISTRY[name]
    if dtype is None:
        dtype = ops.default_dtype(op, [ops.dtype_of(x) for x in inputs], args)
    out = ops.run(np, name, inputs, args, dtype)
    assert out.dtype == dtype.numpy, (out.dtype, dtype)
    assert tuple(out.shape) == op.shape([x.shape for x in inputs], args), "shape rule and body disagree"
    return out


def ints(dtype, *shape):
    info = np.iinfo(dtype.numpy)
    return rng.integers(info.min, info.max, shape, dtype=dtype.numpy, endpoint=True)


# -- integer arithmetic ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("name, f", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply)])
def test_integer_arithmetic_wraps_in_its_own_type(name, f, dtype):
    a, b = ints(dtype, 64), ints(dtype, 64)
    got = run(name, [a, b])
    assert got.dtype == dtype.numpy
    with np.errstate(over="ignore"):
        assert np.array_equal(got, f(a, b))
    top = np.iinfo(dtype.numpy).max
    assert run("add", [np.array([top], dtype.numpy)], value=1).tolist() == [np.iinfo(dtype.numpy).min]


def test_int64_arithmetic_is_exact_past_two_to_the_53():
    a = np.array([2**53 + 1, 2**62, -(2**63)], np.int64)
    assert run("add", [a], value=2).tolist() == [2**53 + 3, 2**62 + 2, -(2**63) + 2]
    assert run("mul", [a], value=2).tolist() == [2**54 + 2, -(2**63), 0]  # wraps, never rounds
    assert run("neg", [a]).tolist() == [-(2**53) - 1, -(2**62), -(2**63)]
    assert run("abs", [a]).tolist() == [2**53 + 1, 2**62, -(2**63)]


def trunc_div(a, b):
    """C's integer division on Python integers, 0 for a zero divisor (ONNX's reference gives 0 there)."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("dtype", [Dtype.int16, Dtype.int32, Dtype.int64], ids=str)
def test_integer_div_truncates_toward_zero_and_mod_follows_onnx(dtype):
    a = np.array([7, -7, 7, -7, 0, 5, -5, 3], dtype.numpy)
    b = np.array([2, 2, -2, -2, 3, 0, 0, 7], dtype.numpy)
    assert run("div", [a, b]).tolist() == [trunc_div(x, y) for x, y in zip(a.tolist(), b.tolist())]
    assert run("div", [a, b]).tolist() == [3, -3, -3, 3, 0, 0, 0, 0]
    # fmod 0: the divisor's sign (Python's %); fmod 1: the dividend's; mod 0 is 0
    assert run("mod", [a, b]).tolist() == [1, 1, -1, -1, 0, 0, 0, 3]
    assert run("mod", [a, b], fmod=1).tolist() == [1, -1, 1, -1, 0, 0, 0, 3]
    low = np.iinfo(dtype.numpy).min
    assert run("div", [np.array([low], dtype.numpy)], value=-1).tolist() == [low]  # wraps, as C's hardware does


def test_div_and_mod_match_onnx_reference():
    onnx_ops = pytest.importorskip("onnx.reference.ops.op_div", reason="onnx is not installed")  # noqa: F841
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    a = ints(Dtype.int32, 200) // 7
    b = (ints(Dtype.int32, 200) % 23 - 11).astype(np.int32)
    b[b == 0] = 3
    for op, attrs, mine in [("Div", {}, {}), ("Mod", {"fmod": 0}, {}), ("Mod", {"fmod": 1}, {"fmod": 1})]:
        node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
        want = ReferenceEvaluator(node).run(None, {"a": a, "b": b})[0]
        assert np.array_equal(run(op.lower(), [a, b], **mine), want), op


def test_pow_on_integers_is_exact_and_takes_the_base_type():
    base = np.array([3, -2, 2, 1, -1, -1, 5, 0], np.int64)
    exp = np.array([39, 63, 64, -3, -3, -2, -1, -1], np.int64)
    assert run("pow", [base, exp]).tolist() == [3**39, (-2) ** 63, 0, 1, -1, 1, 0, 0]
    assert run("pow", [np.array([2, 3], np.int32)], value=2).tolist() == [4, 9]
    assert run("pow", [np.array([2, 3], np.int32)], value=0.5).dtype == np.int32  # ONNX: the base's type
    assert ops.default_dtype(REGISTRY["pow"], [Dtype.int32, Dtype.fp32], {}) is Dtype.int32


def test_maximum_minimum_clip_on_integers():
    x = np.array([-5, 0, 7, 200], np.int64)
    assert run("maximum", [x], value=1).tolist() == [1, 1, 7, 200]
    assert run("minimum", [x, np.array([0, 0, 0, 0], np.int64)]).tolist() == [-5, 0, 0, 0]
    assert run("clip", [x], min=-1, max=100).tolist() == [-1, 0, 7, 100]
    assert run("clip", [x], max=6).tolist() == [-5, 0, 6, 6]
    u = np.array([0, 3, 255], np.uint8)
    assert run("clip", [u], min=-10, max=1000).tolist() == [0, 3, 255]  # bounds outside the type clip nothing
    assert run("clip", [u], min=5, max=2).tolist() == [2, 2, 2]  # ONNX: min above max gives max
    f = np.array([-2.5, np.nan, 9.0], np.float32)
    assert run("clip", [f], min=-1.0, max=1.0).tolist()[::2] == [-1.0, 1.0]
    assert math.isnan(run("clip", [f], min=-1.0).tolist()[1])


def test_integer_value_out_of_the_type_range_compares_and_wraps_correctly():
    u = np.array([0, 200, 255], np.uint8)
    assert run("lt", [u], value=-1).tolist() == [False, False, False]
    assert run("gt", [u], value=254).tolist() == [False, False, True]
    assert run("add", [u], value=300).tolist() == [44, 244, 43]  # (x + 300) mod 256


# -- comparisons and where ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [Dtype.fp32, Dtype.fp64, Dtype.bf16, Dtype.int64, Dtype.uint8, Dtype.bool], ids=str)
def test_comparisons_give_bool(dtype):
    a = ops.to_dtype(np, rng.integers(-3, 3, 40).astype(np.float64), dtype)
    b = ops.to_dtype(np, rng.integers(-3, 3, 40).astype(np.float64), dtype)
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    for name, f in [("eq", np.equal), ("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                    ("ge", np.greater_equal)]:
        got = run(name, [a, b])
        assert got.dtype == np.bool_ and np.array_equal(got, f(wide_a, wide_b)), name
    assert REGISTRY["eq"].result([dtype, dtype], {}) is Dtype.bool


def test_comparison_of_int64_does_not_round_through_float():
    a = np.array([2**53 + 1], np.int64)
    assert run("eq", [a, np.array([2**53], np.int64)]).tolist() == [False]
    assert run("gt", [a], value=2**53).tolist() == [True]


def test_where_takes_a_bool_condition_and_keeps_the_branches_type():
    cond = np.array([True, False, True])
    a, b = np.array([2**60, 1, 2], np.int64), np.array([-1, -2, -3], np.int64)
    got = run("where", [cond, a, b])
    assert got.dtype == np.int64 and got.tolist() == [2**60, -2, 2]
    # another dtype's nonzero means true
    assert run("where", [np.array([0.0, -0.5, 2.0], np.float32), a, b]).tolist() == [-1, 1, 2]
    assert ops.default_dtype(REGISTRY["where"], [Dtype.bool, Dtype.fp16, Dtype.fp16], {}) is Dtype.fp32
    assert ops.default_dtype(REGISTRY["where"], [Dtype.bool, Dtype.bool, Dtype.bool], {}) is Dtype.bool
    assert ops.default_dtype(REGISTRY["where"], [Dtype.bool, Dtype.int16, Dtype.int32], {}) is Dtype.int32
    assert ops.default_dtype(REGISTRY["where"], [Dtype.bool, Dtype.fp64, Dtype.fp32], {}) is Dtype.fp64


# -- argmax, argmin, reductions ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [Dtype.fp32, Dtype.fp16, Dtype.bf16, Dtype.int64, Dtype.uint8, Dtype.int8], ids=str)
def test_argmax_argmin_give_int64_with_select_last_index(dtype):
    x = ops.to_dtype(np, rng.integers(0, 4, (5, 7)).astype(np.float64), dtype)
    wide = x.astype(np.float64)
    for name, f in [("argmax", np.argmax), ("argmin", np.argmin)]:
        got = run(name, [x], axis=1)
        assert got.dtype == np.int64 and np.array_equal(got, f(wide, axis=1)), name
        last = run(name, [x], axis=0, keepdims=True, select_last_index=1)
        assert np.array_equal(last, (x.shape[0] - 1 - f(wide[::-1], axis=0))[None, :]), name
        assert run(name, [x]).tolist() == int(f(wide)), name


def test_argmax_of_int64_beyond_float_precision():
    x = np.array([2**60 + 1, 2**60 + 3, 2**60 + 2], np.int64)
    assert run("argmax", [x], axis=0).tolist() == 1
    with pytest.raises(ShapeError, match="axis 1 of length 0 has no index"):
        REGISTRY["argmax"].shape([(3, 0)], {"axis": 1})


@pytest.mark.parametrize("dtype", [Dtype.fp32, Dtype.fp64, Dtype.int32, Dtype.int64, Dtype.uint8, Dtype.bool],
                         ids=str)
def test_reductions_over_an_empty_axis_give_the_identity(dtype):
    x = np.zeros((3, 0), dtype.numpy)
    if dtype.is_exact and dtype is not Dtype.bool:
        low, high = np.iinfo(dtype.numpy).min, np.iinfo(dtype.numpy).max
    elif dtype is Dtype.bool:
        low, high = False, True
    else:
        low, high = -math.inf, math.inf
    assert run("max", [x], dtype, axis=1).tolist() == [low] * 3
    assert run("min", [x], dtype, axes=[-1]).tolist() == [high] * 3
    assert run("max", [x], dtype, axis=1, keepdims=True).shape == (3, 1)
    if dtype is not Dtype.bool:
        assert run("sum", [x], dtype, axis=1).tolist() == [0] * 3
    mean = run("mean", [np.zeros((2, 0), np.float32)], Dtype.fp32, axis=1)
    assert np.isnan(mean).all() and mean.shape == (2,)


def test_reductions_take_onnx_axes():
    x = rng.integers(-50, 50, (2, 3, 4)).astype(np.int64)
    assert np.array_equal(run("sum", [x], axes=[0, -1]), x.sum(axis=(0, 2)))
    assert np.array_equal(run("min", [x], axes=[2, 0], keepdims=True), x.min(axis=(0, 2), keepdims=True))
    assert np.array_equal(run("max", [x], axes=[]), np.array(x.max()))  # empty axes: every axis (ONNX)
    assert np.array_equal(run("max", [x], axes=[], noop_with_empty_axes=1), x)
    assert run("mean", [np.array([1, 2, 2], np.int64)], axis=0).tolist() == 1  # ONNX: 5/3 in the input's type
    assert run("sum", [np.array([True, True, False])], Dtype.int64, axis=0).tolist() == 2
    with pytest.raises(ShapeError, match="give axis .* or axes .*, not both"):
        REGISTRY["sum"].shape([(2, 3)], {"axis": 0, "axes": [1]})
    with pytest.raises(ShapeError, match="name an axis twice"):
        REGISTRY["sum"].shape([(2, 3)], {"axes": [1, -1]})
    big = np.array([2**62, 2**62, 2**62], np.int64)
    assert run("sum", [big], axis=0).tolist() == -(2**62)  # wraps in int64, exactly


# -- casts -----------------------------------------------------------------------------------


def test_cast_float_to_int_rounds_toward_zero_and_saturates():
    x = np.array([2.9, -2.9, 1e20, -1e20, np.nan, np.inf, -np.inf, 0.5], np.float32)
    assert run("cast", [x], Dtype.int32).tolist() == [2, -2, 2**31 - 1, -(2**31), 0, 2**31 - 1, -(2**31), 0]
    assert run("cast", [x], Dtype.uint8).tolist() == [2, 0, 255, 0, 0, 255, 0, 0]
    assert run("cast", [x], Dtype.int64).tolist()[:4] == [2, -2, 2**63 - 1, -(2**63)]
    assert run("cast", [x], Dtype.bool).tolist() == [True, True, True, True, True, True, True, True]


def test_cast_between_integers_wraps_and_is_exact():
    big = np.array([2**40 + 5, -1, 2**31], np.int64)
    assert run("cast", [big], Dtype.int32).tolist() == [5, -1, -(2**31)]
    assert run("cast", [big], Dtype.uint8).tolist() == [5, 255, 0]
    assert run("cast", [np.array([2**53 + 1], np.int64)], Dtype.int64).tolist() == [2**53 + 1]
    assert run("cast", [np.array([True, False])], Dtype.int16).tolist() == [1, 0]
    assert run("cast", [np.array([0, 3], np.uint8)], Dtype.bool).tolist() == [False, True]
    assert run("cast", [np.array([2**24 + 1], np.int32)], Dtype.fp64).tolist() == [2**24 + 1]
    # int8 stays the quantization rule: saturating
    assert run("cast", [np.array([300, -300], np.int64)], Dtype.int8).tolist() == [127, -128]


def test_cast_to_fp8_saturates_unless_told_not_to():
    x = np.array([1e6, -np.inf, 3.3, np.nan], np.float32)
    assert run("cast", [x], Dtype.fp8e4m3).astype(np.float32).tolist()[:3] == [448.0, -448.0, 3.25]
    assert run("cast", [x], Dtype.fp8e5m2).astype(np.float32).tolist()[:2] == [57344.0, -57344.0]
    off = run("cast", [x], Dtype.fp8e5m2, saturate=0).astype(np.float32).tolist()
    assert off[:2] == [math.inf, -math.inf] and math.isnan(off[3])
    assert math.isnan(run("cast", [x], Dtype.fp8e4m3, saturate=0).astype(np.float32).tolist()[0])  # no inf in e4m3


@pytest.mark.parametrize("src", list(Dtype), ids=str)
def test_cast_covers_every_pair(src):
    x = ops.to_dtype(np, np.array([[-3.0, 0.0, 1.0, 2.0]]), src)
    for dst in Dtype:
        got = run("cast", [x], dst)
        want = ops.to_dtype(np, x, dst)
        assert got.dtype == dst.numpy and np.array_equal(got.view(np.uint8), want.view(np.uint8)), (src, dst)


# -- gather ----------------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", INTS, ids=str)
def test_gather_picks_rows_and_counts_negative_indices_from_the_end(index_dtype):
    table = rng.standard_normal((6, 4)).astype(np.float32)
    idx = np.array([[0, 5], [2, 3]], index_dtype.numpy)
    got = run("gather", [table, idx])
    assert got.shape == (2, 2, 4) and np.array_equal(got, table[idx.astype(np.int64)])
    if index_dtype is not Dtype.uint8:
        neg = np.array([-1, -6, 1], index_dtype.numpy)
        assert np.array_equal(run("gather", [table, neg]), table[[5, 0, 1]])
        assert np.array_equal(run("gather", [table, neg[:1]], axis=1), table[:, [3]])


def test_gather_along_an_axis_keeps_the_datas_type():
    data = np.arange(24, dtype=np.int64).reshape(2, 3, 4) + 2**40
    idx = np.array([[-1], [0]], np.int32)
    got = run("gather", [data, idx], axis=2)
    assert got.dtype == np.int64 and got.shape == (2, 3, 2, 1)
    assert np.array_equal(got, np.take(data, [[3], [0]], axis=2))
    assert ops.default_dtype(REGISTRY["gather"], [Dtype.bool, Dtype.int64], {}) is Dtype.bool
    assert ops.default_dtype(REGISTRY["gather"], [Dtype.fp16, Dtype.int64], {}) is Dtype.fp32
    assert REGISTRY["gather"].shape([(5, 7), ()], {"axis": 1}) == (5,)


def test_gather_refuses_float_indices_and_out_of_range_ones():
    problem = REGISTRY["gather"].input_dtypes([Dtype.fp32, Dtype.fp32], {})
    assert problem.startswith("gather's indices must be integers (int16, int32, int64, uint8), got fp32")
    assert REGISTRY["gather"].input_dtypes([Dtype.fp32, Dtype.int64], {}) is None
    with pytest.raises(IndexError, match=r"index -5 is out of range for axis 0 of length 4 "
                                          r"\(indices lie in \[-4, 4\)\)"):
        run("gather", [np.zeros((4, 2), np.float32), np.array([1, -5], np.int64)])


# -- attention -------------------------------------------------------------------------------


def attention_ref(q, k, v, mask=None, causal=False, scale=None, past_length=0):
    """Attention in float64 on [batch, heads, seq, dim], kv heads repeated for grouped-query attention."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    reps = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    lq, lk = s.shape[-2:]
    bias = np.zeros((lq, lk))
    if mask is not None:
        bias = bias + (np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask.astype(np.float64))
    if causal:
        bias = bias + np.where(np.arange(lk)[None, :] <= np.arange(lq)[:, None] + past_length, 0.0, -np.inf)
    s = s + bias
    out = np.zeros(s.shape[:-1] + (v.shape[-1],))
    for idx in np.ndindex(s.shape[:-1]):
        row = s[idx]
        if np.isinf(np.broadcast_to(bias, s.shape)[idx]).all():
            continue
        w = np.exp(row - row.max())
        out[idx] = (w / w.sum()) @ v[idx[:-1]]
    return out


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention_repeats_each_kv_head(causal):
    q, k, v = normal(2, 8, 5, 16), normal(2, 2, 7, 16), normal(2, 2, 7, 4)
    got = run("attention", [q, k, v], causal=causal)
    assert got.shape == (2, 8, 5, 4)
    assert_close(got, attention_ref(q, k, v, causal=causal))
    # q heads 0..3 share kv head 0: the same as plain attention against that head
    assert_close(got[:, 3], attention_ref(q[:, 3:4], k[:, :1], v[:, :1], causal=causal)[:, 0])


def test_packed_3d_attention_is_the_4d_one_with_heads_split_off_the_last_axis():
    b, lq, lk, hq, hkv, d = 2, 4, 6, 6, 3, 8
    q, k, v = normal(b, lq, hq * d), normal(b, lk, hkv * d), normal(b, lk, hkv * d)
    got = run("attention", [q, k, v], q_num_heads=hq, kv_num_heads=hkv, causal=True)
    assert got.shape == (b, lq, hq * d)
    split = lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(0, 2, 1, 3)  # noqa: E731
    four = run("attention", [split(q, hq), split(k, hkv), split(v, hkv)], causal=True)
    assert np.array_equal(got, four.transpose(0, 2, 1, 3).reshape(b, lq, hq * d))
    assert_close(got, attention_ref(split(q, hq), split(k, hkv), split(v, hkv), causal=True)
                 .transpose(0, 2, 1, 3).reshape(b, lq, hq * d))


def test_bool_and_additive_masks_agree_and_a_fully_masked_query_gives_zeros():
    q, k, v = normal(1, 2, 3, 8), normal(1, 2, 5, 8), normal(1, 2, 5, 4)
    keep = rng.random((3, 5)) > 0.4
    keep[1] = False  # query 1 may see no key
    additive = np.where(keep, 0.0, -np.inf).astype(np.float32)
    a = run("attention", [q, k, v, keep])
    b = run("attention", [q, k, v, additive])
    assert np.array_equal(a, b)
    assert (a[:, :, 1] == 0).all()
    assert_close(a, attention_ref(q, k, v, mask=keep))
    bias = normal(1, 1, 3, 5)  # a float mask adds to the scores, broadcast over heads
    assert_close(run("attention", [q, k, v, bias], causal=True), attention_ref(q, k, v, mask=bias, causal=True))


def test_a_mask_shorter_than_the_keys_masks_the_rest():
    q, k, v = normal(3, 8), normal(5, 8), normal(5, 2)
    short = np.ones((3, 3), bool)
    assert_close(run("attention", [q, k, v, short]), attention_ref(q[None, None], k[None, None], v[None, None],
                                                                    mask=np.pad(short, ((0, 0), (0, 2))))[0, 0])


def test_attention_matches_onnx_reference():
    pytest.importorskip("onnx", reason="onnx is not installed")
    from onnx.reference.ops.op_attention import _compute_attention

    cases = [
        ((normal(2, 9, 4, 8), normal(2, 3, 6, 8), normal(2, 3, 6, 8)), None, {"causal": True}),
        ((normal(2, 3, 4, 8), normal(2, 3, 6, 8), normal(2, 3, 6, 10)), normal(2, 1, 4, 6), {"causal": True}),
        ((normal(2, 3, 4, 8), normal(2, 3, 6, 8), normal(2, 3, 6, 8)), rng.random((2, 3, 4, 6)) > 0.5, {}),
        ((normal(2, 4, 72), normal(2, 6, 24), normal(2, 6, 24)), rng.random((4, 6)) > 0.3,
         {"causal": True, "q_num_heads": 9, "kv_num_heads": 3}),
    ]
    for (q, k, v), mask, args in cases:
        want = _compute_attention(q, k, v, attn_mask=mask, is_causal=args.get("causal", False),
                                  q_num_heads=args.get("q_num_heads"), kv_num_heads=args.get("kv_num_heads"))[0]
        got = run("attention", [q, k, v] + ([] if mask is None else [mask]), **args)
        assert_close(got, want)


def test_attention_shape_errors_name_the_problem():
    shape = REGISTRY["attention"].shape
    with pytest.raises(ShapeError, match="9 q heads cannot share 2 k heads"):
        shape([(1, 9, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)], {})
    with pytest.raises(ShapeError, match=r"the last axis of q \[1, 4, 30\] does not divide into 4 heads"):
        shape([(1, 4, 30), (1, 4, 32), (1, 4, 32)], {"q_num_heads": 4, "kv_num_heads": 2})
    with pytest.raises(ShapeError, match="go together"):
        shape([(1, 4, 32)] * 3, {"q_num_heads": 4})
    with pytest.raises(ShapeError, match=r"mask of shape \[4, 7\] does not broadcast"):
        shape([(1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), (4, 7)], {})
    assert REGISTRY["attention"].input_dtypes([Dtype.fp32] * 3 + [Dtype.int64], {}).startswith(
        "attention's mask must be bool (true: attend) or a float added to the scores, got int64")


# -- norms, gelu, erf, fp64 --------------------------------------------------------------------


def test_layernorm_and_rmsnorm_over_the_axes_from_axis():
    x, w, b = normal(2, 3, 4).astype(np.float64), normal(3, 4).astype(np.float64), normal(4).astype(np.float64)
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    f32 = [a.astype(np.float32) for a in (x, w, b)]
    assert_close(run("layernorm", f32, axis=1), (x - mean) / np.sqrt(var + 1e-5) * w + b)
    rms = np.sqrt((x * x).mean(axis=(1, 2), keepdims=True) + 1e-6)
    assert_close(run("rmsnorm", f32[:2], axis=-2), x / rms * w)
    assert_close(run("layernorm", f32[:1], axis=0), (x - x.mean()) / np.sqrt(x.var() + 1e-5))


def test_gelu_both_forms():
    x = np.linspace(-6, 6, 101)
    exact = 0.5 * x * (1 + np.array([math.erf(t / math.sqrt(2)) for t in x]))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert_close(run("gelu", [x.astype(np.float32)], approximate="none"), exact)
    assert_close(run("gelu", [x.astype(np.float32)]), tanh)  # the default: tanh, as before
    assert np.abs(exact - tanh).max() > 1e-4  # the two forms differ: the test tells them apart
    assert ops.check_args(REGISTRY["gelu"], {"approximate": "fast"}, 1) == [
        ("approximate", "argument 'approximate' of op 'gelu' must be 'none' (exact, with erf) or 'tanh', got 'fast'")]


def test_erf_in_float64_is_within_an_ulp_or_two():
    x = np.concatenate([np.linspace(-7, 7, 2001), [0.0, 1e-30, -0.84375, 1.25, 2.857142857, 6.0, np.inf, -np.inf]])
    got = run("erf", [x], Dtype.fp64)
    want = np.array([math.erf(t) for t in x])
    assert (np.abs(got - want) <= 4 * np.spacing(np.abs(want)) + 1e-300).all()
    assert np.isnan(run("erf", [np.array([np.nan])], Dtype.fp64)).all()
    assert_close(run("erf", [x.astype(np.float32)]), want, rtol=1e-6, atol=1e-7)


def test_fp64_computes_in_float64():
    x = np.array([1.0 + 2.0**-40, 1e300], np.float64)
    assert run("add", [x], value=0.0).tolist() == x.tolist()  # float32 would round 1 + 2^-40 to 1 and 1e300 to inf
    assert run("mul", [x, x]).dtype == np.float64
    assert run("sum", [np.array([1.0, 2.0**-40, -1.0])], axis=0).tolist() == 2.0**-40
    assert run("exp", [np.array([1e-12])]).tolist() == [math.exp(1e-12)]
    q, k, v = (rng.standard_normal((3, 4)) for _ in range(3))
    got = run("attention", [q, k, v])
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, attention_ref(q[None, None], k[None, None], v[None, None])[0, 0], rtol=1e-12)


def test_sources_make_integers_exactly():
    assert run("arange", [], Dtype.int64, start=2**53, stop=2**53 + 2).tolist() == [2**53, 2**53 + 1]
    assert run("full", [], Dtype.uint8, shape=[2], value=257).tolist() == [1, 1]
    assert run("ones", [], Dtype.bool, shape=[2]).tolist() == [True, True]
    assert run("zeros", [], Dtype.fp64, shape=[1]).dtype == np.float64


def test_every_op_of_the_issue_declares_its_dtypes_and_a_doc():
    for name in ["gather", "attention", "argmin", "min", "maximum", "minimum", "abs", "neg", "pow", "erf", "clip",
                 "mod", "le", "ge"]:
        op = REGISTRY[name]
        assert op.dtypes and op.doc, name
    for name in ["add", "sub", "mul", "div", "mod", "neg", "abs", "relu", "maximum", "minimum", "clip", "sum",
                 "max", "min", "eq", "lt", "gt", "pow", "matmul"]:
        assert REGISTRY[name].exact and set(ops.INT_DTYPES) <= REGISTRY[name].dtypes, name
    for name in ["transpose", "reshape", "concat", "split", "slice", "cast", "gather", "where"]:
        assert REGISTRY[name].moves and REGISTRY[name].dtypes == ops.ALL_DTYPES, name
    for name in ["exp", "gelu", "softmax", "layernorm", "attention", "erf"]:
        assert Dtype.fp64 in REGISTRY[name].dtypes, name


# -- through manifests -------------------------------------------------------------------------

TOKENS = """
version: 1
name: tokens
executors: {host: {vendor: cpu}, other: {vendor: cpu}}
stages:
  ids:    {op: input, args: {shape: [2, 3], dtype: int64}, dtype: int64}
  table:  {op: random.normal, args: {shape: [10, 4], seed: 1}}
  emb:    {op: gather, inputs: [table, ids]}
  next:   {op: add, inputs: [ids], args: {value: 1}, executor: other}
  big:    {op: mul, inputs: [next], args: {value: 4294967296}}
  pad:    {op: eq, inputs: [ids], args: {value: 0}}
  score:  {op: sum, inputs: [emb], args: {axis: -1}}
  masked: {op: where, inputs: [pad, big, next]}
  best:   {op: argmax, inputs: [score], args: {axis: 1}, executor: other}
  count:  {op: sum, inputs: [ids], args: {axes: [0, 1]}}
  low:    {op: min, inputs: [ids], args: {axis: 0}}
  small:  {op: cast, inputs: [big], dtype: int32}
outputs: {emb: emb, big: big, pad: pad, masked: masked, best: best, count: count, low: low, small: small}
"""


def test_a_manifest_of_token_ids_keeps_integers_and_bools_without_naming_dtypes(manifest_file, tmp_path):
    ids = np.array([[0, 9, 3], [7, 0, 2**40 % 10]], np.int64)
    r = hetflow.run(manifest_file(TOKENS), inputs={"ids": ids}, runs_dir=tmp_path / "runs")
    assert r.status == "succeeded", r.failures
    out = r.outputs
    table = np.random.default_rng(1).standard_normal((10, 4), dtype=np.float32)
    assert out["emb"].dtype == np.float32 and np.array_equal(out["emb"], table[ids])
    assert out["big"].dtype == np.int64 and out["big"].tolist() == ((ids + 1) * 2**32).tolist()
    assert out["pad"].dtype == np.bool_ and out["pad"].tolist() == (ids == 0).tolist()
    assert out["masked"].tolist() == np.where(ids == 0, (ids + 1) * 2**32, ids + 1).tolist()
    assert out["best"].dtype == np.int64 and out["best"].tolist() == table[ids].sum(-1).argmax(1).tolist()
    assert out["count"].dtype == np.int64 and out["count"].tolist() == int(ids.sum())
    assert out["low"].tolist() == ids.min(0).tolist()
    assert out["small"].dtype == np.int32 and out["small"].tolist() == ((ids + 1) * 2**32).astype(np.int32).tolist()


def test_a_gather_with_float_indices_is_refused_at_validate_time(manifest_file):
    path = manifest_file("""
        version: 1
        name: bad
        executors: {host: {vendor: cpu}}
        stages:
          table: {op: random.normal, args: {shape: [10, 4], seed: 1}}
          ids:   {op: arange, args: {stop: 3}}
          emb:   {op: gather, inputs: [table, ids]}
        outputs: {emb: emb}
    """)
    with pytest.raises(hetflow.ManifestError) as err:
        hetflow.validate(path)
    text = str(err.value)
    assert "m.yaml:" in text and "gather's indices must be integers" in text and "got fp32" in text
