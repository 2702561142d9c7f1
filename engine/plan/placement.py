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
   executor), from the cost model (:mod:`hetflow.engine.plan.costs`).

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
import operator
from typing import Any, Mapping, Sequence

from hetflow.engine.adjacency import roots
from hetflow.engine.plan.candidates import (
    Problem,
    Unit,
    arriving_dtype,
    candidates,
    explain,
    format_s,
    import_s,
    is_phase,
    largest_input,
    local_cost,
    node_data,
    node_inputs,
    total_cost,
)

__all__ = [
    "Unit",
    "Problem",
    "is_phase",
    "node_inputs",
    "import_s",
    "node_data",
    "arriving_dtype",
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


def baseline(p: Problem) -> dict[str, str]:
    """The skeleton's rule for every unit: with the largest input of its first stage, else its first candidate."""
    exe: dict[str, str] = {}
    done: set[int] = set()
    units, unit_of, inputs = p.units, p.unit_of, p.inputs
    for n in p.order:
        unit = units[unit_of[n]]
        nodes = unit.nodes
        if len(nodes) > 1:
            if unit.id in done:
                continue
            done.add(unit.id)
        cands = unit.candidates
        pick = cands[0]
        if len(cands) > 1:
            ins = inputs[n]
            if ins:
                found = exe.get(ins[0] if len(ins) == 1 else largest_input(p, n))
                if found in cands:
                    pick = found
        if len(nodes) == 1:
            exe[n] = pick
        else:
            for m in nodes:
                exe[m] = pick
    return exe


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
    tensors: dict[str, None] = {}
    for unit in movable:
        for n in unit.nodes:
            tensors[n] = None
            for t in p.inputs[n]:
                tensors[t] = None
    return _linked(p, movable, {u.id for u in movable}, tensors)


def _linked(p: Problem, movable: Sequence[Unit], ids: set[int], tensors: Mapping[str, None]) -> list[list[Unit]]:
    """:func:`components` of ``movable`` (unit ids ``ids``), given every tensor they produce or read."""
    return list(_linked_by_root(p, movable, ids, tensors)[0].values())


def _linked_by_root(p: Problem, movable: Sequence[Unit], ids: set[int],
                    tensors: Mapping[str, None]) -> tuple[dict[int, list[Unit]], list[int]]:
    """:func:`_linked`'s groups keyed by their root unit id, and ``parent``: each unit of ``movable``'s root."""
    # Units are linked through the tensors they produce or read: a tensor's producer and all its
    # consumers share its bridges. Each tensor is visited once and its units chained, which links
    # the same components as linking every pair, in time linear in the edges. Unit ids are indices,
    # so the union-find (path halving) keeps its parents in a list and its finds inline.
    unit_of, consumers = p.unit_of, p.consumers
    parent = list(range(len(p.units)))
    free = bytearray(len(p.units))
    for i in ids:
        free[i] = 1
    for tensor in tensors:
        first = unit_of[tensor]
        cs = consumers[tensor]
        if len(cs) == 1:  # most tensors: one pair at most, no list to chain
            u = unit_of[cs[0]]
            if u == first or not free[u] or not free[first]:
                continue
            chain = (first, u)
        else:
            inside = [first] if free[first] else []
            for c in cs:
                u = unit_of[c]
                if free[u] and u != first and (not inside or inside[-1] != u):
                    inside.append(u)
            if len(inside) < 2:
                continue
            chain = inside
        a = chain[0]
        up = parent[a]
        while up != a:
            parent[a] = a = parent[up]
            up = parent[a]
        for b in chain[1:]:
            up = parent[b]
            while up != b:
                parent[b] = b = parent[up]
                up = parent[b]
            if a != b:
                parent[b] = a
    groups: dict[int, list[Unit]] = {}
    for unit in sorted(movable, key=_unit_id):
        x = unit.id
        up = parent[x]
        while up != x:
            parent[x] = x = parent[up]
            up = parent[x]
        parent[unit.id] = x
        found = groups.get(x)
        if found is None:
            groups[x] = [unit]
        else:
            found.append(unit)
    return groups, parent


_unit_id = operator.attrgetter("id")


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


def _groups_worth_cutting(p: Problem, exe: Mapping[str, str], free: Sequence[Unit],
                          min_gain_s: float) -> list[list[Unit]]:
    """The groups of :func:`components` whose :func:`gain_bound` under ``exe`` exceeds ``min_gain_s``.

    Each stage's excess execution and each tensor's bridges are priced
    once, for the whole bound and the groups' alike: every tensor a group
    touches belongs to that group alone (its producer and free consumers
    are linked). Groups share no tensor, so their bounds sum to at most
    the whole one: below the threshold no group is worth cutting, and the
    groups are not looked for.
    """
    exec_s, inputs, unit_of, tensor_cost, consumers = p.exec_s, p.inputs, p.unit_of, p.tensor_cost, p.consumers
    excess: dict[str, float] = {}
    tensors: dict[str, None] = {}
    priced: dict[str, float] = {}
    fastest: dict[int, float] = {}  # per execution row (rows are shared by stages alike)
    for unit in free:
        for n in unit.nodes:
            row = exec_s[n]
            if len(row) > 1:
                low = fastest.get(id(row))
                if low is None:
                    low = fastest[id(row)] = min(row.values())
                x = row[exe[n]] - low
                if x:
                    excess[n] = x
            # each tensor priced where first met (a stage before its consumers): bridges under ``exe``
            for t in (n, *inputs[n]):
                if t in tensors:
                    continue
                tensors[t] = None
                cs = consumers[t]
                if not cs or len(cs) == 1 and exe[cs[0]] == exe[t]:
                    continue
                c = tensor_cost(t, exe)
                if c:
                    priced[t] = c
    if sum(excess.values()) + sum(priced.values()) <= min_gain_s:
        return []
    ids = {u.id for u in free}
    by_root, root_of = _linked_by_root(p, free, ids, tensors)
    index = {root: i for i, root in enumerate(by_root)}
    bound = [0.0] * len(by_root)
    for n, x in excess.items():
        bound[index[root_of[unit_of[n]]]] += x
    for t, c in priced.items():
        owner = unit_of[t]
        if owner not in ids:
            owner = next(unit_of[k] for k in p.consumers[t] if unit_of[k] in ids)
        bound[index[root_of[owner]]] += c
    return [group for group, b in zip(by_root.values(), bound) if b > min_gain_s]


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
    labels = _labels(p, free)
    threshold = lambda base: max(min_gain_s, 1e-9 * base)  # noqa: E731
    if len(labels) != 2:
        if gain_bound(p, start, free) <= threshold(total_cost(p, start)):
            return dict(start), "baseline"
        best, method = optimise(p, start)
        base_s, best_s = total_cost(p, start), total_cost(p, best)
        return (best, method) if best_s < base_s - threshold(base_s) else (dict(start), "baseline")
    out, changed = dict(start), False
    for group in _groups_worth_cutting(p, start, free, min_gain_s):
        trial = dict(out)
        _cut_component(p, trial, group, labels[0], labels[1])
        nodes = _touched(p, group)
        if local_cost(p, nodes, trial) < local_cost(p, nodes, out) - min_gain_s:
            out, changed = trial, True
    return out, ("min-cut" if changed else "baseline")


def _labels(p: Problem, free: Sequence[Unit]) -> list[str]:
    """The executors ``free`` units may choose among, in declaration order (units share candidate lists)."""
    lists = {id(u.candidates): u.candidates for u in free}
    return sorted({e for cands in lists.values() for e in cands}, key=list(p.vendor).index)


# A group of this many free units or fewer is settled by trying every split: 2**6 costings take less
# than building the flow network, and a small plan never pays for networkx's import (about as long as
# numpy's). The optimum is the cut's, and so is the choice on a tie (below).
ENUMERATED = 6


def _cut_component(p: Problem, out: dict[str, str], movable: Sequence[Unit], a: str, b: str) -> None:
    if len(movable) <= ENUMERATED:
        _best_split(p, out, movable, a, b)
        return
    import networkx as nx
    from networkx.algorithms.flow import preflow_push

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
    source_side = _source_side(g, preflow_push(g, s, t, value_only=True), t)
    for unit in movable:
        side = a if unit.id in source_side else b
        for n in unit.nodes:
            out[n] = side


def _source_side(g: Any, residual: Any, t: Any) -> set:
    """The source side of the minimum cut that ``residual`` (a maximum flow on ``g``) gives: what cannot reach
    ``t`` through an edge with capacity left, as ``networkx.minimum_cut`` reads it.

    Both graphs are emptied on the way out. A networkx graph that has
    been walked keeps views of itself (``G.edges``, ``G.nodes``): a
    cycle, which only the cyclic collector frees, and the planner pauses
    it. Left to it, the residual networks of an alpha-beta swap's
    thousands of cuts were all alive at the end of a plan: 3.9 GB for
    2,000 stages on 50 executors.
    """
    sink_side = {t}
    todo = [t]
    pred = residual.pred
    while todo:
        v = todo.pop()
        for u, d in pred[v].items():
            if u not in sink_side and d["flow"] != d["capacity"]:
                sink_side.add(u)
                todo.append(u)
    source = {n for n in g if n not in sink_side}
    for graph in (residual, g):
        graph.__dict__.clear()
    return source


def _best_split(p: Problem, out: dict[str, str], movable: Sequence[Unit], a: str, b: str) -> None:
    """:func:`_cut_component` by trying every split of ``movable`` between ``a`` and ``b``.

    The cost is a cut function, so its minimisers are closed under union: the units some optimal split
    puts on ``a`` are, all on ``a``, an optimal split too, and they are the source side networkx's cut
    returns (everything that cannot reach the sink in the residual network). That split is kept, the
    first optimal one should rounding ever make it dearer.
    """
    nodes = _touched(p, movable)
    splits: list[tuple[float, tuple[str, ...]]] = []
    for sides in itertools.product((a, b), repeat=len(movable)):
        for unit, side in zip(movable, sides):
            for n in unit.nodes:
                out[n] = side
        splits.append((local_cost(p, nodes, out), sides))
    low = min(cost for cost, _ in splits)
    optimal = [sides for cost, sides in splits if cost <= low + 1e-12 * max(1.0, abs(low))]
    chosen = tuple(a if any(sides[i] == a for sides in optimal) else b for i in range(len(movable)))
    for unit, side in zip(movable, chosen):
        for n in unit.nodes:
            out[n] = side
    if local_cost(p, nodes, out) > low + 1e-12 * max(1.0, abs(low)):
        for unit, side in zip(movable, optimal[0]):
            for n in unit.nodes:
                out[n] = side


def _single_moves(p: Problem, exe: dict[str, str], free: Sequence[Unit]) -> dict[str, str]:
    exe = dict(exe)
    for _ in range(8):
        improved = False
        for unit in free:
            here = exe[unit.nodes[0]]
            best, best_cost = here, local_cost(p, unit.nodes, exe)
            for e in unit.candidates:
                if e == here:
                    continue
                for n in unit.nodes:
                    exe[n] = e
                c = local_cost(p, unit.nodes, exe)
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
    labels = _labels(p, free)
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
