"""What a report shows, computed from a run's record and outputs: no HTML here.

The timeline's bars (:class:`Bar`, one per task of the record, packed into
sub-rows by :func:`pack_lanes`), the plan as the report draws it (stages,
emulator phases and bridges as one graph), each output's statistics
(:func:`output_stats`), and a sweep's points with their scalar outputs.
Every field of a record is read with a default, so records of an older
``format``, or written by a run that crashed half way, still yield data.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import networkx as nx
import numpy as np

from hetflow.engine.store.runs import status_of

__all__ = ["Bar", "pack_lanes", "output_stats"]

_FAILED = ("failed", "timed out")


def _parse_iso(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Bar:
    """One task on the timeline; times are seconds from the run's start."""

    kind: str
    id: str
    lane: str
    start: float
    duration: float
    status: str
    task: Mapping[str, Any]

    @property
    def end(self) -> float:
        return self.start + self.duration


def _bars(record: Mapping[str, Any]) -> list[Bar]:
    t0 = _parse_iso(record.get("started_at"))
    workers = any(t.get("worker") for t in record.get("tasks") or [])
    bars = []
    for task in record.get("tasks") or []:
        if not isinstance(task, Mapping):
            continue
        start = task.get("offset_s")
        if start is None:
            ts = _parse_iso(task.get("start"))
            start = (ts - t0) if ts is not None and t0 is not None else 0.0
        duration = task.get("duration_s")
        if duration is None:
            te, ts = _parse_iso(task.get("end")), _parse_iso(task.get("start"))
            duration = (te - ts) if te is not None and ts is not None else 0.0
        executor = task.get("executor") or task.get("emulator") or "engine"
        lane = f"{task.get('worker')} · {executor}" if workers and task.get("worker") else str(executor)
        bars.append(Bar(str(task.get("kind", "task")), str(task.get("id", "?")), lane, max(0.0, float(start)),
                        max(0.0, float(duration)), str(task.get("status", "unknown")), task))
    return bars


def pack_lanes(bars: Iterable[Bar]) -> dict[str, list[list[Bar]]]:
    """Bars per lane, packed into sub-rows where they overlap in time.

    >>> a = Bar("partition", "p0", "host", 0.0, 2.0, "succeeded", {})
    >>> b = Bar("partition", "p1", "host", 1.0, 2.0, "succeeded", {})
    >>> c = Bar("partition", "p2", "host", 2.5, 1.0, "succeeded", {})
    >>> [[x.id for x in row] for row in pack_lanes([a, b, c])["host"]]
    [['p0', 'p2'], ['p1']]
    """
    lanes: dict[str, list[list[Bar]]] = {}
    for bar in sorted(bars, key=lambda b: (b.start, b.end)):
        rows = lanes.setdefault(bar.lane, [])
        for row in rows:
            if row[-1].end <= bar.start + 1e-9:
                row.append(bar)
                break
        else:
            rows.append([bar])
    return lanes


def _phase_target(p: Mapping[str, Any]) -> str:
    return p.get("target") or f"emulator:{p.get('emulator')}"


def _plan_graph(plan: Mapping[str, Any]) -> nx.DiGraph:
    """The plan's graph as the report draws it: stages, emulator phases (on their emulator) and bridges."""
    g = nx.DiGraph()
    phases = plan.get("phases") or {}
    for pid, p in phases.items():
        g.add_node(f"n:{pid}", kind="phase", id=pid, executor=_phase_target(p), data=p)
    nodes = plan.get("nodes") or {}
    for nid, n in nodes.items():
        g.add_node(f"n:{nid}", kind="stage", id=nid, executor=n.get("executor"), data=n)
    bridges = {(b.get("tensor"), b.get("destination")): b for b in plan.get("bridges") or []}
    for b in bridges.values():
        g.add_node(f"b:{b.get('id')}", kind="bridge", id=b.get("id"), executor=b.get("source"), data=b)
    for pid, p in phases.items():
        for src in p.get("inputs") or []:
            if src in phases:
                g.add_edge(f"n:{src}", f"n:{pid}")
    for nid, n in nodes.items():
        for src in n.get("inputs") or []:
            if src in phases:
                bridge = bridges.get((src, n.get("executor")))
                if bridge is not None:
                    g.add_edge(f"n:{src}", f"b:{bridge.get('id')}")
                    g.add_edge(f"b:{bridge.get('id')}", f"n:{nid}")
                continue
            if src not in nodes:
                continue
            bridge = bridges.get((src, n.get("executor")))
            if nodes[src].get("executor") != n.get("executor") and bridge is not None:
                g.add_edge(f"n:{src}", f"b:{bridge.get('id')}")
                g.add_edge(f"b:{bridge.get('id')}", f"n:{nid}")
            else:
                g.add_edge(f"n:{src}", f"n:{nid}")
    return g


def _status_of_bridges(record: Mapping[str, Any]) -> dict[str, str]:
    status: dict[str, str] = {}
    for t in record.get("tasks") or []:
        if t.get("kind") in ("export", "import"):
            prev = status.get(t.get("id"))
            if t.get("status") == "failed" or prev is None:
                status[t.get("id")] = t.get("status", "unknown")
    return status


def output_stats(array: np.ndarray, bins: int = 24) -> dict[str, Any]:
    """min/max/mean over the finite values and a histogram of them.

    >>> s = output_stats(np.array([1.0, 2.0, 3.0, np.nan], dtype=np.float32), bins=2)
    >>> s["min"], s["max"], s["mean"], s["nonfinite"], s["counts"]
    (1.0, 3.0, 2.0, 1, [1, 2])
    """
    values = np.asarray(array).astype(np.float64).ravel()
    finite = values[np.isfinite(values)]
    out: dict[str, Any] = {"size": int(values.size), "nonfinite": int(values.size - finite.size),
                           "min": None, "max": None, "mean": None, "counts": [], "edges": []}
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        out.update(min=lo, max=hi, mean=float(finite.mean()))
        if finite.size > 1:
            counts, edges = np.histogram(finite, bins=bins if hi > lo else 1)
            out.update(counts=[int(c) for c in counts], edges=[float(x) for x in edges])
    return out


def _output_array(run_dir: str, entry: Mapping[str, Any], name: str = "?") -> np.ndarray:
    """An output's array from its record entry (:func:`hetflow.engine.store.records.read_output`: checked against
    the record's digest), without reading the whole record again for each output, seconds for the record of a run
    of 20,000 stages."""
    from hetflow.engine.store.records import read_output

    return read_output(run_dir, name, entry)


def _point_record(sweep_dir: str, runs_dir: str, point: Mapping[str, Any]) -> tuple[str | None, dict | None]:
    candidates = []
    # a row that names its run is read from that run's folder, as every other reader reads it (runs show, runs
    # table); its ``record`` path only where it names no run: one edited to name another file showed that file's
    # run as the point's
    if point.get("record") and not point.get("run_id"):
        path = str(point["record"])
        # relative to the sweep folder, or to the runs folder that holds it (what ``hetflow run`` writes)
        candidates += [path] if os.path.isabs(path) else [os.path.join(sweep_dir, path), os.path.join(runs_dir, path),
                                                          os.path.join(os.path.dirname(os.path.abspath(sweep_dir)), path)]
    if point.get("run_id"):
        rid = str(point["run_id"])
        candidates += [os.path.join(sweep_dir, rid, "record.json"), os.path.join(os.path.dirname(os.path.abspath(sweep_dir)), rid, "record.json"),
                       os.path.join(runs_dir, rid, "record.json")]
    for path in candidates:
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    return os.path.dirname(path), json.load(f)
            except (OSError, json.JSONDecodeError):
                return os.path.dirname(path), None
    return None, None


def _point_values(matrix_point: Any) -> dict:
    """The param values of a record's ``matrix_point``: ``{"name", "values"}`` or a plain mapping."""
    if not isinstance(matrix_point, Mapping):
        return {}
    values = matrix_point.get("values")
    return dict(values) if isinstance(values, Mapping) else {k: v for k, v in matrix_point.items() if k != "name"}


def _scalar(run_dir: str, name: str, entry: Mapping[str, Any]) -> float | str | None:
    """The value of a one-element output; None for any other; why not, as a string, where its file is gone or
    no longer the array its record's digest names."""
    from hetflow.engine.errors import OutputDamaged

    shape = entry.get("shape")
    if shape is None or math.prod(shape) != 1:
        return None
    try:
        value = float(np.asarray(_output_array(run_dir, entry)).astype(np.float64).ravel()[0])
    except OutputDamaged as e:
        return e.why
    except Exception:  # noqa: BLE001 - an unreadable output is a gap in the plot, not a broken report
        return None
    return value  # NaN and inf too: the table shows them as such, the plots leave them out


def _sweep_points(sweep_dir: str, sweep: Mapping[str, Any], runs_dir: str) -> list[dict]:
    points = []
    for p in sweep.get("points") or []:
        if not isinstance(p, Mapping):
            continue
        run_dir, record = _point_record(sweep_dir, runs_dir, p)
        params = p.get("params") or p.get("values") or _point_values((record or {}).get("matrix_point"))
        scalars, digests, damaged = {}, {}, {}
        for name, entry in ((record or {}).get("outputs") or {}).items():
            digests[name] = entry.get("digest")
            value = _scalar(run_dir, name, entry) if run_dir else None
            if isinstance(value, str):
                damaged[name] = value
            elif value is not None:
                scalars[name] = value
        if record is None:
            # a row that says succeeded with no record to back it (its run removed after the sweep's view looked,
            # by runs gc in another process) reads missing, as the view says of a run removed before
            status = "missing" if p.get("status") in (None, "succeeded") else p["status"]
        elif p.get("status") in ("succeeded", "failed", "cancelled"):
            # an ended row as the sweep's view reads it (hetflow.engine.store.runs.sweep_view): its run's record where
            # that says otherwise, but for a run the sweep's own live process saw fail whose last record its disk
            # refused, which says running until that process is gone
            status = p["status"]
        else:
            status = status_of(record) or p.get("status") or "missing"
        points.append({"name": p.get("name") or p.get("run_id") or "?", "params": dict(params),
                       "run_id": p.get("run_id") or (record or {}).get("run_id"),
                       "status": status,
                       "duration_s": (record or {}).get("duration_s"), "scalars": scalars, "digests": digests,
                       "damaged": damaged,
                       "error": ((record or {}).get("error") or {}).get("message") or p.get("error")})
    return points


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _group_status(statuses: Iterable[str]) -> str:
    """One status for a group of stages: the worst of them, so a failure inside a collapsed partition shows.

    >>> _group_status(["succeeded", "failed", "not run"]), _group_status(["succeeded"] * 3), _group_status([])
    ('failed', 'succeeded', 'unknown')
    """
    seen = set(statuses)
    for status in ("failed", "timed out", "cancelled", "not run", "running", "unknown"):
        if status in seen:
            return status
    return "succeeded" if seen == {"succeeded"} else (min(seen) if seen else "unknown")


def _partition_graph(record: Mapping[str, Any]) -> nx.DiGraph:
    """The plan with each partition as one node: what the report draws when a plan has too many stages to read.

    An edge joins two partitions when a stage of one reads a stage of the other; ``bridges`` on it counts the
    bridges that carry those tensors (an edge between executors) and ``bytes`` their bytes. Emulator phases
    stay nodes of their own. Partition nodes carry their stages (in plan order), a count per op, the worst
    status of their stages and the time of their task.
    """
    plan = record.get("plan") or {}
    nodes = plan.get("nodes") or {}
    phases = plan.get("phases") or {}
    node_status = {n: (v or {}).get("status", "unknown") for n, v in (record.get("nodes") or {}).items()}
    task_time: dict[str, float] = {}
    for t in record.get("tasks") or []:
        if isinstance(t, Mapping) and t.get("kind") == "partition":
            task_time[str(t.get("id"))] = task_time.get(str(t.get("id")), 0.0) + float(t.get("duration_s") or 0.0)
    g = nx.DiGraph()
    for pid, p in phases.items():
        g.add_node(f"n:{pid}", kind="phase", id=pid, executor=_phase_target(p), data=p)
    members: dict[str, list[str]] = {}
    executor_of: dict[str, Any] = {}
    for nid, n in nodes.items():
        part = str(n.get("partition"))
        members.setdefault(part, []).append(nid)
        executor_of.setdefault(part, n.get("executor"))
    for part, stage_ids in members.items():
        ops: dict[str, int] = {}
        for nid in stage_ids:
            op = str(nodes[nid].get("op"))
            ops[op] = ops.get(op, 0) + 1
        g.add_node(f"p:{part}", kind="partition", id=part, executor=executor_of[part],
                   data={"id": part, "executor": executor_of[part], "stages": stage_ids, "ops": ops,
                         "status": _group_status(node_status.get(nid, "unknown") for nid in stage_ids),
                         "duration_s": task_time.get(part)})
    bridge_bytes = {(b.get("tensor"), b.get("destination")): b.get("bytes") or 0 for b in plan.get("bridges") or []}
    for pid, p in phases.items():
        for src in p.get("inputs") or []:
            if src in phases:
                g.add_edge(f"n:{src}", f"n:{pid}", bridges=0, bytes=0)
    for nid, n in nodes.items():
        dst = f"p:{n.get('partition')}"
        for src in n.get("inputs") or []:
            if src in phases:
                origin = f"n:{src}"
            elif src in nodes and nodes[src].get("partition") != n.get("partition"):
                origin = f"p:{nodes[src].get('partition')}"
            else:
                continue
            edge = g.get_edge_data(origin, dst)
            if edge is None:
                g.add_edge(origin, dst, bridges=0, bytes=0, tensors=set())
                edge = g.get_edge_data(origin, dst)
            key = (src, n.get("executor"))
            if key in bridge_bytes and src not in edge.setdefault("tensors", set()):
                edge["tensors"].add(src)
                edge["bridges"] += 1
                edge["bytes"] += bridge_bytes[key]
    return g


def _partition_stages(record: Mapping[str, Any]) -> dict[str, Any]:
    """Each partition's stages laid out in columns, as compact data the page's script draws on demand.

    ``{"statuses": [...], "partitions": {pid: [[id, op, shape, dtype, status index, column, row,
    [input indices]], ...]}}``: a stage's column is the longest path to it from its partition's entry
    stages, its row its place in that column, and its inputs the indices of the stages of its partition
    it reads (inputs from elsewhere arrive by the partition's edges).

    >>> rec = {"plan": {"nodes": {"a": {"partition": "p0", "op": "ones", "shape": [2], "dtype": "fp32"},
    ...                           "b": {"partition": "p0", "op": "relu", "inputs": ["a"], "shape": [2]},
    ...                           "c": {"partition": "p0", "op": "add", "inputs": ["a", "b"], "shape": []}}},
    ...        "nodes": {"a": {"status": "succeeded"}}}
    >>> _partition_stages(rec)["partitions"]["p0"]
    [['a', 'ones', '2', 'fp32', 0, 0, 0, []], ['b', 'relu', '2', None, 1, 1, 0, [0]], ['c', 'add', 'scalar', None, 1, 2, 0, [0, 1]]]
    """
    import graphlib

    nodes = (record.get("plan") or {}).get("nodes") or {}
    status_of_node = {n: (v or {}).get("status", "unknown") for n, v in (record.get("nodes") or {}).items()}
    same = {nid: [s for s in n.get("inputs") or [] if s in nodes and nodes[s].get("partition") == n.get("partition")]
            for nid, n in nodes.items()}
    column: dict[str, int] = {}
    for nid, inputs in same.items():
        if any(s not in column for s in inputs):
            # an input further down the manifest: only then is a topological sort needed
            column.clear()
            for nid in graphlib.TopologicalSorter(same).static_order():
                column[nid] = max((column[s] + 1 for s in same[nid]), default=0)
            break
        column[nid] = max((column[s] + 1 for s in inputs), default=0)
    statuses: list[str] = []
    status_index: dict[str, int] = {}
    out: dict[str, list] = {}
    index: dict[str, int] = {}
    counts: dict[str, int] = {}
    for nid, n in nodes.items():
        # indices first: a stage may read one written further down the manifest
        part = str(n.get("partition"))
        index[nid] = counts.get(part, 0)
        counts[part] = index[nid] + 1
    filled: dict[tuple[str, int], int] = {}
    for nid, n in nodes.items():
        part = str(n.get("partition"))
        rows = out.setdefault(part, [])
        status = status_of_node.get(nid, "unknown")
        if status not in status_index:
            status_index[status] = len(statuses)
            statuses.append(status)
        col = column[nid]
        row = filled.get((part, col), 0)
        filled[(part, col)] = row + 1
        shape = n.get("shape")
        rows.append([nid, n.get("op"), None if shape is None else ("×".join(map(str, shape)) if shape else "scalar"),
                     n.get("dtype"), status_index[status], col, row, [index[s] for s in same[nid]]])
    return {"statuses": statuses, "partitions": out}
