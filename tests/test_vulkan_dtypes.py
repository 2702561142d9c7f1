"""The Vulkan executor on issue 28's dtypes and ops, against the CPU executor.

Every node runs on both executors from the same portable inputs through the
same sub-graph plan, and the Vulkan result must be the CPU's: bit for bit
for integers, bools and every conversion, within the tolerance of the
other Vulkan tests for float results the device computes with its own
exp, tanh and sums. int16, int32, uint8 and bool live on the device as
their portable bytes and compute in i32 words (wrapping as numpy does);
int64 and fp64 have no WGSL type, so the planner keeps them off Vulkan,
with the reason ``hetflow plan`` shows.
"""

import io
import json

import numpy as np
import pytest

from hetflow.executors import create, ops, probe
from hetflow.executors.base import Backend, Dtype, PortableActivation, Vendor
from hetflow.executors.cpu import encode_plan
from hetflow.executors.vulkan import SUPPORTED_DTYPES, refusal

OFFER = probe(Vendor.vulkan)
pytestmark = pytest.mark.skipif(not OFFER.available, reason=f"vulkan executor unavailable here: {OFFER.reason}")

RTOL, ATOL = 1e-5, 1e-5
INTS = (Dtype.int16, Dtype.int32, Dtype.uint8)


@pytest.fixture(scope="module")
def vk():
    ex = create(Vendor.vulkan, "vk")
    yield ex
    assert ex.live_activations() == 0


@pytest.fixture(scope="module")
def cpu():
    return create(Vendor.cpu, "cpu")


def execute(ex, op, inputs, args=None, dtype=None):
    """Run one node of ``op`` on ``ex`` from (array, dtype) pairs; the output at ``dtype`` (default: the CPU's rule)."""
    in_dtypes = [d for _, d in inputs]
    full = args or {}
    if dtype is None:
        dtype = ops.default_dtype(ops.REGISTRY[op], in_dtypes, ops.REGISTRY[op].with_defaults(full))
    names = [f"i{k}" for k in range(len(inputs))]
    node = {"id": "y", "op": op, "args": full, "dtype": dtype.value, "inputs": names}
    handles = [ex.import_activation(PortableActivation.from_array(np.asarray(a).astype(d.numpy), d)) for a, d in inputs]
    try:
        (y,) = ex.execute(encode_plan(ex.vendor, names, [node], ["y"]), handles)
        out = ex.export_activation(y)
        ex.release_activation(y)
        return out
    finally:
        for h in handles:
            ex.release_activation(h)


def both(vk, cpu, op, inputs, args=None, dtype=None):
    got, want = execute(vk, op, inputs, args, dtype), execute(cpu, op, inputs, args, dtype)
    assert got.dtype is want.dtype and got.shape == want.shape
    return got, want


def assert_same_bytes(vk, cpu, op, inputs, args=None, dtype=None):
    got, want = both(vk, cpu, op, inputs, args, dtype)
    assert bytes(got.bytes) == bytes(want.bytes), f"{op}: {got.to_array()} != {want.to_array()}"


def ints(rng, shape, dtype):
    info = np.iinfo(dtype.numpy)
    return rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64).astype(dtype.numpy)


def edge_ints(dtype):
    info = np.iinfo(dtype.numpy)
    return np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, 2, info.max - 1, info.max], dtype.numpy)


# -- dtypes: what the device holds and converts -----------------------------------------


def test_int64_and_fp64_are_not_offered():
    assert Dtype.int64 not in SUPPORTED_DTYPES and Dtype.fp64 not in SUPPORTED_DTYPES
    assert set(OFFER.dtypes) == set(Dtype) - {Dtype.int64, Dtype.fp64}
    assert refusal(ops.REGISTRY["gather"], [Dtype.fp32, Dtype.int64], Dtype.fp32) == "int64 has no 32-bit WGSL type"


@pytest.mark.parametrize("dtype", [Dtype.int16, Dtype.int32, Dtype.uint8, Dtype.bool], ids=str)
def test_new_dtypes_cross_a_bridge_as_their_portable_bytes(vk, dtype):
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2, 37).astype(bool) if dtype is Dtype.bool else ints(rng, (37,), dtype)
    src = PortableActivation.from_array(values, dtype)
    h = vk.import_activation(src)
    assert bytes(vk.export_activation(h).bytes) == bytes(src.bytes)
    vk.release_activation(h)


def special_floats():
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001], np.uint32).view(np.float32)
    edges = np.array([0.5, -0.5, 0.9999, -0.9999, 1.5, -2.5, 127.5, 255.0, 255.9, 256.0, -1.0, 32767.9, 32768.0,
                      -32768.9, -32769.0, 2.0**31, -(2.0**31), 2.0**31 - 128, 3e9, -3e9, 1e30, -1e30], np.float32)
    rng = np.random.default_rng(3)
    rand = (rng.standard_normal(3000) * np.exp2(rng.integers(-4, 34, 3000))).astype(np.float32)
    return np.concatenate([bits, edges, -edges, rand])


@pytest.mark.parametrize("target", [Dtype.int16, Dtype.int32, Dtype.uint8, Dtype.bool], ids=str)
@pytest.mark.parametrize("source", [Dtype.fp32, Dtype.fp16, Dtype.bf16], ids=str)
def test_float_to_integer_truncates_and_saturates_as_the_cpu(vk, cpu, source, target):
    with np.errstate(over="ignore", invalid="ignore"):
        x = special_floats().astype(source.numpy)
    assert_same_bytes(vk, cpu, "cast", [(x, source)], dtype=target)


INTEGER_SOURCES = [Dtype.int16, Dtype.int32, Dtype.uint8, Dtype.bool, Dtype.int8, Dtype.int4]


def integer_values(dtype):
    rng = np.random.default_rng(5)
    if dtype is Dtype.bool:
        return np.array([True, False, True, True, False])
    if dtype is Dtype.int4:
        return np.arange(-8, 8).astype(dtype.numpy)
    big = rng.integers(-(2**31), 2**31, 4000).astype(np.int64)
    if dtype is Dtype.int32:
        big = np.concatenate([big, [2**24 + 1, 2**24 + 3, 2**25 + 2**17 + 1, -(2**24) - 1, 65504, 65520, 65519]])
    info = np.iinfo(dtype.numpy)
    return np.concatenate([edge_ints(dtype), np.clip(big, info.min, info.max).astype(dtype.numpy),
                           big.astype(dtype.numpy)])


@pytest.mark.parametrize("target", SUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("source", INTEGER_SOURCES, ids=str)
def test_integer_conversions_wrap_saturate_and_round_as_the_cpu(vk, cpu, source, target):
    with np.errstate(over="ignore"):
        assert_same_bytes(vk, cpu, "cast", [(integer_values(source), source)], dtype=target)


# -- integer arithmetic on i32 words ----------------------------------------------------


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "minimum", "eq", "lt", "le", "gt", "ge"])
@pytest.mark.parametrize("pair", [(Dtype.int32, Dtype.int32), (Dtype.int16, Dtype.int16), (Dtype.uint8, Dtype.uint8),
                                  (Dtype.int16, Dtype.uint8), (Dtype.int32, Dtype.bool), (Dtype.bool, Dtype.bool)],
                         ids=lambda p: f"{p[0]}-{p[1]}")
def test_integer_binary_ops_compute_on_integers_and_wrap(vk, cpu, op, pair):
    rng = np.random.default_rng(len(op))
    a = integer_values(pair[0])[:300] if pair[0] is not Dtype.bool else rng.integers(0, 2, 300).astype(bool)
    b = rng.permutation(integer_values(pair[1])[:300]) if pair[1] is not Dtype.bool else rng.integers(0, 2, 300).astype(bool)
    n = min(len(a), len(b))
    assert_same_bytes(vk, cpu, op, [(a[:n], pair[0]), (b[:n], pair[1])])


def test_int32_overflow_wraps_bit_for_bit(vk, cpu):
    a = np.array([2**31 - 1, -(2**31), 65536, 46341], np.int32)
    b = np.array([1, -1, 65536, 46341], np.int32)
    for op, want in [("add", [-(2**31), 2**31 - 1, 131072, 92682]), ("mul", [2**31 - 1, -(2**31), 0, -2147479015])]:
        got = execute(vk, op, [(a, Dtype.int32), (b, Dtype.int32)]).to_array()
        assert got.dtype == np.int32 and got.tolist() == want
        assert_same_bytes(vk, cpu, op, [(a, Dtype.int32), (b, Dtype.int32)])


@pytest.mark.parametrize("dtype", [Dtype.int16, Dtype.uint8, Dtype.bool], ids=str)
def test_narrow_integers_wrap_in_their_own_type_before_a_wider_output(vk, cpu, dtype):
    # numpy adds uint8 in uint8: 200 + 100 is 44, also when the stage asks for int32
    a = integer_values(dtype)[:200]
    b = np.roll(a, 3)
    for op in ("add", "mul", "sub"):
        assert_same_bytes(vk, cpu, op, [(a, dtype), (b, dtype)], dtype=Dtype.int32)


@pytest.mark.parametrize("value", [3, -7, 300, 70000])
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_ops_with_a_scalar_value(vk, cpu, dtype, value):
    x = integer_values(dtype)[:100]
    for op in ("add", "mul", "lt", "maximum"):
        assert_same_bytes(vk, cpu, op, [(x, dtype)], {"value": value})
        assert_same_bytes(vk, cpu, op, [(x, dtype)], {"value": value}, dtype=Dtype.int32)


@pytest.mark.parametrize("dtype", [*INTS, Dtype.bool], ids=str)
def test_integer_unary_ops(vk, cpu, dtype):
    x = integer_values(dtype)[:500]
    for op, args in [("abs", {}), ("neg", {}), ("relu", {}), ("clip", {"min": -5, "max": 100}),
                     ("clip", {"min": 10}), ("clip", {"min": 7, "max": 3}), ("clip", {"min": -2.5, "max": 9.5}),
                     ("clip", {"min": -1e10, "max": 1e10})]:
        if dtype is Dtype.bool and op == "clip":
            continue
        assert_same_bytes(vk, cpu, op, [(x, dtype)], args)


def test_comparisons_give_bool_and_where_takes_it(vk, cpu):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6,)).astype(np.float32)
    for op in ("eq", "lt", "le", "gt", "ge"):
        got, want = both(vk, cpu, op, [(a, Dtype.fp32), (b, Dtype.fp32)])
        assert got.dtype is Dtype.bool and bytes(got.bytes) == bytes(want.bytes)
    cond = a > 0
    assert_same_bytes(vk, cpu, "where", [(cond, Dtype.bool), (a, Dtype.fp32), (b, Dtype.fp32)])
    assert_same_bytes(vk, cpu, "where", [(cond[:, :1], Dtype.bool), (a, Dtype.fp16), (b, Dtype.fp16)], dtype=Dtype.fp16)
    i = integer_values(Dtype.int32)[:24].reshape(4, 6)
    assert_same_bytes(vk, cpu, "where", [(cond, Dtype.bool), (i, Dtype.int32), (i[::-1], Dtype.int32)])
    assert_same_bytes(vk, cpu, "where", [(i, Dtype.int32), (cond, Dtype.bool), (~cond, Dtype.bool)])
    signed_zero = np.array([[0.0, -0.0, 1.5, np.nan, -2.0, 0.0]], np.float32)
    for cond_dtype in (Dtype.fp32, Dtype.fp16, Dtype.int8):
        c = signed_zero if cond_dtype.kind == "float" else np.nan_to_num(signed_zero)
        assert_same_bytes(vk, cpu, "where", [(c, cond_dtype), (a, Dtype.fp32), (b, Dtype.fp32)])


def test_moves_keep_integers(vk, cpu):
    x = integer_values(Dtype.int32)[:60].reshape(3, 4, 5)
    assert_same_bytes(vk, cpu, "transpose", [(x, Dtype.int32)], {"axes": [2, 0, 1]})
    assert_same_bytes(vk, cpu, "reshape", [(x.astype(np.uint8), Dtype.uint8)], {"shape": [12, 5]})
    assert_same_bytes(vk, cpu, "transpose", [(x > 0, Dtype.bool)], {})


# -- gather ----------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", [Dtype.int32, Dtype.int16, Dtype.uint8], ids=str)
@pytest.mark.parametrize("data_dtype", [Dtype.fp32, Dtype.bf16, Dtype.int32, Dtype.bool], ids=str)
def test_gather_matches_the_cpu(vk, cpu, data_dtype, index_dtype):
    rng = np.random.default_rng(9)
    data = rng.standard_normal((7, 5, 3)).astype(np.float32)
    data = data > 0 if data_dtype is Dtype.bool else (data * 1000).astype(np.int32) if data_dtype is Dtype.int32 else data
    for axis in (0, 1, -1):
        n = data.shape[axis]
        idx = rng.integers(0 if index_dtype is Dtype.uint8 else -n, n, (2, 4)).astype(index_dtype.numpy)
        assert_same_bytes(vk, cpu, "gather", [(data, data_dtype), (idx, index_dtype)], {"axis": axis})


def test_gather_is_an_embedding_lookup_in_fp32(vk, cpu):
    rng = np.random.default_rng(4)
    table = rng.standard_normal((1000, 64)).astype(np.float32)
    ids = rng.integers(0, 1000, (2, 17)).astype(np.int32)
    got, want = both(vk, cpu, "gather", [(table, Dtype.fp32), (ids, Dtype.int32)])
    assert got.shape.dims == (2, 17, 64) and bytes(got.bytes) == bytes(want.bytes)


def test_gather_out_of_range_fails_as_on_the_cpu(vk, cpu):
    table = np.zeros((4, 3), np.float32)
    ids = np.array([1, 9, -2], np.int32)
    with pytest.raises(Exception) as on_cpu:
        execute(cpu, "gather", [(table, Dtype.fp32), (ids, Dtype.int32)])
    with pytest.raises(Backend) as on_vk:
        execute(vk, "gather", [(table, Dtype.fp32), (ids, Dtype.int32)])
    assert on_vk.value.node == "y"
    assert "gather: index 9 is out of range for axis 0 of length 4" in str(on_vk.value)
    assert "gather: index 9 is out of range for axis 0 of length 4" in str(on_cpu.value)


# -- float ops -------------------------------------------------------------------------


FLOAT_CASES = [
    ("abs", {}, [(40,)]), ("neg", {}, [(40,)]), ("exp", {}, [(300,)]), ("log", {"pos": True}, [(300,)]),
    ("sqrt", {"pos": True}, [(300,)]), ("tanh", {}, [(300,)]), ("sigmoid", {}, [(300,)]), ("erf", {}, [(300,)]),
    ("gelu", {"approximate": "none"}, [(300,)]), ("gelu", {"approximate": "tanh"}, [(300,)]),
    ("clip", {"min": -0.5, "max": 0.7}, [(50,)]), ("clip", {"max": 0.1}, [(50,)]), ("clip", {"min": 1.0, "max": -1.0}, [(9,)]),
    ("maximum", {}, [(3, 4), (4,)]), ("minimum", {"value": 0.25}, [(30,)]), ("pow", {}, [(50,), (50,)]),
    ("pow", {"value": 3.0}, [(50,)]), ("pow", {"value": 0.5, "pos": True}, [(50,)]), ("relu", {}, [(40,)]),
    ("div", {}, [(20,), (20,)]),
    ("min", {"axis": 1}, [(3, 700)]), ("min", {}, [(1000,)]), ("max", {"axes": [0, 2]}, [(3, 4, 5)]),
    ("sum", {"axes": [1, 2], "keepdims": True}, [(3, 4, 5)]), ("mean", {"axes": []}, [(3, 4)]),
    ("max", {"axis": 0}, [(0, 3)]), ("min", {"axis": 1}, [(2, 0)]), ("sum", {"axes": [], "noop_with_empty_axes": True}, [(3, 4)]),
    ("rmsnorm", {"axis": 1}, [(2, 3, 40), (3, 40)]), ("layernorm", {"axis": -2}, [(2, 3, 40), (40,), (3, 1)]),
]


@pytest.mark.parametrize("op,args,shapes", FLOAT_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(FLOAT_CASES)])
def test_float_kernels_match_the_cpu(vk, cpu, op, args, shapes):
    args = dict(args)
    positive = args.pop("pos", False)
    rng = np.random.default_rng(len(op) + len(shapes))
    arrays = [rng.standard_normal(s).astype(np.float32) * 2 for s in shapes]
    if positive:
        arrays = [np.abs(a) + np.float32(1e-3) for a in arrays]
    got, want = both(vk, cpu, op, [(a, Dtype.fp32) for a in arrays], args)
    np.testing.assert_allclose(got.to_array(), want.to_array(), rtol=RTOL, atol=ATOL)


def test_nan_wins_in_maximum_minimum_and_clip(vk, cpu):
    a = np.array([np.nan, 1.0, -2.0, np.nan], np.float32)
    b = np.array([0.0, np.nan, -3.0, np.nan], np.float32)
    for op in ("maximum", "minimum"):
        assert_same_bytes(vk, cpu, op, [(a, Dtype.fp32), (b, Dtype.fp32)])
    assert_same_bytes(vk, cpu, "clip", [(a, Dtype.fp32)], {"min": 0.0, "max": 0.5})


def test_pow_of_negative_bases_follows_numpy(vk, cpu):
    a = np.array([-2.0, -2.0, -2.0, 0.0, 0.0, 3.0, -0.5, 2.0], np.float32)
    b = np.array([3.0, 2.0, 0.5, -1.0, 0.0, -2.0, -3.0, 10.0], np.float32)
    got, want = both(vk, cpu, "pow", [(a, Dtype.fp32), (b, Dtype.fp32)])
    np.testing.assert_allclose(got.to_array(), want.to_array(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_give_int32_indices_on_the_device(vk, cpu, op):
    x = np.random.default_rng(6).integers(-3, 3, (4, 50)).astype(np.float32)  # many ties
    for args in ({"axis": 1}, {"axis": 0, "keepdims": True}, {"axis": 1, "select_last_index": True}, {}):
        assert_same_bytes(vk, cpu, op, [(x, Dtype.fp32)], args, dtype=Dtype.int32)


# -- attention ---------------------------------------------------------------------------


def attention_inputs(rng, q, k, v, mask=None, mask_dtype=Dtype.bool):
    arrays = [(rng.standard_normal(s).astype(np.float32), Dtype.fp32) for s in (q, k, v)]
    if mask is not None:
        m = rng.random(mask)
        arrays.append((m > 0.3, Dtype.bool) if mask_dtype is Dtype.bool else
                      (np.where(m > 0.3, m, -np.inf).astype(mask_dtype.numpy), mask_dtype))
    return arrays


ATTENTION_CASES = [
    ("4d", {}, ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6)), None, None),
    ("4d-causal", {"causal": True}, ((1, 2, 9, 16), (1, 2, 9, 16), (1, 2, 9, 16)), None, None),
    ("causal-past", {"causal": True, "past_length": 3}, ((1, 2, 4, 8), (1, 2, 7, 8), (1, 2, 7, 8)), None, None),
    ("gqa-4d", {"causal": True}, ((2, 4, 6, 8), (2, 2, 6, 8), (2, 2, 6, 8)), None, None),
    ("packed-gqa", {"q_num_heads": 4, "kv_num_heads": 2}, ((2, 5, 32), (2, 7, 16), (2, 7, 12)), None, None),
    ("packed-causal", {"q_num_heads": 2, "kv_num_heads": 2, "causal": True, "scale": 0.3},
     ((1, 6, 16), (1, 6, 16), (1, 6, 16)), None, None),
    ("3d", {}, ((2, 5, 8), (2, 7, 8), (2, 7, 4)), None, None),
    ("2d", {"scale": 2.0}, ((5, 8), (300, 8), (300, 3)), None, None),
    ("bool-mask", {}, ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)), (2, 1, 5, 7), Dtype.bool),
    ("bool-mask-causal", {"causal": True}, ((1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8)), (6, 6), Dtype.bool),
    ("short-mask", {}, ((1, 2, 4, 8), (1, 2, 9, 8), (1, 2, 9, 8)), (4, 5), Dtype.bool),
    ("float-mask", {}, ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)), (3, 5, 7), Dtype.fp32),
    ("fp16-mask-packed", {"q_num_heads": 2, "kv_num_heads": 1}, ((2, 5, 16), (2, 7, 8), (2, 7, 8)), (2, 2, 5, 7),
     Dtype.fp16),
]


@pytest.mark.parametrize("name,args,shapes,mask,mask_dtype", ATTENTION_CASES, ids=[c[0] for c in ATTENTION_CASES])
def test_attention_matches_the_cpu(vk, cpu, name, args, shapes, mask, mask_dtype):
    rng = np.random.default_rng(len(name))
    inputs = attention_inputs(rng, *shapes, mask=mask, mask_dtype=mask_dtype)
    got, want = both(vk, cpu, "attention", inputs, args)
    np.testing.assert_allclose(got.to_array(), want.to_array(), rtol=1e-4, atol=1e-5)


def test_attention_of_a_fully_masked_query_is_zeros(vk, cpu):
    rng = np.random.default_rng(8)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    inputs = attention_inputs(rng, (3, 8), (4, 8), (4, 8)) + [(mask, Dtype.bool)]
    got, want = both(vk, cpu, "attention", inputs)
    assert got.to_array()[1].tolist() == [0.0] * 8
    np.testing.assert_allclose(got.to_array(), want.to_array(), rtol=1e-4, atol=1e-5)


# -- refusals: what stays on the CPU -------------------------------------------------------


@pytest.mark.parametrize("op,inputs,dtype,why", [
    ("sum", [Dtype.int32], Dtype.int32, "op 'sum' computes on int32 on the CPU only"),
    ("div", [Dtype.int16, Dtype.int16], Dtype.int16, "op 'div' computes on int16 on the CPU only"),
    ("matmul", [Dtype.uint8, Dtype.uint8], Dtype.uint8, "op 'matmul' computes on uint8 on the CPU only"),
    ("exp", [Dtype.fp32], Dtype.int32, "op 'exp' computes in float here, and its int32 result could round differently"),
    ("add", [Dtype.int64, Dtype.int64], Dtype.int64, "int64 has no 32-bit WGSL type"),
    ("attention", [Dtype.fp64] * 3, Dtype.fp64, "fp64 has no 32-bit WGSL type"),
])
def test_what_vulkan_refuses_and_why(vk, op, inputs, dtype, why):
    assert refusal(ops.REGISTRY[op], inputs, dtype) == why
    if all(d in SUPPORTED_DTYPES for d in (*inputs, dtype)):
        arrays = [(np.ones(4, d.numpy), d) for d in inputs]
        with pytest.raises(Backend, match="does not compute this node: " + why.replace("(", r"\(")) as info:
            execute(vk, op, arrays, dtype=dtype)
        assert info.value.node == "y"


def test_integer_values_the_cpu_computes_in_float64_are_refused():
    assert refusal(ops.REGISTRY["add"], [Dtype.int32], Dtype.int32, {"value": 0.5}) == (
        "op 'add' computes int32 with the value 0.5 in float64 or int64")
    assert refusal(ops.REGISTRY["lt"], [Dtype.int16], Dtype.bool, {"value": 2.0}) == (
        "op 'lt' computes int16 with the value 2.0 in float64 or int64")
    assert refusal(ops.REGISTRY["add"], [Dtype.int32], Dtype.int32, {"value": 2}) is None


# -- through the planner: a bool mask over a bridge, int64 kept off -------------------------------


MASK_MANIFEST = """
version: 1
name: mask-over-a-bridge
executors:
  a: {{vendor: cpu}}
  g: {{vendor: {gpu}}}
stages:
  q: {{op: random.normal, args: {{shape: [2, 8, 24], seed: 1}}, executor: g}}
  k: {{op: random.normal, args: {{shape: [2, 8, 12], seed: 2}}, executor: g}}
  v: {{op: random.normal, args: {{shape: [2, 8, 12], seed: 3}}, executor: g}}
  u: {{op: random.uniform, args: {{shape: [2, 1, 8, 8], seed: 4}}, executor: a}}
  keep: {{op: gt, inputs: [u], args: {{value: 0.25}}, executor: a}}
  att: {{op: attention, inputs: [q, k, v, keep], executor: g,
         args: {{q_num_heads: 4, kv_num_heads: 2, causal: true}}}}
  mean: {{op: mean, inputs: [att], args: {{axis: -1}}, executor: g}}
outputs: {{att: att, keep: keep, mean: mean}}
"""


def run_outputs(path, runs_dir):
    import hetflow
    from hetflow.engine.store.records import load_output

    r = hetflow.run(path, runs_dir=runs_dir, cache=False)
    assert r.ok, r.error
    record = json.loads(open(r.record_path).read())
    run_dir = str(__import__("pathlib").Path(r.record_path).parent)
    return record, {name: load_output(run_dir, name) for name in record["outputs"]}


def test_a_bool_mask_made_on_the_cpu_crosses_to_attention_on_vulkan(manifest_file, tmp_path):
    from hetflow.engine.manifest.validate import compile_manifest, load
    from hetflow.engine.plan.planner import plan

    split = manifest_file(MASK_MANIFEST.format(gpu="vulkan"), "split.yaml")
    p = plan(compile_manifest(load(split)), probe)
    assert p.nodes["att"].executor == "g" and p.nodes["keep"].executor == "a"
    assert p.nodes["keep"].dtype is Dtype.bool
    assert any(b.tensor == "keep" and b.source == "a" and b.destination == "g" for b in p.bridges)
    _, got = run_outputs(split, tmp_path / "split")
    _, want = run_outputs(manifest_file(MASK_MANIFEST.format(gpu="cpu"), "cpu.yaml"), tmp_path / "cpu")
    assert got["keep"].dtype == np.bool_ and np.array_equal(got["keep"], want["keep"])
    assert got["att"].shape == (2, 8, 24)  # 4 q heads of the v head dim 6, packed
    np.testing.assert_allclose(got["att"], want["att"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["mean"], want["mean"], rtol=1e-4, atol=1e-5)


INT64_MANIFEST = """
version: 1
name: int64-off-vulkan
executors:
  a: {vendor: cpu}
  g: {vendor: vulkan}
stages:
  table: {op: random.normal, args: {shape: [50, 16], seed: 1}}
  ids: {op: arange, args: {start: 3, stop: 11}, dtype: int64}
  emb: {op: gather, inputs: [table, ids]}
  ids32: {op: cast, inputs: [ids], dtype: int32, executor: a}
  emb32: {op: gather, inputs: [table, ids32], executor: g}
  total: {op: sum, inputs: [ids32], vendor: [vulkan, cpu]}
outputs: {emb: emb, emb32: emb32, total: total}
"""


def test_the_planner_keeps_int64_off_vulkan_and_says_why(manifest_file, tmp_path):
    from hetflow.engine.cli import main

    path = manifest_file(INT64_MANIFEST)
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", path], out=out, err=err) == 0, err.getvalue()
    lines = {line.split()[0]: line for line in out.getvalue().splitlines() if line.startswith("  ") and len(line.split()) > 3}
    assert " on a " in lines["ids"] and "capability: only 'a' runs arange at int64" in lines["ids"]
    assert " on a " in lines["emb"] and "int64" in lines["emb"] and "'g' (vulkan) does not support int64" in lines["emb"]
    assert " on g " in lines["emb32"]
    # an integer sum numpy computes in int64: Vulkan refuses it, so the preference falls back to the CPU
    assert " on a " in lines["total"]
    _, got = run_outputs(path, tmp_path)
    assert np.array_equal(got["emb"], got["emb32"]) and got["total"].tolist() == sum(range(3, 11))
