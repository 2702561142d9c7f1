"""The worker side of a cluster run: what a worker offers, the plugin that hosts a run's executors, its tasks.

:class:`HetflowWorkerPlugin`, registered from the client with
``Client.register_plugin``, creates inside each worker the executors the
plan placed on it and one :class:`~hetflow.engine.run.runtime.LocalRuntime`
over them; the scheduler also hands it to workers that join later, a
restarted one included. Every task of the lowered graph calls
:class:`_OnWorker`, which finds that runtime in the worker it landed on
and calls the method the threaded scheduler calls, unless a recovery
holds the run (:func:`_pause_run`, :func:`_resume_run`) or revoked the
task; :func:`_close_run` stops the run on a worker, releases what it
holds and logs the flush marker of :mod:`hetflow.engine.run.events`.
:mod:`hetflow.engine.run.distributed` drives all of them from the client.
"""

from __future__ import annotations

import asyncio
import os
import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from distributed import WorkerPlugin, get_worker

from hetflow.engine.store.cache import Cache, CacheUse
from hetflow.engine.plan.plandata import Plan
from hetflow.engine.run import malloc, threads
from hetflow.engine.run.runtime import ClusterFailure, LocalRuntime, NotHeld, _here
from hetflow.executors import Offer, create, plugins, probe
from hetflow.executors.base import Vendor

__all__ = ["HetflowWorkerPlugin", "ExitPlugin", "WorkerInfo", "worker_offers", "worker_versions", "PLUGIN_PREFIX",
           "RESOURCE_PREFIX", "CLOSE_WAIT_S"]

PLUGIN_PREFIX = "hetflow-run-"
RESOURCE_PREFIX = "executor-"
CLOSE_WAIT_S = 30.0
# How often a worker asks the scheduler whether the client of a run it hosts is still connected, and how long
# that client may stay away before the worker gives the run's handles back: Dask's client takes up to 10 s to
# reconnect after a dropped connection, under its own id.
_CLIENT_POLL_S = 2.0
_CLIENT_GONE_S = 15.0


def worker_offers(vendors: list[str]) -> list[Offer]:
    """What the worker this runs on offers for ``vendors`` (``Client.run`` calls it).

    Probing a GPU vendor imports its SDK, seconds per worker, so a plan
    asks only for the vendors its executors name.
    """
    return [probe(Vendor(v)) for v in vendors]


def worker_versions() -> dict[str, str | None]:
    """The versions a run's results depend on, as the worker this runs on has them (``Client.run`` calls it).

    hetflow's is its code's own (``hetflow._version``), which an
    installation's metadata may lag behind.
    """
    from hetflow.engine.store.records import versions

    return {**versions(), "hetflow": code_version()}


def code_version() -> str:
    from hetflow._version import __version__

    return __version__


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as the scheduler reports it, with the offers probed on it so far."""

    address: str
    name: str
    nthreads: int
    resources: Mapping[str, float]
    offers: dict = dataclasses.field(default_factory=dict, compare=False)
    # where its library versions differ from the client's: {library: the worker's version}
    versions: dict = dataclasses.field(default_factory=dict, compare=False)

    def offer(self, vendor: Vendor) -> Offer | None:
        return self.offers.get(vendor)

    def summary(self) -> str:
        """``worker 0 (tcp://...): cpu; resources executor-accel=1``"""
        offered = ", ".join(v.value for v in Vendor if v in self.offers and self.offers[v].available) or "no vendor"
        res = ", ".join(f"{k}={v:g}" for k, v in sorted(self.resources.items()))
        return f"worker {self.name} ({self.address}): {offered}" + (f"; resources {res}" if res else "")


def _can_host(worker: WorkerInfo, vendor: Vendor, device: int) -> bool:
    offer = worker.offer(vendor)
    if offer is None or not offer.available:
        return False
    return vendor is Vendor.cpu or device < len(offer.devices)


def _sort_name(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


class HetflowWorkerPlugin(WorkerPlugin):
    """Hosts one run's executors inside a worker and refuses tasks once the run is closed."""

    idempotent = False

    def __init__(self, run_id: str, plan: Plan, cache: CacheUse | None = None,
                 ids: Mapping[str, str] | None = None, client: str | None = None) -> None:
        self.run_id = run_id
        # the id of the client that runs it: a client that dies (SIGKILL, the OOM killer, its machine lost)
        # unregisters nothing, and the run's executors and handles would stay in the workers for good
        self.client = client
        self._watch: Any = None
        self._away_since: float | None = None
        self.paused = False
        self.revoked: set[tuple[str, int]] = set()
        self.completed: set[str] = set()
        # (key, generation) of every bound task that entered here: Dask may run one again on its own
        self.entered: set[tuple[str, int]] = set()
        # each worker's scratch folder when the run started: a nanny may restart one on the same address
        self.ids = dict(ids or {})
        # The cache folder must be one every worker can reach (a shared filesystem beyond one machine).
        self.cache = (cache.cache.root, cache.keys, cache.read, cache.write) if cache is not None else None
        self.name = PLUGIN_PREFIX + run_id
        self.plan = plan
        self.hosts = {e.name: (e.worker, e.worker_name) for e in plan.executors.values()}
        self.runtime: LocalRuntime | None = None
        self.closed = False
        self.inflight = 0
        self._cond = threading.Condition()
        self.plugins = _plugins_of(plan)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["runtime"], state["_cond"], state["_watch"] = None, None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition()

    def setup(self, worker: Any) -> None:
        _load_plugins(self.plugins, worker)
        # a worker its nanny started with Dask's trim threshold maps every array of 128 KiB or more afresh
        malloc.tune_this_process()
        # by address alone: a worker restarted under the same name hosts only what a recovery hands it
        mine = [e for e, (address, _) in self.hosts.items()
                if worker.address == address and self.ids.get(address, worker.local_directory) == worker.local_directory]
        executors = {e: _create(self.plan.executors[e]) for e in mine}
        topic = PLUGIN_PREFIX + self.run_id
        cache = CacheUse(Cache(self.cache[0]), *self.cache[1:]) if self.cache else None
        if cache is not None:
            # this worker's own BLAS threads (the run has set them already on a local cluster): a product's entry is
            # taken, and stored, for as many threads as this worker computes it with
            cache.blas = threads.POOLS.describe(1)["blas"]
        self.runtime = LocalRuntime(self.plan, executors, emit=lambda event: worker.log_event(topic, event),
                                    worker=worker.address, cache=cache)
        # before any task of the run: the first partition on this worker is timed on its own work
        worker.log_event(topic, {"event": "warm-up", "kind": "run", "id": self.run_id, "worker": worker.address,
                                 "duration_s": self.runtime.warm_up(), "time": time.time()})
        if self.client is not None:
            from tornado.ioloop import PeriodicCallback

            # setup runs on the worker's event loop, where the callback then runs
            self._watch = PeriodicCallback(lambda: self._look_for_client(worker), _CLIENT_POLL_S * 1000)
            self._watch.start()

    async def _look_for_client(self, worker: Any) -> None:
        """Close the run here once its client has left the scheduler for :data:`_CLIENT_GONE_S`.

        The scheduler logs ``add-client`` and ``remove-client`` under the
        client's id; a client that left and did not come back is the run's
        process gone. The plugin is then unregistered from the scheduler,
        which tears it down on every worker (its handles given back) and
        stops handing it to workers that join.
        """
        try:
            events = await worker.scheduler.events(topic=self.client)
        except Exception:  # noqa: BLE001 - a scheduler out of reach is Dask's to tell; the next look asks again
            return
        last = events[-1][1] if events else None
        if not (isinstance(last, dict) and last.get("action") == "remove-client"):
            self._away_since = None
            return
        now = time.monotonic()
        if self._away_since is None:
            self._away_since = now
        if now - self._away_since < _CLIENT_GONE_S or self._watch is None:
            return
        self._stop_watching()
        self.close()
        try:
            await worker.scheduler.unregister_worker_plugin(name=self.name)
        except Exception:  # noqa: BLE001 - another worker unregistered it first: its teardown reaches this one too
            pass

    def _stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def teardown(self, worker: Any) -> None:
        self._stop_watching()
        self.close()
        if self.runtime is not None:
            # closed, not only emptied: a task still running registers what it returns into a closed table,
            # which releases it at once
            self.runtime.handles.close()
            self.runtime = None

    def enter(self, key: str | None = None, generation: int = 0) -> LocalRuntime:
        """The runtime for one task; waits while a recovery holds the run, refuses a revoked task.

        A task bound to an executor enters at most once per generation, and
        only where its executor lives: a second entry is Dask recomputing
        it from lineage (its handles were given back when it first ran), so
        it raises :class:`NotHeld` before it touches an executor.
        """
        with self._cond:
            self._cond.wait_for(lambda: not self.paused or self.closed)
            if self.closed or self.runtime is None:
                raise RuntimeError(f"run {self.run_id} is closed on this worker")
            if (key, generation) in self.revoked:
                raise RuntimeError(f"task {key} of run {self.run_id} was revoked: it runs again after a lost worker")
            executor = self.runtime.graph.bound.get(key) if key is not None else None
            if executor is not None:
                if executor not in self.runtime.executors:
                    raise NotHeld(f"task {key} of run {self.run_id} (generation {generation}) landed on a worker "
                                  f"that does not host executor {executor!r}")
                if (key, generation) in self.entered:
                    raise NotHeld(f"task {key} of run {self.run_id} (generation {generation}) already ran here; "
                                  "Dask ran it again from its lineage, after a lost worker")
                self.entered.add((key, generation))
            self.inflight += 1
            return self.runtime

    def leave(self, completed: str | None = None) -> None:
        with self._cond:
            self.inflight -= 1
            if completed is not None:
                self.completed.add(completed)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


class ExitPlugin(WorkerPlugin):
    """Given to the workers of a local cluster hetflow starts: when the worker closes, its heap is frozen
    (``gc.freeze``), so that the interpreter's exit skips the last collection of every object the worker made.

    A worker process spends 0.08-0.10 s in that collection here (numpy, distributed and hetflow imported;
    0.015 s frozen), and the cluster's close waits for its processes to end: a tenth of a second of every
    ``--workers`` command, on top of the work. Exit handlers and the modules' teardown still run; what no
    longer runs is the finalizers of objects kept alive only by reference cycles, whose resources the
    process's end gives back (memory, descriptors). The worker's scratch folder is removed by the worker's
    own close before this.
    """

    name = "hetflow-exit"

    def teardown(self, worker: Any) -> None:
        import gc

        gc.freeze()


_Wanted = tuple[str, str, str, "bytes | None", dict]
"""(kind, spec, path or module, source, what the client has): see :func:`_plugins_of`."""


def _plugins_of(plan: Plan) -> list[_Wanted]:
    """(kind, spec, path or module, source, what the client has) of the plugin of every user's op the plan runs.

    A path plugin travels as its bytes, so a worker on another machine
    runs exactly the code the client planned with; an installed module or
    entry point must be installed on the worker too. What the client has
    (the modules the plugin imports, with their files' digests; a module
    plugin's Python files) is what the worker's copy must match: the
    helpers a plugin imports come from the worker's own search path.
    """
    seen: dict[str, _Wanted] = {}
    for node in plan.nodes.values():
        found = plugins.plugin_for(getattr(node, "op", None) or "")
        if found is not None and found.module not in seen:
            target = found.file if found.kind == "path" else found.module
            python = {k: v for k, v in found.files.items() if k.endswith(".py")} if found.kind != "path" else {}
            seen[found.module] = (found.kind, found.spec, target or found.module, found.source,
                                  {"imported": dict(found.imported), "files": python})
    return list(seen.values())


def _load_plugins(wanted: list[_Wanted], worker: Any) -> None:
    for kind, spec, target, source, client in wanted:
        where = {"worker": worker.address, "plugin": spec, "module": target}
        try:
            if kind == "path":
                here = plugins.load_source(target, source or b"", spec)
            else:
                here = plugins.load_module(target, spec, kind=kind)
        except plugins.PluginError as e:
            # a ClusterFailure reaches the client through register_plugin and fails the run with this message
            raise ClusterFailure(f"worker {worker.name} ({worker.address}) cannot load plugin {spec!r} "
                                 f"(module {target}): {e}", where) from None
        differs = _difference(here, client)
        if differs is not None:
            # its results, under the key of the client's code, would be served to runs of that code
            raise ClusterFailure(f"worker {worker.name} ({worker.address}) has other code for plugin {spec!r} than "
                                 f"this machine: {differs}; give the workers the same code (a folder they share, or "
                                 "the same installation)", where) from None


def _difference(here: plugins.Plugin, client: Mapping[str, Any]) -> str | None:
    """Where a worker's copy of a plugin differs from the client's, for a person (the first module or file of it
    that does); None where it runs the same code.

    Each module the client's plugin imports is looked for in this worker
    as it imported it, wherever it came from (a project installed here,
    checked out there, is the same code where its bytes are); a module
    plugin's Python files are compared by name where both have them.
    """
    import sys

    from hetflow.executors.codeid import file_sha

    def said(found: Any) -> str:
        return "none" if found is None else f"{found[0]} ({str(found[1])[:19]})"

    for name, theirs in sorted(client["imported"].items()):
        file = getattr(sys.modules.get(name), "__file__", None)
        mine = (os.path.realpath(file), file_sha(os.path.realpath(file))) if file else None
        if mine is None or mine[1] != theirs[1]:
            return f"module {name}: here {said(theirs)}, there {said(mine)}"
    by_name = [{os.path.basename(k): (k, v) for k, v in files.items()}
               for files in (client["files"], {k: v for k, v in here.files.items() if k.endswith(".py")})]
    for name in sorted(set(by_name[0]) & set(by_name[1])):
        if by_name[0][name][1] != by_name[1][name][1]:
            return f"file {name}: here {said(by_name[0][name])}, there {said(by_name[1][name])}"
    return None


def _plugin(run_id: str) -> HetflowWorkerPlugin:
    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_PREFIX + run_id)
    if plugin is None:
        raise RuntimeError(f"worker {worker.address} does not host run {run_id}")
    return plugin


class _OnWorker:
    """The lowering's ``Runtime`` on a cluster: each call runs the worker's own ``LocalRuntime``.

    ``generation`` counts the recoveries before the task was submitted; the
    worker refuses a task of a generation a recovery revoked, so a
    cancelled task that still reaches a thread has no effect on handles.
    """

    def __init__(self, run_id: str, generation: int = 0) -> None:
        self.run_id = run_id
        self.generation = generation

    def _call(self, key: str, method: str, *args: Any) -> Any:
        plugin = _plugin(self.run_id)
        runtime = plugin.enter(key, self.generation)
        completed = None
        _here.generation = self.generation  # the task's entries in the record say which recovery submitted it
        try:
            out = getattr(runtime, method)(*args)
            completed = key
            return out
        finally:
            plugin.leave(completed)

    def run_partition(self, pid: str, *sources: Any) -> dict:
        return self._call(f"partition:{pid}", "run_partition", pid, *sources)

    def restore_partition(self, pid: str) -> dict:
        return self._call(f"partition:{pid}", "restore_partition", pid)

    def export(self, bridge_id: str, produced: dict) -> Any:
        return self._call(f"export:{bridge_id}", "export", bridge_id, produced)

    def import_(self, bridge_id: str, portable: Any) -> Any:
        return self._call(f"import:{bridge_id}", "import_", bridge_id, portable)

    def output(self, name: str, produced: dict) -> Any:
        return self._call(f"output:{name}", "output", name, produced)


def _create(e: Any) -> Any:
    return create(e.vendor, e.name, e.device, memory_limit=getattr(e, "memory_limit", None))


async def _pause_run(run_id: str, wait_s: float, dask_worker: Any = None) -> dict:
    """On one worker: hold new tasks of the run, wait for the running ones, say what is done and held."""
    plugin = dask_worker.plugins.get(PLUGIN_PREFIX + run_id)
    if plugin is None or plugin.runtime is None:
        return {"completed": [], "live": {}, "running": 0}
    with plugin._cond:
        plugin.paused = True
    deadline = time.monotonic() + wait_s
    while plugin.inflight and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return {"completed": sorted(plugin.completed), "live": plugin.runtime.handles.live(), "running": plugin.inflight}


def _resume_run(run_id: str, revoked: list[tuple[str, int]], adopt: list[Any], expect: Mapping[str, int],
                dask_worker: Any = None) -> list[str]:
    """On one worker: create the executors it takes over, set refcounts, refuse revoked tasks, resume."""
    plugin = dask_worker.plugins.get(PLUGIN_PREFIX + run_id)
    if plugin is None or plugin.runtime is None:
        if adopt:
            raise RuntimeError(f"worker {dask_worker.address} does not host run {run_id}")
        return []
    for e in adopt:
        plugin.runtime.executors[e.name] = _create(e)
    plugin.runtime.handles.expect(expect)
    with plugin._cond:
        plugin.revoked.update((k, g) for k, g in revoked)
        plugin.paused = False
        plugin._cond.notify_all()
    return sorted(plugin.runtime.executors)


async def _close_run(run_id: str, wait_s: float, dask_worker: Any = None) -> dict:
    """On one worker: stop the run, wait for its running tasks, release, report, flush."""
    plugin = dask_worker.plugins.get(PLUGIN_PREFIX + run_id)
    if plugin is None or plugin.runtime is None:
        # nothing of the run here (its plugin failed to set up): the marker says so all the same, since the
        # client waits for one from every worker that answers
        _flush(dask_worker, run_id)
        return {"live": {}, "released": 0, "running": 0, "abandoned": 0}
    plugin.close()
    runtime = plugin.runtime
    deadline = time.monotonic() + wait_s
    # a timed-out attempt abandoned in its thread registers its results on its executor before it releases
    # them: counted in between, they read as live activations the run left; wait for it as for a running task
    while (plugin.inflight or runtime.abandoned) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    # closed: a task still running past the wait (a cancelled run waits for none) releases what it returns
    released = runtime.handles.close()
    report = {"live": {n: ex.live_activations() for n, ex in runtime.executors.items()}, "released": released,
              "running": plugin.inflight, "abandoned": runtime.abandoned}
    _flush(dask_worker, run_id)
    return report


def _flush(dask_worker: Any, run_id: str) -> None:
    """The flush marker of :mod:`hetflow.engine.run.events`: every event of the run from this worker went before it."""
    dask_worker.log_event(PLUGIN_PREFIX + run_id,
                          {"event": "flush", "kind": "run", "id": run_id, "worker": dask_worker.address})


def _dependencies(arg: Any, dsk: Mapping[str, Any]) -> list[str]:
    if isinstance(arg, str):
        return [arg] if arg in dsk else []
    if isinstance(arg, list):
        return [d for a in arg for d in _dependencies(a, dsk)]
    return []


def _substitute(arg: Any, dsk: Mapping[str, Any], futures: Mapping[str, Any]) -> Any:
    if isinstance(arg, str) and (arg in dsk or (arg.startswith("phase:") and arg in futures)):
        return futures[arg]
    if isinstance(arg, list):
        return [_substitute(a, dsk, futures) for a in arg]
    return arg


def _witness_batch_on_worker(run_id: str, pid: str, first: int, where: str, program: Any, traces: list,
                             input_size: int, backend: str) -> Any:
    """Consecutive witness chunks ``first``, ``first + 1``, ... in one task, their rows in one table.

    A task per chunk costs Dask's few milliseconds a task, more than a
    short chunk's replay; a batch pays them once, and every chunk still
    has its own events in the record.
    """
    import numpy as np

    from hetflow.executors.emulator import WITNESS_COLUMNS

    table = np.empty((sum(int(t.steps) for t in traces), len(WITNESS_COLUMNS)), np.int64)
    row = 0
    for k, trace in enumerate(traces):
        _witness_on_worker(run_id, pid, first + k, where, program, trace, input_size, backend,
                           out=table[row:row + int(trace.steps)])
        row += int(trace.steps)
    return table


def _witness_on_worker(run_id: str, pid: str, i: int, where: str, program: Any, trace: Any, input_size: int,
                       backend: str, out: Any = None) -> Any:
    """One witness chunk, re-executed from its min trace on whichever worker Dask chose."""
    from hetflow.engine.errors import StageFailure
    from hetflow.executors.emulator import EmulatorError, witness_table

    plugin = _plugin(run_id)
    runtime = plugin.enter(f"witness:{pid}:{i}")
    try:
        start = time.time()
        runtime._event("witness", f"{pid}:{i}", where, start, "started")
        try:
            table = witness_table(program, trace, input_size=input_size, backend=backend, out=out)
        except (EmulatorError, ValueError) as e:
            runtime._event("witness", f"{pid}:{i}", where, start, "failed", node=pid, error=str(e))
            raise StageFailure(f"phase:{pid}", pid, str(e)) from None
        runtime._event("witness", f"{pid}:{i}", where, start, "succeeded", nodes=[pid], phase="witness", chunk=i)
        return table
    finally:
        plugin.leave()
