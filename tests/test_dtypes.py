"""The thirteen dtypes end to end: device carriers, portable bytes, persisted outputs, planning without a GPU.

The CUDA executor's carrier codecs (:mod:`hetflow.executors.cuda`) are
written against an array namespace, so here they run on numpy and must
agree bit for bit with ml_dtypes, the reference for bf16 and fp8.
"""

import gc
import json
import pickle

import ml_dtypes
import numpy as np
import pytest

from hetflow.engine.cli import main
from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan, render_text
from hetflow.engine.store.records import load_output
from hetflow.engine.run.execute import execute
from hetflow.executors import probe
from hetflow.executors.base import Dtype, PortableActivation, TensorShape, Vendor
from hetflow.executors.cpu import CpuExecutor
from hetflow.executors.cuda import CARRIERS, narrow, pack_int4, unpack_int4, widen
from hetflow.executors.staging import StagingPool

CODED = [Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2]


def all_codes(dtype):
    return np.arange(1 << (8 * CARRIERS[dtype].itemsize), dtype=np.uint32).astype(CARRIERS[dtype])


def assert_same_bits(got, ref):
    ref_bits = ref.view(got.dtype)
    nan = np.isnan(ref.astype(np.float32))
    assert np.array_equal(np.isnan(ref.astype(np.float32)), nan)
    bad = (got != ref_bits) & ~nan
    assert not bad.any(), f"{bad.sum()} values differ, e.g. codes {got[bad][:4]} for {ref[bad][:4]}"


@pytest.mark.parametrize("dtype", CODED, ids=str)
def test_carrier_decode_matches_ml_dtypes_for_every_code(dtype):
    codes = all_codes(dtype)
    want = codes.view(dtype.numpy).astype(np.float32)
    got = widen(np, codes, dtype)
    assert got.dtype == np.float32
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", CODED, ids=str)
def test_carrier_encode_matches_ml_dtypes_bit_for_bit(dtype):
    rng = np.random.default_rng(7)
    random_bits = rng.integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = np.sort(np.unique(widen(np, all_codes(dtype), dtype)))
    values = values[np.isfinite(values)]
    mids = ((values[:-1].astype(np.float64) + values[1:]) / 2).astype(np.float32)  # ties: round to even
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, -1e-30], np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for x in (random_bits, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                  values, -values, specials):
            assert_same_bits(narrow(np, x, dtype), x.astype(dtype.numpy))


def test_carriers_of_the_other_dtypes_follow_the_op_rule():
    x = np.array([1.5, 2.5, -7.6, 300.0, -300.0, np.nan, np.inf], np.float32)
    assert narrow(np, x, Dtype.int8).tolist() == [2, 2, -8, 127, -128, 0, 127]
    assert narrow(np, x, Dtype.int4).tolist() == [2, 2, -8, 7, -8, 0, 7]
    assert narrow(np, x, Dtype.fp16).dtype == np.float16
    assert widen(np, np.array([-8, 7], np.int8), Dtype.int4).tolist() == [-8.0, 7.0]


@pytest.mark.parametrize("count", [0, 1, 2, 5, 1000])
def test_int4_device_packing_is_the_portable_layout(count):
    values = np.random.default_rng(count).integers(-8, 8, count).astype(np.int8)
    packed = pack_int4(np, values)
    assert packed.tobytes() == PortableActivation.from_array(values.astype(ml_dtypes.int4), Dtype.int4).bytes
    assert unpack_int4(np, packed, count).tolist() == values.tolist()


def test_int4_layout_is_two_per_byte_low_nibble_first():
    p = PortableActivation.from_array(np.array([[1, -1], [-8, 7]], ml_dtypes.int4), Dtype.int4)
    assert (p.nbytes, bytes(p.bytes)) == (2, bytes([0xF1, 0x78]))


def sample(dtype, shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    return x.astype(dtype.numpy) if dtype.is_float else np.clip(np.rint(x), -8, 7).astype(np.int8).astype(dtype.numpy)


@pytest.mark.parametrize("dtype", list(Dtype), ids=str)
def test_large_and_non_contiguous_round_trips_are_bit_exact(dtype):
    a, b = CpuExecutor("a"), CpuExecutor("b")
    values = sample(dtype, (512, 1031))
    for view in (values, values.T, values[::3, 1::2]):
        src = PortableActivation.from_array(view, dtype)
        assert bytes(src.bytes) == PortableActivation.from_array(np.ascontiguousarray(view), dtype).bytes
        h = a.import_activation(src)
        h2 = b.import_activation(pickle.loads(pickle.dumps(a.export_activation(h))))
        back = b.export_activation(h2)
        assert (back.shape, back.dtype, bytes(back.bytes)) == (src.shape, dtype, bytes(src.bytes))
        assert np.array_equal(back.to_array().view(np.uint8), np.ascontiguousarray(view).view(np.uint8))
        a.release_activation(h)
        b.release_activation(h2)
    assert a.live_activations() == b.live_activations() == 0


def test_a_bridge_reuses_its_staging_store():
    a, b = CpuExecutor("a"), CpuExecutor("b")
    h = a.import_activation(PortableActivation.from_array(np.ones(1 << 16, np.float32), Dtype.fp32))
    addresses = set()
    for _ in range(5):
        p = a.export_activation(h)
        addresses.add(np.frombuffer(p.bytes, np.uint8).ctypes.data)
        h2 = b.import_activation(p)
        b.release_activation(h2)
        del p
        gc.collect()
    assert len(addresses) == 1, "each export should reuse the store the last one returned"
    a.release_activation(h)


def test_staging_pool_never_lends_a_store_that_is_still_read():
    pool = StagingPool(np.empty)
    first = pool.lease_array(64)
    first.array[:] = 1
    held = np.frombuffer(first.view, np.uint8)[8:]  # a reader deep down the view chain
    del first
    second = pool.lease_array(64)
    second.array[:] = 2
    assert held.tolist() == [1] * 56
    assert pool.lent == 2


# -- persisted outputs keep their dtype ------------------------------------------------

ALL_OUTPUTS = """
version: 1
name: dtypes
executors:
  a: {vendor: cpu}
  b: {vendor: cpu}
stages:
  x: {op: random.normal, args: {shape: [5, 7], seed: 11, std: 3}, executor: a}
""" + "".join(f"  {d.value}: {{op: cast, inputs: [x], dtype: {d.value}, executor: b}}\n" for d in Dtype) + (
    "outputs: {" + ", ".join(f"{d.value}: {d.value}" for d in Dtype) + "}\n"
)


def cast_reference(x, d):
    """``cast`` of float32 ``x`` to ``d`` by the numeric rule, written out with plain numpy."""
    if d.kind == "float":
        return x.astype(d.numpy)
    if d.kind == "quant":
        return np.clip(np.rint(x), *((-8, 7) if d is Dtype.int4 else (-128, 127))).astype(np.int8).astype(d.numpy)
    if d is Dtype.bool:
        return x != 0
    info = np.iinfo(d.numpy)
    return np.clip(np.trunc(x.astype(np.float64)), info.min, info.max).astype(d.numpy)  # toward zero, saturating


def test_every_dtype_persists_and_loads_back_exactly(manifest_file, tmp_path):
    m = compile_manifest(load(manifest_file(ALL_OUTPUTS)))
    result = execute(m, plan(m, probe), runs_dir=str(tmp_path / "runs"))
    x = np.random.default_rng(11).standard_normal((5, 7), dtype=np.float32) * np.float32(3)
    record = json.loads((tmp_path / "runs" / result.run_id / "record.json").read_text())
    for d in Dtype:
        want = PortableActivation.from_array(cast_reference(x, d), d)
        got = load_output(result.run_dir, d.value)
        assert got.dtype == d.numpy and got.shape == (5, 7)
        assert PortableActivation.from_array(got, d).bytes == want.bytes, d
        # without hetflow: numpy plus ml_dtypes and the dtype named in the record
        entry = record["outputs"][d.value]
        raw = np.load(tmp_path / "runs" / result.run_id / entry["file"])
        plain = raw.view({"bf16": ml_dtypes.bfloat16, "fp8e4m3": ml_dtypes.float8_e4m3fn,
                          "fp8e5m2": ml_dtypes.float8_e5m2, "int4": ml_dtypes.int4}.get(entry["dtype"], raw.dtype))
        assert np.array_equal(plain.view(np.uint8), got.view(np.uint8))


# -- planning on a machine without a GPU ---------------------------------------------------

needs_no_gpu = pytest.mark.skipif(probe(Vendor.cuda).available, reason="a CUDA GPU is present here")


@needs_no_gpu
def test_cuda_is_reported_unavailable_with_the_reason():
    offer = probe(Vendor.cuda)
    assert not offer.available and "cupy" in offer.reason
    assert offer.devices == () and offer.dtypes == ()


@needs_no_gpu
def test_pinning_cuda_fails_at_plan_time_with_the_position(manifest_file, capsys):
    path = manifest_file("""
        version: 1
        name: gpu
        executors:
          gpu: {vendor: cuda}
        stages:
          x: {op: zeros, args: {shape: [2]}}
        outputs: {x: x}
        """)
    with pytest.raises(ManifestError) as info:
        plan(compile_manifest(load(path)), probe)
    text = str(info.value)
    assert f"{path}:5:17: error: executor 'gpu': no vendor of [cuda] is available on this machine (cuda: " in text
    assert main(["plan", path]) == 2
    assert "Traceback" not in capsys.readouterr().err


@needs_no_gpu
def test_a_preference_list_falls_back_and_the_plan_says_why(manifest_file):
    path = manifest_file("""
        version: 1
        name: gpu
        executors:
          accel: {vendor: [cuda, rocm, cpu]}
        stages:
          x: {op: zeros, args: {shape: [2]}}
        outputs: {x: x}
        """)
    p = plan(compile_manifest(load(path)), probe)
    assert p.executors["accel"].vendor is Vendor.cpu
    assert "first available of [cuda, rocm, cpu] (cuda unavailable: " in render_text(p)


def test_executors_command_lists_every_vendor_with_memory(capsys):
    assert main(["executors", "--json"]) == 0
    offers = {o["vendor"]: o for o in json.loads(capsys.readouterr().out)}
    assert set(offers) == {v.value for v in Vendor}
    assert offers["cpu"]["devices"][0]["memory_bytes"] > 0
    for vendor in ("cuda", "rocm"):
        if not offers[vendor]["available"]:
            assert offers[vendor]["reason"]


def test_memory_limit_in_a_manifest_fails_the_run_with_out_of_memory(manifest_file, tmp_path, capsys):
    path = manifest_file("""
        version: 1
        name: oom
        executors:
          host: {vendor: cpu}
          small: {vendor: cpu, memory_limit: 1KiB}
        stages:
          x: {op: random.normal, args: {shape: [64, 64], seed: 1}, executor: host}
          y: {op: relu, inputs: [x], executor: small}
        outputs: {y: y}
        """)
    p = plan(compile_manifest(load(path)), probe)
    assert p.executors["small"].memory_limit == 1024
    assert main(["run", path, "--runs-dir", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "executor allocation failed: import of [64, 64] fp32 needs 16384 bytes" in err
    assert "memory_limit of 1024 bytes" in err


def test_memory_limit_must_be_a_size(manifest_file, capsys):
    path = manifest_file("""
        version: 1
        name: oom
        executors:
          small: {vendor: cpu, memory_limit: lots}
        stages:
          x: {op: zeros, args: {shape: [2]}}
        outputs: {x: x}
        """)
    assert main(["validate", path]) == 2
    assert f"{path}:5:38: error: executors.small.memory_limit must be bytes as an integer, or a size with its " \
           "unit as written here: '16GiB'" in capsys.readouterr().err


def test_tensor_shape_of_rank_nine_is_refused():
    with pytest.raises(ValueError, match="rank 9 exceeds the maximum of 8"):
        TensorShape((1,) * 9)


def test_staging_pool_picks_among_stores_of_different_sizes():
    pool = StagingPool(np.empty)
    leases = [pool.lease_array(n) for n in (4096, 16384, 2048)]
    del leases
    gc.collect()
    assert pool.idle == 3
    sizes = [len(pool.lease(n)) for n in (16000, 3000, 100)]
    assert sizes == [16000, 3000, 100]
