"""The executor contract (seed 000), one suite for every executor implementation.

Each implementation is a fixture parameter; one that cannot start on this
machine is skipped with the reason its probe gives.

A third-party executor runs the same suite against itself by naming a
factory in ``HETFLOW_EXECUTOR`` (``package.module:callable``, called as
``factory(name, memory_limit=None)`` and returning a new instance)::

    HETFLOW_EXECUTOR=mypkg.executor:make python -m pytest tests/test_executor_contract.py -k external
"""

import importlib
import os
import pickle
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
    OutOfMemory,
    UnknownHandle,
    UnsupportedDtype,
    Vendor,
    VendorMismatch,
)
from hetflow.executors.cpu import encode_plan

IMPLEMENTATIONS = [Vendor.cpu, Vendor.cuda, Vendor.rocm, Vendor.vulkan]
EXTERNAL = os.environ.get("HETFLOW_EXECUTOR", "")


def _external_factory(spec):
    module, _, attr = spec.partition(":")
    if not attr:
        raise pytest.UsageError(f"HETFLOW_EXECUTOR must be package.module:callable, got {spec!r}")
    return getattr(importlib.import_module(module), attr)


@pytest.fixture(params=IMPLEMENTATIONS + ([EXTERNAL] if EXTERNAL else []),
                ids=lambda v: v.value if isinstance(v, Vendor) else "external")
def implementation(request):
    """``factory(name, memory_limit=None)`` making instances of the executor under test."""
    if not isinstance(request.param, Vendor):
        return _external_factory(request.param)
    offer = probe(request.param)
    if not offer.available:
        pytest.skip(f"{request.param.value} executor unavailable here: {offer.reason}")
    return lambda name, memory_limit=None: create(request.param, name, memory_limit=memory_limit)


@pytest.fixture
def vendor(implementation):
    return implementation("probe").vendor


@pytest.fixture
def make(implementation):
    made = []

    def factory(name="e", memory_limit=None):
        ex = implementation(name, memory_limit=memory_limit)
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


def test_a_reduction_to_a_scalar_gives_a_scalar(make, vendor):
    """numpy's and cupy's ascontiguousarray make a 0-d array 1-d: an executor that used it on results gave shape [1]
    for a sum over every axis (int4's own encoding did, on every executor)."""
    ex = make()
    x = ex.import_activation(portable([[1.0, 2.0], [3.0, 4.0]]))
    nodes = [{"id": "s", "op": "sum", "args": {}, "dtype": "fp32", "inputs": ["x"]},
             {"id": "n", "op": "neg", "args": {}, "dtype": "fp32", "inputs": ["s"]}]
    handles = ex.execute(encode_plan(vendor, ["x"], nodes, ["s", "n"]), [x])
    got = [ex.export_activation(h) for h in handles]
    assert [(p.shape.dims, p.to_array().shape, p.to_array().tolist()) for p in got] == [((), (), 10.0), ((), (), -10.0)]
    for h in (x, *handles):
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
    # Executors sum in their own order (numpy's BLAS, a GPU's tiles), so the
    # reference is this executor's result computed alone: every concurrent
    # call must give exactly it, and it must agree with numpy's.
    alone = [ex.import_activation(portable(np.ones((4, 16)))), ex.import_activation(portable(w_host))]
    alone += ex.execute(mlp_plan(vendor), alone)
    want = ex.export_activation(alone[-1]).to_array()
    for h in alone:
        ex.release_activation(h)
    np.testing.assert_allclose(want, np.maximum(np.ones((4, 16), np.float32) @ w_host, 0), rtol=1e-6, atol=1e-6)

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



def test_memory_limit_surfaces_out_of_memory(make, vendor):
    ex = make("small", memory_limit=64)
    h = ex.alloc_activation(TensorShape((4, 4)), Dtype.fp32)  # exactly the 64 bytes
    with pytest.raises(OutOfMemory, match="executor allocation failed"):
        ex.alloc_activation(TensorShape((1,)), Dtype.fp32)
    with pytest.raises(OutOfMemory):
        ex.import_activation(portable([1.0]))
    ex.release_activation(h)

    x = ex.import_activation(portable(np.ones((2, 4))))
    w = ex.import_activation(portable(np.ones((4, 2))))
    with pytest.raises(OutOfMemory):  # a 16-byte result beside the 64 bytes in use
        ex.execute(mlp_plan(vendor), [x, w])
    assert ex.live_activations() == 2, "a refused result leaves no handle behind"
    ex.release_activation(w)
    w = ex.import_activation(portable(np.ones((4, 1))))
    (y,) = ex.execute(mlp_plan(vendor), [x, w])  # 48 + 8 bytes fit
    assert ex.export_activation(y).to_array().tolist() == [[4.0], [4.0]]
    for handle in (x, w, y):
        ex.release_activation(handle)


def test_exports_outlive_release_and_later_exports(make):
    a, b = make("a"), make("b")
    first = np.arange(1000, dtype=np.float32)
    h = a.import_activation(portable(first))
    p = a.export_activation(h)
    a.release_activation(h)  # the portable keeps its bytes after the handle is gone
    for i in range(4):  # later exports of the same size may reuse staging memory, never p's
        other = a.import_activation(portable(np.full(1000, i, np.float32)))
        a.export_activation(other)
        a.release_activation(other)
    h2 = b.import_activation(p)
    assert b.export_activation(h2).to_array().tolist() == first.tolist()
    assert bytes(p.bytes) == first.tobytes()
    b.release_activation(h2)


def test_portable_activation_pickles_to_plain_bytes(make):
    a, b = make("a"), make("b")
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    h = a.import_activation(portable(values))
    wire = pickle.loads(pickle.dumps(a.export_activation(h)))
    assert type(wire) is PortableActivation and isinstance(wire.bytes, bytes)
    h2 = b.import_activation(wire)
    assert b.export_activation(h2).to_array().tolist() == values.tolist()
    a.release_activation(h)
    b.release_activation(h2)


def test_large_and_non_contiguous_results_export_row_major(make, vendor):
    a, b = make("a"), make("b")
    values = np.random.default_rng(3).standard_normal((1024, 1536)).astype(np.float32)
    h = a.import_activation(portable(values))
    plan = encode_plan(vendor, ["x"], [{"id": "t", "op": "transpose", "args": {"axes": None}, "dtype": "fp32", "inputs": ["x"]}], ["t"])
    (t,) = a.execute(plan, [h])
    p = a.export_activation(t)
    assert p.shape.dims == (1536, 1024)
    assert bytes(p.bytes) == np.ascontiguousarray(values.T).tobytes()
    h2 = b.import_activation(p)
    assert np.array_equal(b.export_activation(h2).to_array(), values.T)
    for ex, handle in ((a, h), (a, t), (b, h2)):
        ex.release_activation(handle)


def test_concurrent_bridges_between_two_instances(make):
    a, b = make("a"), make("b")
    errors = []

    def worker(seed):
        try:
            for i in range(20):
                values = np.full((64, 33), seed * 100 + i, np.float32)
                h = a.import_activation(portable(values))
                p = a.export_activation(h)
                a.release_activation(h)
                h2 = b.import_activation(p)
                assert np.array_equal(b.export_activation(h2).to_array(), values)
                b.release_activation(h2)
        except Exception as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
