"""Emulator phases in the plan: graph nodes on their emulator, sizes exact or bounded, priced, drawn everywhere."""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from hetflow.engine import report
from hetflow.engine.cli import main
from hetflow.engine.errors import RunFailed
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import build_graph, plan, render_dot, render_text
from hetflow.engine.run.execute import execute
from hetflow.executors import Offer, probe
from hetflow.executors import emulator as emu
from hetflow.executors.base import Dtype, Vendor

GUESTS = Path(__file__).resolve().parents[1] / "examples" / "guests"
COLUMNS = len(emu.WITNESS_COLUMNS)

PIPELINE = """\
version: 1
name: zk
emulators:
  emu: {{backend: fast, program: {program}, chunk_steps: {chunk}, max_steps: {max_steps}}}
executors:
  host: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: emu}}
  inst: {{phase: plan, inputs: [run]}}
  wit: {{phase: witness, inputs: [run]}}
  top: {{op: max, inputs: [wit], args: {{axis: 0}}}}
  lim: {{op: relu, inputs: [wit]}}
outputs: {{top: top, lim: lim, steps: run.steps, trace: wit}}
"""


def _manifest(tmp_path, program="fib.elf", chunk=128, max_steps=100_000, name="zk.yaml"):
    path = tmp_path / name
    path.write_text(PIPELINE.format(program=GUESTS / program, chunk=chunk, max_steps=max_steps))
    return compile_manifest(load(str(path)))


def test_every_phase_is_a_node_of_the_graph_with_its_emulator_as_target(tmp_path):
    m = _manifest(tmp_path)
    g = build_graph(m)
    assert {n: g.nodes[n].get("target") for n in ("run", "inst", "wit")} == dict.fromkeys(
        ("run", "inst", "wit"), "emulator:emu")
    assert set(g.edges) == {("run", "inst"), ("run", "wit"), ("wit", "top"), ("wit", "lim")}
    p = plan(m, probe)
    assert p.phases["wit"]["reason"] == "emulator: witness phase, runs on emulator:emu"
    assert "run" not in p.nodes and set(p.nodes) == {"top", "lim"}


def test_the_plan_bounds_the_witness_and_knows_which_sizes_are_exact(tmp_path):
    p = plan(_manifest(tmp_path, chunk=128, max_steps=1000), probe)
    data = json.loads(json.dumps(p.to_json(explain=True)))
    wit = data["phases"]["wit"]
    assert (wit["target"], wit["inputs"], wit["consumers"], wit["persisted"]) == ("emulator:emu", ["run"], ["top", "lim"], ["trace"])
    assert wit["outputs"] == ["array", "rows", "chunks"]
    # fan-out: one task per chunk, ceil(1000 / 128)
    assert (wit["chunks_max"], wit["tasks_max"], wit["rows_max"]) == (8, 8, 1000)
    assert (wit["shape"], wit["dtype"], wit["bytes"], wit["size"]) == ([1000, COLUMNS], "int64", 1000 * COLUMNS * 8, "bound")
    assert data["phases"]["run"]["size"] is None and data["phases"]["run"]["outputs"][0] == "steps"
    assert data["phases"]["run"]["phase_consumers"] == ["inst", "wit"]
    # max over rows has as many elements whatever the rows: exact; relu keeps the rows: a bound
    assert (data["nodes"]["top"]["shape"], data["nodes"]["top"]["size"]) == ([COLUMNS], "exact")
    assert (data["nodes"]["lim"]["shape"], data["nodes"]["lim"]["size"]) == ([1000, COLUMNS], "bound")
    (bridge,) = data["bridges"]
    assert (bridge["source"], bridge["bytes"], bridge["size"], bridge["kind"]) == (
        "emulator:emu", 1000 * COLUMNS * 8, "bound", "emulator output import")
    assert bridge["estimated_s"] > 0 and data["totals"]["bytes_bridged_bound"] is True
    assert 0 < data["estimate"]["phases_s"] < data["estimate"]["total_s"]
    assert data["phases"]["wit"]["estimated_s"] > data["phases"]["inst"]["estimated_s"] > 0


def test_phase_nodes_in_text_json_dot_and_svg(tmp_path):
    m = _manifest(tmp_path, chunk=128, max_steps=1000)
    p = plan(m, probe)
    text = render_text(p)
    assert "  wit   witness       on emulator:emu  inputs: run; yields array [<=1000, 16] int64 (at most 125.0 KiB, " \
           "bound: 1000 rows max) to top, lim; fan-out: at most 8 tasks, one per chunk " \
           "(max_steps 1000 / chunk_steps 128); at most ~" in text
    assert "  run   execute       on emulator:emu  inputs: -; yields steps, exit_code, pub_outs, stdout, chunks, " \
           "end_reason, counters (data); arrays registers, min_trace, min_trace_index; at most ~" in text
    assert "top  max   p0   on host  [16] int64 (128 B)" in text
    assert "lim  relu  p1   on host  [<=1000, 16] int64 (at most 125.0 KiB)" in text
    assert "wit@host: wit emulator:emu -> host, at most 125.0 KiB, emulator output import; consumers: top, lim" in text
    assert "unknown size" not in text and " ? " not in text

    dot = render_dot(p)
    assert 'subgraph cluster_emulator_0 {' in dot and 'label="emulator emu (fast, rv64imac)"' in dot
    assert '"stage:wit" [shape=ellipse' in dot and "[<=1000x16] int64, at most 125.0 KiB" in dot and "<= 8 chunk tasks" in dot
    assert '"stage:run" -> "stage:wit";' in dot and '"stage:wit" -> "bridge:wit@host"' in dot
    assert '"bridge:wit@host" -> "stage:top"' in dot and '"stage:run" -> "output:steps"' in dot

    out = io.StringIO()
    assert main(["plan", m.file, "--format", "json"], out, io.StringIO()) == 0
    assert json.loads(out.getvalue())["phases"]["wit"]["chunks_max"] == 8
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed: the svg format cannot be drawn")
    svg = tmp_path / "plan.svg"
    assert main(["plan", m.file, "--format", "svg", "-o", str(svg)], io.StringIO(), io.StringIO()) == 0
    drawn = svg.read_text()
    assert "<title>stage:wit</title>" in drawn and "<title>stage:run&#45;&gt;stage:wit</title>" in drawn
    assert "emulator emu (fast, rv64imac)" in drawn and "at most 125.0 KiB" in drawn


def gpu_probe(vendor):
    if vendor is Vendor.cuda:
        return Offer(vendor, True, "planning-only offer", (), (Dtype.fp32, Dtype.int64))
    return probe(vendor) if vendor is Vendor.cpu else Offer(vendor, False, "not here")


MOVES = """\
version: 1
name: moves
emulators:
  emu: {{program: {program}, chunk_steps: 4096, max_steps: {max_steps}}}
executors:
  host: {{vendor: cpu}}
  gpu: {{vendor: cuda}}
stages:
  run: {{phase: execute, emulator: emu}}
  wit: {{phase: witness, inputs: [run]}}
  top: {{op: max, inputs: [wit], args: {{axis: 0}}}}
  out: {{op: relu, inputs: [top], executor: host}}
outputs: {{out: out}}
"""


@pytest.mark.parametrize("max_steps, where", [(1_000, "host"), (10_000_000, "gpu")])
def test_the_witness_bound_is_priced_and_a_big_one_moves_its_consumer(tmp_path, max_steps, where):
    path = tmp_path / "moves.yaml"
    path.write_text(MOVES.format(program=GUESTS / "fib.elf", max_steps=max_steps))
    p = plan(compile_manifest(load(str(path))), gpu_probe)
    top = p.nodes["top"]
    assert top.executor == where
    # the costs of both candidates include the witness import, whose size is the bound
    costs = top.why["costs"]
    bound = max_steps * COLUMNS * 8
    assert costs["host"]["bridges_s"] >= bound / 1e10 and costs["gpu"]["bridges_s"] >= bound / 6e9
    if where == "gpu":
        assert top.reason.startswith("cost: gpu ") and " vs host " in top.reason
    assert p.bridge_for("wit", where).bytes == bound


def test_the_witness_bound_holds_for_every_guest(tmp_path):
    """Plan bound >= what a run's witness really yields, rows and chunk tasks, for every guest ELF."""
    ran = []
    for elf in sorted(GUESTS.glob("*.elf")):
        m = _manifest(tmp_path, program=elf.name, chunk=4096, max_steps=500_000, name=f"{elf.stem}.yaml")
        p = plan(m, probe)
        bound = p.phases["wit"]
        try:
            result = execute(m, p, runs_dir=str(tmp_path / "runs"), num_workers=2)
        except RunFailed as e:
            # a guest that traps or never exits yields no witness: the run says so, at its execute phase
            assert "phase:run" in str(e) or "'run'" in str(e), (elf.name, str(e))
            continue
        trace = result.record["outputs"]["trace"]
        assert trace["bytes"] <= bound["bytes"] and trace["shape"][0] <= bound["rows_max"], elf.name
        assert trace["shape"][1] == bound["shape"][1]
        assert result.record["phases"]["wit"]["tasks"] <= bound["chunks_max"], elf.name
        lim = result.record["outputs"]["lim"]
        assert lim["bytes"] <= p.nodes["lim"].bytes and result.record["outputs"]["top"]["bytes"] == p.nodes["top"].bytes
        ran.append(elf.stem)
    assert {"fib", "sort", "sha256", "isa_alu"} <= set(ran)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
@pytest.mark.parametrize("graph", ["builtin", "graphviz"])
def test_the_report_draws_phase_nodes_in_a_browser(tmp_path, graph):
    if graph == "graphviz" and shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    m = _manifest(tmp_path, chunk=128, max_steps=1000)
    result = execute(m, plan(m, probe), runs_dir=str(tmp_path / "runs"), num_workers=2)
    page = tmp_path / f"report-{graph}.html"
    page.write_text(report.render_run(result.run_dir, result.record, graph=graph))
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1200"]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    for pid in ("run", "inst", "wit"):
        assert f'id="phase-{pid}"' in html
    assert "emulator phase" in html and "3 emulator phases on 1 emulator" in html
    assert "at most 125.0 KiB" in html and "unknown size" not in html
    shot = Path("/tmp") / f"hetflow-phases-report-{graph}.png"
    done = subprocess.run(flags + [f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1400, 1200)


def test_a_bound_above_the_executors_memory_is_shown_not_refused(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text(PIPELINE.format(program=GUESTS / "fib.elf", chunk=1024, max_steps=10**9))
    p = plan(compile_manifest(load(str(path))), probe)
    mem = p.memory[p.nodes["lim"].partition]
    assert mem["peak_bytes"] == 0 and mem["peak_bound_bytes"] == 10**9 * COLUMNS * 8 > (mem["memory_bytes"] or 0)
    assert "peak 0 B (at most 119.2 GiB with bounded sizes) of " in render_text(p)
