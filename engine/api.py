"""The Python API: plan, run and read pipelines from Python; the CLI is a layer over it.

Each function is the whole of one command, the command line's flags as
keyword arguments, so ``hetflow validate``, ``hetflow plan`` and
``hetflow run`` and these functions are one code path:

* :func:`validate` loads and compiles a manifest; a problem raises
  :class:`~hetflow.engine.errors.ManifestError`, whose ``diagnostics``
  hold every ``FILE:LINE:COL`` problem.
* :func:`plan` compiles one point of it and plans it against this
  machine (or a cluster): a :class:`Plan`, the data ``hetflow plan
  --format json`` prints.
* :func:`run` runs one point and returns a :class:`Run` of its folder,
  succeeded or failed: a stage that fails is a result, not an exception.
  Bad input (the manifest, the params, the arrays handed in) raises before
  anything runs or is written.
* :func:`sweep` runs every point of a manifest's ``matrix:``.
* :func:`open_run` reads an earlier run back as the same :class:`Run`.

Arrays enter a run through ``input`` stages (``{op: input, args: {shape:
[...], dtype: ...}}``): ``run(..., inputs={STAGE: array})`` checks every
array's shape and dtype against its stage when the run starts, and the
array's portable bytes travel inside the stage's arguments, so the cache
key of every partition downstream covers them and a cluster worker needs
no shared files. The record keeps each one's shape, dtype and digest
under ``inputs``.

Examples
--------
>>> import os, tempfile, numpy as np
>>> folder = tempfile.mkdtemp()
>>> path = os.path.join(folder, "double.yaml")
>>> with open(path, "w") as f:
...     _ = f.write('''
... version: 1
... name: double
... params: {n: 4}
... executors: {host: {vendor: cpu}}
... stages:
...   x: {op: input, args: {shape: ["${n}"], dtype: fp32}}
...   y: {op: add, inputs: [x, x]}
... outputs: {y: y}
... ''')
>>> validate(path)
>>> [p["nodes"] for p in plan(path).partitions]
[['x', 'y']]
>>> r = run(path, inputs={"x": np.arange(4, dtype=np.float32)}, runs_dir=os.path.join(folder, "runs"))
>>> r.status, r.outputs["y"].tolist()
('succeeded', [0.0, 2.0, 4.0, 6.0])
>>> r.record["inputs"]["x"]["shape"]
[4]
>>> open_run(r.run_id, runs_dir=os.path.join(folder, "runs")).outputs["y"].dtype
dtype('float32')
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import html
import json
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any, Callable

import numpy as np

from hetflow.engine import matrix
from hetflow.engine import planner
from hetflow.engine.errors import RunFailed, UsageError
from hetflow.engine.manifest import Document, Manifest, compile_manifest, load
from hetflow.executors import probe
from hetflow.executors.base import Dtype, PortableActivation

__all__ = ["Plan", "Run", "Failure", "Sweep", "validate", "plan", "run", "sweep", "open_run"]

Params = Mapping[str, Any]


def _source(path: str | os.PathLike | Document) -> tuple[str, Document | None]:
    """The manifest's file name, and its document when the caller (the CLI) has loaded it already."""
    if isinstance(path, Document):
        return path.file, path
    return os.fspath(path), None


def _overrides(params: Params | None) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise UsageError(f"params must be a mapping of param names to values, got {params!r}")
    return dict(params)


def validate(path: str | os.PathLike, params: Params | None = None) -> None:
    """Load and compile a manifest; return nothing when it is valid.

    Raises
    ------
    ManifestError
        with ``diagnostics``: every problem, ``FILE:LINE:COL: error: ...``
        in file order.
    UsageError
        a param in ``params`` that the manifest does not declare.

    Examples
    --------
    >>> import tempfile
    >>> from hetflow.engine.errors import ManifestError
    >>> with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    ...     _ = f.write("version: 1\\nname: bad\\nexecutors: {host: {vendor: cpu}}\\n"
    ...                 "stages:\\n  x: {op: relu2}\\noutputs: {x: x}\\n")
    >>> try:
    ...     validate(f.name)
    ... except ManifestError as e:
    ...     [(d.origin.line, d.origin.col, d.message) for d in e.diagnostics]
    [(5, 11, "unknown op 'relu2' in stage 'x'; did you mean 'relu'?")]
    """
    compile_manifest(load(path), _overrides(params))


# -- plan -------------------------------------------------------------------------


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

    def to_text(self) -> str:
        """The plan as ``hetflow plan`` prints it for people."""
        head = f"matrix point {self.point}\n" if self.point else ""
        return head + planner.render_text(self.engine_plan) + "\n\ncache:\n" + "".join(
            f"  {pid}: {s['status']}: {s['reason']}\n" for pid, s in self.cache.items())

    def to_dot(self) -> str:
        """The plan as Graphviz DOT."""
        return planner.render_dot(self.engine_plan)

    def to_svg(self) -> str:
        """The plan graph as SVG: Graphviz's layout where ``dot`` is installed, hetflow's own otherwise."""
        from hetflow.engine.report import graph

        return graph.plan_svg({"plan": self._data})

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def _repr_html_(self) -> str:
        t = self.totals
        point = f" at {html.escape(self.point)}" if self.point else ""
        return (f"<div><p><b>plan {html.escape(self.name)}</b>{point}: {t['nodes']} nodes, {t['partitions']} partitions, "
                f"{t['bridges']} bridges</p>{self.to_svg()}</div>")

    def __repr__(self) -> str:
        t = self.totals
        return f"<hetflow.Plan {self.name}: {t['nodes']} nodes, {t['partitions']} partitions, {t['bridges']} bridges>"


def plan(path: str | os.PathLike, params: Params | None = None, *, point: str | None = None,
         runs_dir: str | os.PathLike = "runs", cache_dir: str | os.PathLike | None = None,
         workers: int | None = None, threads_per_worker: int | None = None, scheduler: Any = None,
         place: Mapping[str, str] | None = None) -> Plan:
    """Plan a manifest against this machine, or against a Dask cluster.

    Parameters
    ----------
    path
        the manifest file.
    params
        param overrides, ``{name: value}`` (``-p name=value``).
    point
        the matrix point to plan, its full name or the part in brackets
        (default: the first point).
    runs_dir, cache_dir
        where earlier runs and the partition cache are, to say what a run
        would take from the cache and why.
    workers, threads_per_worker, scheduler, place
        plan for a cluster, as :func:`run` takes them.

    Raises
    ------
    ManifestError
        the manifest is wrong, or the plan cannot be made (an unsupported
        dtype, too little memory): every problem with ``FILE:LINE:COL``.
    UsageError
        an unknown param or point.

    Examples
    --------
    >>> from importlib.resources import files
    >>> p = plan(files("hetflow.examples") / "quickstart.yaml", params={"batch": 8})
    >>> p.nodes["x"]["shape"], len(p.bridges) > 0
    ([8, 128], True)
    """
    path, doc = _source(path)
    doc = doc or load(path)
    overrides = _overrides(params)
    chosen = None
    if matrix.has_matrix(doc):
        points = matrix.expand(doc, overrides, max_points=1 << 30)
        found = matrix.select(points, point) if point else points[0]
        chosen, overrides = found.name, {**overrides, **found.values}
    elif point:
        raise UsageError(f"--point: {path} has no matrix")
    manifest = compile_manifest(doc, overrides)
    with _cluster(workers, threads_per_worker, scheduler, place) as cluster:
        made = _plan_on(manifest, cluster, place)
    return Plan(made, chosen, _cache_status(manifest, made, chosen, os.fspath(runs_dir), cache_dir))


def _plan_on(manifest: Manifest, cluster: Any, place: Mapping[str, str] | None) -> planner.Plan:
    if cluster is None:
        return planner.plan(manifest, probe)
    return cluster.place(planner.plan(manifest, cluster.probe), manifest, dict(place or {}))


def _cache_status(manifest: Manifest, made: planner.Plan, point: str | None, runs_dir: str,
                  cache_dir: str | os.PathLike | None) -> dict:
    from hetflow.engine.cache import Cache, explain, partition_keys
    from hetflow.engine.runs import latest_record

    keys = partition_keys(made, frozenset(s.id for s in manifest.stages.values() if not s.cache))
    cache = Cache(os.fspath(cache_dir) if cache_dir else os.path.join(runs_dir, ".cache"))
    return explain(keys, cache, latest_record(runs_dir, manifest.name, point))


@contextlib.contextmanager
def _cluster(workers: int | None, threads_per_worker: int | None, scheduler: Any,
             place: Mapping[str, str] | None, threads: int | None = None) -> Iterator[Any]:
    """The cluster a call runs on, or ``None`` for the in-process threaded scheduler.

    A cluster hetflow starts or connects to is closed on the way out; a
    ``distributed.Client`` given (or ``"current"``, the one in effect) is
    the caller's and stays open.
    """
    if workers is not None and scheduler is not None:
        raise UsageError("workers= starts a new cluster and scheduler= joins one; give one of them")
    if threads_per_worker is not None and workers is None:
        raise UsageError("threads_per_worker= goes with workers=")
    if workers is None and scheduler is None:
        if place:
            raise UsageError("place= needs a cluster: give workers=N or scheduler=")
        yield None
        return
    if threads is not None:
        raise UsageError("threads= sets the in-process scheduler; with a cluster use threads_per_worker=")
    from hetflow.engine.distributed import Cluster  # distributed loads only for cluster runs

    if workers is not None:
        with Cluster.local(workers, threads_per_worker) as cluster:
            yield cluster
        return
    if isinstance(scheduler, (str, os.PathLike)) and os.fspath(scheduler) != "current":
        with Cluster.connect(os.fspath(scheduler)) as cluster:
            yield cluster
        return
    yield Cluster(_client(scheduler), "client", "")


def _client(scheduler: Any) -> Any:
    """The ``distributed.Client`` that ``scheduler`` names: itself, or the current one for ``"current"``."""
    from distributed import Client, default_client

    if isinstance(scheduler, Client):
        return scheduler
    if scheduler != "current":
        raise UsageError(f"scheduler= takes None, 'current', a distributed.Client, tcp://HOST:PORT or a scheduler "
                         f"file; got {scheduler!r}")
    try:
        return default_client()
    except ValueError:
        raise UsageError("scheduler='current' needs a running distributed.Client (with Client(...): or "
                         "Client(...) made the default); none is") from None


# -- inputs -----------------------------------------------------------------------


def _bind_inputs(manifest: Manifest, inputs: Mapping[str, Any] | None) -> dict[str, PortableActivation]:
    """Every ``input`` stage's array, checked against the stage's declared shape and dtype."""
    declared = {s.id: s for s in manifest.stages.values() if s.op == "input"}
    given = dict(inputs or {})
    unknown = sorted(k for k in given if k not in declared)
    if unknown:
        raise UsageError(f"inputs: {manifest.file} has no input stage {unknown[0]!r} "
                         f"(input stages: {', '.join(declared) or 'none'})")
    bound = {}
    for name, stage in declared.items():
        dtype, shape = Dtype(stage.args["dtype"]), tuple(stage.args["shape"])
        want = f"shape {list(shape)} and dtype {dtype.value} (numpy {np.dtype(dtype.numpy).name})"
        if name not in given:
            raise UsageError(f"{stage.origin}: stage {name!r} is an input: its array comes from Python, "
                             f"hetflow.run(..., inputs={{{name!r}: array}}) with {want}")
        value = given[name]
        if not isinstance(value, np.ndarray):
            raise UsageError(f"inputs[{name!r}]: expected a numpy array with {want}, got {type(value).__name__}")
        if value.dtype != np.dtype(dtype.numpy) or value.shape != shape:
            raise UsageError(f"inputs[{name!r}]: stage {name!r} ({stage.origin}) takes an array with {want}; "
                             f"got shape {list(value.shape)} and numpy dtype {value.dtype.name}")
        bound[name] = PortableActivation.from_array(value, dtype)
    return bound


def _with_inputs(made: planner.Plan, bound: Mapping[str, PortableActivation]) -> planner.Plan:
    if not bound:
        return made
    args = dict(made.stage_args)
    for name, portable in bound.items():
        args[name] = {**args[name], "data": base64.b64encode(bytes(portable.bytes)).decode("ascii")}
    return dataclasses.replace(made, stage_args=args)


def _describe_inputs(bound: Mapping[str, PortableActivation]) -> dict[str, dict]:
    from hetflow.engine.records import digest_portable

    return {name: {"shape": list(p.shape.dims), "dtype": p.dtype.value, "bytes": p.nbytes, "digest": digest_portable(p)}
            for name, p in bound.items()}


# -- runs -------------------------------------------------------------------------


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

    def __init__(self, path: str, entries: Mapping[str, Mapping[str, Any]]) -> None:
        self._path = path
        self._entries = entries
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._entries:
            known = ", ".join(self._entries) or "none"
            raise KeyError(f"the run has no output {name!r} (outputs: {known})")
        if name not in self._loaded:
            entry = self._entries[name]
            if "file" in entry:
                from hetflow.engine.records import load_output

                self._loaded[name] = load_output(self._path, name)
            else:
                self._loaded[name] = entry.get("value")
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<outputs {', '.join(self._entries) or 'none'}>"


class Run:
    """One run, read from its folder: ``status``, ``run_id``, ``path``, ``outputs``, ``record``, ``failures``.

    ``outputs[NAME]`` is a numpy array with the output's exact dtype
    (``ml_dtypes`` types for bf16, fp8 and int4) or, for a scalar output
    of an emulator phase, its value. ``record`` is ``record.json`` as a
    dict. In a notebook the run shows a summary table.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        record_file = os.path.join(self.path, "record.json")
        try:
            with open(record_file, encoding="utf-8") as f:
                self.record: dict = json.load(f)
        except FileNotFoundError:
            raise UsageError(f"{self.path}: no run record (record.json) here") from None
        except (OSError, ValueError) as e:
            raise UsageError(f"{record_file}: not a readable run record: {e}") from None
        self.outputs: Mapping[str, Any] = _Outputs(self.path, self.record.get("outputs") or {})

    @property
    def run_id(self) -> str:
        return self.record.get("run_id") or os.path.basename(self.path)

    @property
    def status(self) -> str:
        """``succeeded``, ``failed``, or ``running`` for a run that has not finished (or crashed)."""
        return self.record.get("status") or "unknown"

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @property
    def error(self) -> str | None:
        """The run's error message, or None."""
        return (self.record.get("error") or {}).get("message")

    @property
    def record_path(self) -> str:
        return os.path.join(self.path, "record.json")

    @property
    def failures(self) -> list[Failure]:
        """Each failed or timed-out stage, or the run's one error where no stage is to blame."""
        error = self.record.get("error") or {}
        tb = os.path.join(self.path, error["traceback_file"]) if error.get("traceback_file") else None
        plan_nodes = (self.record.get("plan") or {}).get("nodes") or {}
        out = []
        for node, entry in (self.record.get("nodes") or {}).items():
            if entry.get("status") in ("failed", "timed out") and entry.get("error"):
                origin = error.get("origin") if error.get("node") == node else (plan_nodes.get(node) or {}).get("origin")
                out.append(Failure(node, (plan_nodes.get(node) or {}).get("op"), entry["error"], tb, entry["status"], origin))
        if not out and error:
            node = error.get("node")
            out.append(Failure(node, (plan_nodes.get(node) or {}).get("op") if node else None, error.get("message") or "failed",
                               tb, "failed", error.get("origin")))
        return out

    def _repr_html_(self) -> str:
        e = html.escape
        rec = self.record
        rows = [("run", self.run_id), ("status", self.status), ("manifest", (rec.get("manifest") or {}).get("name")),
                ("point", (rec.get("matrix_point") or {}).get("name") or "-"), ("started", rec.get("started_at")),
                ("duration", "-" if rec.get("duration_s") is None else f"{rec['duration_s']:.3f} s"), ("folder", self.path)]
        head = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows)
        outs = "".join(
            f"<tr><td>{e(n)}</td><td>{e(str(o.get('shape', 'value')))}</td><td>{e(str(o.get('dtype', '')))}</td>"
            f"<td><code>{e(o['digest'][:23])}</code></td></tr>" for n, o in (rec.get("outputs") or {}).items())
        fails = "".join(f"<tr><td>{e(str(f.stage))}</td><td>{e(str(f.op))}</td><td>{e(f.message)}</td></tr>"
                        for f in self.failures)
        return (f"<table>{head}</table>"
                + (f"<table><tr><th>output</th><th>shape</th><th>dtype</th><th>digest</th></tr>{outs}</table>" if outs else "")
                + (f"<table><tr><th>stage</th><th>op</th><th>failure</th></tr>{fails}</table>" if fails else ""))

    def __repr__(self) -> str:
        return f"<hetflow.Run {self.run_id}: {self.status}>"


def open_run(run_id: str, runs_dir: str | os.PathLike = "runs") -> Run:
    """An earlier run, by its id under ``runs_dir`` (or by the path of its folder).

    Raises
    ------
    UsageError
        no such run, or its record cannot be read.
    """
    from hetflow.engine.runs import read_record

    if os.path.isfile(os.path.join(os.fspath(run_id), "record.json")):
        return Run(run_id)
    read_record(os.fspath(runs_dir), run_id)
    return Run(os.path.join(os.fspath(runs_dir), run_id))


def _jobs(path: str, doc: Document | None, overrides: dict, point: str | None, resume: str | None, runs_dir: str,
          max_points: int) -> tuple[Any, list[tuple[Manifest, dict | None, dict]]]:
    """The document and one (manifest, matrix point, overrides) job per point to run."""
    if resume:
        if point or overrides:
            raise UsageError("--resume continues a run exactly as it was; it takes no --point or -p")
        from hetflow.engine.runs import manifest_from_record, read_record

        record = read_record(runs_dir, resume)
        if os.path.abspath(record["manifest"]["file"]) != os.path.abspath(path):
            raise UsageError(f"run {resume} ran {record['manifest']['file']}, not {path}")
        return None, [(manifest_from_record(record), record.get("matrix_point"), record.get("overrides") or {})]
    doc = doc or load(path)
    if not matrix.has_matrix(doc):
        if point:
            raise UsageError(f"--point: {path} has no matrix")
        return doc, [(compile_manifest(doc, overrides), None, overrides)]
    points = matrix.expand(doc, overrides, max_points=max_points)
    if point:
        points = [matrix.select(points, point)]
    return doc, [(compile_manifest(doc, {**overrides, **p.values}), {"name": p.name, "values": dict(p.values)}, overrides)
                 for p in points]


@contextlib.contextmanager
def _session(path: str, doc: Any, manifest: Manifest, runs_dir: str, resume: str | None, schedule_slot: str | None,
             cluster_args: tuple, lock: bool = True) -> Iterator[tuple[Any, dict | None, str]]:
    """The run lock of the manifest and its resolved params (unless ``lock`` is false: a sweep locks
    each point) and the cluster; yields (cluster, schedule entry, lock name)."""
    from hetflow.engine.locks import RunLock, lock_path

    schedule, lock_name = None, manifest.name
    if schedule_slot:
        from hetflow.engine import schedule as schedlib

        if resume:
            raise UsageError("--resume continues a run as it was; it takes no --schedule-slot")
        schedule, lock_name = schedlib.slot_run(doc, manifest.name, schedule_slot)
    held = RunLock(lock_path(runs_dir, path, lock_name, manifest.params), manifest=path, run=resume) if lock else None
    with held or contextlib.nullcontext(), _cluster(*cluster_args) as cluster:
        yield cluster, schedule, lock_name


def _execute(manifest: Manifest, cluster: Any, place: Mapping[str, str] | None, bound: Mapping[str, PortableActivation],
             **kwargs: Any) -> Run:
    from hetflow.engine.run import execute  # dask loads only for calls that run

    made = _with_inputs(_plan_on(manifest, cluster, place), bound)
    try:
        result = execute(manifest, made, inputs=_describe_inputs(bound), cluster=cluster, **kwargs)
    except RunFailed as e:
        if not e.record_path:
            raise
        return Run(os.path.dirname(e.record_path))
    return Run(result.run_dir)


def run(path: str | os.PathLike, params: Params | None = None, *, runs_dir: str | os.PathLike = "runs",
        workers: int | None = None, scheduler: Any = None, cache: bool = True,
        inputs: Mapping[str, np.ndarray] | None = None, point: str | None = None, threads: int | None = None,
        threads_per_worker: int | None = None, place: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike | None = None, on_event: Callable[[dict], None] | None = None,
        resume: str | None = None, schedule_slot: str | None = None,
        max_points: int = matrix.DEFAULT_MAX_POINTS) -> Run:
    """Run one point of a manifest and return its :class:`Run`, succeeded or failed.

    Parameters
    ----------
    path
        the manifest file.
    params
        param overrides, ``{name: value}``.
    runs_dir
        where the run's folder goes.
    workers
        run on a new local Dask cluster of this many worker processes
        (``threads_per_worker`` threads each).
    scheduler
        None: Dask's threaded scheduler in this process (``threads``
        threads); ``"current"``: the ``distributed.Client`` in effect (the
        one of an enclosing ``with Client(...):``); a ``Client``; or an
        existing cluster's ``tcp://HOST:PORT`` or scheduler file.
    cache
        take partitions from the partition cache and store them there
        (under ``cache_dir``, default ``RUNS_DIR/.cache``).
    inputs
        ``{stage: array}`` for the manifest's ``input`` stages, each a
        numpy array of the stage's declared shape and dtype.
    point
        the matrix point to run (a manifest with a matrix needs one; use
        :func:`sweep` to run them all).
    place
        ``{executor: worker}``: host an executor on that worker of the cluster.
    on_event
        called with every event of the run (a dict) as it happens.
    resume
        the id of a run that crashed or was killed, to continue in its own folder.
    schedule_slot
        run as this slot (a UTC instant) of the manifest's ``schedule:``.
    max_points
        the most points the manifest's matrix may expand to.

    Returns
    -------
    Run
        ``status`` is ``"failed"`` when a stage failed; ``failures`` says which.

    Raises
    ------
    ManifestError
        the manifest is wrong; every problem with ``FILE:LINE:COL``.
    UsageError
        bad arguments: an unknown param or point, a missing input or one
        of the wrong shape or dtype; raised before anything runs.
    LockHeld
        another run of the same manifest holds its lock.

    Examples
    --------
    >>> import tempfile
    >>> from importlib.resources import files
    >>> r = run(files("hetflow.examples") / "quickstart.yaml", params={"batch": 8}, runs_dir=tempfile.mkdtemp())
    >>> r.status, r.outputs["probs"].shape, r.outputs["probs_bf16"].dtype.name
    ('succeeded', (8, 10), 'bfloat16')
    """
    (path, doc), runs_dir = _source(path), os.fspath(runs_dir)
    if threads is not None and threads < 1:
        raise UsageError("--threads must be at least 1")
    doc, jobs = _jobs(path, doc, _overrides(params), point, resume, runs_dir, max_points)
    if len(jobs) > 1:
        raise UsageError(f"{path} has a matrix of {len(jobs)} points: give point= to run one, or run them all "
                         "with hetflow.sweep()")
    manifest, mpoint, given = jobs[0]
    bound = _bind_inputs(manifest, inputs)
    with _session(path, doc, manifest, runs_dir, resume, schedule_slot,
                  (workers, threads_per_worker, scheduler, place, threads)) as (cluster, schedule, _):
        return _execute(manifest, cluster, place, bound, runs_dir=runs_dir, overrides=given, num_workers=threads,
                        on_event=on_event, cache_dir=os.fspath(cache_dir) if cache_dir else None, use_cache=cache,
                        matrix_point=mpoint, resume=resume, schedule=schedule)


class Sweep:
    """A matrix sweep: ``sweep_id``, ``path``, ``status``, ``summary`` (``sweep.json``) and one :class:`Run` per point."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        with open(os.path.join(self.path, "sweep.json"), encoding="utf-8") as f:
            self.summary: dict = json.load(f)
        runs_dir = os.path.dirname(os.path.abspath(self.path))
        self.runs: list[Run | None] = [Run(os.path.join(runs_dir, p["run_id"])) if p.get("run_id") else None
                                       for p in self.summary["points"]]

    sweep_id = property(lambda self: self.summary["sweep_id"])
    status = property(lambda self: self.summary["status"])

    def __repr__(self) -> str:
        return f"<hetflow.Sweep {self.sweep_id}: {self.status}, {len(self.runs)} points>"


def sweep(path: str | os.PathLike, params: Params | None = None, *, runs_dir: str | os.PathLike = "runs",
          workers: int | None = None, scheduler: Any = None, cache: bool = True,
          inputs: Mapping[str, np.ndarray] | None = None, max_points: int = matrix.DEFAULT_MAX_POINTS,
          threads: int | None = None, threads_per_worker: int | None = None, place: Mapping[str, str] | None = None,
          cache_dir: str | os.PathLike | None = None, on_event: Callable[[dict], None] | None = None,
          on_point: Callable[[dict], None] | None = None, schedule_slot: str | None = None,
          parallel: int = 1, resume: str | None = None) -> Sweep:
    """Run every point of a manifest's ``matrix:``, one run each, and return the :class:`Sweep`.

    Takes :func:`run`'s arguments; ``max_points`` caps the expansion, and
    ``on_point`` is called with each point's row of ``sweep.json`` when
    the point ends. A point that fails does not stop the sweep.
    ``parallel`` runs up to that many points at once (threads; on a
    cluster their tasks share its workers); each point holds the run lock
    of its own params. ``resume`` names a cancelled or failed sweep to
    continue in its own folder: only the points that did not succeed run,
    a point whose run had started continuing that run. SIGINT and SIGTERM
    under :func:`hetflow.engine.cancel.stopping` cancel the sweep
    (:class:`RunCancelled`; ``sweep.json`` says ``cancelled``).
    """
    from hetflow.engine.locks import RunLock, lock_path
    from hetflow.engine.runs import manifest_from_record, new_sweep, read_record
    from hetflow.engine.sweeps import resume_rows, run_points

    (path, doc), runs_dir = _source(path), os.fspath(runs_dir)
    if threads is not None and threads < 1:
        raise UsageError("--threads must be at least 1")
    if resume:
        folder = os.path.join(runs_dir, resume)
        try:
            with open(os.path.join(folder, "sweep.json"), encoding="utf-8") as f:
                summary = json.load(f)
        except (OSError, ValueError):
            raise UsageError(f"no sweep {resume!r} in {runs_dir}") from None
        if params:
            raise UsageError("--resume continues a sweep with the params it had; it takes no -p")
        if os.path.abspath(summary["manifest"]) != os.path.abspath(path):
            raise UsageError(f"sweep {resume} ran {summary['manifest']}, not {path}")
        doc = doc or load(path)
        given = dict(summary.get("overrides") or {})
        todo = []
        for row, again in resume_rows(summary, runs_dir):
            point = {"name": row["name"], "values": dict(row["values"])}
            if again is not None:
                record = read_record(runs_dir, again)
                todo.append((row, (manifest_from_record(record), point, given, again)))
            else:
                todo.append((row, (compile_manifest(doc, {**given, **row["values"]}), point, given, None)))
        first = todo[0][1][0] if todo else compile_manifest(doc, given)
    else:
        doc, jobs = _jobs(path, doc, _overrides(params), None, None, runs_dir, max_points)
        if jobs[0][1] is None:
            raise UsageError(f"{path} has no matrix: run it with hetflow.run()")
        points = [matrix.Point(p["name"], p["values"]) for _, p, _ in jobs]
        first = jobs[0][0]
    bound = _bind_inputs(first, inputs)
    with _session(path, doc, first, runs_dir, None, schedule_slot,
                  (workers, threads_per_worker, scheduler, place, threads), lock=False) as (cluster, schedule, lock_name):
        if not resume:
            _, folder, summary = new_sweep(runs_dir, first.name, path, points, jobs[0][2])
            todo = [(row, (manifest, mpoint, given, None)) for (manifest, mpoint, given), row in zip(jobs, summary["points"])]

        def run_one(job: tuple, row: dict) -> Run:
            manifest, mpoint, given, again = job
            with RunLock(lock_path(runs_dir, path, lock_name, manifest.params), manifest=path, run=again):
                return _execute(manifest, cluster, place, bound, runs_dir=runs_dir, overrides=given,
                                num_workers=threads, on_event=on_event,
                                cache_dir=os.fspath(cache_dir) if cache_dir else None, use_cache=cache,
                                matrix_point=mpoint, schedule=schedule, resume=again)

        run_points(folder, summary, todo, run_one, parallel=parallel, on_point=on_point)
    return Sweep(folder)
