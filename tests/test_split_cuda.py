"""One CUDA/ROCm executor over two GPUs (issue 34): the split path of ``executors/cuda.py``.

The layout is the CPU split executor's (:class:`hetflow.executors.split_layout.SplitDevices`), so its pure parts
(which input is taken, cut anew or read whole; which move is a peer copy and which is staged; how each is
priced) are tested here on every machine. What needs two GPUs is marked ``gpu`` and skipped, with the
reason, elsewhere; ``bench/gpu_check.sh`` runs it wherever two are present: every op with a split rule
gives the one-GPU result for an even and an uneven split, pieces stay on their GPUs, moves are peer copies
where the GPUs allow them, a device's ``memory_limit`` holds, and the executor passes the conformance suite.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine.plan.costs import CostModel, split_exec_s, split_move_link, split_move_s
from hetflow.executors import probe
from hetflow.executors.base import DeviceSet, Dtype, OutOfMemory, PortableActivation, UnknownHandle, Vendor
from hetflow.executors.payload import encode_plan
from hetflow.executors.split import RESPLIT, TAKE, WHOLE, Pieces, SplitCpuExecutor, SplitDevices, arrange, cut, layout, \
    move_kind

sys.path.insert(0, os.path.dirname(__file__))
from test_split_executor import CASES, SPLITS, _run  # noqa: E402  - the CPU split's cases, one source

GPU = next((v for v in (Vendor.cuda, Vendor.rocm) if probe(v).available), None)
GPUS = len(probe(GPU).devices) if GPU is not None else 0
_WHY = (f"two GPUs needed; {GPU.value} has {GPUS} here" if GPU is not None else
        f"no GPU executor here: cuda: {probe(Vendor.cuda).reason}; rocm: {probe(Vendor.rocm).reason}")
two_gpus = [pytest.mark.gpu, pytest.mark.skipif(GPUS < 2, reason=_WHY)]


def make_cuda(name, memory_limit=None):
    """The two-GPU executor as a factory for the conformance suite (``HETFLOW_EXECUTOR=test_split_cuda:make_cuda``)."""
    from hetflow.executors.cuda import SplitCudaExecutor

    return SplitCudaExecutor(name, DeviceSet((0, 1)), memory_limit=memory_limit)


# -- the pure parts, on every machine --------------------------------------------------------------------------


def test_the_cuda_path_is_importable_without_cupy_and_shares_the_cpu_layout():
    from hetflow.executors.cuda import SplitCudaExecutor

    # one algorithm: both executors run SplitDevices' node loop, and differ only in how a device computes and moves
    assert issubclass(SplitCudaExecutor, SplitDevices) and issubclass(SplitCpuExecutor, SplitDevices)
    for method in ("_run", "_piece", "_gather", "_reserve_all", "_per_device"):
        assert getattr(SplitCudaExecutor, method) is getattr(SplitCpuExecutor, method) is getattr(SplitDevices, method)
    for hook in ("_submit", "_run_whole", "_compute", "_cut_to", "_share_to", "_assemble", "_combine_parts"):
        assert getattr(SplitCudaExecutor, hook) is not getattr(SplitDevices, hook), hook


def test_arrange_takes_pieces_where_they_lie_and_moves_only_on_a_layout_change():
    bounds = cut(12, (0.75, 0.25))
    assert bounds == (0, 9, 12)
    rows = (0, bounds)
    # relu after relu: the pieces stay; matmul's weights are read whole
    assert arrange((0,), bounds, [rows]) == (TAKE,)
    assert arrange((0, None), bounds, [rows, None]) == (TAKE, WHOLE)
    # the same rows at other bounds (an even split's pieces), or another axis: cut anew
    assert arrange((0,), bounds, [(0, (0, 6, 12))]) == (RESPLIT,)
    assert arrange((1,), bounds, [rows]) == (RESPLIT,)
    assert arrange((0,), bounds, [None]) == (RESPLIT,)
    # the rule the executors read: matmul by rows of its left operand at these shapes
    rule, extent = layout("matmul", [(12, 4), (4, 3)], {}, Dtype.fp32)
    assert extent == 12 and arrange(rule.inputs, cut(extent, (0.75, 0.25)), [rows, None]) == (TAKE, WHOLE)


def test_a_move_is_a_peer_copy_where_the_devices_allow_it_and_staged_otherwise():
    # device 1 may read device 0's memory, not the reverse (as on a machine where one direction is refused)
    allowed = {(1, 0)}

    def peers(dst, src):
        return (dst, src) in allowed

    assert move_kind(0, 0, peers) is None
    assert move_kind(0, 1, peers) == "peer"
    assert move_kind(1, 0, peers) == "staged"
    # priced each its own way: a peer copy is faster than two PCIe crossings through host memory
    gib = 1 << 30
    assert split_move_s(Vendor.cuda, gib, "peer") < split_move_s(Vendor.cuda, gib, "staged")
    assert split_move_link(Vendor.cuda, "peer").description.startswith("cuda peer copy")
    assert split_move_link(Vendor.rocm, "staged").description.startswith("rocm through host memory")
    # Vulkan has no peer copies; a CPU executor's devices share host memory
    assert split_move_link(Vendor.vulkan, "peer") == split_move_link(Vendor.vulkan, "staged")
    assert split_move_link(Vendor.cpu, "staged").description.startswith("host memcpy")


def test_a_gpu_split_pays_for_the_copies_of_what_every_device_reads_whole():
    m, shapes, out = CostModel(), [(4096, 4096), (4096, 4096)], (4096, 4096)
    one = m.exec_s("matmul", shapes, out, Dtype.fp32, Vendor.cuda)
    two = split_exec_s(m, "matmul", shapes, out, Dtype.fp32, Vendor.cuda, DeviceSet((0, 1)))
    four = split_exec_s(m, "matmul", shapes, out, Dtype.fp32, Vendor.cuda, DeviceSet((0, 1, 2, 3)))
    weights = split_move_s(Vendor.cuda, 4096 * 4096 * 4)
    # the weights go from the first GPU to each other one; the pieces compute at once
    assert two - weights == pytest.approx(one / 2, rel=1e-2)
    assert four - 3 * weights == pytest.approx(one / 4, rel=2e-2)
    # elementwise ops read nothing whole: no copy is priced
    relu, launch = m.exec_s("relu", [(4096, 4096)], out, Dtype.fp32, Vendor.cuda), m.profiles[Vendor.cuda].launch_s
    assert split_exec_s(m, "relu", [(4096, 4096)], out, Dtype.fp32, Vendor.cuda, DeviceSet((0, 1))) == pytest.approx(
        launch + (relu - launch) / 2)
    # on the CPU the devices read the one host memory: nothing to copy
    cpu = m.exec_s("matmul", shapes, out, Dtype.fp32, Vendor.cpu)
    assert split_exec_s(m, "matmul", shapes, out, Dtype.fp32, Vendor.cpu, DeviceSet((0, 1))) == cpu


def test_the_split_pricing_examples_run():
    import doctest

    import hetflow.engine.plan.costs as costs

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(costs) if t.name.split(".")[-1].startswith("split_")]
    assert {t.name.split(".")[-1] for t in tests} >= {"split_exec_s", "split_move_link", "split_move_s"}
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


# -- on two GPUs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=_WHY)
def test_a_split_op_on_two_gpus_gives_the_one_gpu_result(case, split):
    from hetflow.executors.cuda import CudaExecutor, SplitCudaExecutor

    op, arrays, args, dtype = case
    whole = _run(CudaExecutor("one", 0), op, arrays, args, dtype)
    got = _run(SplitCudaExecutor("two", SPLITS[split]), op, arrays, args, dtype)
    assert got.shape == whole.shape and got.dtype == whole.dtype
    if np.issubdtype(whole.dtype, np.floating):
        np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, whole)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=_WHY)
def test_pieces_stay_on_their_gpus_and_move_by_peer_copy_where_allowed():
    import cupy

    from hetflow.executors.cuda import SplitCudaExecutor, peer_access

    ex = SplitCudaExecutor("two", DeviceSet((0, 1), (3, 1)))
    data = np.random.default_rng(1).standard_normal((12, 16)).astype(np.float32)
    x = ex.import_activation(PortableActivation.from_array(data, Dtype.fp32))
    value, _ = ex._values[x]
    assert isinstance(value, Pieces) and [a.device.id for a in value.arrays] == [0, 1]
    nodes = [{"id": "a", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["x"]},
             {"id": "b", "op": "softmax", "args": {}, "dtype": "fp32", "inputs": ["a"]}]
    [b] = ex.execute(encode_plan(ex.vendor, ["x"], nodes, ["b"]), [x])
    assert ex.moves == 0 and ex.move_bytes == {"peer": 0, "staged": 0}
    nodes.append({"id": "t", "op": "transpose", "args": {"axes": [1, 0]}, "dtype": "fp32", "inputs": ["b"]})
    nodes.append({"id": "u", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["t"]})
    [u] = ex.execute(encode_plan(ex.vendor, ["x"], nodes, ["u"]), [x])
    assert ex.moves == 2  # gathered for transpose, cut anew for relu: as on the CPU
    if peer_access(cupy, 0, 1) and peer_access(cupy, 1, 0):
        assert ex.move_bytes["peer"] > 0 and ex.move_bytes["staged"] == 0
    else:
        assert ex.move_bytes["staged"] > 0
    a = np.maximum(data, 0)
    e = np.exp(a - a.max(1, keepdims=True))
    want = (e / e.sum(1, keepdims=True)).T
    np.testing.assert_allclose(ex.export_activation(u).to_array(), want, rtol=1e-5, atol=1e-6)
    for h in (x, b, u):
        ex.release_activation(h)
    assert ex.live_activations() == 0 and ex.device_memory_used() == [0, 0]
    with pytest.raises(UnknownHandle):
        ex.export_activation(u)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=_WHY)
def test_a_tensor_past_one_gpus_limit_fits_two_and_an_export_feeds_another_gpu_executor():
    from hetflow.executors.cuda import CudaExecutor, SplitCudaExecutor

    data = np.ones((256, 1024), np.float32)  # 1 MiB
    ex = SplitCudaExecutor("two", DeviceSet((0, 1)), memory_limit=1536 << 10)
    h = ex.import_activation(PortableActivation.from_array(data, Dtype.fp32))
    assert ex.device_memory_used() == [512 << 10, 512 << 10]  # each GPU's half, under its 768 KiB
    other = CudaExecutor("other", 1)
    g = other.import_activation(ex.export_activation(h))  # device to device, the seed's fast path
    assert float(other.export_activation(g).to_array().sum()) == 256 * 1024
    ex.release_activation(h)
    other.release_activation(g)
    assert ex.live_activations() == other.live_activations() == 0
    one = SplitCudaExecutor("one", DeviceSet((0,)), memory_limit=768 << 10)
    with pytest.raises(OutOfMemory, match="on device 0"):
        one.import_activation(PortableActivation.from_array(data, Dtype.fp32))
    assert one.live_activations() == 0 and one.device_memory_used() == [0]


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=_WHY)
def test_the_two_gpu_executor_passes_the_executor_conformance_suite():
    here = Path(__file__).resolve().parent
    env = {**os.environ, "HETFLOW_EXECUTOR": "test_split_cuda:make_cuda", "PYTHONPATH": str(here)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "external",
                           str(here / "test_executor_contract.py")], env=env, capture_output=True, text=True,
                          cwd=here.parent, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
