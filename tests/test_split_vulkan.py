"""One Vulkan executor over several adapters (issue 34): ``executors/vulkan_split.py``.

Every op with a split rule that the Vulkan executor offers must give what the one-adapter executor gives.
Lavapipe gives this machine one adapter, so the split runs here over that adapter alone and over that
adapter counted twice (two pieces, each computed by its own executor on the one wgpu device, and every
move between them read back and written as between two adapters); the test over two distinct adapters
skips, with the reason, where there are fewer.
"""

import os
import sys

import numpy as np
import pytest

from hetflow.executors import probe
from hetflow.executors.base import DeviceSet, Dtype, OutOfMemory, PortableActivation, TensorShape, UnknownHandle, Vendor
from hetflow.executors.payload import encode_plan
from hetflow.executors.split import Pieces, bound_devices

sys.path.insert(0, os.path.dirname(__file__))
from test_split_executor import CASES, _dtype_name, _run  # noqa: E402  - the CPU split's cases, one source

OFFER = probe(Vendor.vulkan)
pytestmark = pytest.mark.skipif(not OFFER.available, reason=f"vulkan executor unavailable here: {OFFER.reason}")
ADAPTERS = len(OFFER.devices) if OFFER.available else 0


def _offered(case):
    from hetflow.executors.ops import REGISTRY
    from hetflow.executors.vulkan import SUPPORTED_DTYPES, offered_ops, refusal

    op, arrays, args, dtype = case
    dtypes = [Dtype(_dtype_name(a)) for a in arrays]
    return (op in offered_ops() and Dtype(dtype) in SUPPORTED_DTYPES and all(d in SUPPORTED_DTYPES for d in dtypes)
            and refusal(REGISTRY[op], dtypes, Dtype(dtype)) is None)


VK_CASES = [c for c in CASES if _offered(c)] if OFFER.available else []
SETS = {"one adapter": DeviceSet((0,)), "one adapter twice, uneven": DeviceSet((0, 0), (3, 1))}


def test_most_split_rules_run_on_vulkan():
    # the cases the Vulkan executor refuses (int64 indices, fp64) are few: the split is tested, not skipped
    assert len(VK_CASES) >= len(CASES) * 2 // 3, [c[0] for c in CASES if c not in VK_CASES]


@pytest.mark.parametrize("devices", sorted(SETS))
@pytest.mark.parametrize("case", VK_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(VK_CASES)])
def test_a_split_op_on_adapters_gives_the_one_adapter_result(case, devices):
    from hetflow.executors.vulkan import VulkanExecutor
    from hetflow.executors.vulkan_split import SplitVulkanExecutor

    op, arrays, args, dtype = case
    whole = _run(VulkanExecutor("one", 0), op, arrays, args, dtype)
    got = _run(SplitVulkanExecutor("split", SETS[devices]), op, arrays, args, dtype)
    assert got.shape == whole.shape and got.dtype == whole.dtype
    if np.issubdtype(whole.dtype, np.floating):
        np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, whole)


def test_pieces_stay_on_their_adapters_and_moves_are_staged():
    from hetflow.executors.vulkan_split import SplitVulkanExecutor

    ex = SplitVulkanExecutor("split", DeviceSet((0, 0), (3, 1)), memory_limit=4096)
    data = np.random.default_rng(2).standard_normal((12, 16)).astype(np.float32)
    x = ex.import_activation(PortableActivation.from_array(data, Dtype.fp32))
    assert isinstance(ex._values[x], Pieces) and ex.device_memory_used() == [9 * 64, 3 * 64]
    nodes = [{"id": "a", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["x"]},
             {"id": "b", "op": "softmax", "args": {}, "dtype": "fp32", "inputs": ["a"]}]
    [b] = ex.execute(encode_plan(Vendor.vulkan, ["x"], nodes, ["b"]), [x])
    assert ex.moves == 0 and ex.move_bytes == {"peer": 0, "staged": 0}  # by rows all along
    nodes.append({"id": "t", "op": "transpose", "args": {"axes": [1, 0]}, "dtype": "fp32", "inputs": ["b"]})
    nodes.append({"id": "u", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["t"]})
    [u] = ex.execute(encode_plan(Vendor.vulkan, ["x"], nodes, ["u"]), [x])
    # transpose has no rule: b's second piece comes to the first adapter, and relu sends rows back
    assert ex.moves == 2 and ex.move_bytes["peer"] == 0 and ex.move_bytes["staged"] == 3 * 64 + 4 * 48
    a = np.maximum(data, 0)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(ex.export_activation(u).to_array(), (e / e.sum(1, keepdims=True)).T, rtol=1e-5,
                               atol=1e-6)
    # 4096 bytes, 2048 an adapter: the first adapter's 9 rows of the three activations do not fit
    with pytest.raises(OutOfMemory, match="on device 0"):
        ex.alloc_activation(TensorShape((12, 16)), Dtype.fp32)
    for h in (x, b, u):
        ex.release_activation(h)
        ex.release_activation(h)
    assert ex.live_activations() == 0 and ex.device_memory_used() == [0, 0]
    with pytest.raises(UnknownHandle):
        ex.export_activation(u)
    listed = bound_devices(ex)
    assert [(d["index"], d["share"], d["memory_limit"]) for d in listed] == [(0, 0.75, 2048), (0, 0.25, 2048)]
    assert listed[0]["bus_address"] == OFFER.devices[0].bus_address


@pytest.mark.skipif(ADAPTERS < 2, reason=f"two Vulkan adapters needed; this machine has {ADAPTERS}")
def test_a_split_over_two_adapters_gives_the_one_adapter_result():
    from hetflow.executors.vulkan import VulkanExecutor
    from hetflow.executors.vulkan_split import SplitVulkanExecutor

    for op, arrays, args, dtype in VK_CASES:
        whole = _run(VulkanExecutor("one", 0), op, arrays, args, dtype)
        got = _run(SplitVulkanExecutor("two", DeviceSet((0, 1), (3, 1))), op, arrays, args, dtype)
        np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-5)


def make_vulkan(name, memory_limit=None):
    """The split Vulkan executor as a factory for the conformance suite (``test_split_vulkan:make_vulkan``): the one
    adapter counted twice where there is one, two adapters where there are two."""
    from hetflow.executors.vulkan_split import SplitVulkanExecutor

    return SplitVulkanExecutor(name, DeviceSet((0, 1) if ADAPTERS > 1 else (0, 0)), memory_limit=memory_limit)


def test_the_split_vulkan_executor_passes_the_executor_conformance_suite():
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve().parent
    env = {**os.environ, "HETFLOW_EXECUTOR": "test_split_vulkan:make_vulkan", "PYTHONPATH": str(here)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "external",
                           str(here / "test_executor_contract.py")], env=env, capture_output=True, text=True,
                          cwd=here.parent, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_a_manifest_with_devices_on_vulkan_runs_split_and_records_its_adapters(tmp_path):
    import hetflow

    def manifest(gpu: str) -> str:
        path = tmp_path / f"m-{len(gpu)}.yaml"
        path.write_text("version: 1\nname: vk-split\nexecutors:\n  host: {vendor: cpu}\n"
                        f"  gpu: {{vendor: vulkan, {gpu}}}\n"
                        "stages:\n  x: {op: random.normal, args: {shape: [64, 32], seed: 3}, executor: host}\n"
                        "  w: {op: random.normal, args: {shape: [32, 16], seed: 4}, executor: host}\n"
                        "  y: {op: matmul, inputs: [x, w], executor: gpu}\n  z: {op: relu, inputs: [y], executor: gpu}\n"
                        "outputs: {z: z}\n")
        return str(path)

    split = hetflow.run(manifest("devices: [0]"), runs_dir=tmp_path / "runs", cache=False)
    whole = hetflow.run(manifest("device: 0"), runs_dir=tmp_path / "runs", cache=False)
    assert split.status == whole.status == "succeeded"
    bound = split.record["executors"]["gpu"]
    assert bound["vendor"] == "vulkan" and [d["index"] for d in bound["devices"]] == [0]
    assert bound["devices"][0]["share"] == 1
    np.testing.assert_allclose(split.outputs["z"], whole.outputs["z"], rtol=1e-5, atol=1e-6)
