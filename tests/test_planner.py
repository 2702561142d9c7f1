"""Placement, partitions and bridges: exactly where executors differ, and nowhere else."""

import io
import json

import pytest

from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import PLAN_FORMAT, plan, render_text
from hetflow.executors import Offer, probe
from hetflow.executors.base import Vendor

HEAD = """
version: 1
name: t
executors:
  a: {vendor: cpu}
  b: {vendor: cpu}
stages:
"""


def make_plan(manifest_file, stages, outputs="{}", probe_fn=probe):
    path = manifest_file(HEAD + stages + f"outputs: {outputs}\n")
    return plan(compile_manifest(load(path)), probe_fn)


def test_bridge_inserted_exactly_where_executors_differ(manifest_file):
    p = make_plan(manifest_file, """
  x: {op: ones, args: {shape: [4, 4]}, executor: a}
  y: {op: relu, inputs: [x]}
  z: {op: matmul, inputs: [y, w]}
  w: {op: ones, args: {shape: [4, 4]}, executor: b}
  u: {op: relu, inputs: [z]}
""", "{u: u}")
    assert {n: p.nodes[n].executor for n in p.nodes} == {"x": "a", "y": "a", "z": "a", "w": "b", "u": "a"}
    assert [(b.tensor, b.source, b.destination, b.bytes, b.consumers) for b in p.bridges] == [
        ("w", "b", "a", 64, ("z",))
    ]


def test_one_executor_means_no_bridge_and_one_partition(manifest_file):
    p = make_plan(manifest_file, """
  x: {op: ones, args: {shape: [4]}, executor: a}
  y: {op: relu, inputs: [x]}
  z: {op: add, inputs: [x, y]}
""", "{z: z}")
    assert p.bridges == ()
    assert [(q.id, q.nodes, q.inputs, q.outputs) for q in p.partitions] == [("p0", ("x", "y", "z"), (), ("z",))]


def test_one_bridge_per_tensor_and_destination_shared_by_consumers(manifest_file):
    p = make_plan(manifest_file, """
  x:  {op: ones, args: {shape: [8]}, executor: a}
  c1: {op: relu, inputs: [x], executor: b}
  c2: {op: gelu, inputs: [x], executor: b}
  c3: {op: silu, inputs: [x], executor: b}
  s:  {op: add, inputs: [c1, c2]}
""", "{s: s, c3: c3}")
    assert len(p.bridges) == 1
    (bridge,) = p.bridges
    assert (bridge.id, bridge.tensor, bridge.consumers) == ("x@b", "x", ("c1", "c2", "c3"))


def test_inferred_placement_follows_the_largest_input(manifest_file):
    p = make_plan(manifest_file, """
  small: {op: ones, args: {shape: [2, 8]}, executor: a}
  big:   {op: ones, args: {shape: [8, 64]}, executor: b}
  h:     {op: matmul, inputs: [small, big]}
  tie1:  {op: ones, args: {shape: [4]}, executor: b}
  tie2:  {op: ones, args: {shape: [4]}, executor: a}
  t:     {op: add, inputs: [tie1, tie2]}
  free:  {op: zeros, args: {shape: [1]}}
""")
    assert p.nodes["h"].executor == "b"
    assert p.nodes["h"].reason == "inferred: with its largest input 'big' (2.0 KiB)"
    assert p.nodes["t"].executor == "b", "a tie goes to the first input"
    assert p.nodes["free"].executor == "a"
    assert p.nodes["free"].reason.startswith("default")
    assert p.nodes["small"].reason == "pinned (executor: a)"


def test_partitions_never_form_a_cycle(manifest_file):
    # x and z share executor a and are connected by x -> z, but z also needs y on b, which needs x:
    # one partition {x, z} would wait for itself.
    p = make_plan(manifest_file, """
  x: {op: ones, args: {shape: [3]}, executor: a}
  y: {op: relu, inputs: [x], executor: b}
  z: {op: add, inputs: [x, y], executor: a}
""", "{z: z}")
    parts = {q.id: q.nodes for q in p.partitions}
    assert parts == {"p0": ("x",), "p1": ("y",), "p2": ("z",)}
    assert p.partitions[2].inputs == ("x", "y")
    assert [b.id for b in p.bridges] == ["x@b", "y@a"]


def test_disconnected_same_executor_stages_are_separate_partitions(manifest_file):
    p = make_plan(manifest_file, """
  x: {op: ones, args: {shape: [3]}, executor: a}
  y: {op: zeros, args: {shape: [3]}, executor: a}
  z: {op: add, inputs: [x, y], executor: b}
""", "{z: z}")
    assert [q.nodes for q in p.partitions] == [("x",), ("y",), ("z",)]
    assert [b.id for b in p.bridges] == ["x@b", "y@b"]


def test_shape_errors_point_at_the_inputs(manifest_file):
    with pytest.raises(ManifestError) as info:
        make_plan(manifest_file, """
  x: {op: ones, args: {shape: [3, 4]}, executor: a}
  y: {op: matmul, inputs: [x, x]}
""")
    (d,) = info.value.diagnostics
    assert str(d).endswith(":10:27: error: stage 'y': matmul: inner dimensions differ: [3, 4] @ [3, 4]")


def test_no_available_vendor_is_an_error_at_the_vendor(manifest_file):
    path = manifest_file("""
version: 1
name: t
executors:
  gpu: {vendor: [cuda, rocm]}
stages:
  x: {op: ones, args: {shape: [1]}}
outputs: {}
""")
    with pytest.raises(ManifestError) as info:
        plan(compile_manifest(load(path)), probe)
    (d,) = info.value.diagnostics
    assert str(d).startswith(f"{path}:5:17: error: executor 'gpu': no vendor of [cuda, rocm] is available on this machine (cuda: ")


def test_dtype_the_executor_lacks_is_an_error(manifest_file):
    def fp32_only(vendor):
        offer = probe(vendor)
        return Offer(offer.vendor, offer.available, offer.reason, offer.devices, (offer.dtypes[0],))

    with pytest.raises(ManifestError, match=r"stage 'x' produces bf16, which executor 'a' \(cpu\) does not support"):
        make_plan(manifest_file, "  x: {op: ones, args: {shape: [1]}, dtype: bf16}\n", probe_fn=fp32_only)


def test_plan_json_is_stable_and_complete(manifest_file):
    p = make_plan(manifest_file, """
  x: {op: ones, args: {shape: [2, 3]}, executor: a}
  y: {op: relu, inputs: [x], executor: b}
""", "{y: y}")
    data = json.loads(json.dumps(p.to_json()))
    assert list(data) == ["format", "name", "manifest_digest", "executors", "nodes", "partitions", "bridges", "outputs", "totals"]
    assert data["format"] == PLAN_FORMAT
    assert data["nodes"]["y"] == {
        "op": "relu", "executor": "b", "reason": "pinned (executor: b)", "partition": "p1", "inputs": ["x"],
        "shape": [2, 3], "dtype": "fp32", "bytes": 24, "size": "exact", "origin": data["nodes"]["y"]["origin"],
    }
    assert data["nodes"]["y"]["origin"].endswith(":10:3")
    assert data["bridges"] == [{"id": "x@b", "tensor": "x", "source": "a", "destination": "b", "bytes": 24,
                                "size": "exact", "consumers": ["y"], "kind": "portable host staging"}]
    assert data["totals"] == {"nodes": 2, "partitions": 2, "bridges": 1, "bytes_bridged": 24, "bytes_bridged_unknown": False,
                              "bytes_bridged_bound": False}
    text = render_text(p)
    assert "x@b: x a -> b, 24 B, portable host staging; consumers: y" in text
    assert "totals: 2 nodes, 2 partitions, 1 bridges, 24 B bridged" in text


def test_preference_list_falls_back_and_says_why(manifest_file):
    path = manifest_file("""
version: 1
name: t
executors:
  accel: {vendor: [cuda, cpu]}
stages:
  x: {op: ones, args: {shape: [1]}}
outputs: {}
""")
    p = plan(compile_manifest(load(path)), probe)
    assert p.executors["accel"].vendor is Vendor.cpu
    assert p.executors["accel"].reason.startswith("first available of [cuda, cpu] (cuda unavailable: ")


def test_planner_passes_do_not_mutate_their_input(manifest_file):
    from hetflow.engine.plan import planner

    path = manifest_file(HEAD + "  x: {op: ones, args: {shape: [1]}}\n  y: {op: relu, inputs: [x], executor: b}\noutputs: {}\n")
    m = compile_manifest(load(path))
    g = planner.build_graph(m)
    placed = planner.place(g, planner.choose_executors(m, probe), "a")
    assert "executor" not in g.nodes["x"]
    parted = planner.partition(placed)
    assert "partition" not in placed.nodes["x"] and parted.nodes["y"]["partition"] == "p1"


def test_a_cpu_executor_asking_for_a_device_this_host_lacks_is_refused_at_its_place(tmp_path):
    """device: 99999 on a CPU executor planned and ran, the plan saying "device 99999"."""
    from hetflow.engine import cli

    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: m\nexecutors:\n  host: {vendor: cpu, device: 99999}\nstages:\n"
                    "  x: {op: ones, args: {shape: [2]}}\noutputs: {x: x}\n")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["plan", str(path)], out=out, err=err) == 2
    assert err.getvalue().startswith(f"{path}:4:3: error: executor 'host' (cpu): cpu device 99999: this host has ")
