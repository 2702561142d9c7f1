"""What a run record says of the devices each executor bound (issue 34): every device of a split executor,
with its share and memory limit, and the one device of any other; the plan and the inventory beside it."""

import json
import os

import pytest

import hetflow
from hetflow.engine.cli.main import main
from hetflow.executors.cpu import cpu_devices

try:
    _CORES = len(os.sched_getaffinity(0))
except (AttributeError, OSError):
    _CORES = os.cpu_count() or 1

needs_two = pytest.mark.skipif(_CORES < 2, reason=f"two CPU devices need two cores; this process may run on {_CORES}")

MANIFEST = """\
version: 1
name: bound
executors:
  accel: {vendor: cpu, devices: [0, 1], split: [3, 1], memory_limit: 2MiB}
  host: {vendor: cpu, memory_limit: 1MiB}
stages:
  x: {op: random.normal, args: {shape: [64, 32], seed: 3}, executor: host}
  y: {op: relu, inputs: [x], executor: accel}
outputs: {y: y}
"""


def _record(run_dir):
    with open(os.path.join(run_dir, "record.json"), encoding="utf-8") as f:
        return json.load(f)


@needs_two
def test_the_record_lists_every_device_a_split_executor_bound_and_the_one_of_the_others(manifest_file, tmp_path):
    done = hetflow.run(manifest_file(MANIFEST), runs_dir=tmp_path / "runs", cache=False)
    assert done.status == "succeeded", done.error
    record = _record(done.path)  # what is on disk, not what the call returned
    accel = record["executors"]["accel"]
    assert accel["vendor"] == "cpu"
    assert [(d["index"], d["share"], d["memory_limit"]) for d in accel["devices"]] == [
        (0, 0.75, 1 << 20), (1, 0.25, 1 << 20)]
    host_devices = cpu_devices(2)
    # the names the host gives its two devices (core sets here, NUMA nodes on a machine with several)
    assert [d["bus_address"] for d in accel["devices"]] == [d.bound().bus_address for d in host_devices]
    assert [d["display_name"] for d in accel["devices"]] == [d.bound().display_name for d in host_devices]
    assert accel["devices"][0]["bus_address"] != accel["devices"][1]["bus_address"]
    # the one-device form: the whole host, all of the work, the executor's own limit
    [one] = record["executors"]["host"]["devices"]
    assert (one["index"], one["share"], one["memory_limit"]) == (0, 1.0, 1 << 20)
    assert one["bus_address"] == "host" and one["display_name"]
    # the plan says which devices and shares were asked for; the inventory what the machine offers
    assert record["plan"]["executors"]["accel"]["devices"] == [0, 1]
    assert record["plan"]["executors"]["accel"]["split"] == [3, 1]
    assert [o["vendor"] for o in record["inventory"]] == ["cpu"] and record["inventory"][0]["devices"]


@needs_two
def test_a_failed_run_records_the_devices_too(manifest_file, tmp_path):
    # y's 8 KiB cannot fit the first device's 4 KiB share: the run fails after the executors were made
    text = MANIFEST.replace("memory_limit: 2MiB", "memory_limit: [4KiB, 4KiB]")
    done = hetflow.run(manifest_file(text), runs_dir=tmp_path / "runs", cache=False)
    assert done.status == "failed" and "on device 0" in done.error
    devices = _record(done.path)["executors"]["accel"]["devices"]
    assert [(d["index"], d["memory_limit"]) for d in devices] == [(0, 4096), (1, 4096)]


def test_the_cli_run_writes_the_one_device_form(manifest_file, tmp_path, capsys):
    path = manifest_file(MANIFEST.replace("devices: [0, 1], split: [3, 1], memory_limit: 2MiB", "device: 0"))
    assert main(["run", path, "--runs-dir", str(tmp_path / "runs"), "--no-cache", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    record = _record(os.path.dirname(out["record"]))
    assert set(record["executors"]) == {"accel", "host"}
    for name, limit in (("accel", None), ("host", 1 << 20)):
        [device] = record["executors"][name]["devices"]
        assert (device["index"], device["share"], device["memory_limit"]) == (0, 1.0, limit)


@needs_two
def test_on_a_cluster_the_record_lists_the_planned_devices_and_their_worker(manifest_file, tmp_path):
    pytest.importorskip("distributed", reason="a cluster run needs dask.distributed")
    done = hetflow.run(manifest_file(MANIFEST), runs_dir=tmp_path / "runs", cache=False, workers=1)
    assert done.status == "succeeded", done.error
    executors = _record(done.path)["executors"]
    assert executors["accel"]["worker"].startswith("tcp://") and executors["accel"]["worker"] == executors["host"]["worker"]
    assert [(d["index"], d["share"], d["memory_limit"]) for d in executors["accel"]["devices"]] == [
        (0, 0.75, 1 << 20), (1, 0.25, 1 << 20)]
    # the worker deals out its core sets itself: the client names only what the worker's offer lists
    assert [d["bus_address"] for d in executors["accel"]["devices"]] == (
        [d.bound().bus_address for d in cpu_devices(2)] if len(cpu_devices()) > 1 else [None, None])
    [one] = executors["host"]["devices"]
    assert (one["index"], one["share"], one["memory_limit"], one["bus_address"]) == (0, 1.0, 1 << 20, "host")


def test_a_vulkan_executor_records_its_adapter(manifest_file, tmp_path):
    from hetflow.executors import probe
    from hetflow.executors.base import Vendor

    offer = probe(Vendor.vulkan)
    if not offer.available:
        pytest.skip(f"vulkan executor unavailable here: {offer.reason}")
    text = MANIFEST.replace("accel: {vendor: cpu, devices: [0, 1], split: [3, 1], memory_limit: 2MiB}",
                            "accel: {vendor: vulkan, device: 0, memory_limit: 1MiB}")
    done = hetflow.run(manifest_file(text), runs_dir=tmp_path / "runs", cache=False)
    assert done.status == "succeeded", done.error
    accel = _record(done.path)["executors"]["accel"]
    assert accel["vendor"] == "vulkan"
    assert [(d["index"], d["bus_address"], d["share"], d["memory_limit"]) for d in accel["devices"]] == [
        (0, offer.devices[0].bus_address, 1.0, 1 << 20)]
