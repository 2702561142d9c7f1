"""The graph pass: a manifest -> a :class:`~hetflow.engine.adjacency.Graph` of its stages and emulator phases
(networkx's own tables; see :mod:`hetflow.engine.adjacency`).

:func:`build_graph` makes one node per stage, with its op, args, dtype,
output ``shape`` and ``bytes`` (from the op registry's shape rule) and
its manifest ``origin``, and one node per emulator phase with its
``target`` (its emulator) and what is known of it before the guest runs
(:func:`hetflow.engine.manifest.phasedecl.planned`: fan-out, and a witness table's
shape and bytes, bounded by ``max_steps``); one edge per distinct input
(the stage's ``inputs`` keep the order and repeats). A size is exact or
an upper bound (``bound``): a stage reading a bounded tensor is bounded
unless its shape does not depend on it. :func:`execution_order` is the
order every later pass walks the nodes in.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from hetflow.engine.manifest import phasedecl as phaselib
from hetflow.engine.plan import placement as placing
from hetflow.engine.manifest import shapes
from hetflow.engine.adjacency import Graph
from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.semantics import Manifest

__all__ = ["build_graph", "execution_order", "edges", "successors", "predecessors", "is_bridged", "check",
           "beyond_declared_memory"]


def is_bridged(graph: Graph, u: str, v: str) -> bool:
    """Whether the edge u -> v crosses executors.

    >>> g = Graph([("x", "y")])
    >>> g.nodes["x"]["executor"], g.nodes["y"]["executor"] = "a", "b"
    >>> is_bridged(g, "x", "y")
    True
    """
    return graph.nodes[u]["executor"] != graph.nodes[v]["executor"]


def build_graph(manifest: Manifest) -> Graph:
    """One node per stage and per emulator phase, with shapes and bytes; raises :class:`ManifestError` on shape errors.

    The shapes are the shape pass's (:mod:`hetflow.engine.manifest.shapes`), kept
    on the manifest by the validate pass; a manifest made otherwise has
    them inferred here, by the same pass.

    A phase node carries its ``phase`` declaration, its placement
    ``target`` (its emulator) and what :func:`hetflow.engine.manifest.phasedecl.planned`
    knows of it. A ``witness`` table's rows are bounded, not known, so
    its ``shape`` and ``bytes`` are upper bounds (``bound`` is true); a
    stage that reads a bounded tensor is bounded too, unless its shape
    rule gives the same shape for one row as for the bound (``max`` over
    axis 0 of a table has as many elements whatever its rows).
    """
    graph = Graph()
    phases = getattr(manifest, "phases", {})
    phase_order = phaselib.execution_order(phases)
    # The nodes and edges go straight into the new graph's own tables (``_node``, ``_succ`` and ``_pred``,
    # laid out as networkx lays them out), as ``add_edge`` would leave them, one attribute dict per edge
    # shared by both tables; a call per item is a cost a large plan feels.
    attrs, succ, pred = graph._node, graph._succ, graph._pred
    seen: set[str] = set()
    planned: dict[str, dict] = {}
    for i, pid in enumerate(phase_order):
        p = phases[pid]
        planned[pid] = info = phaselib.planned(p, manifest.emulators[p.emulator])
        seen.add(pid)
        attrs[pid] = {"phase": p, "order": i, "target": info["target"], "planned": info}
        succ[pid], pred[pid] = {}, {}
    for p in phases.values():
        for ref in p.inputs:
            if ref not in succ:  # not declared (validation reports it): a bare node, as networkx would add
                attrs[ref], succ[ref], pred[ref] = {}, {}, {}
            succ[ref][p.id] = pred[p.id][ref] = {}
    in_order = True  # every input written above its stage: the file order is the execution order
    first = len(phase_order)
    later: list[Any] = []  # the stages from the first one written above an input of its own
    for i, stage in enumerate(manifest.stages.values()):
        sid = stage.id
        ins = stage.inputs
        if in_order and not seen.issuperset(ins):
            in_order = False
        attrs[sid] = {"stage": stage, "order": first + i}
        succ[sid], pred[sid] = {}, {}
        if in_order:
            seen.add(sid)
            into = pred[sid]
            for ref in ins:  # in file order each edge can be made with its stage
                succ[ref][sid] = into[ref] = {}
        else:
            later.append(stage)
    for stage in later:
        into = pred[stage.id]
        for ref in stage.inputs:
            if ref not in succ:  # not declared (validation reports it): a bare node, as networkx would add
                attrs[ref], succ[ref], pred[ref] = {}, {}, {}
            succ[ref][stage.id] = into[ref] = {}
    if in_order:
        graph.graph["execution_order"] = [*phase_order, *manifest.stages]
    table = getattr(manifest, "shapes", None)
    if table is None:  # a manifest the validate pass did not make: the shape pass runs here
        table = shapes.infer(manifest.stages, manifest.stages if in_order else execution_order(graph), planned)
        if table.problems:
            raise ManifestError(table.problems)
    shape_of, nbytes_of, small = table.shape, table.nbytes, table.small
    for pid, info in planned.items():
        d = attrs[pid]
        d["shape"], d["bytes"], d["bound"] = shape_of[pid], info["bytes"], info["size"] == "bound"
    for sid in manifest.stages:
        d = attrs[sid]
        d["shape"] = shape_of[sid]
        d["bytes"] = nbytes_of[sid]
        if sid in small:
            d["bound"] = True
    return graph


def edges(graph: Any) -> Iterator[tuple[str, str]]:
    """The graph's edges, read from its adjacency. A graph's ``edges`` view refers back to the graph,
    so once asked for it the graph is freed only by the cyclic GC, which on a large plan costs more
    than planning it."""
    return ((u, v) for u, nbrs in successors(graph).items() for v in nbrs)


def successors(graph: Any) -> Mapping[str, Mapping[str, Any]]:
    """Each node's successors, as a mapping of node to its neighbours' mapping; read it, never change it.

    It is the graph's own adjacency table (networkx's ``_succ``, or
    ``_adj`` of an undirected graph, what its views read): a view made
    per node costs more than the lookups it serves on a large plan.
    """
    table = getattr(graph, "_succ", None)
    if type(table) is not dict:
        table = getattr(graph, "_adj", None)
    return table if type(table) is dict else dict(graph.adjacency())


def predecessors(graph: Any) -> Mapping[str, Mapping[str, Any]]:
    """Each node's predecessors, as :func:`successors` gives successors: the graph's own table
    (networkx's ``_pred``); read it, never change it."""
    table = getattr(graph, "_pred", None)
    return table if type(table) is dict else {n: dict.fromkeys(graph.predecessors(n)) for n in graph}


def execution_order(graph: Graph) -> list[str]:
    # every pass keeps the stages and edges, so the order computed once holds for the copies too
    cached = graph.graph.get("execution_order")
    if cached is not None and len(cached) == len(graph):
        return cached
    attrs = graph.nodes
    written = sorted(graph, key=lambda n: attrs[n]["order"])
    pos = {n: i for i, n in enumerate(written)}
    if all(pos[u] < pos[v] for u, v in edges(graph)):
        # Every input is written above its stage. The lexicographic sort below picks, at each step,
        # the earliest-written stage whose inputs are done, which is then always the next one written.
        order = written
    else:
        import networkx as nx

        whole = graph.to_networkx() if isinstance(graph, Graph) else graph
        order = list(nx.lexicographical_topological_sort(whole, key=lambda n: attrs[n]["order"]))
    graph.graph["execution_order"] = order
    return order


def check(manifest: Manifest) -> list[Any]:
    """What the plan knows of ``manifest`` on any machine: each stage against every vendor its executors may
    resolve to (:func:`hetflow.engine.plan.candidates.check_vendors`); returns the warnings, raises
    :class:`ManifestError` with the errors.

    What only a machine says (which vendors it offers, its devices'
    memory) is left to :func:`hetflow.engine.plan.planner.plan`; the
    partitions known without it are
    :func:`hetflow.engine.plan.partitioning.check`'s. It lives with
    the graph pass, not the planner, so ``hetflow validate`` loads none of
    the later passes' modules.
    """
    from hetflow.engine.plan.candidates import check_vendors, machines
    from hetflow.executors.base import Vendor

    anywhere = all(v is Vendor.cpu for m in machines(manifest.executors) for v in m.values()) and not any(
        s.vendors for s in manifest.stages.values())
    graph = None if anywhere else build_graph(manifest)
    errors, warnings = check_vendors(graph, manifest.executors, execution_order(graph) if graph is not None else [])
    errors = [*errors, *beyond_declared_memory(manifest, graph)]
    if errors:
        raise ManifestError(errors)
    return warnings


def beyond_declared_memory(manifest: Manifest, graph: Graph | None) -> list[Any]:
    """A stage that cannot fit the ``memory:`` declared by every executor it may run on, whatever the machine.

    While a stage runs, its partition holds at least the stage's output
    and its inputs (a partition keeps every value it computes, and takes
    its inputs from other partitions whole), so that sum is a floor under
    the peak that :func:`hetflow.engine.plan.planner.plan` weighs against
    the executor's memory. A pinned stage may run on its executor only;
    any other on any executor, so it is refused only when every executor
    declares a memory and the largest is below its floor. Sizes that are
    bounds, not known (read from a witness table), are left out, as the
    plan leaves them out; a phase's array reaches a partition through its
    own bridge, not as a partition's input.
    """
    from hetflow.engine.errors import Diagnostic

    declared = {name: e.memory_bytes for name, e in manifest.executors.items() if e.memory_bytes is not None}
    if not declared:
        return []
    table = getattr(manifest, "shapes", None)
    if table is not None:
        nbytes, bounded = table.nbytes, table.small
    else:
        graph = graph if graph is not None else build_graph(manifest)
        nbytes = {n: d.get("bytes") for n, d in graph.nodes.items()}
        bounded = {n for n, d in graph.nodes.items() if d.get("bound")}
    phases = getattr(manifest, "phases", {})
    roomiest = max(declared, key=declared.get) if len(declared) == len(manifest.executors) else None
    problems = []
    for sid, stage in manifest.stages.items():
        where = stage.executor if stage.executor is not None else roomiest
        if where not in declared:
            continue
        held = [] if sid in bounded else [(sid, nbytes.get(sid) or 0)]
        held += [(ref, nbytes.get(ref) or 0) for ref in dict.fromkeys(stage.inputs)
                 if ref not in phases and ref not in bounded]
        need = sum(n for _, n in held)
        if need <= declared[where]:
            continue
        from hetflow.engine.plan.costs import human_bytes

        decl = manifest.executors[where]
        at = f" at {decl.memory_origin}" if decl.memory_origin else ""
        whose = (f"the {human_bytes(declared[where])} executor {where!r} declares{at}" if stage.executor is not None
                 else f"any executor declares (the most, {human_bytes(declared[where])}, by executor {where!r}{at})")
        (_, out), *ins = held if held and held[0][0] == sid else [(sid, 0), *held]
        parts = f"its output {human_bytes(out)}" + (
            " and its inputs " + ", ".join(f"{name!r} {human_bytes(n)}" for name, n in ins) if ins else "")
        problems.append(Diagnostic(stage.origin, (
            f"stage {sid!r} needs at least {human_bytes(need)} of live activations while it runs ({parts}), more than "
            f"{whose}; raise that memory: or make the stage's tensors smaller")))
    return problems
