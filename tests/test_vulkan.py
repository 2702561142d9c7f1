"""The Vulkan executor beyond the shared contract suite: every kernel against
the numpy op bodies, dtype conversions bit for bit against numpy/ml_dtypes,
staging buffers, errors, the planner's use of its op list, and the split
MLP half on Vulkan, half on the CPU.

Everything here needs wgpu and a Vulkan driver (``mesa-vulkan-drivers``
gives lavapipe, a software device, on any machine); without them the whole
module is skipped with the probe's reason.
"""

import dataclasses
import io
import json
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hetflow.executors import create, ops, probe
from hetflow.executors.base import (
    Backend,
    Dtype,
    OutOfMemory,
    PortableActivation,
    TensorShape,
    UnsupportedDtype,
    Vendor,
)
from hetflow.executors.cpu import encode_plan
from hetflow.executors.vulkan import SUPPORTED_DTYPES

OFFER = probe(Vendor.vulkan)
pytestmark = pytest.mark.skipif(not OFFER.available, reason=f"vulkan executor unavailable here: {OFFER.reason}")

REPO = Path(__file__).resolve().parent.parent

# Kernels sum in a different order than numpy's BLAS and use the device's
# exp/tanh/sqrt: fp32 results agree to these tolerances, not bit for bit.
RTOL, ATOL = 1e-5, 1e-5


@pytest.fixture(scope="module")
def vk():
    ex = create(Vendor.vulkan, "vk")
    yield ex
    assert ex.live_activations() == 0


def portable(array, dtype=Dtype.fp32):
    return PortableActivation.from_array(np.asarray(array).astype(dtype.numpy), dtype)


def run_one(ex, op, arrays, args=None, dtype=Dtype.fp32, in_dtype=Dtype.fp32):
    names = [f"i{k}" for k in range(len(arrays))]
    node = {"id": "y", "op": op, "args": args or {}, "dtype": dtype.value, "inputs": names}
    handles = [ex.import_activation(portable(a, ops.dtype_of(a) if a.dtype != np.float32 else in_dtype))
               for a in map(np.asarray, arrays)]
    try:
        (y,) = ex.execute(encode_plan(Vendor.vulkan, names, [node], ["y"]), handles)
        out = ex.export_activation(y)
        ex.release_activation(y)
        return out
    finally:
        for h in handles:
            ex.release_activation(h)


CASES = [
    ("add", {}, [(3, 1, 5), (4, 5)]),
    ("sub", {}, [(2, 3), (3,)]),
    ("mul", {}, [(), (4,)]),
    ("div", {}, [(7,), (7,)]),
    ("mul", {"value": 2.5}, [(3, 4)]),
    ("eq", {}, [(4, 5), (5,)]),
    ("lt", {"value": 0.0}, [(6,)]),
    ("gt", {}, [(3, 1), (1, 3)]),
    ("matmul", {}, [(70, 33), (33, 130)]),
    ("matmul", {}, [(2, 1, 5, 7), (3, 7, 4)]),
    ("matmul", {}, [(7,), (7, 3)]),
    ("matmul", {}, [(5, 7), (7,)]),
    ("matmul", {}, [(3, 0), (0, 4)]),
    ("relu", {}, [(300,)]),
    ("gelu", {}, [(300,)]),
    ("silu", {}, [(300,)]),
    ("softmax", {"axis": -1}, [(6, 300)]),
    ("softmax", {"axis": 0}, [(6, 30)]),
    ("sum", {}, [(1000,)]),
    ("sum", {"axis": 1}, [(3, 4, 5)]),
    ("sum", {"axis": 0, "keepdims": True}, [(0, 3)]),
    ("mean", {"axis": 0}, [(3, 4, 5)]),
    ("max", {"axis": -1}, [(3, 700)]),
    ("argmax", {}, [(3, 700)]),
    ("argmax", {"axis": 1, "keepdims": True}, [(3, 7, 2)]),
    ("rmsnorm", {}, [(4, 33), (33,)]),
    ("rmsnorm", {"eps": 0.1}, [(2, 3, 300)]),
    ("layernorm", {}, [(4, 33), (33,), (33,)]),
    ("layernorm", {}, [(4, 300)]),
    ("transpose", {}, [(3, 4, 5)]),
    ("transpose", {"axes": [0, 2, 1]}, [(3, 4, 5)]),
    ("reshape", {"shape": [20, 3]}, [(3, 4, 5)]),
    ("cast", {}, [(2, 2)]),
    ("pow", {}, [(3, 4), (4,)]),
    ("maximum", {}, [(3, 1), (1, 3)]),
    ("minimum", {"value": 0.5}, [(30,)]),
    ("le", {}, [(4, 5), (5,)]),
    ("ge", {"value": 0.0}, [(6,)]),
    ("where", {}, [(3, 4), (3, 4), (4,)]),
    ("neg", {}, [(40,)]),
    ("abs", {}, [(40,)]),
    ("clip", {"min": -0.5, "max": 0.5}, [(40,)]),
    ("exp", {}, [(300,)]),
    ("log", {}, [(300,)]),
    ("sqrt", {}, [(300,)]),
    ("tanh", {}, [(300,)]),
    ("sigmoid", {}, [(300,)]),
    ("erf", {}, [(300,)]),
    ("gelu", {"approximate": "none"}, [(300,)]),
    ("min", {"axis": 0}, [(7, 30)]),
    ("argmin", {"axis": -1}, [(3, 700)]),
    ("gather", {"axis": 1}, [(3, 10, 4), (5,)]),
    ("attention", {"causal": True}, [(2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)]),
]

# Inputs an op needs in a dtype of its own: the condition a bool, indices int32 in range, logs and roots positive.
PREPARE = {
    "where": lambda arrays: [arrays[0] > 0, *arrays[1:]],
    "gather": lambda arrays: [arrays[0], (np.abs(arrays[1]) * 3).astype(np.int32) % 10],
    "log": lambda arrays: [np.abs(a) + np.float32(1e-3) for a in arrays],
    "sqrt": lambda arrays: [np.abs(a) for a in arrays],
    "pow": lambda arrays: [np.abs(arrays[0]) + np.float32(0.1), arrays[1]],
}


@pytest.mark.parametrize("op,args,shapes", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[2][0])) or 'scalar'}" for c in CASES])
def test_kernel_matches_the_numpy_body(vk, op, args, shapes):
    rng = np.random.default_rng(len(op))
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    arrays = PREPARE.get(op, list)(arrays)
    dtype = Dtype.int32 if op.startswith("arg") else Dtype.fp32  # argmax's default int64 has no WGSL type
    want = ops.run(np, op, arrays, args, dtype)
    got = run_one(vk, op, arrays, args, dtype).to_array()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_every_op_of_the_registry_is_covered_or_a_host_source():
    tested = {c[0] for c in CASES}
    for name in OFFER.ops:
        kernel = ops.REGISTRY[name].wgsl
        assert name in tested or kernel.template == "host", f"{name} has a WGSL kernel but no test"
    # users' ops that other tests registered carry their own kernels; the offer lists the built-in ones
    assert set(OFFER.ops) == {n for n, op in ops.REGISTRY.items() if op.wgsl is not None and n in ops.BUILTIN}


def test_large_matmul_uses_many_tiles(vk):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((257, 300)).astype(np.float32)
    b = rng.standard_normal((300, 129)).astype(np.float32)
    got = run_one(vk, "matmul", [a, b]).to_array()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_source_ops_are_made_on_the_host_bit_for_bit(vk):
    for op, args in [("random.normal", {"shape": [5, 7], "seed": 3}), ("arange", {"stop": 10, "step": 3}), ("ones", {"shape": [3]})]:
        want = ops.run(np, op, [], args, Dtype.bf16)
        assert run_one(vk, op, [], args, Dtype.bf16).to_array().tobytes() == want.tobytes()


def special_values():
    """Edge cases of every conversion: signed zeros, NaN payloads, infinities,
    rounding ties, subnormals of the targets, overflow boundaries, saturation."""
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001],
                    dtype=np.uint32).view(np.float32)
    specials = np.array([0.0, 0.5, 1.5, 2.5, -2.5, 127.5, 128.0, -128.5, 7.5, -8.5, 448.0, 464.0, 465.0, 57344.0,
                         61440.0, 65504.0, 65520.0, 1e-9, 6e-8, 3e-8, 2.0 ** -24, 2.0 ** -25, 2.0 ** -9, 2.0 ** -10,
                         1e30, -1e30, 1 + 2.0 ** -8, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11], dtype=np.float32)
    rng = np.random.default_rng(7)
    rand = (rng.standard_normal(4000) * np.exp2(rng.integers(-30, 20, 4000))).astype(np.float32)
    return np.concatenate([bits, specials, -specials, rand, np.arange(-300, 300, 0.25, dtype=np.float32)])


NARROWER = [d for d in SUPPORTED_DTYPES if d is not Dtype.fp32]


@pytest.mark.parametrize("dtype", NARROWER, ids=str)
def test_narrowing_matches_numpy_and_ml_dtypes_bit_for_bit(vk, dtype):
    # reshape only moves its input, so its fp32 result reaches the numeric rule as it is
    x = special_values()
    with np.errstate(over="ignore", invalid="ignore"):
        want = ops.to_dtype(np, x, dtype)
        cast = ops.run(np, "cast", [x], {}, dtype)
    got = run_one(vk, "reshape", [x], {"shape": [x.size]}, dtype=dtype).to_array()
    assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
    # cast follows its own op's rule (to fp8 it saturates first, as ONNX's Cast)
    got = run_one(vk, "cast", [x], dtype=dtype).to_array()
    assert got.view(np.uint8).tobytes() == cast.view(np.uint8).tobytes()


@pytest.mark.parametrize("dtype", [d for d in NARROWER if d.itemsize_bits <= 16], ids=str)
def test_widening_every_encoding_is_exact(vk, dtype):
    if dtype.itemsize_bits == 16:
        codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    else:
        codes = np.arange(1 << dtype.itemsize_bits, dtype=np.uint32).astype(np.uint8)
    if dtype is Dtype.int4:
        values = ((codes.astype(np.int16) ^ 8) - 8).astype(np.int8).astype(ml_dtypes.int4)
    elif dtype is Dtype.bool:
        values = np.array([False, True])
    else:
        values = codes.view(dtype.numpy)
    got = run_one(vk, "cast", [values], in_dtype=dtype).to_array()
    want = ops.run(np, "cast", [values], {}, Dtype.fp32)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


def test_mixed_dtype_inputs_widen_then_compute(vk):
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    b = np.ones(4, np.float32)
    handles = [vk.import_activation(portable(a, Dtype.fp16)), vk.import_activation(portable(b, Dtype.int8))]
    nodes = [{"id": "y", "op": "add", "args": {}, "dtype": "bf16", "inputs": ["a", "b"]}]
    (y,) = vk.execute(encode_plan(Vendor.vulkan, ["a", "b"], nodes, ["y"]), handles)
    want = ops.run(np, "add", [a.astype(np.float16), b.astype(np.int8)], {}, Dtype.bf16)
    assert vk.export_activation(y).to_array().tobytes() == want.tobytes()
    for h in (*handles, y):
        vk.release_activation(h)


def test_staging_buffers_are_reused_and_large_transfers_go_in_chunks(vk, monkeypatch):
    from hetflow.executors import vulkan_device

    dev = vk._dev
    first = vk.import_activation(portable(np.ones(100)))
    vk.export_activation(first)
    up, down = dev._up, dev._down
    second = vk.import_activation(portable(np.zeros(200)))
    vk.export_activation(second)
    assert dev._up is up and dev._down is down
    monkeypatch.setattr(vulkan_device, "STAGING_CHUNK", 1 << 12)
    values = np.random.default_rng(2).standard_normal(10_001).astype(np.float32).astype(ml_dtypes.bfloat16)
    src = portable(values, Dtype.bf16)
    big = vk.import_activation(src)
    assert vk.export_activation(big).bytes == src.bytes
    for h in (first, second, big):
        vk.release_activation(h)


def test_an_op_without_a_kernel_is_a_backend_error_naming_the_node(vk, monkeypatch):
    monkeypatch.setitem(ops.REGISTRY, "relu", dataclasses.replace(ops.REGISTRY["relu"], wgsl=None))
    h = vk.import_activation(portable([1.0]))
    nodes = [{"id": "r", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["x"]}]
    with pytest.raises(Backend, match="op 'relu' has no Vulkan kernel") as info:
        vk.execute(encode_plan(Vendor.vulkan, ["x"], nodes, ["r"]), [h])
    assert info.value.node == "r"
    vk.release_activation(h)


def test_empty_max_is_its_identity_as_on_the_cpu(vk):
    got = run_one(vk, "max", [np.zeros((0, 3), np.float32)], {"axis": 0}).to_array()
    assert got.tolist() == [-np.inf] * 3


def test_too_large_a_tensor_is_out_of_memory(vk):
    limit = vk._dev.max_buffer
    with pytest.raises(OutOfMemory, match="largest buffer"):
        vk.alloc_activation(TensorShape((limit // 4 + 1,)), Dtype.fp32)
    assert vk.live_activations() == 0


def test_a_tensor_past_the_largest_storage_binding_is_out_of_memory(vk, monkeypatch):
    """It was a Backend error, where the docs say a tensor the device cannot hold is OutOfMemory."""
    monkeypatch.setattr(vk._dev, "max_binding", 64)
    with pytest.raises(OutOfMemory, match=r"a tensor of 128 bytes exceeds the device's largest storage binding \(64"):
        run_one(vk, "relu", [np.ones(32, np.float32)], {})
    assert vk.live_activations() == 0


def test_memory_limit_caps_live_activations():
    ex = create(Vendor.vulkan, "small", memory_limit=64)
    h = ex.alloc_activation(TensorShape((16,)), Dtype.fp32)
    with pytest.raises(OutOfMemory, match="memory_limit of 64 bytes"):
        ex.alloc_activation(TensorShape((1,)), Dtype.fp32)
    assert ex.memory_used() == 64
    ex.release_activation(h)
    assert ex.memory_used() == 0 and ex.live_activations() == 0


def test_wgsl_errors_surface_as_backend_with_wgpu_message(vk, monkeypatch):
    monkeypatch.setitem(ops.REGISTRY, "relu", dataclasses.replace(ops.REGISTRY["relu"], wgsl=ops.Kernel("unary", "max(x, 0.0")))
    with pytest.raises(Backend, match="relu failed: GPUValidationError") as info:
        run_one(vk, "relu", [np.ones(3, np.float32)])
    assert info.value.node == "y"


def test_offer_describes_the_adapters():
    assert OFFER.devices and set(OFFER.dtypes) == set(Dtype) - {Dtype.int64, Dtype.fp64}
    for dev in OFFER.devices:
        assert dev.bus_address.startswith("vulkan:") and "Vulkan" in dev.display_name
        if "CPU-type adapter" in dev.display_name:
            assert "software Vulkan device" in dev.display_name
    assert OFFER.reason.startswith("wgpu ")


def test_cli_lists_the_vulkan_adapters():
    from hetflow.engine.cli import main

    out = io.StringIO()
    assert main(["executors"], out=out, err=io.StringIO()) == 0
    line = next(l for l in out.getvalue().splitlines() if l.startswith("vulkan"))
    assert "available" in line and "wgpu" in line
    assert re.search(r"device vulkan:0:[0-9a-f]+:[0-9a-f]+: ", out.getvalue())
    data = io.StringIO()
    main(["executors", "--json"], out=data, err=io.StringIO())
    vk = next(o for o in json.loads(data.getvalue()) if o["vendor"] == "vulkan")
    assert "matmul" in vk["ops"] and vk["available"]


def split_mlp(vendor):
    text = (REPO / "pipelines" / "mlp-split.yaml").read_text()
    return re.sub(r"accel: +\{vendor: \[[^\]]*\]\}", f"accel: {{vendor: {vendor}}}", text)


def test_split_mlp_half_on_vulkan_matches_the_all_cpu_run(manifest_file, tmp_path):
    from hetflow.engine.manifest.validate import compile_manifest, load
    from hetflow.engine.plan.planner import plan
    from hetflow.engine.store.records import load_output
    from hetflow.engine.run.execute import execute

    small = {"batch": 16, "features": 96, "hidden": 160, "classes": 10}
    results = {}
    for vendor in ("vulkan", "cpu"):
        path = manifest_file(split_mlp(vendor), f"mlp-{vendor}.yaml")
        m = compile_manifest(load(path), small)
        p = plan(m, probe)
        if vendor == "vulkan":
            assert p.executors["accel"].vendor is Vendor.vulkan
            crossing = {(b.tensor, b.source, b.destination) for b in p.bridges}
            assert ("x", "host", "accel") in crossing and ("logits", "accel", "host") in crossing
        r = execute(m, p, runs_dir=str(tmp_path / "runs"))
        assert r.record["live_activations_after"] in (0, {}, None) or not any(r.record["live_activations_after"].values())
        results[vendor] = {name: load_output(r.run_dir, name) for name in r.record["outputs"]}
    vk, cpu = results["vulkan"], results["cpu"]
    assert set(vk) == set(cpu) == {"probs", "class_mean", "activations_bf16"}
    # fp32 outputs: three matmuls deep, summed in another order than BLAS
    np.testing.assert_allclose(vk["probs"], cpu["probs"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(vk["class_mean"], cpu["class_mean"], rtol=1e-4, atol=1e-6)
    # bf16 output: the fp32 values it rounds from differ in the last bits, so at most one bf16 step
    a, b = vk["activations_bf16"].astype(np.float32), cpu["activations_bf16"].astype(np.float32)
    np.testing.assert_allclose(a, b, rtol=2.0 ** -7, atol=1e-6)


def test_planner_places_an_op_vulkan_does_not_offer_elsewhere(manifest_file):
    from hetflow.engine.manifest.validate import compile_manifest, load
    from hetflow.engine.plan.planner import plan

    without_gelu = dataclasses.replace(OFFER, ops=tuple(o for o in OFFER.ops if o != "gelu"))

    def probe_here(vendor):
        return without_gelu if vendor is Vendor.vulkan else probe(vendor)

    path = manifest_file("""
        version: 1
        name: fallback
        executors:
          gpu: {vendor: vulkan}
          host: {vendor: cpu}
        stages:
          w: {op: random.normal, args: {shape: [64, 64], seed: 1}}
          h: {op: matmul, inputs: [w, w]}
          g: {op: gelu, inputs: [h]}
        outputs: {g: g}
    """)
    p = plan(compile_manifest(load(path)), probe_here)
    assert p.nodes["h"].executor == "gpu"
    assert p.nodes["g"].executor == "host"
    assert "host" in p.nodes["g"].reason
    assert any(b.tensor == "h" and b.destination == "host" for b in p.bridges)


def test_example_runs_on_whatever_this_machine_offers(tmp_path):
    from hetflow.engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["run", str(REPO / "examples" / "any-vendor.yaml"), "--runs-dir", str(tmp_path), "--json"], out=out, err=err)
    assert code == 0, err.getvalue()
