"""The host kernels an imported ONNX model spends its time in, made faster: the same values, erf's within 1 ulp.

``erf`` of an fp32 stage, now computed in float32 (a polynomial form and
an exponential one) instead of by Cody's float64 forms, stays within 1 ulp
of the correctly rounded value; ``load`` maps a safetensors file's bytes
instead of copying them, and refuses a damaged file with the same words
as before; ``split`` gives a view; ``softmax`` and ``layernorm``, now in
place, give the very values of their formulas, and ``where`` numpy's.
The ONNX conformance cases (``tests/test_onnx_nodes.py``) and the
imported GPT-2 against onnxruntime (``tests/test_onnx_import.py``) check
the same kernels from the outside.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hetflow.executors import ops
from hetflow.executors.base import Dtype
from hetflow.executors.builtin.loading import read_array


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 steps; +0 and -0 are one value, and the signs agree wherever erf is not 0."""
    g, w = got.view(np.int32).astype(np.int64), want.view(np.int32).astype(np.int64)
    g, w = np.where(g < 0, -(g & 0x7FFFFFFF), g), np.where(w < 0, -(w & 0x7FFFFFFF), w)
    return np.abs(g - w)


def test_erf_in_float32_is_within_an_ulp_of_the_correctly_rounded_value():
    # every 4099th float32 from the smallest normal to 6 (erf is +-1 in float32 beyond 3.92), both signs, and
    # the places where the formulas change: the split at 0.921875 and the clamp at 4
    bits = np.arange(0x00800000, 0x40C00000, 4099, dtype=np.uint32)
    edges = np.array([0.921875, 4.0, 3.9, 3.95], np.float32)
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(9))])
    x = np.concatenate([bits.view(np.float32), edges])
    x = np.concatenate([x, -x, np.array([0.0, 1e-45, 1e-39, 6.0, 30.0, 1e30, np.inf], np.float32)])
    want = np.array([math.erf(v) for v in x.tolist()]).astype(np.float32)
    got = ops.run(np, "erf", [x], {}, Dtype.fp32)
    assert got.dtype == np.float32
    ulps = _ulps(got, want)
    assert ulps.max() <= 1, (x[ulps.argmax()], got[ulps.argmax()], want[ulps.argmax()])
    assert (ulps == 0).mean() > 0.75
    special = ops.run(np, "erf", [np.array([np.nan, -np.inf, -0.0], np.float32)], {}, Dtype.fp32)
    assert np.isnan(special[0]) and special[1] == -1.0 and np.signbit(special[2])


def test_erf_keeps_its_shape_and_fp64_and_fp16_take_their_own_paths():
    x = np.linspace(-5, 5, 3 * 70001, dtype=np.float32).reshape(3, 70001)  # more than one piece of 64 Ki values
    got = ops.run(np, "erf", [x], {}, Dtype.fp32)
    want = np.array([math.erf(v) for v in x.reshape(-1).tolist()]).astype(np.float32).reshape(x.shape)
    assert got.shape == x.shape and _ulps(got, want).max() <= 1
    # fp64 stays Cody's float64 forms: closer than float32 could ever be
    wide = ops.run(np, "erf", [x.astype(np.float64)], {}, Dtype.fp64)
    assert np.abs(wide - np.array([math.erf(v) for v in x.reshape(-1).tolist()]).reshape(x.shape)).max() < 1e-15
    half = ops.run(np, "erf", [x.astype(np.float16)], {}, Dtype.fp16)
    assert half.dtype == np.float16 and np.abs(half.astype(np.float64) - want).max() <= 2 ** -11


def test_exact_gelu_uses_the_same_erf():
    x = np.linspace(-8, 8, 4001, dtype=np.float32)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()])
    got = ops.run(np, "gelu", [x], {"approximate": "none"}, Dtype.fp32)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_in_place_gives_its_formulas_values_bit_for_bit(dtype, approximate):
    from hetflow.executors.builtin.elementwise import _erf_op, _gelu

    x = (np.random.default_rng(5).standard_normal((64, 129)) * 4).astype(dtype)
    x.flat[:5] = [np.inf, -np.inf, np.nan, 0.0, -0.0]
    with np.errstate(all="ignore"):
        if approximate == "none":
            want = 0.5 * x * (1.0 + _erf_op(np, x / math.sqrt(2.0)))
        else:
            want = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
        got = _gelu(np, [x], {"approximate": approximate})  # the kernel, on the array of the dtype it computes in
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


def _safetensors(path, arrays: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    save_file(arrays, str(path))


def test_load_maps_a_safetensors_file_instead_of_copying_it(tmp_path):
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.arange(5, dtype=np.int64),
              "h": np.ones((2, 2), np.float16), "mask": np.array([True, False])}
    path = tmp_path / "weights.safetensors"
    _safetensors(path, arrays)
    for key, array in arrays.items():
        got = read_array(str(path), key)
        assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array), key
    w = read_array(str(path), "w")
    assert not w.flags.owndata and not w.flags.writeable  # a view of the mapped file, which no op can write through
    loaded = ops.run(np, "load", [], {"path": str(path), "key": "w"}, Dtype.fp32)
    assert not loaded.flags.owndata and np.array_equal(loaded, arrays["w"])


def test_the_arrays_of_one_file_share_one_mapping_and_its_one_descriptor(tmp_path):
    import os

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("counts open descriptors through /proc/self/fd (Linux)")
    arrays = {f"w{i}": np.full((3, i + 1), i, np.float32) for i in range(64)}
    path = tmp_path / "many.safetensors"
    _safetensors(path, arrays)
    before = len(os.listdir("/proc/self/fd"))
    held = [read_array(str(path), key) for key in arrays]
    assert len(os.listdir("/proc/self/fd")) - before <= 1
    assert all(np.array_equal(got, arrays[key]) for got, key in zip(held, arrays))
    # replaced by a rename (a new inode, as hetflow import onnx writes it), the file is mapped afresh: the arrays
    # read before keep the old values
    _safetensors(tmp_path / "next.safetensors", {key: a + 1 for key, a in arrays.items()})
    os.replace(tmp_path / "next.safetensors", path)
    assert np.array_equal(read_array(str(path), "w5"), arrays["w5"] + 1) and np.array_equal(held[5], arrays["w5"])


def test_a_damaged_safetensors_file_is_refused_as_before(tmp_path):
    path = tmp_path / "w.safetensors"
    _safetensors(path, {"w": np.ones((4, 4), np.float32), "v": np.ones(3, np.float32)})
    raw = path.read_bytes()
    path.with_name("cut.safetensors").write_bytes(raw[:-4])
    with pytest.raises(ValueError, match=r"^cut\.safetensors is not a readable safetensors file"):
        read_array(str(path.with_name("cut.safetensors")), "w")
    with pytest.raises(ValueError, match=r"^w\.safetensors has no array 'x' \(it holds: "):
        read_array(str(path), "x")
    # a header whose entry claims more bytes than its shape holds: safe_open reads it and says why
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header["v"]["shape"] = [4]
    text = json.dumps(header).encode().ljust(n)
    path.with_name("lies.safetensors").write_bytes(raw[:8] + text + raw[8 + n:])
    with pytest.raises(ValueError, match=r"^lies\.safetensors is not a readable safetensors file"):
        read_array(str(path.with_name("lies.safetensors")), "w")


def test_split_is_a_view_of_its_input():
    x = np.arange(2 * 3 * 9, dtype=np.float32).reshape(2, 3, 9)
    parts = [ops.run(np, "split", [x], {"axis": -1, "sizes": [2, 3, 4], "index": i}, Dtype.fp32) for i in range(3)]
    assert [p.shape for p in parts] == [(2, 3, 2), (2, 3, 3), (2, 3, 4)]
    assert np.array_equal(np.concatenate(parts, axis=-1), x)
    assert all(np.shares_memory(p, x) for p in parts)
    assert np.array_equal(ops.run(np, "split", [x], {"axis": 1, "sections": 3, "index": 1}, Dtype.fp32), x[:, 1:2])


@pytest.mark.parametrize("dtype", [Dtype.fp32, Dtype.fp64])
def test_softmax_and_layernorm_in_place_give_their_formulas_values(dtype):
    rng = np.random.default_rng(3)
    wide = dtype.numpy
    x = (rng.standard_normal((2, 3, 40, 50)) * 4).astype(wide)
    x[0, 0, 0, :] = -np.inf  # a row of -inf gives NaN, as the formula does
    x[1, 2, 3, 7] = np.inf
    for axis in (-1, 1, 0):
        with np.errstate(invalid="ignore"):
            e = np.exp(x - np.max(x, axis=axis, keepdims=True))
            got = ops.run(np, "softmax", [x], {"axis": axis}, dtype)
        assert np.array_equal(got, e / np.sum(e, axis=axis, keepdims=True), equal_nan=True), axis
    x = rng.standard_normal((2, 16, 24)).astype(wide)
    w, b = rng.standard_normal(24).astype(wide), rng.standard_normal((16, 24)).astype(wide)
    for axis, inputs in ((-1, [x, w, b[0]]), (1, [x, b, w]), (-1, [x])):
        axes = tuple(range(axis % 3, 3))
        centered = x - x.mean(axis=axes, keepdims=True)
        want = centered / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + 1e-5)
        for operand, f in zip(inputs[1:], (np.multiply, np.add)):
            want = f(want, operand)
        assert np.array_equal(ops.run(np, "layernorm", inputs, {"axis": axis}, dtype), want)
    before = x.copy()
    ops.run(np, "layernorm", [x, w], {}, dtype)
    ops.run(np, "softmax", [x], {"axis": -1}, dtype)
    assert np.array_equal(x, before)  # in place in the op's own array: the input is never written


@pytest.mark.parametrize("dtype", [Dtype.fp32, Dtype.fp64, Dtype.int64, Dtype.int8, Dtype.bool])
def test_where_gives_numpys_where_for_every_broadcast(dtype):
    rng = np.random.default_rng(5)
    kind = dtype.numpy
    values = (rng.standard_normal((2, 3, 4, 5)) * 10).astype(kind)
    if dtype.kind == "float":
        values.flat[::7] = np.nan
        values.flat[1::7] = -0.0
    shapes = [((2, 3, 4, 5), (1, 1, 4, 5), ()), ((4, 5), (), (2, 3, 4, 5)), ((2, 1, 4, 1), (1, 3, 1, 5), (2, 3, 4, 1)),
              ((), (2, 3, 4, 5), (2, 3, 4, 5)), ((5,), (4, 1), (3, 1, 1))]
    for c, a, b in shapes:
        cond = rng.random(c) < 0.5
        x = values[tuple(slice(0, n) for n in (4 - len(a)) * (1,) + a)].reshape(a)
        y = values.reshape(-1)[::-1][:max(1, int(np.prod(b)))].reshape(b)
        for condition in (cond, cond.astype(np.int64) * 3):  # any nonzero value is true
            got = ops.run(np, "where", [condition, x, y], {}, dtype)
            want = np.where(cond, x, y)
            assert got.dtype == kind and got.shape == want.shape, (c, a, b)
            assert np.array_equal(got.view(np.uint8), want.astype(kind).view(np.uint8)), (c, a, b)  # bit for bit
