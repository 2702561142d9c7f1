"""HTML reports: one self-contained page for a run or a matrix sweep.

A report is computed from what a run left on disk and nothing else:
``RUNS_DIR/RUN_ID/record.json`` and the outputs' ``.npy`` files (a sweep:
``RUNS_DIR/SWEEP_ID/sweep.json`` and the records it names). The page has
no external reference at all: CSS, the small script that shows hover
details, and every picture (inline SVG) are part of the one file, so it
opens anywhere, offline, years later.

The passes, in order:

``locate(target, runs_dir)``
    ``target`` is a run id, a sweep id, or a path to either folder (or to
    its ``record.json``/``sweep.json``) -> :class:`Located`. Nothing there
    is a :class:`~hetflow.engine.errors.UsageError`; a file that is not
    JSON names its ``FILE:LINE:COL``.
``render_run(run_dir, record)``
    the sections of a run page, each a function from the record to an
    HTML fragment. Every field is read with a default, so records of an
    older ``format``, or written by a run that crashed half way, still
    render (a section that has nothing to show says so).
``render_sweep(sweep_dir, sweep, runs_dir)``
    one row per point and, per scalar output and swept param, a plot of
    the output against the param (one series per value of the other
    params).

**Plan graph.** The graph has a node per stage and a node per bridge
(stage -> bridge -> each consumer on the bridge's destination executor;
stages on one executor connect directly). When Graphviz's ``dot`` is on
``PATH`` it lays the graph out (one cluster per executor); otherwise, or
when it fails, :func:`layout_plan` does a layered layout of its own:

1. *layers*: a node's column is the longest path from a source to it, so
   every edge points right;
2. *bands*: each executor is a horizontal band, in declaration order; a
   bridge sits in the gap next to its source band, on the side of its
   destination, so crossings between executors read as a move between
   bands;
3. *rows*: inside one (band, column) cell, nodes are ordered by the mean
   row of their predecessors (the barycentre heuristic), ties in plan
   order; a band is as tall as its fullest cell.

**Timeline.** Each task of the record (``kind`` partition, export,
import, output, or an emulator kind such as a chunk) is a bar on the lane
of its executor, or of (worker, executor) when the record names workers.
Inside a lane, bars that overlap in time are packed greedily into
sub-rows: sorted by start, a bar takes the first sub-row whose last bar
has ended. Times are offsets from the run's start (``offset_s`` when the
record has it, else the millisecond ``start`` stamps). A dashed line
joins each bridge's export to its import.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import networkx as nx
import numpy as np

from hetflow.engine.errors import UsageError
from hetflow.engine.planner import human_bytes
from hetflow.engine.records import RECORD_FORMAT, load_output

__all__ = [
    "SWEEP_FORMAT",
    "Located",
    "locate",
    "render",
    "render_run",
    "render_sweep",
    "layout_plan",
    "pack_lanes",
    "output_stats",
    "write_report",
    "graphviz_available",
]

SWEEP_FORMAT = 1
GRAPH_MODES = ("auto", "graphviz", "builtin")

_PALETTE = ["#3b6fb6", "#c0612b", "#3a8d5c", "#8a4fb0", "#b0913a", "#2f8f9d", "#b04f75", "#6b7280"]
_KIND_COLOURS = {"partition": None, "export": "#e0a030", "import": "#d07a18", "output": "#7c8797"}
_EMULATOR_COLOUR = "#6d5bd0"
_FAILED = ("failed", "timed out")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# --------------------------------------------------------------------------- locate


@dataclass(frozen=True)
class Located:
    """What a report target resolved to: ``kind`` is ``run`` or ``sweep``."""

    kind: str
    folder: str
    data: dict


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}:{e.lineno}:{e.colno}: error: not valid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1:1: error: expected a JSON object, found {type(data).__name__}")
    return data


def locate(target: str, runs_dir: str = "runs") -> Located:
    """Resolve a run id, a sweep id or a path to a run or sweep folder.

    Raises
    ------
    UsageError
        nothing of that name exists, or its JSON file is unreadable.
    """
    candidates = []
    if os.path.basename(target) in ("record.json", "sweep.json") and os.path.isfile(target):
        candidates.append(os.path.dirname(os.path.abspath(target)))
    candidates += [os.path.join(runs_dir, target), target]
    for folder in candidates:
        if not os.path.isdir(folder):
            continue
        if os.path.isfile(os.path.join(folder, "record.json")):
            return Located("run", folder, _read_json(os.path.join(folder, "record.json")))
        if os.path.isfile(os.path.join(folder, "sweep.json")):
            return Located("sweep", folder, _read_json(os.path.join(folder, "sweep.json")))
    raise UsageError(
        f"no run or sweep {target!r} in {runs_dir} (looked for {os.path.join(runs_dir, target, 'record.json')} "
        f"and sweep.json there); pass a run id, a sweep id or a run folder"
    )


def render(located: Located, *, runs_dir: str = "runs", graph: str = "auto") -> str:
    """The HTML page for a located run or sweep."""
    if located.kind == "sweep":
        return render_sweep(located.folder, located.data, runs_dir=runs_dir)
    return render_run(located.folder, located.data, graph=graph)


def write_report(html_text: str, path: str) -> None:
    """Write the page atomically: a crash never leaves half a report."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".html")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(html_text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# --------------------------------------------------------------------------- time


def _parse_iso(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    if s < 120:
        return f"{s:.3f} s"
    return f"{int(s // 60)} min {s % 60:.0f} s"


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


def _nice_step(span: float, target: int = 8) -> float:
    raw = span / max(1, target)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


# --------------------------------------------------------------------------- plan graph


@dataclass(frozen=True)
class GraphNode:
    id: str
    kind: str  # "stage" or "bridge"
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
    g = _plan_graph(plan)
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

    def rows_in(s: tuple[str, int]) -> int:
        return max((len(m) for (sl, _), m in cells.items() if sl == s), default=0)

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
    col_x = [_PAD * 2 + sum(col_w[:c]) + c * _HGAP for c in range(n_cols)]
    placed = {}
    for n, d in g.nodes(data=True):
        s = slot(n)
        w, h = (_BRIDGE_W, _BRIDGE_H) if d["kind"] == "bridge" else (_NODE_W, _NODE_H)
        y = slot_top[s] + row[n] * ((_NODE_H if s[0] == "band" else _BRIDGE_H) + _VGAP)
        x = col_x[column[n]] + (col_w[column[n]] - w) / 2
        placed[n] = GraphNode(d["id"], d["kind"], band_of[d["executor"]], column[n], x, y, w, h, d["data"])
    width = _PAD * 3 + sum(col_w) + (n_cols - 1) * _HGAP
    return PlanLayout(width, height, tuple(bands), placed, tuple(g.edges))


def _shape_text(shape: Any, bound: bool = False) -> str:
    """
    >>> _shape_text([16, 8]), _shape_text([]), _shape_text(None), _shape_text([100, 64], bound=True)
    ('16×8', 'scalar', '?', '≤100×64')
    """
    if shape is None:
        return "?"
    return ("≤" if bound and shape else "") + ("×".join(str(s) for s in shape) if shape else "scalar")


def _bytes(d: Mapping[str, Any], short: bool = False) -> str:
    """A node's or bridge's bytes, said to be an upper bound when the plan says so.

    >>> _bytes({"bytes": 2560000, "size": "bound"}), _bytes({"bytes": 2560000, "size": "bound"}, short=True)
    ('at most 2.4 MiB', '≤ 2.4 MiB')
    """
    text = human_bytes(d.get("bytes"))
    if d.get("size") == "bound" and d.get("bytes") is not None:
        return ("≤ " if short else "at most ") + text
    return text


def _emulator_kind(emulators: Mapping[str, Any], band: str) -> str:
    name = band.split(":", 1)[1] if band.startswith("emulator:") else band
    e = emulators.get(name)
    return f"emulator, {e.get('backend')} backend" if isinstance(e, Mapping) else "?"


def _phase_tip(pid: str, d: Mapping[str, Any], status: str) -> tuple[str, str]:
    """A phase node's hover text and its one-line summary."""
    bound = d.get("size") == "bound"
    lines = [f"{d.get('phase')} phase {pid}", f"runs on {_phase_target(d)}",
             f"inputs {', '.join(d.get('inputs') or []) or 'none'}"]
    if d.get("array"):
        sub = f"{d.get('phase')} · {_bytes(d, short=True)} {d.get('dtype') or ''}".rstrip()
        lines.append(f"yields {_shape_text(d.get('shape'), bound)} {d.get('dtype')}, {_bytes(d)}"
                     + (" (an upper bound: max_steps rows)" if bound else ""))
        if d.get("chunks_max") is not None:
            lines.append(f"fan-out at most {d['chunks_max']} witness tasks, one per chunk")
        if d.get("consumers"):
            lines.append(f"read by {', '.join(d['consumers'])}")
    else:
        sub = f"{d.get('phase')} · data"
        fields = [f for f in d.get("outputs") or [] if f != "array"]
        if fields:
            lines.append(f"yields {', '.join(fields)}")
    lines.append(f"status {status}")
    if d.get("origin"):
        lines.append(str(d["origin"]))
    return "\n".join(lines), sub


def _status_of_bridges(record: Mapping[str, Any]) -> dict[str, str]:
    status: dict[str, str] = {}
    for t in record.get("tasks") or []:
        if t.get("kind") in ("export", "import"):
            prev = status.get(t.get("id"))
            if t.get("status") == "failed" or prev is None:
                status[t.get("id")] = t.get("status", "unknown")
    return status


def _executor_colour(names: list[str], name: str) -> str:
    return _PALETTE[names.index(name) % len(_PALETTE)] if name in names else _PALETTE[-1]


def _svg_plan_builtin(record: Mapping[str, Any]) -> str:
    plan = record.get("plan") or {}
    lay = layout_plan(plan)
    node_status = {n: (v or {}).get("status", "unknown") for n, v in (record.get("nodes") or {}).items()}
    phase_status = {n: (v or {}).get("status", "unknown") for n, v in (record.get("phases") or {}).items()}
    bridge_status = _status_of_bridges(record)
    executors = plan.get("executors") or {}
    emulators = plan.get("emulators") or {}
    names = [b[0] for b in lay.bands]
    parts = [f'<svg class="plan-graph" data-layout="builtin" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" {_fit(lay.width)} '
             f'role="img" aria-label="plan graph">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#8791a0"/></marker></defs>']
    for name, top, h in lay.bands:
        colour = _executor_colour(names, name)
        vendor = (executors.get(name) or {}).get("vendor") or _emulator_kind(emulators, name)
        parts.append(f'<g class="band" data-executor="{_e(name)}"><rect x="{_PAD / 2}" y="{top:.1f}" '
                     f'width="{lay.width - _PAD:.0f}" height="{h:.1f}" rx="10" fill="{colour}" fill-opacity="0.07" '
                     f'stroke="{colour}" stroke-opacity="0.35"/>'
                     f'<text x="{_PAD}" y="{top + 17:.1f}" class="band-label" fill="{colour}">{_e(name)}'
                     f'<tspan class="band-vendor"> · {_e(vendor)}</tspan></text></g>')
    for u, v in lay.edges:
        a, b = lay.nodes[u], lay.nodes[v]
        x1, y1, x2, y2 = a.x + a.w, a.y + a.h / 2, b.x, b.y + b.h / 2
        mid = (x1 + x2) / 2
        cls = "edge bridged" if "bridge" in (a.kind, b.kind) else "edge"
        parts.append(f'<path class="{cls}" d="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} '
                     f'{x2 - 2:.1f},{y2:.1f}" marker-end="url(#arrow)"/>')
    for key, n in lay.nodes.items():
        d = n.data
        if n.kind == "phase":
            status = phase_status.get(n.id, "unknown")
            colour = _executor_colour(names, n.data.get("target") or _phase_target(d))
            tip, sub = _phase_tip(n.id, d, status)
            mark = {"failed": " ✗", "not run": " ⊘"}.get(status, "")
            parts.append(
                f'<g class="gnode phase status-{_e(status.replace(" ", "-"))}" id="phase-{_e(n.id)}" data-tip="{_e(tip)}">'
                f'<title>{_e(tip)}</title>'
                f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w}" height="{n.h}" rx="{n.h / 2:.0f}" class="box pbox"/>'
                f'<text x="{n.x + 16:.1f}" y="{n.y + 19:.1f}" class="nid">{_e(n.id)}{mark}</text>'
                f'<text x="{n.x + 16:.1f}" y="{n.y + 36:.1f}" class="nsub" fill="{colour}">{_e(sub)}</text></g>')
        elif n.kind == "stage":
            status = node_status.get(n.id, "unknown")
            colour = _executor_colour(names, d.get("executor"))
            shape = _shape_text(d.get("shape"), d.get("size") == "bound")
            tip = (f"stage {n.id}\nop {d.get('op')}\nexecutor {d.get('executor')} ({d.get('reason', '')})\n"
                   f"partition {d.get('partition')}\n{shape} {d.get('dtype')}, {_bytes(d)}\n"
                   f"status {status}\n{d.get('origin', '')}")
            mark = {"failed": " ✗", "timed out": " ✗ timed out", "cancelled": " ⊘", "not run": " ⊘"}.get(status, "")
            parts.append(
                f'<g class="gnode stage status-{_e(status.replace(" ", "-"))}" id="stage-{_e(n.id)}" data-tip="{_e(tip)}">'
                f'<title>{_e(tip)}</title>'
                f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w}" height="{n.h}" rx="7" class="box"/>'
                f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="5" height="{n.h}" rx="2" fill="{colour}"/>'
                f'<text x="{n.x + 13:.1f}" y="{n.y + 19:.1f}" class="nid">{_e(n.id)}{mark}</text>'
                f'<text x="{n.x + 13:.1f}" y="{n.y + 36:.1f}" class="nsub">{_e(d.get("op"))} · {_e(shape)} '
                f'{_e(d.get("dtype"))}</text></g>')
        else:
            status = bridge_status.get(n.id, "not run" if record.get("status") == "failed" else "unknown")
            tip = (f"bridge {n.id}\ncarries {d.get('tensor')} from {d.get('source')} to {d.get('destination')}\n"
                   f"{_bytes(d)} ({d.get('kind', 'bridge')})\n"
                   f"consumers {', '.join(d.get('consumers') or [])}\nstatus {status}")
            cx, cy = n.x + n.w / 2, n.y + n.h / 2
            hw, hh = n.w / 2, n.h / 2
            points = f"{cx - hw + 12},{cy - hh} {cx + hw - 12},{cy - hh} {cx + hw},{cy} {cx + hw - 12},{cy + hh} " \
                     f"{cx - hw + 12},{cy + hh} {cx - hw},{cy}"
            parts.append(
                f'<g class="gnode bridge status-{_e(status.replace(" ", "-"))}" id="bridge-{_e(n.id)}" data-tip="{_e(tip)}">'
                f'<title>{_e(tip)}</title><polygon points="{points}" class="bbox"/>'
                f'<text x="{cx:.1f}" y="{cy - 3:.1f}" class="bid" text-anchor="middle">{_e(d.get("tensor"))} → '
                f'{_e(d.get("destination"))}</text>'
                f'<text x="{cx:.1f}" y="{cy + 11:.1f}" class="bbytes" text-anchor="middle">'
                f'{_e(_bytes(d, short=True))}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def graphviz_available() -> bool:
    return shutil.which("dot") is not None


def _dot_quote(text: Any) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def plan_dot(record: Mapping[str, Any]) -> str:
    """The plan with run status as Graphviz DOT: a cluster per executor, bridges as their own nodes."""
    plan = record.get("plan") or {}
    g = _plan_graph(plan)
    names = list((plan.get("executors") or {}).keys())
    node_status = {n: (v or {}).get("status", "unknown") for n, v in (record.get("nodes") or {}).items()}
    node_status.update({n: (v or {}).get("status", "unknown") for n, v in (record.get("phases") or {}).items()})
    bridge_status = _status_of_bridges(record)
    lines = ["digraph plan {", '  rankdir=LR; bgcolor="transparent"; nodesep=0.25; ranksep=0.45;',
             '  node [fontname="Helvetica", fontsize=10, shape=box, style="rounded,filled", fillcolor="white", '
             'color="#9aa3af", penwidth=1.2];',
             '  edge [color="#8791a0", arrowsize=0.7];']
    for i, name in enumerate(names + [n for n in {d["executor"] for _, d in g.nodes(data=True)} if n not in names]):
        colour = _executor_colour(names, name)
        vendor = ((plan.get("executors") or {}).get(name) or {}).get("vendor") or _emulator_kind(plan.get("emulators") or {}, name)
        lines.append(f"  subgraph cluster_{i} {{ label={_dot_quote(f'{name} · {vendor}')}; fontname=\"Helvetica\"; "
                     f'fontsize=11; fontcolor="{colour}"; style="rounded,filled"; color="{colour}"; fillcolor="{colour}12";')
        for n, d in g.nodes(data=True):
            if d["kind"] == "phase" and d["executor"] == name:
                tip, sub = _phase_tip(d["id"], d["data"], node_status.get(d["id"], "unknown"))
                extra = "\n".join(tip.split("\n")[3:-2 if d["data"].get("origin") else -1])
                attrs = {"label": f"{d['id']}\n{sub}" + (f"\n{extra}" if extra else ""), "id": f"phase-{d['id']}",
                         "class": f"phase status-{node_status.get(d['id'], 'unknown').replace(' ', '-')}",
                         "shape": "box", "style": "rounded,filled", "fillcolor": "#efedfb", "color": "#6d5bd0",
                         "tooltip": tip}
                lines.append(f"    {_dot_quote(n)} [" + ", ".join(f"{k}={_dot_quote(v)}" for k, v in attrs.items()) + "];")
                continue
            if d["kind"] != "stage" or d["executor"] != name:
                continue
            data = d["data"]
            status = node_status.get(d["id"], "unknown")
            shape = _shape_text(data.get("shape"), data.get("size") == "bound")
            attrs = {"label": f"{d['id']}\n{data.get('op')} · {shape} {data.get('dtype')}", "id": f"stage-{d['id']}",
                     "class": f"stage status-{status.replace(' ', '-')}",
                     "tooltip": f"{data.get('origin', '')} · {status}"}
            if status in _FAILED:
                attrs.update(color="#c62828", penwidth="2.4", fillcolor="#fde8e8", label=attrs["label"] + f"\n✗ {status}")
            elif status in ("cancelled", "not run"):
                attrs.update(style="rounded,dashed", fontcolor="#6b7280")
            lines.append(f"    {_dot_quote(n)} [" + ", ".join(f"{k}={_dot_quote(v)}" for k, v in attrs.items()) + "];")
        lines.append("  }")
    for n, d in g.nodes(data=True):
        if d["kind"] != "bridge":
            continue
        data = d["data"]
        status = bridge_status.get(d["id"], "unknown")
        attrs = {"label": f"{data.get('tensor')} → {data.get('destination')}\n{_bytes(data)}",
                 "shape": "cds", "fillcolor": "#fff3dc", "color": "#d08a18", "id": f"bridge-{d['id']}",
                 "class": f"bridge status-{status}", "tooltip": f"bridge {d['id']}: {human_bytes(data.get('bytes'))}"}
        if status == "failed":
            attrs.update(color="#c62828", penwidth="2.4")
        lines.append(f"  {_dot_quote(n)} [" + ", ".join(f"{k}={_dot_quote(v)}" for k, v in attrs.items()) + "];")
    for u, v in g.edges:
        style = ' [color="#d08a18", style="dashed"]' if g.nodes[u]["kind"] == "bridge" or g.nodes[v]["kind"] == "bridge" else ""
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _svg_plan_graphviz(record: Mapping[str, Any]) -> str | None:
    dot = shutil.which("dot")
    if dot is None:
        return None
    try:
        done = subprocess.run([dot, "-Tsvg"], input=plan_dot(record).encode(), capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    text = done.stdout.decode("utf-8", "replace")
    start = text.find("<svg")
    if start < 0:
        return None
    svg = text[start:]
    head_end = svg.find(">")
    head = re.sub(r'\s(width|height)="([0-9.]+)pt"', "", svg[:head_end])
    box = re.search(r'viewBox="([^"]+)"', head)
    try:
        width = float(box.group(1).split()[2]) if box else 800.0
    except (IndexError, ValueError):
        width = 800.0
    return head.replace("<svg", f'<svg class="plan-graph" data-layout="graphviz" {_fit(width)}', 1) + svg[head_end:]


def _fit(width: float) -> str:
    """SVG size attributes: shrink to the page up to a point, then scroll rather than become unreadable."""
    if width > 1900:
        return f'width="{width:.0f}"'
    return f'width="100%" style="max-width:{width:.0f}px"'


def _section_plan(record: Mapping[str, Any], graph: str) -> str:
    plan = record.get("plan")
    if not plan or not (plan.get("nodes") or plan.get("phases")):
        return _section("plan", "Plan", '<p class="muted">This record has no plan.</p>')
    svg = None
    note = ""
    if graph in ("auto", "graphviz"):
        svg = _svg_plan_graphviz(record)
        if svg is None and graph == "graphviz":
            note = '<p class="muted">Graphviz was asked for but <code>dot</code> is not available or failed; ' \
                   'this is hetflow\'s own layout.</p>'
    if svg is None:
        svg = _svg_plan_builtin(record)
    totals = plan.get("totals") or {}
    bridges = plan.get("bridges") or []
    phases = plan.get("phases") or {}
    on_emulators = (f'; {len(phases)} emulator phases on {len({_phase_target(p) for p in phases.values()})} '
                    f'emulator{"s" if len({_phase_target(p) for p in phases.values()}) != 1 else ""}') if phases else ""
    summary = (f'<p class="lede">{len(plan.get("nodes") or {})} stages in {len(plan.get("partitions") or [])} '
               f'partitions on {len(plan.get("executors") or {})} executors{on_emulators}; {len(bridges)} '
               f'{"bridge carries" if len(bridges) == 1 else "bridges carry"} '
               f'{"at most " if totals.get("bytes_bridged_bound") else ""}'
               f'{_e(human_bytes(totals.get("bytes_bridged", sum(b.get("bytes") or 0 for b in bridges))))}.</p>')
    rows = "".join(
        f'<tr><td><code>{_e(b.get("id"))}</code></td><td>{_e(b.get("tensor"))}</td><td>{_e(b.get("source"))} → '
        f'{_e(b.get("destination"))}</td><td class="num">{_e(_bytes(b))}</td>'
        f'<td>{_e(", ".join(b.get("consumers") or []))}</td><td class="num">{_e(_bridge_cost(record, b.get("id")))}</td></tr>'
        for b in bridges)
    table = ('<table class="grid"><thead><tr><th>bridge</th><th>tensor</th><th>from → to</th><th>bytes</th>'
             f'<th>consumers</th><th>export + import</th></tr></thead><tbody>{rows}</tbody></table>') if bridges else ""
    legend = ('<p class="legend"><span class="sw sw-stage"></span>stage '
              + ('<span class="sw sw-phase"></span>emulator phase ' if plan.get("phases") else "")
              + '<span class="sw sw-bridge"></span>bridge '
              '<span class="sw sw-failed"></span>failed <span class="sw sw-notrun"></span>not run</p>')
    return _section("plan", "Plan", summary + note + legend + f'<div class="scroll graph-wrap">{svg}</div>' + table)


def _bridge_cost(record: Mapping[str, Any], bridge_id: str) -> str:
    times = [t.get("duration_s") or 0.0 for t in record.get("tasks") or []
             if t.get("id") == bridge_id and t.get("kind") in ("export", "import")]
    return _fmt_seconds(sum(times)) if times else "—"


# --------------------------------------------------------------------------- timeline


def _bar_colour(bar: Bar, names: list[str]) -> str:
    if bar.kind == "partition":
        return _executor_colour(names, bar.task.get("executor"))
    return _KIND_COLOURS.get(bar.kind) or _EMULATOR_COLOUR


def _section_timeline(record: Mapping[str, Any]) -> str:
    bars = _bars(record)
    if not bars:
        return _section("timeline", "Timeline", '<p class="muted">This record has no task timings.</p>')
    names = list(((record.get("plan") or {}).get("executors") or {}).keys())
    lanes = pack_lanes(bars)
    lane_order = sorted(lanes, key=lambda lane: (lane.split(" · ")[-1] not in names,
                                                 names.index(lane.split(" · ")[-1]) if lane.split(" · ")[-1] in names else 0,
                                                 lane))
    last = max([b.end for b in bars] + [record.get("duration_s") or 0.0])
    first = min(b.start for b in bars)
    # start-up (record, executors, lowering) can dwarf the tasks; the axis then starts at the first task
    origin = first if first > 0.05 * last else 0.0
    span = (last - origin) or 1e-3
    step = _nice_step(span)
    unit, scale = ("ms", 1e3) if span < 2 else ("s", 1.0)
    label_w, plot_w, row_h, bar_h, axis_h = 190, 900, 24, 18, 28
    width = label_w + plot_w + 20
    heights = [len(lanes[lane]) * row_h + 12 for lane in lane_order]
    height = axis_h + sum(heights) + 10

    def x_of(t: float) -> float:
        return label_w + plot_w * (t - origin) / span

    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'{_fit(width)} role="img" aria-label="timeline">']
    tick = 0.0
    while tick <= span * 1.0001:
        x = x_of(origin + tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{axis_h - 6}" y2="{height - 6}" class="tick"/>'
                     f'<text x="{x:.1f}" y="{axis_h - 10}" class="ticklabel" text-anchor="middle">'
                     f'{tick * scale:.{max(0, -math.floor(math.log10(step * scale)) if step * scale < 1 else 0)}f} {unit}</text>')
        tick += step
    y = axis_h
    centre: dict[tuple[str, str], tuple[float, float, float]] = {}
    for lane, h in zip(lane_order, heights):
        executor = lane.split(" · ")[-1]
        colour = _executor_colour(names, executor)
        parts.append(f'<g class="lane" data-lane="{_e(lane)}"><rect x="0" y="{y}" width="{width}" height="{h}" '
                     f'class="lane-bg"/><rect x="0" y="{y}" width="4" height="{h}" fill="{colour}"/>'
                     f'<text x="12" y="{y + 17}" class="lane-label">{_e(lane)}</text>'
                     f'<text x="12" y="{y + 31}" class="lane-sub">{sum(len(r) for r in lanes[lane])} tasks</text></g>')
        for r, row in enumerate(lanes[lane]):
            top = y + 6 + r * row_h
            for bar in row:
                x0 = x_of(bar.start)
                w = max(2.5, plot_w * bar.duration / span)
                t = bar.task
                details = [f"{bar.kind} {bar.id}", f"lane {lane}", f"status {bar.status}",
                           f"start +{_fmt_seconds(bar.start)}", f"duration {_fmt_seconds(bar.duration)}"]
                if t.get("nodes"):
                    details.append("nodes " + ", ".join(map(str, t["nodes"])))
                if t.get("bytes") is not None:
                    details.append(f"bytes {human_bytes(t['bytes'])} ({t['bytes']} B)")
                if t.get("thread"):
                    details.append(f"thread {t['thread']}")
                if t.get("worker"):
                    details.append(f"worker {t['worker']}")
                if t.get("attempt") is not None or t.get("attempts") is not None:
                    details.append(f"attempt {t.get('attempt', t.get('attempts'))}")
                if t.get("cached"):
                    details.append("cached: outputs taken from the cache, not recomputed")
                if t.get("timed_out"):
                    details.append("timed out")
                if t.get("error"):
                    details.append(f"error {t['error']}")
                tip = "\n".join(details)
                cls = f"bar kind-{_e(bar.kind)} status-{_e(bar.status.replace(' ', '-'))}" + (" cached" if t.get("cached") else "")
                parts.append(f'<g class="{cls}" data-kind="{_e(bar.kind)}" data-id="{_e(bar.id)}" data-tip="{_e(tip)}">'
                             f'<title>{_e(tip)}</title><rect x="{x0:.2f}" y="{top}" width="{w:.2f}" height="{bar_h}" '
                             f'rx="3" fill="{_bar_colour(bar, names)}"/>')
                if w > 8 * len(bar.id) + 10:
                    parts.append(f'<text x="{x0 + 5:.1f}" y="{top + 13}" class="barlabel">{_e(bar.id)}</text>')
                parts.append("</g>")
                centre[(bar.kind, bar.id)] = (x0, x0 + w, top + bar_h / 2)
        y += h
    for (kind, bid), (_, x_end, y_exp) in centre.items():
        if kind == "export" and ("import", bid) in centre:
            x_imp, _, y_imp = centre[("import", bid)]
            parts.append(f'<path class="hop" d="M{x_end:.1f},{y_exp:.1f} L{max(x_imp, x_end):.1f},{y_imp:.1f}"/>')
    parts.append("</svg>")
    kinds = sorted({b.kind for b in bars}, key=lambda k: (k not in _KIND_COLOURS, list(_KIND_COLOURS).index(k)
                                                          if k in _KIND_COLOURS else 0, k))
    legend = " ".join(
        f'<span class="sw" style="background:{_KIND_COLOURS.get(k) or (_PALETTE[0] if k == "partition" else _EMULATOR_COLOUR)}">'
        f'</span>{_e(k)}' for k in kinds)
    busy = {}
    for b in bars:
        busy[b.lane] = busy.get(b.lane, 0.0) + b.duration
    axis = (f"The axis starts at the first task, {_fmt_seconds(origin)} after the run started (run record, "
            "executors, lowering); hover a bar for its offset from the run's start." if origin else
            "The axis starts when the run started.")
    lede = (f'<p class="lede">{len(bars)} tasks on {len(lanes)} lanes over {_fmt_seconds(span)}: '
            + "; ".join(f"{_e(lane)} busy {_fmt_seconds(busy[lane])}" for lane in lane_order)
            + f'.</p><p class="muted">{_e(axis)}</p>')
    return _section("timeline", "Timeline", lede + f'<p class="legend">{legend} <span class="sw sw-failed"></span>failed '
                    f'— partitions take their executor\'s colour; the dashed line is a bridge hop</p>'
                    f'<div class="scroll">{"".join(parts)}</div>' + _task_table(bars))


def _task_table(bars: list[Bar]) -> str:
    rows = "".join(
        f'<tr class="task status-{_e(b.status.replace(" ", "-"))}"><td>{_e(b.kind)}</td><td><code>{_e(b.id)}</code></td>'
        f'<td>{_e(b.lane)}</td><td class="num">+{_e(_fmt_seconds(b.start))}</td><td class="num">{_e(_fmt_seconds(b.duration))}</td>'
        f'<td class="num">{_e(human_bytes(b.task["bytes"]) if b.task.get("bytes") is not None else "")}</td>'
        f'<td>{_e(", ".join(map(str, b.task.get("nodes") or [])))}</td><td>{_status_badge(b.status)}</td></tr>'
        for b in sorted(bars, key=lambda b: b.start))
    return ('<details><summary>every task, in start order</summary><table class="grid"><thead><tr><th>kind</th><th>id</th>'
            '<th>lane</th><th>start</th><th>duration</th><th>bytes</th><th>nodes</th><th>status</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></details>')


# --------------------------------------------------------------------------- outputs


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


def _fmt_num(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.4g}"
    return f"{x:.3e}"


def _histogram_svg(stats: Mapping[str, Any]) -> str:
    counts = stats.get("counts") or []
    if not counts:
        return ""
    w, h = 168, 40
    peak = max(counts) or 1
    bw = w / len(counts)
    bars = "".join(
        f'<rect x="{i * bw:.2f}" y="{h - (h - 2) * c / peak:.2f}" width="{max(bw - 1, 1):.2f}" '
        f'height="{(h - 2) * c / peak:.2f}"><title>[{_fmt_num(stats["edges"][i])}, {_fmt_num(stats["edges"][i + 1])}): '
        f'{c}</title></rect>' for i, c in enumerate(counts))
    return f'<svg class="hist" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}">{bars}</svg>'


def _section_outputs(run_dir: str, record: Mapping[str, Any]) -> str:
    outputs = record.get("outputs") or {}
    if not outputs:
        declared = ((record.get("plan") or {}).get("outputs") or {})
        why = " because the run failed" if record.get("status") == "failed" else ""
        listed = f' (declared: {_e(", ".join(declared))})' if declared else ""
        return _section("outputs", "Outputs", f'<p class="muted">No outputs were written{why}{listed}.</p>')
    rows = []
    for name, o in outputs.items():
        shape = o.get("shape")
        if "value" in o and "file" not in o:
            # an emulator phase's data field (steps, exit_code, ...): its value is in the record itself
            text = json.dumps(o["value"])
            shown = text if len(text) <= 160 else text[:157] + "..."
            digest = str(o.get("digest", ""))
            rows.append(f'<tr class="output" data-output="{_e(name)}"><td><b>{_e(name)}</b>'
                        f'<div class="muted">{_e(o.get("phase", ""))}.{_e(o.get("field", ""))}</div></td>'
                        f'<td colspan="3">value</td><td><code title="{_e(digest)}">{_e(digest[:19])}…</code></td>'
                        f'<td colspan="4"><code>{_e(shown)}</code></td></tr>')
            continue
        try:
            array = load_output(run_dir, name)
            stats = output_stats(array)
            problem = ""
        except Exception as e:  # noqa: BLE001 - a missing or damaged .npy is shown, not fatal to the report
            stats, problem = {}, f"not readable: {type(e).__name__}: {e}"
        if problem:
            cells = f'<td colspan="4" class="bad">{_e(problem)}</td>'
        else:
            nonfinite = f' <span class="warn">{stats["nonfinite"]} non-finite</span>' if stats.get("nonfinite") else ""
            cells = (f'<td class="num">{_e(_fmt_num(stats.get("min")))}</td><td class="num">{_e(_fmt_num(stats.get("max")))}</td>'
                     f'<td class="num">{_e(_fmt_num(stats.get("mean")))}{nonfinite}</td><td>{_histogram_svg(stats)}</td>')
        digest = str(o.get("digest", ""))
        rows.append(f'<tr class="output" data-output="{_e(name)}"><td><b>{_e(name)}</b><div class="muted">{_e(o.get("tensor", ""))}</div></td>'
                    f'<td>{_e(_shape_text(shape))}</td>'
                    f'<td>{_e(o.get("dtype"))}</td><td class="num">{_e(human_bytes(o.get("bytes")))}</td>'
                    f'<td><code title="{_e(digest)}">{_e(digest[:19])}…</code></td>{cells}</tr>')
    table = ('<table class="grid"><thead><tr><th>output</th><th>shape</th><th>dtype</th><th>bytes</th><th>digest</th>'
             '<th>min</th><th>max</th><th>mean</th><th>histogram</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")
    return _section("outputs", "Outputs", table)


# --------------------------------------------------------------------------- failures


def _section_failures(record: Mapping[str, Any]) -> str:
    nodes = record.get("nodes") or {}
    plan_nodes = (record.get("plan") or {}).get("nodes") or {}
    error = record.get("error") or {}
    failed = [n for n, v in nodes.items() if (v or {}).get("status") in _FAILED]
    skipped = [n for n, v in nodes.items() if (v or {}).get("status") in ("cancelled", "not run")]
    if not failed and not error:
        if record.get("status") == "running":
            return _section("failures", "Failures", '<p class="muted">The run has not finished (or crashed before '
                            'writing its final record).</p>')
        return _section("failures", "Failures", '<p class="ok-text">No stage failed.</p>')
    cards = []
    for n in failed or [error.get("node") or error.get("partition") or "run"]:
        entry = nodes.get(n) or {}
        origin = (error.get("origin") if error.get("node") == n else None) or (plan_nodes.get(n) or {}).get("origin")
        message = entry.get("error") or error.get("message") or "failed"
        tasks = [t for t in record.get("tasks") or [] if t.get("id") == entry.get("partition") or t.get("node") == n]
        attempts = entry.get("attempts") or max((t.get("attempt") or 0 for t in tasks), default=0) or max(1, len(tasks))
        cards.append(
            f'<div class="failure" data-stage="{_e(n)}"><h3>✗ {_e(n)}</h3><dl>'
            f'<dt>stage</dt><dd><code>{_e(n)}</code> ({_e((plan_nodes.get(n) or {}).get("op", "?"))}) in partition '
            f'{_e(entry.get("partition", error.get("partition")))} on {_e(entry.get("executor", "?"))}</dd>'
            f'<dt>error</dt><dd><pre>{_e(message)}</pre></dd>'
            f'<dt>attempts</dt><dd>{_e(attempts)}</dd>'
            f'<dt>manifest</dt><dd><code class="origin">{_e(_file_line(origin))}</code></dd></dl>'
            + (f'<details><summary>traceback</summary><pre>{_e(error["traceback"])}</pre></details>'
               if error.get("traceback") else "") + "</div>")
    if skipped:
        cards.append(f'<p class="muted">Not run because of the failure: {_e(", ".join(skipped))}.</p>')
    return _section("failures", "Failures", "".join(cards))


def _file_line(origin: Any) -> str:
    """``FILE:LINE`` of a ``FILE:LINE:COL`` origin (what an editor jumps to), unknown when absent.

    >>> _file_line("/p/m.yaml:10:3"), _file_line(None)
    ('/p/m.yaml:10', 'unknown')
    """
    if not origin:
        return "unknown"
    parts = str(origin).rsplit(":", 2)
    return f"{parts[0]}:{parts[1]}" if len(parts) == 3 and parts[1].isdigit() else str(origin)


# --------------------------------------------------------------------------- header and page


def _kv_table(items: Mapping[str, Any], empty: str = "none") -> str:
    if not items:
        return f'<span class="muted">{_e(empty)}</span>'
    return '<table class="kv">' + "".join(
        f"<tr><th>{_e(k)}</th><td><code>{_e(json.dumps(v) if not isinstance(v, str) else v)}</code></td></tr>"
        for k, v in items.items()) + "</table>"


def _matrix_point(point: Any) -> str:
    if not point:
        return '<span class="muted">not a sweep point</span>'
    name = f'<div><code>{_e(point.get("name"))}</code></div>' if isinstance(point, Mapping) and point.get("name") else ""
    return name + _kv_table(_point_values(point))


def _status_badge(status: Any) -> str:
    return f'<span class="badge status-{_e(str(status).replace(" ", "-"))}">{_e(status)}</span>'


def _section_header(record: Mapping[str, Any]) -> str:
    manifest = record.get("manifest") or {}
    name = manifest.get("name") or (record.get("plan") or {}).get("name") or "run"
    fmt = record.get("format")
    notes = []
    if fmt is None or (isinstance(fmt, int) and fmt < RECORD_FORMAT):
        notes.append(f"record format {fmt if fmt is not None else 'unknown'} (older than {RECORD_FORMAT}): "
                     "fields it lacks are shown as absent")
    elif isinstance(fmt, int) and fmt > RECORD_FORMAT:
        notes.append(f"record format {fmt} is newer than this hetflow reads ({RECORD_FORMAT}): shown as far as known")
    inventory = record.get("inventory") or []
    inv_rows = "".join(
        f'<tr><td>{_e(o.get("vendor"))}</td><td>{"✓ available" if o.get("available") else "unavailable"}</td>'
        f'<td>{_e(o.get("reason"))}</td><td>{_e(", ".join(d.get("display_name", "") + " (" + d.get("bus_address", "") + ")" for d in o.get("devices") or []))}</td>'
        f'<td>{_e(", ".join(o.get("dtypes") or []))}</td></tr>' for o in inventory if isinstance(o, Mapping))
    versions = record.get("versions") or {}
    version_text = " · ".join(f"{k} {v}" for k, v in versions.items() if v and k in ("hetflow", "python", "numpy", "dask", "distributed", "cupy"))
    scheduler = record.get("scheduler") or {}
    facts = [
        ("run id", f'<code>{_e(record.get("run_id"))}</code>'),
        ("manifest", f'<code>{_e(manifest.get("file"))}</code>'),
        ("digest", f'<code>{_e(manifest.get("digest") or (record.get("plan") or {}).get("manifest_digest"))}</code>'),
        ("started", f'<time data-utc="{_e(record.get("started_at"))}">{_e(record.get("started_at"))}</time>'),
        ("duration", _e(_fmt_seconds(record.get("duration_s")))),
        ("scheduler", _e(", ".join(f"{k} {v}" if k != "kind" else str(v) for k, v in scheduler.items()) or "—")),
        ("versions", _e(version_text or "—")),
    ]
    live = record.get("live_activations_after")
    if isinstance(live, Mapping):
        facts.append(("live activations after", _e(", ".join(f"{k} {v}" for k, v in live.items()) or "—")))
    grid = "".join(f'<div class="fact"><div class="k">{k}</div><div class="v">{v}</div></div>' for k, v in facts)
    body = (f'<header class="top"><div class="title"><h1>{_e(name)}</h1>{_status_badge(record.get("status", "unknown"))}'
            f'</div><div class="facts">{grid}</div>'
            + "".join(f'<p class="note">{_e(n)}</p>' for n in notes)
            + '<div class="cols"><div><h3>params</h3>' + _kv_table(record.get("params") or {})
            + '</div><div><h3>overrides</h3>' + _kv_table(record.get("overrides") or {})
            + '</div><div><h3>matrix point</h3>' + _matrix_point(record.get("matrix_point")) + "</div></div>"
            + ('<details><summary>executor inventory of the machine</summary><table class="grid"><thead><tr><th>vendor</th>'
               '<th>state</th><th>reason</th><th>devices</th><th>dtypes</th></tr></thead><tbody>'
               + inv_rows + "</tbody></table></details>" if inv_rows else "")
            + "</header>")
    return body


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{_e(title)}</h2>{body}</section>'


def render_run(run_dir: str, record: Mapping[str, Any], *, graph: str = "auto") -> str:
    """The report page of one run, from its folder and record."""
    if graph not in GRAPH_MODES:
        raise UsageError(f"graph layout must be one of {', '.join(GRAPH_MODES)}, got {graph!r}")
    manifest = record.get("manifest") or {}
    title = f"{manifest.get('name') or 'run'} · {record.get('run_id', '')} · hetflow report"
    nav = [("plan", "Plan"), ("timeline", "Timeline"), ("outputs", "Outputs"), ("failures", "Failures")]
    body = (_section_header(record) + _section_plan(record, graph) + _section_timeline(record)
            + _section_outputs(run_dir, record) + _section_failures(record))
    return _page(title, nav, body)


# --------------------------------------------------------------------------- sweeps


def _point_record(sweep_dir: str, runs_dir: str, point: Mapping[str, Any]) -> tuple[str | None, dict | None]:
    candidates = []
    if point.get("record"):
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


def _scalar(run_dir: str, name: str, entry: Mapping[str, Any]) -> float | None:
    shape = entry.get("shape")
    if shape is None or math.prod(shape) != 1:
        return None
    try:
        value = float(np.asarray(load_output(run_dir, name)).astype(np.float64).ravel()[0])
    except Exception:  # noqa: BLE001 - an unreadable output is a gap in the plot, not a broken report
        return None
    return value if math.isfinite(value) else None


def _sweep_points(sweep_dir: str, sweep: Mapping[str, Any], runs_dir: str) -> list[dict]:
    points = []
    for p in sweep.get("points") or []:
        if not isinstance(p, Mapping):
            continue
        run_dir, record = _point_record(sweep_dir, runs_dir, p)
        params = p.get("params") or p.get("values") or _point_values((record or {}).get("matrix_point"))
        scalars, digests = {}, {}
        for name, entry in ((record or {}).get("outputs") or {}).items():
            digests[name] = entry.get("digest")
            value = _scalar(run_dir, name, entry) if run_dir else None
            if value is not None:
                scalars[name] = value
        points.append({"name": p.get("name") or p.get("run_id") or "?", "params": dict(params),
                       "run_id": p.get("run_id") or (record or {}).get("run_id"),
                       "status": (record or {}).get("status") or p.get("status") or "missing",
                       "duration_s": (record or {}).get("duration_s"), "scalars": scalars, "digests": digests,
                       "error": ((record or {}).get("error") or {}).get("message") or p.get("error")})
    return points


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _sweep_plot(points: list[dict], output: str, param: str, others: list[str]) -> str:
    data = [(p["params"].get(param), p["scalars"][output], tuple(p["params"].get(o) for o in others))
            for p in points if output in p["scalars"] and param in p["params"]]
    if not data:
        return ""
    numeric = all(_is_number(x) for x, _, _ in data)
    categories = [] if numeric else sorted({json.dumps(x) for x, _, _ in data})
    w, h, left, bottom, top, right = 540, 240, 64, 36, 16, 140
    xs = [float(x) for x, _, _ in data] if numeric else [float(categories.index(json.dumps(x))) for x, _, _ in data]
    ys = [y for _, y, _ in data]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    pad = (y_hi - y_lo) * 0.08 or abs(y_lo) * 0.1 or 1.0
    y_lo, y_hi = y_lo - pad, y_hi + pad
    x_pad = (x_hi - x_lo) * 0.04
    x_lo, x_hi = x_lo - x_pad, x_hi + x_pad

    def px(x: float) -> float:
        return left + (w - left - right) * (x - x_lo) / (x_hi - x_lo)

    def py(y: float) -> float:
        return h - bottom - (h - top - bottom) * (y - y_lo) / (y_hi - y_lo)

    parts = [f'<svg class="sweep-plot" data-output="{_e(output)}" data-param="{_e(param)}" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {w} {h}" width="{w}" height="{h}">',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" class="axis"/>'
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" class="axis"/>']
    for frac in (0, 0.5, 1):
        yv = y_lo + frac * (y_hi - y_lo)
        parts.append(f'<text x="{left - 6}" y="{py(yv) + 4:.1f}" text-anchor="end" class="ticklabel">{_e(_fmt_num(yv))}</text>')
    ticks = sorted(set(xs))
    for xv in ticks:
        label = _fmt_num(xv) if numeric else json.loads(categories[int(xv)])
        parts.append(f'<text x="{px(xv):.1f}" y="{h - bottom + 16}" text-anchor="middle" class="ticklabel">{_e(label)}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 4}" text-anchor="middle" class="axislabel">{_e(param)}</text>')
    series: dict[tuple, list[tuple[float, float]]] = {}
    for (x, y, key), xv in zip(data, xs):
        series.setdefault(key, []).append((xv, y))
    for i, (key, pts) in enumerate(sorted(series.items(), key=lambda kv: json.dumps(kv[0]))):
        colour = _PALETTE[i % len(_PALETTE)]
        pts.sort()
        label = ", ".join(f"{o}={v}" for o, v in zip(others, key)) or output
        path = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(pts))
        parts.append(f'<g class="series"><path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in pts:
            tip = f"{label}\n{param}={_fmt_num(x) if numeric else json.loads(categories[int(x)])}\n{output}={_fmt_num(y)}"
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{colour}" data-tip="{_e(tip)}">'
                         f'<title>{_e(tip)}</title></circle>')
        ly = top + 8 + 16 * i
        parts.append(f'<rect x="{w - right + 14}" y="{ly - 8}" width="10" height="10" rx="2" fill="{colour}"/>'
                     f'<text x="{w - right + 30}" y="{ly + 1}" class="ticklabel">{_e(label)}</text></g>')
    parts.append("</svg>")
    return f'<figure><figcaption>{_e(output)} against {_e(param)}</figcaption>{"".join(parts)}</figure>'


def render_sweep(sweep_dir: str, sweep: Mapping[str, Any], *, runs_dir: str = "runs") -> str:
    """The report page of a matrix sweep: one row per point, plots of scalar outputs against each swept param."""
    points = _sweep_points(sweep_dir, sweep, runs_dir)
    matrix = sweep.get("matrix") or {}
    listed = sweep.get("params") if isinstance(sweep.get("params"), list) else []
    params = [k for k in matrix if k not in ("include", "exclude")] or [str(k) for k in listed] or list(
        dict.fromkeys(k for p in points for k in p["params"]))
    outputs = sorted({name for p in points for name in p["digests"]})
    scalars = sorted({name for p in points for name in p["scalars"]})
    counts: dict[str, int] = {}
    for p in points:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    manifest = sweep.get("manifest")
    manifest = manifest if isinstance(manifest, Mapping) else {"file": manifest}
    name = sweep.get("name") or manifest.get("name") or "sweep"
    facts = [("sweep id", f'<code>{_e(sweep.get("sweep_id") or os.path.basename(os.path.abspath(sweep_dir)))}</code>'),
             ("points", _e(len(points))),
             ("status", " ".join(f"{_status_badge(s)} {n}" for s, n in sorted(counts.items()))),
             ("manifest", f'<code>{_e(manifest.get("file") or "—")}</code>'),
             ("started", _e(sweep.get("started_at") or "—")),
             ("duration", _e(_fmt_seconds(sweep.get("duration_s"))))]
    grid = "".join(f'<div class="fact"><div class="k">{k}</div><div class="v">{v}</div></div>' for k, v in facts)
    overall = "failed" if any(p["status"] != "succeeded" for p in points) else "succeeded"
    header = (f'<header class="top"><div class="title"><h1>{_e(name)}</h1>{_status_badge(sweep.get("status") or overall)}</div>'
              f'<div class="facts">{grid}</div><h3>matrix</h3>'
              f'{_kv_table(matrix or {k: [json.loads(v) for v in dict.fromkeys(json.dumps(p["params"].get(k)) for p in points)] for k in params})}</header>')
    head = "".join(f"<th>{_e(p)}</th>" for p in params) + "<th>status</th><th>duration</th>" + \
        "".join(f"<th>{_e(o)}</th>" for o in outputs) + "<th>run</th>"
    rows = []
    for p in points:
        cells = "".join(f'<td class="num">{_e(json.dumps(p["params"].get(k)) if not isinstance(p["params"].get(k), str) else p["params"].get(k))}</td>'
                        for k in params)
        outs = "".join(
            f'<td class="num">{_e(_fmt_num(p["scalars"][o]))}</td>' if o in p["scalars"]
            else f'<td><code title="{_e(p["digests"].get(o))}">{_e((p["digests"].get(o) or "—")[:15])}</code></td>'
            for o in outputs)
        err = f'<div class="bad">{_e(p["error"])}</div>' if p.get("error") else ""
        rows.append(f'<tr class="point" data-point="{_e(p["name"])}"><td><b>{_e(p["name"])}</b>{err}</td>{cells}'
                    f'<td>{_status_badge(p["status"])}</td><td class="num">{_e(_fmt_seconds(p["duration_s"]))}</td>'
                    f'{outs}<td><code>{_e(p["run_id"])}</code></td></tr>')
    table = (f'<table class="grid"><thead><tr><th>point</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
             if points else '<p class="muted">The sweep lists no points.</p>')
    plots = [_sweep_plot(points, o, p, [q for q in params if q != p]) for o in scalars for p in params]
    plots = [x for x in plots if x]
    plot_html = (f'<div class="plots">{"".join(plots)}</div>' if plots else
                 '<p class="muted">No scalar output to plot (an output with one element is plotted against each swept param).</p>')
    body = header + _section("points", "Points", table) + _section("plots", "Scalar outputs by param", plot_html)
    return _page(f"{name} · sweep · hetflow report", [("points", "Points"), ("plots", "Plots")], body)


# --------------------------------------------------------------------------- page


_CSS = """
:root{--fg:#1f2430;--muted:#6b7280;--line:#e3e6eb;--bg:#f6f7f9;--card:#fff;--ok:#2e7d32;--bad:#c62828;--warn:#b26a00}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
nav{position:sticky;top:0;z-index:5;background:#1f2430;color:#fff;padding:8px 24px;display:flex;gap:18px;align-items:center}
nav b{margin-right:12px;letter-spacing:.02em}nav a{color:#cfd6e4;text-decoration:none}nav a:hover{color:#fff}
main{max-width:1280px;margin:0 auto;padding:18px 24px 48px}
section,header.top{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:16px 20px;margin:0 0 18px}
h1{font-size:24px;margin:0}h2{font-size:18px;margin:0 0 10px}h3{font-size:13px;margin:14px 0 6px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}
.title{display:flex;gap:12px;align-items:center;margin-bottom:12px}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:8px 18px}
.fact .k{font-size:11px;text-transform:uppercase;color:var(--muted);letter-spacing:.05em}.fact .v{word-break:break-all}
.cols{display:grid;grid-template-columns:repeat(3,1fr);gap:18px}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;margin:0;background:#fbf2f2;border-radius:6px;padding:8px}
.badge{display:inline-block;padding:2px 10px;border-radius:99px;font-size:12px;font-weight:600;background:#e5e7eb;color:#374151}
.badge.status-succeeded{background:#e3f3e5;color:var(--ok)}.badge.status-failed,.badge.status-timed-out{background:#fde8e8;color:var(--bad)}
.badge.status-running{background:#fff4dc;color:var(--warn)}
.muted{color:var(--muted)}.ok-text{color:var(--ok)}.bad{color:var(--bad)}.warn{color:var(--warn);font-size:12px}
.note{background:#fff8e6;border-left:3px solid var(--warn);padding:6px 10px;margin:10px 0}
.lede{margin:0 0 8px}
table.grid{border-collapse:collapse;width:100%;margin-top:10px}
table.grid th,table.grid td{border-bottom:1px solid var(--line);padding:6px 8px;text-align:left;vertical-align:middle}
table.grid th{font-size:12px;color:var(--muted);font-weight:600}
table.kv{border-collapse:collapse}table.kv th{text-align:left;padding:2px 12px 2px 0;color:var(--muted);font-weight:500}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.scroll{overflow-x:auto}
.graph-wrap svg{display:block;margin:6px 0}
.legend{font-size:12px;color:var(--muted);margin:4px 0}
.sw{display:inline-block;width:12px;height:12px;border-radius:3px;margin:0 4px 0 10px;vertical-align:-1px}
.sw-stage{background:#fff;border:1.5px solid #9aa3af}.sw-bridge{background:#fff3dc;border:1.5px solid #d08a18}
.sw-failed{background:#fde8e8;border:2px solid var(--bad)}.sw-notrun{background:#f3f4f6;border:1.5px dashed #9aa3af}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
.band-label{font-size:13px;font-weight:700}.band-vendor{font-weight:400}
.gnode .box{fill:#fff;stroke:#9aa3af;stroke-width:1.2}.gnode .nid{font-size:13px;font-weight:600;fill:#1f2430}
.gnode .nsub{font-size:11px;fill:#6b7280}.gnode:hover .box,.gnode:hover .bbox{stroke:#1f2430;stroke-width:2}
.gnode.status-failed .box,.gnode.status-timed-out .box{fill:#fde8e8;stroke:var(--bad);stroke-width:2.5}
.gnode.status-failed .nid,.gnode.status-timed-out .nid{fill:var(--bad)}
.gnode.status-cancelled,.gnode.status-not-run{opacity:.55}.gnode.status-cancelled .box,.gnode.status-not-run .box{stroke-dasharray:4 3}
.gnode .bbox{fill:#fff3dc;stroke:#d08a18;stroke-width:1.4}.gnode .pbox{fill:#efedfb;stroke:#6d5bd0}
.sw-phase{background:#efedfb;border:1.5px solid #6d5bd0;border-radius:6px}.gnode.bridge.status-failed .bbox{stroke:var(--bad);stroke-width:2.5}
.gnode .bid{font-size:11px;font-weight:600;fill:#7a4a00}.gnode .bbytes{font-size:11px;fill:#7a4a00}
.edge{fill:none;stroke:#8791a0;stroke-width:1.4}.edge.bridged{stroke:#d08a18;stroke-dasharray:5 3}
.timeline .lane-bg{fill:#fff;stroke:var(--line)}.timeline .lane:nth-of-type(even) .lane-bg{fill:#fafbfc}
.timeline .lane-label{font-size:12px;font-weight:600}.timeline .lane-sub{font-size:11px;fill:#6b7280}
.tick{stroke:#eef0f3}.ticklabel{font-size:11px;fill:#6b7280}.axislabel{font-size:12px;fill:#1f2430}.axis{stroke:#9aa3af}
.bar rect{stroke:rgba(0,0,0,.25);stroke-width:.6}.bar:hover rect{stroke:#1f2430;stroke-width:2}
.bar.cached rect{fill-opacity:.45;stroke-dasharray:3 2}.bar.status-failed rect{fill:#e57373;stroke:var(--bad);stroke-width:2}.barlabel{font-size:11px;fill:#fff;pointer-events:none}
.hop{stroke:#b26a00;stroke-width:1.2;stroke-dasharray:3 3;fill:none}
.hist rect{fill:#7d93c2}.hist rect:hover{fill:#3b6fb6}
.failure{border:1px solid #f3c2c2;background:#fffafa;border-radius:10px;padding:10px 14px;margin-bottom:10px}
.failure h3{color:var(--bad);text-transform:none;font-size:16px;margin:2px 0 8px;letter-spacing:0}
.failure dl{display:grid;grid-template-columns:100px 1fr;gap:6px 12px;margin:0}.failure dt{color:var(--muted)}.failure dd{margin:0}
.plots{display:flex;flex-wrap:wrap;gap:18px}figure{margin:0}figcaption{font-size:12px;color:var(--muted);margin-bottom:4px}
#tip{position:fixed;pointer-events:none;background:#1f2430;color:#fff;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;
padding:6px 9px;border-radius:6px;white-space:pre;max-width:560px;display:none;z-index:10;box-shadow:0 4px 14px rgba(0,0,0,.25)}
@media print{nav{display:none}}
"""

_JS = """
(function () {
  var tip = document.getElementById("tip");
  function show(ev) {
    var el = ev.target.closest ? ev.target.closest("[data-tip]") : null;
    if (!el) { tip.style.display = "none"; return; }
    tip.textContent = el.getAttribute("data-tip");
    tip.style.display = "block";
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth) { x = Math.max(4, ev.clientX - r.width - 14); }
    if (y + r.height > window.innerHeight) { y = Math.max(4, ev.clientY - r.height - 14); }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  document.addEventListener("mousemove", show);
  document.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  var stamps = document.querySelectorAll("time[data-utc]");
  for (var i = 0; i < stamps.length; i++) {
    var d = new Date(stamps[i].getAttribute("data-utc"));
    if (!isNaN(d.getTime())) { stamps[i].title = "local time " + d.toLocaleString(); }
  }
  document.documentElement.setAttribute("data-interactive", "true");
})();
"""


def _page(title: str, nav: list[tuple[str, str]], body: str) -> str:
    links = "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in nav)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "script-src 'unsafe-inline'; img-src data:\">"
            f"<meta name=\"generator\" content=\"hetflow report\"><title>{_e(title)}</title><style>{_CSS}</style></head>"
            f"<body><nav><b>hetflow</b>{links}</nav><main>{body}</main><div id=\"tip\"></div>"
            f"<script>{_JS}</script></body></html>\n")
