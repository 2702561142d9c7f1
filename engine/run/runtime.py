"""The task wrappers a lowered graph calls, and the table of the handles they hold.

:class:`LocalRuntime` is what the lowered tasks call. It owns the
executor instances of one run and a :class:`HandleTable` that counts
references: each handle a task produces is registered with the number of
tasks that will consume it (``TaskGraph.refcounts``), a consumer gives its
reference back when it is done, and the last one releases the handle on
its executor. The same runtime serves the threaded scheduler in this
process and, inside each worker, a Dask cluster
(:mod:`hetflow.engine.run.workerside`).

Every task reports its start and its end to the run's event stream
(:mod:`hetflow.engine.run.events`); a partition retries and times out as its
stages say.

This is the run's hot path: in the worst case, every stage its own
partition with a bridge to the next, a 10,000-stage chain is 29,999 tasks,
and each wrapper is paid once per task on top of Dask's own scheduling
(about 80-170 us a task on the threaded scheduler here). So a wrapper
takes no lock to read a handle, builds one event dict and hands it over
without a copy, reads the clock once at its start and once at its end,
and keeps a partition's attempt count in a local; the executor decodes a
partition's payload once per run (:func:`hetflow.executors.payload.decode_plan`).
Measured with ``bench/bench_overhead.py``'s worst case against raw Dask
on the same lowered graph; the figures are in ``bench/README.md``.
"""

from __future__ import annotations

import inspect
import threading
import time
import weakref
from threading import current_thread
from typing import Any, Callable, Mapping

from hetflow.engine.run.cancel import Cancel
from hetflow.engine.errors import StageFailure
from hetflow.engine.run.lowering import TaskGraph, bridge_ref, lower, subgraph_plan, tensor_ref
from hetflow.engine.plan.plandata import Plan
from hetflow.engine.store.records import micros
from hetflow.engine.run.threads import here as _pools_here
from hetflow.executors.base import ActivationHandle, Dtype, Executor, ExecutorError, PortableActivation
from hetflow.executors.cpu import take_numeric

__all__ = ["StageTimedOut", "ClusterFailure", "NotHeld", "HandleTable", "LocalRuntime", "abandoned_calls"]

# Executor calls given up by a timeout that are still running in this process, all runtimes together.
_abandoned_lock = threading.Lock()
_abandoned_calls = [0]


def abandoned_calls() -> int:
    """How many executor calls a timeout gave up on are still running in this process.

    The CLI ends its process without the interpreter's exit handlers
    while one is: a BLAS library's exit handler waits for the call's
    threads, and the interpreter has stopped the daemon thread that
    made the call, so that wait never ends.
    """
    return _abandoned_calls[0]

# the name of the thread a task runs in, read once per thread (``current_thread().name`` is two Python calls)
_here = threading.local()

_EVENT_OF = {"started": "started", "succeeded": "finished", "failed": "failed", "retried": "retried"}


class StageTimedOut(ExecutorError):
    """One attempt of a partition ran past its ``timeout``."""

    def __init__(self, seconds: float, node: str | None) -> None:
        super().__init__(f"timed out after {seconds:g} s")
        self.seconds = seconds
        self.node = node


class ClusterFailure(Exception):
    """The cluster lost part of a run (a worker hosting executors died); ``lost`` says what."""

    def __init__(self, message: str, lost: Mapping[str, Any]) -> None:
        super().__init__(message, dict(lost))
        self.message = message
        self.lost = dict(lost)

    def __str__(self) -> str:
        return self.message


class NotHeld(RuntimeError):
    """A task needs a handle or an executor its worker does not hold: Dask ran it again on its own.

    Dask recomputes a lost result from its lineage, on whichever worker the
    task's restrictions allow, a task that already ran included; the
    handles such a task reads were given back when it first ran. The
    cluster runtime raises this instead of touching an executor, and the
    client turns it into a recovery of its own
    (:mod:`hetflow.engine.run.recovery`), which knows what to run again.
    """


class HandleTable:
    """Reference counts of the handles one run holds, keyed by refcount key.

    Reading a handle takes no lock: a dict lookup is atomic, and a ref is
    registered before any task that reads it can start (Dask runs a
    consumer after its producer). Registering, giving back and releasing
    change counts and take the lock.

    Examples
    --------
    >>> from hetflow.executors.cpu import CpuExecutor
    >>> from hetflow.executors.base import TensorShape
    >>> ex = CpuExecutor("host")
    >>> table = HandleTable({"tensor:x": 2})
    >>> table.register("tensor:x", ex, ex.alloc_activation(TensorShape((2,)), Dtype.fp32))
    >>> table.live(), ex.live_activations()
    ({'tensor:x': 2}, 1)
    >>> table.done("tensor:x"); table.done("tensor:x")
    >>> table.live(), ex.live_activations()
    ({}, 0)
    """

    def __init__(self, refcounts: Mapping[str, int]) -> None:
        self._expected = dict(refcounts)
        self._live: dict[str, tuple[Executor, ActivationHandle, int]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def register(self, ref: str, executor: Executor, handle: ActivationHandle) -> None:
        count = self._expected.get(ref, 0)
        with self._lock:
            keep = count > 0 and not self._closed
            # a producer run again after a lost worker replaces what its first run registered, in one
            # assignment: a reader, who takes no lock, sees the old handle or the new one, never neither
            replaced = self._live.get(ref)
            if keep:
                self._live[ref] = (executor, handle, count)
            elif replaced is not None:
                del self._live[ref]
        if replaced is not None:
            replaced[0].release_activation(replaced[1])
        if not keep:
            executor.release_activation(handle)

    def expect(self, counts: Mapping[str, int]) -> None:
        """Set how many consumers the next handle registered under each ref will have."""
        with self._lock:
            self._expected.update(counts)

    def live(self) -> dict[str, int]:
        """Each ref held now, with the consumers it still waits for."""
        with self._lock:
            return {ref: count for ref, (_, _, count) in self._live.items()}

    def get(self, ref: str) -> ActivationHandle:
        try:
            return self._live[ref][1]
        except KeyError:
            raise NotHeld(f"handle {ref} is not held here: it was released, or never made on this worker") from None

    def done(self, ref: str) -> None:
        with self._lock:
            if self._closed and ref not in self._live:
                return
            executor, handle, count = self._live[ref]
            if count > 1:
                self._live[ref] = (executor, handle, count - 1)
                return
            del self._live[ref]
        executor.release_activation(handle)

    def release_all(self) -> int:
        with self._lock:
            held, self._live = list(self._live.values()), {}
        for executor, handle, _ in held:
            executor.release_activation(handle)
        return len(held)

    def close(self) -> int:
        """Release every handle held, and from now on every handle registered (an abandoned task's)."""
        with self._lock:
            self._closed = True
        return self.release_all()


# id(plan) -> its partitions' sub-graph plans, while the plan lives
_SUBPLANS: dict[int, dict[str, Any]] = {}


def subgraph_plans(plan: Plan) -> dict[str, Any]:
    """Every partition's :class:`~hetflow.executors.base.SubGraphPlan`, encoded once per plan in this process.

    A plan does not change once made, nor does what its partitions encode
    to; a process that runs one plan again (a service, a benchmark, a
    resumed or verified run of the same plan) encoded all of it per run:
    40 ms of a 10,000-partition run here. The entry goes with the plan.
    """
    key = id(plan)
    got = _SUBPLANS.get(key)
    if got is None:
        got = {p.id: subgraph_plan(plan, p) for p in plan.partitions}
        _SUBPLANS[key] = got
        weakref.finalize(plan, _SUBPLANS.pop, key, None)
    return got


class LocalRuntime:
    """Executes the lowered tasks in this process against executor instances."""

    def __init__(self, plan: Plan, executors: Mapping[str, Executor], *,
                 emit: Callable[[dict], None] | None = None, worker: str | None = None,
                 cache: Any = None, cancel: Cancel | None = None, fold_bridges: bool = False) -> None:
        self.plan = plan
        self.executors = dict(executors)
        self.cache = cache
        self.cancel = cancel or Cancel()
        self.running: set[str] = set()
        # fold_bridges: every task runs in this process, so a bridge runs inside its producer's task
        # (hetflow.engine.run.lowering, "Folded bridges")
        self.graph: TaskGraph = lower(plan, self, fold_bridges)
        self.handles = HandleTable(self.graph.refcounts)
        self.events: list[dict] = []
        self.emit = emit or (lambda event: None)
        self.worker = worker
        self.abandoned = 0
        self._bridges = {b.id: b for b in plan.bridges}
        self._partitions = {p.id: p for p in plan.partitions}
        self._subplans = subgraph_plans(plan)
        # per partition: its input refs, in the order its task receives them
        self._refs = {pid: [ref for _, ref in refs] for pid, refs in self.graph.sources.items()}

    def warm_up(self) -> float:
        """Load, before the run's clock starts, what its first tasks would load on theirs; the seconds it took.

        A partition's time should be its own work. The first one in a
        process used to carry the import of ``ml_dtypes`` (numpy's bf16,
        fp8 and int4 types, 0.6-0.8 s here), which the first op, export or
        import that names such a dtype brings in: it is loaded here when a
        stage of the plan has one of them (a run of fp32, fp16 and int8
        tensors never loads it). An executor with a ``warm_up()`` method
        (a GPU SDK's context, a compiled kernel cache) gets it called too,
        with its partitions when it takes an argument: each one's
        :class:`SubGraphPlan` and the ``(shape, dtype)`` of its inputs and
        nodes, so it can compile what they will dispatch (the Vulkan
        executor's shaders). The record keeps the seconds as ``warm_up``.
        """
        t0 = time.perf_counter()
        for dtype in {node.dtype for node in self.plan.nodes.values()}:
            dtype.numpy  # noqa: B018 - the lookup loads what holds the dtype's values
        for name, executor in self.executors.items():
            hook = getattr(executor, "warm_up", None)
            if not callable(hook):
                continue
            if not inspect.signature(hook).parameters:
                hook()
                continue
            nodes, mine = self.plan.nodes, []
            for pid, part in self._partitions.items():
                if part.executor != name:
                    continue
                known = {n: (nodes[n].shape, nodes[n].dtype) for n in (*part.inputs, *part.nodes)
                         if n in nodes and nodes[n].shape is not None}
                mine.append((self._subplans[pid], known))
            hook(mine)
        return round(time.perf_counter() - t0, 6)

    def _event(self, kind: str, id: str, executor: str, start: float, status: str, attempt: int = 1,
               **extra: Any) -> None:
        """Report one task's start or end: one dict, handed to the stream as it is.

        On a task's path there is no lock and no copy: ``list.append`` is
        atomic, and the record copies the closing events once, at its end.
        """
        try:
            thread = _here.thread
        except AttributeError:
            thread = _here.thread = current_thread().name
        if status == "started":
            self.emit({"event": "started", "kind": kind, "id": id, "executor": executor, "worker": self.worker,
                       "thread": thread, "attempt": attempt, "start": start, "status": status,
                       **extra, "time": start})
            return
        end = time.time()
        # one dict literal, its ``time`` (the stream's arrival order key) the end, as the stream would set it
        event = {"event": _EVENT_OF[status], "kind": kind, "id": id, "executor": executor, "worker": self.worker,
                 "thread": thread, "attempt": attempt, "start": start, "end": end,
                 "duration_s": micros(end - start), "status": status, **extra, "time": end}
        generation = getattr(_here, "generation", 0)
        if generation:  # a task a cluster's recovery ran again: its first run's entry stays, and this one says so
            event["generation"] = generation
        if status == "succeeded" or status == "failed":
            self.events.append(event)
        self.emit(event)

    def _attempts(self, pid: str, part: Any, start: float, call: Callable[[], list[ActivationHandle]]
                  ) -> tuple[list[ActivationHandle], int]:
        """``call`` up to 1 + ``retries`` times, each attempt under the partition's ``timeout``; (outputs, attempt)."""
        attempt = 1
        while True:
            self.cancel.check()
            self._event("partition", pid, part.executor, start, "started", attempt)
            self.running.add(pid)
            try:
                return (call() if part.timeout is None else self._within(part, call)), attempt
            except ExecutorError as e:
                if attempt > part.retries or self.cancel.requested:
                    e.attempt = attempt
                    raise
                self._event("partition", pid, part.executor, start, "retried", attempt, node=e.node, error=str(e),
                            timed_out=isinstance(e, StageTimedOut))
                attempt += 1
                start = time.time()

    def _within(self, part: Any, call: Callable[[], list[ActivationHandle]]) -> list[ActivationHandle]:
        """Run ``call`` in its own thread and stop waiting after ``part.timeout`` seconds.

        An executor call cannot be interrupted safely (a GPU kernel, a BLAS
        call), so a timed-out attempt is abandoned: it runs to its end in
        the background and the handles it returns are released at once.
        """
        box: dict[str, Any] = {}
        lock = threading.Lock()
        done = threading.Event()
        executor = self.executors[part.executor]

        def attempt() -> None:
            try:
                _pools_here()  # a fresh thread: its OpenMP pool is not yet limited
                result: Any = call()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                result, box["error"] = None, e
            with lock:
                if box.get("abandoned"):
                    for handle in result or ():
                        executor.release_activation(handle)
                    self.abandoned -= 1
                    with _abandoned_lock:
                        _abandoned_calls[0] -= 1
                else:
                    box["result"] = result
            done.set()

        threading.Thread(target=attempt, name=f"{threading.current_thread().name}-{part.id}", daemon=True).start()
        # a deadline beyond what a lock's wait takes (timeout: .inf, 1e300) is none: a wait of it raised OverflowError
        done.wait(part.timeout if part.timeout < threading.TIMEOUT_MAX else None)
        with lock:
            if "result" not in box and "error" not in box:
                box["abandoned"] = True
                self.abandoned += 1
                with _abandoned_lock:
                    _abandoned_calls[0] += 1
                raise StageTimedOut(part.timeout, part.nodes[0] if len(part.nodes) == 1 else None)
        if "error" in box:
            raise box["error"]
        return box["result"]

    def run_partition(self, pid: str, *sources: Any) -> dict:
        start = time.time()
        _pools_here()  # the ops run in this thread: per-thread (OpenMP) pools take the limit here
        part = self._partitions[pid]
        executor = self.executors[part.executor]
        refs = self._refs[pid]
        handles = self.handles
        take_numeric()  # a note left by this thread's last partition that failed is not this one's
        try:
            inputs = [handles.get(ref) for ref in refs]
            if self.cache is None and part.timeout is None and not part.retries:
                # one attempt, in this thread: what _attempts does for it, without its frames
                self.cancel.check()
                self._event("partition", pid, part.executor, start, "started")
                self.running.add(pid)
                outputs, attempt = executor.execute(self._subplans[pid], inputs), 1
            elif self.cache is None:
                subplan = self._subplans[pid]
                outputs, attempt = self._attempts(pid, part, start, lambda: executor.execute(subplan, inputs))
            else:
                outputs, attempt = self._attempts(pid, part, start, lambda: self.cache.compute(
                    pid, executor, self._subplans[pid], inputs, part.outputs))
        except ExecutorError as e:
            self._event("partition", pid, part.executor, start, "failed", getattr(e, "attempt", 1), node=e.node,
                        error=str(e), timed_out=isinstance(e, StageTimedOut))
            raise StageFailure(pid, e.node, str(e), getattr(e, "op", None), getattr(e, "user_traceback", None)) from None
        finally:
            self.running.discard(pid)
        produced = {}
        for tensor, handle in zip(part.outputs, outputs, strict=True):
            handles.register(tensor_ref(tensor), executor, handle)
            produced[tensor] = handle
        for ref in refs:
            handles.done(ref)
        cached = self.cache is not None and pid in self.cache.hit_set
        stored = self.cache is not None and pid in self.cache.stored_set
        unstored = self.cache.store_errors.get(pid) if self.cache is not None and self.cache.store_errors else None
        damaged = self.cache.damaged.get(pid) if self.cache is not None and self.cache.damaged else None
        unreadable = self.cache.unreadable.get(pid) if self.cache is not None and self.cache.unreadable else None
        rethreaded = self.cache.other_threads.get(pid) if self.cache is not None and self.cache.other_threads else None
        numeric = take_numeric()
        self._event("partition", pid, part.executor, start, "succeeded", attempt, nodes=list(part.nodes),
                    cached=cached, stored=stored, **({"store_error": unstored} if unstored else {}),
                    **({"cache_damaged": damaged} if damaged else {}),
                    **({"cache_other_threads": rethreaded} if rethreaded else {}),
                    **({"cache_unreadable": unreadable} if unreadable else {}), **({"numeric": numeric} if numeric else {}))
        return produced

    def run_and_bridge(self, pid: str, *sources: Any) -> dict:
        """Partition ``pid``'s task with the bridges of its outputs folded in: the partition, then each bridge's
        export and import, each reported as the separate tasks report them."""
        produced = self.run_partition(pid, *sources)
        export, import_ = self.export, self.import_
        for bid in self.graph.folded[pid]:
            import_(bid, export(bid, produced))
        return produced

    def run_chain(self, pids: tuple[str, ...], *sources: Any) -> dict:
        """The task of partitions that follow one another alone (:func:`hetflow.engine.run.lowering._chain`): each
        in turn, its folded bridges after it, as their own tasks would; the last one's outputs."""
        folded = self.graph.folded
        run_partition, run_and_bridge = self.run_partition, self.run_and_bridge
        produced: dict = {}
        for pid in pids:
            produced = run_and_bridge(pid) if pid in folded else run_partition(pid)
        return produced

    def restore_partition(self, pid: str) -> dict:
        """Partition ``pid``'s outputs from its cache entry, its inputs unread (a recovery's restore)."""
        start = time.time()
        part = self._partitions[pid]
        executor = self.executors[part.executor]
        self.cancel.check()
        self._event("partition", pid, part.executor, start, "started")
        outputs = None
        if self.cache is not None:
            try:
                outputs = self.cache.restore(pid, executor, part.outputs)
            except ExecutorError as e:
                self._event("partition", pid, part.executor, start, "failed", node=e.node, error=str(e))
                raise StageFailure(pid, e.node, str(e), getattr(e, "op", None), None) from None
        if outputs is None:
            message = (f"partition {pid}'s cache entry, found complete when the recovery began, could not be read "
                       f"on worker {self.worker}: the cache folder must be one every worker reaches")
            self._event("partition", pid, part.executor, start, "failed", node=None, error=message)
            raise StageFailure(pid, None, message, None, None)
        produced = {}
        for tensor, handle in zip(part.outputs, outputs, strict=True):
            self.handles.register(tensor_ref(tensor), executor, handle)
            produced[tensor] = handle
        self._event("partition", pid, part.executor, start, "succeeded", 1, nodes=list(part.nodes), cached=True,
                    stored=False, restored=True)
        return produced

    def export(self, bridge_id: str, produced: dict) -> PortableActivation:
        start = time.time()
        bridge = self._bridges[bridge_id]
        ref = tensor_ref(bridge.tensor)
        try:
            portable = self.executors[bridge.source].export_activation(self.handles.get(ref))
        except ExecutorError as e:
            self._event("export", bridge_id, bridge.source, start, "failed", error=str(e))
            raise StageFailure(self.plan.nodes[bridge.tensor].partition, None, f"export of {bridge.tensor!r}: {e}") from None
        self.handles.done(ref)
        self._event("export", bridge_id, bridge.source, start, "succeeded", bytes=portable.nbytes)
        return portable

    def import_(self, bridge_id: str, portable: PortableActivation) -> ActivationHandle:
        start = time.time()
        bridge = self._bridges[bridge_id]
        executor = self.executors[bridge.destination]
        try:
            handle = executor.import_activation(portable)
        except ExecutorError as e:
            self._event("import", bridge_id, bridge.destination, start, "failed", error=str(e))
            raise StageFailure(self.plan.nodes[bridge.consumers[0]].partition, None, f"import of {bridge.tensor!r}: {e}") from None
        self.handles.register(bridge_ref(bridge_id), executor, handle)
        self._event("import", bridge_id, bridge.destination, start, "succeeded", bytes=portable.nbytes)
        return handle

    def output(self, name: str, produced: dict) -> PortableActivation:
        start = time.time()
        tensor = self.plan.outputs[name]
        home = self.plan.nodes[tensor].executor
        portable = self.executors[home].export_activation(self.handles.get(tensor_ref(tensor)))
        self.handles.done(tensor_ref(tensor))
        self._event("output", name, home, start, "succeeded", bytes=len(portable.bytes))
        return portable
