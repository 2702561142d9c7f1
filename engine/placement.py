"""Placement: which executor runs each stage, and why.

The pass works on *units*: a stage alone, or a colocation group (stages
linked by ``colocate_with:``, transitively; one union-find component),
which is placed as one. It goes in four steps.

1. **Candidates** (:func:`candidates`): the executors a unit may run on.
   An executor is *capable* of a stage when its offer lists the stage's
   dtype (and, where the offer lists ops, the op). A pin (``executor:``)
   leaves one candidate; a ``vendor:`` list keeps the capable executors
   of its first vendor that has any (a later vendor is a *fallback*,
   warned about); a group keeps what all its members accept; an
   emulator phase has one candidate, its emulator (``emulator:NAME``),
   whose arrays reach an executor by an import alone (priced by the
   cost model's ``import_s``). No
   candidate left is a :class:`~hetflow.engine.errors.ManifestError` at
   the line that asked for it.
2. **Baseline** (:func:`baseline`): the walking skeleton's rule, in
   topological order: with the largest input by bytes (first input on a
   tie: the large tensor stays, the small one moves), or the first
   candidate when there are no inputs.
3. **Optimise** the plan's *estimated time* (:func:`total_cost`): the
   sum of every stage's execution estimate on its executor plus every
   bridge's transfer estimate, one bridge per (tensor, destination
   executor), from the cost model (:mod:`hetflow.engine.costs`).

   * When the free units choose between two executors A and B, the
     optimum is a minimum s-t cut (:func:`binary_cut`), solved exactly
     with networkx. Source side means A. A unit's execution estimate on
     A is the capacity of ``unit -> t``, on B of ``s -> unit``. A tensor
     whose single consumer is a free unit is a pair of edges:
     ``u -> c`` costs the A-to-B bridge, ``c -> u`` the B-to-A one. A
     tensor with several consumers gets one auxiliary node per
     direction, joined to its consumers by infinite edges, so its bridge
     to a destination is paid once however many consumers sit there.
     Bridges to and from fixed stages become terminal edges.
   * With three or more executors the problem is NP-hard in general.
     The heuristic is *alpha-beta swap* (Boykov, Veksler and Zabih,
     2001): for every pair of executors, the units now on either are
     re-split between the two by the exact cut above, everything else
     held fixed; rounds repeat until no swap lowers the cost, then a
     pass of single-unit moves finishes. It starts from the baseline and
     from "every unit on its fastest executor", and keeps the cheaper.
     ``tests/test_planner_properties.py`` checks it against brute force
     on small graphs.

   The optimised placement replaces the baseline only when it is
   strictly cheaper, so ties keep the predictable rule.
4. **Explain** (:func:`explain`): every stage gets a ``reason`` line and
   a structured ``why``: the constraint (pinned, colocated, preference)
   and the decision. A decision is *inferred* (or *default*) when every
   candidate executes the stage equally fast and the stage sits with its
   largest input: only the bytes moved decided, and the rule says which.
   Otherwise it is *cost*, with the numbers: for each candidate, the
   stage's execution plus the bridges into and out of it, all other
   stages held where they are.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import networkx as nx

from hetflow.engine.costs import human_bytes
from hetflow.engine.errors import Diagnostic, ManifestError
from hetflow.executors import ops as oplib

__all__ = [
    "Unit",
    "Problem",
    "is_phase",
    "node_inputs",
    "import_s",
    "node_data",
    "roots",
    "candidates",
    "baseline",
    "total_cost",
    "binary_cut",
    "optimise",
    "decide",
    "components",
    "gain_bound",
    "brute_force",
    "explain",
    "format_s",
]


def format_s(seconds: float) -> str:
    """
    >>> format_s(0.0000123), format_s(0.0123), format_s(12.3)
    ('12.3 us', '12.30 ms', '12.30 s')
    """
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


@dataclass
class Unit:
    """Stages placed together, their candidate executors and what constrained them."""

    id: int
    nodes: list[str]
    candidates: list[str]
    constraint: str = ""          # "pinned", "colocated", "preference", "capability" or ""
    constraint_text: str = ""
    pinned: bool = False
    fallback: str | None = None   # the warning text when a vendor preference fell back


@dataclass
class Problem:
    """Everything the optimiser needs, precomputed once: costs are plain floats in dicts."""

    graph: nx.DiGraph
    order: list[str]                                  # a topological order of the stages
    units: list[Unit]
    unit_of: dict[str, int]
    vendor: dict[str, Any]                            # executor name -> Vendor
    exec_s: dict[str, dict[str, float]]               # stage -> executor -> seconds
    consumers: dict[str, list[str]]                   # distinct consumers, in order
    model: Any
    pos: dict[str, int] = field(default_factory=dict)  # stage -> index in order
    # read from the graph once: the passes below look these up millions of times on large plans
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)   # distinct inputs, in slot order
    nbytes: dict[str, int | None] = field(default_factory=dict)
    _transfers: dict[tuple, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.pos:
            self.pos = {n: i for i, n in enumerate(self.order)}
        attrs = node_data(self.graph)
        if not self.inputs:
            self.inputs = {n: (ins if len(ins) < 2 else tuple(dict.fromkeys(ins)))
                           for n, ins in ((n, node_inputs(attrs[n])) for n in self.order)}
        if not self.nbytes:
            self.nbytes = {n: attrs[n]["bytes"] for n in self.order}

    def transfer(self, tensor: str, src: str, dst: str) -> float:
        # the model is a pure function of bytes and vendors, and most tensors share a few sizes
        key = (self.nbytes[tensor], src, dst)
        cost = self._transfers.get(key)
        if cost is None:
            source = self.vendor[src]
            cost = self._transfers[key] = (self.model.transfer_s(key[0], source, self.vendor[dst]) if source is not None
                                           else import_s(self.model, key[0], self.vendor[dst]))
        return cost

    def tensor_cost(self, u: str, exe: Mapping[str, str]) -> float:
        consumers = self.consumers[u]
        home = exe[u]
        if len(consumers) == 1:
            dest = exe[consumers[0]]
            return 0.0 if dest == home else self.transfer(u, home, dest)
        dests = {exe[c] for c in consumers}
        dests.discard(home)
        return sum(self.transfer(u, home, d) for d in dests)

    def free_units(self) -> list[Unit]:
        return [u for u in self.units if len(u.candidates) > 1]


def is_phase(d: Mapping[str, Any]) -> bool:
    """Whether a node's attributes are an emulator phase's (placed on its emulator, never moved).

    >>> is_phase({"phase": object()}), is_phase({"stage": object()})
    (True, False)
    """
    return "phase" in d


def node_inputs(d: Mapping[str, Any]) -> tuple[str, ...]:
    """The inputs of a stage or a phase, in slot order."""
    return d["phase"].inputs if "phase" in d else d["stage"].inputs


def import_s(model: Any, nbytes: int | None, vendor: Any) -> float:
    """Seconds to bring an emulator phase's host array onto an executor of ``vendor``.

    A cost model without ``import_s`` prices it as a bridge from a CPU executor.
    """
    own = getattr(model, "import_s", None)
    if own is not None:
        return own(nbytes, vendor)
    from hetflow.executors.base import Vendor
    return model.transfer_s(nbytes, Vendor.cpu, vendor)


def node_data(graph: nx.DiGraph) -> Mapping[str, dict]:
    """Each node's attribute dict (the graph's own, not a copy), as a plain mapping; read it, never change it.

    A networkx node view checks its key's type on every lookup; the passes
    below look up nodes millions of times on a large plan. The mapping is
    the graph's own node table (networkx's ``_node``, what its views
    read), so no pass pays for a copy of it.
    """
    table = getattr(graph, "_node", None)
    return table if type(table) is dict else dict(graph.nodes(data=True))


def roots(nodes: Iterable[str], pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each node's connected component under ``pairs``, named by one of its members.

    What ``nx.connected_components`` of a graph of these pairs gives, by
    union-find (path halving): on a large plan, building that graph costs
    more than the components.
    """
    parent = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]
        return x

    for u, v in pairs:
        a, b = find(u), find(v)
        if a != b:
            parent[b] = a
    return {n: find(n) for n in parent}


def _colocation_roots(graph: nx.DiGraph) -> dict[str, str]:
    return roots(graph, ((n, d["stage"].colocate_with) for n, d in graph.nodes(data=True)
                         if "stage" in d and d["stage"].colocate_with is not None and d["stage"].colocate_with in graph
                         and d["stage"].colocate_with != n))


def _vendor_list(vs: Sequence[Any]) -> str:
    return "[" + ", ".join(v.value for v in vs) + "]"


def candidates(graph: nx.DiGraph, order: Sequence[str], executors: Mapping[str, Any],
               offers: Mapping[str, Any]) -> tuple[list[Unit], dict[str, int]]:
    """Units in first-member order and each stage's unit; raises :class:`ManifestError`."""
    names = list(executors)
    pos = {n: i for i, n in enumerate(order)}
    problems: list[Diagnostic] = []

    def capable(stage: Any, ex: str) -> bool:
        offer = offers[ex]
        ops = getattr(offer, "ops", None)
        return stage.dtype in offer.dtypes and (not ops or stage.op in ops or _user_op_runs(offer, stage.op))

    per_node: dict[str, tuple[list[str], str, str, str | None]] = {}
    attrs = node_data(graph)
    able_for: dict[tuple, list[str]] = {}
    free: dict[tuple, tuple] = {}
    for n in order:
        if "phase" in attrs[n]:
            where = attrs[n]["target"]
            per_node[n] = ([where], "emulator", f"emulator: {attrs[n]['phase'].phase} phase, runs on {where}", None)
            continue
        stage = attrs[n]["stage"]
        key = (stage.op, stage.dtype.value)
        able = able_for.get(key)
        if able is None:
            able = able_for[key] = [e for e in names if capable(stage, e)]
        if not stage.executor and not stage.vendors and able:
            # the common case, one entry per op and dtype
            entry = free.get(key)
            if entry is None:
                entry = free[key] = ((able, "capability", f"capability: only {able[0]!r} runs {stage.op} at {stage.dtype.value}", None)
                                     if len(able) < len(names) and len(able) == 1 else (able, "", "", None))
            per_node[n] = entry
            continue
        if stage.executor:
            ex = executors[stage.executor]
            if stage.vendors and ex.vendor not in stage.vendors:
                problems.append(Diagnostic(stage.vendor_origin, (
                    f"stage {n!r} wants vendor {_vendor_list(stage.vendors)} but its executor {ex.name!r} "
                    f"runs {ex.vendor.value} on this machine ({ex.reason})")))
            if stage.executor not in able:
                problems.append(_dtype_problem(stage, [stage.executor], executors, offers))
            per_node[n] = ([stage.executor], "pinned", f"pinned (executor: {stage.executor})", None)
            continue
        if not able:
            problems.append(_dtype_problem(stage, names, executors, offers))
            per_node[n] = (names[:1], "", "", None)
            continue
        if stage.vendors:
            pick = next((v for v in stage.vendors if any(executors[e].vendor is v for e in able)), None)
            if pick is None:
                running = ", ".join(f"{e} {executors[e].vendor.value}" for e in names)
                problems.append(Diagnostic(stage.vendor_origin, (
                    f"stage {n!r} wants vendor {_vendor_list(stage.vendors)}, and no executor able to run it "
                    f"has one here (executors: {running})")))
                per_node[n] = (able, "", "", None)
                continue
            chosen = [e for e in able if executors[e].vendor is pick]
            skipped = stage.vendors[: stage.vendors.index(pick)]
            if skipped:
                text = f"preference: vendor {pick.value}, fell back from {_vendor_list(stage.vendors)}"
                warn = (f"stage {n!r} runs on {pick.value}: its preferred vendor "
                        f"{', '.join(v.value for v in skipped)} has no capable executor here")
            else:
                text, warn = f"preference: vendor {pick.value}, first of {_vendor_list(stage.vendors)}", None
            per_node[n] = (chosen, "preference", text, warn)
            continue
        if len(able) < len(names) and len(able) == 1:
            per_node[n] = (able, "capability", f"capability: only {able[0]!r} runs {stage.op} at {stage.dtype.value}", None)
            continue
        per_node[n] = (able, "", "", None)
    if problems:
        raise ManifestError(problems)

    if not any("stage" in attrs[n] and attrs[n]["stage"].colocate_with for n in order):
        # no colocation: every stage is its own unit, already in first-member order
        units = []
        for uid, n in enumerate(order):
            cands, kind, text, warn = per_node[n]
            units.append(Unit(uid, [n], list(cands), kind, text, kind == "pinned", warn))
        return units, {n: uid for uid, n in enumerate(order)}

    root_of = _colocation_roots(graph)
    members: dict[str, list[str]] = {}
    for n in order:
        members.setdefault(root_of[n], []).append(n)
    units: list[Unit] = []
    unit_of: dict[str, int] = {}
    for root, nodes in sorted(members.items(), key=lambda kv: pos[kv[1][0]]):
        uid = len(units)
        for n in nodes:
            unit_of[n] = uid
        if len(nodes) == 1:
            cands, kind, text, warn = per_node[nodes[0]]
            units.append(Unit(uid, nodes, list(cands), kind, text, kind == "pinned", warn))
            continue
        allowed = [e for e in names if all(e in per_node[n][0] for n in nodes)]
        pins = [n for n in nodes if per_node[n][1] == "pinned"]
        if not allowed:
            first = next((graph.nodes[n]["stage"] for n in nodes if graph.nodes[n]["stage"].colocate_origin), graph.nodes[nodes[0]]["stage"])
            offers_text = "; ".join(f"{n}: {', '.join(per_node[n][0])}" for n in nodes)
            problems.append(Diagnostic(first.colocate_origin or first.origin, (
                f"stages {', '.join(map(repr, nodes))} are colocated, but no executor can run them all "
                f"({offers_text})")))
            continue
        if pins:
            text = f"colocated with {', '.join(repr(m) for m in nodes if m != pins[0])} and {pins[0]!r}, pinned (executor: {allowed[0]})"
        else:
            text = f"colocated: {', '.join(map(repr, nodes))} run together"
        warn = next((per_node[n][3] for n in nodes if per_node[n][3]), None)
        units.append(Unit(uid, nodes, allowed, "colocated", text, bool(pins), warn))
    if problems:
        raise ManifestError(problems)
    return units, unit_of


def _user_op_runs(offer: Any, op: str) -> bool:
    """A user's op runs where it has a kernel, whatever the vendor's (earlier) list of ops says."""
    found = oplib.REGISTRY.get(op)
    vendor = getattr(getattr(offer, "vendor", None), "value", None)
    return found is not None and found.invoke is not None and vendor is not None and found.runs_on(vendor)


def _dtype_problem(stage: Any, names: Sequence[str], executors: Mapping[str, Any], offers: Mapping[str, Any]) -> Diagnostic:
    first = executors[names[0]]
    supported = ", ".join(d.value for d in offers[names[0]].dtypes)
    ops = getattr(offers[names[0]], "ops", None)
    if stage.dtype in offers[names[0]].dtypes and ops and stage.op not in ops and not _user_op_runs(offers[names[0]], stage.op):
        what = f"stage {stage.id!r} uses op {stage.op!r}, which executor {first.name!r} ({first.vendor.value}) does not run"
    else:
        what = (f"stage {stage.id!r} produces {stage.dtype.value}, which executor {first.name!r} ({first.vendor.value}) "
                f"does not support (supported: {supported})")
    if len(names) > 1:
        what += f", nor does any other executor ({', '.join(names[1:])})"
    return Diagnostic(stage.origin, what)


def _largest_input(p: Problem, n: str) -> str | None:
    inputs = p.inputs[n]
    if not inputs:
        return None
    if len(inputs) == 1:
        return inputs[0]
    nbytes = p.nbytes
    # the first slot wins a tie; a repeated input counts at its first slot, as ``inputs`` keeps it
    return max(((nbytes[ref] or 0, -slot, ref) for slot, ref in enumerate(inputs)))[2]


def baseline(p: Problem) -> dict[str, str]:
    """The skeleton's rule for every unit: with the largest input of its first stage, else its first candidate."""
    exe: dict[str, str] = {}
    done: set[int] = set()
    for n in p.order:
        uid = p.unit_of[n]
        if uid in done:
            continue
        unit = p.units[uid]
        pick = unit.candidates[0]
        ref = _largest_input(p, n)
        if len(unit.candidates) > 1 and ref is not None and exe.get(ref) in unit.candidates:
            pick = exe[ref]
        for m in unit.nodes:
            exe[m] = pick
        done.add(uid)
    return exe


def total_cost(p: Problem, exe: Mapping[str, str]) -> float:
    """The plan's estimated time under ``exe``: every execution plus every bridge, once each."""
    return sum(p.exec_s[n][exe[n]] for n in p.order) + sum(p.tensor_cost(u, exe) for u in p.order)


def _moved_cost(p: Problem, nodes: Sequence[str], exe: Mapping[str, str], counts: Mapping[str, Mapping[str, int]],
                target: str) -> float:
    """:func:`_local` of ``nodes`` moved to ``target``, from per-tensor consumer counts under ``exe``."""
    if len(nodes) == 1:
        return _moved_cost_one(p, nodes[0], exe, counts, target)
    moved = set(nodes)
    adjusted: dict[str, dict[str, int]] = {}
    for n in nodes:
        for ref in p.inputs[n]:
            dests = adjusted.setdefault(ref, dict(counts[ref]))
            dests[exe[n]] -= 1
            dests[target] = dests.get(target, 0) + 1
    total = sum(p.exec_s[n][target] for n in nodes)
    for u in set(nodes) | set(adjusted):
        home = target if u in moved else exe[u]
        dests = adjusted.get(u, counts[u])
        total += sum(p.transfer(u, home, d) for d, k in dests.items() if k > 0 and d != home)
    return total


def _moved_cost_one(p: Problem, n: str, exe: Mapping[str, str], counts: Mapping[str, Mapping[str, int]],
                    target: str) -> float:
    """:func:`_moved_cost` of one stage, without copying its inputs' counts."""
    transfer = p.transfer
    total = p.exec_s[n][target]
    for d, k in counts[n].items():
        if k > 0 and d != target:
            total += transfer(n, target, d)
    here = exe[n]
    for ref in p.inputs[n]:
        home = exe[ref]
        c = counts[ref]
        for d, k in c.items():
            if d == here:
                k -= 1
            if d == target:
                k += 1
            if k > 0 and d != home:
                total += transfer(ref, home, d)
        if target not in c and target != home:
            total += transfer(ref, home, target)
    return total


def _local(p: Problem, nodes: Sequence[str], exe: Mapping[str, str]) -> float:
    """The part of :func:`total_cost` that moving ``nodes`` can change."""
    tensors = set(nodes)
    for n in nodes:
        tensors.update(p.inputs[n])
    return sum(p.exec_s[n][exe[n]] for n in nodes) + sum(p.tensor_cost(u, exe) for u in tensors)


def binary_cut(p: Problem, exe: Mapping[str, str], movable: Sequence[Unit], a: str, b: str) -> dict[str, str]:
    """The optimal split of ``movable`` units between executors ``a`` and ``b``, all else fixed.

    Units that share no tensor cannot change each other's cost, so each
    connected group of them is its own (small) cut problem.
    """
    out = dict(exe)
    if not movable:
        return out
    for component in components(p, movable):
        _cut_component(p, out, component, a, b)
    return out


def components(p: Problem, movable: Sequence[Unit]) -> list[list[Unit]]:
    """``movable`` split into groups that share no tensor: their costs are independent."""
    ids = {u.id for u in movable}
    # Units are linked through the tensors they produce or read: a tensor's producer and all its
    # consumers share its bridges. Each tensor is visited once and its units chained, which links
    # the same components as linking every pair, in time linear in the edges.
    tensors = dict.fromkeys(t for unit in movable for n in unit.nodes
                            for t in (n, *p.inputs[n]))
    unit_of, consumers = p.unit_of, p.consumers
    pairs = []
    for tensor in tensors:
        first = unit_of[tensor]
        inside = [first] if first in ids else []
        for c in consumers[tensor]:
            u = unit_of[c]
            if u in ids and u != first and (not inside or inside[-1] != u):
                inside.append(u)
        pairs.extend(zip(inside, inside[1:]))
    groups: dict[int, list[Unit]] = {}
    root_of = roots(sorted(ids), pairs)
    for u in sorted(movable, key=lambda u: u.id):
        groups.setdefault(root_of[u.id], []).append(u)
    return list(groups.values())


def _touched(p: Problem, units: Sequence[Unit]) -> list[str]:
    nodes = [n for u in units for n in u.nodes]
    return nodes


def gain_bound(p: Problem, exe: Mapping[str, str], units: Sequence[Unit]) -> float:
    """An upper bound on what re-placing ``units`` can save: their excess execution plus every bridge they touch."""
    nodes = _touched(p, units)
    exec_s, inputs = p.exec_s, p.inputs
    bound = 0.0
    for n in nodes:
        row = exec_s[n]
        if len(row) > 1:
            bound += row[exe[n]] - min(row.values())
    tensors = set(nodes)
    for n in nodes:
        tensors.update(inputs[n])
    tensor_cost = p.tensor_cost
    return bound + sum([tensor_cost(u, exe) for u in tensors])


def decide(p: Problem, start: dict[str, str], min_gain_s: float) -> tuple[dict[str, str], str]:
    """The placement the planner uses: the optimum where it beats ``start`` by more than ``min_gain_s``.

    With two executors each independent group of free units is cut on
    its own and kept only if it saves more than ``min_gain_s``; a group
    whose :func:`gain_bound` is already below that is not cut at all
    (its baseline is provably within ``min_gain_s`` of optimal), which
    keeps large plans fast. With more executors the whole placement from
    :func:`optimise` replaces the baseline when it saves enough.
    Returns the placement and its method.
    """
    free = p.free_units()
    if not free:
        return dict(start), "fixed"
    labels = sorted({e for u in free for e in u.candidates}, key=list(p.vendor).index)
    threshold = lambda base: max(min_gain_s, 1e-9 * base)  # noqa: E731
    if len(labels) != 2:
        if gain_bound(p, start, free) <= threshold(total_cost(p, start)):
            return dict(start), "baseline"
        best, method = optimise(p, start)
        base_s, best_s = total_cost(p, start), total_cost(p, best)
        return (best, method) if best_s < base_s - threshold(base_s) else (dict(start), "baseline")
    out, changed = dict(start), False
    # groups share no tensor, so their bounds add up to the whole one: each group is bounded once
    for group in components(p, free):
        if gain_bound(p, start, group) <= min_gain_s:
            continue
        trial = dict(out)
        _cut_component(p, trial, group, labels[0], labels[1])
        nodes = _touched(p, group)
        if _local(p, nodes, trial) < _local(p, nodes, out) - min_gain_s:
            out, changed = trial, True
    return out, ("min-cut" if changed else "baseline")


def _cut_component(p: Problem, out: dict[str, str], movable: Sequence[Unit], a: str, b: str) -> None:
    uid_set = {u.id for u in movable}
    g = nx.DiGraph()
    s, t = ("s",), ("t",)
    g.add_node(s)
    g.add_node(t)

    def add(u: Any, v: Any, cap: float) -> None:
        if cap <= 0:
            return
        if g.has_edge(u, v):
            g[u][v]["capacity"] += cap
        else:
            g.add_edge(u, v, capacity=cap)

    def key(n: str) -> Any:
        return p.unit_of[n] if p.unit_of[n] in uid_set else None

    for unit in movable:
        g.add_node(unit.id)
        add(unit.id, t, sum(p.exec_s[n][a] for n in unit.nodes))
        add(s, unit.id, sum(p.exec_s[n][b] for n in unit.nodes))

    tensors: set[str] = set()
    for unit in movable:
        for n in unit.nodes:
            tensors.add(n)
            tensors.update(p.inputs[n])
    for u in sorted(tensors, key=p.pos.__getitem__):
        ku = key(u)
        free_c = []
        fixed_dests: set[str] = set()
        for c in p.consumers[u]:
            kc = key(c)
            if kc is None:
                fixed_dests.add(out[c])
            elif kc != ku and kc not in free_c:
                free_c.append(kc)
        if ku is None:
            home = out[u]
            if not free_c:
                continue
            for side, dest in ((t, a), (s, b)):
                if dest == home or dest in fixed_dests:
                    continue
                cost = p.transfer(u, home, dest)
                if len(free_c) == 1:
                    add(free_c[0], t, cost) if dest == a else add(s, free_c[0], cost)
                elif dest == a:
                    aux = ("anyA", u)
                    for c in free_c:
                        g.add_edge(c, aux)
                    add(aux, t, cost)
                else:
                    aux = ("anyB", u)
                    for c in free_c:
                        g.add_edge(aux, c)
                    add(s, aux, cost)
            continue
        # u's unit chooses: fixed destinations are unary, free consumers pairwise
        add(ku, t, sum(p.transfer(u, a, d) for d in fixed_dests if d != a))
        add(s, ku, sum(p.transfer(u, b, d) for d in fixed_dests if d != b))
        if not free_c:
            continue
        if b not in fixed_dests:
            cost = p.transfer(u, a, b)
            if len(free_c) == 1:
                add(ku, free_c[0], cost)
            else:
                aux = ("toB", u)
                add(ku, aux, cost)
                for c in free_c:
                    g.add_edge(aux, c)
        if a not in fixed_dests:
            cost = p.transfer(u, b, a)
            if len(free_c) == 1:
                add(free_c[0], ku, cost)
            else:
                aux = ("toA", u)
                add(aux, ku, cost)
                for c in free_c:
                    g.add_edge(c, aux)
    _, (source_side, _) = nx.minimum_cut(g, s, t, flow_func=nx.algorithms.flow.preflow_push)
    for unit in movable:
        side = a if unit.id in source_side else b
        for n in unit.nodes:
            out[n] = side


def _single_moves(p: Problem, exe: dict[str, str], free: Sequence[Unit]) -> dict[str, str]:
    exe = dict(exe)
    for _ in range(8):
        improved = False
        for unit in free:
            here = exe[unit.nodes[0]]
            best, best_cost = here, _local(p, unit.nodes, exe)
            for e in unit.candidates:
                if e == here:
                    continue
                for n in unit.nodes:
                    exe[n] = e
                c = _local(p, unit.nodes, exe)
                if c < best_cost - 1e-15:
                    best, best_cost = e, c
            for n in unit.nodes:
                exe[n] = best
            improved |= best != here
        if not improved:
            break
    return exe


def _swaps(p: Problem, exe: dict[str, str], free: Sequence[Unit], executors: Sequence[str]) -> dict[str, str]:
    best = total_cost(p, exe)
    for _ in range(10):
        improved = False
        for a, b in itertools.combinations(executors, 2):
            movable = [u for u in free if exe[u.nodes[0]] in (a, b) and a in u.candidates and b in u.candidates]
            if not movable:
                continue
            trial = binary_cut(p, exe, movable, a, b)
            c = total_cost(p, trial)
            if c < best - 1e-12 * max(best, 1e-9):
                exe, best, improved = trial, c, True
        if not improved:
            break
    return _single_moves(p, exe, free)


def optimise(p: Problem, start: dict[str, str]) -> tuple[dict[str, str], str]:
    """The cheapest placement found and how: ``"min-cut"``, ``"alpha-beta swap"`` or ``"fixed"``."""
    free = p.free_units()
    if not free:
        return dict(start), "fixed"
    labels = sorted({e for u in free for e in u.candidates}, key=list(p.vendor).index)
    if len(labels) == 2:
        return binary_cut(p, start, free, labels[0], labels[1]), "min-cut"
    fastest = dict(start)
    for unit in free:
        pick = min(unit.candidates, key=lambda e: sum(p.exec_s[n][e] for n in unit.nodes))
        for n in unit.nodes:
            fastest[n] = pick
    runs = [_swaps(p, dict(start), free, labels), _swaps(p, fastest, free, labels)]
    return min(runs, key=lambda e: total_cost(p, e)), "alpha-beta swap"


def brute_force(p: Problem, start: Mapping[str, str]) -> tuple[dict[str, str], float]:
    """Every combination of the free units' candidates; the optimum (for tests on small graphs)."""
    free = p.free_units()
    best, best_cost = dict(start), total_cost(p, start)
    for combo in itertools.product(*(u.candidates for u in free)):
        exe = dict(start)
        for unit, e in zip(free, combo):
            for n in unit.nodes:
                exe[n] = e
        c = total_cost(p, exe)
        if c < best_cost:
            best, best_cost = exe, c
    return best, best_cost


def explain(p: Problem, exe: Mapping[str, str], declared_first: str) -> dict[str, tuple[str, dict]]:
    """``reason`` text and ``why`` data for every stage under the final placement ``exe``."""
    out: dict[str, tuple[str, dict]] = {}
    # How many consumers of each tensor sit on each executor under ``exe``: moving one unit changes a
    # tensor's bridges only through these counts, so a tensor with thousands of consumers is not
    # rescanned for every one of them.
    counts: dict[str, dict[str, int]] = {}
    for u, cs in p.consumers.items():
        c: dict[str, int] = {}
        for consumer in cs:
            e = exe[consumer]
            c[e] = c.get(e, 0) + 1
        counts[u] = c
    exec_s = p.exec_s
    for unit in p.units:
        here = exe[unit.nodes[0]]
        costs: dict[str, dict[str, float]] = {}
        if len(unit.candidates) > 1:
            single = unit.nodes[0] if len(unit.nodes) == 1 else None
            for e in unit.candidates:
                if single is not None:
                    total, ex = _moved_cost_one(p, single, exe, counts, e), exec_s[single][e]
                else:
                    total, ex = _moved_cost(p, unit.nodes, exe, counts, e), sum(exec_s[n][e] for n in unit.nodes)
                costs[e] = {"total_s": total, "exec_s": ex, "bridges_s": total - ex}
        for n in unit.nodes:
            why: dict[str, Any] = {"constraint": unit.constraint or None, "candidates": unit.candidates}
            if len(unit.candidates) == 1:
                kind = unit.constraint or "default"
                text = unit.constraint_text or f"default: {here!r} is the only executor"
            else:
                kind, decision = _decision(p, unit, n, exe, costs, declared_first)
                text = f"{unit.constraint_text}; {decision}" if unit.constraint_text else decision
                why["costs"] = costs
            why["kind"] = kind
            out[n] = (text, why)
    return out


def _decision(p: Problem, unit: Unit, n: str, exe: Mapping[str, str], costs: Mapping[str, Mapping[str, float]],
              declared_first: str) -> tuple[str, str]:
    here = exe[n]
    execs = {round(costs[e]["exec_s"], 15) for e in unit.candidates}
    if len(execs) == 1 and len(unit.nodes) == 1:
        ref = _largest_input(p, n)
        if ref is None and (here == declared_first or here == unit.candidates[0]):
            return "default", "default: no inputs and no pin, first declared executor"
        if ref is not None and exe[ref] == here:
            size = p.nbytes[ref] or 0
            if len(p.inputs[n]) == 1:
                return "inferred", f"inferred: with its input {ref!r}"
            return "inferred", f"inferred: with its largest input {ref!r} ({human_bytes(size)})"
    mine = costs[here]
    others = ", ".join(f"{e} {format_s(costs[e]['total_s'])}" for e in unit.candidates if e != here)
    return "cost", (f"cost: {here} {format_s(mine['total_s'])} (exec {format_s(mine['exec_s'])} + bridges "
                    f"{format_s(mine['bridges_s'])}) vs {others}")
