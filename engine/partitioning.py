"""The partition and bridge passes: a placed graph -> partitions and the bridges between them.

:func:`partition` gives every stage a ``partition`` (phases belong to
none): the maximal connected subgraphs of same-executor edges. If
contracting them would create a cycle (A on e1 feeds B on e2 feeds C on
e1 with A -> C), each component is split by *crossings*, the most
executor changes on any path into the node; every edge between
partitions then strictly increases crossings, so the partitions always
form a DAG. :func:`partitions_of` lists them as the plan's
:class:`~hetflow.engine.plandata.Partition` s.

:func:`bridges` makes one :class:`~hetflow.engine.plandata.Bridge` per
(tensor, destination executor), shared by all its consumers there; none
between nodes on the same executor.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import networkx as nx

from hetflow.engine import phases as phaselib
from hetflow.engine import placement as placing
from hetflow.engine.plandata import Bridge, Partition
from hetflow.engine.plangraph import execution_order, predecessors, successors

__all__ = ["partition", "partition_into", "bridges", "partitions_of"]


def partition(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``graph`` with ``partition`` (an id ``p0``, ``p1``, ... in execution order) on every node."""
    out = graph.copy()
    partition_into(out)
    return out


def partition_into(out: nx.DiGraph) -> None:
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


def _split_by_crossings(graph: nx.DiGraph, attrs: Mapping[str, dict]) -> dict[str, int]:
    """The stages' groups when the same-executor components do not contract to a DAG: each split by crossings."""
    if any("phase" in d for d in attrs.values()):
        graph = graph.subgraph([n for n, d in attrs.items() if "phase" not in d]).copy()
    ex = {n: attrs[n]["executor"] for n in graph}
    crossings: dict[str, int] = {}
    pred = graph.pred
    for n in nx.topological_sort(graph):
        crossings[n] = max((crossings[p] + (ex[p] != ex[n]) for p in pred[n]), default=0)
    split = nx.Graph()
    split.add_nodes_from(graph.nodes)
    split.add_edges_from((u, v) for u, v in graph.edges if ex[u] == ex[v] and crossings[u] == crossings[v])
    return {n: i for i, comp in enumerate(nx.connected_components(split)) for n in comp}


def _contracts_to_dag(groups: Iterable[Any], links: Iterable[tuple[Any, Any]]) -> bool:
    """Whether the groups, joined by ``links`` (pairs of groups), form a DAG.

    >>> _contracts_to_dag([0, 1], [(0, 1), (1, 0)]), _contracts_to_dag([0, 1, 2], [(0, 1), (1, 2)])
    (False, True)
    """
    quotient = nx.DiGraph()
    quotient.add_nodes_from(groups)
    quotient.add_edges_from(links)
    return nx.is_directed_acyclic_graph(quotient)


def bridges(graph: nx.DiGraph) -> list[Bridge]:
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


def partitions_of(graph: nx.DiGraph, outputs: Mapping[str, str]) -> tuple[Partition, ...]:
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
