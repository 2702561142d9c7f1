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

from typing import Any, Mapping

import networkx as nx

from hetflow.engine import phases as phaselib
from hetflow.engine import placement as placing
from hetflow.engine.plandata import Bridge, Partition
from hetflow.engine.plangraph import execution_order, successors

__all__ = ["partition", "partition_into", "bridges", "partitions_of"]


def partition(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``graph`` with ``partition`` (an id ``p0``, ``p1``, ... in execution order) on every node."""
    out = graph.copy()
    partition_into(out)
    return out


def partition_into(out: nx.DiGraph) -> None:
    """:func:`partition` on a graph the caller owns, in place."""
    attrs = placing.node_data(out)
    if any("phase" in d for d in attrs.values()):
        # phases run on their emulators, in no partition; the partitions are the stages' own
        attrs = {n: d for n, d in attrs.items() if "phase" not in d}
        out = out.subgraph(attrs).copy()
    ex = {n: d["executor"] for n, d in attrs.items()}
    # one walk over the edges: same-executor edges join a partition, the others link partitions
    same: list[tuple[str, str]] = []
    across: list[tuple[str, str]] = []
    for u, nbrs in successors(out).items():
        here = ex[u]
        for v in nbrs:
            (same if ex[v] == here else across).append((u, v))
    groups = placing.roots(out, same)
    if not _contracts_to_dag(groups, across):
        crossings: dict[str, int] = {}
        pred = out.pred
        for n in nx.topological_sort(out):
            crossings[n] = max((crossings[p] + (ex[p] != ex[n]) for p in pred[n]), default=0)
        split = nx.Graph()
        split.add_nodes_from(out.nodes)
        split.add_edges_from((u, v) for u, v in same if crossings[u] == crossings[v])
        groups = {n: i for i, comp in enumerate(nx.connected_components(split)) for n in comp}
    names: dict[Any, str] = {}
    for n in execution_order(out):
        group = groups.get(n)
        if group is not None and group not in names:
            names[group] = f"p{len(names)}"
    for n, d in attrs.items():
        d["partition"] = names[groups[n]]


def _contracts_to_dag(groups: Mapping[str, Any], across: list[tuple[str, str]]) -> bool:
    """Whether contracting each group to one node leaves a DAG, ``across`` the edges between groups.

    >>> _contracts_to_dag({"a": 0, "b": 1, "c": 0}, [("a", "b"), ("b", "c")])
    False
    """
    quotient = nx.DiGraph()
    quotient.add_nodes_from(set(groups.values()))
    quotient.add_edges_from((groups[u], groups[v]) for u, v in across)
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
