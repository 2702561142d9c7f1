"""Emulator phases on a cluster, and the witness arrays they scatter.

A run with emulator phases runs them in the same two rounds as
in-process (:mod:`hetflow.engine.phases`), but the ``witness`` chunks run
in batches of consecutive chunks (:func:`batch_size`: about four a worker
thread), each a task on whichever worker Dask picks; the batch's min traces
travel inside its task and the ELF is broadcast once, so Dask recomputes a
batch lost with its worker from that lineage. The gathered witness array is then scattered once, to
the worker of the executor that imports it; the client keeps its copy,
and a recovery scatters it again when the only worker holding it died.
"""

from __future__ import annotations

from typing import Any

from hetflow.engine.events import EventStream, run_event
from hetflow.engine.planner import Plan
from hetflow.engine.workerside import _witness_batch_on_worker
from hetflow.executors.base import PortableActivation

__all__ = ["run_phases", "scatter", "batch_size"]


def run_phases(client: Any, runner: Any, run_id: str, plan: Plan, stream: EventStream, futures: dict[str, Any],
               values: dict[str, Any]) -> None:
    """Emulator phases on a cluster, in the same two rounds as in-process.

    ``execute``, ``mem-plans``, ``rom-histogram`` and ``plan`` run here on
    the client (the fast backend's MO/RH runners are threads of the
    process that ran ``execute``); every ``witness`` chunk is its own task,
    bound to no worker, so the chunks spread over the whole cluster; a
    witness array is gathered here and scattered once, to the worker of
    the first executor that imports it (a ``scattered`` run event says
    where), and the bridge's import task reads it from Dask like any
    other input. The client keeps its copy in ``values``: when the only
    worker holding the array dies, :func:`hetflow.engine.recovery.recover`
    scatters it again.
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
        per = batch_size(len(traces), sum(client.nthreads().values()))
        shared = client.scatter(program, broadcast=True, hash=False)  # the ELF once a worker, not once a task
        batches = [client.submit(_witness_batch_on_worker, run_id, pid, i, f"emulator:{p.emulator}", shared,
                                 traces[i:i + per], len(data), backend, key=f"witness:{pid}:{i}@{run_id}",
                                 pure=False, retries=3)
                   for i in range(0, len(traces), per)]
        tables = client.gather(batches)
        portable = runner._witness_gather(pid, tables)
        key = f"phase:{pid}"
        values[key] = portable
        futures[key], _ = scatter(client, plan, run_id, stream, key, portable)
    rest = {k: v for k, v in second.items() if not k.startswith("witness:") and runner.phases[k[6:]].phase != "witness"}
    if rest:
        dask.threaded.get(rest, list(rest))


def batch_size(chunks: int, threads: int) -> int:
    """Witness chunks a task: about four tasks a worker thread, so a slow worker's batch is a quarter of its
    share, while Dask's few milliseconds a task are paid a few times per thread rather than once a chunk.

    >>> batch_size(4096, 2), batch_size(10, 2), batch_size(3, 8)
    (512, 2, 1)
    """
    return max(1, -(-chunks // (4 * max(threads, 1))))


def scatter(client: Any, plan: Plan, run_id: str, stream: EventStream, key: str, portable: PortableActivation,
            why: str = "phase") -> tuple[Any, list[str]]:
    """Scatter a phase's array to the worker of the first executor that imports it: (future, workers holding it)."""
    tensor = key.split(":", 1)[1]
    homes = sorted({plan.executors[b.destination].worker for b in plan.bridges if b.tensor == tensor} - {None})
    future = client.scatter(portable, hash=False, workers=homes[:1] or None)
    held = sorted(client.who_has([future]).get(future.key, ()))
    stream.emit(run_event("scattered", run_id, key=key, bytes=portable.nbytes, workers=held, why=why))
    return future, held
