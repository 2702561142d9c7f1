"""The planner: manifest -> graph -> placed -> partitioned -> bridged -> :class:`Plan`.

:func:`plan` lists the passes by name; each takes a value and returns a
new one, never mutating its input (``plan`` itself runs them on the graph
it has just built and owns, in place, which spares a copy per pass):

``build_graph(manifest)``
    a ``networkx.DiGraph``, one node per stage with its op, args, dtype,
    output ``shape`` and ``bytes`` (from the op registry's shape rule) and
    its manifest ``origin``, and one node per emulator phase with its
    ``target`` (its emulator) and what is known of it before the guest
    runs (:func:`hetflow.engine.phases.planned`: fan-out, and a witness
    table's shape and bytes, bounded by ``max_steps``); one edge per
    distinct input (the stage's ``inputs`` keep the order and repeats).
    A size is exact or an upper bound (``bound``): a stage reading a
    bounded tensor is bounded unless its shape does not depend on it.
``choose_executors(manifest, probe)``
    each declared executor gets the first vendor of its preference list
    that this machine offers (:class:`ExecutorPlan`).
``place(graph, executors)``
    every node gets one ``executor`` and a ``reason``:

    * **emulator**: a phase runs on its emulator, never moved; its
      estimate (steps at the backend's measured rate) and the import of
      its array into each candidate of a consuming stage are priced;
    * **pinned**: the stage names ``executor:``;
    * **inferred**: the executor of its largest input by bytes, the first
      input on a tie (the large tensor stays put, the small one moves);
    * **default**: no inputs and no pin: the first declared executor.
``partition(graph)``
    every stage gets a ``partition`` (phases belong to none): the maximal connected subgraphs of
    same-executor edges. If contracting them would create a cycle (A on
    e1 feeds B on e2 feeds C on e1 with A -> C), each component is split
    by *crossings*, the most executor changes on any path into the node;
    every edge between partitions then strictly increases crossings, so
    the partitions always form a DAG.
``bridges(graph)``
    one :class:`Bridge` per (tensor, destination executor), shared by all
    its consumers there; none between nodes on the same executor.

The :class:`Plan` is plain data (:mod:`hetflow.engine.plandata`):
``hetflow plan`` prints it (:mod:`hetflow.engine.planview`) and ``hetflow
run`` executes exactly it. ``Plan.to_json()`` is the documented JSON form
(``PLAN_FORMAT`` versions it).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

import networkx as nx

from hetflow.engine import phases as phaselib
from hetflow.engine import placement as placing
from hetflow.engine.costs import CostModel, human_bytes
from hetflow.engine.errors import Diagnostic, ManifestError
from hetflow.engine.manifest import Manifest, gc_paused
from hetflow.engine.plandata import PLAN_FORMAT, Bridge, ExecutorPlan, NodePlan, Partition, Plan, PlanWarning
from hetflow.engine.planview import render_dot, render_text
from hetflow.executors import Offer
from hetflow.executors import probe as default_probe
from hetflow.executors import ops as oplib
from hetflow.executors.base import Vendor

__all__ = [
    "PLAN_FORMAT",
    "ExecutorPlan",
    "NodePlan",
    "Partition",
    "Bridge",
    "Plan",
    "plan",
    "build_graph",
    "choose_executors",
    "place",
    "partition",
    "bridges",
    "is_bridged",
    "human_bytes",
    "render_text",
    "render_dot",
    "PlanWarning",
    "placement_problem",
]


def is_bridged(graph: nx.DiGraph, u: str, v: str) -> bool:
    """Whether the edge u -> v crosses executors.

    >>> g = nx.DiGraph([("x", "y")])
    >>> g.nodes["x"]["executor"], g.nodes["y"]["executor"] = "a", "b"
    >>> is_bridged(g, "x", "y")
    True
    """
    return graph.nodes[u]["executor"] != graph.nodes[v]["executor"]


def build_graph(manifest: Manifest) -> nx.DiGraph:
    """One node per stage and per emulator phase, with shapes and bytes; raises :class:`ManifestError` on shape errors.

    A phase node carries its ``phase`` declaration, its placement
    ``target`` (its emulator) and what :func:`hetflow.engine.phases.planned`
    knows of it. A ``witness`` table's rows are bounded, not known, so
    its ``shape`` and ``bytes`` are upper bounds (``bound`` is true); a
    stage that reads a bounded tensor is bounded too, unless its shape
    rule gives the same shape for one row as for the bound (``max`` over
    axis 0 of a table has as many elements whatever its rows).
    """
    graph = nx.DiGraph()
    phases = getattr(manifest, "phases", {})
    nodes = []
    seen: set[str] = set()
    planned: dict[str, dict] = {}
    for pid in phaselib.execution_order(phases):
        p = phases[pid]
        planned[pid] = info = phaselib.planned(p, manifest.emulators[p.emulator])
        seen.add(pid)
        nodes.append((pid, {"phase": p, "order": len(nodes), "target": info["target"], "planned": info}))
    in_order = True  # every input written above its stage: the file order is the execution order
    first = len(nodes)
    for i, stage in enumerate(manifest.stages.values()):
        if in_order and not seen.issuperset(stage.inputs):
            in_order = False
        seen.add(stage.id)
        nodes.append((stage.id, {"stage": stage, "order": first + i}))
    graph.add_nodes_from(nodes)
    graph.add_edges_from((ref, p.id) for p in phases.values() for ref in p.inputs)
    graph.add_edges_from((ref, stage.id) for stage in manifest.stages.values() for ref in stage.inputs)
    if in_order:
        graph.graph["execution_order"] = [n for n, _ in nodes]
    problems: list[Diagnostic] = []
    shapes: dict[str, Any] = {}
    # each bounded tensor's shape at one row: a stage whose shape is the same there and at the bound is exact
    small: dict[str, Any] = {}
    attrs = placing.node_data(graph)
    # shape rules are pure: stages alike in op and input shapes, with no args, share one answer
    alike: dict[tuple, Any] = {}
    for pid, info in planned.items():
        d = attrs[pid]
        shape = None if info["shape"] is None else tuple(info["shape"])
        shapes[pid] = d["shape"] = shape
        d["bytes"], d["bound"] = info["bytes"], info["size"] == "bound"
        if d["bound"]:
            small[pid] = (1,) + shape[1:]
    for sid in _execution_order(graph):
        d = attrs[sid]
        if "phase" in d:
            continue
        stage = d["stage"]
        op = oplib.REGISTRY[stage.op]
        in_shapes = [shapes[ref] for ref in stage.inputs]
        key = None if stage.args else (stage.op, *in_shapes)
        shape = alike.get(key, alike) if key is not None else alike
        if shape is alike:
            try:
                shape = op.shape(in_shapes, stage.args)
            except oplib.ShapeError as e:
                problems.append(Diagnostic(stage.inputs_origin if stage.inputs else stage.op_origin, f"stage {sid!r}: {e}"))
                shape = None
            else:
                if key is not None:
                    alike[key] = shape
        shapes[sid] = d["shape"] = shape
        d["bytes"] = None if shape is None else stage.dtype.nbytes(_count(shape))
        if small and shape is not None and any(ref in small for ref in stage.inputs):
            try:
                at_one = op.shape([small.get(ref, shapes[ref]) for ref in stage.inputs], stage.args)
            except oplib.ShapeError:
                at_one = None
            if at_one != shape:
                d["bound"] = True
                small[sid] = at_one
    if problems:
        raise ManifestError(problems)
    return graph


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def choose_executors(manifest: Manifest, probe: Callable[[Vendor], Offer]) -> dict[str, ExecutorPlan]:
    """First available vendor of each executor's preference list; raises :class:`ManifestError`."""
    chosen: dict[str, ExecutorPlan] = {}
    problems: list[Diagnostic] = []
    for decl in manifest.executors.values():
        offers = [probe(v) for v in decl.vendors]
        pick = next((o for o in offers if o.available), None)
        if pick is None:
            why = "; ".join(f"{o.vendor.value}: {o.reason}" for o in offers)
            problems.append(Diagnostic(decl.vendor_origin, f"executor {decl.name!r}: no vendor of [{', '.join(v.value for v in decl.vendors)}] is available on this machine ({why})"))
            continue
        skipped = [o for o in offers[: offers.index(pick)]]
        if len(decl.vendors) == 1:
            reason = f"vendor {pick.vendor.value}"
        elif skipped:
            reason = f"first available of [{', '.join(v.value for v in decl.vendors)}] (" + "; ".join(f"{o.vendor.value} unavailable: {o.reason}" for o in skipped) + ")"
        else:
            reason = f"first of [{', '.join(v.value for v in decl.vendors)}], available"
        chosen[decl.name] = ExecutorPlan(decl.name, pick.vendor, decl.device, reason,
                                         memory_limit=decl.memory_limit)
    if problems:
        raise ManifestError(problems)
    return chosen


def place(graph: nx.DiGraph, executors: Mapping[str, ExecutorPlan], first_executor: str, *,
          probe: Callable[[Vendor], Offer] | None = None, model: Any = None) -> nx.DiGraph:
    """A copy of ``graph`` with ``executor``, ``reason``, ``why`` and ``estimated_s`` on every node.

    The algorithm is :mod:`hetflow.engine.placement`'s: candidates,
    baseline, optimise (min-cut for two executors, alpha-beta swap for
    more), explain. ``graph.graph["placement"]`` records the method and
    the estimated time of the baseline and of the result;
    ``graph.graph["fallbacks"]`` the vendor-preference fallbacks.
    """
    out = graph.copy()
    _place_into(out, executors, first_executor, probe=probe or default_probe, model=model or CostModel())
    return out


def _place_into(out: nx.DiGraph, executors: Mapping[str, ExecutorPlan], first_executor: str, *,
                probe: Callable[[Vendor], Offer], model: Any) -> None:
    """:func:`place` on a graph the caller owns: it gains the attributes in place, no copy is made."""
    problem = placement_problem(out, executors, probe, model)
    start = placing.baseline(problem)
    # a gain below the model's noise would make plans flip on small edits; predictability wins there
    final, method = placing.decide(problem, start, getattr(model, "min_gain_s", 0.0))
    reasons = placing.explain(problem, final, first_executor)
    attrs, exec_s = placing.node_data(out), problem.exec_s
    for n in problem.order:
        d, e = attrs[n], final[n]
        d["executor"] = e
        d["reason"], d["why"] = reasons[n]
        d["estimated_s"] = exec_s[n][e]
    out.graph["vendors"] = problem.vendor
    out.graph["model"] = model
    baseline_s = placing.total_cost(problem, start)
    out.graph["placement"] = {
        "method": method,
        "baseline_s": baseline_s,
        "total_s": baseline_s if final == start else placing.total_cost(problem, final),
    }
    out.graph["fallbacks"] = [(u.nodes, u.fallback) for u in problem.units if u.fallback]


def placement_problem(graph: nx.DiGraph, executors: Mapping[str, ExecutorPlan],
                      probe: Callable[[Vendor], Offer], model: Any) -> placing.Problem:
    """The placement problem of a built graph: units, candidates, execution estimates, consumers.

    The cost model is taken to be a pure function of its arguments: stages
    with the same op, shapes, dtype and vendor share one estimate.
    """
    out = graph
    order = _execution_order(out)
    offers = {name: probe(e.vendor) for name, e in executors.items()}
    units, unit_of = placing.candidates(out, order, executors, offers)
    vendor = {name: e.vendor for name, e in executors.items()}
    exec_s: dict[str, dict[str, float]] = {}
    attrs = placing.node_data(out)
    phase_s = getattr(model, "phase_s", None)
    for n in order:
        d = attrs[n]
        if "phase" in d:
            # a phase has one place to run: its estimate is a constant of the plan, an upper bound from max_steps
            info = d["planned"]
            vendor[d["target"]] = None
            exec_s[n] = {d["target"]: phase_s(d["phase"].phase, info["backend"], info["steps_max"], info["tasks_max"])
                         if phase_s is not None else 0.0}
    shape_of = {n: attrs[n]["shape"] for n in order}
    # Stages alike in op, shapes, dtype and candidates share one row (rows are never written after).
    # Keyed by plain strings and tuples: an Enum hashes through a Python-level method.
    rows: dict[tuple, dict[str, float]] = {}
    own_cost: dict[str, bool] = {}
    for n in order:
        d = attrs[n]
        if "phase" in d:
            continue
        stage = d["stage"]
        shapes = tuple([shape_of[r] for r in stage.inputs])
        cands = units[unit_of[n]].candidates
        user_cost = own_cost.get(stage.op)
        if user_cost is None:
            user_cost = own_cost[stage.op] = oplib.REGISTRY[stage.op].cost_rule is not None
        key = (stage.op, shapes, d["shape"], stage.dtype.value, *cands) + ((n,) if user_cost else ())
        row = rows.get(key)
        if row is None:
            more = {"args": stage.args} if user_cost else {}
            row = rows[key] = {e: model.exec_s(stage.op, list(shapes), d["shape"], stage.dtype, vendor[e], **more)
                               for e in cands}
        exec_s[n] = row
    succ = getattr(out, "_succ", None)  # networkx's adjacency table: no view made per node
    consumers = ({n: list(nbrs) for n, nbrs in succ.items()} if type(succ) is dict
                 else {n: list(nbrs) for n, nbrs in out.adjacency()})
    return placing.Problem(out, order, units, unit_of, vendor, exec_s, consumers, model)


def partition(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``graph`` with ``partition`` (an id ``p0``, ``p1``, ... in execution order) on every node."""
    out = graph.copy()
    _partition_into(out)
    return out


def _partition_into(out: nx.DiGraph) -> None:
    """:func:`partition` on a graph the caller owns, in place."""
    attrs = placing.node_data(out)
    if any("phase" in d for d in attrs.values()):
        # phases run on their emulators, in no partition; the partitions are the stages' own
        attrs = {n: d for n, d in attrs.items() if "phase" not in d}
        out = out.subgraph(attrs).copy()
    ex = {n: d["executor"] for n, d in attrs.items()}
    same = [(u, v) for u, v in _edges(out) if ex[u] == ex[v]]
    groups = placing.roots(out, same)
    if not _contracts_to_dag(out, groups):
        crossings: dict[str, int] = {}
        pred = out.pred
        for n in nx.topological_sort(out):
            crossings[n] = max((crossings[p] + (ex[p] != ex[n]) for p in pred[n]), default=0)
        split = nx.Graph()
        split.add_nodes_from(out.nodes)
        split.add_edges_from((u, v) for u, v in same if crossings[u] == crossings[v])
        groups = {n: i for i, comp in enumerate(nx.connected_components(split)) for n in comp}
    names: dict[Any, str] = {}
    for n in _execution_order(out):
        if n not in groups:
            continue
        if groups[n] not in names:
            names[groups[n]] = f"p{len(names)}"
    for n, d in attrs.items():
        d["partition"] = names[groups[n]]


def _edges(graph: nx.Graph) -> Iterator[tuple[str, str]]:
    """The graph's edges, read from its adjacency. A graph's ``edges`` view refers back to the graph,
    so once asked for it the graph is freed only by the cyclic GC, which on a large plan costs more
    than planning it."""
    return ((u, v) for u, nbrs in graph.adjacency() for v in nbrs)


def _contracts_to_dag(graph: nx.DiGraph, groups: Mapping[str, Any]) -> bool:
    """Whether contracting each group to one node leaves a DAG."""
    quotient = nx.DiGraph()
    quotient.add_nodes_from(set(groups.values()))
    quotient.add_edges_from((groups[u], groups[v]) for u, v in _edges(graph) if groups[u] != groups[v])
    return nx.is_directed_acyclic_graph(quotient)


def _execution_order(graph: nx.DiGraph) -> list[str]:
    # every pass keeps the stages and edges, so the order computed once holds for the copies too
    cached = graph.graph.get("execution_order")
    if cached is not None and len(cached) == len(graph):
        return cached
    attrs = graph.nodes
    written = sorted(graph, key=lambda n: attrs[n]["order"])
    pos = {n: i for i, n in enumerate(written)}
    if all(pos[u] < pos[v] for u, v in _edges(graph)):
        # Every input is written above its stage. The lexicographic sort below picks, at each step,
        # the earliest-written stage whose inputs are done, which is then always the next one written.
        order = written
    else:
        order = list(nx.lexicographical_topological_sort(graph, key=lambda n: attrs[n]["order"]))
    graph.graph["execution_order"] = order
    return order


def bridges(graph: nx.DiGraph) -> list[Bridge]:
    """One bridge per (tensor, destination executor), consumers in execution order.

    The kind and estimate come from the cost model's link for the vendor
    pair when ``graph`` was placed by :func:`place`.
    """
    found: dict[tuple[str, str], list[str]] = {}
    execution = _execution_order(graph)
    attrs = placing.node_data(graph)
    for v in execution:
        if "phase" in attrs[v]:
            continue  # a phase reads only phases of its own emulator
        dest = attrs[v]["executor"]
        # the graph's predecessors of v, in slot order, without a view per node
        for u in dict.fromkeys(attrs[v]["stage"].inputs):
            if attrs[u]["executor"] != dest:
                found.setdefault((u, dest), []).append(v)
    order = {n: i for i, n in enumerate(execution)}
    vendors = graph.graph.get("vendors")
    model = graph.graph.get("model")
    out = []
    for (tensor, dest), consumers in sorted(found.items(), key=lambda kv: (order[kv[0][0]], order[kv[1][0]])):
        src = attrs[tensor]["executor"]
        nbytes = attrs[tensor]["bytes"]
        from_phase = placing.is_phase(attrs[tensor])
        extra: dict[str, Any] = {"kind": phaselib.EMULATOR_BRIDGE} if from_phase else {}
        if vendors is not None and model is not None:
            if from_phase:
                link = model.import_link(vendors[dest]) if hasattr(model, "import_link") else None
                extra.update(link=link.description if link else "", estimated_s=placing.import_s(model, nbytes, vendors[dest]))
            else:
                link = model.link(vendors[src], vendors[dest])
                extra = {"kind": link.kind, "link": link.description,
                         "estimated_s": model.transfer_s(nbytes, vendors[src], vendors[dest])}
        out.append(Bridge(
            id=f"{tensor}@{dest}", tensor=tensor, source=src, destination=dest,
            bytes=nbytes, consumers=tuple(consumers), bound=attrs[tensor].get("bound", False), **extra,
        ))
    return out


def _partitions(graph: nx.DiGraph, outputs: Mapping[str, str]) -> tuple[Partition, ...]:
    members: dict[str, list[str]] = {}
    attrs = placing.node_data(graph)
    for n in _execution_order(graph):
        if "phase" not in attrs[n]:
            members.setdefault(attrs[n]["partition"], []).append(n)
    persisted = set(outputs.values())
    succ = dict(graph.adjacency())
    result = []
    for pid in sorted(members, key=lambda p: int(p[1:])):
        nodes = members[pid]
        inside = set(nodes)
        inputs: dict[str, None] = {}
        for n in nodes:
            for ref in attrs[n]["stage"].inputs:
                # a phase's array enters through its bridge's import (the plan's phase_inputs), not a partition
                if ref not in inside and "phase" not in attrs[ref]:
                    inputs[ref] = None
        outs = [n for n in nodes if n in persisted or any(s not in inside for s in succ[n])]
        decls = [attrs[n]["stage"] for n in nodes]
        timeouts = [d.timeout for d in decls if d.timeout is not None]
        result.append(Partition(
            pid, attrs[nodes[0]]["executor"], tuple(nodes), tuple(inputs), tuple(outs),
            retries=max(d.retries for d in decls), timeout=sum(timeouts) if timeouts else None,
        ))
    return tuple(result)


def plan(manifest: Manifest, probe: Callable[[Vendor], Offer], *, model: Any = None) -> Plan:
    """Run the planner's passes over ``manifest``; raises :class:`ManifestError`.

    ``model`` replaces the cost model (:class:`~hetflow.engine.costs.CostModel`).
    """
    with gc_paused():
        return _plan(manifest, probe, model or CostModel())


def _plan(manifest: Manifest, probe: Callable[[Vendor], Offer], model: Any) -> Plan:
    executors = choose_executors(manifest, probe)
    # the graph is this function's own, so the passes annotate it in place rather than copy it
    parted = build_graph(manifest)
    _place_into(parted, executors, first_executor=next(iter(manifest.executors)), probe=probe, model=model)
    _check_dtypes(parted, executors, probe)
    _partition_into(parted)
    crossing = bridges(parted)
    nodes = {
        n: NodePlan(
            id=n, op=d["stage"].op, executor=d["executor"], reason=d["reason"], partition=d["partition"],
            shape=d["shape"], dtype=d["stage"].dtype, bytes=d["bytes"], origin=d["stage"].origin,
            why=d["why"], estimated_s=d["estimated_s"], bound=d.get("bound", False),
        )
        for n, d in ((n, parted.nodes[n]) for n in manifest.stages)
    }
    parts = _partitions(parted, manifest.outputs)
    memory = _check_memory(parts, parted, manifest, executors, probe)
    phase_inputs = _phase_inputs(manifest, parts)
    phases = _phase_plans(manifest, parted)
    placement = parted.graph["placement"]
    estimate = {
        "model": model.describe() if hasattr(model, "describe") else {"name": getattr(model, "name", type(model).__name__)},
        "placement": placement["method"],
        "baseline_s": placement["baseline_s"],
        "total_s": placement["total_s"],
        "exec_s": sum(n.estimated_s or 0.0 for n in nodes.values()),
        "bridges_s": sum(b.estimated_s or 0.0 for b in crossing),
        **({"phases_s": sum(p["estimated_s"] or 0.0 for p in phases.values()), "phases_bound": True} if phases else {}),
    }
    return Plan(
        name=manifest.name, digest=manifest.digest, executors=executors, nodes=nodes,
        partitions=parts, bridges=tuple(crossing),
        outputs=dict(manifest.outputs),
        stage_args={s.id: s.args for s in manifest.stages.values()},
        stage_inputs={s.id: s.inputs for s in manifest.stages.values()},
        warnings=tuple(_warnings(manifest, executors, parted, crossing, estimate, model)),
        estimate=estimate, memory=memory,
        phases=phases,
        emulators={e.name: e.to_json() for e in getattr(manifest, "emulators", {}).values()},
        phase_inputs=phase_inputs, phase_outputs=dict(getattr(manifest, "phase_outputs", {})),
    )


def _phase_inputs(manifest: Manifest, parts: tuple[Partition, ...]) -> dict[str, tuple[str, ...]]:
    """The phase arrays each partition imports (through its bridge from the phase's emulator)."""
    phases = getattr(manifest, "phases", {})
    inputs: dict[str, tuple[str, ...]] = {}
    for part in parts:
        refs = [r for n in part.nodes for r in manifest.stages[n].inputs if r in phases]
        if refs:
            inputs[part.id] = tuple(dict.fromkeys(refs))
    return inputs


def _phase_plans(manifest: Manifest, graph: nx.DiGraph) -> dict[str, dict]:
    """Each phase as the plan lists it: its declaration, where it runs, what it yields and who reads it.

    ``outputs`` are the phase's fields (``array`` for a witness table);
    ``consumers`` the stages that read its array, ``persisted`` the
    ``outputs:`` entries that keep it; ``estimated_s`` is an upper bound
    (``max_steps`` at the backend's measured rate).
    """
    attrs = placing.node_data(graph)
    persisted: dict[str, list[str]] = {}
    for name, (pid, _) in getattr(manifest, "phase_outputs", {}).items():
        persisted.setdefault(pid, []).append(name)
    out: dict[str, dict] = {}
    for pid in phaselib.execution_order(getattr(manifest, "phases", {})):
        d = attrs[pid]
        p = d["phase"]
        out[pid] = {
            **p.to_json(), **d["planned"],
            "outputs": (["array"] if p.kind.array else []) + list(p.kind.fields),
            "consumers": [c for c in graph.successors(pid) if not placing.is_phase(attrs[c])],
            "phase_consumers": [c for c in graph.successors(pid) if placing.is_phase(attrs[c])],
            "persisted": persisted.get(pid, []),
            "reason": d["reason"], "estimated_s": d["estimated_s"],
        }
    return out


def _check_memory(parts: tuple[Partition, ...], graph: nx.DiGraph, manifest: Manifest,
                  executors: Mapping[str, ExecutorPlan], probe: Callable[[Vendor], Offer]) -> dict[str, dict]:
    """Each partition's peak live bytes against its executor's memory; raises :class:`ManifestError`.

    A partition runs as one ``execute`` call that keeps every value it
    computes until it returns, so its peak is its inputs plus all its
    stages' outputs. The capacity is the executor's ``memory:`` when
    declared, else its device's detected ``memory_bytes``.
    """
    out: dict[str, dict] = {}
    problems: list[Diagnostic] = []
    # a bounded size (read from a witness table) may be far above what the guest yields: it is shown, never refused
    nbytes = {n: d["bytes"] for n, d in graph.nodes(data=True) if not d.get("bound")}
    bounded = {n: d["bytes"] for n, d in graph.nodes(data=True) if d.get("bound")}
    for part in parts:
        members = list(part.inputs) + list(part.nodes)
        peak = sum(nbytes.get(n) or 0 for n in members)
        upper = sum(bounded.get(n) or 0 for n in members)
        decl = manifest.executors[part.executor]
        capacity, source = getattr(decl, "memory_bytes", None), "declared"
        if capacity is None:
            devices = probe(executors[part.executor].vendor).devices
            device = devices[decl.device] if 0 <= decl.device < len(devices) else None
            capacity, source = getattr(device, "memory_bytes", None), "detected"
        out[part.id] = {"peak_bytes": peak, "memory_bytes": capacity, "memory_source": source if capacity else None,
                        **({"peak_bound_bytes": peak + upper} if upper else {})}
        if capacity is not None and peak > capacity:
            biggest = max(part.nodes, key=lambda n: nbytes.get(n) or 0)
            where = f"declared at {decl.memory_origin}" if source == "declared" and decl.memory_origin else source
            problems.append(Diagnostic(graph.nodes[biggest]["stage"].origin, (
                f"partition {part.id} on executor {part.executor!r} holds {human_bytes(peak)} of live activations at its "
                f"peak ({len(part.inputs)} inputs and {len(part.nodes)} stage outputs, the largest {biggest!r} at "
                f"{human_bytes(graph.nodes[biggest]['bytes'])}), more than the executor's {human_bytes(capacity)} ({where}); "
                f"pin some of these stages to another executor, or raise the executor's memory:")))
    if problems:
        raise ManifestError(problems)
    return out


DOMINANT_BRIDGE = 0.5
"""A bridge whose bytes alone take more than this share of the estimated time is warned about."""


def _warnings(manifest: Manifest, executors: Mapping[str, ExecutorPlan], graph: nx.DiGraph,
              crossing: list[Bridge], estimate: Mapping[str, Any], model: Any) -> list[PlanWarning]:
    found: list[PlanWarning] = []
    for e in executors.values():
        decl = manifest.executors[e.name]
        if len(decl.vendors) > 1 and e.vendor is not decl.vendors[0]:
            found.append(PlanWarning("vendor-fallback", (
                f"executor {e.name!r} runs on {e.vendor.value}, not its preferred {decl.vendors[0].value} "
                f"({e.reason}); its stages fell back with it"), decl.vendor_origin))
    for nodes, text in graph.graph.get("fallbacks", []):
        stage = graph.nodes[nodes[0]]["stage"]
        found.append(PlanWarning("vendor-fallback", text, stage.vendor_origin or stage.origin))
    total = estimate.get("total_s") or 0.0
    vendors = graph.graph.get("vendors", {})
    for b in crossing:
        if not b.bytes or not total or vendors.get(b.source) is None:
            continue
        moving = b.bytes / model.link(vendors[b.source], vendors[b.destination]).bytes_per_s
        if moving > DOMINANT_BRIDGE * total:
            found.append(PlanWarning("dominant-bridge", (
                f"bridge {b.id} moves {human_bytes(b.bytes)} of {b.tensor!r} from {b.source} to {b.destination}: "
                f"{placing.format_s(moving)}, {100 * moving / total:.0f}% of the estimated {placing.format_s(total)}; "
                f"run {b.tensor!r} and its consumers on one executor (executor: or colocate_with:) to avoid it"),
                graph.nodes[b.tensor]["stage"].origin))
    return found


def _check_dtypes(graph: nx.DiGraph, executors: Mapping[str, ExecutorPlan], probe: Callable[[Vendor], Offer]) -> None:
    problems = []
    for n, d in graph.nodes(data=True):
        if "phase" in d:
            continue
        ex = executors[d["executor"]]
        supported = probe(ex.vendor).dtypes
        dtype = d["stage"].dtype
        if dtype not in supported:
            problems.append(Diagnostic(
                d["stage"].origin,
                f"stage {n!r} produces {dtype.value}, which executor {ex.name!r} ({ex.vendor.value}) does not support "
                f"(supported: {', '.join(x.value for x in supported)})",
            ))
    if problems:
        raise ManifestError(problems)


