"""The planner's graph: networkx's own adjacency tables, without networkx's import.

The passes read a plan's graph through its tables alone (``_node``,
``_succ``, ``_pred`` and the ``graph`` dict, laid out as a
``networkx.DiGraph`` lays them out: see
:func:`hetflow.engine.plan.plangraph.successors`), and a command that plans
a small manifest would spend more on ``import networkx`` (about 0.07 s,
as long as numpy and PyYAML together) than on planning it. networkx
runs the graph algorithms: the minimum cut of placement, the
topological sort of a manifest written out of order, the cycles of one
that has any. :meth:`Graph.to_networkx` hands it the same tables, shared,
not copied, so an algorithm costs its import only where it runs.

>>> g = Graph()
>>> g.add_edge("x", "y")
>>> g.nodes["x"]["executor"] = "a"
>>> list(g), list(g.successors("x")), list(g.predecessors("y")), len(g)
(['x', 'y'], ['y'], ['x'], 2)
>>> sorted(g.to_networkx().edges)
[('x', 'y')]
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

__all__ = ["Graph", "roots"]


class Graph:
    """A directed graph as the plan's passes build and read it; see the module's docstring."""

    __slots__ = ("graph", "_node", "_succ", "_pred")

    def __init__(self, edges: Iterable[tuple[str, str]] = ()) -> None:
        self.graph: dict[str, Any] = {}
        self._node: dict[str, dict] = {}
        self._succ: dict[str, dict] = {}
        self._pred: dict[str, dict] = {}
        for u, v in edges:
            self.add_edge(u, v)

    @property
    def nodes(self) -> dict[str, dict]:
        """Each node's attribute dict (the table itself: ``nodes[n]``, ``nodes.items()``)."""
        return self._node

    @property
    def succ(self) -> dict[str, dict]:
        return self._succ

    @property
    def pred(self) -> dict[str, dict]:
        return self._pred

    @property
    def edges(self) -> list[tuple[str, str]]:
        """Every edge ``(u, v)``, in networkx's order: by ``u``, then by ``v`` as added."""
        return [(u, v) for u, nbrs in self._succ.items() for v in nbrs]

    def __iter__(self) -> Iterator[str]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, n: object) -> bool:
        return n in self._node

    def add_node(self, n: str, **attrs: Any) -> None:
        if n not in self._node:
            self._node[n], self._succ[n], self._pred[n] = {}, {}, {}
        self._node[n].update(attrs)

    def add_edge(self, u: str, v: str, **attrs: Any) -> None:
        for n in (u, v):
            if n not in self._node:
                self._node[n], self._succ[n], self._pred[n] = {}, {}, {}
        data = self._succ[u].get(v)
        if data is None:
            data = self._succ[u][v] = self._pred[v][u] = {}
        data.update(attrs)

    def successors(self, n: str) -> Iterator[str]:
        return iter(self._succ[n])

    def predecessors(self, n: str) -> Iterator[str]:
        return iter(self._pred[n])

    def copy(self) -> Graph:
        """A copy as ``networkx.DiGraph.copy`` makes one: new tables, new attribute dicts, the values shared."""
        out = Graph()
        out.graph = dict(self.graph)
        out._node = {n: dict(d) for n, d in self._node.items()}
        succ: dict[str, dict] = {n: {} for n in self._node}
        pred: dict[str, dict] = {n: {} for n in self._node}
        for u, nbrs in self._succ.items():
            into = succ[u]
            for v, d in nbrs.items():
                into[v] = pred[v][u] = dict(d)
        out._succ, out._pred = succ, pred
        return out

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` over the same tables (shared: a change to either shows in both)."""
        import networkx as nx

        g = nx.DiGraph()
        g.graph = self.graph
        g._node = self._node
        g._adj = g._succ = self._succ
        g._pred = self._pred
        return g


def roots(nodes: Iterable[str], pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each node's connected component under ``pairs``, named by one of its members.

    What ``nx.connected_components`` of a graph of these pairs gives, by
    union-find (path halving): on a large plan, building that graph costs
    more than the components. The finds are written out in the loops: a
    call per lookup would cost more than the lookup.

    >>> roots("abcd", [("a", "b"), ("c", "b")])
    {'a': 'c', 'b': 'c', 'c': 'c', 'd': 'd'}
    """
    parent = {n: n for n in nodes}
    for a, b in pairs:
        up = parent[a]
        while up != a:
            parent[a] = a = parent[up]
            up = parent[a]
        up = parent[b]
        while up != b:
            parent[b] = b = parent[up]
            up = parent[b]
        if a != b:
            parent[b] = a
    found: dict[str, str] = {}
    for n in parent:
        x, up = n, parent[n]
        while up != x:
            parent[x] = x = parent[up]
            up = parent[x]
        found[n] = x
    return found
