"""The plan graph as a picture: Graphviz's layout where ``dot`` runs, hetflow's own otherwise.

The graph has a node per stage, per emulator phase and per bridge (stage
-> bridge -> each consumer on the bridge's destination executor; stages on
one executor connect directly). :func:`plan_dot` writes it as DOT with one
cluster per executor for Graphviz; :func:`plan_svg` draws it, falling back
to :func:`~hetflow.engine.report.layout.layout_plan` when Graphviz is
missing or fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any, Mapping

from hetflow.engine.plan.planner import human_bytes
from hetflow.engine.report.data import _FAILED, _partition_graph, _phase_target, _plan_graph, _status_of_bridges
from hetflow.engine.report.layout import _PAD, PlanLayout, layout_graph, layout_plan
from hetflow.engine.report.text import (_bytes, _e, _emulator_kind, _executor_colour, _fit, _fmt_seconds, _phase_tip,
                                        _shape_text)
from hetflow.engine.run.events import printable

__all__ = ["graphviz_available", "plan_dot", "plan_svg"]


def _svg_head_and_bands(lay: PlanLayout, plan: Mapping[str, Any], layout: str, label: str) -> list[str]:
    """The start of a plan graph's SVG drawn by hetflow: its element, the arrow marker, a band per executor."""
    executors = plan.get("executors") or {}
    emulators = plan.get("emulators") or {}
    names = [b[0] for b in lay.bands]
    parts = [f'<svg class="plan-graph" data-layout="{layout}" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" {_fit(lay.width)} '
             f'role="img" aria-label="{label}">',
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
    return parts


def _svg_plan_builtin(record: Mapping[str, Any]) -> str:
    plan = record.get("plan") or {}
    lay = layout_plan(plan)
    node_status = {n: (v or {}).get("status", "unknown") for n, v in (record.get("nodes") or {}).items()}
    phase_status = {n: (v or {}).get("status", "unknown") for n, v in (record.get("phases") or {}).items()}
    bridge_status = _status_of_bridges(record)
    names = [b[0] for b in lay.bands]
    parts = _svg_head_and_bands(lay, plan, "builtin", "plan graph")
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


def _partition_tip(d: Mapping[str, Any]) -> tuple[str, str]:
    """A partition node's hover text and its one-line summary: its size, its commonest ops, a few stage ids."""
    stages = d["stages"]
    ops = sorted(d["ops"].items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(stages[:6]) + (f" … {stages[-1]}" if len(stages) > 6 else "")
    tip = (f"partition {d['id']} on {d['executor']}\n{len(stages)} stage{'s' if len(stages) != 1 else ''}: {shown}\n"
           f"ops {', '.join(f'{op} {n}' for op, n in ops[:6])}{' …' if len(ops) > 6 else ''}\n"
           f"status {d['status']}\ntask {_fmt_seconds(d.get('duration_s'))}\nclick to open its stages")
    sub = f"{len(stages)} stage{'s' if len(stages) != 1 else ''} · " + ", ".join(op for op, _ in ops[:2])
    return tip, sub + (" …" if len(ops) > 2 else "")


def _svg_plan_partitions(record: Mapping[str, Any]) -> str:
    """The plan with one node per partition (see :func:`~hetflow.engine.report.data._partition_graph`): what a
    plan too big to read stage by stage is drawn as. Each node opens its stages in the page (``report.js``)."""
    plan = record.get("plan") or {}
    g = _partition_graph(record)
    lay = layout_graph(g, plan, wrap=True)
    phase_status = {n: (v or {}).get("status", "unknown") for n, v in (record.get("phases") or {}).items()}
    names = [b[0] for b in lay.bands]
    parts = _svg_head_and_bands(lay, plan, "partitions", "plan graph, one node per partition")
    for u, v, e in g.edges(data=True):
        a, b = lay.nodes[u], lay.nodes[v]
        x1, y1, x2, y2 = a.x + a.w, a.y + a.h / 2, b.x, b.y + b.h / 2
        mid = (x1 + x2) / 2
        tip = (f"{a.id} → {b.id}: {e['bridges']} bridge{'s' if e['bridges'] != 1 else ''}, {human_bytes(e['bytes'])}"
               if e.get("bridges") else f"{a.id} → {b.id}")
        parts.append(f'<path class="edge{" bridged" if e.get("bridges") else ""}" data-tip="{_e(tip)}" '
                     f'd="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2 - 2:.1f},{y2:.1f}" '
                     'marker-end="url(#arrow)"/>')
    for n in lay.nodes.values():
        d = n.data
        if n.kind == "phase":
            status = phase_status.get(n.id, "unknown")
            tip, sub = _phase_tip(n.id, d, status)
            parts.append(
                f'<g class="gnode phase status-{_e(status.replace(" ", "-"))}" id="phase-{_e(n.id)}" data-tip="{_e(tip)}">'
                f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w}" height="{n.h}" rx="{n.h / 2:.0f}" class="box pbox"/>'
                f'<text x="{n.x + 16:.1f}" y="{n.y + 19:.1f}" class="nid">{_e(n.id)}</text>'
                f'<text x="{n.x + 16:.1f}" y="{n.y + 36:.1f}" class="nsub">{_e(sub)}</text></g>')
            continue
        status = d["status"]
        tip, sub = _partition_tip(d)
        mark = {"failed": " ✗", "timed out": " ✗ timed out", "cancelled": " ⊘", "not run": " ⊘"}.get(status, "")
        parts.append(
            f'<g class="gnode partition status-{_e(status.replace(" ", "-"))}" id="partition-{_e(n.id)}" '
            f'data-partition="{_e(n.id)}" data-tip="{_e(tip)}" tabindex="0" role="button">'
            f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w}" height="{n.h}" rx="7" class="box"/>'
            f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="5" height="{n.h}" rx="2" fill="{_executor_colour(names, d["executor"])}"/>'
            f'<text x="{n.x + 13:.1f}" y="{n.y + 19:.1f}" class="nid">{_e(n.id)}{mark}</text>'
            f'<text x="{n.x + 13:.1f}" y="{n.y + 36:.1f}" class="nsub">{_e(sub)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def graphviz_available() -> bool:
    return shutil.which("dot") is not None


def _dot_quote(text: Any) -> str:
    # a label or tooltip (a manifest's path) says its control characters and bidirectional overrides as _e does
    return '"' + printable(str(text)).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


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


def plan_svg(record: Mapping[str, Any]) -> str:
    """The plan graph of a record (or of ``{"plan": ...}``) as SVG: Graphviz's layout, else hetflow's own."""
    return _svg_plan_graphviz(record) or _svg_plan_builtin(record)
