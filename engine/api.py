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

What they return is in :mod:`hetflow.engine.results`; the arrays handed in
are bound to ``input`` stages in :mod:`hetflow.engine.run.inputs`; the
cluster a call runs on is chosen in :mod:`hetflow.engine.run.clusters`.

Arrays enter a run through ``input`` stages (``{op: input, args: {shape:
[...], dtype: ...}}``): ``run(..., inputs={STAGE: array})``, or a file
(``inputs={STAGE: "ids.npz:ids"}``, the CLI's ``--input STAGE=PATH``),
checked against its stage before anything runs, and the array's portable
bytes travel inside the stage's arguments, so the cache key of every
partition downstream covers them and a cluster worker needs no shared
files. The record keeps each one's shape, dtype and digest under
``inputs``, and a file's path and digest, with which ``hetflow verify``
reruns the run. ``plan(..., inputs=)`` takes the same arrays, to forecast
the cache as the run will use it.

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
[]
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

import contextlib
import json
import numbers
import operator
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable

from hetflow.engine.manifest import matrix
from hetflow.engine.errors import Diagnostic, RunFailed, UsageError, argument, refuse_file_in_the_way
from hetflow.engine.manifest.validate import Document, Manifest, compile_manifest, gc_paused, load

if TYPE_CHECKING:
    from hetflow.engine.plan import planner
    from hetflow.engine.run.inputs import Bound
    from hetflow.engine.results import Failure, Plan, Run, Sweep  # noqa: F401

__all__ = ["Plan", "Run", "Failure", "Sweep", "validate", "plan", "run", "sweep", "open_run", "NOT_CHECKED"]

Params = Mapping[str, Any]


def _source(path: str | os.PathLike | Document) -> tuple[str, Document | None]:
    """The manifest's file name, and its document when the caller (the CLI) has loaded it already."""
    if isinstance(path, Document):
        return path.file, path
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"path= takes a manifest file's path (a str or os.PathLike), got {_shown(path)}")
    return os.fspath(path), None


def _changed_since(path: str, record: Mapping[str, Any], run_id: str) -> None:
    """Warn (:class:`SourceChanged`) when the manifest file a run is resumed from resolves, with the run's params
    and point, to another manifest than the one its record says it began with: the run goes on as it began."""
    import warnings

    from hetflow.engine.errors import HetflowError, SourceChanged

    point = record.get("matrix_point") or {}
    try:
        from datetime import datetime

        began = datetime.fromisoformat(str(record.get("started_at")).replace("Z", "+00:00")).timestamp()
        if os.stat(path).st_mtime < began - 1.0:
            return  # not written since the run began: a 100,000-stage manifest is not compiled again to say so
    except (OSError, ValueError, TypeError):
        pass
    try:
        now = compile_manifest(load(path), {**(record.get("overrides") or {}), **(point.get("values") or {})})
        if now.digest == (record.get("manifest") or {}).get("digest"):
            return
        what = "it resolves to another manifest now"
    except HetflowError as e:
        what = f"it no longer compiles: {str(e).splitlines()[0]}"
    # _changed_since <- _jobs <- _kept_jobs <- run <- its caller
    warnings.warn(f"{path} has changed since run {run_id} began ({what}): the run goes on as it began, as its record "
                  f"says; run {path} anew for the change", SourceChanged, stacklevel=5)


def _began(path: str, doc: Document | None, folder: str, summary: Mapping[str, Any], sweep_id: str,
           given: Mapping[str, Any], pending: list[Mapping[str, Any]]) -> Document:
    """The manifest a resumed sweep's points not yet run compile from: the copy the sweep kept when it began, read
    as the file it was (its relative paths, its positions), so that every point of the sweep is one manifest's;
    the file itself for a sweep that kept none. Warns (:class:`SourceChanged`) when the file now resolves to
    another manifest at one of those points: its change is not in this sweep."""
    import warnings

    from hetflow.engine.errors import HetflowError, SourceChanged
    from hetflow.engine.manifest.loader import loads
    from hetflow.engine.store.runs import SWEEP_SOURCE, sweep_source

    text = sweep_source(folder, summary)
    if text is None:
        if summary.get("source"):  # it kept one, which is gone or not the bytes it kept: said, not taken silently
            warnings.warn(f"the copy of {path} that sweep {sweep_id} kept when it began "
                          f"({os.path.join(folder, SWEEP_SOURCE)}) is gone or damaged: the points not yet run run "
                          f"{path} as it is now", SourceChanged, stacklevel=3)
        return doc or load(path)
    began = loads(text, path)
    if doc is None:
        try:
            with open(path, "rb") as f:
                if f.read() == text.encode("utf-8"):
                    return began  # the same bytes: not parsed again
        except OSError:
            pass
    try:
        now = doc or load(path)
        if now.text == text:
            return began
        changed = next((row["name"] for row in pending if compile_manifest(now, {**given, **row["values"]}).digest
                        != compile_manifest(began, {**given, **row["values"]}).digest), None)
        if changed is None:
            return began  # its comments or layout changed, not what a point runs
        what = f"point {changed} resolves to another manifest now"
    except HetflowError as e:
        what = f"it no longer compiles: {str(e).splitlines()[0]}"
    warnings.warn(f"{path} has changed since sweep {sweep_id} began ({what}): the points not yet run run as the "
                  f"sweep began ({os.path.join(folder, SWEEP_SOURCE)}), so that the sweep is one manifest's; run "
                  f"{path} anew for the change", SourceChanged, stacklevel=3)
    return began


def _sweep_code_changed(doc: Document, given: Mapping[str, Any], runs_dir: str, summary: Mapping[str, Any],
                        sweep_id: str, pending: list[Mapping[str, Any]]) -> None:
    """Warn (:class:`SourceChanged`) when what the sweep kept of its manifest no longer makes what a finished point
    ran: a block library it uses (``use: lib.yaml#b``) or a plugin's code changed since. The points not yet run
    run them as they are now; the sweep kept only the manifest's own text."""
    import warnings

    from hetflow.engine.errors import HetflowError, SourceChanged
    from hetflow.engine.store.runs import read_record

    if not pending:
        return
    done = next((row for row in summary.get("points") or [] if row.get("status") == "succeeded" and row.get("run_id")),
                None)
    if done is None:
        return
    try:
        record = read_record(runs_dir, done["run_id"])
        now = compile_manifest(doc, {**given, **(done.get("values") or {})})
    except (HetflowError, OSError, ValueError, KeyError):
        return
    what = []
    if now.digest != (record.get("manifest") or {}).get("digest"):
        what.append("a block library it uses resolves to other stages now")
    then = {p.get("spec"): p.get("digest") for p in record.get("plugins") or [] if isinstance(p, dict)}
    what += [f"plugin {p.spec}'s code changed" for p in getattr(now, "plugins", ()) if then.get(p.spec) not in
             (None, p.digest)]
    if what:
        warnings.warn(f"sweep {sweep_id} began with other code than it has now ({'; '.join(what)}, against point "
                      f"{done['name']}'s run): the points not yet run run it as it is now, and the sweep mixes the two",
                      SourceChanged, stacklevel=3)


def _refuse_after_main_ended(verb: str) -> None:
    """Refuse a run or sweep begun in a thread after the script's main thread ended: Python is shutting down then,
    its thread pools take no new work, and the call failed as a RuntimeError from inside an import ("can't register
    atexit after shutdown"), or, begun a moment earlier, as a failed run ("cannot schedule new futures")."""
    import threading

    if not threading.main_thread().is_alive():
        raise UsageError(f"hetflow.{verb}() was called in a thread after the main thread ended: Python is shutting "
                         "down and runs nothing more in new threads; keep the main thread until the call ends (join "
                         "its thread)")


def _refuse_unguarded(verb: str, workers: int | None, scheduler: Any) -> None:
    """Refuse a local cluster started from the top level of a script outside ``if __name__ == "__main__":``.

    Each worker of a local cluster starts as a fresh interpreter that first
    imports the script that started it (multiprocessing's "spawn", Dask's
    default), so the unguarded call runs again in every worker and the
    cluster failed to start with Dask's "Nanny failed to start worker
    process", naming neither the cause nor the fix. A script whose source
    cannot be read, an interactive session and the CLI are left to start.
    """
    if workers is None or scheduler is not None:
        return
    import sys

    from hetflow.engine.errors import _on_the_command_line

    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if not script or _on_the_command_line() or getattr(main, "__spec__", None) is not None and \
            str(main.__spec__.name).startswith("hetflow."):
        return
    import dask.config

    if dask.config.get("distributed.worker.multiprocessing-method", "spawn") not in ("spawn", "forkserver"):
        return  # a forked worker does not import the script again
    frame, line = sys._getframe(), None
    while frame is not None:  # the outermost line of the script's own top level that led here
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
        frame = frame.f_back
    if line is None:
        return
    import ast
    import tokenize

    try:
        with tokenize.open(script) as f:
            tree = ast.parse(f.read(), script)
    except (OSError, SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.lineno <= line <= (node.end_lineno or node.lineno) and any(
                isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test)):
            return
    raise UsageError(f"hetflow.{verb}() with workers={workers} is called from the top level of {script} (line "
                     f"{line}), outside `if __name__ == \"__main__\":`: each worker of a local cluster starts by "
                     "importing that script (Python's multiprocessing spawn), which would call it again there and the "
                     "cluster could not start; put that call under `if __name__ == \"__main__\":`")


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _check(**given: Any) -> dict[str, Any]:
    """``given``, each count a Python int; refuses, by keyword, an argument of the wrong kind before anything is
    read or started.

    The counts' own checks further in name the CLI's flags; a call from
    Python is told the keyword it passed. A numpy integer is taken as the
    int it holds, which the record's JSON can keep.
    """
    for key, value in given.items():
        kind = _KINDS[key]
        if value is None and key in _OPTIONAL:
            continue
        if kind == "count":
            try:
                whole = not isinstance(value, bool) and operator.index(value) >= 1  # numpy's integers too
            except TypeError:
                whole = False
            if not whole:
                raise UsageError(f"{key}= takes a whole number of at least 1, got {_shown(value)}")
            given[key] = operator.index(value)
        elif kind == "flag":
            if not isinstance(value, bool):
                raise UsageError(f"{key}= takes True or False, got {_shown(value)}")
        elif kind == "path":
            if not isinstance(value, (str, os.PathLike)):
                raise UsageError(f"{key}= takes a folder's path (a str or os.PathLike), got {_shown(value)}")
            text = os.fspath(value)
            if not text:  # runs_dir='' was "the runs directory  cannot be created", cache_dir='' the default one
                raise UsageError(f"{argument(key)} takes a folder's path, got an empty one")
            if (b"\0" if isinstance(text, bytes) else "\0") in text:
                raise UsageError(f"{argument(key)} {text!r} cannot be a folder's name: it holds a NUL character")
            _anchored(text, key)  # a relative one in a working directory that was removed: said so, as what it is
            refuse_file_in_the_way(text, key)
        elif kind == "callable":
            if not callable(value):
                each = "point's row of sweep.json" if key == "on_point" else "event"
                raise UsageError(f"{key}= takes a function called with each {each}, got {_shown(value)}")
        elif kind == "name":
            if not isinstance(value, str):
                raise UsageError(f"{key}= takes a str, got {_shown(value)}")
            if not value.strip():  # resume='' ran in the runs folder itself, a run no listing saw
                raise UsageError(f"{argument(key)} takes a name, got an empty one")
        elif not isinstance(value, Mapping):
            raise UsageError(f"{key}= takes a mapping (a dict), got {_shown(value)}")
    return given


def _counted(given: dict[str, Any], *keys: str) -> tuple[Any, ...]:
    return tuple(given[k] for k in keys)


_KINDS = {
    **dict.fromkeys(("workers", "threads", "threads_per_worker", "parallel", "max_points"), "count"),
    **dict.fromkeys(("cache", "dashboard"), "flag"),
    **dict.fromkeys(("runs_dir", "cache_dir"), "path"),
    **dict.fromkeys(("on_event", "on_point"), "callable"),
    **dict.fromkeys(("point", "resume", "schedule_slot"), "name"),
    **dict.fromkeys(("place", "inputs"), "mapping"),
}
_OPTIONAL = frozenset(("workers", "threads", "threads_per_worker", "cache_dir", "on_event", "on_point", "point",
                       "resume", "schedule_slot", "place", "inputs"))


def _overrides(params: Params | None) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise UsageError(f"params must be a mapping of param names to values, got {params!r}")
    return {k: _param_value(v, k) for k, v in params.items()}


def _param_value(value: Any, where: str) -> Any:
    """A param's value as a manifest holds it: numpy's scalars as the Python numbers they are, a tuple as a
    list; a number of another kind (Decimal, Fraction) or an array is refused, naming the param.

    >>> import numpy as np
    >>> _param_value({"n": np.int64(8), "k": (np.float32(0.5), True)}, "p")
    {'n': 8, 'k': [0.5, True]}
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_param_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {k: _param_value(v, f"{where}.{k}") for k, v in value.items()}
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and callable(item):
        return _param_value(item(), where)
    what = "an array" if getattr(value, "ndim", 0) else f"a {type(value).__module__}.{type(value).__qualname__}"
    hint = "; give .tolist()" if getattr(value, "ndim", 0) else "; give int() or float() of it" if isinstance(
        value, numbers.Number) else ""
    raise UsageError(f"param {where!r} is {what}, which a manifest cannot hold (its values are numbers, text, "
                     f"booleans, null, lists and maps){hint}")


def validate(path: str | os.PathLike, params: Params | None = None) -> list[Diagnostic]:
    """Check a manifest as far as it can be checked without a machine; return its warnings.

    Everything but what only a machine says: the schema and the semantic
    checks, the shape and dtype of every stage and phase, the arguments of
    plugin ops, and each stage against every vendor its executor may
    resolve to (an executor whose list is ``[vulkan, cpu]`` is checked as
    Vulkan and as CPU), for every point of its ``matrix:``
    (:func:`hetflow.engine.manifest.matrix.check_points`). Which vendors a machine
    offers, whether it has the devices an executor names and how much
    memory they have are :func:`plan`'s to check (:data:`NOT_CHECKED` says
    so in words).

    Returns
    -------
    list of Diagnostic
        the warnings (severity ``"warning"``), in file order: a stage's
        vendor preference that falls back, a vendor listed after ``cpu``.

    Raises
    ------
    ManifestError
        with ``diagnostics``: every problem, ``FILE:LINE:COL: error: ...``
        in file order; one found at some matrix points only names them.
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
    from hetflow.engine.errors import ManifestError
    from hetflow.engine.plan.partitioning import check  # not the planner: validate loads no placement

    path, doc = _source(path)
    doc = doc or load(path)
    overrides = _overrides(params)
    if matrix.has_matrix(doc):
        points = matrix.expand(doc, overrides, max_points=matrix.CHECK_MAX_POINTS, remedy=_CHECK_REMEDY)
        _, warnings = matrix.blame_overrides(doc, overrides, lambda given: matrix.check_points(doc, given, points, check))
    else:
        warnings = matrix.blame_overrides(doc, overrides, lambda given: check(compile_manifest(doc, given)))
    return ManifestError(warnings).diagnostics


_CHECK_REMEDY = ("validate and plan check every point, up to that many; fix some of its keys with params (plan -p "
                 "KEY=VALUE), or make it smaller")

NOT_CHECKED = ("not checked without the machine: which vendor each executor gets there, whether it has the devices "
               "each executor names (device:, devices:) and their memory, and what each partition holds at once where "
               "the machine places its stages (hetflow plan checks them)")
"""What :func:`validate` cannot know, in the words ``hetflow validate`` prints."""


def plan(path: str | os.PathLike, params: Params | None = None, *, point: str | None = None,
         runs_dir: str | os.PathLike = "runs", cache_dir: str | os.PathLike | None = None,
         workers: int | None = None, threads_per_worker: int | None = None, scheduler: Any = None,
         place: Mapping[str, str] | None = None, inputs: Mapping[str, Any] | None = None) -> Plan:
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
    inputs
        the arrays of the manifest's ``input`` stages, as :func:`run`
        takes them (arrays or files), so that ``cache`` forecasts exactly
        what the run will take from the cache. Without them, a partition
        that depends on an input stage is ``unknown`` there; given, they
        are checked as :func:`run` checks them.

    Raises
    ------
    ManifestError
        the manifest is wrong, or the plan cannot be made (an unsupported
        dtype, too little memory): every problem with ``FILE:LINE:COL``.
    UsageError
        an unknown param or point; with ``inputs``, an input :func:`run`
        would refuse.

    Examples
    --------
    >>> from importlib.resources import files
    >>> p = plan(files("hetflow.examples") / "quickstart.yaml", params={"batch": 8})
    >>> p.nodes["x"]["shape"], len(p.bridges) > 0
    ([8, 128], True)
    """
    path, doc = _source(path)
    workers, threads_per_worker = _counted(_check(point=point, runs_dir=runs_dir, cache_dir=cache_dir, workers=workers,
                                                  threads_per_worker=threads_per_worker, place=place, inputs=inputs),
                                           "workers", "threads_per_worker")
    _refuse_unguarded("plan", workers, scheduler)
    doc = doc or load(path)
    overrides = _overrides(params)
    chosen = None
    if matrix.has_matrix(doc):
        points = matrix.expand(doc, overrides, max_points=matrix.CHECK_MAX_POINTS, remedy=_CHECK_REMEDY)
        found = matrix.select(points, point) if point else points[0]
        chosen, overrides = found.name, {**overrides, **found.values}
    elif point:
        raise UsageError(f"{path} has no matrix, so {argument('point', point)} names no point of it")
    # a point's problems name the point, as validate and a sweep name them; without --point every point is checked,
    # as validate checks them, and the first is planned
    if chosen and point is None:
        from hetflow.engine.plan.partitioning import check

        made = matrix.blame_overrides(doc, {k: v for k, v in overrides.items() if k not in found.values},
                                      lambda given: matrix.check_points(doc, given, points, check))[0]
        manifest = made[points.index(found)]
    elif chosen:
        manifest = matrix.blame_overrides(doc, overrides, lambda given: matrix.check_points(doc, given, [found]))[0][0]
    else:
        manifest = matrix.blame_overrides(doc, overrides, lambda given: compile_manifest(doc, given))
    from hetflow.engine.run.clusters import open_cluster, plan_on
    from hetflow.engine.run.inputs import bind_inputs, with_inputs

    bound = bind_inputs(manifest, inputs, given_as=_given_as(inputs)) if inputs is not None else {}
    # a plan's cluster lives for the placement only: nobody would open its dashboard
    with open_cluster(workers, threads_per_worker, scheduler, place, dashboard=False) as cluster:
        made = with_inputs(plan_on(manifest, cluster, place), bound)
    with gc_paused():  # the cache keys and the plan's data: a large plan's worth of new, acyclic objects
        from hetflow.engine.results import Plan

        return Plan(made, chosen, _cache_status(manifest, made, chosen, os.fspath(runs_dir), cache_dir))


def _cache_status(manifest: Manifest, made: planner.Plan, point: str | None, runs_dir: str,
                  cache_dir: str | os.PathLike | None) -> dict:
    from hetflow.engine.store.cache import Cache, explain, partition_keys, uncached_stages
    from hetflow.engine.store.runs import latest_record

    keys = partition_keys(made, uncached_stages(manifest))
    cache = Cache(os.fspath(cache_dir) if cache_dir else os.path.join(runs_dir, ".cache"))
    forecast = explain(keys, cache, latest_record(runs_dir, manifest.name, point, keys=("cache",)))
    from hetflow.engine.run.inputs import unbound_partitions

    # without its array, an input stage's key is not the one the run will have: saying "will run" or "cached"
    # would be a guess, and it was the wrong one for every partition downstream of the input
    for pid, stage in unbound_partitions(made).items():
        forecast[pid] = {"status": "unknown", "reason": f"depends on input stage {stage!r}, whose array is not "
                                                        f"given: give it (--input {stage}=PATH, inputs=) to forecast"}
    return forecast


def _given_as(inputs: Mapping[str, Any] | None) -> str:
    """How messages name ``inputs``: the CLI hands in ``--input`` flags (:class:`CliInputs`), Python a mapping."""
    from hetflow.engine.run.inputs import CliInputs

    return "--input" if isinstance(inputs, CliInputs) else "inputs"


def open_run(run_id: str, runs_dir: str | os.PathLike = "runs") -> Run:
    """An earlier run, by any name ``hetflow runs show`` takes, or by the path of its folder.

    ``run_id`` is a run id, a unique prefix of one or of its random part
    (``"6bbe"``), a point name ``NAME[k=v,...]`` (the newest run of that
    point), ``"latest"`` (the newest run, verification runs left out) or
    ``"latest-verification"``: the one rule of
    :func:`hetflow.engine.store.runs.resolve_id`.

    Raises
    ------
    UsageError
        no such run, a name that matches several, a record that cannot be read, or a sweep
        (:class:`~hetflow.engine.results.Sweep` of its folder reads that).
    """
    from hetflow.engine.store.runs import read_record, resolve_id

    if not isinstance(run_id, (str, os.PathLike)):
        raise UsageError(f"run_id= takes a run's name or its folder's path (a str or os.PathLike), got {_shown(run_id)}")
    _check(runs_dir=runs_dir)
    run_id = os.fspath(run_id)  # a pathlib.Path of a folder is named as its text is
    if os.path.isfile(os.path.join(run_id, "record.json")):
        from hetflow.engine.results import Run

        return Run(run_id)
    _refuse_sweep(run_id)
    runs_dir = os.fspath(runs_dir)
    folder = resolve_id(runs_dir, run_id, "run")
    _refuse_sweep(os.path.join(runs_dir, folder))
    from hetflow.engine.results import Run

    return Run(os.path.join(runs_dir, folder), read_record(runs_dir, folder))


def _refuse_sweep(folder: str) -> None:
    """Refuse a sweep's folder given to :func:`open_run`, saying what reads it: the runs directory's own words
    ("give one of its points' run ids", or a ``runs_dir=`` that would only lead there) name no way to the
    sweep itself."""
    if os.path.isfile(os.path.join(folder, "sweep.json")) and not os.path.isfile(os.path.join(folder, "record.json")):
        raise UsageError(f"{folder} is a sweep, not a run: hetflow.Sweep({folder!r}) reads it, its runs one "
                         "Run a point; open_run takes one of its points' runs")


def _jobs(path: str, doc: Document | None, overrides: dict, point: str | None, resume: str | None, runs_dir: str,
          max_points: int) -> tuple[Any, list[tuple[Manifest, dict | None, dict]]]:
    """The document and one (manifest, matrix point, overrides) job per point to run."""
    if resume:
        if point or overrides:
            raise UsageError(f"{argument('resume')} continues a run exactly as it was; it takes no {argument('point')} "
                             f"or {argument('params')}")
        from hetflow.engine.store.runs import manifest_from_record, read_record

        record = read_record(runs_dir, resume, whole=True)
        if os.path.abspath(record["manifest"]["file"]) != os.path.abspath(path):
            raise UsageError(f"run {resume} ran {record['manifest']['file']}, not {path}")
        _refuse_live("run", resume, record)
        if record.get("status") == "succeeded":
            # its attempt would be run again in its own folder, its outputs replaced by those of today's inputs
            raise UsageError(f"run {resume} succeeded: there is nothing to resume; {argument('resume')} continues a "
                             "run that was cancelled, failed or died (hetflow verify reruns a run to compare its "
                             "outputs, and a run without it starts a new one)")
        _changed_since(path, record, resume)
        return None, [(manifest_from_record(record), record.get("matrix_point"), record.get("overrides") or {})]
    doc = doc or load(path)
    if not matrix.has_matrix(doc):
        if point:
            raise UsageError(f"{path} has no matrix, so {argument('point', point)} names no point of it")
        return doc, [(matrix.blame_overrides(doc, overrides, lambda given: compile_manifest(doc, given)), None, overrides)]
    points = matrix.expand(doc, overrides, max_points=max_points)
    if point:
        points = [matrix.select(points, point)]
    # every point is compiled and checked as validate checks it before any runs: one it refuses stops the sweep
    # before it starts (checked only as each point came to run, a sweep ran its good points first)
    from hetflow.engine.plan.partitioning import check

    manifests, _ = matrix.blame_overrides(doc, overrides,
                                          lambda given: matrix.check_points(doc, given, points, check))
    return doc, [(m, {"name": p.name, "values": dict(p.values)}, overrides) for m, p in zip(manifests, points)]


# Manifests compiled in this process, for the next call with the same file, bytes and arguments:
# (absolute path, overrides as JSON, point, max_points) -> (the file's bytes, the stat of each file the
# manifest reads, _jobs's answer). A warm hetflow.run() of a small manifest spent 1.2 ms of its 6 ms
# loading, checking and planning what it had checked and planned the call before.
_KEPT: dict[tuple, tuple[bytes, tuple, tuple]] = {}
_KEPT_MAX = 16
# id(manifest) -> its plan on this machine, while the manifest lives
_PLANNED: dict[int, Any] = {}


def _kept_jobs(path: str, doc: Document | None, overrides: dict, point: str | None, resume: str | None,
               runs_dir: str, max_points: int) -> tuple[Any, list[tuple[Manifest, dict | None, dict]]]:
    """:func:`_jobs`, answered from the last call's work when nothing it read has changed.

    Only a manifest given by its path, not resumed, whose every point
    reads no file but its block libraries and its ``load`` stages' data is
    kept: the file's bytes must be the same and each library's and data
    file's stamp too (:func:`~hetflow.executors.files.file_stamp`), or it
    is loaded and checked again. Plugins and emulator phases read
    modules and programs a stat does not vouch for, so such manifests are
    always checked anew.
    """
    if doc is not None or resume:
        return _jobs(path, doc, overrides, point, resume, runs_dir, max_points)
    try:
        key = (os.path.abspath(path), json.dumps(overrides, sort_keys=True), point, max_points)
        with open(path, "rb") as f:
            text = f.read()
    except (TypeError, ValueError, OSError):
        return _jobs(path, doc, overrides, point, resume, runs_dir, max_points)
    kept = _KEPT.get(key)
    if (kept is not None and kept[0] == text and kept[1] == _stats([n for m, _, _ in kept[2][1] for n in _reads(m)])
            and kept[3] == _stats([n for n, _ in kept[3]], libraries=True)):
        return kept[2]
    from hetflow.engine.manifest.loader import files_read
    from hetflow.executors.files import file_stamp

    with files_read() as read:
        answer = _jobs(path, doc, overrides, point, resume, runs_dir, max_points)
    reads = [[*_reads(m)] if not (m.plugins or getattr(m, "phases", None)) else None for m, _, _ in answer[1]]
    if all(r is not None for r in reads):
        if len(_KEPT) >= _KEPT_MAX:
            _KEPT.pop(next(iter(_KEPT)))
        # the block libraries its uses read, each as it was when it was read
        here = os.path.abspath(path)
        libraries = tuple(sorted({(n, file_stamp(info)) for n, info in read if n != here}))
        _KEPT[key] = (text, _stats([n for r in reads for n in r]), answer, libraries)
    return answer


def _reads(manifest: Manifest) -> Iterator[str]:
    """The data files the ``load`` stages of ``manifest`` read."""
    for s in manifest.stages.values():
        if s.op == "load" and isinstance(s.args.get("path"), str):
            yield s.args["path"]


def _stats(files: list[str], libraries: bool = False) -> tuple:
    """Each file's stamp (None where it cannot be told); ``libraries``: as ``(path, stamp)`` pairs."""
    from hetflow.executors.files import file_stamp

    out = []
    for name in files:
        try:
            stamp = file_stamp(os.stat(name))
        except OSError:
            stamp = None
        out.append((name, stamp) if libraries else stamp)
    return tuple(out)


def _plan_here(manifest: Manifest) -> Any:
    """The plan of ``manifest`` on this machine, made once per manifest object."""
    from hetflow.engine.run.clusters import plan_on

    made = _PLANNED.get(id(manifest))
    if made is None:
        import weakref

        made = _PLANNED[id(manifest)] = plan_on(manifest, None, None)
        weakref.finalize(manifest, _PLANNED.pop, id(manifest), None)
    return made


def _anchored(folder: str | os.PathLike, key: str) -> str:
    """``folder`` made absolute against the working directory the call began in: every file of the run or sweep
    goes where it began, though the working directory changes while it runs (a notebook's ``%cd``, an
    ``os.chdir`` in another thread or in ``on_event``). Relative, its record was written in one folder and its
    outputs looked for in another, which failed the run and left its record saying ``running``."""
    text = os.fspath(folder)
    try:
        return os.path.abspath(text)
    except OSError as e:  # the working directory itself was removed
        from hetflow.engine.errors import EnvironmentUnavailable

        raise EnvironmentUnavailable(f"{argument(key, text)} cannot be used: it is relative to the working "
                                     f"directory, which is gone ({e.strerror or e})") from None


def _file_at(manifest: Manifest, where: str) -> Manifest:
    """``manifest`` naming its file by the absolute path ``where``."""
    import dataclasses

    return manifest if manifest.file == where else dataclasses.replace(manifest, file=where)


def _refuse_live(kind: str, ident: str, data: Mapping[str, Any]) -> None:
    """A ``--resume`` of a run or sweep whose process still runs it is refused as a held lock is (exit 4): two
    resumes at once end the same way whether the second finds the lock taken or the record the first rewrote."""
    from hetflow.engine.errors import StillRunning
    from hetflow.engine.store import owner

    if data.get("status") == "running" and owner.alive(data.get("owner")) is True:
        who = data.get("owner") or {}
        raise StillRunning(f"{kind} {ident} is still running (pid {who.get('pid')} on {who.get('host')}); "
                           "stop it first, or wait for it to end", who)


@contextlib.contextmanager
def _session(path: str, doc: Any, manifest: Manifest, runs_dir: str, resume: str | None, schedule_slot: str | None,
             cluster_args: tuple, lock: bool = True) -> Iterator[tuple[Any, dict | None, str]]:
    """The cluster, then the runs directory, then the run lock of the manifest and its resolved params
    (unless ``lock`` is false: a sweep locks each point); yields (cluster, schedule entry, lock name).

    In that order because a command that cannot start writes nothing: a
    cluster that does not answer or a runs directory that cannot be used
    raises :class:`~hetflow.engine.errors.EnvironmentUnavailable` before
    the runs directory or its lock file exists.
    """
    from hetflow.engine.errors import require_runs_dir
    from hetflow.engine.store.locks import RunLock, lock_path

    schedule, lock_name = None, manifest.name
    if schedule_slot:
        from hetflow.engine.batch import schedule as schedlib

        if resume:
            raise UsageError(f"{argument('resume')} continues a run as it was; it takes no {argument('schedule_slot')}")
        schedule, lock_name = schedlib.slot_run(doc, manifest.name, schedule_slot, runs_dir)
    from hetflow.engine.run.clusters import open_cluster

    workers, _, scheduler = cluster_args[:3]
    if workers is not None or scheduler is not None:
        require_runs_dir(runs_dir, create=False)  # before a cluster is started for nothing
    with open_cluster(*cluster_args) as cluster:
        require_runs_dir(runs_dir)
        held = RunLock(lock_path(runs_dir, path, lock_name, manifest.params), manifest=path, run=resume) if lock else None
        with held or contextlib.nullcontext():
            yield cluster, schedule, lock_name


def _execute(manifest: Manifest, cluster: Any, place: Mapping[str, str] | None, bound: Mapping[str, Bound],
             named: str | None = None, **kwargs: Any) -> Run:
    from hetflow.engine.run.clusters import plan_on
    from hetflow.engine.run.inputs import describe_inputs, with_inputs
    from hetflow.engine.results import Run
    from hetflow.engine.run.execute import execute  # dask loads only for calls that run

    made = with_inputs(_plan_here(manifest) if cluster is None else plan_on(manifest, cluster, place), bound)
    # A threaded run's record is the data it wrote; a cluster's events come over the wire as msgpack makes
    # them (tuples for lists), so that record is read back as written.
    mine = cluster is None
    try:
        result = execute(manifest, made, inputs=describe_inputs(bound), cluster=cluster, **kwargs)
    except RunFailed as e:
        if not e.record_path:
            raise
        done = Run(os.path.dirname(e.record_path), e.record if mine else None)
    else:
        done = Run(result.run_dir, result.record if mine else None)
    if named is not None:  # named as runs_dir was; read from where it was made, whatever the working directory
        done.path = os.path.join(named, os.path.basename(done.path))
    return done


def run(path: str | os.PathLike, params: Params | None = None, *, runs_dir: str | os.PathLike = "runs",
        workers: int | None = None, scheduler: Any = None, cache: bool = True,
        inputs: Mapping[str, Any] | None = None, point: str | None = None, threads: int | None = None,
        threads_per_worker: int | None = None, place: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike | None = None, on_event: Callable[[dict], None] | None = None,
        resume: str | None = None, schedule_slot: str | None = None,
        max_points: int = matrix.DEFAULT_MAX_POINTS, dashboard: bool = True) -> Run:
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
    dashboard
        with ``workers``: the local cluster serves Dask's dashboard, its
        link in the run's first event and the record. False starts the
        cluster without it, 0.3-0.4 s sooner (``hetflow run --quiet``,
        which shows no link, does so).
    scheduler
        None: Dask's threaded scheduler in this process (``threads``
        threads); ``"current"``: the ``distributed.Client`` in effect (the
        one of an enclosing ``with Client(...):``); a ``Client``; or an
        existing cluster's ``tcp://HOST:PORT`` or scheduler file.
    cache
        take partitions from the partition cache and store them there
        (under ``cache_dir``, default ``RUNS_DIR/.cache``).
    inputs
        ``{stage: array or file}`` for the manifest's ``input`` stages:
        a numpy array of the stage's declared shape and dtype, or the path
        of a file, ``.npy``, ``.npz:KEY`` or ``.safetensors:KEY``, whose
        array has the stage's shape and values its dtype holds (checked as
        a ``load`` stage's file is; the record keeps the file's path and
        digest, so ``hetflow verify`` can rerun the run). With ``resume``,
        the files the run read, unless given again.
    point
        the matrix point to run (a manifest with a matrix needs one; use
        :func:`sweep` to run them all).
    place
        ``{executor: worker}``: host an executor on that worker of the cluster.
    on_event
        called with every event of the run (a dict) as it happens, in the
        thread the event happens in. An exception it raises stops the run
        as a stage's would (the record says ``failed``, with that error)
        and is raised to the caller; raised on the run's last event, it
        comes after the record is written.
    resume
        the id of a run that crashed or was killed, to continue in its own
        folder; any name ``hetflow run --resume`` takes (``latest``, a
        unique prefix of an id).
    schedule_slot
        run as this slot (a UTC instant) of the manifest's ``schedule:``.
    max_points
        the most points the manifest's matrix may expand to.

    Returns
    -------
    Run
        ``status`` is ``"failed"`` when a stage failed; ``failures`` says which.

    Notes
    -----
    A process that runs the same manifest again (a notebook, a service)
    does not load, check and plan it again while its file's bytes, the
    block libraries its uses read and the data files its ``load`` stages
    read (each by size, mtime, ctime and inode) and the params are the
    same: the checked manifest and its plan are kept. A manifest with
    plugins or emulator phases is checked every time.

    Raises
    ------
    ManifestError
        the manifest is wrong; every problem with ``FILE:LINE:COL``.
    UsageError
        bad arguments: an unknown param or point, a missing input or one
        of the wrong shape or dtype; raised before anything runs.
    LockHeld
        another run of the same manifest holds its lock, or the run ``resume`` names still runs.
    EnvironmentUnavailable
        the cluster or the runs directory is not there; as
        :class:`~hetflow.engine.errors.StorageUnavailable`, a disk refused the run's
        files (full, over quota, read-only, failing): ``record_path`` is its record
        where that says ``failed``, None where not even that could be written.

    Examples
    --------
    >>> import tempfile
    >>> from importlib.resources import files
    >>> r = run(files("hetflow.examples") / "quickstart.yaml", params={"batch": 8}, runs_dir=tempfile.mkdtemp())
    >>> r.status, r.outputs["probs"].shape, r.outputs["probs_bf16"].dtype.name
    ('succeeded', (8, 10), 'bfloat16')
    """
    path, doc = _source(path)
    _refuse_after_main_ended("run")
    workers, threads, threads_per_worker, max_points = _counted(_check(
        runs_dir=runs_dir, workers=workers, cache=cache, inputs=inputs, point=point, threads=threads,
        threads_per_worker=threads_per_worker, place=place, cache_dir=cache_dir, on_event=on_event, resume=resume,
        schedule_slot=schedule_slot, max_points=max_points, dashboard=dashboard),
        "workers", "threads", "threads_per_worker", "max_points")
    _refuse_unguarded("run", workers, scheduler)
    named, runs_dir = os.fspath(runs_dir), _anchored(runs_dir, "runs_dir")
    cache_dir = _anchored(cache_dir, "cache_dir") if cache_dir else None
    if resume:
        from hetflow.engine.store.runs import resolve_id

        resume = resolve_id(named, resume, "run")  # named as hetflow run --resume names it: latest, a prefix
    doc, jobs = _kept_jobs(path, doc, _overrides(params), point, resume, runs_dir, max_points)
    if len(jobs) > 1:
        raise UsageError(f"{path} has a matrix of {len(jobs)} points: give point= to run one, or run them all "
                         "with hetflow.sweep()")
    manifest, mpoint, given = jobs[0]
    from hetflow.engine.run.inputs import bind_inputs, recorded_inputs

    if resume:
        from hetflow.engine.store.runs import read_record

        bound = recorded_inputs(read_record(runs_dir, resume), manifest, inputs, verb=argument("resume").rstrip("="),
                                given_as=_given_as(inputs))
    else:
        bound = bind_inputs(manifest, inputs, given_as=_given_as(inputs))
    if workers is None and scheduler is None:
        _plan_here(manifest)  # a plan it refuses (an executor's memory, a vendor) is refused before anything is written
    from hetflow.engine.run.cancel import Cancel, ctrl_c_requests, current as current_cancel

    # from its cluster and run lock on, a Ctrl-C asks the run to stop where it can (its record then says cancelled),
    # rather than raising at whatever line runs, inside the locks of the run's own threads
    with ctrl_c_requests(current_cancel() or Cancel()) as cancel, \
            _session(path, doc, manifest, runs_dir, resume, schedule_slot,
                     (workers, threads_per_worker, scheduler, place, threads, dashboard)) as (cluster, schedule, _):
        return _execute(manifest, cluster, place, bound, runs_dir=runs_dir, overrides=given, num_workers=threads,
                        on_event=on_event, cache_dir=cache_dir, use_cache=cache, matrix_point=mpoint, resume=resume,
                        schedule=schedule, named=named, cancel=cancel)


def sweep(path: str | os.PathLike, params: Params | None = None, *, runs_dir: str | os.PathLike = "runs",
          workers: int | None = None, scheduler: Any = None, cache: bool = True,
          inputs: Mapping[str, Any] | None = None, max_points: int = matrix.DEFAULT_MAX_POINTS,
          threads: int | None = None, threads_per_worker: int | None = None, place: Mapping[str, str] | None = None,
          cache_dir: str | os.PathLike | None = None, on_event: Callable[[dict], None] | None = None,
          on_point: Callable[[dict], None] | None = None, schedule_slot: str | None = None,
          parallel: int = 1, resume: str | None = None, dashboard: bool = True) -> Sweep:
    """Run every point of a manifest's ``matrix:``, one run each, and return the :class:`Sweep`.

    Takes :func:`run`'s arguments; ``max_points`` caps the expansion, and
    ``on_point`` is called with each point's row of ``sweep.json`` when
    the point ends. A point that fails does not stop the sweep; an
    exception ``on_point`` raises does: it is raised to the caller, and
    ``sweep.json`` says ``failed`` with an ``error`` naming it and the
    points left pending, which ``resume`` runs.
    ``parallel`` runs up to that many points at once (threads; on a
    cluster their tasks share its workers); each point holds the run lock
    of its own params. ``resume`` names a cancelled or failed sweep to
    continue in its own folder (its id, or ``latest``, or a unique prefix): only the points that did not succeed run,
    a point whose run had started continuing that run. SIGINT and SIGTERM
    under :func:`hetflow.engine.run.cancel.stopping` cancel the sweep
    (:class:`RunCancelled`; ``sweep.json`` says ``cancelled``).
    """
    from hetflow.engine.store.locks import RunLock, lock_path
    from hetflow.engine.store.runs import manifest_from_record, new_sweep, read_record
    from hetflow.engine.run.cancel import Cancel, ctrl_c_requests, current as current_cancel, interrupts_held
    from hetflow.engine.batch.sweeps import resume_rows, run_points

    path, doc = _source(path)
    _refuse_after_main_ended("sweep")
    workers, threads, threads_per_worker, max_points, parallel = _counted(_check(
        runs_dir=runs_dir, workers=workers, cache=cache, inputs=inputs, max_points=max_points, threads=threads,
        threads_per_worker=threads_per_worker, place=place, cache_dir=cache_dir, on_event=on_event,
        on_point=on_point, schedule_slot=schedule_slot, parallel=parallel, resume=resume, dashboard=dashboard),
        "workers", "threads", "threads_per_worker", "max_points", "parallel")
    _refuse_unguarded("sweep", workers, scheduler)
    named, runs_dir = os.fspath(runs_dir), _anchored(runs_dir, "runs_dir")
    cache_dir = _anchored(cache_dir, "cache_dir") if cache_dir else None
    where = path
    with contextlib.suppress(OSError):  # without a working directory, loading a relative path says so
        where = os.path.abspath(path)
    if resume:
        from hetflow.engine.store.runs import resolve_id

        resume = resolve_id(named, resume, "sweep")  # named as hetflow run --resume names it: latest, a prefix
        folder = os.path.join(runs_dir, resume)
        try:
            with open(os.path.join(folder, "sweep.json"), encoding="utf-8") as f:
                summary = json.load(f)
        except (OSError, ValueError):
            raise UsageError(f"no sweep {resume!r} in {named}") from None
        if params:
            raise UsageError(f"{argument('resume')} continues a sweep with the params it had; it takes no {argument('params')}")
        if os.path.abspath(summary["manifest"]) != os.path.abspath(path):
            raise UsageError(f"sweep {resume} ran {summary['manifest']}, not {path}")
        _refuse_live("sweep", resume, summary)
        given = dict(summary.get("overrides") or {})
        rows = resume_rows(summary, runs_dir)
        doc = _began(path, doc, folder, summary, resume, given, [row for row, again in rows if again is None])
        _sweep_code_changed(doc, given, runs_dir, summary, resume, [row for row, again in rows if again is None])
        todo = []
        for row, again in rows:
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
    from hetflow.engine.run.inputs import bind_inputs, recorded_inputs

    took = _inputs_taken(summary, runs_dir) if resume else None
    if took is not None:
        # its points go on with the arrays its first points had, as a resumed run does: never a sweep of two inputs
        bound = recorded_inputs(took, first, inputs, verb=argument("resume").rstrip("="), given_as=_given_as(inputs))
    else:
        bound = bind_inputs(first, inputs, given_as=_given_as(inputs))
    # each point's record names the manifest file the sweep began with, whatever the working directory is by the
    # time the point runs: named as given (m.yaml), a point run after a %cd named another folder's file
    if resume:
        todo = [(row, (_file_at(job[0], where), *job[1:])) for row, job in todo]
        first = todo[0][1][0] if todo else first
    else:
        jobs = [(_file_at(manifest, where), mpoint, given) for manifest, mpoint, given in jobs]
        first = jobs[0][0]
    if workers is None and scheduler is None:
        _plan_here(first)  # as run() does: what the points share, refused before the sweep's folder is made
    # one flag for the sweep and its points' runs: an interrupt of the Python API stops them all, as a request
    # (see run())
    with ctrl_c_requests(current_cancel() or Cancel()) as cancel, \
            _session(path, doc, first, runs_dir, None, schedule_slot,
                     (workers, threads_per_worker, scheduler, place, threads, dashboard), lock=False) as (cluster, schedule, lock_name), \
            _slot_lock(runs_dir, path, doc, lock_name, jobs[0][2] if schedule else None) as whole:

        def run_one(job: tuple, row: dict, on_run_id: Callable[[str], None]) -> Run:
            manifest, mpoint, given, again = job
            # the run says whose point it is: a run the summary's last write did not name is still the sweep's
            mpoint = {**mpoint, "sweep": summary["sweep_id"]}
            own = lock_path(runs_dir, path, lock_name, manifest.params)
            with RunLock(own, manifest=path, run=again) if own != whole else contextlib.nullcontext():
                # the points' runs share the event sink: each event names its run and point
                done = _execute(manifest, cluster, place, bound, runs_dir=runs_dir, overrides=given,
                                num_workers=threads, on_event=on_event, event_tag={"point": mpoint["name"]},
                                on_run_id=on_run_id, cancel=cancel, cache_dir=cache_dir, use_cache=cache,
                                matrix_point=mpoint, schedule=schedule, resume=again)
            return done

        # A Ctrl-C (a KeyboardInterrupt at whatever line runs) is held from the sweep folder's making to the call
        # of run_points, which holds it again from its first lines: one that came in between left a folder without
        # its summary (empty, or its manifest.yaml alone), or a summary saying running for as long as the process
        # lived. One that came cancels the sweep before its first point: its summary says cancelled, every point
        # pending.
        with interrupts_held() as came:
            if not resume:
                _, folder, summary = new_sweep(runs_dir, first.name, path, points, jobs[0][2], schedule=schedule,
                                               source=doc.text)
                todo = [(row, (manifest, mpoint, given, None))
                        for (manifest, mpoint, given), row in zip(jobs, summary["points"])]
                jobs.clear()  # the manifests are todo's alone now: run_points lets each go once its point has run
        if came:
            cancel.request("SIGINT")
        run_points(folder, summary, todo, run_one, parallel=parallel, on_point=on_point, resume=bool(resume),
                   cancel=cancel)
    from hetflow.engine.results import Sweep

    done = Sweep(folder)  # its points' runs are read when asked for: a big sweep's records stay on disk
    done.path = os.path.join(named, os.path.basename(folder))  # named as runs_dir was, read where it was made
    return done


@contextlib.contextmanager
def _slot_lock(runs_dir: str, path: str, doc: Any, lock_name: str, overrides: dict | None) -> Iterator[str | None]:
    """For a sweep run as a schedule's slot (``overrides`` its ``-p``, not None): the run lock of the manifest's own
    params, held for the whole sweep, and its path; a point whose params are those takes no second one.

    The schedule asks that lock whether a run of the manifest is active (``max_active``). The points' own locks
    were all a sweep held: a slot started by a ``run-due`` while the sweep of the one before ran was not told to
    wait or skip, and ran a second sweep whose points met the first's at their locks, each failing one.
    """
    if overrides is None:
        yield None
        return
    from hetflow.engine.store.locks import RunLock, lock_path

    whole = lock_path(runs_dir, path, lock_name, compile_manifest(doc, overrides).params)
    with RunLock(whole, manifest=path):
        yield whole


def _inputs_taken(summary: Mapping[str, Any], runs_dir: str) -> dict | None:
    """The record of a run of one of the sweep's points that took arrays for ``input`` stages, or None: the arrays
    every point of the sweep took (the points of a sweep share its ``inputs``)."""
    from hetflow.engine.store.runs import read_fields

    for row in summary.get("points") or []:
        if not isinstance(row, Mapping) or not row.get("run_id"):
            continue
        record = read_fields(os.path.join(runs_dir, row["run_id"], "record.json"), ("run_id", "inputs"))
        if record and record.get("inputs"):
            return record
    return None


def __getattr__(name: str) -> Any:
    # the result classes load with the first call that makes one: ``hetflow validate`` needs none of them
    if name in ("Plan", "Run", "Failure", "Sweep"):
        from hetflow.engine import results

        return getattr(results, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
