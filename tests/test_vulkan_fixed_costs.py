"""Vulkan's fixed costs (issue 30): the device's start-up in the warm-up, not
in the first partition; sources fused into their consumers' partitions, or
the plan says why not; a CPU-type device priced as host memory.

The pricing tests take the device type as data and run everywhere; the
others need wgpu and a Vulkan driver (lavapipe on any machine) and are
skipped with the probe's reason without them.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.engine.plan.costs import HOST_MEMORY_LINK, LINKS, CostModel, device_import_link, device_link
from hetflow.executors import probe
from hetflow.executors.base import Vendor

OFFER = probe(Vendor.vulkan)
needs_vulkan = pytest.mark.skipif(not OFFER.available, reason=f"vulkan executor unavailable here: {OFFER.reason}")
on_cpu_type = pytest.mark.skipif(
    not OFFER.available or getattr(OFFER.devices[0], "device_type", None) != "cpu",
    reason="needs a CPU-type Vulkan device (lavapipe) as the first adapter")

REPO = Path(__file__).resolve().parent.parent
DECODER = REPO / "pipelines" / "decoder.yaml"


# -- pricing: the device type as data ---------------------------------------------------------------------


def test_a_cpu_type_device_is_host_memory_and_a_discrete_gpu_is_across_pcie():
    host = LINKS[Vendor.cpu, Vendor.cpu]
    for src, dst, st, dt in [(Vendor.cpu, Vendor.vulkan, None, "cpu"), (Vendor.vulkan, Vendor.cpu, "cpu", None),
                             (Vendor.vulkan, Vendor.vulkan, "cpu", "cpu")]:
        link = device_link(src, dst, st, dt)
        assert link is HOST_MEMORY_LINK
        assert link.bytes_per_s == host.bytes_per_s and link.description.startswith("host memory")
    for kind in ("discrete-gpu", "integrated-gpu", "unknown", None):
        assert device_link(Vendor.cpu, Vendor.vulkan, None, kind) == LINKS[Vendor.cpu, Vendor.vulkan]
        assert "PCIe" in device_link(Vendor.vulkan, Vendor.cpu, kind, None).description
    # lavapipe to a CUDA GPU crosses PCIe once, as the host does
    assert device_link(Vendor.vulkan, Vendor.cuda, "cpu", "discrete-gpu") == LINKS[Vendor.cpu, Vendor.cuda]
    assert device_import_link(Vendor.vulkan, "cpu").description == device_import_link(Vendor.cpu).description
    assert "PCIe" in device_import_link(Vendor.vulkan, "discrete-gpu").description


def test_the_model_prices_a_bridge_by_the_device_type_it_is_given():
    nbytes = 64 << 20
    lavapipe = CostModel(device_types={Vendor.vulkan: "cpu"})
    gpu = CostModel(device_types={Vendor.vulkan: "discrete-gpu"})
    cpu_cpu = CostModel().transfer_s(nbytes, Vendor.cpu, Vendor.cpu)
    assert lavapipe.transfer_s(nbytes, Vendor.cpu, Vendor.vulkan) == pytest.approx(cpu_cpu, abs=2e-5)
    assert gpu.transfer_s(nbytes, Vendor.cpu, Vendor.vulkan) == pytest.approx(
        LINKS[Vendor.cpu, Vendor.vulkan].latency_s + nbytes / LINKS[Vendor.cpu, Vendor.vulkan].bytes_per_s)
    assert lavapipe.link(Vendor.vulkan, Vendor.cpu).description != gpu.link(Vendor.vulkan, Vendor.cpu).description


@on_cpu_type
def test_a_plan_on_lavapipe_names_and_prices_its_bridges_as_host_memory(tmp_path):
    assert OFFER.devices[0].device_type == "cpu"
    plan = hetflow.plan(DECODER, runs_dir=tmp_path / "runs").engine_plan
    assert plan.executors["gpu"].vendor is Vendor.vulkan
    crossing = [b for b in plan.bridges if "gpu" in (b.source, b.destination)]
    assert crossing
    for b in crossing:
        assert b.link == HOST_MEMORY_LINK.description
        assert b.estimated_s == pytest.approx(HOST_MEMORY_LINK.latency_s + b.bytes / HOST_MEMORY_LINK.bytes_per_s)
    assert all(b["link"] == HOST_MEMORY_LINK.description for b in plan.to_json(explain=True)["bridges"]
               if "gpu" in (b["source"], b["destination"]))


# -- sources in their consumers' partitions ---------------------------------------------------------------


def _with_gpu_on(vendor, tmp_path):
    text = DECODER.read_text().replace("gpu:  {vendor: [vulkan, cpu]}", f"gpu: {{vendor: {vendor}}}")
    path = tmp_path / f"decoder-{vendor}.yaml"
    path.write_text(text)
    return path


@needs_vulkan
def test_the_decoder_on_vulkan_has_the_partitions_it_has_on_the_cpu(tmp_path):
    on_vulkan = hetflow.plan(_with_gpu_on("vulkan", tmp_path), runs_dir=tmp_path / "runs").engine_plan
    on_cpu = hetflow.plan(_with_gpu_on("cpu", tmp_path), runs_dir=tmp_path / "runs").engine_plan
    assert on_vulkan.executors["gpu"].vendor is Vendor.vulkan
    # before: every weight drawn on gpu was a partition of its own (16 partitions)
    assert [p.nodes for p in on_vulkan.partitions] == [p.nodes for p in on_cpu.partitions]
    assert len(on_vulkan.partitions) == 4
    (layers,) = [p for p in on_vulkan.partitions if p.executor == "gpu"]
    assert {"wq1", "wd2", "q1", "nf"} <= set(layers.nodes) and layers.inputs == ("x0", "mask")


LOADS = """\
version: 1
name: loads
executors:
  host: {vendor: cpu}
  gpu: {vendor: vulkan}
stages:
  x:   {op: random.normal, args: {shape: [4, 8], seed: 1}, executor: host}
  w:   {op: load, args: {path: w.npy}, executor: gpu}
  h:   {op: matmul, inputs: [x, w], executor: gpu}
  a:   {op: relu, inputs: [h], executor: gpu}
  y:   {op: add, inputs: [a, x2], executor: host}
  x2:  {op: mul, inputs: [x], args: {value: 2.0}, executor: host}
  b:   {op: load, args: {path: b.npy}, executor: gpu}
  z:   {op: add, inputs: [y, b], executor: host}
  c:   {op: load, args: {path: b.npy}, executor: gpu}
  z2:  {op: add, inputs: [x2, c], executor: host}
  g:   {op: mul, inputs: [h, c], executor: gpu}
outputs: {z: z, z2: z2, g: g}
"""
"""``w`` feeds a matmul on its executor; ``b`` feeds only the host; ``c`` feeds the host before its gpu
consumer's partition runs. The host's stages form one group that reads gpu's and feeds it: a cycle, so
the partitions are split by crossings, where a source used to stay alone."""


@needs_vulkan
def test_a_load_joins_its_consumers_partition_or_the_plan_says_why(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "w.npy", rng.standard_normal((8, 8), dtype=np.float32))
    np.save(tmp_path / "b.npy", rng.standard_normal((4, 8), dtype=np.float32))
    path = tmp_path / "loads.yaml"
    path.write_text(LOADS)
    plan = hetflow.plan(path, runs_dir=tmp_path / "runs").engine_plan
    part = {n: plan.nodes[n].partition for n in plan.nodes}
    assert part["w"] == part["h"] == part["a"]
    assert "own partition" not in plan.nodes["w"].reason
    assert [p.nodes for p in plan.partitions if p.id == part["b"]] == [("b",)]
    assert plan.nodes["b"].reason.endswith(
        "its own partition: none of its consumers runs on gpu (z on host), so a bridge carries it")
    assert plan.nodes["c"].why["partition"] == (
        f"its own partition: z2 on host reads it before {part['g']} (holding g) runs; joining that partition "
        f"would make {part['z2']} wait for it, a cycle between the partitions")
    as_json = plan.to_json(explain=True)["nodes"]
    assert as_json["c"]["why"]["partition"] == plan.nodes["c"].why["partition"]
    assert "partition" not in as_json["w"]["why"]
    text = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "plan", str(path)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert "none of its consumers runs on gpu (z on host)" in text.stdout, text.stderr
    # the fused plan computes what the CPU does
    run = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    assert run.status == "succeeded", run.record.get("error")
    cpu = tmp_path / "cpu.yaml"
    cpu.write_text(LOADS.replace("gpu: {vendor: vulkan}", "gpu: {vendor: cpu}"))
    reference = hetflow.run(cpu, runs_dir=tmp_path / "runs", cache=False)
    for name in ("z", "z2", "g"):
        np.testing.assert_allclose(run.outputs[name], reference.outputs[name], rtol=1e-5, atol=1e-5)


# -- the device's start-up in the warm-up ------------------------------------------------------------------

FIRST_RUN = textwrap.dedent("""
    import json, sys
    import hetflow
    from hetflow.executors.vulkan_device import Device
    run = hetflow.run(sys.argv[1], runs_dir=sys.argv[2], cache=False)
    gpu = [e for e in run.record["events"] if e.get("executor") == "gpu" and e.get("start") is not None]
    print(json.dumps({"status": run.status, "warm_up": run.record["warm_up"],
                      "compiled": Device.get(0).compiled, "dispatched": Device.get(0).first_dispatched,
                      "first_start": min(e["start"] for e in gpu),
                      "partitions": sorted({e["id"] for e in gpu if e["kind"] == "partition"})}))
""")


@needs_vulkan
def test_the_warm_up_compiles_what_the_first_partition_would(tmp_path):
    # a fresh process: this one's device has compiled pipelines for other tests already
    out = subprocess.run([sys.executable, "-c", FIRST_RUN, str(_with_gpu_on("vulkan", tmp_path)), str(tmp_path / "runs")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["status"] == "succeeded" and seen["partitions"]
    (warm,) = seen["warm_up"]
    assert warm["seconds"] > 0
    # the executor's own log of compiles: the decoder's kernels, every one before its first task started
    templates = {t for t, _ in seen["compiled"]}
    assert {"matmul", "attention", "norm", "unary", "binary"} <= templates
    late = [(t, at) for t, at in seen["compiled"] if at >= seen["first_start"]]
    assert late == [], f"compiled inside the run: {late}"
    # lavapipe compiles a kernel's machine code at its first dispatch: each one's came in the warm-up too
    assert len(seen["dispatched"]) == len(seen["compiled"])
    late = [(t, at) for t, at in seen["dispatched"] if at >= seen["first_start"]]
    assert late == [], f"first dispatched inside the run: {late}"
