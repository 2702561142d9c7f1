"""The planner: manifest -> graph -> placed -> partitioned -> bridged -> :class:`Plan`.

:func:`plan` lists the passes by name; each takes a value and returns a
new one, never mutating its input:

``build_graph(manifest)``
    a ``networkx.DiGraph``, one node per stage with its op, args, dtype,
    output ``shape`` and ``bytes`` (from the op registry's shape rule) and
    its manifest ``origin``; one edge per input, in input order (``slot``).
``choose_executors(manifest, probe)``
    each declared executor gets the first vendor of its preference list
    that this machine offers (:class:`ExecutorPlan`).
``place(graph, executors)``
    every node gets one ``executor`` and a ``reason``:

    * **pinned**: the stage names ``executor:``;
    * **inferred**: the executor of its largest input by bytes, the first
      input on a tie (the large tensor stays put, the small one moves);
    * **default**: no inputs and no pin: the first declared executor.
``partition(graph)``
    every node gets a ``partition``: the maximal connected subgraphs of
    same-executor edges. If contracting them would create a cycle (A on
    e1 feeds B on e2 feeds C on e1 with A -> C), each component is split
    by *crossings*, the most executor changes on any path into the node;
    every edge between partitions then strictly increases crossings, so
    the partitions always form a DAG.
``bridges(graph)``
    one :class:`Bridge` per (tensor, destination executor), shared by all
    its consumers there; none between nodes on the same executor.

The :class:`Plan` is plain data: ``hetflow plan`` prints it and ``hetflow
run`` executes exactly it. ``Plan.to_json()`` is the documented JSON form
(``PLAN_FORMAT`` versions it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import networkx as nx

from hetflow.engine.errors import Diagnostic, ManifestError, Origin
from hetflow.engine.manifest import Manifest
from hetflow.executors import Offer
from hetflow.executors import ops as oplib
from hetflow.executors.base import Dtype, Vendor

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
]

PLAN_FORMAT = 1


@dataclass(frozen=True)
class ExecutorPlan:
    name: str
    vendor: Vendor
    device: int
    reason: str


@dataclass(frozen=True)
class NodePlan:
    id: str
    op: str
    executor: str
    reason: str
    partition: str
    shape: tuple[int, ...] | None
    dtype: Dtype
    bytes: int | None
    origin: Origin


@dataclass(frozen=True)
class Partition:
    """Nodes that run as one task on one executor, in execution order."""

    id: str
    executor: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Bridge:
    """Carries ``tensor`` from ``source`` to ``destination`` executor, once."""

    id: str
    tensor: str
    source: str
    destination: str
    bytes: int | None
    consumers: tuple[str, ...]
    kind: str = "portable host staging"


@dataclass(frozen=True)
class Plan:
    name: str
    digest: str
    executors: Mapping[str, ExecutorPlan]
    nodes: Mapping[str, NodePlan]
    partitions: tuple[Partition, ...]
    bridges: tuple[Bridge, ...]
    outputs: Mapping[str, str]
    stage_args: Mapping[str, Mapping[str, Any]] = field(repr=False)
    stage_inputs: Mapping[str, tuple[str, ...]] = field(repr=False)

    def partition_of(self, node: str) -> Partition:
        pid = self.nodes[node].partition
        return next(p for p in self.partitions if p.id == pid)

    def bridge_for(self, tensor: str, destination: str) -> Bridge | None:
        return next((b for b in self.bridges if b.tensor == tensor and b.destination == destination), None)

    def totals(self) -> dict:
        known = [b.bytes for b in self.bridges if b.bytes is not None]
        return {
            "nodes": len(self.nodes),
            "partitions": len(self.partitions),
            "bridges": len(self.bridges),
            "bytes_bridged": sum(known),
            "bytes_bridged_unknown": len(known) != len(self.bridges),
        }

    def to_json(self) -> dict:
        """The plan as JSON-ready data; its keys are stable within ``format``."""
        return {
            "format": PLAN_FORMAT,
            "name": self.name,
            "manifest_digest": self.digest,
            "executors": {
                e.name: {"vendor": e.vendor.value, "device": e.device, "reason": e.reason}
                for e in self.executors.values()
            },
            "nodes": {
                n.id: {
                    "op": n.op,
                    "executor": n.executor,
                    "reason": n.reason,
                    "partition": n.partition,
                    "inputs": list(self.stage_inputs[n.id]),
                    "shape": list(n.shape) if n.shape is not None else None,
                    "dtype": n.dtype.value,
                    "bytes": n.bytes,
                    "origin": str(n.origin),
                }
                for n in self.nodes.values()
            },
            "partitions": [
                {"id": p.id, "executor": p.executor, "nodes": list(p.nodes),
                 "inputs": list(p.inputs), "outputs": list(p.outputs)}
                for p in self.partitions
            ],
            "bridges": [
                {"id": b.id, "tensor": b.tensor, "source": b.source, "destination": b.destination,
                 "bytes": b.bytes, "consumers": list(b.consumers), "kind": b.kind}
                for b in self.bridges
            ],
            "outputs": dict(self.outputs),
            "totals": self.totals(),
        }


def human_bytes(n: int | None) -> str:
    """
    >>> human_bytes(262144), human_bytes(None), human_bytes(12)
    ('256.0 KiB', 'unknown size', '12 B')
    """
    if n is None:
        return "unknown size"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def is_bridged(graph: nx.DiGraph, u: str, v: str) -> bool:
    """Whether the edge u -> v crosses executors."""
    return graph.nodes[u]["executor"] != graph.nodes[v]["executor"]


def build_graph(manifest: Manifest) -> nx.DiGraph:
    """One node per stage with shapes and bytes; raises :class:`ManifestError` on shape errors."""
    graph = nx.DiGraph()
    order = list(manifest.stages)
    for i, stage in enumerate(manifest.stages.values()):
        graph.add_node(stage.id, stage=stage, order=i)
    for stage in manifest.stages.values():
        for slot, ref in enumerate(stage.inputs):
            graph.add_edge(ref, stage.id, slot=slot)
    problems: list[Diagnostic] = []
    for sid in nx.lexicographical_topological_sort(graph, key=order.index):
        stage = graph.nodes[sid]["stage"]
        op = oplib.REGISTRY[stage.op]
        in_shapes = [graph.nodes[ref]["shape"] for ref in stage.inputs]
        try:
            shape = op.shape(in_shapes, stage.args)
        except oplib.ShapeError as e:
            problems.append(Diagnostic(stage.inputs_origin if stage.inputs else stage.op_origin, f"stage {sid!r}: {e}"))
            shape = None
        graph.nodes[sid]["shape"] = shape
        graph.nodes[sid]["bytes"] = None if shape is None else stage.dtype.nbytes(_count(shape))
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
        chosen[decl.name] = ExecutorPlan(decl.name, pick.vendor, decl.device, reason)
    if problems:
        raise ManifestError(problems)
    return chosen


def place(graph: nx.DiGraph, executors: Mapping[str, ExecutorPlan], first_executor: str) -> nx.DiGraph:
    """A copy of ``graph`` with ``executor`` and ``reason`` on every node."""
    out = graph.copy()
    order = [n for n, _ in sorted(out.nodes(data="order"), key=lambda x: x[1])]
    for sid in nx.lexicographical_topological_sort(out, key=order.index):
        stage = out.nodes[sid]["stage"]
        if stage.executor:
            executor, reason = stage.executor, f"pinned (executor: {stage.executor})"
        elif stage.inputs:
            sizes = [(out.nodes[ref]["bytes"] or 0, -slot, ref) for slot, ref in enumerate(stage.inputs)]
            size, _, ref = max(sizes)
            executor = out.nodes[ref]["executor"]
            if len(set(stage.inputs)) == 1:
                reason = f"inferred: with its input {ref!r}"
            else:
                reason = f"inferred: with its largest input {ref!r} ({human_bytes(size)})"
        else:
            executor, reason = first_executor, "default: no inputs and no pin, first declared executor"
        out.nodes[sid]["executor"] = executor
        out.nodes[sid]["reason"] = reason
    return out


def partition(graph: nx.DiGraph) -> nx.DiGraph:
    """A copy of ``graph`` with ``partition`` (an id ``p0``, ``p1``, ... in execution order) on every node."""
    out = graph.copy()
    same = nx.Graph()
    same.add_nodes_from(out.nodes)
    same.add_edges_from((u, v) for u, v in out.edges if not is_bridged(out, u, v))
    groups = {n: i for i, comp in enumerate(nx.connected_components(same)) for n in comp}
    if not _contracts_to_dag(out, groups):
        crossings: dict[str, int] = {}
        for n in nx.topological_sort(out):
            crossings[n] = max(
                (crossings[p] + (1 if is_bridged(out, p, n) else 0) for p in out.predecessors(n)), default=0
            )
        split = nx.Graph()
        split.add_nodes_from(out.nodes)
        split.add_edges_from(
            (u, v) for u, v in same.edges if crossings[u] == crossings[v]
        )
        groups = {n: i for i, comp in enumerate(nx.connected_components(split)) for n in comp}
    order = {n: i for i, n in enumerate(_execution_order(out))}
    firsts = sorted({g: min(order[n] for n in out if groups[n] == g) for g in set(groups.values())}.items(), key=lambda x: x[1])
    names = {g: f"p{i}" for i, (g, _) in enumerate(firsts)}
    for n in out.nodes:
        out.nodes[n]["partition"] = names[groups[n]]
    return out


def _contracts_to_dag(graph: nx.DiGraph, groups: Mapping[str, int]) -> bool:
    """Whether contracting each group to one node leaves a DAG."""
    quotient = nx.DiGraph()
    quotient.add_nodes_from(set(groups.values()))
    quotient.add_edges_from((groups[u], groups[v]) for u, v in graph.edges if groups[u] != groups[v])
    return nx.is_directed_acyclic_graph(quotient)


def _execution_order(graph: nx.DiGraph) -> list[str]:
    return list(nx.lexicographical_topological_sort(graph, key=lambda n: graph.nodes[n]["order"]))


def bridges(graph: nx.DiGraph) -> list[Bridge]:
    """One bridge per (tensor, destination executor), consumers in execution order."""
    found: dict[tuple[str, str], list[str]] = {}
    for v in _execution_order(graph):
        for u in graph.predecessors(v):
            if is_bridged(graph, u, v):
                found.setdefault((u, graph.nodes[v]["executor"]), []).append(v)
    order = {n: i for i, n in enumerate(_execution_order(graph))}
    out = []
    for (tensor, dest), consumers in sorted(found.items(), key=lambda kv: (order[kv[0][0]], order[kv[1][0]])):
        out.append(Bridge(
            id=f"{tensor}@{dest}", tensor=tensor, source=graph.nodes[tensor]["executor"], destination=dest,
            bytes=graph.nodes[tensor]["bytes"], consumers=tuple(consumers),
        ))
    return out


def _partitions(graph: nx.DiGraph, outputs: Mapping[str, str]) -> tuple[Partition, ...]:
    members: dict[str, list[str]] = {}
    for n in _execution_order(graph):
        members.setdefault(graph.nodes[n]["partition"], []).append(n)
    persisted = set(outputs.values())
    result = []
    for pid in sorted(members, key=lambda p: int(p[1:])):
        nodes = members[pid]
        inside = set(nodes)
        inputs: list[str] = []
        for n in nodes:
            for ref in graph.nodes[n]["stage"].inputs:
                if ref not in inside and ref not in inputs:
                    inputs.append(ref)
        outs = [n for n in nodes if n in persisted or any(s not in inside for s in graph.successors(n))]
        result.append(Partition(pid, graph.nodes[nodes[0]]["executor"], tuple(nodes), tuple(inputs), tuple(outs)))
    return tuple(result)


def plan(manifest: Manifest, probe: Callable[[Vendor], Offer]) -> Plan:
    """Run the planner's passes over ``manifest``; raises :class:`ManifestError`."""
    executors = choose_executors(manifest, probe)
    graph = build_graph(manifest)
    placed = place(graph, executors, first_executor=next(iter(manifest.executors)))
    _check_dtypes(placed, executors, probe)
    parted = partition(placed)
    crossing = bridges(parted)
    nodes = {
        n: NodePlan(
            id=n, op=d["stage"].op, executor=d["executor"], reason=d["reason"], partition=d["partition"],
            shape=d["shape"], dtype=d["stage"].dtype, bytes=d["bytes"], origin=d["stage"].origin,
        )
        for n, d in ((n, parted.nodes[n]) for n in manifest.stages)
    }
    return Plan(
        name=manifest.name, digest=manifest.digest, executors=executors, nodes=nodes,
        partitions=_partitions(parted, manifest.outputs), bridges=tuple(crossing),
        outputs=dict(manifest.outputs),
        stage_args={s.id: dict(s.args) for s in manifest.stages.values()},
        stage_inputs={s.id: s.inputs for s in manifest.stages.values()},
    )


def _check_dtypes(graph: nx.DiGraph, executors: Mapping[str, ExecutorPlan], probe: Callable[[Vendor], Offer]) -> None:
    problems = []
    for n, d in graph.nodes(data=True):
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


def render_text(plan: Plan) -> str:
    """The plan for people: executors, nodes with where and why, partitions, bridges, totals."""
    lines = [f"plan for {plan.name} (manifest {plan.digest[:19]})", "", "executors:"]
    width = max(len(e) for e in plan.executors)
    for e in plan.executors.values():
        lines.append(f"  {e.name:<{width}}  {e.vendor.value:<6} device {e.device}  {e.reason}")
    lines += ["", "nodes:"]
    nw = max(len(n) for n in plan.nodes)
    ow = max(len(n.op) for n in plan.nodes.values())
    for n in plan.nodes.values():
        shape = "?" if n.shape is None else "[" + ", ".join(map(str, n.shape)) + "]"
        lines.append(
            f"  {n.id:<{nw}}  {n.op:<{ow}}  {n.partition:<4} on {n.executor:<{width}}  {shape} {n.dtype.value} "
            f"({human_bytes(n.bytes)})  {n.reason}"
        )
    lines += ["", "partitions:"]
    for p in plan.partitions:
        ins = ", ".join(p.inputs) or "-"
        outs = ", ".join(p.outputs) or "-"
        lines.append(f"  {p.id} on {p.executor}: {', '.join(p.nodes)}  (inputs: {ins}; outputs: {outs})")
    lines += ["", "bridges:"]
    if not plan.bridges:
        lines.append("  none: every edge stays on one executor")
    for b in plan.bridges:
        lines.append(
            f"  {b.id}: {b.tensor} {b.source} -> {b.destination}, {human_bytes(b.bytes)}, {b.kind}; "
            f"consumers: {', '.join(b.consumers)}"
        )
    t = plan.totals()
    lines += ["", f"totals: {t['nodes']} nodes, {t['partitions']} partitions, {t['bridges']} bridges, "
              f"{human_bytes(t['bytes_bridged'])} bridged" + (" (some sizes unknown)" if t["bytes_bridged_unknown"] else "")]
    return "\n".join(lines)
