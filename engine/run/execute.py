"""Run a plan: lower it, let Dask execute it, write the run record.

The lowered tasks call a :class:`~hetflow.engine.run.runtime.LocalRuntime`
(:mod:`hetflow.engine.run.runtime`: the task wrappers and the
:class:`~hetflow.engine.run.runtime.HandleTable` of reference-counted
handles). When the run ends, succeeded or failed, the thread pool is
drained and every handle still held is released, so a finished run
leaves zero live activations.

:func:`execute` is the whole run: create the run folder (or reopen it
for ``resume``) and a ``running`` record, compute every partition's cache
key (none when the cache is off), create executors, lower, run the graph (``dask.threaded.get`` on a
pool it owns, in rounds when emulator phases decide the chunk count; or
on a Dask cluster through :mod:`hetflow.engine.run.distributed`), release,
write outputs and the final record. A partition task takes its outputs
from the cache when its key has a complete entry (:class:`CacheUse`),
retries and times out as its stages say, and reports every attempt to
the run's event stream.

A run waits for its graph through :meth:`hetflow.engine.run.cancel.Cancel.wait`,
so SIGINT or SIGTERM (under :func:`hetflow.engine.run.cancel.stopping`) ends
the wait at once: no partition starts after it, running ones are abandoned
as timed-out attempts are (the pool is not joined; the closed
:class:`HandleTable` releases whatever they return), and the record says
``cancelled`` with the signal, the time and the finished partitions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
import time
import traceback
import weakref
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable, Mapping

import dask.threaded

from hetflow.engine.store import owner
from hetflow.engine.run import threads
from hetflow.engine.store.cache import Cache, CacheUse, partition_keys, uncached_stages
from hetflow.engine.run.cancel import Cancel, Cancelled, current, interrupts_held
from hetflow.engine.errors import RunCancelled, RunFailed, StageFailure, StorageUnavailable, UsageError, is_storage_error
from hetflow.engine.heap import frozen_heap
from hetflow.engine.run.events import EventStream, Sink, run_event
from hetflow.engine.run.lowering import run_in_order
from hetflow.engine.manifest.validate import Manifest
from hetflow.engine.run.phases import PhaseRunner, phase_status, witness_activation
from hetflow.engine.plan.planner import Plan
from hetflow.engine.run.runtime import ClusterFailure, HandleTable, LocalRuntime, StageTimedOut
from hetflow.engine.store.records import (
    RECORD_FORMAT,
    Batch,
    Stopwatch,
    digest_portable,
    encode_entries,
    encode_events,
    encode_value,
    json_writer,
    micros,
    new_run_dir,
    npy_writer,
    provenance,
    remove_partial_writes,
    remove_temporaries,
    utc_iso,
    versions,
    write_json_atomic,
    write_text_atomic,
)
from hetflow.executors import create, inventory
from hetflow.executors.files import digest_and_stamp, file_digest, portable_stamp
from hetflow.executors.base import Executor, ExecutorError, PortableActivation

__all__ = ["StageFailure", "StageTimedOut", "ClusterFailure", "HandleTable", "LocalRuntime", "RunResult", "execute",
           "create_executors"]


@dataclass(frozen=True)
class RunResult:
    run_id: str
    run_dir: str
    record_path: str
    status: str
    record: dict


def create_executors(plan: Plan) -> dict[str, Executor]:
    return {e.name: create(e.vendor, e.name, e.device, memory_limit=e.memory_limit) for e in plan.executors.values()}


def execute(manifest: Manifest, plan: Plan, **kwargs: Any) -> RunResult:
    if kwargs.get("plan_json") is None:
        # built before the heap is frozen: the plan's data lives as long as the run, out of the GC's reach with
        # the plan, and the pass that builds it pauses the GC without asking how much is frozen (a walk of it)
        kwargs["plan_json"] = _plan_data(plan)[0]
    from hetflow.executors import plugins

    with contextlib.ExitStack() as stack:
        try:
            # the ops its cache keys name by their plugins' code are the ones its stages run, to its end
            stack.enter_context(plugins.in_use(getattr(manifest, "plugins", ())))
        except plugins.PluginError as e:
            raise UsageError(str(e)) from None
        with frozen_heap(len(plan.nodes) + len(plan.bridges)):
            return _execute(manifest, plan, **kwargs)


def _execute(
    manifest: Manifest,
    plan: Plan,
    *,
    runs_dir: str = "runs",
    overrides: Mapping[str, Any] | None = None,
    executors: Mapping[str, Executor] | None = None,
    num_workers: int | None = None,
    cluster: Any = None,
    on_event: Sink | None = None,
    cache_dir: str | None = None,
    use_cache: bool = True,
    matrix_point: Mapping[str, Any] | None = None,
    resume: str | None = None,
    schedule: Mapping[str, Any] | None = None,
    inputs: Mapping[str, Mapping[str, Any]] | None = None,
    cancel: Cancel | None = None,
    verifies: str | None = None,
    plan_json: dict | None = None,
    event_tag: Mapping[str, Any] | None = None,
    on_run_id: Callable[[str], None] | None = None,
) -> RunResult:
    """Run ``plan`` and write its record; raises :class:`RunFailed` when a stage fails.

    ``cluster`` (a :class:`hetflow.engine.run.distributed.Cluster`) runs the
    same task graph on a Dask cluster instead of the threaded scheduler;
    ``on_event`` receives every event of the run's stream as it happens.

    Partitions are taken from, and stored in, the cache under ``cache_dir``
    (default ``RUNS_DIR/.cache``) unless ``use_cache`` is false.
    ``resume`` names an earlier run to continue in its own folder: what it
    finished is in the cache, the rest runs.
    ``schedule`` (``{slot, cron, timezone}``) marks a run started by
    ``hetflow schedule`` for one slot; it goes into the record as is.
    ``inputs`` describes the arrays handed in for ``input`` stages (stage
    name -> shape, dtype, bytes, digest); it goes into the record as is.
    A failed run also writes ``traceback.txt`` in its folder, named by the
    record's ``error.traceback_file``.

    ``cancel`` (a :class:`hetflow.engine.run.cancel.Cancel`, set by SIGINT or
    SIGTERM under :func:`hetflow.engine.run.cancel.stopping`, whose flag is the
    default) stops the run:
    no new partition starts, running ones are abandoned, every handle is
    released and the record says ``cancelled`` with the signal, the time
    and the partitions that had finished; then :class:`RunCancelled` is
    raised. A ``KeyboardInterrupt`` is taken as a SIGINT's cancellation.
    ``verifies`` names the run this one re-executes for ``hetflow verify``;
    the record keeps it, and such runs are never an earlier run's baseline.
    ``plan_json`` is ``plan.to_json()`` when the caller has it already.
    ``event_tag`` (``{"point": NAME}``, a sweep's) marks a run that shares
    ``on_event`` with other runs: each event handed to it also names the
    run (``run``) and carries the tag; the record's own events do not.
    ``on_run_id`` is called with the run's id as soon as its folder exists.

    A resumed run keeps every earlier attempt under ``attempts`` (see
    :func:`_earlier_attempts`); its ``started_at`` is the first attempt's
    and its ``duration_s`` the sum of the attempts'. However the run ends,
    by an error, an interrupt or a second signal, its record ends in a
    terminal state.
    """
    cancel = cancel or current() or Cancel()
    phases = getattr(manifest, "phases", {})
    # A Ctrl-C (Python's own handler, a KeyboardInterrupt at any line) is held from here until the run's record
    # can say it was cancelled: one that came between the running record's hand-over to its writer and the
    # handler below left that record running for as long as the process lived
    held = contextlib.ExitStack()
    came = held.enter_context(interrupts_held())
    try:
        if resume is not None:
            run_id, run_dir = resume, os.path.join(runs_dir, resume)
        else:
            if cancel.requested:
                # a sweep's point (or a run) that a signal stopped before it began has no folder to leave behind: a
                # second signal's exit would leave it empty
                raise RunCancelled(f"run of {manifest.name} cancelled by {cancel.signal or 'request'} before it began",
                                   None, cancel.signal)
            try:
                run_id, run_dir = new_run_dir(runs_dir, manifest.name, manifest.digest)
            except OSError as e:
                if not is_storage_error(e):
                    raise
                raise StorageUnavailable(f"a run's folder could not be made in {runs_dir}: {e.strerror}") from e
        record_path = os.path.join(run_dir, "record.json")
        # until the run's own forced-exit hook is in place (after its running record), a second signal leaves no
        # empty folder behind, which a sweep's summary would name as a cancelled point's run
        unbegun = cancel.on_forced_exit(lambda: _remove_unbegun(run_dir)) if resume is None else (lambda: None)
        earlier = _earlier_attempts(record_path) if resume is not None else []
        resumed_blas = earlier[-1].pop("blas", None) if earlier else None  # its threads, not kept among the attempts
        if resume is not None:
            # an earlier attempt killed during a write left its temporary file (a whole record perhaps, saying what
            # this one's will not); its folder is this attempt's now, under its lock
            remove_temporaries(run_dir)
        if on_run_id is not None:
            on_run_id(run_id)
        cancel.name_subject("run", run_id, record_path)
        watch = Stopwatch()
        started = watch.started
        # before the keys: a file that changes between the two fails its load stage, whose check is by these digests,
        # rather than one key made from bytes the stage does not check
        data_files, reads = _data_files(manifest)
        programs = _programs(manifest)
        if earlier:
            _say_changed_data(data_files, earlier[-1].get("data") or {}, run_id)
            _say_changed_programs(programs, earlier[-1].get("programs") or {}, run_id)
        # a phase's array is not content-addressed (the guest's run is its source), so its consumers are not cached;
        # without the cache no key is computed (0.6 s of a 10,000-partition run)
        keys = partition_keys(plan, uncached_stages(manifest)) if use_cache else {}
        cache_use = CacheUse(Cache(cache_dir or os.path.join(runs_dir, ".cache")), keys, read=use_cache, write=use_cache)
        if resumed_blas is None and earlier and earlier[-1].get("status") == owner.DIED:
            # a killed attempt's record never named its threads: the entries it stored say them
            resumed_blas = _threads_stored_since(cache_use.cache, keys, earlier[-1].get("started_at"))
        record: dict[str, Any] = {
            "format": RECORD_FORMAT,
            "run_id": run_id,
            "status": "running",
            "started_at": (earlier[0].get("started_at") if earlier else None) or utc_iso(started),
            "ended_at": None,
            "duration_s": None,
            "manifest": {"file": os.path.abspath(manifest.file), "name": manifest.name,
                         "digest": manifest.digest, "resolved": manifest.resolved},
            "params": dict(manifest.params),
            "overrides": dict(overrides or {}),
            "matrix_point": dict(matrix_point) if matrix_point else None,
            "schedule": dict(schedule) if schedule else None,
            "plugins": [p.to_json() for p in getattr(manifest, "plugins", ())],
            "data": data_files,
            "programs": programs,
            "inputs": {k: dict(v) for k, v in (inputs or {}).items()},
            "resumed": resume is not None,
            "attempts": earlier + [{"attempt": len(earlier) + 1, "started_at": utc_iso(started), "ended_at": None,
                                    "duration_s": None, "status": "running"}],
            "verifies": verifies,
            "owner": owner.current(),
            "host": None,  # the initial write asks git for it
            "scheduler": cluster.describe() if cluster is not None else {"kind": "threads", "workers": num_workers or os.cpu_count()},
            "versions": versions(),
            "inventory": [o.to_json() for o in inventory(_named_vendors(manifest, plan))],
            "executors": None,  # the devices each executor bound, once they are created (_bound_executors)
            "plan": plan_json if plan_json is not None else plan.to_json(),
            "nodes": {n: {"status": "pending", "partition": p.partition, "executor": p.executor}
                      for n, p in plan.nodes.items()},
            "tasks": [],
            "outputs": {},
            "error": None,
            "live_activations_after": None,
        }
        if earlier:
            _say_changed_plugins(record["plugins"], earlier[-1].get("plugins") or {}, run_id)
        # the plan and the resolved manifest are the record's largest constant parts: encoded once for every write
        known = _PLAN_DATA.get(id(plan))
        encoded = {"plan": known[1] if known is not None and known[0] is record["plan"] else encode_entries(record["plan"]),
                   "manifest": encode_value(record["manifest"])}
        first_written = _initial_write(record_path, record, encoded, manifest.file)
        final_written = threading.Event()
        # One writer of the final record at a time. A second signal's forced exit takes it, then seals the record:
        # a run thread then never starts a write that os._exit would cut short, nor replaces the record the exit
        # wrote. Reentrant: the signal may interrupt the main thread in the middle of its own write.
        writing = threading.RLock()
        sealed = threading.Event()
        runtime: Any = None
        sink = None
        if on_event is not None:
            tag = {"run": run_id, **event_tag} if event_tag else None

            def sink(event: dict) -> None:
                try:
                    # a copy: what the caller's code puts in it or takes out (a value no JSON holds) is not the record's
                    on_event({**event, **tag} if tag else dict(event))
                except BaseException as e:  # noqa: BLE001 - a sys.exit() in it too: re-raised, named in the record
                    # the caller's own code stopped the run: its record says so, not only what was raised
                    e.hetflow_raised_in = "on_event"
                    raise

        stream = EventStream([sink] if sink is not None else [])

        def forced_exit() -> None:
            # A second signal: the process ends now (or, in the Python API, the caller gets a KeyboardInterrupt);
            # leave a record that says so, unless the full one is written. Once sealed, no later write replaces it.
            got = writing.acquire(timeout=_SEAL_WAIT_S)  # a write under way ends first; a stuck disk does not hold it
            try:
                sealed.set()
                if final_written.is_set():
                    return
                _write_ended(record_path, record, encoded, Cancelled(cancel.signal, cancel.at), cancel, runtime,
                             stream, watch, first_written, forced=True)
                # the signal may have come in the middle of the final write, which never ends now
                remove_partial_writes(record_path)
            finally:
                if got:
                    # a run thread of a process that lives on must not wait on it for ever: sealed stops its writes
                    writing.release()

        forget_hook = cancel.on_forced_exit(forced_exit)
        unbegun()
        # the outputs' files, each written as soon as it is known and committed with the final record
        outputs = Batch()
    except BaseException:
        held.close()
        raise
    try:
        held.close()
        if came:
            raise KeyboardInterrupt
        first_written(durable=False)  # a running record that could not even be written: stop before the work
        failure: BaseException | None = None
        results: list[Any] = []
        live_after: dict[str, int] | None
        plan = _reads_checked(plan, reads)
        if cluster is not None:
            # phase tasks that run on the client are recorded as the threaded mode records them
            recorder = LocalRuntime(plan, {}, emit=stream.emit) if phases else None
            phase_runner = PhaseRunner(manifest.emulators, phases, recorder._event) if phases else None
            record["threads"] = threads.on_cluster(cluster)  # the workers' pools, set first on a local cluster
            cache_use.blas = threads.recorded_blas(record)
            record["executors"] = _planned_executors(plan, cluster)
            try:
                runtime, results, failure, live_after = cancel.wait(
                    lambda: cluster.run_graph(plan, run_id, stream, cache_use if use_cache else None, phase_runner))
            except (Cancelled, KeyboardInterrupt) as e:
                # the workers' handles go with the run's plugin when the cluster closes; what is left is not known here
                failure, live_after = e, None
                runtime = LocalRuntime.__new__(LocalRuntime)
                runtime.events, runtime.running = stream.tasks(), _still_running(stream.events)
            finally:
                if phase_runner is not None:
                    phase_runner.close()
        else:
            instances = dict(executors) if executors is not None else create_executors(plan)
            record["executors"] = _bound_executors(instances)
            # every task runs in this process: a bridge runs inside its producer's task, not as two of its own
            runtime = LocalRuntime(plan, instances, emit=stream.emitter(), cache=cache_use if use_cache else None,
                                   cancel=cancel, fold_bridges=True)
            record["warm_up"] = [{"worker": None, "seconds": runtime.warm_up()}]
            stream.emit(run_event("started", run_id, tasks=runtime.graph.reported_tasks(), mode="threads"))
            # partitions at once x BLAS threads <= cores, with the sweep's points and other runs of this process
            workers = num_workers or os.cpu_count() or 1
            at_once = threads.width(plan, workers)
            phase_runner = PhaseRunner(manifest.emulators, phases, runtime._event) if phases else None
            # no two partitions of a chain can run at once: its tasks run in the run's own thread, in order,
            # without a hand-over to a pool thread and back for each
            pool = _take_pool(workers) if at_once > 1 or phase_runner else None

            def run_graph() -> list[Any]:
                dsk, graph_keys = runtime.graph.dsk, runtime.graph.keys
                if phase_runner is not None:
                    first = phase_runner.round1()
                    dask.threaded.get(first, list(first), pool=pool)
                    cancel.check()
                    second = phase_runner.round2()
                    dsk, graph_keys = {**dsk, **second}, graph_keys + [k for k in second if k.startswith("phase:")]
                elif pool is None:
                    # one after another in this thread, in Dask's order: dask.threaded's machinery (a queue,
                    # callbacks, its executor) and dask.core.get's (the graph converted and ordered again on every
                    # call) were 0.1-0.2 ms and 0.4 ms of a short run
                    return run_in_order(runtime.graph)
                return dask.threaded.get(dsk, graph_keys, pool=pool)

            # a resumed run at the BLAS threads its earlier attempt had (a point of a --parallel sweep, or a run of a
            # cluster's one-thread workers, resumed alone): the partitions that attempt finished are entries computed
            # with them, which a run at other threads computes again, and its outputs are what it began computing
            with threads.claim_run(at_once), threads.POOLS.pinned(resumed_blas):
                record["threads"] = threads.POOLS.describe(at_once)
                cache_use.blas = threads.recorded_blas(record)
                try:
                    results = cancel.wait(run_graph)
                except BaseException as e:  # noqa: BLE001 - recorded, then re-raised below
                    failure = e
                finally:
                    stopped = isinstance(failure, (Cancelled, KeyboardInterrupt))
                    if stopped:
                        cancel.request("SIGINT")  # a KeyboardInterrupt without stopping(): no new partition starts
                    # a cancelled run does not wait for the partitions it abandons: they release what they return
                    if pool is not None:
                        _give_back_pool(pool, reuse=failure is None, stopped=stopped)
                    runtime.handles.close()
                    if phase_runner is not None:
                        phase_runner.close()
            live_after = {name: ex.live_activations() for name, ex in instances.items()}

        ended = watch.now()
        # copies: the stream keeps the events as they came, with epoch seconds and their arrival time
        record["tasks"] = [dict(e) for e in sorted(runtime.events, key=itemgetter("start"))]
        for event in record["tasks"]:
            if cluster is None:
                event.pop("time", None)
            # the ISO stamps have millisecond resolution; offset_s keeps sub-millisecond tasks apart on a timeline
            event["offset_s"] = micros(event["start"] - started)
            event["start"], event["end"] = utc_iso(event["start"]), utc_iso(event["end"])
        _node_status(record, runtime, failure)
        cancelled = isinstance(failure, (Cancelled, KeyboardInterrupt))
        if cancelled:
            record["cancelled"] = _cancel_info(cancel, record["tasks"], runtime)
        if phases and not cancelled:
            record["phases"] = phase_status(phase_runner, record["tasks"])
        if failure is None:
            by_key = dict(zip(runtime.graph.keys, results))
            for name, key in runtime.graph.output_keys.items():
                portable: PortableActivation = by_key[key]
                file = f"{name}.npy"
                # an output's file is new in the run's folder (or a failed attempt's, which no record names)
                outputs.add(os.path.join(run_dir, file), npy_writer(portable.to_array()), fresh=True, sync_now=True)
                record["outputs"][name] = {
                    "tensor": plan.outputs[name], "file": file, "shape": list(portable.shape.dims),
                    "dtype": portable.dtype.value, "bytes": len(portable.bytes), "digest": digest_portable(portable),
                }
            for name, (pid, fieldname) in getattr(manifest, "phase_outputs", {}).items():
                field = phases[pid].kind.array_field(fieldname) if fieldname is not None else None
                if phases[pid].kind.array and fieldname is None or field is not None:
                    # an array (the witness table, or an array field): an .npy, its columns in the record
                    if field is None:
                        from hetflow.executors.emulator import WITNESS_COLUMNS as columns

                        portable = phase_runner.results[pid]["portable"]
                    else:
                        columns = field.columns
                        portable = witness_activation(phase_runner.array(pid, fieldname))
                    file = f"{name}.npy"
                    outputs.add(os.path.join(run_dir, file), npy_writer(portable.to_array()), fresh=True, sync_now=True)
                    record["outputs"][name] = {
                        "phase": pid, **({"field": fieldname} if field is not None else {}), "file": file,
                        "shape": list(portable.shape.dims), "dtype": portable.dtype.value,
                        "bytes": len(portable.bytes), "digest": digest_portable(portable), "columns": list(columns)}
                else:
                    value, digest = phase_runner.output(pid, fieldname)
                    record["outputs"][name] = {"phase": pid, "field": fieldname, "value": value, "digest": digest}
        elif not cancelled:
            record["error"] = _describe_failure(failure, plan, manifest)
            write_text_atomic(os.path.join(run_dir, "traceback.txt"), _traceback_text(failure))
            record["error"]["traceback_file"] = "traceback.txt"
        _end_attempt(record, "succeeded" if failure is None else "cancelled" if cancelled else "failed", started, ended)
        record["live_activations_after"] = live_after
        if getattr(runtime, "recoveries", None):
            record["recovery"] = runtime.recoveries
        if cluster is not None:
            record["warm_up"] = [{"worker": e.get("worker"), "seconds": e.get("duration_s")} for e in stream.events
                                 if e.get("kind") == "run" and e.get("event") == "warm-up"]
        # Hits and stores happen where partitions run, on workers in cluster mode: the task events carry them.
        done = [e for e in record["tasks"] if e["kind"] == "partition" and e["status"] == "succeeded"]
        record["cache"] = {**cache_use.to_json(), "hits": [e["id"] for e in done if e.get("cached")],
                           "stored": [e["id"] for e in done if e.get("stored")],
                           "store_failed": {e["id"]: e["store_error"] for e in done if e.get("store_error")},
                           "damaged": {e["id"]: e["cache_damaged"] for e in done if e.get("cache_damaged")},
                           "unreadable": {e["id"]: e["cache_unreadable"] for e in done if e.get("cache_unreadable")},
                           "other_threads": {e["id"]: e["cache_other_threads"] for e in done
                                             if e.get("cache_other_threads")}}
        record["events"] = list(stream.events)  # the stream goes on: the run's own end comes after the record
        encoded.update(tasks=encode_events(record["tasks"]), events=encode_events(record["events"]),
                       nodes=encode_events(record["nodes"]))
        first_written(durable=False)
        # written whole: a Ctrl-C (Python's own, or the Python API's second) in the waits of the commit left a
        # thread's lock taken, and the record as the running one
        with interrupts_held() as late, writing:
            if not sealed.is_set():
                # the outputs land first and the record that names them last, their fsyncs at once and at
                # the same time as the running record's (the disk's journal commits them together); the
                # final record's rename never precedes the running record's: it waits for a rename under way,
                # and one not begun yet never happens
                outputs.add(record_path, json_writer(record, encoded))
                outputs.commit(before_replace=lambda: first_written(supersede=True))
                final_written.set()
            else:
                outputs.abandon()
        if late:
            raise KeyboardInterrupt
    except BaseException as e:
        outputs.abandon()  # with them, an output a full disk cut short, and the space it held
        wrote = False
        with writing:
            if not final_written.is_set() and not sealed.is_set():
                wrote = _write_ended(record_path, record, encoded, e, cancel, runtime, stream, watch, first_written)
                final_written.set()
        forget_hook()
        if is_storage_error(e) or isinstance(e, FileNotFoundError) and not os.path.isdir(run_dir):
            raise _unwritten(e, run_id, run_dir, record_path if wrote else None) from e
        raise
    forget_hook()
    stream.emit(run_event(record["status"] if failure is not None else "finished", run_id,
                          duration_s=record["duration_s"],
                          **({"origin": record["error"]["origin"]} if (record["error"] or {}).get("origin") else {}),
                          error=(record["error"] or {}).get("message") or (f"by {record['cancelled']['signal']}" if cancelled else None)))
    result = RunResult(run_id, run_dir, record_path, record["status"], record)
    if cancelled:
        info = record["cancelled"]
        raise RunCancelled(f"run {run_id} cancelled by {info['signal']}: {len(info['finished'])} of "
                           f"{len(plan.partitions)} partitions had finished", record_path, info["signal"]) from None
    if failure is not None:
        if not isinstance(failure, (StageFailure, ExecutorError, ClusterFailure)):
            raise failure
        raise RunFailed(record["error"]["message"], record_path, record) from failure
    return result


functools.update_wrapper(execute, _execute)

# id(plan) -> (plan.to_json(), its text in the record), while the plan lives
_PLAN_DATA: dict[int, tuple[dict, str]] = {}


def _plan_data(plan: Plan) -> tuple[dict, str]:
    """The plan's data for the record and its JSON text, made once per plan in this process.

    A plan does not change once made; a process that runs one plan again
    made its data and text per run (70 ms of a 10,000-stage run here). The
    records of those runs share the dict: records are read, never changed.
    """
    key = id(plan)
    got = _PLAN_DATA.get(key)
    if got is None:
        data = plan.to_json()
        got = _PLAN_DATA[key] = (data, encode_entries(data))
        weakref.finalize(plan, _PLAN_DATA.pop, key, None)
    return got


# Idle thread pools of finished runs, by size: a short run spent 1-2 ms starting its pool's threads.
_IDLE_POOLS: dict[int, list[ThreadPoolExecutor]] = {}
_IDLE_LOCK = threading.Lock()
_IDLE_MAX = 4  # per size: as many as a sweep's concurrent points commonly are


def _take_pool(size: int) -> ThreadPoolExecutor:
    """A pool of ``size`` threads for one run: an idle one a finished run gave back, or a new one.

    Each run has a pool of its own while it runs (concurrent runs of a
    sweep never share one), so a run's tasks wait for no other run's.
    """
    with _IDLE_LOCK:
        idle = _IDLE_POOLS.get(size)
        if idle:
            return idle.pop()
    return ThreadPoolExecutor(max_workers=size, thread_name_prefix="hetflow")


def _give_back_pool(pool: ThreadPoolExecutor, reuse: bool, stopped: bool) -> None:
    """The end of a run's use of ``pool``. Only a run that succeeded gives it back for the next: its graph is
    done, so no task of it is running. A failed run's other tasks may still be running and are waited for,
    as before; a cancelled run's are abandoned (not waited for, queued ones dropped) with the pool."""
    if reuse:
        with _IDLE_LOCK:
            idle = _IDLE_POOLS.setdefault(pool._max_workers, [])
            if len(idle) < _IDLE_MAX:
                idle.append(pool)
                return
        pool.shutdown(wait=True)
        return
    pool.shutdown(wait=not stopped, cancel_futures=stopped)


_SEAL_WAIT_S = 5.0


def _initial_write(record_path: str, record: dict, encoded: dict[str, str], manifest_file: str
                   ) -> Callable[..., None]:
    """Write the ``running`` record, durable before it is renamed into place, while the run goes on; returns the
    wait for it.

    The record is made here, in the run's thread: its ``host`` (the
    manifest's provenance, in ``record`` too: the key exists, so the dict
    does not change size under the run's thread), its text, and its
    temporary file (:class:`~hetflow.engine.store.records.Batch`). What waits on the disk
    is left to one of the process's record writers: the ``fsync`` (about
    0.3 ms here, more while the run's work holds the cores) and the rename
    after it, so they overlap the run. A writer that made the whole record
    took the GIL for it only when the run's thread blocked, the whole
    record behind the run's work in a short run: its write ended after the
    graph, and the final record waited for it.

    The final record and a forced exit's wait for it first, so the
    ``running`` record never replaces a later one. The writers are started
    once per process (a thread's start was 0.1-2 ms of every run, the most
    on a loaded machine), and are not daemons: an interpreter that exits
    waits for the write to end. The wait re-raises what the write raised
    (``raise_error=False``: not); ``durable=False`` waits only for ``host``,
    known once this returns. ``supersede=True`` is the final record's wait,
    once it is durable: a ``running`` record not yet renamed into place is
    then never renamed (:meth:`~hetflow.engine.store.records.Batch.supersede`),
    so a slow fsync of it (1-2 ms here while the run's work held both cores)
    does not hold the final record back. ``forced=True`` is a second
    signal's forced exit's: it supersedes that record too, else waits for
    the writer without taking a lock, at most ``_SEAL_WAIT_S``.
    """
    failed: list[BaseException] = []
    ended: list[bool] = []  # the writer's end, looked at without a lock
    pending = Batch()
    try:
        record["host"] = provenance(manifest_file)
        # the values no later write changes are encoded once, for this record and the final one
        encoded.update((k, encode_value(record[k])) for k in _UNCHANGING if k not in encoded)
        pending.add(record_path, json_writer(dict(record), encoded))
    except BaseException as e:  # noqa: BLE001 - handed to the wait, as the writer's own errors are
        pending.abandon()
        if not isinstance(e, Exception):
            raise
        failed.append(e)
        done = None
    else:
        def finish() -> None:
            try:
                pending.commit()
            except BaseException as e:  # noqa: BLE001 - handed to the wait
                failed.append(e)
            finally:
                ended.append(True)

        done = _record_writers().submit(finish)

    def wait(raise_error: bool = True, durable: bool = True, supersede: bool = False, forced: bool = False) -> None:
        if (supersede or forced) and not failed and pending.supersede(timeout=_SEAL_WAIT_S if forced else None):
            return  # a later record takes its place: what the writer has left to do is no longer needed
        if forced:
            # a second signal's handler, which may have interrupted this very thread inside a wait on the writer
            # (holding its future's lock, which the writer needs to end): no lock is taken, the writer's end is
            # looked for, for a bounded time
            deadline = time.monotonic() + _SEAL_WAIT_S
            while done is not None and not ended and time.monotonic() < deadline:
                time.sleep(0.002)
        elif durable and done is not None:
            futures.wait([done])
        if failed and raise_error:
            raise failed[0]

    return wait


# the record's values that stay as the running record has them: everything but the run's state and outcome
_UNCHANGING = ("format", "run_id", "params", "overrides", "matrix_point", "schedule", "plugins", "data", "inputs",
               "resumed", "verifies", "owner", "host", "scheduler", "versions", "inventory")

_WRITERS: list[ThreadPoolExecutor] = []


def _record_writers() -> ThreadPoolExecutor:
    """The process's threads that write ``running`` records: as many as runs start at once, up to 8."""
    if not _WRITERS:
        with _IDLE_LOCK:
            if not _WRITERS:
                _WRITERS.append(ThreadPoolExecutor(max_workers=8, thread_name_prefix="hetflow-record"))
    return _WRITERS[0]


def _forget_threads_after_fork() -> None:
    # a forked child has none of its parent's threads: pools that think they have some would never run a task
    _IDLE_POOLS.clear()
    _WRITERS.clear()


os.register_at_fork(after_in_child=_forget_threads_after_fork)


def _remove_unbegun(run_dir: str) -> None:
    """A second signal's end of a run whose record was not yet written: its folder goes, with any temporary file of
    that first write, so that nothing names a run that never said it began."""
    try:
        names = os.listdir(run_dir)
        if "record.json" in names:
            return
        for name in names:
            if name.startswith(".tmp-"):
                os.unlink(os.path.join(run_dir, name))
        os.rmdir(run_dir)
    except OSError:
        pass


def _threads_stored_since(cache: Cache, keys: Mapping[str, Any], started_at: Any) -> int | None:
    """The BLAS threads of the entries of ``keys`` whose results follow them, written (or read) since
    ``started_at``, where they all say one number: those a killed attempt that began then ran with. None where
    none says, or they differ."""
    import json
    from datetime import datetime

    try:
        since = datetime.fromisoformat(str(started_at).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    found = set()
    for info in keys.values():
        if not (info.blas and info.cacheable):
            continue
        path = os.path.join(cache._folder(info.key), "entry.json")
        try:
            if os.stat(path).st_mtime < since:
                continue
            with open(path, encoding="utf-8") as f:
                n = json.load(f).get("blas_threads")
        except (OSError, ValueError, AttributeError):
            continue
        if type(n) is int:
            found.add(n)
    return found.pop() if len(found) == 1 else None


def _earlier_attempts(record_path: str) -> list[dict]:
    """The attempts of the run at ``record_path`` so far, for its resumption: each with its start, end,
    duration, status (``died`` where the owner ended without a word), cancellation, error and events.

    A record of one attempt describes it in its own fields; a record that
    was resumed before lists its earlier attempts under ``attempts`` and
    describes the last one in its own fields.
    """
    import json

    try:
        with open(record_path, encoding="utf-8") as f:
            previous = json.load(f)
    except (OSError, ValueError):
        return []
    kept = [dict(a) for a in previous.get("attempts") or []]
    last = kept.pop() if kept else {"attempt": 1, "started_at": previous.get("started_at")}
    status = owner.state_of(previous.get("status"), previous.get("owner"))
    if status == "running":
        status = owner.DIED  # its record is being resumed, so no process writes it any more
    last.update(ended_at=previous.get("ended_at"), duration_s=last.get("duration_s") or previous.get("duration_s"),
                status=status, owner=previous.get("owner"), cancelled=previous.get("cancelled"),
                error=(previous.get("error") or {}).get("message"), cache_hits=(previous.get("cache") or {}).get("hits"),
                events=previous.get("events") or [],
                data={stage: (info or {}).get("digest") for stage, info in (previous.get("data") or {}).items()},
                programs={name: (info or {}).get("digest") for name, info in (previous.get("programs") or {}).items()
                          if isinstance(info, dict)},
                plugins=_plugin_digests(previous.get("plugins")),
                blas=threads.recorded_blas(previous))
    if status == owner.DIED:
        last.update(ended_at=None, duration_s=None)
    return kept + [last]


def _end_attempt(record: dict, status: str, started: float, ended: float) -> None:
    """Close the record's current attempt with ``status``: its entry in ``attempts``, and the run's ``status``,
    ``ended_at`` and ``duration_s`` (the sum of the attempts' known durations)."""
    attempts = [dict(a) for a in record["attempts"]]
    this = attempts[-1]
    this.update(ended_at=utc_iso(ended), duration_s=round(ended - started, 6), status=status)
    if record.get("cancelled"):
        this["cancelled"] = record["cancelled"]
    record["attempts"] = attempts
    record["status"] = status
    record["ended_at"] = this["ended_at"]
    record["duration_s"] = round(sum(a.get("duration_s") or 0.0 for a in attempts), 6)


def _still_running(events: list[dict]) -> set[str]:
    """The partitions an event stream shows started and not ended: those a cancelled cluster run abandons.

    >>> _still_running([{"event": "started", "kind": "partition", "id": "p0"},
    ...                 {"event": "started", "kind": "partition", "id": "p1"},
    ...                 {"event": "finished", "kind": "partition", "id": "p0"}])
    {'p1'}
    """
    running: set[str] = set()
    for e in list(events):
        if e.get("kind") != "partition":
            continue
        if e.get("event") == "started":
            running.add(e["id"])
        elif e.get("event") in ("finished", "failed"):
            running.discard(e["id"])
    return running


def _write_ended(record_path: str, record: dict, encoded: Mapping[str, str], error: BaseException, cancel: Cancel,
                 runtime: Any, stream: EventStream, watch: Stopwatch, first_written: Callable[..., None],
                 forced: bool = False) -> bool:
    """The record of a run that ended outside its normal end (an interrupt, a second signal's forced exit, an
    error in the engine itself, a disk that refused its files): ``cancelled`` for the first two, ``failed``
    otherwise; never left ``running`` where it can be written at all. Whether it was written."""
    first_written(raise_error=False, forced=forced)
    now = watch.now()
    stopped = isinstance(error, (Cancelled, KeyboardInterrupt))
    events = list(getattr(runtime, "events", None) or ())
    # its outputs' files are never committed (a batch abandoned, or cut short by the exit): the record names none
    ending = {**record, "events": list(stream.events), "outputs": {}}
    if stopped:
        if not cancel.requested:
            cancel.request("SIGINT")
        ending["cancelled"] = _cancel_info(cancel, events, runtime, forced=forced)
    else:
        ending["error"] = _error_entry(error)
    _end_attempt(ending, "cancelled" if stopped else "failed", watch.started, now)
    kept = {k: v for k, v in encoded.items() if k in ("plan", "manifest")}
    try:
        write_json_atomic(record_path, ending, kept)
    except Exception as e:  # noqa: BLE001 - the error that ended the run is the one to report
        if not is_storage_error(e):
            return False
        # a full disk: the record without what grew since the running record (the events, the tasks, the
        # traceback) may still fit where that one did
        lean = {**ending, "events": [], "tasks": [], "trimmed": ["events", "tasks", "error.traceback"]}
        if isinstance(ending.get("error"), dict):
            lean["error"] = {**ending["error"], "traceback": None}
        try:
            write_json_atomic(record_path, lean, kept)
        except Exception:  # noqa: BLE001
            return False
    return True


def _unwritten(error: OSError, run_id: str, run_dir: str, record_path: str | None) -> StorageUnavailable:
    """What a run whose files its disk refused (full, over quota, read-only, failing), or whose folder was
    removed under it, raises once its record says so where it could: the file and the file system's words,
    and where the record stands. A run folder left empty (not even the ``running`` record landed) is
    removed: nothing of the run is left half there."""
    if not os.path.isdir(run_dir):
        return StorageUnavailable(f"run {run_id}: its folder {run_dir} was removed while it ran; nothing of the run "
                                  "is left")
    what = f"run {run_id}: {os.path.basename(error.filename) if error.filename else 'a file'} could not be " \
           f"written in {run_dir}: {error.strerror or error}"
    if record_path is not None:
        return StorageUnavailable(f"{what}; its record says failed", record_path)
    try:
        os.rmdir(run_dir)
    except OSError:
        # the folder stays, with its running record: its id is how the user finds it
        return StorageUnavailable(f"{what}; its record could not be written either, and reads died once this "
                                  "process has ended", None, run_id)
    return StorageUnavailable(f"{what}; nothing of the run was kept")


def _bound_executors(instances: Mapping[str, Executor]) -> dict:
    """The record's ``executors``: per executor, its vendor and every device it bound (index, identity, name,
    memory, share of the split, memory_limit)."""
    from hetflow.executors.split_layout import bound_devices

    return {name: {"vendor": ex.vendor.value, "devices": bound_devices(ex)} for name, ex in instances.items()}


def _planned_executors(plan: Plan, cluster: Any) -> dict:
    """``executors`` of a run on a cluster, whose executors live on its workers: the plan's devices, named as
    each executor's worker offered them."""
    from hetflow.executors.split_layout import planned_devices

    workers = {w.address: w for w in cluster.workers(tuple({e.vendor: None for e in plan.executors.values()}))}
    out = {}
    for e in plan.executors.values():
        offer = workers[e.worker].offer(e.vendor) if e.worker in workers else None
        out[e.name] = {"vendor": e.vendor.value, "worker": e.worker,
                       "devices": planned_devices(e.device, e.memory_limit, offer.devices if offer else ())}
    return out


def _cancel_info(cancel: Cancel, events: list[dict], runtime: Any, forced: bool = False) -> dict:
    """The record's ``cancelled`` entry: the signal, when it came, what had finished and what was abandoned."""
    at = cancel.at if cancel.at is not None else time.time()
    finished = sorted({e["id"] for e in events if e.get("kind") == "partition" and e.get("status") == "succeeded"})
    running = sorted(getattr(runtime, "running", ()) or ())
    return {"signal": cancel.signal or "SIGINT", "at": utc_iso(at), "finished": finished, "abandoned": running,
            "forced_exit": forced}


def _node_status(record: dict, runtime: LocalRuntime, failure: BaseException | None) -> None:
    done = {e["id"]: e for e in runtime.events if e["kind"] == "partition"}
    for node, entry in record["nodes"].items():
        event = done.get(entry["partition"])
        if event is None:
            abandoned = entry["partition"] in getattr(runtime, "running", ())
            entry["status"] = "cancelled" if abandoned else "not run" if failure is not None else "succeeded"
            continue
        entry["started_at"], entry["ended_at"], entry["duration_s"] = event["start"], event["end"], event["duration_s"]
        entry["attempts"] = event.get("attempt", 1)
        if event["status"] == "succeeded":
            entry["status"] = "succeeded"
            numeric = (event.get("numeric") or {}).get(node)
            if numeric:
                entry["numeric"] = list(numeric)
        elif event.get("timed_out"):
            entry["status"] = "timed out"
            entry["error"] = event["error"]
        elif event.get("node") == node:
            entry["status"] = "failed"
            entry["error"] = event["error"]
        else:
            entry["status"] = "failed" if event.get("node") is None else "cancelled"


def _named_vendors(manifest: Manifest, plan: Plan) -> set:
    """The vendors the manifest's executors name (every one of their preference lists) and the plan chose.

    The record's inventory holds these, probed already by the planner;
    another vendor's probe would load its SDK for nothing (wgpu's, 0.9 s).
    """
    named = {v for decl in getattr(manifest, "executors", {}).values() for v in getattr(decl, "vendors", ())}
    return named | {e.vendor for e in plan.executors.values()}


def _plugin_digests(plugins: Any) -> dict[str, str]:
    """Each plugin of a record's ``plugins`` (its spec as the manifest wrote it) -> the digest of its code."""
    return {str(p.get("spec")): p["digest"] for p in plugins or () if isinstance(p, dict) and p.get("digest")}


def _say_changed_plugins(plugins: Any, began: Mapping[str, str], run_id: str) -> None:
    """Warn (:class:`~hetflow.engine.errors.SourceChanged`) of each plugin of a resumed run whose code is not the
    code its last attempt ran (``began``: spec -> digest): what is left to run runs the code as it is now, and
    no earlier code is kept to run instead."""
    import warnings

    from hetflow.engine.errors import SourceChanged

    for spec, new in _plugin_digests(plugins).items():
        old = began.get(spec)
        if old and old != new:
            warnings.warn(f"plugin {spec} has changed since run {run_id}'s last attempt: the partitions that use it "
                          f"run its code as it is now ({new[:19]}, not {old[:19]}), those the last attempt finished "
                          "too, as the record's plugins say", SourceChanged, stacklevel=2)


def _say_changed_data(data: Mapping[str, Mapping[str, Any]], began: Mapping[str, Any], run_id: str) -> None:
    """Warn (:class:`~hetflow.engine.errors.SourceChanged`) of each file a resumed run's ``load`` stage reads whose
    bytes are not those its last attempt read (``began``: stage -> digest)."""
    import warnings

    from hetflow.engine.errors import SourceChanged

    for stage, info in data.items():
        old, new = began.get(stage), info.get("digest")
        if old and new and old != new:
            warnings.warn(f"{info['path']} (read by stage {stage!r}) has changed since run {run_id}'s last attempt: "
                          f"the stages that read it, and those after them, run on its bytes now ({new[:19]}, not "
                          f"{old[:19]}), as the record's data says", SourceChanged, stacklevel=2)


def _programs(manifest: Manifest) -> dict[str, dict]:
    """Each emulator's guest program with the sha256 of its bytes (emulator -> path, digest): what the run ran, for
    verify and runs diff to tell when another program was run."""
    return {name: {"path": decl.program, "digest": file_digest(decl.program)}
            for name, decl in (getattr(manifest, "emulators", None) or {}).items()}


def _say_changed_programs(programs: Mapping[str, Mapping[str, Any]], began: Mapping[str, Any], run_id: str) -> None:
    """Warn (:class:`~hetflow.engine.errors.SourceChanged`) of each emulator whose program is not the bytes the
    resumed run's last attempt ran (``began``: emulator -> digest)."""
    import warnings

    from hetflow.engine.errors import SourceChanged

    for name, info in programs.items():
        old, new = began.get(name), info.get("digest")
        if old and new and old != new:
            warnings.warn(f"{info['path']} (emulator {name!r}'s program) has changed since run {run_id}'s last "
                          f"attempt: its phases run it as it is now ({new[:19]}, not {old[:19]})", SourceChanged,
                          stacklevel=2)


def _data_files(manifest: Manifest) -> tuple[dict[str, dict], dict[str, tuple[str, list[int]]]]:
    """Every file a ``load`` stage reads, with the sha256 of its bytes (stage -> path, key, digest), and what
    the stage checks it reads (stage -> digest, the file's portable stamp when digested)."""
    data, checks = {}, {}
    for s in manifest.stages.values():
        if s.op == "load" and isinstance(s.args.get("path"), str):
            digest, stamp = digest_and_stamp(s.args["path"])
            data[s.id] = {"path": s.args["path"], "key": s.args.get("key"), "digest": digest}
            if digest is not None:
                checks[s.id] = (digest, portable_stamp(stamp))
    return data, checks


# id(plan) -> (the checks, the plan with them in its load stages' arguments), while the plan lives: a plan
# whose files did not change is lowered once, as any plan is
_CHECKED: dict[int, tuple[dict, Plan]] = {}


def _reads_checked(plan: Plan, checks: dict[str, tuple[str, list[int]]]) -> Plan:
    """``plan`` with each ``load`` stage told the digest the run recorded for its file, which the op checks
    against the bytes it reads (:func:`hetflow.executors.files.check_unchanged`): a file replaced after the
    run started fails the stage, instead of a record and a cache entry naming bytes the run did not read.

    The cache keys were made before, from the plan as it was: they name the digest, not the file's stamp.
    """
    if not checks:
        return plan
    known = _CHECKED.get(id(plan))
    if known is not None and known[0] == checks:
        return known[1]
    args = dict(plan.stage_args)
    for stage, (digest, stamp) in checks.items():
        args[stage] = {**args[stage], "read_sha256": digest, "read_stamp": stamp}
    checked = dataclasses.replace(plan, stage_args=args)
    if known is None:
        weakref.finalize(plan, _CHECKED.pop, id(plan), None)
    _CHECKED[id(plan)] = (checks, checked)
    return checked


def _describe_failure(failure: BaseException, plan: Plan, manifest: Manifest) -> dict:
    if isinstance(failure, ClusterFailure):
        return {"partition": None, "node": None, "message": str(failure), "lost": failure.lost}
    if isinstance(failure, StageFailure):
        decl = manifest.stages.get(failure.node) or getattr(manifest, "phases", {}).get(failure.node)
        origin = str(decl.origin) if decl is not None else None
        described = {"partition": failure.partition, "node": failure.node, "message": str(failure), "origin": origin}
        if failure.op is not None:
            described.update(op=failure.op, traceback=failure.user_traceback)
        return described
    return _error_entry(failure)


def _error_entry(error: BaseException) -> dict:
    """The record's ``error`` of a run that an error outside its stages ended: the engine's, the disk's, or one
    the caller's ``on_event`` raised, which it names."""
    said = f"{type(error).__name__}: {error}"
    if getattr(error, "hetflow_raised_in", None):
        said = f"its {error.hetflow_raised_in} callback raised {said}"
    return {"partition": None, "node": None, "message": said, "traceback": "".join(traceback.format_exception(error))}


def _traceback_text(failure: BaseException) -> str:
    """The failure's traceback, led by the executor's own when the engine re-raised it as a stage failure.

    A user's op that raised gets the traceback of the user's code alone:
    their files and lines, none of hetflow's.
    """
    if getattr(failure, "user_traceback", None):
        return failure.user_traceback
    text = "".join(traceback.format_exception(failure))
    cause = failure.__context__ if failure.__suppress_context__ else None
    if cause is None:
        return text
    return "".join(traceback.format_exception(cause)) + "\nThe run reported it as:\n\n" + text
