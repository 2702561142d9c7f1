"""The cluster runtime: the lowered task graph, unchanged, on a Dask ``distributed`` cluster.

A :class:`Cluster` is either a ``LocalCluster`` of worker processes that
hetflow starts (``--workers N``) or an existing cluster it joins
(``--scheduler tcp://HOST:PORT`` or a scheduler file), started with the
plain ``dask scheduler`` / ``dask worker`` commands. A run on it goes:

1. **ask**: every worker reports its address, name, threads and worker
   resources (the scheduler's identity) and what it offers for each
   vendor the plan names (:func:`worker_offers`, run on each worker by
   ``Client.run``; probing a GPU SDK costs seconds, so only those);
   :meth:`Cluster.probe` is the union, so the planner's vendor preference
   lists resolve against the cluster, not against the client's machine.
2. **place** (:meth:`Cluster.place`, at plan time): every executor of the
   plan gets one worker, the first rule that applies:

   * an explicit mapping ``--place NAME=WORKER`` (a worker name or address);
   * a worker started with the resource ``executor-NAME`` (``dask worker
     --resources executor-accel=1``);
   * otherwise the workers that offer the executor's vendor (and, for a
     GPU vendor, have its ``device`` index): the one hosting the fewest
     executors so far, by worker name on a tie, so executors spread out.

   No worker can host it: the plan fails with a :class:`ManifestError` at
   the executor's declaration, naming the executor and what each worker
   offers, instead of a task waiting forever for a worker (dask#9587).
   The placement is part of the plan (``ExecutorPlan.worker``).
3. **host**: a :class:`HetflowWorkerPlugin`, registered from the client
   with ``Client.register_plugin`` (plain workers need nothing but hetflow
   installed), creates inside each worker the executors placed on it and
   one :class:`~hetflow.engine.run.LocalRuntime` over them. The scheduler
   also hands it to workers that join later, a restarted one included.
4. **submit**: each task of :func:`~hetflow.engine.lowering.lower`'s graph
   is one ``Client.submit``, in dependency order, whose function is the
   :class:`_OnWorker` runtime: it finds the run's ``LocalRuntime`` in the
   worker it landed on and calls the same method the threaded scheduler
   calls. A task bound to executor E (``TaskGraph.bound``) is submitted
   with ``workers=[address of E's worker], allow_other_workers=False``;
   these are per-task restrictions, not graph annotations, so no graph
   optimization can drop them (dask#7036). A handle therefore never
   leaves its worker; a bridge's export runs on the source worker, its
   import on the destination, and the :class:`PortableActivation` between
   them is an ordinary Dask result that Dask moves from worker to worker.
   A task bound to no executor may run anywhere and Dask retries it.
5. **watch**: while waiting, the client polls the scheduler's workers; a
   worker that hosted an executor and is gone starts a **recovery**
   (:meth:`Cluster._recover`): each of its executors is re-created on a
   live worker that offers the vendor (a :class:`ClusterFailure` saying
   why, at once, when none does); the survivors hold the run
   (:func:`_pause_run`: running tasks finish, new ones wait) and report
   the tasks they completed and the handles they hold;
   :func:`plan_recovery` picks the tasks to run again, only those whose
   results were lost or that would read one; their old futures are
   released (never cancelled: Dask cancels every dependent of a cancelled
   key, finished ones too), the survivors are told the new refcounts and
   which old tasks to refuse (:func:`_resume_run`), and the tasks are
   submitted again as the next *generation*, pinned to the executors'
   new workers. A partition run again takes its outputs from the cache
   when its first run stored them.
6. **close**, on success and on every failure: remaining futures are
   cancelled; on each worker the plugin stops accepting tasks, waits for
   the ones running, releases every handle the run still holds and
   reports each executor's live activations; it then logs the flush
   marker of :mod:`hetflow.engine.events`. The client waits for every
   marker, so the event stream (carried by ``Worker.log_event`` and
   ``Client.subscribe_topic``) is complete before the record is written,
   and unregisters the plugin, whose teardown drops the executors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import graphlib
import importlib.util
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from dask.sizeof import sizeof
from distributed import Client, WorkerPlugin, get_worker

from hetflow.engine.errors import Diagnostic, ManifestError, UsageError
from hetflow.engine.events import EventStream, run_event
from hetflow.engine.lowering import TaskGraph, bridge_ref, lower, tensor_ref
from hetflow.engine.manifest import Manifest
from hetflow.engine.planner import Plan
from hetflow.engine.records import utc_iso
from hetflow.engine.cache import Cache, CacheUse
from hetflow.engine.runtime import ClusterFailure, LocalRuntime
from hetflow.executors import Offer, create, plugins, probe
from hetflow.executors.base import PortableActivation, Vendor

__all__ = ["Cluster", "WorkerInfo", "HetflowWorkerPlugin", "worker_offers", "PLUGIN_PREFIX", "RESOURCE_PREFIX"]

PLUGIN_PREFIX = "hetflow-run-"
RESOURCE_PREFIX = "executor-"
_POLL_S = 0.2
_CLOSE_WAIT_S = 30.0
_FLUSH_WAIT_S = 10.0
_CONNECT_TIMEOUT_S = 10.0


@sizeof.register(PortableActivation)
def _sizeof_portable(portable: PortableActivation) -> int:
    # Dask's memory accounting (spilling, transfer batching) sees the bytes, not a small object
    return portable.nbytes


def worker_offers(vendors: list[str]) -> list[Offer]:
    """What the worker this runs on offers for ``vendors`` (``Client.run`` calls it).

    Probing a GPU vendor imports its SDK, seconds per worker, so a plan
    asks only for the vendors its executors name.
    """
    return [probe(Vendor(v)) for v in vendors]


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as the scheduler reports it, with the offers probed on it so far."""

    address: str
    name: str
    nthreads: int
    resources: Mapping[str, float]
    offers: dict = dataclasses.field(default_factory=dict, compare=False)

    def offer(self, vendor: Vendor) -> Offer | None:
        return self.offers.get(vendor)

    def summary(self) -> str:
        """``worker 0 (tcp://...): cpu; resources executor-accel=1``"""
        offered = ", ".join(v.value for v in Vendor if v in self.offers and self.offers[v].available) or "no vendor"
        res = ", ".join(f"{k}={v:g}" for k, v in sorted(self.resources.items()))
        return f"worker {self.name} ({self.address}): {offered}" + (f"; resources {res}" if res else "")


class HetflowWorkerPlugin(WorkerPlugin):
    """Hosts one run's executors inside a worker and refuses tasks once the run is closed."""

    idempotent = False

    def __init__(self, run_id: str, plan: Plan, cache: CacheUse | None = None) -> None:
        self.run_id = run_id
        self.paused = False
        self.revoked: set[tuple[str, int]] = set()
        self.completed: set[str] = set()
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
        state["runtime"], state["_cond"] = None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._cond = threading.Condition()

    def setup(self, worker: Any) -> None:
        _load_plugins(self.plugins, worker)
        # by address alone: a worker restarted under the same name hosts only what a recovery hands it
        mine = [e for e, (address, _) in self.hosts.items() if worker.address == address]
        executors = {e: _create(self.plan.executors[e]) for e in mine}
        topic = PLUGIN_PREFIX + self.run_id
        self.runtime = LocalRuntime(self.plan, executors, emit=lambda event: worker.log_event(topic, event),
                                    worker=worker.address,
                                    cache=CacheUse(Cache(self.cache[0]), *self.cache[1:]) if self.cache else None)
        # before any task of the run: the first partition on this worker is timed on its own work
        worker.log_event(topic, {"event": "warm-up", "kind": "run", "id": self.run_id, "worker": worker.address,
                                 "duration_s": self.runtime.warm_up(), "time": time.time()})

    def teardown(self, worker: Any) -> None:
        if self.runtime is not None:
            self.runtime.handles.release_all()
            self.runtime = None

    def enter(self, key: str | None = None, generation: int = 0) -> LocalRuntime:
        """The runtime for one task; waits while a recovery holds the run, refuses a revoked task."""
        with self._cond:
            self._cond.wait_for(lambda: not self.paused or self.closed)
            if self.closed or self.runtime is None:
                raise RuntimeError(f"run {self.run_id} is closed on this worker")
            if (key, generation) in self.revoked:
                raise RuntimeError(f"task {key} of run {self.run_id} was revoked: it runs again after a lost worker")
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


def _plugins_of(plan: Plan) -> list[tuple[str, str, str, bytes | None]]:
    """(kind, spec, path or module, source) of the plugin of every user's op the plan runs.

    A path plugin travels as its bytes, so a worker on another machine
    runs exactly the code the client planned with; an installed module or
    entry point must be installed on the worker too.
    """
    seen: dict[str, tuple[str, str, str, bytes | None]] = {}
    for node in plan.nodes.values():
        found = plugins.plugin_for(getattr(node, "op", None) or "")
        if found is not None and found.module not in seen:
            target = found.file if found.kind == "path" else found.module
            seen[found.module] = (found.kind, found.spec, target or found.module, found.source)
    return list(seen.values())


def _load_plugins(wanted: list[tuple[str, str, str, bytes | None]], worker: Any) -> None:
    for kind, spec, target, source in wanted:
        try:
            if kind == "path":
                plugins.load_source(target, source or b"", spec)
            else:
                plugins.load_module(target, spec, kind=kind)
        except plugins.PluginError as e:
            # a ClusterFailure reaches the client through register_plugin and fails the run with this message
            raise ClusterFailure(f"worker {worker.name} ({worker.address}) cannot load plugin {spec!r} "
                                 f"(module {target}): {e}",
                                 {"worker": worker.address, "plugin": spec, "module": target}) from None


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
        try:
            out = getattr(runtime, method)(*args)
            completed = key
            return out
        finally:
            plugin.leave(completed)

    def run_partition(self, pid: str, *sources: Any) -> dict:
        return self._call(f"partition:{pid}", "run_partition", pid, *sources)

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
        return {"live": {}, "released": 0, "running": 0, "abandoned": 0}
    plugin.close()
    deadline = time.monotonic() + wait_s
    while plugin.inflight and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    runtime = plugin.runtime
    released = runtime.handles.release_all()
    report = {"live": {n: ex.live_activations() for n, ex in runtime.executors.items()}, "released": released,
              "running": plugin.inflight, "abandoned": runtime.abandoned}
    dask_worker.log_event(PLUGIN_PREFIX + run_id,
                          {"event": "flush", "kind": "run", "id": run_id, "worker": dask_worker.address})
    return report


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


def _witness_on_worker(run_id: str, pid: str, i: int, where: str, program: Any, trace: Any, input_size: int,
                       backend: str) -> Any:
    """One witness chunk, re-executed from its min trace on whichever worker Dask chose."""
    from hetflow.engine.errors import StageFailure
    from hetflow.executors.emulator import EmulatorError, witness_table

    plugin = _plugin(run_id)
    runtime = plugin.enter(f"witness:{pid}:{i}")
    try:
        start = time.time()
        runtime._event("witness", f"{pid}:{i}", where, start, "started")
        try:
            table = witness_table(program, trace, input_size=input_size, backend=backend)
        except (EmulatorError, ValueError) as e:
            runtime._event("witness", f"{pid}:{i}", where, start, "failed", node=pid, error=str(e))
            raise StageFailure(f"phase:{pid}", pid, str(e)) from None
        runtime._event("witness", f"{pid}:{i}", where, start, "succeeded", nodes=[pid], phase="witness", chunk=i)
        return table
    finally:
        plugin.leave()


@dataclass(frozen=True)
class Recovery:
    """What a lost worker costs a run: the tasks to submit again and the refcounts of what they produce.

    ``rerun`` (in dependency order) holds every task that had not completed
    and cannot complete without something lost, every task bound to a lost
    executor that had not finished, and every finished task whose lost
    result one of those needs (found upward from each rerun task, so a
    partition that finished on the lost worker runs again only when a
    consumer still waits for it); ``release`` holds finished or completed
    tasks whose Dask results are lost or unreliable and are not run again;
    ``expect`` maps each executor to the consumers each rerun handle will
    have (the tasks of ``rerun`` that read it).
    """

    rerun: tuple[str, ...]
    release: frozenset[str]
    expect: Mapping[str, Mapping[str, int]]


def _io(plan: Plan, graph: TaskGraph) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per task key: the handle refs it reads, and those it registers."""
    reads: dict[str, set[str]] = {}
    writes: dict[str, set[str]] = {}
    for part in plan.partitions:
        key = f"partition:{part.id}"
        reads[key] = {ref for _, ref in graph.sources[part.id]}
        writes[key] = {tensor_ref(t) for t in part.outputs}
    for b in plan.bridges:
        writes[f"import:{b.id}"] = {bridge_ref(b.id)}
        if f"export:{b.id}" in graph.dsk:
            reads[f"export:{b.id}"] = {tensor_ref(b.tensor)}
    for name, key in graph.output_keys.items():
        reads[key] = {tensor_ref(plan.outputs[name])}
    return reads, writes


def plan_recovery(plan: Plan, graph: TaskGraph, lost: set[str], finished: set[str], completed: set[str],
                  live: set[str]) -> Recovery:
    """Which tasks run again after the executors ``lost`` died with their worker.

    ``finished``: tasks whose Dask futures had finished; ``completed``:
    tasks the surviving workers ran to the end (their own account, which
    may be ahead of the futures); ``live``: the refs the survivors hold.
    A handle-valued task (partition, import) that completed on a survivor
    is available to a consumer that has not run, whose reference it still
    holds; a value (export, output) is available when its executor
    survived and it finished or completed.

    Examples
    --------
    Two executors ``a``, ``b``; ``p0`` on ``a`` feeds ``p1`` on ``b`` through
    bridge ``x@b``, ``p1`` is the output. ``b``'s worker died after the
    import finished and while ``p1`` ran: the import runs again from the
    export's value, which ``a`` still holds, and so does ``p1``.

    >>> from hetflow.engine.manifest import compile_manifest, loads
    >>> from hetflow.engine.planner import plan as make_plan
    >>> from hetflow.executors import probe
    >>> m = compile_manifest(loads(
    ...     "version: 1\\nname: r\\nexecutors: {a: {vendor: cpu}, b: {vendor: cpu}}\\nstages:\\n"
    ...     "  x: {op: ones, args: {shape: [2]}, executor: a}\\n"
    ...     "  y: {op: relu, inputs: [x], executor: b}\\noutputs: {y: y}\\n", "r.yaml"))
    >>> p = make_plan(m, probe)
    >>> g = lower(p, _OnWorker("r"))
    >>> sorted(g.dsk)
    ['export:x@b', 'import:x@b', 'output:y', 'partition:p0', 'partition:p1']
    >>> r = plan_recovery(p, g, {"b"}, {"partition:p0", "export:x@b", "import:x@b"},
    ...                   {"partition:p0", "export:x@b"}, set())
    >>> r.rerun, dict(r.expect)
    (('import:x@b', 'partition:p1', 'output:y'), {'b': {'bridge:x@b': 1, 'tensor:y': 1}})
    """
    dsk, bound = graph.dsk, graph.bound
    deps = {k: [d for a in task[1:] for d in _dependencies(a, dsk)] for k, task in dsk.items()}
    order = list(graphlib.TopologicalSorter(deps).static_order())
    reads, writes = _io(plan, graph)
    done = finished | completed

    def is_lost(key: str) -> bool:
        return bound.get(key) in lost

    # a survivor's task that completed after its dependency was lost may never be reported finished by Dask
    shaky: set[str] = set()
    for key in order:
        if key in completed and key not in finished and any(is_lost(d) or d in shaky for d in deps[key]):
            shaky.add(key)

    def available(dep: str, consumer: str) -> bool:
        if dep.startswith("phase:") or is_lost(dep):
            return dep.startswith("phase:")
        if dep not in writes:
            return True  # a value: kept by its future, which finishes unless it is in the rerun set
        return dep not in done or reads.get(consumer, set()) & writes[dep] <= live

    rerun = {k for k in dsk if is_lost(k) and k not in finished}
    rerun |= {k for k in graph.output_keys.values() if is_lost(k) or k in shaky}
    changed = True
    while changed:
        changed = False
        for key in order:
            if key not in rerun and key not in done and any(d in rerun or d in shaky or is_lost(d) for d in deps[key]):
                rerun.add(key)
                changed = True
        for key in list(rerun):
            for dep in deps[key]:
                if dep not in rerun and not available(dep, key):
                    rerun.add(dep)
                    changed = True
    expect: dict[str, dict[str, int]] = {}
    for key in rerun:
        for ref in reads.get(key, ()):
            producer = next((d for d in deps[key] if ref in writes.get(d, ())), None)
            if producer in rerun:
                counts = expect.setdefault(bound[producer], {})
                counts[ref] = counts.get(ref, 0) + 1
    release = frozenset(k for k in dsk if k not in rerun and k in finished | shaky and (is_lost(k) or k in shaky))
    return Recovery(tuple(k for k in order if k in rerun), release, {e: dict(sorted(c.items())) for e, c in sorted(expect.items())})


@dataclass
class _ClusterRun:
    """What ``execute`` reads back from a cluster run: the graph, the completed tasks and the recoveries."""

    graph: TaskGraph
    events: list[dict]
    recoveries: list[dict] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class _Gone:
    """Workers that hosted executors and left the cluster."""

    workers: list[str]


class Cluster:
    """A Dask cluster hetflow runs on, and the client connected to it."""

    def __init__(self, client: Client, kind: str, target: str, owned: Any = None) -> None:
        self.client = client
        self.kind = kind
        self.target = target
        self._owned = owned
        self._workers: list[WorkerInfo] | None = None

    @classmethod
    def local(cls, workers: int, threads_per_worker: int | None = None) -> Cluster:
        """Start a ``LocalCluster`` of ``workers`` processes on loopback.

        Its workers' own logs are silenced: hetflow reports a failing task
        itself, and Dask's "Compute Failed" tracebacks would bury that.
        """
        from distributed import LocalCluster

        if workers < 1:
            raise UsageError("--workers must be at least 1")
        if threads_per_worker is not None and threads_per_worker < 1:
            raise UsageError("--threads-per-worker must be at least 1")
        threads = threads_per_worker or max(1, (os.cpu_count() or 1) // workers)
        lc = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                          dashboard_address=":0", silence_logs=logging.CRITICAL)
        try:
            client = Client(lc, set_as_default=False)
        except BaseException:
            lc.close()
            raise
        return cls(client, "local-cluster", lc.scheduler_address, owned=lc)

    @classmethod
    def connect(cls, target: str, *, timeout: float = _CONNECT_TIMEOUT_S) -> Cluster:
        """Join an existing cluster: ``tcp://HOST:PORT`` or the path of a scheduler file."""
        if os.path.isfile(target):
            kwargs: dict[str, Any] = {"scheduler_file": target}
        elif "://" in target:
            kwargs = {"address": target}
        else:
            raise UsageError(f"--scheduler expects tcp://HOST:PORT or a scheduler file; {target!r} is neither "
                             "(no such file, no scheme)")
        try:
            client = Client(**kwargs, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise UsageError(f"cannot connect to the Dask scheduler at {target}: {e}") from None
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (TimeoutError, OSError):
            client.close()
            raise UsageError(f"the Dask cluster at {target} has no workers (waited {timeout:g} s)") from None
        return cls(client, "cluster", target)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def _identity(self, n_workers: int = -1) -> dict:
        """The scheduler's identity, asked now: ``Client.scheduler_info``'s cache is overwritten
        in the background by a refresh that carries no workers."""
        return self.client.sync(self.client.scheduler.identity, n_workers=n_workers)

    @property
    def address(self) -> str:
        return self.client.scheduler.address

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's URL; ``None`` when the scheduler serves none (a local one without bokeh)."""
        if "dashboard" not in self._identity(0).get("services", {}):
            return None
        if self._owned is not None and importlib.util.find_spec("bokeh") is None:
            return None
        return self.client.dashboard_link

    def workers(self, vendors: tuple[Vendor, ...] = ()) -> list[WorkerInfo]:
        """Every worker, sorted by name, with its offers for ``vendors`` probed; cached."""
        if self._workers is None:
            info = self._identity()["workers"]
            self._workers = sorted(
                (WorkerInfo(address, str(w.get("name", address)), int(w.get("nthreads", 1)),
                            dict(w.get("resources") or {})) for address, w in info.items()),
                key=lambda w: (_sort_name(w.name), w.address))
        missing = [v for v in vendors if any(v not in w.offers for w in self._workers)]
        if missing:
            got = self.client.run(worker_offers, [v.value for v in missing], on_error="return",
                                  workers=[w.address for w in self._workers])
            for w in self._workers:
                answer = got.get(w.address)
                if isinstance(answer, BaseException) or answer is None:
                    why = f"{type(answer).__name__}: {answer}" if answer is not None else "it did not answer"
                    raise UsageError(f"worker {w.name} ({w.address}) cannot run hetflow: {why}; "
                                     "install hetflow on every worker") from None
                w.offers.update({o.vendor: o for o in answer})
        return self._workers

    def refresh(self) -> None:
        """Forget the workers asked before (one left, one joined): the next question asks the scheduler again."""
        self._workers = None

    def offered(self) -> str:
        """What each worker offers, every vendor probed: for messages about what is missing."""
        return "; ".join(w.summary() for w in self.workers(tuple(Vendor))) or "no workers"

    def probe(self, vendor: Vendor) -> Offer:
        """The cluster's offer for ``vendor``: available when at least one worker offers it."""
        workers = self.workers((vendor,))
        having = [(w, w.offer(vendor)) for w in workers]
        having = [(w, o) for w, o in having if o is not None and o.available]
        if not having:
            return Offer(vendor, False, f"no worker of the cluster offers {vendor.value} (the cluster offers: "
                                        f"{self.offered()})")
        first = having[0][1]
        names = ", ".join(w.name for w, _ in having)
        return Offer(vendor, True, f"offered by {len(having)} of {len(workers)} workers ({names})",
                     first.devices, first.dtypes)

    def place(self, plan: Plan, manifest: Manifest, mapping: Mapping[str, str] | None = None) -> Plan:
        """``plan`` with a worker for every executor; raises :class:`ManifestError` when one has none."""
        mapping = dict(mapping or {})
        workers = self.workers(tuple({e.vendor: None for e in plan.executors.values()}))
        unknown = [e for e in mapping if e not in plan.executors]
        if unknown:
            raise UsageError(f"--place {unknown[0]}=...: the manifest declares no executor {unknown[0]!r} "
                             f"(declared: {', '.join(plan.executors)})")
        load = {w.address: 0 for w in workers}
        placed = {}
        problems = []
        pinned_first = sorted(plan.executors.values(), key=lambda e: self._candidates(e, workers, mapping)[0] is workers)
        for e in pinned_first:
            where = manifest.executors[e.name].vendor_origin if e.name in manifest.executors else None
            pool, reason = self._candidates(e, workers, mapping)
            able = [w for w in pool if _can_host(w, e.vendor, e.device)]
            if not able:
                if pool is workers:
                    why = f"no worker offers {e.vendor.value}" + ("" if e.vendor is Vendor.cpu else f" device {e.device}")
                elif not pool:
                    why = f"{reason} matches no worker"
                else:
                    why = f"{reason} names worker(s) {', '.join(w.name for w in pool)}, which do not offer {e.vendor.value}"
                problems.append(Diagnostic(where, f"executor {e.name!r} ({e.vendor.value}) cannot be placed on the "
                                                  f"cluster at {self.target}: {why}; the cluster offers: {self.offered()}"))
                continue
            pick = min(able, key=lambda w: (load[w.address], _sort_name(w.name), w.address))
            load[pick.address] += 1
            placed[e.name] = dataclasses.replace(e, worker=pick.address, worker_name=pick.name,
                                                 worker_reason=f"{reason}; worker {pick.name}")
        if problems:
            raise ManifestError(problems)
        return dataclasses.replace(plan, executors={name: placed[name] for name in plan.executors})

    @staticmethod
    def _candidates(e: Any, workers: list[WorkerInfo], mapping: Mapping[str, str]) -> tuple[list[WorkerInfo], str]:
        if e.name in mapping:
            wanted = mapping[e.name]
            return [w for w in workers if wanted in (w.name, w.address)], f"--place {e.name}={wanted}"
        resource = RESOURCE_PREFIX + e.name
        tagged = [w for w in workers if w.resources.get(resource, 0) > 0]
        if tagged:
            return tagged, f"worker resource {resource}"
        return workers, f"offers {e.vendor.value}, fewest executors"

    def describe(self) -> dict:
        return {
            "kind": self.kind, "address": self.address, "dashboard": self.dashboard_link,
            "workers": [{"address": w.address, "name": w.name, "nthreads": w.nthreads, "resources": dict(w.resources)}
                        for w in self.workers()],
        }

    def run_graph(self, plan: Plan, run_id: str, stream: EventStream, cache: CacheUse | None = None,
                  phases: Any = None) -> tuple[_ClusterRun, list, BaseException | None, dict]:
        """Run the lowered graph of a placed ``plan``: (completed tasks, results, failure, live activations)."""
        missing = [e.name for e in plan.executors.values() if e.worker is None]
        if missing:
            raise ValueError(f"executors {missing} have no worker: Cluster.place the plan first")
        client = self.client
        topic = PLUGIN_PREFIX + run_id
        flushed: set[str] = set()
        flush_cond = threading.Condition()

        def on_event(item: tuple[float, dict]) -> None:
            _, event = item
            if event.get("event") == "flush":
                with flush_cond:
                    flushed.add(event.get("worker"))
                    flush_cond.notify_all()
            stream.emit(event)

        graph = lower(plan, _OnWorker(run_id))
        client.subscribe_topic(topic, on_event)
        plugin = HetflowWorkerPlugin(run_id, plan, cache)
        futures: dict[str, Any] = {}
        failure: BaseException | None = None
        results: list[Any] = []
        recoveries: list[dict] = []
        registered = False
        try:
            # before the plugin: its set-up on each worker reports the worker's warm-up
            stream.emit(run_event("started", run_id, tasks=len(graph.dsk), mode=self.kind, scheduler=self.address,
                                  dashboard=self.dashboard_link, workers=len(self.workers())))
            client.register_plugin(plugin, name=plugin.name)
            registered = True
            phase_values: dict[str, Any] = {}
            if phases is not None:
                self._run_phases(phases, run_id, futures, phase_values)
            generation: dict[str, int] = {}
            self._submit(plan, run_id, graph, futures, graph.dsk, generation, 0)
            finished: set[str] = set()
            while True:
                outcome = self._watch(plan, futures, finished)
                if not isinstance(outcome, _Gone):
                    failure = outcome
                    break
                plan = self._recover(plan, run_id, graph, futures, generation, outcome.workers, recoveries,
                                     phase_values, finished)
            if failure is None:
                values = dict(zip(graph.output_keys.values(),
                                  client.gather([futures[k] for k in graph.output_keys.values()])))
                results = [values.get(k) for k in graph.keys]
        except Exception as e:  # noqa: BLE001 - recorded by execute, like a stage failure
            failure = failure or e
        live: dict[str, int] = {}
        try:
            client.cancel([f for f in futures.values() if not f.done()])
            reports = client.run(_close_run, run_id, _CLOSE_WAIT_S, on_error="return") if registered else {}
            answered = set()
            for address, report in reports.items():
                if isinstance(report, BaseException):
                    continue
                answered.add(address)
                live.update(report["live"])
            with flush_cond:
                flush_cond.wait_for(lambda: answered <= flushed, timeout=_FLUSH_WAIT_S)
        finally:
            client.unsubscribe_topic(topic)
            # a registration that failed on one worker is still held by the scheduler, which would give it to new workers
            try:
                client.unregister_worker_plugin(plugin.name)
            except Exception:  # noqa: BLE001 - a worker that died has no plugin to remove
                pass
        for name in plan.executors:
            live.setdefault(name, 0)
        for entry in recoveries:
            _mark_cached(entry, stream.events)
        return (_ClusterRun(graph, stream.tasks(), recoveries), results, _as_failure(failure),
                dict(sorted(live.items())))

    def _run_phases(self, runner: Any, run_id: str, futures: dict[str, Any], values: dict[str, Any]) -> None:
        """Emulator phases on a cluster, in the same two rounds as in-process.

        ``execute``, ``mem-plans``, ``rom-histogram`` and ``plan`` run here on
        the client (the fast backend's MO/RH runners are threads of the
        process that ran ``execute``); every ``witness`` chunk is its own task,
        bound to no worker, so the chunks spread over the whole cluster; a
        witness array is gathered here and scattered once, and the bridge's
        import task reads it from Dask like any other input.
        """
        import dask.threaded

        first = runner.round1()
        dask.threaded.get(first, list(first))
        second = runner.round2()
        for pid, p in runner.phases.items():
            if p.phase != "witness":
                continue
            program, data = runner._program(p.emulator)
            traces = runner.results[p.inputs[0]].min_traces
            backend = runner.emulators[p.emulator].backend
            chunks = [self.client.submit(_witness_on_worker, run_id, pid, i, f"emulator:{p.emulator}", program, trace,
                                         len(data), backend, key=f"witness:{pid}:{i}@{run_id}", pure=False, retries=3)
                      for i, trace in enumerate(traces)]
            tables = self.client.gather(chunks)
            portable = runner._witness_gather(pid, tables)
            futures[f"phase:{pid}"] = self.client.scatter(portable, hash=False)
            values[f"phase:{pid}"] = portable
        rest = {k: v for k, v in second.items() if not k.startswith("witness:") and runner.phases[k[6:]].phase != "witness"}
        if rest:
            dask.threaded.get(rest, list(rest))

    def _submit(self, plan: Plan, run_id: str, graph: TaskGraph, futures: dict[str, Any], keys: Any,
                generation: dict[str, int], gen: int, given: Mapping[str, Any] | None = None) -> None:
        """Submit ``keys`` of the graph in dependency order as generation ``gen``.

        A dependency in ``given`` stands for itself (a kept future, or
        ``None`` for a handle its executor still holds); any other comes
        from ``futures``.
        """
        dsk = graph.dsk
        wanted = set(keys)
        order = graphlib.TopologicalSorter(
            {key: [d for a in dsk[key][1:] for d in _dependencies(a, dsk) if d in wanted] for key in wanted}
        ).static_order()
        runtime = _OnWorker(run_id, gen)
        suffix = f"~{gen}" if gen else ""
        client = self.client
        for key in order:
            fn, *args = dsk[key]
            if gen:
                fn = getattr(runtime, fn.__name__)
            args = [_substitute(a, dsk, futures if given is None else {**futures, **given}) for a in args]
            executor = graph.bound.get(key)
            generation[key] = gen
            if executor is None:
                futures[key] = client.submit(fn, *args, key=f"{key}@{run_id}{suffix}", pure=False, retries=3)
            else:
                futures[key] = client.submit(
                    fn, *args, key=f"{key}@{run_id}{suffix}", pure=False, retries=0,
                    workers=[plan.executors[executor].worker], allow_other_workers=False,
                )

    def _watch(self, plan: Plan, futures: dict[str, Any], finished: set[str]) -> BaseException | _Gone | None:
        """Wait for every future: ``None``, the first failure, or the hosting workers that are gone.

        ``finished`` gathers the keys whose futures finished, as they do: a
        future of a result lost with its worker later says ``lost`` or
        ``pending``, but the task did run.
        """
        hosting = {e.worker for e in plan.executors.values()}
        done: queue.Queue = queue.Queue()

        def on_done(f: Any, key: str) -> None:
            if f.status == "finished" and futures.get(key) is f:
                finished.add(key)
            done.put((key, f))

        for key, f in futures.items():
            f.add_done_callback(lambda f, key=key: on_done(f, key))
        remaining = set(futures)
        poll = time.monotonic() + _POLL_S
        while remaining:
            try:
                key, f = done.get(timeout=max(0.0, poll - time.monotonic()))
            except queue.Empty:
                key, f = None, None
            if f is not None and futures.get(key) is f and key in remaining:
                remaining.discard(key)
                if f.status == "error":
                    return f.exception()
                if f.status == "cancelled":
                    return ClusterFailure(f"task {f.key} was cancelled by the cluster", {"tasks": [str(f.key)]})
            if time.monotonic() >= poll:
                alive = set(self._identity()["workers"])
                gone = sorted(w for w in hosting if w not in alive)
                if gone:
                    return _Gone(gone)
                poll = time.monotonic() + _POLL_S
        return None

    def _recover(self, plan: Plan, run_id: str, graph: TaskGraph, futures: dict[str, Any],
                 generation: dict[str, int], gone: list[str], recoveries: list[dict],
                 phase_values: Mapping[str, Any], finished: set[str]) -> Plan:
        """Re-create the executors of the ``gone`` workers elsewhere and submit again what they lost.

        Raises :class:`ClusterFailure` when no live worker can host one of
        them: the run ends at once with the reason.
        """
        detected = time.time()
        names = {w.address: w.name for w in self.workers()}
        lost = {e.name for e in plan.executors.values() if e.worker in gone}
        alive = self._alive_workers(tuple({plan.executors[e].vendor: None for e in lost}), gone)
        load = {w.address: 0 for w in alive}
        for e in plan.executors.values():
            if e.name not in lost and e.worker in load:
                load[e.worker] += 1
        moved = {}
        for name in sorted(lost):
            e = plan.executors[name]
            able = [w for w in alive if _can_host(w, e.vendor, e.device)]
            tagged = [w for w in able if w.resources.get(RESOURCE_PREFIX + name, 0) > 0]
            if not able:
                offered = "; ".join(w.summary() for w in alive) or "no live workers"
                raise _lost(plan, graph, futures, gone, names,
                            f"no live worker can host executor {name!r}: none offers {e.vendor.value}"
                            + ("" if e.vendor is Vendor.cpu else f" device {e.device}")
                            + f" (the live workers offer: {offered})", recoveries)
            pick = min(tagged or able, key=lambda w: (load[w.address], _sort_name(w.name), w.address))
            load[pick.address] += 1
            moved[name] = dataclasses.replace(e, worker=pick.address, worker_name=pick.name,
                                              worker_reason=f"re-created after worker {names.get(e.worker, e.worker)} "
                                                            f"was lost; worker {pick.name}")
        survivors = [w.address for w in alive]
        paused = self.client.run(_pause_run, run_id, _CLOSE_WAIT_S, workers=survivors, on_error="return")
        completed: set[str] = set()
        live: set[str] = set()
        for address, report in paused.items():
            if isinstance(report, BaseException) or report["running"]:
                why = report if isinstance(report, BaseException) else f"{report['running']} task(s) still running"
                raise ClusterFailure(f"recovery from the loss of worker {', '.join(gone)} could not hold the run "
                                     f"on worker {address}: {why}", {"workers": gone})
            completed.update(report["completed"])
            live.update(report["live"])
        ran = set(finished)
        recovery = plan_recovery(plan, graph, lost, ran, completed, live)
        rerun = set(recovery.rerun)
        # released, not cancelled: Dask cancels every dependent of a cancelled key, finished ones too,
        # while a released key is forgotten once no task waits for it (those that wait are rerun as well)
        for key in rerun | recovery.release:
            f = futures.pop(key, None)
            if f is not None:
                f.release()
                finished.discard(key)
        revoked = [(k, generation[k]) for k in recovery.rerun if k in generation]
        new_plan = dataclasses.replace(plan, executors={n: moved.get(n, e) for n, e in plan.executors.items()})
        by_worker: dict[str, tuple[list, dict]] = {a: ([], {}) for a in survivors}
        for name, e in moved.items():
            by_worker[e.worker][0].append(e)
        for executor, counts in recovery.expect.items():
            by_worker[new_plan.executors[executor].worker][1].update(counts)
        for address, (adopt, expect) in by_worker.items():
            self.client.run(_resume_run, run_id, revoked, adopt, expect, workers=[address])
        given: dict[str, Any] = {}
        for key in recovery.rerun:
            for a in graph.dsk[key][1:]:
                for dep in _dependencies(a, graph.dsk) + ([a] if isinstance(a, str) and a.startswith("phase:") else []):
                    if dep in rerun:
                        continue
                    if dep.startswith("phase:") and futures[dep].status != "finished":
                        futures[dep] = self.client.scatter(phase_values[dep], hash=False)
                    if dep not in futures or dep in recovery.release:
                        given[dep] = None
        gen = max(generation.values(), default=0) + 1
        self._submit(new_plan, run_id, graph, futures, recovery.rerun, generation, gen, given)
        self.refresh()
        where = {k: new_plan.executors[graph.bound[k]] for k in recovery.rerun if k in graph.bound}
        recoveries.append({
            "lost_workers": [{"address": w, "name": names.get(w)} for w in gone],
            "detected_at": utc_iso(detected),
            "generation": gen,
            "executors": {n: {"from": {"address": plan.executors[n].worker, "name": plan.executors[n].worker_name},
                              "to": {"address": e.worker, "name": e.worker_name}} for n, e in moved.items()},
            "recomputed": [{"task": k, "executor": where[k].name if k in where else None,
                            "worker": where[k].worker if k in where else None,
                            "had_finished": k in ran or k in completed} for k in recovery.rerun],
            "released": sorted(recovery.release),
        })
        return new_plan

    def _alive_workers(self, vendors: tuple[Vendor, ...], gone: list[str]) -> list[WorkerInfo]:
        """The workers alive now, a restarted one included, with their offers for ``vendors``."""
        known = {w.address: w for w in self.workers()}
        info = self._identity()["workers"]
        alive = [known.get(a) or WorkerInfo(a, str(w.get("name", a)), int(w.get("nthreads", 1)),
                                            dict(w.get("resources") or {}))
                 for a, w in info.items() if a not in gone]
        fresh = [w for w in alive if any(v not in w.offers for v in vendors)]
        if fresh:
            got = self.client.run(worker_offers, [v.value for v in vendors], on_error="return",
                                  workers=[w.address for w in fresh])
            for w in fresh:
                answer = got.get(w.address)
                if isinstance(answer, list):
                    w.offers.update({o.vendor: o for o in answer})
        return sorted(alive, key=lambda w: (_sort_name(w.name), w.address))


def _lost(plan: Plan, graph: TaskGraph, futures: Mapping[str, Any], gone: list[str], names: Mapping[str, str],
          reason: str, recoveries: list[dict]) -> ClusterFailure:
    """The failure of a run that cannot recover from losing the ``gone`` workers, saying what was lost and why."""
    executors = sorted(e.name for e in plan.executors.values() if e.worker in gone)
    finished = {k for k, f in futures.items() if f.status == "finished"}
    unfinished = sorted(k for k, e in graph.bound.items() if e in executors and k not in finished)
    dependents: dict[str, set[str]] = {}
    for key, task in graph.dsk.items():
        for dep in {d for a in task[1:] for d in _dependencies(a, graph.dsk)}:
            dependents.setdefault(dep, set()).add(key)
    held = []
    for part in plan.partitions:
        key = f"partition:{part.id}"
        if part.executor in executors and key in finished and dependents.get(key, set()) - finished:
            held.extend(part.outputs)
    for b in plan.bridges:
        key = f"import:{b.id}"
        if b.destination in executors and key in finished and dependents.get(key, set()) - finished:
            held.append(f"{b.tensor} (imported by bridge {b.id})")
    where = ", ".join(f"{w} (name {names.get(w, '?')})" for w in gone)
    message = (f"worker {where} died during the run; it hosted executor(s) {', '.join(executors)}; lost: "
               f"{len(held)} activation(s) held there ({', '.join(held) or 'none'}) and {len(unfinished)} unfinished "
               f"task(s) ({', '.join(unfinished) or 'none'}); {reason}")
    return ClusterFailure(message, {"workers": [{"address": w, "name": names.get(w)} for w in gone],
                                    "executors": executors, "activations": held, "tasks": unfinished,
                                    "reason": reason, "recoveries": list(recoveries)})


def _mark_cached(entry: dict, events: list[dict]) -> None:
    """Say of each recomputed partition whether its run after the recovery took it from the cache."""
    after = {}
    for e in events:
        if e.get("kind") == "partition" and e.get("event") == "finished":
            after[e["id"]] = e
    for item in entry["recomputed"]:
        if item["task"].startswith("partition:"):
            event = after.get(item["task"].split(":", 1)[1])
            if event is not None and event.get("worker") == item["worker"]:
                item["cached"] = bool(event.get("cached"))


def _as_failure(failure: BaseException | None) -> BaseException | None:
    """Dask's own errors about a lost task become a ClusterFailure; stage failures pass through."""
    if failure is None or isinstance(failure, ClusterFailure):
        return failure
    from distributed.scheduler import KilledWorker

    if isinstance(failure, KilledWorker):
        return ClusterFailure(f"Dask gave up on task {failure.task}: it was running on workers that died "
                              f"({failure.last_worker.address if failure.last_worker else 'unknown'})",
                              {"tasks": [str(failure.task)]})
    if isinstance(failure, RuntimeError) and ("does not host run" in str(failure) or "is closed" in str(failure)):
        return ClusterFailure(str(failure), {})
    return failure


def _can_host(worker: WorkerInfo, vendor: Vendor, device: int) -> bool:
    offer = worker.offer(vendor)
    if offer is None or not offer.available:
        return False
    return vendor is Vendor.cpu or device < len(offer.devices)


def _sort_name(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)
