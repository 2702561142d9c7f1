"""The report page of one run: a section per part of the record, each a function to an HTML fragment.

Sections: the header (identity, params, versions, inventory), the plan
(graph, bridges), the timeline (a lane per executor or worker, bars packed
into sub-rows, a dashed line from each bridge's export to its import), the
outputs (statistics and a histogram each) and the failures. A section that
has nothing to show says so.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable, Mapping

from hetflow.engine.errors import OutputDamaged, UsageError
from hetflow.engine.plan.planner import human_bytes
from hetflow.engine.store.records import RECORD_FORMAT
from hetflow.engine.report.data import (_FAILED, Bar, _bars, _output_array, _partition_stages, _phase_target, _point_values,
                                        output_stats, pack_lanes)
from hetflow.engine.report.graph import _svg_plan_builtin, _svg_plan_graphviz, _svg_plan_partitions
from hetflow.engine.report.page import _kv_table, _page, _section, _status_badge
from hetflow.engine.report.text import (_EMULATOR_COLOUR, _KIND_COLOURS, _PALETTE, _bytes, _e, _executor_colour, _fit,
                                        _fmt_num, _fmt_seconds, _nice_step, _shape_text)

__all__ = ["GRAPH_MODES", "render_run", "section_attempts"]

GRAPH_MODES = ("auto", "graphviz", "builtin")

# Above these sizes a page drawn element by element stops being readable (and costs tens of MB and seconds of
# Graphviz): the plan graph collapses to partitions, the timeline to time bins per lane, long tables to their
# first rows. Every total the page states is still counted over everything in the record.
GRAPH_NODE_LIMIT = 400
PARTITION_NODE_LIMIT = 2000
TIMELINE_TASK_LIMIT = 2000
TABLE_ROW_LIMIT = 200
TIP_NODE_LIMIT = 12
_TIMELINE_BINS = 300
# what the collapsed plan and the binned timeline contain, and no other section: the page then carries their script
_BIG_PLAN = 'id="partition-stages"'
_BIG_TIMELINE = 'class="timeline binned"'


def render_run(run_dir: str, record: Mapping[str, Any], *, graph: str = "auto") -> str:
    """The report page of one run, from its folder and record."""
    if graph not in GRAPH_MODES:
        raise UsageError(f"graph layout must be one of {', '.join(GRAPH_MODES)}, got {graph!r}")
    manifest = record.get("manifest") or {}
    title = f"{manifest.get('name') or 'run'} · {record.get('run_id', '')} · hetflow report"
    nav = [("plan", "Plan"), ("timeline", "Timeline"), ("outputs", "Outputs"), ("failures", "Failures")]
    attempts = section_attempts(record)
    if attempts:
        nav.insert(0, ("attempts", "Attempts"))
    plan, timeline = _section_plan(record, graph), _section_timeline(record)
    body = (_section_header(record) + attempts + plan + timeline
            + _section_outputs(run_dir, record) + _section_failures(record))
    return _page(title, nav, body, big=_BIG_PLAN in plan or _BIG_TIMELINE in timeline)


def _device_text(device: Mapping[str, Any]) -> str:
    """A device of the inventory as ``name (bus address)``; what a record edited by hand holds there, as text."""
    return f'{device.get("display_name", "")} ({device.get("bus_address", "")})'


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
        f'<td>{_e(o.get("reason"))}</td><td>{_e(", ".join(_device_text(d) for d in o.get("devices") or []))}</td>'
        f'<td>{_e(", ".join(o.get("dtypes") or []))}</td></tr>' for o in inventory if isinstance(o, Mapping))
    versions = record.get("versions") or {}
    version_text = " · ".join(f"{k} {v}" for k, v in versions.items() if v and k in ("hetflow", "python", "numpy", "dask", "distributed", "cupy"))
    scheduler = record.get("scheduler") if isinstance(record.get("scheduler"), Mapping) else {}
    notes.extend(_recovery_notes(record.get("recovery")))
    if isinstance(record.get("verifies"), str):  # without it, the page reads as a run of the manifest like any other
        notes.append(f"a verification run (hetflow verify) of run {record['verifies']}: it reran that run's manifest "
                     "without the cache, to compare its outputs with that run's")
    facts = [
        ("run id", f'<code>{_e(record.get("run_id"))}</code>'),
        ("manifest", f'<code>{_e(manifest.get("file"))}</code>'),
        ("digest", f'<code>{_e(manifest.get("digest") or (record.get("plan") or {}).get("manifest_digest"))}</code>'),
        ("started", f'<time data-utc="{_e(record.get("started_at"))}">{_e(record.get("started_at"))}</time>'),
        ("duration", _e(_fmt_seconds(record.get("duration_s")))),
        ("scheduler", _e(_scheduler_text(scheduler) or "—")),
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


def section_attempts(record: Mapping[str, Any]) -> str:
    """The attempts of a resumed run or sweep, one row each; nothing for one that ran once.

    >>> html = section_attempts({"attempts": [
    ...     {"attempt": 1, "started_at": "t0", "ended_at": "t1", "duration_s": 2.0, "status": "cancelled",
    ...      "cancelled": {"signal": "SIGTERM", "finished": ["p0"]}},
    ...     {"attempt": 2, "started_at": "t2", "ended_at": "t3", "duration_s": 1.0, "status": "succeeded",
    ...      "cache_hits": ["p0"]}]})
    >>> "Resumed" in html and "SIGTERM" in html and html.count("<tr>") == 3
    True
    >>> section_attempts({"attempts": [{"attempt": 1, "status": "succeeded"}]})
    ''
    """
    attempts = [a for a in record.get("attempts") or [] if isinstance(a, Mapping)]
    if len(attempts) < 2:
        return ""
    rows = []
    for a in attempts:
        notes = []
        cancelled = a.get("cancelled")
        if isinstance(cancelled, Mapping):
            done = cancelled.get("finished")
            notes.append(f"cancelled by {cancelled.get('signal')}" + (" (forced exit)" if cancelled.get("forced_exit") else "")
                         + (f"; {len(done)} finished" if isinstance(done, list) else ""))
        if a.get("status") == "died":
            notes.append("its process ended without writing its record (killed, or the machine stopped)")
        if a.get("error"):
            notes.append(str(a["error"]))
        owner = a.get("owner") if isinstance(a.get("owner"), Mapping) else {}
        where = f"pid {owner.get('pid')} on {owner.get('host')}" if owner else "—"
        rows.append(f"<tr><td class=\"num\">{_e(a.get('attempt'))}</td><td>{_status_badge(a.get('status') or 'unknown')}</td>"
                    f"<td>{_e(a.get('started_at') or '—')}</td><td>{_e(a.get('ended_at') or '—')}</td>"
                    f"<td class=\"num\">{_e(_fmt_seconds(a.get('duration_s')))}</td><td>{_e(where)}</td>"
                    f"<td>{_e('; '.join(notes) or '—')}</td></tr>")
    lede = (f'<p>Resumed: {len(attempts)} attempts, {_e(_fmt_seconds(record.get("duration_s")))} in all. '
            "Each later attempt took what earlier ones had finished from the cache.</p>")
    table = ('<table class="grid"><thead><tr><th>attempt</th><th>status</th><th>started</th><th>ended</th>'
             '<th>duration</th><th>process</th><th>notes</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")
    return _section("attempts", "Attempts", lede + table)


def _matrix_point(point: Any) -> str:
    if not point:
        return '<span class="muted">not a sweep point</span>'
    name = f'<div><code>{_e(point.get("name"))}</code></div>' if isinstance(point, Mapping) and point.get("name") else ""
    return name + _kv_table(_point_values(point))


def _section_plan(record: Mapping[str, Any], graph: str) -> str:
    plan = record.get("plan")
    if not plan or not (plan.get("nodes") or plan.get("phases")):
        return _section("plan", "Plan", '<p class="muted">This record has no plan.</p>')
    n_drawn = len(plan.get("nodes") or {}) + len(plan.get("phases") or {}) + len(plan.get("bridges") or [])
    if n_drawn > GRAPH_NODE_LIMIT:
        return _section_plan_collapsed(record, graph)
    svg = None
    note = ""
    if graph in ("auto", "graphviz"):
        svg = _svg_plan_graphviz(record)
        if svg is None and graph == "graphviz":
            note = '<p class="muted">Graphviz was asked for but <code>dot</code> is not available or failed; ' \
                   'this is hetflow\'s own layout.</p>'
    if svg is None:
        svg = _svg_plan_builtin(record)
    summary, table = _plan_summary(record)
    legend = ('<p class="legend"><span class="sw sw-stage"></span>stage '
              + ('<span class="sw sw-phase"></span>emulator phase ' if plan.get("phases") else "")
              + '<span class="sw sw-bridge"></span>bridge '
              '<span class="sw sw-failed"></span>failed <span class="sw sw-notrun"></span>not run</p>')
    return _section("plan", "Plan", summary + note + legend + f'<div class="scroll graph-wrap">{svg}</div>' + table)


def _section_plan_collapsed(record: Mapping[str, Any], graph: str) -> str:
    """The plan section of a plan too big to draw stage by stage: a node per partition, each of which opens its
    stages in the page, drawn by ``report.js`` from compact data (:func:`~hetflow.engine.report.data._partition_stages`)."""
    plan = record.get("plan") or {}
    summary, table = _plan_summary(record)
    stages = _partition_stages(record)
    n_parts = len(stages["partitions"])
    drawn = n_parts + len(plan.get("phases") or {}) <= PARTITION_NODE_LIMIT
    note = (f'<p class="note">{len(plan.get("nodes") or {}):,} stages are too many to draw one by one: '
            + ("each partition is one node; click one, or choose it here, to open its stages."
               if drawn else f"their {n_parts:,} partitions too; choose one here to open its stages.")
            + (" Graphviz lays out plans of up to " f"{GRAPH_NODE_LIMIT} nodes; this is hetflow's own layout."
               if graph == "graphviz" else "") + "</p>")
    options = "".join(f'<option value="{_e(p)}">{_e(p)} ({len(rows)} stage{"s" if len(rows) != 1 else ""})</option>'
                      for p, rows in stages["partitions"].items())
    picker = (f'<p class="picker"><label>open partition <select id="partition-open"><option value="">—</option>'
              f'{options}</select></label></p><div id="partition-view" class="scroll graph-wrap"></div>')
    # "</" inside the data would end the script element early, and "<!--<script" would carry it past its end tag:
    # "<" is only ever inside a JSON string, where \u003c is the same character
    data = json.dumps(stages, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    legend = ('<p class="legend"><span class="sw sw-stage"></span>partition (its stages inside) '
              + ('<span class="sw sw-phase"></span>emulator phase ' if plan.get("phases") else "")
              + '<span class="sw sw-bridge"></span>edge with bridges '
              '<span class="sw sw-failed"></span>failed <span class="sw sw-notrun"></span>not run</p>')
    svg = f'<div class="scroll graph-wrap">{_svg_plan_partitions(record)}</div>' if drawn else ""
    return _section("plan", "Plan", summary + note + legend + svg + picker
                    + f'<script type="application/json" id="partition-stages">{data}</script>' + table)


def _plan_summary(record: Mapping[str, Any]) -> tuple[str, str]:
    """The plan's one-line summary and its table of bridges (the largest first where there are too many)."""
    plan = record.get("plan") or {}
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
    cost = _bridge_costs(record)
    shown = bridges
    if len(bridges) > TABLE_ROW_LIMIT:
        shown = sorted(bridges, key=lambda b: -(b.get("bytes") or 0))[:TABLE_ROW_LIMIT]
    rows = "".join(
        f'<tr><td><code>{_e(b.get("id"))}</code></td><td>{_e(b.get("tensor"))}</td><td>{_e(b.get("source"))} → '
        f'{_e(b.get("destination"))}</td><td class="num">{_e(_bytes(b))}</td>'
        f'<td>{_e(_names(b.get("consumers") or [], len(bridges) > TABLE_ROW_LIMIT))}</td>'
        f'<td class="num">{_e(_fmt_seconds(cost[b.get("id")]) if b.get("id") in cost else "—")}</td></tr>'
        for b in shown)
    table = ('<table class="grid"><thead><tr><th>bridge</th><th>tensor</th><th>from → to</th><th>bytes</th>'
             f'<th>consumers</th><th>export + import</th></tr></thead><tbody>{rows}</tbody></table>') if bridges else ""
    if len(shown) < len(bridges):
        table = (f'<details><summary>the {len(shown)} largest of {len(bridges):,} bridges (every bridge is in the '
                 f"run's record.json)</summary>{table}</details>")
    return summary, table


def _bridge_costs(record: Mapping[str, Any]) -> dict[str, float]:
    """Each bridge's export and import time together, in one pass over the tasks."""
    cost: dict[str, float] = {}
    for t in record.get("tasks") or []:
        if t.get("kind") in ("export", "import"):
            cost[t.get("id")] = cost.get(t.get("id"), 0.0) + (t.get("duration_s") or 0.0)
    return cost


def _names(names: list, cap: bool) -> str:
    """A list of stage names, its first ones only where ``cap`` is set and there are many.

    >>> _names(["a", "b"], True), _names([f"s{i}" for i in range(20)], True)
    ('a, b', 's0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11 … (20 in all)')
    """
    if cap and len(names) > TIP_NODE_LIMIT:
        return ", ".join(map(str, names[:TIP_NODE_LIMIT])) + f" … ({len(names)} in all)"
    return ", ".join(map(str, names))


def _section_timeline(record: Mapping[str, Any]) -> str:
    bars = _bars(record)
    if not bars:
        return _section("timeline", "Timeline", '<p class="muted">This record has no task timings.</p>')
    if len(bars) > TIMELINE_TASK_LIMIT:
        return _section_timeline_binned(record, bars)
    # a big plan's partitions list hundreds of stages each: its tips and table name the first few
    compact = len((record.get("plan") or {}).get("nodes") or {}) > GRAPH_NODE_LIMIT
    names = list(((record.get("plan") or {}).get("executors") or {}).keys())
    lanes = pack_lanes(bars)
    lane_order = _lane_order(lanes, names)
    origin, span = _time_axis(record, bars)
    label_w, plot_w, row_h, bar_h, axis_h = 190, 900, 24, 18, 28
    width = label_w + plot_w + 20
    heights = [len(lanes[lane]) * row_h + 12 for lane in lane_order]
    height = axis_h + sum(heights) + 10

    def x_of(t: float) -> float:
        return label_w + plot_w * (t - origin) / span

    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'{_fit(width)} role="img" aria-label="timeline">']
    parts += _ticks(x_of, origin, span, axis_h, height)
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
                    details.append("nodes " + _names(t["nodes"], compact))
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
                    f'<div class="scroll">{"".join(parts)}</div>' + _task_table(bars, compact))


def _bar_colour(bar: Bar, names: list[str]) -> str:
    if bar.kind == "partition":
        return _executor_colour(names, bar.task.get("executor"))
    return _KIND_COLOURS.get(bar.kind) or _EMULATOR_COLOUR


def _lane_order(lanes: Iterable[str], names: list[str]) -> list[str]:
    """Lanes in the plan's executor order (a worker's lanes by their executor), then the others by name."""
    def key(lane: str) -> tuple:
        executor = lane.split(" · ")[-1]
        return (executor not in names, names.index(executor) if executor in names else 0, lane)
    return sorted(lanes, key=key)


def _time_axis(record: Mapping[str, Any], bars: list[Bar]) -> tuple[float, float]:
    """The timeline axis's origin and span in seconds from the run's start."""
    last = max([b.end for b in bars] + [record.get("duration_s") or 0.0])
    first = min(b.start for b in bars)
    # start-up (record, executors, lowering) can dwarf the tasks; the axis then starts at the first task
    origin = first if first > 0.05 * last else 0.0
    return origin, (last - origin) or 1e-3


def _ticks(x_of: Callable[[float], float], origin: float, span: float, axis_h: int, height: int) -> list[str]:
    step = _nice_step(span)
    unit, scale = ("ms", 1e3) if span < 2 else ("s", 1.0)
    parts = []
    tick = 0.0
    while tick <= span * 1.0001:
        x = x_of(origin + tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{axis_h - 6}" y2="{height - 6}" class="tick"/>'
                     f'<text x="{x:.1f}" y="{axis_h - 10}" class="ticklabel" text-anchor="middle">'
                     f'{tick * scale:.{max(0, -math.floor(math.log10(step * scale)) if step * scale < 1 else 0)}f} {unit}</text>')
        tick += step
    return parts


def _section_timeline_binned(record: Mapping[str, Any], bars: list[Bar]) -> str:
    """The timeline of a run with too many tasks to draw one by one: a lane per executor (or worker), cut into
    equal time bins, each drawn as tall as the tasks running in it on average and labelled with their counts.
    Failed tasks are still drawn one by one above their bin; the lede's counts and busy times are exact."""
    names = list(((record.get("plan") or {}).get("executors") or {}).keys())
    by_lane: dict[str, list[Bar]] = {}
    for b in bars:
        by_lane.setdefault(b.lane, []).append(b)
    lane_order = _lane_order(by_lane, names)
    origin, span = _time_axis(record, bars)
    label_w, plot_w, lane_h, axis_h = 190, 900, 56, 28
    width, n_bins = label_w + plot_w + 20, _TIMELINE_BINS
    bin_s = span / n_bins
    height = axis_h + lane_h * len(lane_order) + 10
    parts = [f'<svg class="timeline binned" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'{_fit(width)} role="img" aria-label="timeline, tasks counted in time bins">']
    parts += _ticks(lambda t: label_w + plot_w * (t - origin) / span, origin, span, axis_h, height)
    busy_total: dict[str, float] = {}
    for i, lane in enumerate(lane_order):
        y = axis_h + i * lane_h
        colour = _executor_colour(names, lane.split(" · ")[-1])
        busy = [0.0] * n_bins
        started = [0] * n_bins
        kinds: list[dict[str, int]] = [{} for _ in range(n_bins)]
        failed: list[Bar] = []
        for b in by_lane[lane]:
            lo = min(n_bins - 1, max(0, int((b.start - origin) / bin_s)))
            started[lo] += 1
            kinds[lo][b.kind] = kinds[lo].get(b.kind, 0) + 1
            # a task's time goes to every bin it overlaps, so the bins' busy time adds up to the lane's
            t0, t1 = max(b.start, origin), b.end
            k = lo
            while t0 < t1 and k < n_bins:
                edge = origin + (k + 1) * bin_s
                busy[k] += min(t1, edge) - t0
                t0, k = edge, k + 1
            if b.status in _FAILED:
                failed.append(b)
        busy_total[lane] = sum(b.duration for b in by_lane[lane])
        peak = max(busy) / bin_s if max(busy) > 0 else 1.0
        parts.append(f'<g class="lane" data-lane="{_e(lane)}"><rect x="0" y="{y}" width="{width}" height="{lane_h}" '
                     f'class="lane-bg"/><rect x="0" y="{y}" width="4" height="{lane_h}" fill="{colour}"/>'
                     f'<text x="12" y="{y + 17}" class="lane-label">{_e(lane)}</text>'
                     f'<text x="12" y="{y + 31}" class="lane-sub">{len(by_lane[lane]):,} tasks</text>'
                     f'<text x="12" y="{y + 45}" class="lane-sub">at most {peak:.1f} at once</text></g>')
        bar_w = plot_w / n_bins
        for k in range(n_bins):
            if not started[k] and busy[k] <= 0:
                continue
            load = busy[k] / bin_s
            h = max(1.5, (lane_h - 10) * load / max(peak, 1e-12))
            t_lo = origin + k * bin_s
            tip = (f"{lane}\n+{_fmt_seconds(t_lo)} to +{_fmt_seconds(t_lo + bin_s)}\n{started[k]} tasks started"
                   + (" (" + ", ".join(f"{kk} {n}" for kk, n in sorted(kinds[k].items())) + ")" if kinds[k] else "")
                   + f"\nbusy {_fmt_seconds(busy[k])}, {load:.2f} tasks at once on average")
            parts.append(f'<rect class="bin" x="{label_w + k * bar_w:.2f}" y="{y + lane_h - 5 - h:.2f}" '
                         f'width="{bar_w:.2f}" height="{h:.2f}" fill="{colour}" data-tip="{_e(tip)}"/>')
        for b in failed[:TABLE_ROW_LIMIT]:
            x0 = label_w + plot_w * (b.start - origin) / span
            tip = f"{b.kind} {b.id}\nlane {lane}\nstatus {b.status}\nstart +{_fmt_seconds(b.start)}\n" \
                  f"duration {_fmt_seconds(b.duration)}" + (f"\nerror {b.task['error']}" if b.task.get("error") else "")
            parts.append(f'<g class="bar status-{_e(b.status.replace(" ", "-"))}" data-kind="{_e(b.kind)}" '
                         f'data-id="{_e(b.id)}" data-tip="{_e(tip)}"><rect x="{x0:.2f}" y="{y + 4}" '
                         f'width="{max(2.5, plot_w * b.duration / span):.2f}" height="8" rx="2"/></g>')
    parts.append("</svg>")
    axis = (f"The axis starts at the first task, {_fmt_seconds(origin)} after the run started (run record, "
            "executors, lowering)." if origin else "The axis starts when the run started.")
    lede = (f'<p class="lede">{len(bars):,} tasks on {len(lane_order)} lanes over {_fmt_seconds(span)}: '
            + "; ".join(f"{_e(lane)} busy {_fmt_seconds(busy_total[lane])}" for lane in lane_order)
            + f'.</p><p class="muted">Too many tasks to draw one by one: each lane is cut into {n_bins} bins of '
            f'{_e(_fmt_seconds(bin_s))}, as tall as the tasks running in them on average (hover one for its counts); '
            f'failed tasks are drawn one by one. {_e(axis)}</p>')
    return _section("timeline", "Timeline", lede + f'<div class="scroll">{"".join(parts)}</div>' + _task_table(bars, True))


def _task_table(bars: list[Bar], compact: bool = False) -> str:
    total = len(bars)
    if len(bars) > TABLE_ROW_LIMIT:
        # failures first, then the longest tasks: what a reader of a big run looks for
        bars = sorted(bars, key=lambda b: (b.status not in _FAILED, -b.duration))[:TABLE_ROW_LIMIT]
    rows = "".join(
        f'<tr class="task status-{_e(b.status.replace(" ", "-"))}"><td>{_e(b.kind)}</td><td><code>{_e(b.id)}</code></td>'
        f'<td>{_e(b.lane)}</td><td class="num">+{_e(_fmt_seconds(b.start))}</td><td class="num">{_e(_fmt_seconds(b.duration))}</td>'
        f'<td class="num">{_e(human_bytes(b.task["bytes"]) if b.task.get("bytes") is not None else "")}</td>'
        f'<td>{_e(_names(b.task.get("nodes") or [], compact))}</td><td>{_status_badge(b.status)}</td></tr>'
        for b in sorted(bars, key=lambda b: b.start))
    summary = ("every task, in start order" if len(bars) == total else
               f"the failed and the longest {len(bars)} of {total:,} tasks, in start order (every task is in the "
               "run's record.json)")
    return (f'<details><summary>{summary}</summary><table class="grid"><thead><tr><th>kind</th><th>id</th>'
            '<th>lane</th><th>start</th><th>duration</th><th>bytes</th><th>nodes</th><th>status</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></details>')


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
            array = _output_array(run_dir, o, name)
            stats = output_stats(array)
            problem = ""
        except OutputDamaged as e:  # gone, unreadable, or changed since the run: shown, not fatal to the report
            stats, problem = {}, e.why
        except Exception as e:  # noqa: BLE001 - whatever else a damaged .npy does is shown too
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


def _section_failures(record: Mapping[str, Any]) -> str:
    nodes = record.get("nodes") or {}
    plan_nodes = (record.get("plan") or {}).get("nodes") or {}
    error = record.get("error") or {}
    failed = [n for n, v in nodes.items() if (v or {}).get("status") in _FAILED]
    skipped = [n for n, v in nodes.items() if (v or {}).get("status") in ("cancelled", "not run")]
    if not failed and not error:
        if record.get("status") in ("running", "died"):
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


def _scheduler_text(scheduler: Mapping) -> str:
    """``cluster, address tcp://..., workers a (tcp://...), b (tcp://...)``: a worker by its name and address."""
    parts = []
    for key, value in scheduler.items():
        if key == "kind":
            parts.append(str(value))
        elif key == "workers" and isinstance(value, list):
            named = [f"{w.get('name')} ({w.get('address')})" if isinstance(w, Mapping) else str(w) for w in value]
            parts.append(f"workers {', '.join(named) or '-'}")
        else:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def _recovery_notes(recovery: Any) -> list[str]:
    """One line per recovery of a cluster run: the workers lost, where their executors went, what ran again."""
    notes = []
    for r in recovery if isinstance(recovery, list) else ():
        if not isinstance(r, Mapping):
            continue
        lost = ", ".join(f"{w.get('name')} ({w.get('address')})" if isinstance(w, Mapping) else str(w)
                         for w in r.get("lost_workers") or [])
        moved = ", ".join(f"{name} to {(m.get('to') or {}).get('name')} ({(m.get('to') or {}).get('address')})"
                          for name, m in (r.get("executors") or {}).items() if isinstance(m, Mapping))
        again = len(r.get("recomputed") or [])
        notes.append(f"recovered at {r.get('detected_at') or '-'} from {r.get('cause') or 'a lost worker'}"
                     + (f": lost {lost}" if lost else "") + (f"; executors moved: {moved}" if moved else "")
                     + f"; {again} task{'s' if again != 1 else ''} ran again")
    return notes

