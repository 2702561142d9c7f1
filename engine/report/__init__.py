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

The modules of the package split the data from its presentation:

``data``
    what the page shows, computed from the record: timeline bars, the plan
    graph, output statistics, a sweep's points.
``layout``
    hetflow's own layered layout of the plan graph, used when Graphviz's
    ``dot`` is not on ``PATH`` or fails.
``graph``
    the plan graph drawn as SVG, or written as DOT for Graphviz.
``run_page``, ``sweep_page``
    the sections of each kind of page.
``page``, ``page.html``, ``report.css``, ``report.js``
    the page around the sections; the template, style sheet and script are
    package data files.

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

import json
import os
from dataclasses import dataclass

from hetflow.engine.errors import UsageError
from hetflow.engine.report.data import output_stats, pack_lanes
from hetflow.engine.report.graph import graphviz_available, plan_dot, plan_svg
from hetflow.engine.report.layout import layout_plan
from hetflow.engine.report.run_page import GRAPH_MODES, render_run
from hetflow.executors.payload import loads_exact
from hetflow.engine.report.sweep_page import SWEEP_FORMAT, render_sweep

__all__ = [
    "SWEEP_FORMAT",
    "GRAPH_MODES",
    "Located",
    "locate",
    "render",
    "render_run",
    "render_sweep",
    "layout_plan",
    "pack_lanes",
    "output_stats",
    "graphviz_available",
    "plan_dot",
    "plan_svg",
]


@dataclass(frozen=True)
class Located:
    """What a report target resolved to: ``kind`` is ``run`` or ``sweep``."""

    kind: str
    folder: str
    data: dict


def _read_json(path: str) -> dict:
    from hetflow.engine.store.runs import read_object, read_summary, record_problem

    if os.path.basename(path) == "sweep.json":
        return read_summary(path)
    record = read_object(path)
    problem = record_problem(record)
    if problem is not None:
        raise UsageError(f"{path}: error: not a run record hetflow wrote: {problem}")
    return record


def locate(target: str, runs_dir: str = "runs") -> Located:
    """Resolve a name of a run or sweep (:func:`hetflow.engine.store.runs.resolve_id`), or a path to a run or sweep folder.

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
        if not os.access(folder, os.R_OK | os.X_OK):
            # another user's run or sweep (a umask of 077), as hetflow runs lists it forbidden: there, but not to read
            raise UsageError(f"{folder}: the folder cannot be read by this user")
        if os.path.isfile(os.path.join(folder, "record.json")):
            return Located("run", folder, _read_json(os.path.join(folder, "record.json")))
        if os.path.isfile(os.path.join(folder, "sweep.json")):
            return Located("sweep", folder, _read_json(os.path.join(folder, "sweep.json")))
    if target and os.sep not in target and os.path.isdir(runs_dir):
        from hetflow.engine.store.runs import LATEST, NoSuchRun, resolve_id

        # names mean here what they mean to every command (see hetflow.engine.store.runs)
        try:
            resolved = resolve_id(runs_dir, target)
        except NoSuchRun:
            if target in LATEST:
                raise
            resolved = target
        if resolved != target:
            return locate(resolved, runs_dir)
    raise UsageError(
        f"no run or sweep {target!r} in {runs_dir} (looked for {os.path.join(runs_dir, target, 'record.json')} "
        f"and sweep.json there); pass a run id, a sweep id or a run folder"
    )


def render(located: Located, *, runs_dir: str = "runs", graph: str = "auto") -> str:
    """The HTML page for a located run or sweep, with the status every reader shows (``died`` for a run or
    sweep whose process is gone, :func:`hetflow.engine.store.runs.status_of`)."""
    from hetflow.engine.store.runs import status_of, sweep_view

    if located.kind == "sweep":
        # its points' runs are beside it, wherever --runs-dir points: a sweep named by its folder's path in another
        # runs directory was read against the runs directory given, where none of its runs is
        beside = os.path.dirname(os.path.abspath(located.folder))
        return render_sweep(located.folder, sweep_view(located.data, beside), runs_dir=beside)
    record, shown = located.data, status_of(located.data)
    return render_run(located.folder, record if shown == record.get("status") else {**record, "status": shown},
                      graph=graph)

