"""Emulator phases on a cluster: where each ``witness`` phase runs, and the arrays they scatter.

A run with emulator phases runs them in the same two rounds as
in-process (:mod:`hetflow.engine.run.phases`). ``execute`` and the phases
that read its results run on the client; each ``witness`` phase then runs
where the cost model says it is faster (:func:`witness_where`):

* **in-process**: its chunks on the client's threaded scheduler, as
  without a cluster, into one table;
* **cluster**: its chunks in batches of consecutive chunks, largest
  first (:func:`batches`: about six a worker thread), submitted as
  one graph whose tasks Dask queues and hands to whichever worker frees
  first. A batch's min traces travel inside its task as two arrays (a
  slice of :func:`~hetflow.executors.emulator.output.min_trace_array`'s
  word stream and its index), and so does a small ELF (a large one is
  broadcast once), so Dask recomputes a batch lost with its worker from
  that lineage. The client allocates the table as a
  file in ``/dev/shm`` (:func:`shared_table`); a worker on the client's
  host maps it and writes its rows in place, so the rows never travel
  and no gather copies them; a worker elsewhere (it cannot open the file)
  returns its rows, which the client copies into the table as each batch
  arrives, while the other batches still run.

Either way the table is scattered once, to the worker of the executor
that imports it: a worker on the client's host is sent the file's path
and maps it (:func:`scatter`), so the table is never copied between
processes; elsewhere its bytes travel. The client keeps its copy, and a
recovery scatters it again (its bytes) when the only worker holding it
died. A ``witness-placed`` run event records where each phase ran, with
both estimates; a ``witness-ran`` event the workers' CPU seconds.

The choice is priced twice with the same function: by :func:`place_witness`
for the plan (``max_steps``, an upper bound; the plan shows both
estimates), and again in :func:`run_phases` once ``execute`` has said how
many steps and chunks there are, which is the choice the run follows.
"""

from __future__ import annotations

import dataclasses
import itertools
import mmap
import os
import pickle
import socket
import threading
import uuid
from typing import Any, Sequence

import numpy as np

from hetflow.engine.plan.costs import CostModel, interpreter_loaded
from hetflow.engine.run.events import EventStream, run_event
from hetflow.engine.store import owner
from hetflow.engine.plan.plandata import Plan
from hetflow.executors.base import PortableActivation

__all__ = ["run_phases", "scatter", "batches", "witness_where", "place_witness", "shared_table"]

_SHM = "/dev/shm"
#: an ELF up to this many pickled bytes goes with every witness batch; a larger one is broadcast once
_INLINE_PROGRAM_BYTES = 1 << 16


def run_phases(client: Any, runner: Any, run_id: str, plan: Plan, stream: EventStream, futures: dict[str, Any],
               values: dict[str, Any]) -> None:
    """Emulator phases on a cluster, in the same two rounds as in-process.

    ``execute``, ``mem-plans``, ``rom-histogram`` and ``plan`` run here on
    the client (the fast backend's MO/RH runners are threads of the
    process that ran ``execute``); each ``witness`` phase runs in-process
    or in batches on the cluster, whichever :func:`witness_where` prices
    faster for the steps and chunks its ``execute`` produced; its array is
    scattered once, to the worker of the first executor that imports it
    (a ``scattered`` run event says where), and the bridge's import task
    reads it from Dask like any other input. The client keeps its copy in
    ``values``: when the only worker holding the array dies,
    :func:`hetflow.engine.run.recovery.recover` scatters it again.
    """
    import dask.threaded

    from hetflow.executors.emulator import WITNESS_COLUMNS

    first = runner.round1()
    dask.threaded.get(first, list(first))
    second = runner.round2()
    slots = _worker_threads(client)
    local = all(_on_this_host(a) for a in slots)
    model = CostModel()  # the plan keeps no model object; the witness figures are CostModel's own
    for pid, p in runner.phases.items():
        if p.phase != "witness":
            continue
        traces = runner.results[p.inputs[0]].min_traces
        backend = runner.emulators[p.emulator].backend
        steps = sum(int(t.steps) for t in traces)
        cold = not all(v is True for v in client.run(interpreter_loaded, on_error="return").values())
        where = witness_where(model, backend, steps, len(traces), list(slots.values()), os.cpu_count() or 1, local,
                              model.load_s("witness", backend) if cold else 0.0)
        stream.emit(run_event("witness-placed", run_id, phase=pid, steps=steps, chunks=len(traces), **where))
        table, path = shared_table(steps, len(WITNESS_COLUMNS))
        try:
            if where["where"] == "in-process":
                runner._tables[pid] = table  # the chunks' rows go into the shared file in place of round2's table
                keys = [k for k in second if k.startswith(f"witness:{pid}:")] + [f"phase:{pid}"]
                portable = dask.threaded.get({k: second[k] for k in keys}, f"phase:{pid}")
            else:
                portable = _on_cluster(client, runner, run_id, pid, traces, backend, sum(slots.values()), stream,
                                       table, path, local)
            key = f"phase:{pid}"
            values[key] = portable
            futures[key], _ = scatter(client, plan, run_id, stream, key, portable, shared=path)
        finally:
            if path is not None:
                os.unlink(path)  # the mappings keep the pages; they go with the last view of the table
    rest = {k: v for k, v in second.items() if not k.startswith("witness:") and runner.phases[k[6:]].phase != "witness"}
    if rest:
        keys = list(rest)
        for key, value in zip(keys, dask.threaded.get(rest, keys)):
            if isinstance(value, PortableActivation):  # an array field (``run.registers``): scattered as a witness is
                values[key] = value
                futures[key], _ = scatter(client, plan, run_id, stream, key, value)


def _on_cluster(client: Any, runner: Any, run_id: str, pid: str, traces: Sequence[Any], backend: str,
                threads: int, stream: EventStream, table: np.ndarray, path: str | None,
                local: bool = False) -> PortableActivation:
    """A witness phase's chunks in batches on the workers, into ``table`` (mapped from ``path`` where a worker
    can), which the client holds; ``local``: every worker shares this host, and the client fetches each
    batch's answer from its worker directly."""
    from distributed import as_completed

    from hetflow.executors.emulator.output import min_trace_array

    p = runner.phases[pid]
    program, data = runner._program(p.emulator)
    runner._tables.pop(pid, None)  # round2's table for in-process chunks: ``table`` replaces it
    steps = [int(t.steps) for t in traces]
    # a small ELF travels in each batch's task (a few KiB, Dask's lineage either way); a broadcast costs a
    # round trip to every worker before the first batch can be submitted
    shared = (program if len(pickle.dumps(program, protocol=5)) <= _INLINE_PROGRAM_BYTES
              else client.scatter(program, broadcast=True, hash=False))
    starts = list(itertools.accumulate(steps, initial=0))
    planned = batches(len(traces), threads)
    # a batch's min traces travel as two arrays (min_trace_array), pickled as their bytes: 569 trace objects
    # cost the client 4.6 ms to pickle, and the scheduler as much again to unpickle and pickle once more. All
    # are packed before any is submitted: the scheduler runs in this process on a local cluster, and packing
    # while it handles the first batches would make it wait for the GIL at each step
    packed = [min_trace_array(traces[i:i + n]) for i, n in planned]
    # one graph, its keys one name with the batch's first chunk: Dask sees one group of many tasks and queues
    # them on the scheduler, handing each to whichever worker frees first (with a key of its own each, it
    # would assign every batch to a worker now, and the slower worker would keep its share)
    futures = client.map(_witness_batch_into, [i for i, _ in planned], [w for w, _ in packed],
                         [ix for _, ix in packed], [starts[i] for i, _ in planned],
                         key=[(f"witness:{pid}@{run_id}", i) for i, _ in planned], pure=False, retries=3,
                         run_id=run_id, pid=pid, where=f"emulator:{p.emulator}", program=shared,
                         input_size=len(data), backend=backend, path=path)
    submitted = dict(zip(futures, (i for i, _ in planned)))
    # a batch from a worker that could not map the table brings its rows: copied in as it arrives
    cpu: dict[str, float] = {}
    copied = 0
    for future in as_completed(submitted, loop=client.loop):
        # from the worker itself where it shares this host: through the scheduler, the answer crosses the
        # scheduler's process (this one, on a local cluster) twice more
        worker, seconds, events, rows = client.gather(future, direct=local or None)
        cpu[worker] = cpu.get(worker, 0.0) + seconds
        for event in events:
            stream.emit(event)
        if rows is not None:
            first = starts[submitted[future]]
            table[first:first + len(rows)] = rows
            copied += 1
        future.release()
    # the workers' CPU seconds (their batches' thread time), which 2 cores shared with other work stretch least
    stream.emit(run_event("witness-ran", run_id, phase=pid, where="cluster", batches=len(submitted),
                          worker_cpu_s={w: round(c, 6) for w, c in sorted(cpu.items())},
                          copied_batches=copied))
    return runner._timed("phase", pid, pid, lambda: _hand_on(runner, pid, table, len(traces)))


def _hand_on(runner: Any, pid: str, table: np.ndarray, chunks: int) -> PortableActivation:
    from hetflow.engine.run.phases import witness_activation

    portable = witness_activation(table)
    runner.results[pid] = {"rows": int(table.shape[0]), "chunks": chunks, "portable": portable}
    return portable


def shared_table(rows: int, columns: int) -> tuple[np.ndarray, str | None]:
    """An int64 table of ``rows`` x ``columns`` and the path of the file in ``/dev/shm`` that holds it.

    A worker process on this host maps the same file and writes its rows
    where they belong, so nothing copies them to the client. ``(table,
    None)`` where there is no ``/dev/shm`` or it has not room for the
    table twice over: a tmpfs that fills up kills a process writing into
    its mapping (SIGBUS) instead of refusing, and reserving the pages up
    front (``posix_fallocate``) would zero them all here, on one thread.

    >>> t, path = shared_table(4, 16)
    >>> t.shape, t.dtype.name, path is None or os.path.getsize(path) == 4 * 16 * 8
    ((4, 16), 'int64', True)
    >>> if path: os.unlink(path)
    """
    nbytes = rows * columns * 8
    try:
        _sweep_left_tables()
        room = os.statvfs(_SHM)
        if not nbytes or room.f_bavail * room.f_frsize < 2 * nbytes:
            raise OSError("no room")
        me = owner.current()
        path = os.path.join(_SHM, f"hetflow-witness-{me['pid']}-{me['start_ticks']}-{uuid.uuid4().hex}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return np.empty((rows, columns), np.int64), None
    try:
        os.ftruncate(fd, nbytes)
        view = mmap.mmap(fd, nbytes)
    except OSError:
        os.unlink(path)
        return np.empty((rows, columns), np.int64), None
    finally:
        os.close(fd)
    # over the mapping itself, so a slice's ``base`` is the table (the in-process gather checks that)
    return np.ndarray((rows, columns), np.int64, buffer=view), path


def _sweep_left_tables() -> None:
    """Remove the tables of processes gone from this host: a run killed (SIGKILL) during its witness phase never
    reached its unlink, and its table, rows x 128 bytes, held the tmpfs's memory until a reboot. Each name
    carries its process's pid and start time (``hetflow-witness-PID-TICKS-ID``)."""
    try:
        names = [n for n in os.listdir(_SHM) if n.startswith("hetflow-witness-")]
    except OSError:
        return
    for name in names:
        pid, _, rest = name[len("hetflow-witness-"):].partition("-")
        ticks = rest.partition("-")[0]
        if not (pid.isdigit() and ticks.isdigit()):
            continue  # a table of an earlier hetflow, named without its process: not known to be anyone's
        if owner.alive({**owner.current(), "pid": int(pid), "start_ticks": int(ticks)}) is False:
            try:
                os.unlink(os.path.join(_SHM, name))
            except OSError:
                pass


def _witness_batch_into(first: int, words: np.ndarray, index: np.ndarray, row: int, *, run_id: str, pid: str,
                        where: str, program: Any, input_size: int, backend: str,
                        path: str | None) -> tuple[str, float, list[dict], np.ndarray | None]:
    """Consecutive witness chunks ``first``, ``first + 1``, ... in one task, written into the client's table
    from ``row`` on: (this worker's address, the task's thread CPU seconds, its chunks' ``finished`` events,
    ``None`` when the rows went into the table, else the rows, for the client to copy in). Their min traces
    are ``words`` and ``index`` (:func:`~hetflow.executors.emulator.output.min_trace_array`).

    Every chunk keeps its own task event in the record, but the events
    travel with the batch's answer, not one scheduler message each: the
    scheduler runs in the client's process on a local cluster, and two
    messages a chunk there cost the client more than the chunk's replay
    costs a worker. Only the batch's start and a chunk's failure are sent
    as they happen.
    """
    import time

    from hetflow.engine.errors import StageFailure
    from hetflow.engine.store.records import micros
    from hetflow.engine.run.workerside import _plugin
    from hetflow.executors.emulator import WITNESS_COLUMNS, EmulatorError, witness_table
    from hetflow.executors.emulator.output import min_traces_from_array

    cpu = time.thread_time()
    traces = min_traces_from_array(words, index)
    rows = sum(int(t.steps) for t in traces)
    cols = len(WITNESS_COLUMNS)
    view = None
    if path is not None:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:  # another host: the client's file is not here
            fd = None
        if fd is not None:
            try:
                # the mapping starts on the page that holds the batch's first row; populating it up front
                # allocates its pages in one call, not one fault a page, and in each worker at once
                start = row * cols * 8
                skip = start % mmap.ALLOCATIONGRANULARITY
                view = mmap.mmap(fd, skip + rows * cols * 8, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                                 offset=start - skip)
            finally:
                os.close(fd)
    table = (np.empty((rows, cols), np.int64) if view is None
             else np.frombuffer(view, np.int64, rows * cols, offset=skip).reshape(rows, cols))
    plugin = _plugin(run_id)
    thread = threading.current_thread().name
    events: list[dict] = []
    done = 0
    for k, trace in enumerate(traces):
        i = first + k
        runtime = plugin.enter(f"witness:{pid}:{i}")
        try:
            start = time.time()
            if not k:
                runtime._event("witness", f"{pid}:{i}", where, start, "started")
            try:
                witness_table(program, trace, input_size=input_size, backend=backend,
                              out=table[done:done + int(trace.steps)])
            except (EmulatorError, ValueError) as e:
                for event in events:  # the chunks before it still ran: the record keeps them
                    runtime.emit(event)
                runtime._event("witness", f"{pid}:{i}", where, start, "failed", node=pid, error=str(e))
                raise StageFailure(f"phase:{pid}", pid, str(e)) from None
            end = time.time()
            events.append({"event": "finished", "kind": "witness", "id": f"{pid}:{i}", "executor": where,
                           "worker": runtime.worker, "thread": thread, "attempt": 1, "start": start, "end": end,
                           "duration_s": micros(end - start), "status": "succeeded", "nodes": [pid],
                           "phase": "witness", "chunk": i, "time": end})
        finally:
            plugin.leave()
        done += int(trace.steps)
    address = str(runtime.worker)
    if view is None:
        return address, time.thread_time() - cpu, events, table
    del table
    try:
        view.close()
    except BufferError:  # a view of the rows outlives the batch: the mapping ends with it, the rows are in the file
        pass
    return address, time.thread_time() - cpu, events, None


def batches(chunks: int, threads: int) -> list[tuple[int, int]]:
    """Witness chunks in batches of consecutive chunks, ``(first, count)`` each, largest first ("guided"
    scheduling): each batch takes half of what remains over the worker threads, down to a sixteenth of a thread's
    share, so Dask's few milliseconds a task are paid about six times per thread, not once a chunk, and the
    last batches are small enough that a worker that finishes first takes them from a slower one.

    >>> batches(4551, 2)[:4], len(batches(4551, 2)), batches(4551, 1)[:2]
    ([(0, 1138), (1138, 854), (1992, 640), (2632, 480)], 12, [(0, 2276), (2276, 1138)])
    >>> batches(10, 2), batches(3, 8), batches(0, 2)
    ([(0, 3), (3, 2), (5, 2), (7, 1), (8, 1), (9, 1)], [(0, 1), (1, 1), (2, 1)], [])
    """
    slots = max(threads, 1)
    least = -(-chunks // (16 * slots))
    out: list[tuple[int, int]] = []
    first = 0
    while first < chunks:
        count = min(chunks - first, max(least, -(-(chunks - first) // (2 * slots))))
        out.append((first, count))
        first += count
    return out


def witness_where(model: Any, backend: str, steps: int, chunks: int, worker_threads: Sequence[int],
                  client_threads: int, local: bool, load_s: float = 0.0) -> dict[str, Any]:
    """Where a witness phase of ``steps`` rows in ``chunks`` chunks runs faster, with both estimates.

    ``worker_threads`` holds each worker's threads; ``local`` says whether
    every worker shares this host (the table is then written in place
    through ``/dev/shm``, else its bytes travel back); ``load_s`` is what
    workers that have not loaded the compiled interpreter spend loading
    it, in parallel (the client has: it ran ``execute``). Ties stay
    in-process: nothing is shipped and nothing can be lost with a worker.

    >>> m = CostModel()
    >>> witness_where(m, "fast", 4096, 4, [1], 2, True)["where"]
    'in-process'
    >>> w = witness_where(m, "reference", 4_000_000, 4000, [4, 4], 2, True)
    >>> w["where"], w["cluster_s"] < w["in_process_s"]
    ('cluster', True)
    """
    slots = sum(worker_threads)
    tasks = len(batches(chunks, slots))
    here = model.witness_in_process_s(backend, steps, chunks, client_threads)
    there = model.witness_cluster_s(backend, steps, chunks, slots, tasks, local) + load_s
    where = "cluster" if there < here else "in-process"
    how = (f"{len(worker_threads)} worker(s), {slots} thread(s), {tasks} batch(es), the table "
           + ("written in place through /dev/shm" if local else "copied back over the network")
           + (f", {_s(load_s)} to load the compiled interpreter" if load_s else ""))
    cluster = f"~{_s(there)} on the cluster ({how})"
    local_s = f"~{_s(here)} in-process ({client_threads} thread(s))"
    why = (f"on the cluster, the faster: {cluster} against {local_s}" if where == "cluster"
           else f"in-process, the faster: {local_s} against {cluster}")
    return {"where": where, "why": why, "in_process_s": here, "cluster_s": there, "workers": len(worker_threads),
            "threads": slots, "batches": tasks, "shared_memory": local}


def _s(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def place_witness(plan: Plan, workers: Sequence[Any], model: Any = None) -> Plan:
    """``plan`` with each witness phase's ``runs`` entry: :func:`witness_where` for ``max_steps`` on ``workers``
    (:class:`~hetflow.engine.run.workerside.WorkerInfo`, or anything with ``address`` and ``nthreads``)."""
    if not any(p.get("phase") == "witness" for p in plan.phases.values()):
        return plan
    model = model or CostModel()
    threads = [int(w.nthreads) for w in workers]
    local = all(_on_this_host(w.address) for w in workers)
    phases = {}
    for pid, p in plan.phases.items():
        if p.get("phase") == "witness":
            steps = int(p["steps_max"])
            # a plan cannot know whether the workers will have loaded the interpreter: priced as fresh workers
            p = {**p, "runs": witness_where(model, p["backend"], steps, int(p["chunks_max"]), threads,
                                            os.cpu_count() or 1, local, model.load_s("witness", p["backend"]))}
        phases[pid] = p
    return dataclasses.replace(plan, phases=phases)


def _worker_threads(client: Any) -> dict[str, int]:
    return dict(client.nthreads())


def _on_this_host(address: str) -> bool:
    """Whether a worker's address is on the client's host: loopback, or one of this host's own addresses."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
        return True
    try:
        mine = {socket.gethostname(), socket.getfqdn(), *socket.gethostbyname_ex(socket.gethostname())[2]}
    except OSError:
        return False
    return host in mine


def scatter(client: Any, plan: Plan, run_id: str, stream: EventStream, key: str, portable: PortableActivation,
            why: str = "phase", shared: str | None = None) -> tuple[Any, list[str]]:
    """Scatter a phase's array to the worker of the first executor that imports it: (future, workers holding it).

    ``shared`` is the ``/dev/shm`` file that holds the array's bytes
    (:func:`shared_table`): a worker on this host is sent its path and maps
    it, so nothing copies the bytes and both processes share their pages.
    The worker has mapped it when this returns (a task there has read the
    array), so the caller may remove the file. Elsewhere, or without the
    file (a recovery's scatter), the bytes travel.
    """
    tensor = key.split(":", 1)[1]
    homes = sorted({plan.executors[b.destination].worker for b in plan.bridges if b.tensor == tensor} - {None})
    mapped = shared is not None and bool(homes) and _on_this_host(homes[0])
    if mapped:
        try:
            # the worker unpickles the path into its own mapping as it receives it (a task that reads it makes
            # sure of that before the caller removes the file)
            future = client.scatter(_SharedTable(shared, portable.shape.dims), hash=False, workers=homes[:1])
            client.submit(_nbytes, future, workers=homes[:1], pure=False).result()
        except Exception:  # noqa: BLE001 - a worker that shares the host but not its /dev/shm (a container)
            mapped = False
    if not mapped:
        future = client.scatter(portable, hash=False, workers=homes[:1] or None)
    held = sorted(client.who_has([future]).get(future.key, ()))
    stream.emit(run_event("scattered", run_id, key=key, bytes=portable.nbytes, workers=held, why=why,
                          **({"mapped": True} if mapped else {})))
    return future, held


class _SharedTable:
    """A witness table that travels as the path of its ``/dev/shm`` file; it arrives as its portable activation."""

    def __init__(self, path: str, shape: Sequence[int]) -> None:
        self.path, self.shape = path, tuple(int(d) for d in shape)

    def __reduce__(self) -> tuple:
        return _map_table, (self.path, self.shape)


def _map_table(path: str, shape: tuple[int, ...]) -> PortableActivation:
    from hetflow.engine.run.phases import witness_activation

    with open(path, "rb") as f:
        view = mmap.mmap(f.fileno(), int(np.prod(shape)) * 8, prot=mmap.PROT_READ)
    return witness_activation(np.ndarray(shape, np.int64, buffer=view))


def _nbytes(portable: PortableActivation) -> int:
    return portable.nbytes
