"""The CUDA/ROCm executor computes what the CPU executor computes, op by op and dtype by dtype.

Skipped, with the probe's reason, where cupy sees no GPU. Each case runs
one op on both executors from the same portable inputs; integer and
layout results must match exactly, float results within one unit in the
last place of the output dtype (the tolerances of ``test_ops_numerics``),
since cuBLAS and numpy may sum in different orders.
"""

import numpy as np
import pytest

from hetflow.executors import create, probe
from hetflow.executors.base import Dtype, PortableActivation, Vendor
from hetflow.executors.cpu import encode_plan
from hetflow.executors.ops import REGISTRY, dtype_of

GPU = next((v for v in (Vendor.cuda, Vendor.rocm) if probe(v).available), None)
pytestmark = pytest.mark.skipif(
    GPU is None, reason=f"no GPU executor here: cuda: {probe(Vendor.cuda).reason}; rocm: {probe(Vendor.rocm).reason}"
)

TOLERANCE = {
    Dtype.fp32: (2e-5, 1e-5), Dtype.fp16: (1e-3, 1e-4), Dtype.bf16: (8e-3, 1e-3),
    Dtype.fp8e4m3: (0.07, 4e-3), Dtype.fp8e5m2: (0.13, 1e-4), Dtype.fp64: (1e-12, 1e-13),
}

rng = np.random.default_rng(5)
X = rng.standard_normal((4, 6, 8)).astype(np.float32)
POS = np.abs(X) + 0.1
CASES = {
    "add": ([X, X[0]], {}), "sub": ([X, X], {}), "mul": ([X, X], {}), "div": ([X, POS], {}),
    "matmul": ([X, X.swapaxes(-1, -2)], {}), "relu": ([X], {}), "gelu": ([X], {}), "silu": ([X], {}),
    "softmax": ([X], {"axis": -1}), "sum": ([X], {"axis": 1}), "mean": ([X], {"axis": None}),
    "transpose": ([X], {"axes": [2, 0, 1]}), "reshape": ([X], {"shape": [24, 8]}), "cast": ([X], {}),
    "max": ([X], {"axis": 2}), "argmax": ([X], {"axis": -1}), "rmsnorm": ([X, X[0, 0]], {}),
    "layernorm": ([X, X[0, 0], X[1, 1]], {}), "attention": ([X, X, X], {"causal": True}), "rope": ([X], {"offset": 2}),
    "concat": ([X, X], {"axis": 1}), "split": ([X], {"axis": 2, "sections": 2, "index": 1}),
    "slice": ([X], {"axis": 1, "start": 5, "stop": 0, "step": -2}), "exp": ([X], {}), "log": ([POS], {}),
    "sqrt": ([POS], {}), "tanh": ([X], {}), "sigmoid": ([X], {}),
    "quantize.scale": ([X], {"target": "int8", "axis": 2}), "dequantize": ([X, np.float32(0.5).reshape(())], {}),
    "zeros": ([], {"shape": [3, 2]}), "ones": ([], {"shape": [3]}), "arange": ([], {"start": 1, "stop": 9, "step": 2}),
    "random.normal": ([], {"shape": [5, 4], "seed": 3}), "random.uniform": ([], {"shape": [7], "seed": 4}),
}
# integer, bool and fp64 inputs reach the device as they are: (inputs, args, output dtype)
I64 = rng.integers(-2**40, 2**40, (4, 6, 8)).astype(np.int64)
MASK = np.tril(np.ones((6, 6), bool))
TYPED = {
    "add:int64": ([I64, I64[0]], {}), "mul:int64": ([I64, I64], {}), "div:int64": ([I64, I64 % 7 + 1], {}),
    "mod:int64": ([I64, I64 % 7 + 1], {}), "sum:int64": ([I64], {"axis": 1}), "max:int64": ([I64], {"axis": 0}),
    "lt:bool": ([I64, I64[::-1]], {}), "argmax:int64": ([X.astype(np.float64)], {"axis": -1}),
    "gather:fp32": ([X[0], np.array([[0, 5], [-1, 2]], np.int64)], {"axis": 0}),
    "where:int32": ([MASK, MASK.astype(np.int32), np.full((6, 6), 7, np.int32)], {}),
    "cast:int32": ([X * 1000], {}), "cast:uint8": ([I64], {}), "cast:bool": ([X], {}),
    "attention:fp32": ([X, X, X, MASK], {}), "matmul:fp64": ([X.astype(np.float64), X.swapaxes(-1, -2).astype(np.float64)], {}),
    "exp:fp64": ([X.astype(np.float64)], {}),
}
for target in ("int8", "int4", "fp8e4m3", "fp8e5m2"):
    scale = (np.abs(X).max(axis=(0, 1), keepdims=True) / {"int8": 127, "int4": 7, "fp8e4m3": 448, "fp8e5m2": 57344}[target]).astype(np.float32)
    CASES[f"quantize:{target}"] = ([X, scale], {})


def cases():
    for key, (inputs, args) in CASES.items():
        name = key.split(":")[0]
        dtypes = [Dtype(key.split(":")[1])] if ":" in key else sorted(REGISTRY[name].dtypes, key=list(Dtype).index)
        for dtype in dtypes:
            yield pytest.param(name, inputs, args, dtype, id=f"{key.split(':')[0]}-{dtype.value}")
    for key, (inputs, args) in TYPED.items():
        name, dtype = key.split(":")
        yield pytest.param(name, inputs, args, Dtype(dtype), id=f"{name}-{dtype}-typed-inputs")


@pytest.fixture(scope="module")
def pair():
    cpu, gpu = create(Vendor.cpu, "cpu"), create(GPU, "gpu", 0)
    yield cpu, gpu
    assert cpu.live_activations() == 0 and gpu.live_activations() == 0


def run_on(ex, name, inputs, args, dtype):
    names = [f"i{k}" for k in range(len(inputs))]
    plan = encode_plan(ex.vendor, names, [{"id": "y", "op": name, "args": args, "dtype": dtype.value, "inputs": names}], ["y"])
    handles = [ex.import_activation(PortableActivation.from_array(np.asarray(x), dtype_of(np.asarray(x))))
               for x in inputs]
    (y,) = ex.execute(plan, handles)
    out = ex.export_activation(y)
    for h in handles + [y]:
        ex.release_activation(h)
    return out


@pytest.mark.parametrize("name,inputs,args,dtype", list(cases()))
def test_gpu_matches_cpu(pair, name, inputs, args, dtype):
    cpu, gpu = pair
    want, got = run_on(cpu, name, inputs, args, dtype), run_on(gpu, name, inputs, args, dtype)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    if not dtype.is_float or name in ("transpose", "reshape", "cast", "concat", "split", "slice", "zeros", "ones",
                                      "arange", "random.normal", "random.uniform", "relu", "max", "argmax"):
        assert bytes(got.bytes) == bytes(want.bytes)
        return
    rtol, atol = TOLERANCE[dtype]
    g, w = got.to_array().astype(np.float64), want.to_array().astype(np.float64)
    ok = (np.abs(g - w) <= rtol * np.abs(w) + atol) | (np.isnan(g) & np.isnan(w)) | (g == w)
    assert ok.all(), f"{(~ok).sum()} values differ: gpu {g[~ok][:4]}, cpu {w[~ok][:4]}"


def test_device_to_device_bridge_is_bit_exact_and_skips_the_host(pair):
    _, gpu = pair
    other = create(GPU, "gpu2", min(1, len(probe(GPU).devices) - 1))
    for dtype in Dtype:
        values = PortableActivation.from_array(np.clip(np.rint(X * 3), -8, 7).astype(dtype.numpy), dtype)
        h = gpu.import_activation(values)
        p = gpu.export_activation(h)
        h2 = other.import_activation(p)
        assert getattr(p, "_staged", None) is None, "a GPU-to-GPU bridge must not stage through the host"
        assert bytes(other.export_activation(h2).bytes) == bytes(values.bytes)
        gpu.release_activation(h)
        other.release_activation(h2)
    assert other.live_activations() == 0
