"""The planner: manifest -> graph -> placed -> partitioned -> bridged -> :class:`Plan`.

:func:`plan` runs the passes by name; each takes a value and returns a
new one, never mutating its input (``plan`` itself runs them on the graph
it has just built and owns, in place, which spares a copy per pass). Each
pass is a function of this module, the name of the design's step:

``graph(manifest)``
    the graph pass, :func:`hetflow.engine.plan.plangraph.build_graph` (also
    here as ``build_graph``): one node per stage and per emulator phase,
    with shapes and bytes from the op registry's shape rules (exact, or
    an upper bound where a witness table's rows are), one edge per
    distinct input.
``choose_executors(manifest, probe)``
    each declared executor gets the first vendor of its preference list
    that this machine offers (:class:`ExecutorPlan`).
``place(graph, executors, first_executor)``
    the place pass, :mod:`hetflow.engine.plan.placement`'s algorithm (the
    units, candidates and costs in :mod:`hetflow.engine.plan.candidates`):
    every node gets one ``executor`` and a ``reason``:

    * **emulator**: a phase runs on its emulator, never moved; its
      estimate (steps at the backend's measured rate) and the import of
      its array into each candidate of a consuming stage are priced;
    * **pinned**: the stage names ``executor:``;
    * **inferred**: the executor of its largest input by bytes, the first
      input on a tie (the large tensor stays put, the small one moves);
    * **default**: no inputs and no pin: the first declared executor;
    * **cost**: the cost model's estimate says another placement is
      faster by more than its noise.
``partition(graph)``
    the partition pass, :func:`hetflow.engine.plan.partitioning.partition`:
    every stage gets a ``partition``, the maximal connected subgraphs of
    same-executor edges, split where contracting them would make a cycle.
``bridge(graph)``
    the bridge pass, :func:`hetflow.engine.plan.partitioning.bridges` (also
    here as ``bridges``): one :class:`Bridge` per (tensor, destination
    executor), shared by all its consumers there; none between nodes on
    the same executor.

The :class:`Plan` is plain data (:mod:`hetflow.engine.plan.plandata`):
``hetflow plan`` prints it (:mod:`hetflow.engine.plan.planview`) and ``hetflow
run`` executes exactly it. ``Plan.to_json()`` is the documented JSON form
(``PLAN_FORMAT`` versions it).

Examples
--------
>>> from hetflow.engine.manifest.validate import compile_manifest, loads
>>> from hetflow.executors import probe
>>> m = compile_manifest(loads('''
... version: 1
... name: two
... executors: {a: {vendor: cpu}, b: {vendor: cpu}}
... stages:
...   x: {op: ones, args: {shape: [4]}, executor: a}
...   y: {op: relu, inputs: [x], executor: b}
... outputs: {y: y}
... ''', "two.yaml"))
>>> placed = place(graph(m), choose_executors(m, probe), "a")
>>> [(b.tensor, b.source, b.destination) for b in bridge(partition(placed))]
[('x', 'a', 'b')]
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from hetflow.engine.manifest import phasedecl as phaselib
from hetflow.engine.plan import placement as placing
from hetflow.engine.plan.candidates import remedy
from hetflow.engine.adjacency import Graph
from hetflow.engine.plan.costs import (CostModel, human_bytes, interpreter_loaded, memory_bound_warning, split_capacity,
                                  split_exec_s)
from hetflow.engine.errors import Diagnostic, ManifestError
from hetflow.engine.manifest.loader import frozen_instance
from hetflow.engine.manifest.validate import Manifest, gc_paused
from hetflow.engine.plan.partitioning import (bridges, check, declared_where, over_memory, partition, partition_into,
                                             partitions_of, peak_bytes)
from hetflow.engine.plan.plandata import PLAN_FORMAT, Bridge, ExecutorPlan, NodePlan, Partition, Plan, PlanWarning
from hetflow.engine.plan.plangraph import beyond_declared_memory, build_graph, execution_order, is_bridged, successors
from hetflow.engine.plan.planview import render_dot, render_text
from hetflow.executors import Offer
from hetflow.executors import probe as default_probe
from hetflow.executors import ops as oplib
from hetflow.executors.base import Vendor
from hetflow.executors.probing import device_problem

__all__ = [
    "PLAN_FORMAT",
    "ExecutorPlan",
    "NodePlan",
    "Partition",
    "Bridge",
    "Plan",
    "plan",
    "graph",
    "build_graph",
    "choose_executors",
    "place",
    "partition",
    "bridge",
    "bridges",
    "is_bridged",
    "human_bytes",
    "render_text",
    "render_dot",
    "PlanWarning",
    "placement_problem",
    "check",
]


def graph(manifest: Manifest) -> Graph:
    """The graph pass: :func:`~hetflow.engine.plan.plangraph.build_graph`; raises :class:`ManifestError` on shape errors."""
    return build_graph(manifest)


def bridge(graph: Graph) -> list[Bridge]:
    """The bridge pass: :func:`~hetflow.engine.plan.partitioning.bridges` of a placed, partitioned graph."""
    return bridges(graph)


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
        missing = device_problem(pick.vendor, decl.device)
        if missing is not None:  # a device index this machine lacks: refused here, where it has a line
            problems.append(Diagnostic(decl.origin, f"executor {decl.name!r} ({pick.vendor.value}): {missing}"))
            continue
        chosen[decl.name] = ExecutorPlan(decl.name, pick.vendor, decl.device, reason,
                                         memory_limit=decl.memory_limit)
    if problems:
        raise ManifestError(problems)
    return chosen


def place(graph: Graph, executors: Mapping[str, ExecutorPlan], first_executor: str, *,
          probe: Callable[[Vendor], Offer] | None = None, model: Any = None) -> Graph:
    """A copy of ``graph`` with ``executor``, ``reason``, ``why`` and ``estimated_s`` on every node.

    The algorithm is :mod:`hetflow.engine.plan.placement`'s: candidates,
    baseline, optimise (min-cut for two executors, alpha-beta swap for
    more), explain. ``graph.graph["placement"]`` records the method and
    the estimated time of the baseline and of the result;
    ``graph.graph["fallbacks"]`` the vendor-preference fallbacks.
    """
    out = graph.copy()
    _place_into(out, executors, first_executor, probe=probe or default_probe, model=model or CostModel())
    return out


def _place_into(out: Graph, executors: Mapping[str, ExecutorPlan], first_executor: str, *,
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


def placement_problem(graph: Graph, executors: Mapping[str, ExecutorPlan],
                      probe: Callable[[Vendor], Offer], model: Any) -> placing.Problem:
    """The placement problem of a built graph: units, candidates, execution estimates, consumers.

    The cost model is taken to be a pure function of its arguments: stages
    with the same op, shapes, dtype and vendor share one estimate.
    """
    out = graph
    order = execution_order(out)
    offers = {name: probe(e.vendor) for name, e in executors.items()}
    units, unit_of = placing.candidates(out, order, executors, offers)
    vendor = {name: e.vendor for name, e in executors.items()}
    # executors over several devices (devices: [...]): a stage there is priced by its slowest piece
    split = {name: e.device for name, e in executors.items() if getattr(e.device, "indexes", 0) != 0}
    exec_s: dict[str, dict[str, float]] = {}
    attrs = placing.node_data(out)
    phase_s = getattr(model, "phase_s", None)
    # the first phase that runs the compiled interpreter pays its load, unless this process has it already
    load_s = getattr(model, "load_s", None)
    if load_s is not None and interpreter_loaded():
        load_s = None
    # One walk reads everything the optimiser looks up: each node's position, distinct inputs, bytes and
    # execution row. Stages alike in op, shapes, dtype and candidates share one row (rows are never
    # written after), keyed by plain strings, tuples and numbers: an Enum hashes through a Python-level method.
    pos: dict[str, int] = {}
    inputs: dict[str, tuple[str, ...]] = {}
    nbytes: dict[str, int | None] = {}
    shape_of: dict[str, Any] = {}
    rows: dict[tuple, dict[str, float]] = {}
    own_cost: dict[str, bool] = {}
    for n in order:
        d = attrs[n]
        shape_of[n] = shape = d["shape"]
        nbytes[n] = d["bytes"]
        if "phase" in d:
            ins = d["phase"].inputs
            # a phase has one place to run: its estimate is a constant of the plan, an upper bound from max_steps
            info = d["planned"]
            vendor[d["target"]] = None
            seconds = phase_s(d["phase"].phase, info["backend"], info["steps_max"], info["tasks_max"]) if phase_s else 0.0
            if load_s is not None and load_s(d["phase"].phase, info["backend"]):
                seconds += load_s(d["phase"].phase, info["backend"])
                load_s = None
            exec_s[n] = {d["target"]: seconds}
        else:
            stage = d["stage"]
            op = stage.op
            ins = stage.inputs
            # units alike share one candidate list (see ``candidates``): its identity stands for its executors
            cands = units[unit_of[n]].candidates
            user_cost = own_cost.get(op)
            if user_cost is None:
                user_cost = own_cost[op] = oplib.REGISTRY[op].cost_rule is not None
            if user_cost or (split and not split.keys().isdisjoint(cands)):
                key = (n,)  # a split rule reads the stage's args (a reduction's axis)
            elif len(ins) == 1:
                key = (op, shape, stage.dtype._value_, id(cands), shape_of[ins[0]])
            else:
                key = (op, shape, stage.dtype._value_, id(cands), *[shape_of[r] for r in ins])
            row = rows.get(key)
            if row is None:
                shapes = [shape_of[r] for r in ins]
                more = {"args": stage.args} if user_cost else {}
                row = rows[key] = {e: split_exec_s(model, op, shapes, shape, stage.dtype, vendor[e], split[e], stage.args,
                                                   held=[_held(attrs, shape_of, units[unit_of[r]].candidates, r, e)
                                                         for r in ins])
                                   if e in split else model.exec_s(op, shapes, shape, stage.dtype, vendor[e], **more)
                                   for e in cands}
            exec_s[n] = row
            if len(ins) < 2:
                inputs[n] = ins
                continue
        inputs[n] = ins if len(ins) < 2 else tuple(dict.fromkeys(ins))
    pos.update(zip(order, range(len(order))))
    consumers = {n: list(nbrs) for n, nbrs in successors(out).items()}
    return placing.Problem(out, order, units, unit_of, vendor, exec_s, consumers, model,
                           pos=pos, inputs=inputs, nbytes=nbytes)


def _held(attrs: Mapping[str, Any], shape_of: Mapping[str, Any], candidates: Any, r: str, e: str) -> int | None:
    """How input ``r`` lies on split executor ``e`` when its consumer starts there (``split_exec_s``'s ``held``):
    an input made elsewhere arrives by import, laid out by rows; one made on ``e`` lies as its op's split rule
    leaves it, or whole on the first device where its op does not divide."""
    stage = attrs[r].get("stage")
    if stage is None or e not in candidates:
        return 0
    from hetflow.executors.split_layout import layout

    found = layout(stage.op, [shape_of[i] for i in stage.inputs], dict(stage.args or {}), stage.dtype)
    return None if found is None else found[0].output


def plan(manifest: Manifest, probe: Callable[[Vendor], Offer], *, model: Any = None) -> Plan:
    """Run the planner's passes over ``manifest``; raises :class:`ManifestError`.

    ``model`` replaces the cost model (:class:`~hetflow.engine.plan.costs.CostModel`).
    """
    with gc_paused():
        return _plan(manifest, probe, model or CostModel())


def _plan(manifest: Manifest, probe: Callable[[Vendor], Offer], model: Any) -> Plan:
    executors = choose_executors(manifest, probe)
    # the graph is this function's own, so the passes annotate it in place rather than copy it
    parted = build_graph(manifest)
    beyond = beyond_declared_memory(manifest, parted)  # validate's words for what no placement can fit
    if beyond:
        raise ManifestError(beyond)
    _place_into(parted, executors, first_executor=next(iter(manifest.executors)), probe=probe, model=model)
    _check_dtypes(parted, executors, probe)
    partition_into(parted)
    crossing = bridges(parted)
    attrs = placing.node_data(parted)
    nodes: dict[str, NodePlan] = {}
    exec_s = 0  # the stages' estimates summed in their order, as ``sum`` would
    for n, stage in manifest.stages.items():
        d = attrs[n]
        nodes[n] = frozen_instance(NodePlan, {
            "id": n, "op": stage.op, "executor": d["executor"], "reason": d["reason"],
            "partition": d["partition"], "shape": d["shape"], "dtype": stage.dtype, "bytes": d["bytes"],
            "origin": stage.origin, "why": d["why"], "estimated_s": d["estimated_s"],
            "bound": d.get("bound", False),
        })
        exec_s += d["estimated_s"] or 0.0
    parts = partitions_of(parted, manifest.outputs)
    memory = _check_memory(parts, parted, manifest, executors, probe)
    phase_inputs = _phase_inputs(manifest, parts)
    phases = _phase_plans(manifest, parted)
    placement = parted.graph["placement"]
    estimate = {
        "model": model.describe() if hasattr(model, "describe") else {"name": getattr(model, "name", type(model).__name__)},
        "placement": placement["method"],
        "baseline_s": placement["baseline_s"],
        "total_s": placement["total_s"],
        "exec_s": exec_s,
        "bridges_s": sum(b.estimated_s or 0.0 for b in crossing),
        **({"phases_s": sum(p["estimated_s"] or 0.0 for p in phases.values()), "phases_bound": True} if phases else {}),
    }
    return Plan(
        name=manifest.name, digest=manifest.digest, executors=executors, nodes=nodes,
        partitions=parts, bridges=tuple(crossing),
        outputs=dict(manifest.outputs),
        stage_args={n: s.args for n, s in manifest.stages.items()},
        stage_inputs={n: s.inputs for n, s in manifest.stages.items()},
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
    if not phases:
        return inputs
    for part in parts:
        refs = [r for n in part.nodes for r in manifest.stages[n].inputs if r in phases]
        if refs:
            inputs[part.id] = tuple(dict.fromkeys(refs))
    return inputs


def _phase_plans(manifest: Manifest, graph: Graph) -> dict[str, dict]:
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


def _check_memory(parts: tuple[Partition, ...], graph: Graph, manifest: Manifest,
                  executors: Mapping[str, ExecutorPlan], probe: Callable[[Vendor], Offer]) -> dict[str, dict]:
    """Each partition's peak live bytes against its executor's memory; raises :class:`ManifestError`.

    A partition runs as one ``execute`` call that keeps every value it
    computes until it returns, so its peak is its inputs plus all its
    stages' outputs. The capacity is the executor's ``memory:`` when
    declared, else its device's detected ``memory_bytes``.
    """
    out: dict[str, dict] = {}
    problems: list[Diagnostic] = []
    attrs = placing.node_data(graph)
    for part in parts:
        peak, upper = peak_bytes(part, attrs)
        decl = manifest.executors[part.executor]
        capacity, source = getattr(decl, "memory_bytes", None), "declared"
        one = None  # one device's memory, on an executor over several
        if capacity is None:
            devices = probe(executors[part.executor].vendor).devices
            indexes = getattr(decl.device, "indexes", None) or ()
            if len(indexes) > 1 and all(0 <= i < len(devices) for i in indexes):
                capacity = split_capacity([devices[i].memory_bytes for i in indexes])
                one = min((devices[i].memory_bytes for i in indexes), default=None)
                source = f"detected on devices {', '.join(map(str, indexes))} together"
            else:
                device = devices[decl.device] if 0 <= decl.device < len(devices) else None
                capacity, source = getattr(device, "memory_bytes", None), "detected"
        if capacity is not None and one is not None and peak > one:
            source += f"; more than one device's {human_bytes(one)}: held in pieces across them"
        out[part.id] = {"peak_bytes": peak, "memory_bytes": capacity, "memory_source": source if capacity else None,
                        **({"peak_bound_bytes": peak + upper} if upper else {})}
        if capacity is not None and peak > capacity:
            problems.append(over_memory(part, graph, peak, capacity,
                                        declared_where(decl) if source == "declared" else source))
    if problems:
        raise ManifestError(problems)
    return out


DOMINANT_BRIDGE = 0.5
"""A bridge whose bytes alone take more than this share of the estimated time is warned about."""


def _warnings(manifest: Manifest, executors: Mapping[str, ExecutorPlan], graph: Graph,
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
    failed = getattr(model, "cost_failures", None) or {}
    for op, why in failed.items():
        first = next((s for s in manifest.stages.values() if s.op == op), None)
        found.append(PlanWarning("cost-failed", (
            f"{why}; its stages are priced by the default rule, so the placement may differ from what cost= would "
            "give"), first.origin if first is not None else None))
    for n, d in placing.node_data(graph).items():
        if "phase" in d:
            text = memory_bound_warning(d["phase"], d["planned"], manifest.emulators[d["phase"].emulator])
            if text:
                found.append(PlanWarning("memory-bound", text, d["phase"].origin))
    return found


def _check_dtypes(graph: Graph, executors: Mapping[str, ExecutorPlan], probe: Callable[[Vendor], Offer]) -> None:
    problems = []
    offered = {name: probe(ex.vendor).dtypes for name, ex in executors.items()}
    attrs = placing.node_data(graph)
    for n, d in attrs.items():
        if "phase" in d:
            continue
        stage = d["stage"]
        dtype = stage.dtype
        ex, supported = executors[d["executor"]], offered[d["executor"]]
        if dtype not in supported:
            problems.append(Diagnostic(
                stage.origin,
                f"stage {n!r} produces {dtype.value}, which executor {ex.name!r} ({ex.vendor.value}) does not support "
                f"(supported: {', '.join(x.value for x in supported)}){remedy(stage, pinned=stage.executor is not None)}",
            ))
            continue
        # what a bridge brings it is imported at its producer's dtype: the executor must hold that too
        refused = {ref: t for ref in stage.inputs
                   if (t := placing.arriving_dtype(attrs[ref])) is not None and t not in supported}
        if refused:
            taken = ", ".join(f"{ref!r} at {t.value}" for ref, t in refused.items())
            problems.append(Diagnostic(
                stage.inputs_origin,
                f"stage {n!r} takes {taken}, which executor {ex.name!r} ({ex.vendor.value}) cannot import "
                f"(supported: {', '.join(x.value for x in supported)})",
            ))
    if problems:
        raise ManifestError(problems)
