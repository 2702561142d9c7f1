"""Lowering: a :class:`~hetflow.engine.plan.planner.Plan` -> one plain Dask task graph.

The graph is a dict of tuple tasks, executable by any Dask scheduler, the
threaded one in-process or a ``distributed`` cluster, unchanged:

``partition:ID``
    runs partition ID on its executor; its arguments after ID are the
    producers of its inputs, in order; returns ``{tensor: ActivationHandle}`` for the partition's outputs.
``export:BRIDGE``
    exports the bridge's tensor from the source executor; returns a
    :class:`~hetflow.executors.base.PortableActivation`.
``import:BRIDGE``
    imports it on the destination executor; returns the new handle.
``output:NAME``
    exports a persisted output; returns its portable activation.
``import:BRIDGE`` of an emulator phase's array
    depends on ``phase:PHASE``, a task :mod:`hetflow.engine.run.phases` adds to
    the graph in the run's second round; the bridge has no export task.

A partition's input comes from a ``partition:`` task when the producer is
on the same executor instance (the handle is passed, no copy) and from an
``import:`` task when a bridge carries it. Keys hold a ':' so they never
collide with stage names, which cannot.

**Folded bridges** (``lower(..., fold_bridges=True)``, the threaded
scheduler's lowering): when every task runs in one process, a bridge's
export and import need not be tasks of their own. The producer's task,
``partition:ID`` lowered to ``runtime.run_and_bridge``, runs the
partition and then each bridge that carries one of its outputs (export,
then import), each timed and reported as its own ``export``/``import``
event, as the separate tasks would; the consumer then depends on the
producer's ``partition:`` task directly. A chain alternating between two
executors is then one task a stage instead of three, and Dask's own cost
per task (about 0.1 ms here) is paid a third as often. The bridge ids
folded so are ``TaskGraph.folded``.

**Chains** (the threaded lowering too): partitions that follow one
another alone, each the only dependent of the one before, are one task,
``run_chain``, under the last one's key (``TaskGraph.chains``). The
alternating chain of 10,000 stages is then one task, not 10,000, and
every partition and bridge is still timed and reported as its own.

A distributed run keeps the separate tasks: there the export runs on the
source's worker and the import on the destination's, and Dask moves the
bytes between them. A bridge of an
emulator phase's array is never folded (its ``phase:`` task is added later).

``refcounts`` says how many tasks consume each handle the run creates;
the runtime releases a handle when that many consumers are done.
``bound`` names, for every key, the executor instance whose state the
task reads or writes: a cluster runtime runs the task on the worker
hosting that executor and nowhere else. A key absent from ``bound``
holds no executor state and may run on any worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from hetflow.engine.plan.plandata import Partition, Plan
from hetflow.executors.base import Dtype, SubGraphPlan
from hetflow.executors.payload import encode_plan

__all__ = ["TaskGraph", "Runtime", "lower", "subgraph_plan", "partition_key", "tensor_ref", "bridge_ref"]


def partition_key(pid: str) -> str:
    return f"partition:{pid}"


def tensor_ref(tensor: str) -> str:
    """Refcount key of the handle a partition produced for ``tensor``."""
    return f"tensor:{tensor}"


def bridge_ref(bridge_id: str) -> str:
    """Refcount key of the handle a bridge's import produced."""
    return f"bridge:{bridge_id}"


class Runtime(Protocol):
    def run_partition(self, pid: str, *sources: Any) -> dict: ...
    def export(self, bridge_id: str, produced: dict) -> Any: ...
    def import_(self, bridge_id: str, portable: Any) -> Any: ...
    def output(self, name: str, produced: dict) -> Any: ...
    def run_and_bridge(self, pid: str, *sources: Any) -> dict: ...


@dataclass(frozen=True)
class TaskGraph:
    dsk: dict
    keys: list[str]
    output_keys: Mapping[str, str]
    refcounts: Mapping[str, int]
    sources: Mapping[str, tuple[tuple[str, str], ...]]
    bound: Mapping[str, str] = field(default_factory=dict)
    folded: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    chains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # :func:`run_in_order`'s steps, made once: shared by the lowered plan's graph and each run's graph bound from it
    steps: list = field(default_factory=list, compare=False, repr=False)

    def reported_tasks(self) -> int:
        """How many tasks the run reports: a folded bridge's export and import are two, as unfolded ones are,
        and each partition of a chain is one."""
        return (len(self.dsk) + 2 * sum(map(len, self.folded.values()))
                + sum(len(c) - 1 for c in self.chains.values()))


_DTYPE_NAME = {d: d.value for d in Dtype}


def subgraph_plan(plan: Plan, part: Partition) -> SubGraphPlan:
    """The opaque unit the partition's executor decodes."""
    info, args, inputs, name = plan.nodes, plan.stage_args, plan.stage_inputs, _DTYPE_NAME
    # an Enum's ``value`` is a property: read through a dict, 100,000 nodes' dtype names cost 20 ms, not 120
    nodes = [{"id": n, "op": node.op, "args": args[n], "dtype": name[node.dtype], "inputs": inputs[n]}
             for n, node in zip(part.nodes, map(info.__getitem__, part.nodes))]
    return encode_plan(plan.executors[part.executor].vendor, list(part.inputs) + list(plan.phase_inputs.get(part.id, ())),
                       nodes, part.outputs)


# what a task of a lowered graph calls: the runtime's method of this name
_ROLES = ("run_partition", "run_and_bridge", "run_chain", "export", "import_", "output")
# (id(plan), fold_bridges) -> the plan's graph with each task's callable named by its role, while the plan lives
_LOWERED: dict[tuple[int, bool], TaskGraph] = {}


def lower(plan: Plan, runtime: Runtime, fold_bridges: bool = False) -> TaskGraph:
    """The task graph of ``plan`` whose tasks call ``runtime``; ``fold_bridges``: each bridge (of a partition's
    output) runs inside its producer's task, for a scheduler that runs every task in this process.

    A plan is lowered once per process (a plan does not change once
    made): each run binds the lowered tasks to its own runtime, one tuple
    a task (10,000 partitions: 98 ms lowered, a few ms bound).
    """
    key = (id(plan), fold_bridges)
    roles = _LOWERED.get(key)
    if roles is None:
        import weakref

        roles = _LOWERED[key] = _lower(plan, fold_bridges)
        weakref.finalize(plan, _LOWERED.pop, key, None)
    calls = {role: getattr(runtime, role, None) for role in _ROLES}
    return TaskGraph({k: (calls[task[0]], *task[1:]) for k, task in roles.dsk.items()}, roles.keys,
                     roles.output_keys, roles.refcounts, roles.sources, roles.bound, roles.folded, roles.chains,
                     roles.steps)


def run_in_order(graph: TaskGraph) -> list[Any]:
    """Run every task of ``graph`` in this thread, one after another, and return the results of ``graph.keys``:
    what ``dask.core.get(graph.dsk, graph.keys)`` does, in the same order (``dask.order``'s), without its cost
    per call.

    ``dask.core.get`` converts the graph to Dask's task spec and orders it
    on every call: 0.4 ms of a 9-task run here, a fifth of the quickstart's
    whole computation. A lowered graph's tasks all take a constant first
    (a partition, bridge or output name) and then the keys they depend on,
    so the order, and where each result is last used, are made once per
    lowered plan and shared by every run of it. A result no later task and
    no key asked for needs is dropped after its last use, as Dask drops it.
    """
    dsk, keys = graph.dsk, graph.keys
    steps = graph.steps
    if len(steps) != len(dsk):
        steps = _steps(dsk, keys)
        graph.steps[:] = steps
    values: dict[str, Any] = {}
    for key, done_with in steps:
        call, first, *after = dsk[key]
        values[key] = call(first, *[values[k] for k in after])
        for k in done_with:
            del values[k]
    return [values[k] for k in keys]


def _steps(dsk: Mapping[str, tuple], keys: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``dsk``'s keys in ``dask.order``'s order, each with the results last used by its task and not asked for."""
    from dask.order import order

    priority = order(dsk)
    ordered = sorted(dsk, key=priority.__getitem__)
    kept = set(keys)
    last: dict[str, str] = {}
    for key in ordered:
        for k in dsk[key][2:]:
            last[k] = key
    done_with: dict[str, list[str]] = {}
    for k, user in last.items():
        if k not in kept:
            done_with.setdefault(user, []).append(k)
    return [(key, tuple(done_with.get(key, ()))) for key in ordered]


def _lower(plan: Plan, fold_bridges: bool) -> TaskGraph:
    """:func:`lower`'s graph, each task's callable the name of its role in :data:`_ROLES`."""
    # one pass per partition and per bridge, each key's text made once: a plan of 10,000 partitions lowers to
    # 30,000 tasks
    dsk: dict[str, tuple] = {}
    refcounts: dict[str, int] = {}
    sources: dict[str, tuple[tuple[str, str], ...]] = {}
    bound: dict[str, str] = {}
    key_of = {p.id: partition_key(p.id) for p in plan.partitions}
    producer = {n: p for p in plan.partitions for n in p.nodes}
    carrying = {(b.tensor, b.destination): b for b in plan.bridges}
    run_partition, export, import_ = "run_partition", "export", "import_"
    phase_inputs = plan.phase_inputs
    # producer partition -> the bridges its task runs after it (folded ones only)
    folded: dict[str, list[str]] = {}
    if fold_bridges:
        for bridge in plan.bridges:
            if bridge.tensor not in plan.phases:
                folded.setdefault(producer[bridge.tensor].id, []).append(bridge.id)
    run_and_bridge = "run_and_bridge"

    for part in plan.partitions:
        deps: list[str] = []
        refs: list[tuple[str, str]] = []
        here = part.executor
        for tensor in part.inputs:
            src = producer[tensor]
            if src.executor == here:
                deps.append(key_of[src.id])
                ref = "tensor:" + tensor
            else:
                bid = carrying[(tensor, here)].id
                # a folded bridge's import is done when its producer's task is
                deps.append(key_of[src.id] if folded else "import:" + bid)
                ref = "bridge:" + bid
            refs.append((tensor, ref))
            refcounts[ref] = refcounts.get(ref, 0) + 1
        for tensor in phase_inputs.get(part.id, ()):
            bid = carrying[(tensor, here)].id
            deps.append("import:" + bid)
            ref = "bridge:" + bid
            refs.append((tensor, ref))
            refcounts[ref] = refcounts.get(ref, 0) + 1
        sources[part.id] = tuple(refs)
        key = key_of[part.id]
        # the dependencies as arguments of their own, not a list: Dask wraps a list in a task of its own
        dsk[key] = (run_and_bridge if part.id in folded else run_partition, part.id, *deps)
        bound[key] = here

    for bridge in plan.bridges:
        bid = bridge.id
        importing = "import:" + bid
        if bridge.tensor in plan.phases:
            # the phase task (lowered by hetflow.engine.run.phases once chunk counts are known) returns a portable activation
            dsk[importing] = (import_, bid, "phase:" + bridge.tensor)
            bound[importing] = bridge.destination
            continue
        ref = "tensor:" + bridge.tensor
        refcounts[ref] = refcounts.get(ref, 0) + 1
        if folded:
            continue
        exporting = "export:" + bid
        dsk[exporting] = (export, bid, key_of[producer[bridge.tensor].id])
        dsk[importing] = (import_, bid, exporting)
        bound[exporting], bound[importing] = bridge.source, bridge.destination

    output_keys = {}
    for name, tensor in plan.outputs.items():
        key = f"output:{name}"
        dsk[key] = ("output", name, key_of[producer[tensor].id])
        refcounts[tensor_ref(tensor)] = refcounts.get(tensor_ref(tensor), 0) + 1
        output_keys[name] = key
        bound[key] = plan.nodes[tensor].executor

    chains = _chain(dsk, key_of) if fold_bridges else {}
    keys = [k for k in key_of.values() if k in dsk] + list(output_keys.values())
    return TaskGraph(dsk, keys, output_keys, refcounts, sources, bound, {p: tuple(b) for p, b in folded.items()},
                     chains)


def _chain(dsk: dict[str, tuple], key_of: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Fuse each run of partitions that follow one another alone into one task, in place; the runs by last key.

    Where partition B's task depends on partition A's task alone and A's
    has no other dependent, nothing can run between them: a scheduler
    that gives B a task of its own only pays its cost per task (0.08 ms
    here, Dask's) to hand A's result over. Dask fuses such linear chains
    of its own graphs (``dask.optimization.fuse``); here the task of the
    run's last partition, ``run_chain``, runs them all in order, each
    partition (and its folded bridges) timed and reported as its own task
    was. A chain keeps its last partition's key, so its dependents are
    unchanged; the other keys of the chain leave the graph. Only the
    threaded lowering chains: on a cluster each partition runs where its
    executor lives.
    """
    partition_of = {key: pid for pid, key in key_of.items()}
    dependents: dict[str, int] = {}
    for task in dsk.values():
        for dep in task[2:]:
            dependents[dep] = dependents.get(dep, 0) + 1
    # a partition that continues its producer's run: one dependency, a partition whose only dependent it is
    after: dict[str, str] = {}
    for key, task in dsk.items():
        if key in partition_of and len(task) == 3 and task[2] in partition_of and dependents.get(task[2]) == 1:
            after[task[2]] = key
    continued = set(after.values())
    chains: dict[str, tuple[str, ...]] = {}
    for key in list(dsk):
        if key not in after or key in continued:
            continue  # not the first of a run of two or more
        run = [key]
        while run[-1] in after:
            run.append(after[run[-1]])
        pids = tuple(partition_of[k] for k in run)
        first = dsk[run[0]]
        for k in run[:-1]:
            del dsk[k]
        dsk[run[-1]] = ("run_chain", pids, *first[2:])
        chains[run[-1]] = pids
    return chains
