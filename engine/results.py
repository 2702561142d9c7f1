"""What the Python API returns: a :class:`Plan`, a :class:`Run` with its :class:`Failure` list, a :class:`Sweep`.

Each is a view of data hetflow has already made: a plan's is the JSON
``hetflow plan --format json`` prints, a run's is its folder's
``record.json`` (outputs read from the folder when first asked for), a
sweep's is ``sweep.json``. :mod:`hetflow.engine.api` makes them; users
import them from ``hetflow``.

Examples
--------
>>> import json, os, tempfile
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "record.json"), "w") as f:
...     json.dump({"run_id": "r1", "status": "failed", "outputs": {"n": {"value": 3}},
...                "error": {"message": "boom", "node": "y", "origin": "m.yaml:6:5"},
...                "plan": {"nodes": {"y": {"op": "relu"}}},
...                "nodes": {"y": {"status": "failed", "error": "boom"}}}, f)
>>> r = Run(folder)
>>> r.run_id, r.ok, r.outputs["n"]
('r1', False, 3)
>>> r.failures
[Failure(stage='y', op='relu', message='boom', traceback_file=None, status='failed', origin='m.yaml:6:5')]
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hetflow.engine.errors import UsageError

if TYPE_CHECKING:
    from hetflow.engine.plan import planner

__all__ = ["Plan", "Run", "Failure", "Sweep"]


class Plan:
    """A manifest's plan: placement, partitions, bridges, and why.

    ``nodes``, ``partitions``, ``bridges`` (and ``executors``, ``outputs``,
    ``totals``, ``warnings``, ``estimate``) are the data ``hetflow plan
    --format json`` prints, which :meth:`to_json` returns whole; ``point``
    is the matrix point planned (None without a matrix) and ``cache``
    says, per partition, whether a run would take it from the cache and
    why. In a notebook the plan draws itself as SVG.
    """

    def __init__(self, engine_plan: planner.Plan, point: str | None = None, cache: Mapping[str, Any] | None = None) -> None:
        self.engine_plan = engine_plan
        self.point = point
        self.cache = dict(cache or {})
        self._data = {**engine_plan.to_json(explain=True), "point": point, "cache": self.cache}

    name = property(lambda self: self._data["name"], doc="the manifest's name")
    nodes = property(lambda self: self._data["nodes"], doc="every stage: op, executor, partition, shape, dtype, why")
    partitions = property(lambda self: self._data["partitions"], doc="the partitions, in execution order")
    bridges = property(lambda self: self._data["bridges"], doc="every tensor that crosses executors")
    executors = property(lambda self: self._data["executors"], doc="each executor's vendor, device and reason")
    outputs = property(lambda self: self._data["outputs"], doc="output name -> the stage it persists")
    totals = property(lambda self: self._data["totals"], doc="counts of nodes, partitions, bridges; bytes bridged")
    warnings = property(lambda self: self._data["warnings"], doc="what the planner warns about")
    estimate = property(lambda self: self._data["estimate"], doc="the cost model's estimate")

    def to_json(self) -> dict:
        """The plan as ``hetflow plan --format json`` prints it (a fresh copy)."""
        return json.loads(json.dumps(self._data))

    def dumps(self) -> str:
        """The text ``hetflow plan --format json`` prints: :meth:`to_json`'s data, indented, written once."""
        return self.json_bytes().decode()

    def json_bytes(self) -> bytes:
        """:meth:`dumps` in UTF-8, as a file or a terminal takes it, written once (a 100,000-stage plan's
        text is 80 MB)."""
        from hetflow.engine.plan.plandata import json_bytes

        return json_bytes(self._data)

    def to_text(self) -> str:
        """The plan as ``hetflow plan`` prints it for people."""
        head = f"matrix point {self.point}\n" if self.point else ""
        from hetflow.engine.plan.planview import render_text

        return head + render_text(self.engine_plan) + "\n\ncache:\n" + "".join(
            f"  {pid}: {s['status']}: {s['reason']}\n" for pid, s in self.cache.items())

    def to_dot(self) -> str:
        """The plan as Graphviz DOT."""
        from hetflow.engine.plan.planview import render_dot

        return render_dot(self.engine_plan)

    def to_svg(self) -> str:
        """The plan graph as SVG: Graphviz's layout where ``dot`` is installed, hetflow's own otherwise."""
        from hetflow.engine.report import graph

        return graph.plan_svg({"plan": self._data})

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def _repr_html_(self) -> str:
        import html  # a notebook's display only

        t = self.totals
        point = f" at {html.escape(self.point)}" if self.point else ""
        return (f"<div><p><b>plan {html.escape(self.name)}</b>{point}: {t['nodes']} nodes, {t['partitions']} partitions, "
                f"{t['bridges']} bridges</p>{self.to_svg()}</div>")

    def __repr__(self) -> str:
        t = self.totals
        return f"<hetflow.Plan {self.name}: {t['nodes']} nodes, {t['partitions']} partitions, {t['bridges']} bridges>"


@dataclasses.dataclass(frozen=True)
class Failure:
    """One thing that failed in a run.

    ``stage`` and ``op`` name the stage (None when the run failed outside
    any stage, a lost cluster worker say); ``traceback_file`` is the path
    of the run's ``traceback.txt``, or None when the run wrote none.
    """

    stage: str | None
    op: str | None
    message: str
    traceback_file: str | None = None
    status: str = "failed"
    origin: str | None = None


class _Outputs(Mapping):
    """A run's outputs by name, each read from its run folder when first asked for."""

    def __init__(self, path: str, entries: Any, record: Mapping[str, Any] | None = None) -> None:
        self._path = path
        self._record = record if record is not None else {}  # what says why a declared output is not there
        # a record whose outputs are not a mapping (edited, damaged) has none that can be read
        self._broken = entries is not None and not isinstance(entries, Mapping)
        self._entries: Mapping[str, Any] = {} if self._broken or entries is None else entries
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        from hetflow.engine.errors import OutputDamaged

        if self._broken:
            raise OutputDamaged(name, "the run's record lists its outputs as no mapping of names to entries")
        if name not in self._entries:
            known = ", ".join(self._entries) or "none"
            raise KeyError(f"the run has no output {name!r} (outputs: {known}){self._unwritten(name)}")
        if name not in self._loaded:
            entry = self._entries[name]
            if not isinstance(entry, Mapping):
                raise OutputDamaged(name, f"its entry in the run's record is {type(entry).__name__}, not a mapping")
            if "file" in entry:
                from hetflow.engine.store.records import read_output

                # the entry the run's record holds (its digest checks the file), not record.json read again:
                # that file may be gone or damaged since, which is the output's loss only if the output is
                self._loaded[name] = read_output(self._path, name, entry)
            else:
                self._loaded[name] = entry.get("value")
        value = self._loaded[name]
        if hasattr(getattr(value, "flags", None), "writeable"):  # an array
            # kept and handed out again: changed in place (p /= 2), it would be handed out changed, no longer the
            # run's output, and its digest would still say it is (set on each read: a pickle's copy is writable)
            value.flags.writeable = False
        # a phase's list or mapping value, the caller's own for the same reason
        return copy.deepcopy(value) if isinstance(value, (list, dict)) else value

    def __eq__(self, other: object) -> bool:
        """The same names, each output the same bit for bit: its shape, dtype and bytes (the digest its record
        keeps, once its file is read and checked against it), or its value. Mapping's own ``==`` compared the
        arrays with numpy's ``==``, which has no single answer (a ValueError); an output changed or damaged
        since its run raises :class:`~hetflow.engine.errors.OutputDamaged`, as reading it does."""
        if not isinstance(other, _Outputs):
            return super().__eq__(other)
        from hetflow.engine.errors import OutputDamaged

        for side in (self, other):
            if side._broken:
                raise OutputDamaged("*", f"the record in {side._path} lists its outputs as no mapping of names to "
                                         "entries")
        if set(self._entries) != set(other._entries):
            return False
        return all(self._same(other, name) for name in self._entries)

    __hash__ = None  # type: ignore[assignment]  # a view of files, compared by what they hold

    def _same(self, other: _Outputs, name: str) -> bool:
        mine, theirs = self[name], other[name]  # read and checked against their records' digests
        a, b = self._entries[name], other._entries[name]
        if "file" in a or "file" in b:
            return "file" in a and "file" in b and a["digest"] == b["digest"]
        return json.dumps(mine, sort_keys=True, default=repr) == json.dumps(theirs, sort_keys=True, default=repr)

    def _unwritten(self, name: str) -> str:
        """Why an output the manifest declares is not there: the run did not succeed (or has not ended), which a
        bare "no output" did not say of a run that failed."""
        from hetflow.engine.store.runs import status_of

        declared = _mapping(_mapping(self._record.get("plan")).get("outputs"))
        status = status_of(self._record)
        if name not in declared or status == "succeeded" or not isinstance(status, str):
            return ""
        if status == "running":
            return ": the run is still running, and its outputs are written when it ends"
        if status == "died":
            return ": the run died (its process ended before its final record, which names the outputs)"
        error = self._record.get("error")
        said = _said(error.get("message") if isinstance(error, Mapping) else error)
        return f": the run {status}{f' ({said})' if said else ''}, so it wrote none"

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<outputs {', '.join(self._entries) or 'none'}>"


class Run:
    """One run, read from its folder: ``status``, ``run_id``, ``path``, ``outputs``, ``record``, ``failures``.

    ``outputs[NAME]`` is a read-only numpy array with the output's exact
    dtype (``ml_dtypes`` types for bf16, fp8 and int4; ``.copy()`` to
    change it) or, for a scalar output of an emulator phase, its value;
    ``r1.outputs == r2.outputs`` when both runs' outputs are the same bit
    for bit. ``record`` is ``record.json`` as a
    dict. In a notebook the run shows a summary table.

    A run that has just ended passes its record as ``record``, taken as
    it is instead of being read back: a 100,000-stage run's record is
    40 MB of JSON, and parsing it again cost that run two seconds. Its
    resolved manifest, plan and params are the process's kept ones, which
    later runs of the same manifest write into their records: ``record``
    gives the caller a copy of those parts the first time it is asked for,
    so that a change to it is no later run's.
    """

    def __init__(self, path: str | os.PathLike, record: dict | None = None) -> None:
        self.path = _folder_named(path, "run", "record.json")
        self._shared = record is not None
        if record is None:
            record_file = os.path.join(self.path, "record.json")
            try:
                with open(record_file, "rb") as f:
                    record = _loads(f.read())
            except FileNotFoundError:
                raise UsageError(f"{self.path}: no run record (record.json) here") from None
            except (OSError, ValueError) as e:
                raise UsageError(f"{record_file}: not a readable run record: {e}") from None
            if not isinstance(record, dict):
                raise UsageError(f"{record_file}: not a run record: its JSON is {_json_kind(record)}, not an object")
        self._record: dict = record
        # read from the folder as it was named when the run ended or was opened, whatever the working directory
        # is by then (a notebook's %cd): its record read again, its outputs
        self._folder = os.path.abspath(self.path)
        self._outputs: Mapping[str, Any] = _Outputs(self._folder, record.get("outputs"), record)

    def _fresh(self) -> dict:
        """The record, read again while the one held says ``running``: a run opened while it ran is read as it
        ended, not taken for ``died`` once its process is gone."""
        if self._record.get("status") == "running":  # a run just ended never passes a record that says so
            try:
                with open(os.path.join(self._folder, "record.json"), "rb") as f:
                    now = _loads(f.read())
            except (OSError, ValueError):
                now = None
            if isinstance(now, dict) and now.get("run_id") == self._record.get("run_id") and now != self._record:
                self._record, self._shared = now, False
                self._outputs = _Outputs(self._folder, now.get("outputs"), now)
        return self._record

    @property
    def outputs(self) -> Mapping[str, Any]:
        """The run's outputs by name, each read from the run's folder (and checked against its digest) when
        first asked for."""
        self._fresh()
        return self._outputs

    @property
    def record(self) -> dict:
        """``record.json`` as a dict, the caller's own."""
        if self._shared:
            self._record, self._shared = _own(self._record), False
        return self._fresh()

    @property
    def run_id(self) -> str:
        run_id = self._record.get("run_id")
        return run_id if isinstance(run_id, str) and run_id else os.path.basename(os.path.abspath(self.path))

    @property
    def status(self) -> str:
        """``succeeded``, ``failed``, ``cancelled``, ``running`` for a run that has not finished, or ``died``
        for one whose process ended without writing its final record (killed, out of memory, a power loss)."""
        from hetflow.engine.store.runs import status_of

        status = status_of(self._fresh())
        return status if isinstance(status, str) and status else "unknown"

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @property
    def error(self) -> str | None:
        """The run's error message, or None."""
        error = self._fresh().get("error")
        message = error.get("message") if isinstance(error, Mapping) else error
        return message if isinstance(message, str) else None if message is None else str(message)

    @property
    def record_path(self) -> str:
        return os.path.join(self.path, "record.json")

    @property
    def failures(self) -> list[Failure]:
        """Each failed or timed-out stage, or the run's one error where no stage is to blame."""
        record = self._fresh()
        error = record.get("error") or {}
        if not isinstance(error, Mapping):  # a record edited by hand: its error said as it is
            error = {"message": str(error)}
        tb = os.path.join(self._folder, error["traceback_file"]) if isinstance(error.get("traceback_file"), str) else None
        plan_nodes = _mapping(_mapping(record.get("plan")).get("nodes"))
        blamed = _said(error.get("node"))
        out = []
        for node, entry in _mapping(record.get("nodes")).items():
            if not isinstance(entry, Mapping):
                continue
            if entry.get("status") in ("failed", "timed out") and entry.get("error"):
                planned = _mapping(plan_nodes.get(node))
                origin = error.get("origin") if blamed == node else planned.get("origin")
                out.append(Failure(node, _said(planned.get("op")), _said(entry["error"]), tb, entry["status"],
                                   _said(origin)))
        if not out and error:
            op = _said(_mapping(plan_nodes.get(blamed)).get("op")) if blamed else None
            out.append(Failure(blamed, op, _said(error.get("message")) or "failed", tb, "failed",
                               _said(error.get("origin"))))
        return out

    def _repr_html_(self) -> str:
        import html

        e = html.escape
        rec = self._fresh()
        duration = rec.get("duration_s")
        rows = [("run", self.run_id), ("status", self.status), ("manifest", _mapping(rec.get("manifest")).get("name")),
                ("point", _mapping(rec.get("matrix_point")).get("name") or "-"), ("started", rec.get("started_at")),
                ("duration", f"{duration:.3f} s" if isinstance(duration, (int, float)) and not isinstance(duration, bool)
                 else "-"), ("folder", self.path)]
        head = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows)
        outs = "".join(
            f"<tr><td>{e(n)}</td><td>{e(str(o.get('shape', 'value')))}</td><td>{e(str(o.get('dtype', '')))}</td>"
            f"<td><code>{e(str(o.get('digest') or '')[:23])}</code></td></tr>"
            for n, o in (rec.get("outputs") if isinstance(rec.get("outputs"), Mapping) else {}).items()
            if isinstance(o, Mapping))
        fails = "".join(f"<tr><td>{e(str(f.stage))}</td><td>{e(str(f.op))}</td><td>{e(f.message)}</td></tr>"
                        for f in self.failures)
        return (f"<table>{head}</table>"
                + (f"<table><tr><th>output</th><th>shape</th><th>dtype</th><th>digest</th></tr>{outs}</table>" if outs else "")
                + (f"<table><tr><th>stage</th><th>op</th><th>failure</th></tr>{fails}</table>" if fails else ""))

    def __repr__(self) -> str:
        return f"<hetflow.Run {self.run_id}: {self.status}>"


def _folder_named(path: Any, kind: str, file: str) -> str:
    """``path`` as the text of a run's or sweep's folder; one of another kind, or none, is refused as the
    Python API refuses a bad argument (:class:`UsageError`), not as a TypeError from inside ``os``."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise UsageError(f"hetflow.{kind.title()}() takes the path of a {kind}'s folder (a str or os.PathLike), got "
                         f"{type(path).__name__} {path!r:.60}")
    text = os.fspath(path)
    if not text or "\0" in text:
        raise UsageError(f"hetflow.{kind.title()}() takes the path of a {kind}'s folder (the one holding its {file}), "
                         f"got {text!r:.60}")
    return text


def _mapping(value: Any) -> Mapping:
    """``value`` where it is a mapping, else an empty one: a record edited by hand or damaged is read as far as it
    holds what a record does, not taken apart at the first key that holds something else."""
    return value if isinstance(value, Mapping) else {}


def _said(value: Any) -> str | None:
    """A record's text as text: None stays None, a value of another kind (a record edited by hand) as JSON says it."""
    return value if value is None or isinstance(value, str) else json.dumps(value, default=str)


def _json_kind(value: Any) -> str:
    return {type(None): "null", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def _own(record: dict) -> dict:
    """``record`` with its resolved manifest, plan and params copied: the parts a run shares with the process's
    kept manifest and plan (a pickle's round trip: exact for a record's values, and several times faster than
    ``copy.deepcopy``)."""
    import pickle

    own = dict(record)
    for key in ("manifest", "plan", "params"):
        if key in own:
            own[key] = pickle.loads(pickle.dumps(own[key], protocol=pickle.HIGHEST_PROTOCOL))
    return own


def _loads(text: bytes) -> Any:
    """A record's JSON: orjson's parse (a third of json's time: a sweep reads every point's record), json's
    where orjson would not keep a value as written (:func:`~hetflow.executors.payload.loads_exact`)."""
    from hetflow.executors.payload import loads_exact

    return loads_exact(text)


class Sweep:
    """A matrix sweep: ``sweep_id``, ``path``, ``status``, ``summary`` (``sweep.json``) and ``runs``, one
    :class:`Run` per point (None for a point without a run), each read from its folder when first asked for."""

    def __init__(self, path: str | os.PathLike) -> None:
        """The sweep in folder ``path``."""
        from hetflow.engine.store.runs import read_summary

        self.path = _folder_named(path, "sweep", "sweep.json")
        summary_file = os.path.join(self.path, "sweep.json")
        if not os.path.isfile(summary_file):
            run = " but a run's record: hetflow.open_run() reads it" if os.path.isfile(
                os.path.join(self.path, "record.json")) else ""
            raise UsageError(f"{self.path}: no sweep summary (sweep.json) here{run}")
        self._summary: dict = read_summary(summary_file)
        self._folder = os.path.abspath(self.path)  # as for a Run: read again there, whatever the working directory
        self._runs: Sequence[Run | None] = _PointRuns(os.path.dirname(self._folder), self._summary)

    def _fresh(self) -> None:
        """The summary read again while the one held says ``running``: a sweep opened while it ran is read as it
        ended (its points' runs with it), not taken for ``died`` once its process is gone."""
        from hetflow.engine.store.runs import read_summary

        if self._summary.get("status") != "running":
            return
        try:
            now = read_summary(os.path.join(self._folder, "sweep.json"))
        except UsageError:
            return
        if now != self._summary and now.get("sweep_id") == self._summary.get("sweep_id"):
            self._summary = now
            self._runs = _PointRuns(os.path.dirname(self._folder), now)

    @property
    def summary(self) -> dict:
        """``sweep.json`` as a dict."""
        self._fresh()
        return self._summary

    @property
    def runs(self) -> Sequence[Run | None]:
        """One :class:`Run` per point, None for a point without a run."""
        self._fresh()
        return self._runs

    sweep_id = property(lambda self: self.summary.get("sweep_id") or os.path.basename(os.path.abspath(self.path)))

    @property
    def status(self) -> str:
        """``succeeded``, ``failed``, ``cancelled``, ``running``, or ``died`` for a sweep whose process ended
        without writing its final summary."""
        from hetflow.engine.store.runs import status_of

        status = status_of(self.summary)
        return status if isinstance(status, str) and status else "unknown"

    def __repr__(self) -> str:
        return f"<hetflow.Sweep {self.sweep_id}: {self.status}, {len(self.runs)} points>"


#: the points' runs a :class:`Sweep` keeps once read, the newest read
KEPT_RUNS = 32


class _PointRuns(Sequence):
    """The :class:`Run` of each point of a sweep, read from its folder when asked for; the last
    :data:`KEPT_RUNS` read are kept. A sweep held its points' records as it ran them, 260 kB a point of a
    300-stage manifest, before anyone looked at one."""

    def __init__(self, runs_dir: str, summary: Mapping[str, Any]) -> None:
        import collections

        from hetflow.engine.store import owner
        from hetflow.engine.store.runs import owner_of, unnamed_runs

        # a sweep killed in the moment between a point's run starting and its row naming it left that run unnamed:
        # it is the point's all the same, as hetflow runs show SWEEP and a resume take it
        found = unnamed_runs(runs_dir, summary) if owner.alive(owner_of(summary)) is False else {}
        ids = [p.get("run_id") or (found.get(p.get("name")) if p.get("status") in ("pending", "running") else None)
               for p in summary["points"]]
        # a point not run yet, or whose run folder was removed, has no Run
        self._ids = [i if isinstance(i, str) and os.path.isfile(os.path.join(runs_dir, i, "record.json")) else None
                     for i in ids]
        self._runs_dir = runs_dir
        self._read: collections.OrderedDict[str, Run] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        run_id = self._ids[index]
        if run_id is None:
            return None
        run = self._read.get(run_id)
        if run is None:
            folder = os.path.join(self._runs_dir, run_id)
            if not os.path.lexists(os.path.join(folder, "record.json")):
                return None  # removed since the sweep was read (hetflow runs gc, by hand), as if it had been then
            run = self._read[run_id] = Run(folder)
            while len(self._read) > KEPT_RUNS:
                self._read.popitem(last=False)
        return run

    def __repr__(self) -> str:
        return repr(list(self))
