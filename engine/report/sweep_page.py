"""The report page of a matrix sweep: one row per point, plots of scalar outputs against each swept param.

A plot has one series per combination of the other swept params' values;
an output is scalar when it holds one element.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

from hetflow.engine.report.data import _is_number, _sweep_points
from hetflow.engine.report.page import _kv_table, _page, _section, _status_badge
from hetflow.engine.report.run_page import section_attempts
from hetflow.engine.store.runs import SWEEP_FORMAT
from hetflow.engine.report.text import _PALETTE, _e, _fmt_num, _fmt_seconds

__all__ = ["SWEEP_FORMAT", "render_sweep"]


def render_sweep(sweep_dir: str, sweep: Mapping[str, Any], *, runs_dir: str = "runs") -> str:
    """The report page of a matrix sweep: one row per point, plots of scalar outputs against each swept param."""
    points = _sweep_points(sweep_dir, sweep, runs_dir)
    # hetflow's own summaries keep no matrix (their points' values say it); another tool's may, in any form
    matrix = sweep.get("matrix") if isinstance(sweep.get("matrix"), Mapping) else {}
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
            else f'<td class="bad damaged" title="{_e(p["damaged"][o])}">damaged</td>'
            if o in p.get("damaged", {})
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
    attempts = section_attempts(sweep)
    body = (header + attempts + _section("points", "Points", table)
            + _section("plots", "Scalar outputs by param", plot_html))
    nav = ([("attempts", "Attempts")] if attempts else []) + [("points", "Points"), ("plots", "Plots")]
    return _page(f"{name} · sweep · hetflow report", nav, body)


def _sweep_plot(points: list[dict], output: str, param: str, others: list[str]) -> str:
    data = [(p["params"].get(param), p["scalars"][output], tuple(p["params"].get(o) for o in others))
            for p in points if output in p["scalars"] and param in p["params"]]
    # a NaN or infinite value has no place on an axis: left out, and counted under the plot
    unplotted = sum(1 for _, y, _ in data if not math.isfinite(y))
    data = [d for d in data if math.isfinite(d[1])]
    if not data:
        return ""
    # a param swept over NaN or inf is placed as a category, as a string param is: each of its values has a place
    numeric = all(_is_number(x) and math.isfinite(x) for x, _, _ in data)
    categories = [] if numeric else sorted({json.dumps(x) for x, _, _ in data}, key=_category_order)
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
    left_out = (f' <span class="muted">({unplotted} point{"" if unplotted == 1 else "s"} not plotted: '
                f'{_e(output)} is NaN or infinite there)</span>' if unplotted else "")
    return f'<figure><figcaption>{_e(output)} against {_e(param)}{left_out}</figcaption>{"".join(parts)}</figure>'


def _category_order(text: str) -> tuple:
    """Finite numbers by value, then every other value (NaN, inf, a string) by its JSON text."""
    value = json.loads(text)
    if _is_number(value) and math.isfinite(value):
        return (0, value, text)
    return (1, 0, text)
