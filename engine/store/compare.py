"""Comparing runs: ``hetflow runs diff A B`` and ``hetflow runs table``.

Both read only run records and the outputs saved beside them, so every
number they show can be checked against a record's digests.

An output is shown by :func:`output_view`: its value when it is a
scalar (a phase's field, or an array of one element) or a small array
(at most :data:`SMALL` elements), otherwise its shape, dtype and summary
statistics (min, max, mean). :func:`diff_runs` sets two records side by
side: manifest, params, matrix point, plugins and their code digests,
data files and arrays handed in, library versions, and every output,
with the largest absolute difference where two arrays have one shape.
:func:`table` makes one row per run (a sweep's points, or the runs
named) with its params and scalar outputs.

Examples
--------
>>> changes({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4})
[('b', 2, 3), ('c', None, 4)]
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from hetflow.engine.errors import OutputDamaged, UsageError
from hetflow.engine.store.records import read_output
from hetflow.engine.store.runs import _read_json, json_text, read_record, read_summary, resolve_id, status_of, sweep_view

__all__ = ["SMALL", "output_view", "load_array", "changes", "diff_runs", "table", "render_table", "mismatch_causes", "versions_of"]

SMALL = 16


def changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every key whose values differ; None where a key is missing.

    A NaN is the same as a NaN here, anywhere in a value: both runs had the
    param ``.nan``, which ``!=`` alone would call a change.

    >>> changes({"lr": float("nan"), "n": 1, "s": [float("nan")]}, {"lr": float("nan"), "n": 1.0, "s": [float("nan")]})
    []
    """
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if not _same(a.get(k), b.get(k))]


def _same(x: Any, y: Any) -> bool:
    return x == y or json.dumps(x, sort_keys=True, default=str) == json.dumps(y, sort_keys=True, default=str)


def load_array(run_dir: str, name: str, entry: Mapping[str, Any]) -> np.ndarray | None:
    """The output as a float64 array (None when it is a phase's value, or its file is gone, unreadable or not
    the array its record names: :func:`hetflow.engine.store.records.read_output`)."""
    if "file" not in entry:
        return None
    try:
        return np.asarray(read_output(run_dir, name, entry), dtype=np.float64)
    except (OutputDamaged, KeyError, TypeError, ValueError):
        return None


def _plain(x: Any) -> Any:
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


def output_view(run_dir: str, name: str, entry: Mapping[str, Any]) -> dict:
    """``{"value": ...}`` for scalars and small arrays, ``{"shape", "dtype", "min", "max", "mean"}`` otherwise."""
    if "file" not in entry:
        return {"value": entry.get("value"), "digest": entry.get("digest")}
    view: dict[str, Any] = {"shape": entry.get("shape"), "dtype": entry.get("dtype"), "digest": entry.get("digest")}
    try:
        array = np.asarray(read_output(run_dir, name, entry), dtype=np.float64)
    except OutputDamaged as e:
        view["missing"] = e.why  # gone, unreadable, or not what the record names: said as such
        return view
    if array.size == 1:
        view["value"] = _plain(float(array.reshape(-1)[0]))
    elif array.size <= SMALL:
        view["value"] = [_plain(float(v)) for v in array.reshape(-1)] if array.ndim == 1 else \
            json.loads(json.dumps(array.tolist()))
    elif array.size:
        view.update(min=float(array.min()), max=float(array.max()), mean=float(array.mean()))
    return view


def scalar(view: Mapping[str, Any]) -> Any:
    """The view's value when it is one number, bool or short string, else None."""
    value = view.get("value")
    if isinstance(value, (int, float, bool)) or (isinstance(value, str) and len(value) <= 40):
        return value
    return None


def diff_runs(runs_dir: str, a: str, b: str) -> dict:
    """What differs between runs ``a`` and ``b`` (any names :func:`~hetflow.engine.store.runs.resolve_id` takes), and
    their outputs side by side."""
    # each run's files where its folder is now (the folder a name resolves to, not the id its record gives)
    fa, fb = resolve_id(runs_dir, a, "run"), resolve_id(runs_dir, b, "run")
    ra, rb = read_record(runs_dir, fa, whole=True), read_record(runs_dir, fb, whole=True)
    da, db = os.path.join(runs_dir, fa), os.path.join(runs_dir, fb)
    ma, mb = ra.get("manifest") or {}, rb.get("manifest") or {}
    manifest = changes({k: ma.get(k) for k in ("name", "file", "digest")}, {k: mb.get(k) for k in ("name", "file", "digest")})
    pa = {p.get("spec"): p.get("digest") for p in ra.get("plugins") or []}
    pb = {p.get("spec"): p.get("digest") for p in rb.get("plugins") or []}
    data_a = {k: v.get("digest") for k, v in (ra.get("data") or {}).items()}
    data_b = {k: v.get("digest") for k, v in (rb.get("data") or {}).items()}
    prog_a = {k: v.get("digest") for k, v in (ra.get("programs") or {}).items() if isinstance(v, dict)}
    prog_b = {k: v.get("digest") for k, v in (rb.get("programs") or {}).items() if isinstance(v, dict)}
    in_a = {k: v.get("digest") for k, v in (ra.get("inputs") or {}).items()}
    in_b = {k: v.get("digest") for k, v in (rb.get("inputs") or {}).items()}
    outputs = []
    oa, ob = ra.get("outputs") or {}, rb.get("outputs") or {}
    for name in list(dict.fromkeys([*oa, *ob])):
        va = output_view(da, name, oa[name]) if name in oa else None
        vb = output_view(db, name, ob[name]) if name in ob else None
        # an output whose file is gone or not what its record names is not the same as anything, whatever digests
        # the two records give
        damaged = [side for side, v in (("a", va), ("b", vb)) if v is not None and "missing" in v]
        row: dict[str, Any] = {"output": name, "a": va, "b": vb,
                               "same": va is not None and vb is not None and va.get("digest") == vb.get("digest")
                               and not damaged}
        if damaged:
            row["damaged"] = damaged
        if va is not None and vb is not None and not row["same"] and "file" in oa[name] and "file" in ob[name]:
            xa, xb = load_array(da, name, oa[name]), load_array(db, name, ob[name])
            if xa is not None and xb is not None and xa.shape == xb.shape and xa.size:
                row["max_abs_diff"] = float(np.max(np.abs(xa - xb)))
        outputs.append(row)
    return {
        "a": {"run_id": ra["run_id"], "status": status_of(ra), "started_at": ra.get("started_at")},
        "b": {"run_id": rb["run_id"], "status": status_of(rb), "started_at": rb.get("started_at")},
        "manifest": manifest,
        "params": changes(ra.get("params") or {}, rb.get("params") or {}),
        "matrix_point": changes({"point": (ra.get("matrix_point") or {}).get("name")},
                                {"point": (rb.get("matrix_point") or {}).get("name")}),
        "plugins": changes(pa, pb),
        "data": changes(data_a, data_b),
        "programs": changes(prog_a, prog_b),
        "inputs": changes(in_a, in_b),
        "versions": changes(versions_of(ra), versions_of(rb)),
        "threads": changes(pools_of(ra), pools_of(rb)),
        "outputs": outputs,
    }


def table(runs_dir: str, refs: list[str]) -> dict:
    """One row per run: a sweep's points (one ref naming a sweep) or the runs named.

    Refs are read by :func:`hetflow.engine.store.runs.resolve_id`: one ref takes a
    sweep or a run (``latest`` is the newest run, or the sweep it is a point
    of), several take runs. A row's status is what every reader shows
    (``died`` for a run whose process is gone, ``missing`` for a point that
    succeeded, or a run named, whose run folder was removed).

    Returns ``{"params": [...], "outputs": [...], "rows": [...]}``; each row
    has ``run_id``, ``point``, ``status``, ``record`` (the path of the
    record backing it), ``params``, ``outputs`` (scalar values) and
    ``digests`` (every output's digest).
    """
    if not refs:
        raise UsageError("runs table needs a sweep id or one or more run ids")
    # (run id, point name, status when there is no run, the point's values)
    entries: list[tuple[str | None, str | None, str | None, Mapping[str, Any]]] = []
    axes: list[str] = []
    if len(refs) == 1:
        ident = resolve_id(runs_dir, refs[0])  # ``latest``: the newest run, or the sweep it is a point of
        file = os.path.join(runs_dir, ident, "sweep.json")
        summary = read_summary(file) if os.path.isfile(file) else None
        if summary is not None:
            axes = list(summary.get("params") or [])
            entries = [(p.get("run_id"), p.get("name"), p.get("status"), _mapping(p.get("values")))
                       for p in sweep_view(summary, runs_dir).get("points", [])]
    if not entries:
        for ref in refs:
            ident = resolve_id(runs_dir, ref, "run")
            folder = os.path.join(runs_dir, ident)
            if os.path.isfile(os.path.join(folder, "sweep.json")):
                raise UsageError(f"{folder} is a sweep, not a run: runs table takes one sweep alone, or runs")
            if os.path.isdir(folder) and not os.path.isfile(os.path.join(folder, "record.json")):
                read_record(runs_dir, ident)  # says why there is no record to read, as runs show does
            entries.append((ident, None, None, {}))
    rows = []
    for run_id, point, status, values in entries:
        file = os.path.join(runs_dir, run_id, "record.json") if run_id is not None else None
        if file is not None and point is not None and status == "unreadable" and os.path.isfile(file):
            # a sweep's point whose record is damaged is a row that says so, as hetflow runs lists it: the
            # others are still worth their table
            rows.append({"run_id": run_id, "point": point, "status": status, "record": file,
                         "params": dict(values), "outputs": {}, "digests": {}})
            continue
        record = None
        if file is not None and os.path.isfile(file):
            try:
                record = read_record(runs_dir, run_id)
            except UsageError:
                if os.path.isfile(file):
                    raise
                # removed as it was read (runs gc in another process): gone, as a run removed before
        if record is None:
            # a row that names a run whose folder is gone says so where it claimed the run succeeded (missing, as
            # the sweep's view says), and otherwise what its sweep says of it; a point not run yet has the values
            # its sweep gives it
            rows.append({"run_id": run_id, "point": point,
                         "status": "missing" if run_id and status in (None, "succeeded") else status,
                         "record": None, "params": dict(values), "outputs": {}, "digests": {}})
            continue
        folder = os.path.join(runs_dir, run_id)
        entries = record.get("outputs") if isinstance(record.get("outputs"), dict) else {}
        views = {n: output_view(folder, n, e if isinstance(e, dict) else {}) for n, e in entries.items()}
        # a scalar output whose file is not what the record names shows as damaged, not as a run without it
        damaged = {n: v["missing"] for n, v in views.items() if "missing" in v and _one_value(v)}
        rows.append({"run_id": run_id, "point": point or _mapping(record.get("matrix_point")).get("name"),
                     "status": status_of(record), "record": os.path.join(folder, "record.json"),
                     "params": dict(_mapping(record.get("params"))),
                     "outputs": {n: scalar(v) for n, v in views.items() if scalar(v) is not None},
                     "digests": {n: e.get("digest") if isinstance(e, dict) else None for n, e in entries.items()},
                     **({"damaged": damaged} if damaged else {})})
    keys = list(dict.fromkeys(k for r in rows for k in r["params"]))
    varying = [k for k in keys if len({json.dumps(r["params"].get(k), sort_keys=True) for r in rows if r["params"]}) > 1]
    params = list(dict.fromkeys([*axes, *varying])) or keys
    outputs = list(dict.fromkeys(k for r in rows for k in [*r["outputs"], *r.get("damaged", ())]))
    return {"params": params, "outputs": outputs, "rows": rows}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _one_value(view: Mapping[str, Any]) -> bool:
    """Whether an output's view is of one value (a scalar or a one-element array), as a table's cell shows."""
    shape = view.get("shape")
    return isinstance(shape, list) and all(isinstance(n, int) and n == 1 for n in shape)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return value
    return json.dumps(value)


# what a spreadsheet takes a cell starting with for a formula (OWASP's CSV injection): = + - @, and a tab or carriage
# return that it strips before looking
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _csv_text(text: str) -> str:
    """A text cell of csv that a spreadsheet shows, never runs: one that starts as a formula does gets a ``'``
    before it (OWASP's advice), which makes the cell text there and is not shown.

    >>> _csv_text("=1+2"), _csv_text("@SUM(A1)"), _csv_text("-rf"), _csv_text("ok")
    ("'=1+2", "'@SUM(A1)", "'-rf", 'ok')
    """
    return "'" + text if text.startswith(_FORMULA) else text


def _csv_cell(value: Any) -> str:
    """A table's value as a cell of csv: empty for none, a number as it is (-1.5 is a number there too), a float
    to its last digit (the shortest text that reads back as the record's float, where the text table rounds it
    to 6 digits), text made safe by :func:`_csv_text`.

    >>> _csv_cell(0.123456789), _csv_cell(123456789.0), _csv_cell(-1.5), _csv_cell(None)
    ('0.123456789', '123456789.0', '-1.5', '')
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return _csv_text(value)
    if isinstance(value, float):
        return repr(value)
    return _cell(value)


# every control character, newline and tab too: a row of an aligned or markdown table is one line, and what a
# terminal would act on (an escape sequence in a param's value) is shown instead, as is a bidirectional override,
# which would show the cells after it backwards
_ONE_LINE = {**{c: f"\\x{c:02x}" for c in range(0x20) if c not in (0x09, 0x0a)}, 0x09: "\\t", 0x0a: "\\n", 0x7f: "\\x7f",
             **{c: f"\\u{c:04x}" for c in (*range(0x80, 0xa0), *range(0x202a, 0x202f), *range(0x2066, 0x206a))}}


# what markdown would read in a table's cell as more than text, backslash-escaped: the escapes of _ONE_LINE
# themselves, code spans, emphasis and strikethrough, links and images, HTML and entities, and the cell's end
_MARKDOWN = {ord(c): "\\" + c for c in "\\`*_~[]<>&|"}


def render_table(data: Mapping[str, Any], fmt: str) -> str:
    """The table as ``text`` (aligned columns), ``csv``, ``markdown`` or ``json``.

    A cell of ``text`` and ``markdown`` is one line: a param's value
    ``"a\\nb"`` reads ``a\\nb`` there, its control characters as escapes;
    in ``markdown`` every character markdown would act on (a backtick,
    ``*``, ``_``, ``<``, ``[``, a backslash, ...) is backslash-escaped, so
    the cell shows the value as it is. ``csv`` and ``json`` keep the values
    as they are, quoted (a csv text cell that starts as a formula does with
    a ``'`` before it).
    """
    if fmt == "json":
        return json_text(data, indent=2) + "\n"
    head = ["run", "point", "status", *data["params"], *data["outputs"]]
    values = [[r["run_id"], r["point"], r["status"], *[r["params"].get(k) for k in data["params"]],
               *["damaged" if k in r.get("damaged", {}) else r["outputs"].get(k) for k in data["outputs"]]]
              for r in data["rows"]]
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([_csv_text(c) for c in [*head, "record"]])
        for r, line in zip(data["rows"], values):
            writer.writerow([*[_csv_cell(v) for v in line], _csv_text(r["record"] or "")])
        return buf.getvalue()
    body = [[_cell(v) for v in line] for line in values]
    head, body = [c.translate(_ONE_LINE) for c in head], [[c.translate(_ONE_LINE) for c in line] for line in body]
    if fmt == "markdown":
        def row(cells: list[str]) -> str:
            return "| " + " | ".join(c.translate(_MARKDOWN) for c in cells) + " |"

        return "\n".join([row(head), "|" + "|".join(" --- " for _ in head) + "|", *(row(line) for line in body)]) + "\n"
    from rich.cells import cell_len  # columns as wide as the terminal shows them: 中文 takes four, e\u0301 one

    widths = [max(cell_len(x) for x in col) for col in zip(head, *body)]
    return "".join("  ".join(c + " " * (w - cell_len(c)) for c, w in zip(line, widths)).rstrip() + "\n"
                   for line in [head] + body)


def _upstream(plan_nodes: Mapping[str, Any], tensor: str) -> list[str]:
    """``tensor``'s node and every node it depends on, in the record's plan."""
    seen: dict[str, None] = {}
    stack = [tensor]
    while stack:
        node = stack.pop()
        if node in seen or node not in plan_nodes:
            continue
        seen[node] = None
        stack.extend(plan_nodes[node].get("inputs") or [])
    return list(seen)


def _emulators_of(stages: Mapping[str, Any], refs: list[str]) -> set[str]:
    """The emulators whose programs the phases ``refs`` name (``PHASE`` or ``PHASE.FIELD``) come from, through the
    phases they read."""
    found: set[str] = set()
    seen: set[str] = set()
    stack = [ref.partition(".")[0] for ref in refs]
    while stack:
        name = stack.pop()
        stage = stages.get(name)
        if name in seen or not isinstance(stage, dict) or "phase" not in stage:
            continue
        seen.add(name)
        if isinstance(stage.get("emulator"), str):
            found.add(stage["emulator"])
        stack.extend(str(ref).partition(".")[0] for ref in stage.get("inputs") or [])
    return found


def versions_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's library versions, each with the workers' own where a cluster's workers ran others:
    ``{"numpy": "2.4.1 (worker w1: 2.3.0)"}``."""
    out = dict(record.get("versions") or {})
    differ: dict[str, list[str]] = {}
    workers = (record.get("scheduler") or {}).get("workers")  # the threaded scheduler's is a count of threads
    for w in workers if isinstance(workers, list) else []:
        if not isinstance(w, dict) or not isinstance(w.get("versions"), dict):
            continue  # a record edited by hand: what a worker ran is not known
        for lib, version in w["versions"].items():
            differ.setdefault(lib, []).append(f"worker {w.get('name')}: {version}")
    for lib, where in differ.items():
        out[lib] = f"{out.get(lib)} ({'; '.join(where)})"
    return out


def pools_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The BLAS and OpenMP threads a record says its ops ran with (on a cluster, its workers' fewest)."""
    pools = record.get("threads")
    pools = pools if isinstance(pools, dict) else {}
    return {api: pools.get(api) for api in ("blas", "openmp") if type(pools.get(api)) is int}


def mismatch_causes(record: Mapping[str, Any], rerun: Mapping[str, Any] | None, output: str) -> list[str]:
    """The likely causes, as far as the two records show them, of ``output`` differing between a run and its rerun.

    Looks at the output's upstream stages: a data file whose digest changed,
    a plugin whose code changed, an op that is not deterministic (a random
    op without a seed); then at library versions. Says so when it sees none.
    """
    from hetflow.executors import ops as oplib

    nodes = (record.get("plan") or {}).get("nodes") or {}
    entry = (record.get("outputs") or {}).get(output) or {}
    upstream = _upstream(nodes, entry.get("tensor") or entry.get("phase") or output)
    stages = ((record.get("manifest") or {}).get("resolved") or {}).get("stages") or {}
    rerun = rerun or {}
    causes = []
    now_data = rerun.get("data") or {}
    for stage, d in (record.get("data") or {}).items():
        if stage in upstream and (now_data.get(stage) or {}).get("digest") != d.get("digest"):
            causes.append(f"input file changed: {d.get('path')} (read by stage {stage!r}) is not the file the run read")
    now_programs = rerun.get("programs") or {}
    # the phases the output comes from: its own, and those the executor stages upstream of it read
    phases = [entry["phase"]] if isinstance(entry.get("phase"), str) else []
    phases += [str(ref) for n in upstream for ref in nodes[n].get("inputs") or [] if ref not in nodes]
    emulators = _emulators_of(stages, phases)
    for name, d in (record.get("programs") or {}).items():
        if name in emulators and isinstance(d, dict) and (now_programs.get(name) or {}).get("digest") != d.get("digest"):
            causes.append(f"emulator program changed: {d.get('path')} (emulator {name!r}) is not the program the run "
                          "ran")
    now_plugins = {p.get("spec"): p.get("digest") for p in rerun.get("plugins") or []}
    used = {nodes[n].get("op") for n in upstream}
    for p in record.get("plugins") or []:
        if now_plugins.get(p.get("spec")) != p.get("digest") and used & set(p.get("ops") or []):
            causes.append(f"plugin code changed: {p.get('spec')!r} (ops {', '.join(sorted(used & set(p['ops'])))})")
    for node in upstream:
        op = oplib.REGISTRY.get(nodes[node].get("op"))
        args = (stages.get(node) or {}).get("args") or {}
        if op is not None and not oplib.is_deterministic(op, args):
            causes.append(f"nondeterministic op: stage {node!r} ({op.name}) has no seed")
    pools = changes(pools_of(record), pools_of(rerun)) if rerun else []
    if pools:
        causes.append("thread pools differ: " + ", ".join(f"{k} {a} -> {b} threads" for k, a, b in pools)
                      + " (a float sum's order follows its threads)")
    moved = changes(versions_of(record), versions_of(rerun)) if rerun else []
    if moved:
        causes.append("version changed: " + ", ".join(f"{k} {a} -> {b}" for k, a, b in moved))
    if not causes:
        causes.append("no cause visible in the records: same data files, plugin code, versions and seeded ops; "
                      "an executor that does not reproduce its own results (a GPU's reduction order, threads) is left")
    return causes
