"""The plan as data: what ``hetflow plan`` prints and ``hetflow run`` executes.

:class:`Plan` holds the executors chosen, every node with its executor,
partition and reason, the partitions, the bridges and, for emulator
phases, what is known of them before the guest runs. ``Plan.to_json()``
is the documented JSON form; ``PLAN_FORMAT`` versions it. The planner
(:mod:`hetflow.engine.plan.planner`) builds a plan; :mod:`hetflow.engine.plan.planview`
shows one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from hetflow.engine.errors import Origin
from hetflow.engine.heap import gc_paused
from hetflow.executors.base import Dtype, Vendor

__all__ = ["PLAN_FORMAT", "ExecutorPlan", "NodePlan", "PlanWarning", "Partition", "Bridge", "Plan", "json_bytes", "json_text"]

PLAN_FORMAT = 2


@dataclass(frozen=True)
class ExecutorPlan:
    name: str
    vendor: Vendor
    device: int
    reason: str
    worker: str | None = None
    worker_name: str | None = None
    worker_reason: str = ""
    memory_limit: int | None = None


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
    why: Mapping[str, Any] = field(default_factory=dict, compare=False)
    estimated_s: float | None = None
    bound: bool = False
    """``shape`` and ``bytes`` are an upper bound (the stage reads a bounded phase array), not exact."""


@dataclass(frozen=True)
class PlanWarning:
    """Something the plan does that its author may not want: a dominating bridge, a vendor fallback."""

    kind: str
    message: str
    origin: Origin | None = None

    def __str__(self) -> str:
        return f"{self.origin}: warning: {self.message}" if self.origin else f"warning: {self.message}"


@dataclass(frozen=True)
class Partition:
    """Nodes that run as one task on one executor, in execution order.

    ``retries`` is the largest ``retries`` of its stages; ``timeout`` the
    sum of the timeouts its stages set, ``None`` when none sets one.
    """

    id: str
    executor: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    retries: int = 0
    timeout: float | None = None


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
    estimated_s: float | None = None
    link: str = ""
    bound: bool = False
    """``bytes`` is an upper bound (a ``witness`` table's), not exact."""


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
    warnings: tuple[PlanWarning, ...] = ()
    estimate: Mapping[str, Any] = field(default_factory=dict, repr=False)
    memory: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    phases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    emulators: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    phase_inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    phase_outputs: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)

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
            "bytes_bridged_bound": any(b.bound for b in self.bridges),
        }

    def to_json(self, explain: bool = False) -> dict:
        """The plan as JSON-ready data; its keys are stable within ``format``.

        ``explain=True`` (what ``hetflow plan --format json`` prints) adds
        the estimates and the reasons as data: ``why`` and ``estimated_s``
        per node, ``estimated_s`` and ``link`` per bridge, ``peak_bytes``
        and ``memory_bytes`` per partition, ``estimated_s`` in totals, and
        the top-level ``estimate`` and ``warnings``. Without it, ``warnings``
        is there where the plan has any (a run's record keeps them).
        """
        # a large plan's JSON is millions of new dicts and lists, all alive until written: the cyclic GC
        # would walk them, and the plan, again and again and free nothing
        with gc_paused():
            return self._to_json(explain)

    def _nodes_json(self, explain: bool, rounded: dict[float, float]) -> dict:
        """The ``nodes`` of :meth:`to_json`: one dict literal per stage."""
        nodes, inputs = self.nodes.values(), self.stage_inputs
        if not explain:
            return {n.id: {"op": n.op, "executor": n.executor, "reason": n.reason, "partition": n.partition,
                           "inputs": list(inputs[n.id]), "shape": None if n.shape is None else list(n.shape),
                           "dtype": n.dtype._value_, "bytes": n.bytes,
                           "size": "unknown" if n.bytes is None else "bound" if n.bound else "exact",
                           "origin": str(n.origin)}
                    for n in nodes}
        # stages alike share one ``why`` object: each is converted once
        whys = {key: _why_json(why, rounded) for key, why in {id(n.why): n.why for n in nodes}.items()}
        return {n.id: {"op": n.op, "executor": n.executor, "reason": n.reason, "partition": n.partition,
                       "inputs": list(inputs[n.id]), "shape": None if n.shape is None else list(n.shape),
                       "dtype": n.dtype._value_, "bytes": n.bytes,
                       "size": "unknown" if n.bytes is None else "bound" if n.bound else "exact",
                       "origin": str(n.origin), "why": whys[id(n.why)], "estimated_s": n.estimated_s}
                for n in nodes}

    def _to_json(self, explain: bool) -> dict:
        rounded: dict[float, float] = {}  # estimates repeat across stages alike: each is rounded once
        data = {
            "format": PLAN_FORMAT,
            "name": self.name,
            "manifest_digest": self.digest,
            "executors": {
                e.name: {"vendor": e.vendor.value, "device": e.device, "reason": e.reason,
                         **({"worker": e.worker, "worker_name": e.worker_name, "worker_reason": e.worker_reason}
                            if e.worker else {}),
                         **({"memory_limit": e.memory_limit} if e.memory_limit is not None else {}),
                         **({"devices": "all" if e.device.indexes is None else list(e.device.indexes),
                             "split": None if e.device.split is None else list(e.device.split)}
                            if getattr(e.device, "indexes", 0) != 0 else {})}
                for e in self.executors.values()
            },
            "nodes": self._nodes_json(explain, rounded),
            "partitions": [
                {"id": p.id, "executor": p.executor, "nodes": list(p.nodes),
                 "inputs": list(p.inputs), "outputs": list(p.outputs), "retries": p.retries, "timeout": p.timeout,
                 **(dict(self.memory.get(p.id, {})) if explain else {})}
                for p in self.partitions
            ],
            "bridges": [
                {"id": b.id, "tensor": b.tensor, "source": b.source, "destination": b.destination,
                 "bytes": b.bytes, "size": _size(b.bytes, b.bound), "consumers": list(b.consumers), "kind": b.kind,
                 **({"link": b.link, "estimated_s": b.estimated_s} if explain else {})}
                for b in self.bridges
            ],
            "outputs": dict(self.outputs),
            "totals": self.totals(),
        }
        if self.phases:
            data["emulators"] = {k: dict(v) for k, v in self.emulators.items()}
            data["phases"] = {k: dict(v) for k, v in self.phases.items()}
            data["phase_outputs"] = {k: f"{s}.{f}" if f else s for k, (s, f) in self.phase_outputs.items()}
        if explain or self.warnings:  # a record keeps what its plan warned of (a vendor fallback, a cost= that failed)
            data["warnings"] = [{"kind": w.kind, "message": w.message, "origin": str(w.origin) if w.origin else None}
                                for w in self.warnings]
        if explain:
            data["totals"]["estimated_s"] = self.estimate.get("total_s")
            data["estimate"] = _jsonable(self.estimate, rounded)
        return data


def json_bytes(data: Any) -> bytes:
    """``data`` as indented JSON text and a newline, in UTF-8: the values ``json.dumps(data, indent=2)`` writes.

    orjson writes it, about fifteen times faster than the standard
    library's encoder, which drops to pure Python when it indents (a
    100,000-stage plan is 80 MB of text), straight into the bytes a file
    takes. The text may differ from ``json.dumps``'s in spelling alone: a
    float's digits may be written without an exponent, and characters
    beyond ASCII are UTF-8 rather than ``\\u`` escapes. Data orjson
    refuses (an integer beyond 64 bits) is written by the standard
    library.

    >>> print(json_bytes({"a": [1, 2.5], "b": None}).decode(), end="")
    {
      "a": [
        1,
        2.5
      ],
      "b": null
    }
    """
    try:
        return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        return (json.dumps(data, indent=2) + "\n").encode()


def json_text(data: Any) -> str:
    """:func:`json_bytes` as text.

    >>> json_text({"n": 2**70, "s": "é"})
    '{\\n  "n": 1180591620717411303424,\\n  "s": "\\\\u00e9"\\n}\\n'
    """
    return json_bytes(data).decode()


def _size(nbytes: int | None, bound: bool) -> str:
    """How a plan knows a size: ``exact``, an upper ``bound``, or ``unknown``."""
    return "unknown" if nbytes is None else "bound" if bound else "exact"


def _why_json(why: Mapping[str, Any], rounded: dict[float, float]) -> Any:
    """:func:`_jsonable` of a node's ``why``, said directly for the shape the placement gives it.

    >>> _why_json({"constraint": None, "candidates": ["a", "b"], "kind": "cost",
    ...            "costs": {"a": {"total_s": 1 / 3, "exec_s": 0.25, "bridges_s": 1 / 12}}}, {})
    {'constraint': None, 'candidates': ['a', 'b'], 'kind': 'cost', 'costs': {'a': {'total_s': 0.333333, 'exec_s': 0.25, 'bridges_s': 0.0833333}}}
    """
    out = {}
    for key, value in why.items():
        cls = value.__class__
        if cls is str or value is None:
            out[key] = value
        elif key == "candidates" and cls is list:
            out[key] = [c if c.__class__ is str else _jsonable(c, rounded) for c in value]
        elif key == "costs" and cls is dict:
            costs = {}
            for e, row in value.items():
                if e.__class__ is not str or row.__class__ is not dict:
                    costs = _jsonable(value, rounded)
                    break
                costs[e] = entry = {}
                for name, v in row.items():
                    if name.__class__ is not str:
                        name = str(name)
                    if v.__class__ is float:
                        r = rounded.get(v)
                        if r is None:
                            r = rounded[v] = float(f"{v:.6g}")
                        entry[name] = r
                    else:
                        entry[name] = _jsonable(v, rounded)
            out[key] = costs
        else:
            out[key if key.__class__ is str else str(key)] = _jsonable(value, rounded)
    return out


def _jsonable(value: Any, rounded: dict[float, float]) -> Any:
    """``value`` as JSON data: tuples as lists, keys as strings, floats to 6 significant digits.

    ``rounded`` memoizes the floats already rounded.

    >>> _jsonable({"costs": {"a": (0.1234567, 2)}, 3: None}, {})
    {'costs': {'a': [0.123457, 2]}, '3': None}
    """
    cls = value.__class__
    if cls is str or cls is int or cls is bool or value is None:
        return value
    if cls is float:
        out = rounded.get(value)
        if out is None:
            out = rounded[value] = float(f"{value:.6g}")
        return out
    if isinstance(value, dict):
        return {k if k.__class__ is str else str(k): _jsonable(v, rounded) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, rounded) for v in value]
    if isinstance(value, float):
        return _jsonable(float(value), rounded)
    return value
