"""What keeps a 100,000-stage plan fast also keeps its answers: positions, the printed JSON, cache keys, groups."""

from __future__ import annotations

import io
import json
import random

import networkx as nx
import pytest

from hetflow.engine.store import cache
from hetflow.engine.plan import placement
from hetflow.engine.plan import planner
from hetflow.engine.adjacency import Graph
from hetflow.engine.cli import main
from hetflow.engine.manifest.loader import _compose, _precise, loads
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.executors import probe

CHAIN = """\
version: 1
name: chain  # café
executors:
  a: {vendor: cpu}
  b: {vendor: cpu}
stages:
  x: {op: ones, args: {shape: [4]}, executor: a}
  e1: {op: relu, inputs: [x]}
  y:
    op: add
    inputs: [x, e1]
    executor: b
  z: {op: mul, inputs: [y], args: {value: 0.1}}
outputs: {z: z}
"""


@pytest.mark.parametrize("text", [CHAIN, CHAIN.replace("  # café", "")], ids=["pyyaml-parser", "libyaml-parser"])
def test_stage_positions_come_from_the_first_parse(text):
    doc = loads(text, "chain.yaml")
    loader, root = _compose(text, "chain.yaml")
    exact = _precise(loader, root, "chain.yaml", text)
    for path in [("stages", sid) for sid in doc.value["stages"]] + [("stages",), ("name",)]:
        assert str(doc.key_at(path)) == str(exact.key_at(path)), path
        assert str(doc.at(path)) == str(exact.at(path)), path
    assert str(doc.key_at(("stages", "y"))) == "chain.yaml:9:3"
    assert doc._root is None, "a stage's position must not parse the text again"
    assert str(doc.at(("stages", "y", "op"))) == "chain.yaml:10:9" and doc._root is not None
    assert str(doc.at(("stages", "nope"))) == str(exact.at(("stages", "nope"))) == "chain.yaml:7:3"


def test_printed_plan_json_is_the_plan_data(tmp_path):
    path = tmp_path / "chain-é.yaml"
    path.write_text(CHAIN, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", str(path), "--format", "json", "--runs-dir", str(tmp_path / "runs")], out, err) == 0
    printed = json.loads(out.getvalue())
    import hetflow

    assert printed == hetflow.plan(path, runs_dir=tmp_path / "runs").to_json()
    assert printed["nodes"]["e1"]["origin"].endswith("chain-é.yaml:8:3")
    assert out.getvalue().startswith('{\n  "format": 2,\n  "name": "chain",\n')
    target = tmp_path / "plan.json"
    assert main(["plan", str(path), "--format", "json", "-o", str(target), "--runs-dir", str(tmp_path / "runs")],
                io.StringIO(), io.StringIO()) == 0
    assert json.loads(target.read_text(encoding="utf-8")) == printed


def test_the_passes_by_name_give_the_plan():
    m = compile_manifest(loads(CHAIN, "chain.yaml"))
    made = planner.plan(m, probe)
    placed = planner.place(planner.graph(m), planner.choose_executors(m, probe), "a")
    parted = planner.partition(placed)
    assert planner.bridge(parted) == list(made.bridges)
    assert {n: d["partition"] for n, d in parted.nodes.items()} == {n: p.partition for n, p in made.nodes.items()}


def test_cache_keys_encode_as_canonical_json():
    value = {"b": [1.5, None, True, 1e-07], "a": {"é": "x\n", "n": 2**70}, "c": []}
    assert cache._canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"),
                                                 ensure_ascii=False).encode()
    definition = {"vendor": "cpu", "nodes": [{"id": "x", "op": "ones", "args": {"shape": [4]}, "dtype": "fp32",
                                               "inputs": ()}], "inputs": ("w",), "outputs": ("x",)}
    assert cache._plain(definition) and cache._encode(definition, True) == cache._canonical(definition)
    assert dict(cache._NodeDigests(definition["nodes"], True)) == {
        "x": cache._sha(b'{"args":{"shape":[4]},"dtype":"fp32","id":"x","inputs":[],"op":"ones"}')}


def _linked_components(p, movable):
    """The components as the placement defines them, computed by networkx on every linked pair."""
    ids = {u.id for u in movable}
    link = nx.Graph()
    link.add_nodes_from(ids)
    for tensor in {t for u in movable for n in u.nodes for t in (n, *p.inputs[n])}:
        touching = [p.unit_of[tensor]] + [p.unit_of[c] for c in p.consumers[tensor]]
        inside = [t for t in touching if t in ids]
        link.add_edges_from((a, b) for a in inside for b in inside if a != b)
    return sorted(sorted(c) for c in nx.connected_components(link))


def test_placement_groups_are_the_linked_components(tmp_path):
    rng = random.Random(7)
    lines = ["version: 1", "name: random", "executors:", "  a: {vendor: cpu}", "  b: {vendor: cpu}", "stages:",
             "  s0: {op: ones, args: {shape: [8]}, executor: a}"]
    for i in range(1, 120):
        ins = sorted({f"s{rng.randrange(i)}" for _ in range(rng.choice([1, 1, 2]))})
        op = "relu" if len(ins) == 1 else "add"
        pin = f", executor: {rng.choice('ab')}" if rng.random() < 0.2 else ""
        lines.append(f"  s{i}: {{op: {op}, inputs: [{', '.join(ins)}]{pin}}}")
    lines.append("outputs: {y: s119}")
    path = tmp_path / "random.yaml"
    path.write_text("\n".join(lines) + "\n")
    m = compile_manifest(load(path))
    graph = planner.build_graph(m)
    p = planner.placement_problem(graph, planner.choose_executors(m, probe), probe, planner.CostModel())
    free = p.free_units()
    groups = placement.components(p, free)
    assert sorted(sorted(u.id for u in g) for g in groups) == _linked_components(p, free)
    assert len(groups) > 1


OUT_OF_ORDER = """\
version: 1
name: out-of-order
executors:
  a: {vendor: cpu}
  b: {vendor: cpu}
stages:
  x: {op: ones, args: {shape: [4]}, executor: a}
  z: {op: add, inputs: [y, x]}
  y: {op: relu, inputs: [x], executor: b}
  w: {op: mul, inputs: [z, z]}
  v: {op: relu, inputs: [x]}
outputs: {w: w, v: v}
"""


@pytest.mark.parametrize("source", ["chain", "out-of-order", "phases"])
def test_the_graph_pass_tables_are_what_networkx_would_build(source):
    """The graph pass fills networkx's tables itself, without networkx: the same graph, node, edge and neighbour
    order as its methods."""
    from pathlib import Path

    if source == "phases":
        m = compile_manifest(load(Path(__file__).parent.parent / "pipelines" / "zkvm_trace.yaml"))
        assert m.phases
    else:
        m = compile_manifest(loads(CHAIN if source == "chain" else OUT_OF_ORDER, f"{source}.yaml"))
    graph = planner.build_graph(m)
    made = nx.DiGraph()
    made.graph.update(graph.graph)
    made.add_nodes_from(graph.nodes.items())
    made.add_edges_from((ref, p.id) for p in m.phases.values() for ref in p.inputs)
    made.add_edges_from((ref, s.id) for s in m.stages.values() for ref in s.inputs)
    assert isinstance(graph, Graph) and "networkx" not in type(graph).__module__
    assert nx.utils.graphs_equal(graph.to_networkx(), made)
    assert list(graph) == list(made) and list(graph.edges) == list(made.edges)
    assert all(list(graph.pred[n]) == list(made.pred[n]) and list(graph.succ[n]) == list(made.succ[n]) for n in graph)
    assert all(graph.succ[u][v] is graph.pred[v][u] for u, v in graph.edges), "one attribute dict per edge"
    assert planner.execution_order(graph) == list(nx.lexicographical_topological_sort(
        made, key=lambda n: made.nodes[n]["order"]))


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_validate_and_plan_of_the_quickstart_do_not_import_networkx(command):
    """networkx's import costs as much as numpy's: a small plan whose cuts are tried split by split never pays it."""
    import subprocess
    import sys
    from pathlib import Path

    quickstart = Path(__file__).parent.parent / "examples" / "quickstart.yaml"
    code = ("import sys, io, contextlib; from hetflow.engine.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out: rc = main([sys.argv[1], sys.argv[2]])\n"
            "print(rc, 'networkx' in sys.modules, 'ml_dtypes' in sys.modules, 'min-cut' in out.getvalue() or "
            "'baseline' in out.getvalue() or sys.argv[1] == 'validate')")
    done = subprocess.run([sys.executable, "-c", code, command, str(quickstart)], capture_output=True, text=True,
                          timeout=120, cwd=str(quickstart.parent))
    assert done.stdout.split() == ["0", "False", "False", "True"], done.stderr
