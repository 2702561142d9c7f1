"""One executor over several devices (issue 34): the CPU executor over two core sets (or NUMA nodes).

Every op that declares a split rule must give what the one-device
executor gives, for an even and an uneven split; pieces stay on their
devices between split ops; handles, release and zero live activations
hold; a device belongs to one executor; a tensor past one device's
``memory_limit`` fits two.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.engine.cli.main import main
from hetflow.executors.base import DeviceSet, Dtype, OutOfMemory, PortableActivation, Vendor
from hetflow.executors.cpu import CpuExecutor, cpu_devices
from hetflow.executors.ops import REGISTRY
from hetflow.executors.payload import encode_plan
from hetflow.executors.split import Pieces, SplitCpuExecutor, cut, layout

try:
    _CORES = len(os.sched_getaffinity(0))
except (AttributeError, OSError):
    _CORES = os.cpu_count() or 1

needs_two = pytest.mark.skipif(_CORES < 2, reason=f"two CPU devices need two cores; this process may run on {_CORES}")

SPLITS = {"even": DeviceSet((0, 1)), "uneven": DeviceSet((0, 1), (3, 1))}

_rng = np.random.default_rng(34)


def _f(*shape, low=-2.0, high=2.0):
    return _rng.uniform(low, high, shape).astype(np.float32)


def _elementwise_cases():
    """Each elementwise op on a [7, 5] tensor; binary ones also against a broadcast row."""
    out = []
    for name in ("abs", "neg", "relu", "gelu", "silu", "exp", "tanh", "sigmoid", "erf", "cast", "clip"):
        out.append((name, [_f(7, 5)], {}, "fp32"))
    out.append(("log", [_f(7, 5, low=0.5)], {}, "fp32"))
    out.append(("sqrt", [_f(7, 5, low=0.5)], {}, "fp32"))
    out.append(("cast", [_f(7, 5) * 100], {}, "int32"))
    for name in ("add", "sub", "mul", "div", "maximum", "minimum", "mod"):
        out.append((name, [_f(7, 5), _f(7, 5, low=0.5)], {}, "fp32"))
        out.append((name, [_f(7, 5), _f(5, low=0.5)], {}, "fp32"))
    out.append(("pow", [_f(7, 5, low=0.5), _f(5)], {}, "fp32"))
    out.append(("add", [_f(7, 5)], {"value": 2.5}, "fp32"))
    for name in ("eq", "ge", "gt", "le", "lt"):
        a = np.round(_f(7, 5))
        out.append((name, [a, np.round(_f(7, 5))], {}, "bool"))
    out.append(("where", [_f(7, 5) > 0, _f(7, 5), _f(5)], {}, "fp32"))
    out.append(("add", [_rng.integers(-9, 9, (7, 5)).astype(np.int32), _rng.integers(-9, 9, (5,)).astype(np.int32)],
                {}, "int32"))
    return out


def _cases():
    ids = _rng.integers(-10, 10, (7,)).astype(np.int64)
    heads = [_f(2, 4, 6, 8) for _ in range(3)]
    return _elementwise_cases() + [
        ("matmul", [_f(7, 5), _f(5, 3)], {}, "fp32"),
        ("matmul", [_f(2, 7, 5), _f(5, 3)], {}, "fp32"),
        ("matmul", [_f(5), _f(5, 6)], {}, "fp32"),
        ("matmul", [_rng.integers(-5, 5, (7, 5)).astype(np.int32), _rng.integers(-5, 5, (5, 3)).astype(np.int32)], {},
         "int32"),
        ("attention", heads, {}, "fp32"),
        ("attention", heads, {"causal": True}, "fp32"),
        ("attention", heads + [_f(2, 4, 6, 6) > -1.5], {}, "fp32"),
        ("attention", [_f(3, 6, 8) for _ in range(3)], {}, "fp32"),
        ("rope", [_f(3, 6, 8)], {}, "fp32"),
        ("gather", [_f(10, 4), ids], {}, "fp32"),
        ("gather", [_f(4, 10), _rng.integers(0, 10, (3, 4)).astype(np.int64)], {"axis": 1}, "fp32"),
        ("softmax", [_f(7, 16)], {}, "fp32"),
        ("softmax", [_f(7, 6, 5)], {"axis": 1}, "fp32"),
        ("layernorm", [_f(7, 16), _f(16), _f(16)], {}, "fp32"),
        ("rmsnorm", [_f(7, 16), _f(16)], {}, "fp32"),
        ("sum", [_f(7, 5)], {"axis": 1}, "fp32"),
        ("sum", [_f(7, 5)], {"axis": 0}, "fp32"),
        ("sum", [_f(7, 5)], {}, "fp32"),
        ("mean", [_f(7, 5)], {}, "fp32"),
        ("mean", [_f(7, 5, 3)], {"axes": [0, 2], "keepdims": True}, "fp32"),
        ("max", [_f(7, 5)], {}, "fp32"),
        ("min", [_f(7, 5)], {"axis": 0}, "fp32"),
        ("max", [_rng.integers(-9, 9, (7, 5)).astype(np.int32)], {"axis": 1}, "int32"),
        ("argmax", [_f(7, 5)], {"axis": 1}, "int64"),
        ("argmin", [_f(7, 5)], {"axis": -1}, "int64"),
        ("zeros", [], {"shape": [7, 3]}, "fp32"),
        ("ones", [], {"shape": [7, 3]}, "int32"),
        ("full", [], {"shape": [7, 3], "value": 1.5}, "fp32"),
    ]


CASES = _cases()


def _run(ex, op, arrays, args, dtype):
    handles = [ex.import_activation(PortableActivation.from_array(a, Dtype(_dtype_name(a)))) for a in arrays]
    names = [f"x{i}" for i in range(len(arrays))]
    plan = encode_plan(ex.vendor, names, [{"id": "y", "op": op, "args": args, "dtype": dtype, "inputs": names}], ["y"])
    [out] = ex.execute(plan, handles)
    value = ex.export_activation(out).to_array()
    for h in handles + [out]:
        ex.release_activation(h)
    assert ex.live_activations() == 0 and ex.memory_used() == 0
    return value


def _dtype_name(a):
    return {np.float32: "fp32", np.int64: "int64", np.int32: "int32", np.bool_: "bool"}[a.dtype.type]


def test_every_op_with_a_split_rule_has_a_case_here():
    # a rule added to the registry without a case here would go untested
    ruled = {name for name, op in REGISTRY.items() if op.split is not None and op.source == "built-in"}
    assert ruled - {c[0] for c in CASES} == set()


@needs_two
@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_split_op_gives_the_unsplit_result(case, split):
    op, arrays, args, dtype = case
    # the case must take the split path, or it would compare the one-device path with itself
    assert layout(op, [a.shape for a in arrays], args, Dtype(dtype)) is not None or dtype == "int32" and op == "max"
    whole = _run(CpuExecutor("one"), op, arrays, args, dtype)
    ex = SplitCpuExecutor("two", SPLITS[split])
    pieces = _run(ex, op, arrays, args, dtype)
    assert pieces.shape == whole.shape and pieces.dtype == whole.dtype
    if REGISTRY[op].moves or whole.dtype.kind in "biu" or op in ("zeros", "ones", "full", "max", "min", "abs", "neg",
                                                                     "relu", "maximum", "minimum", "where", "clip"):
        np.testing.assert_array_equal(pieces, whole)  # data movement and integers: exact
    else:
        np.testing.assert_allclose(pieces, whole, rtol=1e-5, atol=1e-6)
    assert ex.live_activations() == 0 and ex.device_memory_used() == [0, 0]


def test_cut_divides_in_proportion_and_covers_the_extent():
    for extent in range(0, 40):
        for shares in ((0.5, 0.5), (0.75, 0.25), (0.2, 0.3, 0.5)):
            bounds = cut(extent, shares)
            assert bounds[0] == 0 and bounds[-1] == extent and list(bounds) == sorted(bounds)
            assert all(abs((hi - lo) - s * extent) <= 1 for lo, hi, s in zip(bounds, bounds[1:], shares))


@needs_two
def test_consecutive_split_ops_keep_their_pieces_and_gather_only_where_the_layout_changes():
    ex = SplitCpuExecutor("two", DeviceSet((0, 1), (3, 1)))
    x = ex.import_activation(PortableActivation.from_array(_f(12, 16), Dtype.fp32))
    nodes = [{"id": "a", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["x"]},
             {"id": "b", "op": "softmax", "args": {}, "dtype": "fp32", "inputs": ["a"]},
             {"id": "c", "op": "layernorm", "args": {}, "dtype": "fp32", "inputs": ["b"]}]
    [c] = ex.execute(encode_plan(Vendor.cpu, ["x"], nodes, ["c"]), [x])
    assert ex.moves == 0  # by rows all along: every piece stays on its device
    assert isinstance(ex._values[c], Pieces) and [a.shape[0] for a in ex._values[c].arrays] == [9, 3]
    nodes.append({"id": "t", "op": "transpose", "args": {"axes": [1, 0]}, "dtype": "fp32", "inputs": ["c"]})
    nodes.append({"id": "u", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["t"]})
    [u] = ex.execute(encode_plan(Vendor.cpu, ["x"], nodes, ["u"]), [x])
    # transpose has no rule: c is gathered onto the first device (1 move), and relu re-splits its result (1 move)
    assert ex.moves == 2
    one = CpuExecutor("one")
    y = one.import_activation(PortableActivation.from_array(ex.export_activation(x).to_array(), Dtype.fp32))
    [want] = one.execute(encode_plan(Vendor.cpu, ["x"], nodes, ["u"]), [y])
    np.testing.assert_allclose(ex.export_activation(u).to_array(), one.export_activation(want).to_array(), rtol=1e-5)
    for h in (x, c, u):
        ex.release_activation(h)
        ex.release_activation(h)  # releasing twice is not an error
    assert ex.live_activations() == 0 and ex.memory_used() == 0


@needs_two
def test_a_handle_is_one_logical_activation_that_other_executors_do_not_know():
    ex = SplitCpuExecutor("two", DeviceSet((0, 1)))
    data = _f(6, 3)
    h = ex.import_activation(PortableActivation.from_array(data, Dtype.fp32))
    assert isinstance(ex._values[h], Pieces)
    portable = ex.export_activation(h)
    assert portable.shape.dims == (6, 3) and bytes(portable.bytes) == data.tobytes()
    assert len(ex.devices) == 2 and ex.devices[0].bus_address != ex.devices[1].bus_address
    from hetflow.executors.base import UnknownHandle

    with pytest.raises(UnknownHandle):
        CpuExecutor("other").export_activation(h)
    ex.release_activation(h)
    assert ex.live_activations() == 0


def test_numa_nodes_are_the_devices_where_the_machine_has_several(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("two NUMA nodes need two cores")
    half = len(allowed) // 2
    for i, cpus in enumerate((allowed[:half], allowed[half:])):
        node = tmp_path / f"node{i}"
        node.mkdir()
        (node / "cpulist").write_text(",".join(map(str, cpus)) + "\n")
        (node / "meminfo").write_text(f"Node {i} MemTotal:       1024 kB\n")
    devices = cpu_devices(None, node_root=str(tmp_path))
    assert [d.node for d in devices] == [0, 1] and [d.memory_bytes for d in devices] == [1 << 20, 1 << 20]
    assert devices[0].bound().bus_address == "numa0"
    assert cpu_devices(None, node_root=str(tmp_path / "none"))[0].cpus == tuple(allowed)


TWO_CLAIM = """\
version: 1
name: claims
executors:
  a: {vendor: cpu, devices: [0, 1]}
  b: {vendor: [cuda, cpu], devices: [1]}
stages:
  x: {op: ones, args: {shape: [4, 4]}, executor: a}
outputs: {x: x}
"""


def test_two_executors_claiming_one_device_are_refused_with_both_lines(manifest_file, capsys):
    path = manifest_file(TWO_CLAIM)
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"{path}:5:38: error: executor 'b' claims cpu device 1, and executor 'a' claims device 1 "
                           f"at {path}:4:33; a device belongs to one executor: give each executor its own devices")
    assert "Traceback" not in err


def test_executors_that_name_no_devices_still_share_the_host(manifest_file):
    path = manifest_file(TWO_CLAIM.replace("devices: [1]", "device: 0").replace("a: {vendor: cpu, devices: [0, 1]}",
                                                                                  "a: {vendor: cpu}"))
    hetflow.validate(path)


def test_split_needs_one_share_a_device(manifest_file, capsys):
    path = manifest_file(TWO_CLAIM.replace("devices: [0, 1]}", "devices: [0, 1], split: [3, 1, 1]}"))
    assert main(["validate", path]) == 2
    assert f"{path}:4:44: error: executor 'a' splits its work into 3 shares for 2 devices" in capsys.readouterr().err


SPLIT_RUN = """\
version: 1
name: split-run
executors:
  accel: {vendor: cpu, devices: [0, 1], split: [3, 1]}
stages:
  x: {op: random.normal, args: {shape: [64, 32], seed: 3}}
  w: {op: random.normal, args: {shape: [32, 16], seed: 4}}
  h: {op: matmul, inputs: [x, w]}
  y: {op: gelu, inputs: [h]}
  n: {op: layernorm, inputs: [y]}
  s: {op: sum, inputs: [n], args: {axis: 0}}
outputs: {n: n, s: s}
"""


@needs_two
def test_a_manifest_runs_split_and_gives_the_one_device_result(manifest_file, tmp_path, capsys):
    split = hetflow.run(manifest_file(SPLIT_RUN, "split.yaml"), runs_dir=tmp_path / "runs", cache=False)
    one = hetflow.run(manifest_file(SPLIT_RUN.replace("devices: [0, 1], split: [3, 1]", "device: 0"), "one.yaml"),
                      runs_dir=tmp_path / "runs", cache=False)
    assert split.status == one.status == "succeeded"
    for name in ("n", "s"):
        np.testing.assert_allclose(split.outputs[name], one.outputs[name], rtol=1e-5, atol=1e-5)
    assert split.record["live_activations_after"] == {"accel": 0}
    assert main(["plan", manifest_file(SPLIT_RUN, "split.yaml")]) == 0
    text = capsys.readouterr().out
    assert "  accel  cpu    devices 0:3/4, 1:1/4  " in text
    assert "  h  matmul         p0   on accel[0:3/4, 1:1/4]  [64, 16] fp32" in text
    assert "  x  random.normal  p0   on accel[0]             [64, 32] fp32" in text  # a draw runs whole


MEMORY = """\
version: 1
name: memory
executors:
  accel: {vendor: cpu, devices: [0, 1], memory_limit: 1536KiB}
stages:
  x: {op: ones, args: {shape: [256, 1024]}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


@needs_two
def test_a_tensor_past_one_devices_memory_limit_fits_two_and_fails_on_one(manifest_file, tmp_path):
    # y is 1 MiB; each of two devices may hold 768 KiB (half the executor's 1536 KiB): its half fits
    split = hetflow.run(manifest_file(MEMORY, "two.yaml"), runs_dir=tmp_path / "runs", cache=False)
    assert split.status == "succeeded", split.error
    assert split.outputs["y"].shape == (256, 1024) and float(split.outputs["y"].sum()) == 256 * 1024
    alone = hetflow.run(manifest_file(MEMORY.replace("devices: [0, 1], memory_limit: 1536KiB",
                                                     "devices: [0], memory_limit: 768KiB"), "one.yaml"),
                        runs_dir=tmp_path / "runs", cache=False)
    assert alone.status == "failed"
    assert "executor allocation failed" in alone.error and "on device 0" in alone.error
    assert "memory_limit of 786432 bytes" in alone.error
    # succeeded or failed, a run leaves zero live activations on the split executor
    assert split.record["live_activations_after"] == alone.record["live_activations_after"] == {"accel": 0}


@needs_two
def test_out_of_memory_names_the_device_and_leaves_nothing_counted():
    ex = SplitCpuExecutor("two", DeviceSet((0, 1)), memory_limit=2 * 4 * 64)
    with pytest.raises(OutOfMemory, match="on device 0"):
        ex.import_activation(PortableActivation.from_array(np.ones((2, 128), np.float32), Dtype.fp32))
    assert ex.device_memory_used() == [0, 0] and ex.live_activations() == 0
    h = ex.import_activation(PortableActivation.from_array(np.ones((2, 64), np.float32), Dtype.fp32))
    assert ex.device_memory_used() == [256, 256]
    ex.release_activation(h)


def test_the_schema_refuses_devices_that_are_not_indexes_or_all(manifest_file, capsys):
    path = manifest_file(TWO_CLAIM.replace("devices: [0, 1]}", "devices: some}"))
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:4:") and "Traceback" not in err
    schema = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "pipeline.base.json").read_text())
    assert {"devices", "split", "device"} <= set(schema["$defs"]["executor"]["properties"])


@needs_two
def test_the_split_modules_examples_run():
    import doctest

    import hetflow.executors.split as split
    import hetflow.executors.split_layout as split_layout

    # the modules' Examples are their worked examples of pieces, moves, memory per device and the record's list
    result = doctest.testmod(split, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0
    result = doctest.testmod(split_layout, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10 and result.failed == 0


def test_a_split_executor_is_priced_by_its_slowest_piece():
    from hetflow.engine.plan.costs import CostModel, split_capacity, split_exec_s, split_move_s

    m, shapes, out = CostModel(), [(4096, 4096), (4096, 4096)], (4096, 4096)
    for vendor in (Vendor.cuda, Vendor.cpu):
        one = m.exec_s("matmul", shapes, out, Dtype.fp32, vendor)
        even = split_exec_s(m, "matmul", shapes, out, Dtype.fp32, vendor, DeviceSet((0, 1)))
        uneven = split_exec_s(m, "matmul", shapes, out, Dtype.fp32, vendor, DeviceSet((0, 1), (3, 1)))
        # GPUs bring their own throughput (and copy the weights to the second GPU); CPU devices share one host's
        weights = split_move_s(vendor, 4096 * 4096 * 4)
        assert even == (pytest.approx(one / 2 + weights, rel=1e-2) if vendor is Vendor.cuda else pytest.approx(one))
        assert uneven > even
    # an op without a rule runs on the first device: priced as the unsplit executor
    t = m.exec_s("transpose", [(64, 64)], (64, 64), Dtype.fp32, Vendor.cuda, args={"axes": [1, 0]})
    assert split_exec_s(m, "transpose", [(64, 64)], (64, 64), Dtype.fp32, Vendor.cuda, DeviceSet((0, 1)),
                        {"axes": [1, 0]}) == t
    assert split_capacity([1 << 30, 1 << 30]) == 2 << 30 and split_capacity([1 << 30, None]) is None



def test_the_plan_prices_a_move_between_devices_where_the_next_rule_needs_another_layout(tmp_path):
    # relu leaves its rows on their devices, where matmul wants them; transpose (no rule) leaves its result whole
    # on the first device, so the matmul after it first sends the second device its rows
    def estimate(first: str) -> float:
        path = tmp_path / f"{first}.yaml"
        path.write_text("version: 1\nname: moves\nexecutors:\n  accel: {vendor: cpu, devices: [0, 1]}\n"
                        "stages:\n  x: {op: random.normal, args: {shape: [2048, 2048], seed: 1}}\n"
                        + (f"  a: {{op: {first}, inputs: [x], args: {{axes: [1, 0]}}}}\n" if first == "transpose"
                           else f"  a: {{op: {first}, inputs: [x]}}\n")
                        + "  y: {op: matmul, inputs: [a, x]}\noutputs: {y: y}\n")
        plan = hetflow.plan(path, runs_dir=tmp_path / "runs").to_json()
        return plan["nodes"]["y"]["estimated_s"]

    from hetflow.engine.plan.costs import split_move_s

    moved = estimate("transpose") - estimate("relu")
    assert moved == pytest.approx(split_move_s(Vendor.cpu, 2048 * 2048 * 4 // 2), rel=1e-6)


@needs_two
def test_the_split_executor_passes_the_executor_conformance_suite():
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    env = {**os.environ, "HETFLOW_EXECUTOR": "split_factory:make", "PYTHONPATH": str(here)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "external",
                           str(here / "test_executor_contract.py")], env=env, capture_output=True, text=True,
                          cwd=here.parent, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


@needs_two
def test_each_device_may_declare_its_own_memory_limit(manifest_file, tmp_path, capsys):
    # 1 MiB split evenly: 512 KiB a device; the second device may hold only 256 KiB
    uneven = MEMORY.replace("memory_limit: 1536KiB", "memory_limit: [1MiB, 256KiB]")
    failed = hetflow.run(manifest_file(uneven, "uneven.yaml"), runs_dir=tmp_path / "runs", cache=False)
    assert failed.status == "failed" and "on device 1" in failed.error and "memory_limit of 262144 bytes" in failed.error
    fits = hetflow.run(manifest_file(uneven.replace("256KiB", "512KiB"), "fits.yaml"), runs_dir=tmp_path / "runs",
                       cache=False)
    assert fits.status == "succeeded", fits.error
    path = manifest_file(MEMORY.replace("memory_limit: 1536KiB", "memory_limit: [1MiB]"), "short.yaml")
    assert main(["validate", path]) == 2
    assert f"{path}:4:55: error: executor 'accel' gives 1 memory limit for 2 devices; a list gives one limit per device" in capsys.readouterr().err


def test_split_without_devices_is_refused(manifest_file, capsys):
    path = manifest_file(TWO_CLAIM.replace("devices: [0, 1]}", "split: [3, 1]}"))
    assert main(["validate", path]) == 2
    assert capsys.readouterr().err.startswith(
        f"{path}:4:27: error: executor 'a' gives split: without devices:; split: shares the work among the devices")
