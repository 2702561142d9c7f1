"""The partition and bridge passes: a placed graph -> partitions and the bridges between them.

:func:`partition` gives every stage a ``partition`` (phases belong to
none): the maximal connected subgraphs of same-executor edges. If
contracting them would create a cycle (A on e1 feeds B on e2 feeds C on
e1 with A -> C), each component is split by *crossings*, the most
executor changes on any path into the node; every edge between
partitions then strictly increases crossings, so the partitions always
form a DAG. A *source* (a stage with no inputs: ``load``, ``input``, a
random draw, a constant) has no path into it, so it may take any
crossings up to its consumers': it takes the most its consumers allow,
which puts it in its first consumer's partition on its executor (a
weight read or drawn for a layer runs in the layer's task, not as a task
of its own: the executor imports the host bytes it makes there as well).
A source still alone in its partition says why in its ``reason`` and
``why["partition"]``. :func:`partitions_of` lists them as the plan's
:class:`~hetflow.engine.plan.plandata.Partition` s.

:func:`bridges` makes one :class:`~hetflow.engine.plan.plandata.Bridge` per
(tensor, destination executor), shared by all its consumers there; none
between nodes on the same executor.
"""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from hetflow.engine.manifest import phasedecl as phaselib
from hetflow.engine.plan import placement as placing
from hetflow.engine.plan.plandata import Bridge, Partition
from hetflow.engine.plan.plangraph import check as graph_check
from hetflow.engine.plan.plangraph import execution_order, predecessors, successors

if TYPE_CHECKING:
    from hetflow.engine.adjacency import Graph

__all__ = ["partition", "partition_into", "bridges", "partitions_of", "peak_bytes", "over_memory",
           "beyond_declared_partitions", "check"]


def partition(graph: Graph) -> Graph:
    """A copy of ``graph`` with ``partition`` (an id ``p0``, ``p1``, ... in execution order) on every node."""
    out = graph.copy()
    partition_into(out)
    return out


def partition_into(out: Graph) -> None:
    """:func:`partition` on a graph the caller owns, in place.

    One walk in execution order gives each stage a group: a new one when
    no input on its executor has a group, else its inputs' group, groups
    meeting at a stage merged (union-find over the groups, the earliest
    one the root, so a partition's root is the group of its first stage).
    """
    attrs = placing.node_data(out)
    order = execution_order(out)
    pred = predecessors(out)
    group_of: dict[str, int] = {}
    parent: list[int] = []
    across: list[tuple[str, str]] = []  # edges between executors: they link partitions
    for v in order:
        d = attrs[v]
        if "phase" in d:  # phases run on their emulators, in no partition; the partitions are the stages' own
            continue
        here = d["executor"]
        mine = -1
        for u in pred[v]:
            du = attrs[u]
            if "phase" in du:
                continue
            if du["executor"] != here:
                across.append((u, v))
                continue
            g = group_of[u]
            up = parent[g]
            while up != g:
                parent[g] = g = parent[up]
                up = parent[g]
            if mine < 0:
                mine = g
            elif g != mine:
                mine, g = min(mine, g), max(mine, g)
                parent[g] = mine
        if mine < 0:
            mine = len(parent)
            parent.append(mine)
        group_of[v] = mine
    for g in range(len(parent)):  # a merged group points at an earlier one, already a root here
        parent[g] = parent[parent[g]]
    names: dict[Any, str] = {}  # p0, p1, ... in the execution order of each partition's first stage
    if _contracts_to_dag(set(parent), [(parent[group_of[u]], parent[group_of[v]]) for u, v in across]):
        for n in order:
            g = group_of.get(n)
            if g is not None:
                name = names.get(parent[g])
                if name is None:
                    name = names[parent[g]] = f"p{len(names)}"
                attrs[n]["partition"] = name
        return
    groups = _split_by_crossings(out, attrs)
    for n in order:
        group = groups.get(n)
        if group is not None and group not in names:
            names[group] = f"p{len(names)}"
    for n, group in groups.items():
        attrs[n]["partition"] = names[group]
    _explain_lone_sources(out, attrs, groups)


def _split_by_crossings(graph: Graph, attrs: Mapping[str, dict]) -> dict[str, int]:
    """The stages' groups when the same-executor components do not contract to a DAG: each split by crossings.

    A source's crossings are the least its consumers allow (each consumer's
    crossings, less one when it runs on another executor), not 0: any value
    between keeps every edge non-decreasing, and this one puts it in a
    consumer's group rather than alone.
    """
    import networkx as nx

    if not isinstance(graph, nx.Graph):
        graph = graph.to_networkx()
    if any("phase" in d for d in attrs.values()):
        graph = graph.subgraph([n for n, d in attrs.items() if "phase" not in d]).copy()
    ex = {n: attrs[n]["executor"] for n in graph}
    crossings: dict[str, int] = {}
    pred, succ = graph.pred, graph.succ
    order = list(nx.topological_sort(graph))
    for n in order:
        crossings[n] = max((crossings[p] + (ex[p] != ex[n]) for p in pred[n]), default=0)
    for n in reversed(order):
        if not pred[n] and succ[n]:
            crossings[n] = max(0, min(crossings[s] - (ex[s] != ex[n]) for s in succ[n]))
    split = nx.Graph()
    split.add_nodes_from(graph.nodes)
    split.add_edges_from((u, v) for u, v in graph.edges if ex[u] == ex[v] and crossings[u] == crossings[v])
    return {n: i for i, comp in enumerate(nx.connected_components(split)) for n in comp}


def _explain_lone_sources(graph: Graph, attrs: Mapping[str, dict], groups: Mapping[str, int]) -> None:
    """Say, in the ``reason`` and ``why`` of each source left alone in its partition, why it joined no consumer's.

    Only the split by crossings leaves a source with consumers alone: it
    joins the first of them on its executor unless a consumer on another
    executor needs it earlier (that consumer's crossings less one are the
    fewest), or none of them runs on its executor.
    """
    size: dict[int, int] = {}
    for g in groups.values():
        size[g] = size.get(g, 0) + 1
    succ = successors(graph)
    for n, g in groups.items():
        d = attrs[n]
        if size[g] != 1 or d["stage"].inputs:
            continue
        here = d["executor"]
        consumers = [s for s in succ[n] if "phase" not in attrs[s]]
        mine = [s for s in consumers if attrs[s]["executor"] == here]
        others = [s for s in consumers if attrs[s]["executor"] != here]
        if not others:  # no consumer, or (not left alone then) only consumers on its executor
            continue
        if not mine:
            where = ", ".join(f"{s} on {attrs[s]['executor']}" for s in others)
            text = f"its own partition: none of its consumers runs on {here} ({where}), so a bridge carries it"
        else:
            text = (f"its own partition: {', '.join(others)} on {attrs[others[0]]['executor']} reads it before "
                    f"{attrs[mine[0]]['partition']} (holding {', '.join(mine)}) runs; joining that partition "
                    f"would make {attrs[others[0]]['partition']} wait for it, a cycle between the partitions")
        d["reason"] = f"{d['reason']}; {text}"
        d["why"] = {**d["why"], "partition": text}


def _contracts_to_dag(groups: Iterable[Any], links: Iterable[tuple[Any, Any]]) -> bool:
    """Whether the groups, joined by ``links`` (pairs of groups), form a DAG.

    >>> _contracts_to_dag([0, 1], [(0, 1), (1, 0)]), _contracts_to_dag([0, 1, 2], [(0, 1), (1, 2)])
    (False, True)
    """
    after: dict[Any, set] = {g: set() for g in groups}
    for a, b in links:
        after[b].add(a)
    try:
        TopologicalSorter(after).prepare()
    except CycleError:
        return False
    return True


def bridges(graph: Graph) -> list[Bridge]:
    """One bridge per (tensor, destination executor), consumers in execution order.

    The kind and estimate come from the cost model's link for the vendor
    pair when ``graph`` was placed by :func:`place`.
    """
    found: dict[tuple[str, str], list[str]] = {}
    execution = execution_order(graph)
    attrs = placing.node_data(graph)
    for v in execution:
        if "phase" in attrs[v]:
            continue  # a phase reads only phases of its own emulator
        d = attrs[v]
        dest = d["executor"]
        ins = d["stage"].inputs
        # the graph's predecessors of v, in slot order, without a view per node
        for u in (ins if len(ins) < 2 else dict.fromkeys(ins)):
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


def partitions_of(graph: Graph, outputs: Mapping[str, str]) -> tuple[Partition, ...]:
    members: dict[str, list[str]] = {}
    attrs = placing.node_data(graph)
    for n in execution_order(graph):
        d = attrs[n]
        if "phase" not in d:
            part = d["partition"]
            found = members.get(part)
            if found is None:
                members[part] = [n]
            else:
                found.append(n)
    persisted = set(outputs.values())
    succ = successors(graph)
    result = []
    for pid in sorted(members, key=lambda p: int(p[1:])):
        nodes = members[pid]
        inside = set(nodes)
        inputs: dict[str, None] = {}
        outs = []
        timeouts = []
        retries = 0
        for n in nodes:
            decl = attrs[n]["stage"]
            for ref in decl.inputs:
                # a phase's array enters through its bridge's import (the plan's phase_inputs), not a partition
                if ref not in inside and "phase" not in attrs[ref]:
                    inputs[ref] = None
            if n in persisted or not inside.issuperset(succ[n]):
                outs.append(n)
            if decl.timeout is not None:
                timeouts.append(decl.timeout)
            if decl.retries > retries:
                retries = decl.retries
        result.append(Partition(
            pid, attrs[nodes[0]]["executor"], tuple(nodes), tuple(inputs), tuple(outs),
            retries=retries, timeout=sum(timeouts) if timeouts else None,
        ))
    return tuple(result)


def peak_bytes(part: Partition, attrs: Mapping[str, Mapping[str, Any]]) -> tuple[int, int]:
    """A partition's peak live bytes: (its inputs and stage outputs whose sizes are known, those that are bounds).

    A partition runs as one ``execute`` call that keeps every value it
    computes until it returns, so its peak is its inputs plus all its
    stages' outputs. A bounded size (read from a witness table) may be far
    above what the guest yields: it is shown, never refused.
    """
    peak = upper = 0
    for members in (part.inputs, part.nodes):
        for n in members:
            d = attrs[n]
            if d.get("bound"):
                upper += d["bytes"] or 0
            else:
                peak += d["bytes"] or 0
    return peak, upper


def over_memory(part: Partition, graph: Graph, peak: int, capacity: int, where: str) -> Any:
    """The error of a partition holding ``peak`` bytes on an executor of ``capacity`` (``where``: whence that is)."""
    from hetflow.engine.errors import Diagnostic
    from hetflow.engine.plan.costs import human_bytes

    attrs = placing.node_data(graph)
    biggest = max(part.nodes, key=lambda n: 0 if attrs[n].get("bound") else attrs[n]["bytes"] or 0)
    return Diagnostic(attrs[biggest]["stage"].origin, (
        f"partition {part.id} on executor {part.executor!r} holds {human_bytes(peak)} of live activations at its "
        f"peak ({len(part.inputs)} inputs and {len(part.nodes)} stage outputs, the largest {biggest!r} at "
        f"{human_bytes(attrs[biggest]['bytes'])}), more than the executor's {human_bytes(capacity)} ({where}); "
        f"pin some of these stages to another executor, or raise the executor's memory:"))


def declared_where(decl: Any) -> str:
    """Whence a declared ``memory:`` comes, in :func:`over_memory`'s words."""
    return f"declared at {decl.memory_origin}" if decl.memory_origin else "declared"


def beyond_declared_partitions(manifest: Any, graph: Graph | None = None) -> list[Any]:
    """The partitions that hold more than their executor's declared ``memory:``, where no machine is needed to know
    them: every stage's executor is fixed (the manifest declares one executor, or the stage names ``executor:``, or
    is colocated with one that does).

    Where the cost model places some stage, its partitions are the
    machine's: :func:`hetflow.engine.plan.planner.plan` checks them. The
    partitions are made by the plan's own passes, so their ids, peaks and
    words are the plan's.
    """
    declared = {name for name, e in manifest.executors.items() if e.memory_bytes is not None}
    if not declared or not manifest.stages:
        return []
    only = next(iter(manifest.executors)) if len(manifest.executors) == 1 else None
    placed = {sid: stage.executor or only for sid, stage in manifest.stages.items()}
    if None in placed.values():  # a stage colocated with a pinned one runs where that one does
        from hetflow.engine.adjacency import roots

        group = roots(manifest.stages, ((sid, s.colocate_with) for sid, s in manifest.stages.items()
                                        if s.colocate_with in manifest.stages and s.colocate_with != sid))
        pins: dict[str, set] = {}
        for sid, stage in manifest.stages.items():
            if stage.executor is not None:
                pins.setdefault(group[sid], set()).add(stage.executor)
        for sid, executor in placed.items():
            pinned = pins.get(group[sid], set())
            if executor is None and len(pinned) == 1:
                placed[sid] = next(iter(pinned))
    if None in placed.values() or declared.isdisjoint(placed.values()):
        return []
    from hetflow.engine.plan.plangraph import build_graph

    graph = build_graph(manifest) if graph is None else graph.copy()
    attrs = placing.node_data(graph)
    for sid, executor in placed.items():
        attrs[sid]["executor"] = executor
    partition_into(graph)
    problems = []
    for part in partitions_of(graph, manifest.outputs):
        decl = manifest.executors[part.executor]
        if decl.memory_bytes is None:
            continue
        peak, _ = peak_bytes(part, attrs)
        if peak > decl.memory_bytes:
            problems.append(over_memory(part, graph, peak, decl.memory_bytes, declared_where(decl)))
    return problems


def check(manifest: Any) -> list[Any]:
    """What ``hetflow validate`` knows of the plan on any machine: :func:`hetflow.engine.plan.plangraph.check` (each
    stage against every vendor its executors may resolve to, and its memory alone), then the partitions whose
    placement needs no machine against their executors' declared ``memory:`` (:func:`beyond_declared_partitions`);
    returns the warnings, raises :class:`~hetflow.engine.errors.ManifestError` with the errors.
    """
    from hetflow.engine.errors import ManifestError

    warnings = graph_check(manifest)
    problems = beyond_declared_partitions(manifest)
    if problems:
        raise ManifestError(problems)
    return warnings
