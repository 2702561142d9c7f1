"""hetflow's own layered layout of a plan graph: geometry only, no drawing.

1. *layers*: a node's column is the longest path from a source to it, so
   every edge points right;
2. *bands*: each executor is a horizontal band, in declaration order; a
   bridge sits in the gap next to its source band, on the side of its
   destination, so crossings between executors read as a move between
   bands;
3. *rows*: inside one (band, column) cell, nodes are ordered by the mean
   row of their predecessors (the barycentre heuristic), ties in plan
   order; a band is as tall as its fullest cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import networkx as nx

from hetflow.engine.report.data import _phase_target, _plan_graph

__all__ = ["GraphNode", "PlanLayout", "layout_graph", "layout_plan"]


@dataclass(frozen=True)
class GraphNode:
    id: str
    kind: str  # "stage", "phase", "bridge" or "partition"
    band: int
    column: int
    x: float
    y: float
    w: float
    h: float
    data: Mapping[str, Any]


@dataclass(frozen=True)
class PlanLayout:
    width: float
    height: float
    bands: tuple[tuple[str, float, float], ...]  # (executor, top, height)
    nodes: Mapping[str, GraphNode]
    edges: tuple[tuple[str, str], ...]

_NODE_W, _BRIDGE_W, _NODE_H, _BRIDGE_H, _HGAP, _VGAP, _PAD, _LABEL_H = 172, 128, 50, 38, 40, 12, 16, 24


def layout_plan(plan: Mapping[str, Any]) -> PlanLayout:
    """hetflow's own layered layout of a plan (see the module docstring).

    >>> plan = {"executors": {"host": {}, "accel": {}},
    ...         "nodes": {"x": {"executor": "host", "inputs": []},
    ...                   "h": {"executor": "accel", "inputs": ["x"]}},
    ...         "bridges": [{"id": "x@accel", "tensor": "x", "source": "host", "destination": "accel"}]}
    >>> lay = layout_plan(plan)
    >>> sorted((n.column, n.band, n.id) for n in lay.nodes.values())
    [(0, 0, 'x'), (1, 0, 'x@accel'), (2, 1, 'h')]
    >>> lay.nodes["b:x@accel"].y > lay.nodes["n:x"].y       # in the gap below host, above accel
    True
    """
    return layout_graph(_plan_graph(plan), plan)


def layout_graph(g: nx.DiGraph, plan: Mapping[str, Any], *, wrap: bool = False) -> PlanLayout:
    """The same layout for any graph whose nodes carry ``kind``, ``id``, ``executor`` and ``data``: the plan's
    own (:func:`layout_plan`) or its partitions (what a big plan collapses to); every kind but ``bridge`` sits
    in its executor's band.

    With ``wrap``, a cell of many nodes (hundreds of independent partitions all in column 0) is folded into
    side-by-side sub-columns about three times as tall as they are many, instead of one column thousands of
    pixels tall.

    >>> g = nx.DiGraph()
    >>> g.add_nodes_from((f"p{i}", {"kind": "partition", "id": f"p{i}", "executor": "e", "data": {}}) for i in range(40))
    >>> lay = layout_graph(g, {"executors": {"e": {}}}, wrap=True)
    >>> len({n.x for n in lay.nodes.values()}), len({n.y for n in lay.nodes.values()})
    (4, 11)
    """
    # emulators first: their phases are where the data enters
    names = list(dict.fromkeys(_phase_target(p) for p in (plan.get("phases") or {}).values()))
    names += list((plan.get("executors") or {}).keys())
    for _, d in g.nodes(data=True):
        if d["executor"] not in names:
            names.append(d["executor"])
    band_of = {name: i for i, name in enumerate(names)}

    order = {n: i for i, n in enumerate(g.nodes)}
    column: dict[str, int] = {}
    for n in nx.lexicographical_topological_sort(g, key=order.__getitem__):
        column[n] = max((column[p] + 1 for p in g.predecessors(n)), default=0)

    def slot(n: str) -> tuple[str, int]:
        d = g.nodes[n]
        if d["kind"] != "bridge":
            return ("band", band_of[d["executor"]])
        src = band_of[d["executor"]]
        dst = band_of.get(d["data"].get("destination"), src)
        return ("gap", src if dst > src else src - 1)

    cells: dict[tuple[tuple[str, int], int], list[str]] = {}
    for n in sorted(g.nodes, key=lambda n: (column[n], order[n])):
        cells.setdefault((slot(n), column[n]), []).append(n)
    row: dict[str, int] = {}
    for key in sorted(cells, key=lambda k: k[1]):
        members = cells[key]

        def barycentre(n: str) -> float:
            preds = [row[p] for p in g.predecessors(n) if p in row]
            return sum(preds) / len(preds) if preds else float(order[n]) / 1e6

        members.sort(key=lambda n: (barycentre(n), order[n]))
        for i, n in enumerate(members):
            row[n] = i
    tallest = max((len(m) for m in cells.values()), default=1)
    fold = max(10, math.ceil(math.sqrt(3 * tallest))) if wrap else max(1, tallest)
    sub = {n: r // fold for n, r in row.items()}
    row = {n: r % fold for n, r in row.items()}

    def rows_in(s: tuple[str, int]) -> int:
        return max((min(len(m), fold) for (sl, _), m in cells.items() if sl == s), default=0)

    bands = []
    top = _PAD
    slot_top: dict[tuple[str, int], float] = {}
    for i in range(-1, len(names)):
        if i >= 0:
            n_rows = max(1, rows_in(("band", i)))
            height = _LABEL_H + n_rows * (_NODE_H + _VGAP) + _VGAP
            slot_top[("band", i)] = top + _LABEL_H + _VGAP
            bands.append((names[i], top, height))
            top += height
        gap_rows = rows_in(("gap", i))
        slot_top[("gap", i)] = top + _VGAP
        top += gap_rows * (_BRIDGE_H + _VGAP) + (_VGAP if gap_rows else _VGAP / 2)
    height = top + _PAD

    n_cols = max(column.values(), default=0) + 1
    col_w = [_BRIDGE_W] * n_cols
    for n, d in g.nodes(data=True):
        if d["kind"] != "bridge":
            col_w[column[n]] = _NODE_W
    subs = [1] * n_cols
    for (_, c), members in cells.items():
        subs[c] = max(subs[c], math.ceil(len(members) / fold))
    one_w = list(col_w)
    col_w = [w * k + (k - 1) * _HGAP / 2 for w, k in zip(col_w, subs)]
    col_x = [_PAD * 2 + sum(col_w[:c]) + c * _HGAP for c in range(n_cols)]
    placed = {}
    for n, d in g.nodes(data=True):
        s = slot(n)
        w, h = (_BRIDGE_W, _BRIDGE_H) if d["kind"] == "bridge" else (_NODE_W, _NODE_H)
        y = slot_top[s] + row[n] * ((_NODE_H if s[0] == "band" else _BRIDGE_H) + _VGAP)
        c = column[n]
        x = col_x[c] + sub[n] * (one_w[c] + _HGAP / 2) + (one_w[c] - w) / 2
        placed[n] = GraphNode(d["id"], d["kind"], band_of[d["executor"]], column[n], x, y, w, h, d["data"])
    width = _PAD * 3 + sum(col_w) + (n_cols - 1) * _HGAP
    return PlanLayout(width, height, tuple(bands), placed, tuple(g.edges))
