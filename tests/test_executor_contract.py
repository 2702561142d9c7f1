"""The executor contract (seed 000), one suite for every executor implementation.

Each implementation is a fixture parameter; one that cannot start on this
machine is skipped with the reason its probe gives.
"""

import threading

import ml_dtypes
import numpy as np
import pytest

from hetflow.executors import create, probe
from hetflow.executors.base import (
    ActivationHandle,
    Backend,
    Dtype,
    Executor,
    PortableActivation,
    SubGraphPlan,
    TensorShape,
    UnknownHandle,
    UnsupportedDtype,
    Vendor,
    VendorMismatch,
)
from hetflow.executors.cpu import encode_plan

IMPLEMENTATIONS = [Vendor.cpu, Vendor.cuda, Vendor.rocm, Vendor.vulkan]


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda v: v.value)
def vendor(request):
    offer = probe(request.param)
    if not offer.available:
        pytest.skip(f"{request.param.value} executor unavailable here: {offer.reason}")
    return request.param


@pytest.fixture
def make(vendor):
    made = []

    def factory(name="e"):
        ex = create(vendor, name)
        made.append(ex)
        return ex

    yield factory
    for ex in made:
        assert ex.live_activations() == 0, f"{ex.name} leaked activations"


def portable(array, dtype=Dtype.fp32):
    return PortableActivation.from_array(np.asarray(array).astype(dtype.numpy), dtype)


def mlp_plan(vendor):
    nodes = [
        {"id": "h", "op": "matmul", "args": {}, "dtype": "fp32", "inputs": ["x", "w"]},
        {"id": "y", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["h"]},
    ]
    return encode_plan(vendor, ["x", "w"], nodes, ["y"])


def test_satisfies_the_protocol(make, vendor):
    ex = make()
    assert isinstance(ex, Executor)
    assert ex.vendor is vendor
    assert ex.name == "e"
    assert len(ex.devices) >= 1
    assert Dtype.fp32 in ex.supported_dtypes


def test_execute_computes_and_returns_local_handles(make, vendor):
    ex = make()
    x = ex.import_activation(portable([[1.0, -2.0]]))
    w = ex.import_activation(portable([[1.0, 0.0], [0.0, 1.0]]))
    (y,) = ex.execute(mlp_plan(vendor), [x, w])
    assert ex.export_activation(y).to_array().tolist() == [[1.0, 0.0]]
    for h in (x, w, y):
        ex.release_activation(h)


def test_handles_of_one_instance_are_unknown_to_another(make):
    a, b = make("a"), make("b")
    h = a.import_activation(portable([1.0]))
    with pytest.raises(UnknownHandle):
        b.export_activation(h)
    with pytest.raises(UnknownHandle):
        b.execute(mlp_plan(b.vendor), [h, h])
    with pytest.raises(UnknownHandle):
        a.export_activation(ActivationHandle(-1))
    a.release_activation(h)


def test_release_is_idempotent(make):
    ex = make()
    h = ex.alloc_activation(TensorShape((2, 2)), Dtype.fp32)
    assert ex.live_activations() == 1
    ex.release_activation(h)
    ex.release_activation(h)
    ex.release_activation(ActivationHandle(123456789))
    assert ex.live_activations() == 0
    with pytest.raises(UnknownHandle):
        ex.export_activation(h)


def test_alloc_gives_zeros_of_the_dtype(make):
    ex = make()
    for dtype in ex.supported_dtypes:
        h = ex.alloc_activation(TensorShape((3,)), dtype)
        p = ex.export_activation(h)
        assert (p.shape.dims, p.dtype) == ((3,), dtype)
        assert p.to_array().astype(np.float32).tolist() == [0.0, 0.0, 0.0]
        ex.release_activation(h)


def test_vendor_mismatch(make, vendor):
    ex = make()
    other = next(v for v in Vendor if v is not vendor)
    with pytest.raises(VendorMismatch, match=f"plan vendor {other.value} does not match executor vendor {vendor.value}"):
        ex.execute(SubGraphPlan(other, b"{}"), [])


def test_op_failure_is_a_backend_error_naming_the_node(make, vendor, tmp_path):
    ex = make()
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not an npy file")
    plan = encode_plan(vendor, [], [{"id": "w", "op": "load", "args": {"path": str(bad)}, "dtype": "fp32", "inputs": []}], ["w"])
    with pytest.raises(Backend) as info:
        ex.execute(plan, [])
    assert info.value.node == "w"
    assert "load failed" in str(info.value)


def test_unsupported_dtype_is_refused(make):
    ex = make()
    missing = [d for d in Dtype if d not in ex.supported_dtypes]
    if not missing:
        pytest.skip(f"{ex.vendor.value} supports every dtype")
    with pytest.raises(UnsupportedDtype):
        ex.alloc_activation(TensorShape((1,)), missing[0])
    with pytest.raises(UnsupportedDtype):
        ex.import_activation(portable([1.0], missing[0]))


@pytest.mark.parametrize("dtype", list(Dtype), ids=str)
@pytest.mark.parametrize("shape", [(0,), (), (3, 5), (2, 3, 4)], ids=["empty", "scalar", "matrix", "rank3"])
def test_portable_round_trip_between_instances_is_bit_exact(make, dtype, shape):
    a, b = make("a"), make("b")
    if dtype not in a.supported_dtypes:
        pytest.skip(f"{a.vendor.value} does not support {dtype.value}")
    rng = np.random.default_rng(0)
    values = np.clip(np.rint(rng.standard_normal(shape) * 4), -8, 7).astype(np.float32)
    src = PortableActivation.from_array(values.astype(dtype.numpy), dtype)
    h = a.import_activation(src)
    exported = a.export_activation(h)
    h2 = b.import_activation(exported)
    back = b.export_activation(h2)
    assert (back.shape, back.dtype, back.bytes) == (src.shape, src.dtype, src.bytes)
    a.release_activation(h)
    b.release_activation(h2)


def test_non_contiguous_arrays_export_row_major():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = PortableActivation.from_array(base.T, Dtype.fp32)
    assert p.bytes == np.ascontiguousarray(base.T).tobytes()


def test_int4_packs_two_per_byte_low_nibble_first():
    values = np.array([1, -2, 7, -8, 3], dtype=ml_dtypes.int4)
    p = PortableActivation.from_array(values, Dtype.int4)
    assert p.bytes == bytes([0xE1, 0x87, 0x03])
    assert p.to_array().astype(np.int8).tolist() == [1, -2, 7, -8, 3]


def test_portable_rejects_wrong_byte_count():
    with pytest.raises(ValueError, match="needs 8 bytes, got 4"):
        PortableActivation(TensorShape((2, 1)), Dtype.fp32, b"\0" * 4)


def test_concurrent_calls_from_many_threads(make, vendor):
    ex = make()
    errors = []
    rng = np.random.default_rng(1)
    w_host = rng.standard_normal((16, 16)).astype(np.float32)
    want = np.maximum(np.ones((4, 16), np.float32) @ w_host, 0)

    def worker():
        try:
            for _ in range(25):
                x = ex.import_activation(portable(np.ones((4, 16))))
                w = ex.import_activation(portable(w_host))
                (y,) = ex.execute(mlp_plan(vendor), [x, w])
                got = ex.export_activation(y).to_array()
                assert np.array_equal(got, want)
                for h in (x, w, y):
                    ex.release_activation(h)
        except Exception as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert ex.live_activations() == 0
