"""Explained plans: cost-based moves with their numbers, vendor preference, colocation, memory, formats."""

import io
import json

import pytest

from hetflow.engine.cli import main
from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan, render_dot
from hetflow.executors import Offer, probe
from hetflow.executors.base import Dtype, Vendor


def gpu_probe(vendor):
    if vendor is Vendor.cpu:
        return probe(vendor)
    if vendor is Vendor.cuda:
        return Offer(vendor, True, "planning-only offer", (), (Dtype.fp32, Dtype.fp16, Dtype.bf16))
    return Offer(vendor, False, "not here")


def make(manifest_file, text, probe_fn=probe):
    return plan(compile_manifest(load(manifest_file(text))), probe_fn)


def test_a_large_generator_moves_to_its_consumer_by_cost(manifest_file):
    p = make(manifest_file, """
version: 1
name: t
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  big: {op: ones, args: {shape: [4194304]}}
  y: {op: relu, inputs: [big], executor: b}
outputs: {y: y}
""")
    assert p.nodes["big"].executor == "b" and not p.bridges
    assert p.nodes["big"].reason.startswith("cost: b ") and " vs a " in p.nodes["big"].reason
    why = p.to_json(explain=True)["nodes"]["big"]["why"]
    assert why["kind"] == "cost" and why["costs"]["a"]["bridges_s"] > 0.003 and why["costs"]["b"]["bridges_s"] == 0
    assert p.estimate["placement"] == "min-cut"


def test_matmul_goes_to_the_gpu_and_the_fallback_is_warned(manifest_file):
    text = """
version: 1
name: t
executors: {host: {vendor: cpu}, gpu: {vendor: [cuda, cpu]}}
stages:
  x: {op: ones, args: {shape: [2048, 2048]}, executor: host}
  w: {op: ones, args: {shape: [2048, 2048]}, executor: host}
  h: {op: matmul, inputs: [x, w]}
  k: {op: relu, inputs: [h], vendor: [rocm, cuda, cpu]}
outputs: {h: h, k: k}
"""
    p = make(manifest_file, text, gpu_probe)
    assert p.nodes["h"].executor == "gpu" and p.nodes["h"].reason.startswith("cost: gpu")
    assert p.nodes["k"].reason.startswith("preference: vendor cuda, fell back from [rocm, cuda, cpu]")
    kinds = [w.kind for w in p.warnings]
    assert "vendor-fallback" in kinds
    # on this machine gpu falls back to cpu: a warning at its vendor line
    p2 = make(manifest_file, text)
    (w,) = [w for w in p2.warnings if "executor 'gpu'" in w.message]
    assert str(w).endswith("its stages fell back with it") and ":4:48:" in str(w)


def test_colocation_is_honoured_and_conflicts_point_at_the_line(manifest_file):
    p = make(manifest_file, """
version: 1
name: t
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}, executor: a}
  y: {op: ones, args: {shape: [4]}, executor: b}
  z: {op: add, inputs: [x, y], colocate_with: x}
  u: {op: relu, inputs: [z], colocate_with: y}
outputs: {u: u}
""")
    assert p.nodes["z"].executor == "a" and p.nodes["u"].executor == "b"
    assert p.nodes["z"].reason.startswith("colocated with 'z' and 'x', pinned (executor: a)")
    path = manifest_file("""
version: 1
name: t
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}, executor: a}
  y: {op: relu, inputs: [x], executor: b, colocate_with: x}
  z: {op: relu, inputs: [x], colocate_with: nope}
outputs: {}
""", "bad.yaml")
    with pytest.raises(ManifestError) as info:
        compile_manifest(load(path))
    assert [str(d) for d in info.value.diagnostics] == [
        f"{path}:7:58: error: stage 'y' is pinned to 'b' but colocated (through colocate_with) with 'x', pinned to 'a'; one group runs on one executor",
        f"{path}:8:45: error: stage 'z' is colocated with 'nope', which is not a stage",
    ]


def test_vendor_no_executor_offers_is_an_error_at_the_vendor(manifest_file):
    with pytest.raises(ManifestError) as info:
        make(manifest_file, """
version: 1
name: t
executors: {a: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}, vendor: [cuda, rocm]}
outputs: {}
""")
    (d,) = info.value.diagnostics
    assert ":6:45: error: stage 'x' wants vendor [cuda, rocm], and no executor able to run it has one here" in str(d)


def test_a_partition_over_the_declared_memory_is_an_error(manifest_file):
    with pytest.raises(ManifestError) as info:
        make(manifest_file, """
version: 1
name: t
executors: {small: {vendor: cpu, memory: 1MiB}}
stages:
  x: {op: ones, args: {shape: [131072]}}
  y: {op: relu, inputs: [x]}
  z: {op: relu, inputs: [y]}
outputs: {z: z}
""")
    (d,) = info.value.diagnostics
    assert "partition p0 on executor 'small' holds 1.5 MiB of live activations at its peak" in str(d)
    assert "more than the executor's 1.0 MiB (declared at " in str(d) and ":4:42)" in str(d)


def test_plan_formats_json_dot_svg_and_png(manifest_file, tmp_path):
    path = manifest_file("""
version: 1
name: t
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}, executor: a}
  y: {op: relu, inputs: [x], executor: b}
outputs: {y: y}
""")
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", path, "--format", "json"], out, err) == 0
    data = json.loads(out.getvalue())
    assert data["format"] == 2 and data["warnings"] == [] and data["totals"]["estimated_s"] > 0
    assert data["bridges"][0]["estimated_s"] > 0 and data["nodes"]["y"]["why"]["kind"] == "pinned"
    dot = render_dot(plan(compile_manifest(load(path)), probe))
    assert 'subgraph cluster_0' in dot and '"bridge:x@b" [shape=diamond' in dot
    assert '"stage:x" -> "bridge:x@b"' in dot and '"bridge:x@b" -> "stage:y"' in dot
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    svg = tmp_path / "p.svg"
    assert main(["plan", path, "--format", "svg", "-o", str(svg)], io.StringIO(), io.StringIO()) == 0
    assert svg.read_text().lstrip().startswith("<?xml") and "x@b" in svg.read_text()
    png = tmp_path / "p.png"
    assert main(["plan", path, "--format", "png", "-o", str(png)], io.StringIO(), io.StringIO()) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_svg_without_graphviz_is_a_clear_exit_2(manifest_file, monkeypatch, tmp_path):
    path = manifest_file("""
version: 1
name: t
executors: {a: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}}
outputs: {}
""")
    monkeypatch.setenv("PATH", str(tmp_path))
    err = io.StringIO()
    assert main(["plan", path, "--format", "svg"], io.StringIO(), err) == 2
    assert "renders through Graphviz's `dot`, which is not installed" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_a_stage_left_where_another_executor_is_cheaper_says_why_it_stayed(manifest_file):
    """A reason of ``cost: host 1.69 ms ... vs gpu 1.18 ms`` on a stage left on the host read as a wrong choice:
    a move that saves less than ``CostModel.min_gain_s`` is not made, and the reason now says so."""
    text = """
version: 1
name: t
executors: {host: {vendor: cpu}, gpu: {vendor: [cuda, cpu]}}
stages:
  x: {op: ones, args: {shape: [SIDE, SIDE]}, executor: host}
  h: {op: matmul, inputs: [x, x]}
  y: {op: relu, inputs: [h], executor: host}
outputs: {y: y}
"""
    kept = make(manifest_file, text.replace("SIDE", "256"), gpu_probe)
    costs = kept.to_json(explain=True)["nodes"]["h"]["why"]["costs"]
    saved = costs["host"]["total_s"] - costs["gpu"]["total_s"]
    assert kept.nodes["h"].executor == "host" and 0 < saved < 1e-3, costs
    assert kept.nodes["h"].reason.endswith(
        "; kept on host: gpu would save %s, not the 1.00 ms a placement must save to leave the baseline"
        % kept.nodes["h"].reason.split("gpu would save ")[1].split(",")[0])
    # a stage the cost model moved, and one whose executor is the cheaper, say nothing of it
    moved = make(manifest_file, text.replace("SIDE", "1024"), gpu_probe)
    assert moved.nodes["h"].executor == "gpu" and "kept on" not in moved.nodes["h"].reason
    assert "kept on" not in kept.nodes["y"].reason


def test_sizes_past_a_tebibyte_are_said_in_their_own_unit(manifest_file):
    """A tensor of 10^16 elements was '37252903.0 GiB'."""
    with pytest.raises(ManifestError) as info:
        make(manifest_file, """
version: 1
name: t
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [100000000, 100000000]}}
outputs: {x: x}
""")
    (d,) = info.value.diagnostics
    assert "holds 35.5 PiB of live activations" in d.message and "GiB of live" not in d.message, d.message
