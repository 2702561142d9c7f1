"""Surviving a lost worker: which tasks run again, and the recovery that runs them.

While a cluster run waits (:meth:`hetflow.engine.run.distributed.Cluster._watch`),
the client polls the scheduler's workers; a worker that hosted an
executor and is gone, or a scattered phase array lost with the only
worker holding it (the scheduler then forgets it and every task waiting
on it), starts a **recovery** (:func:`recover`): each executor of the
lost workers is re-created on a live worker that offers the vendor (a
:class:`ClusterFailure` saying why, at once, when none does); the
survivors hold the run (:func:`~hetflow.engine.run.workerside._pause_run`:
running tasks finish, new ones wait) and report the tasks they completed
and the handles they hold; :func:`plan_recovery` picks the tasks to run
again, only those whose results were lost or that would read one; their
old futures are released (never cancelled: Dask cancels every dependent
of a cancelled key, finished ones too), a lost phase array is scattered
again from the client's copy, the survivors are told the new refcounts
and which old tasks to refuse
(:func:`~hetflow.engine.run.workerside._resume_run`), and the tasks are
submitted again as the next *generation*, pinned to the executors' new
workers. A partition that ran and whose cache entry is complete is
*restored*: its task reads the entry and none of its inputs, so that the
loss of the only copy of a bridged tensor does not run again every
partition upstream of it. The record's ``recovery`` lists, per recovery, the
lost workers, the executors moved, the tasks run again and where, and
the data scattered again.
"""

from __future__ import annotations

import dataclasses
import graphlib
import time
from dataclasses import dataclass
from typing import Any, Mapping

from hetflow.engine.run.clusterphases import scatter
from hetflow.engine.run.events import EventStream, run_event
from hetflow.engine.store.cache import CacheUse
from hetflow.engine.run.lowering import TaskGraph, bridge_ref, partition_key, tensor_ref
from hetflow.engine.plan.costs import human_bytes
from hetflow.engine.plan.plandata import Plan
from hetflow.engine.store.records import utc_iso
from hetflow.engine.run.runtime import ClusterFailure
from hetflow.engine.run.workerside import (
    CLOSE_WAIT_S,
    RESOURCE_PREFIX,
    _can_host,
    _dependencies,
    _OnWorker,
    _pause_run,
    _resume_run,
    _sort_name,
)
from hetflow.executors.base import Vendor

__all__ = ["Recovery", "plan_recovery", "recover"]

# how long a lost executor waits for a worker that can host it, where none is left and the lost worker had a
# nanny: a nanny restarts a worker it lost (a crash, its memory limit) in a second or two, under load in several
_REJOIN_GRACE_S = 10.0
_REJOIN_POLL_S = 0.25
_MEMORY_KILL_WINDOW_S = 60.0


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
    have (the tasks of ``rerun`` that read it). ``restore`` holds the
    partitions of ``rerun`` that take their outputs from a complete cache
    entry and read none of their inputs, so that nothing upstream of them
    runs again for their sake.
    """

    rerun: tuple[str, ...]
    release: frozenset[str]
    expect: Mapping[str, Mapping[str, int]]
    restore: frozenset[str] = frozenset()


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
                  live: set[str], lost_data: frozenset[str] = frozenset(), missing: frozenset[str] = frozenset(),
                  kept: frozenset[str] = frozenset(), restorable: frozenset[str] = frozenset()) -> Recovery:
    """Which tasks run again after the executors ``lost`` died with their worker.

    ``finished``: tasks whose Dask futures had finished; ``completed``:
    tasks the surviving workers ran to the end (their own account, which
    may be ahead of the futures); ``live``: the refs the survivors hold;
    ``lost_data``: scattered phase arrays lost with their only worker
    (the imports of them that had not finished run again); ``missing``:
    finished tasks whose Dask result no live worker holds any more (the
    only copy was on a lost worker, whatever replica policy the cluster
    runs), so that a value among them (an export's bytes) runs again when
    a task still needs it and a task waiting on one is submitted again;
    ``kept``: outputs whose value the client already holds, never run again;
    ``restorable``: partitions with a complete cache entry. One of them
    that ran (or whose executor was lost) is restored from its entry
    rather than run from its inputs: its inputs were read once already,
    and without it the loss of the only copy of a bridged tensor would
    run again every partition upstream of it.
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

    >>> from hetflow.engine.run.lowering import lower
    >>> from hetflow.engine.manifest.validate import compile_manifest, loads
    >>> from hetflow.engine.run.workerside import _OnWorker
    >>> from hetflow.engine.plan.planner import plan as make_plan
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
            return dep not in missing  # a value: kept by its future, unless its only copy was lost
        return dep not in done or reads.get(consumer, set()) & writes[dep] <= live

    def restored(key: str) -> bool:
        return key in restorable and (key in done or is_lost(key))

    rerun = {k for k in dsk if is_lost(k) and k not in finished}
    # the scheduler forgot every unfinished task that waited on the data, even one a survivor had run
    rerun |= {k for k, task in dsk.items() if k not in finished and any(a in lost_data for a in task[1:] if isinstance(a, str))}
    rerun |= {k for k in graph.output_keys.values() if (is_lost(k) or k in shaky) and k not in kept}
    changed = True
    while changed:
        changed = False
        for key in order:
            if key not in rerun and key not in done and key not in kept and any(
                    d in rerun or d in shaky or d in missing or is_lost(d) for d in deps[key]):
                rerun.add(key)
                changed = True
        for key in list(rerun):
            if restored(key):
                continue
            for dep in deps[key]:
                if dep not in rerun and not available(dep, key):
                    rerun.add(dep)
                    changed = True
    # what only restored partitions would have read is not run again: walking down from the outputs
    dependents: dict[str, list[str]] = {}
    for key in rerun:
        for dep in deps[key]:
            dependents.setdefault(dep, []).append(key)
    consumed = {d for ds in deps.values() for d in ds}
    roots = set(graph.output_keys.values()) | {k for k in dsk if k not in consumed}
    needed: set[str] = set()
    for key in reversed(order):
        if key in rerun and (key in roots or any(d in needed and not restored(d) for d in dependents.get(key, ()))):
            needed.add(key)
    dropped = rerun - needed
    rerun &= needed
    restore = frozenset(k for k in rerun if restored(k))
    expect: dict[str, dict[str, int]] = {}
    for key in rerun - restore:
        for ref in reads.get(key, ()):
            producer = next((d for d in deps[key] if ref in writes.get(d, ())), None)
            if producer in rerun:
                counts = expect.setdefault(bound[producer], {})
                counts[ref] = counts.get(ref, 0) + 1
    release = frozenset(k for k in dsk if k not in rerun and k in finished | shaky and (is_lost(k) or k in shaky)) | dropped
    return Recovery(tuple(k for k in order if k in rerun), release,
                    {e: dict(sorted(c.items())) for e, c in sorted(expect.items())}, restore)


@dataclass(frozen=True)
class _Gone:
    """Workers that left the cluster: hosting executors, or holding the only copy of scattered ``data``."""

    workers: list[str]
    data: list[str] = dataclasses.field(default_factory=list)
    cause: str = ""
    # worker address -> why it was taken for lost though its process may live: it sent no heartbeat
    silent: Mapping[str, str] = dataclasses.field(default_factory=dict)


def recover(cluster: Any, plan: Plan, run_id: str, graph: TaskGraph, futures: dict[str, Any],
             generation: dict[str, int], gone: list[str], recoveries: list[dict],
             phase_values: Mapping[str, Any], finished: set[str], stream: EventStream,
             lost_data: list[str] = (), *, kept: set[str] = frozenset(), cause: str = "",
             cache: CacheUse | None = None, silent: Mapping[str, str] | None = None) -> Plan:
    """Re-create the executors of the ``gone`` workers elsewhere and submit again what they lost.

    ``lost_data`` names scattered phase arrays whose only copy was on a
    gone worker (one that hosted no executor, too): they are scattered
    again from the client's copy in ``phase_values``, and the tasks
    that had not read them yet run again.
    ``cluster`` is the :class:`~hetflow.engine.run.distributed.Cluster` the
    run is on; the plan it returns places the re-created executors.
    Raises :class:`ClusterFailure` when no live worker can host one of
    them: the run ends at once with the reason.

    What Dask lost is asked of the scheduler, not assumed: every finished
    result that no live worker holds is ``missing`` to :func:`plan_recovery`
    (a replica policy such as ReduceReplicas may have left the only copy of
    an export's bytes on the lost worker). Its old future is released, so
    that Dask stops recomputing it from lineage; a recompute that ran
    meanwhile was refused on the worker (:class:`~hetflow.engine.run.runtime.NotHeld`).
    A ``worker-lost`` run event says which workers were lost, when, and
    what runs again.
    """
    detected = time.time()
    names = {**cluster.names, **{w.address: w.name for w in cluster.workers()}}
    lost = {e.name for e in plan.executors.values() if e.worker in gone}
    kills = _memory_kills(cluster, gone, detected)
    memory = "; ".join(f"worker {w} {why}" for w, why in kills.items())
    silent = dict(silent or {})
    vendors = tuple({plan.executors[e].vendor: None for e in lost})
    alive = cluster._alive_workers(vendors, gone)
    # a nanny starts its lost worker again: the executors wait for it, where no other worker can host them;
    # a worker without one (dask worker --no-nanny) is not coming back, and the run ends at once
    deadline = time.monotonic() + (_REJOIN_GRACE_S if any(cluster.nannies.get(w) for w in gone) else 0.0)
    while time.monotonic() < deadline and any(
            not any(_can_host(w, plan.executors[n].vendor, plan.executors[n].device) for w in alive) for n in lost):
        time.sleep(_REJOIN_POLL_S)  # the worker its nanny is starting again, or one joining
        alive = cluster._alive_workers(vendors, gone)
    # A worker the scheduler no longer lists, though not among ``gone``, was lost too: both workers killed at once,
    # the loss of one told first. Its executors are re-created with the others (they had no worker to resume on).
    listed = {w.address for w in alive}
    stray = sorted({e.worker for e in plan.executors.values() if e.worker not in listed and e.worker not in gone})
    if stray:
        gone = [*gone, *stray]
        lost |= {e.name for e in plan.executors.values() if e.worker in stray}
        kills.update(_memory_kills(cluster, stray, detected))
        memory = "; ".join(f"worker {w} {why}" for w, why in kills.items())
        alive = cluster._alive_workers(tuple({plan.executors[e].vendor: None for e in lost}), gone)
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
            if cluster.foreign:  # workers that joined with another hetflow: there, but not used
                offered += "; not used: " + "; ".join(cluster.foreign[a] for a in sorted(cluster.foreign))
            _announce(stream, run_id, gone, names, detected, [], {}, cause, kills, silent)
            raise _lost(plan, graph, futures, gone, names,
                        f"no live worker can host executor {name!r}: none offers {e.vendor.value}"
                        + ("" if e.vendor is Vendor.cpu else f" device {e.device}")
                        + f" (the live workers offer: {offered})" + (f"; {memory}" if memory else ""), recoveries)
        pick = min(tagged or able, key=lambda w: (load[w.address], _sort_name(w.name), w.address))
        load[pick.address] += 1
        moved[name] = dataclasses.replace(e, worker=pick.address, worker_name=pick.name,
                                          worker_reason=f"re-created after worker {names.get(e.worker, e.worker)} "
                                                        f"was lost; worker {pick.name}")
    survivors = [w.address for w in alive]
    paused = cluster.patient(lambda: cluster.client.run(_pause_run, run_id, CLOSE_WAIT_S, workers=survivors,
                                                        on_error="return"))
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
    missing = _missing(cluster.client, futures, ran, {w.address for w in alive})
    restorable = frozenset(partition_key(p.id) for p in plan.partitions if cache is not None and cache.restorable(p.id))
    recovery = plan_recovery(plan, graph, lost, ran, completed, live, frozenset(lost_data), frozenset(missing),
                             frozenset(kept), restorable)
    rerun = set(recovery.rerun)
    for key in missing - rerun:
        # a handle-valued result whose handle a survivor still holds: its consumers are given None for it
        f = futures.pop(key, None)
        if f is not None:
            f.release()
    # released, not cancelled: Dask cancels every dependent of a cancelled key, finished ones too,
    # while a released key is forgotten once no task waits for it (those that wait are rerun as well)
    for key in rerun | recovery.release:
        f = futures.pop(key, None)
        if f is not None:
            f.release()
            finished.discard(key)
    revoked = [(k, generation[k]) for k in (*recovery.rerun, *sorted(recovery.release)) if k in generation]
    new_plan = dataclasses.replace(plan, executors={n: moved.get(n, e) for n, e in plan.executors.items()})
    by_worker: dict[str, tuple[list, dict]] = {a: ([], {}) for a in survivors}
    for name, e in moved.items():
        by_worker[e.worker][0].append(e)
    for executor, counts in recovery.expect.items():
        by_worker[new_plan.executors[executor].worker][1].update(counts)
    for address, (adopt, expect) in by_worker.items():
        cluster.patient(lambda address=address, adopt=adopt, expect=expect: cluster.client.run(
            _resume_run, run_id, revoked, adopt, expect, workers=[address]))
    given: dict[str, Any] = {}
    rescattered = []
    for key in recovery.rerun:
        if key in recovery.restore:
            continue
        for a in graph.dsk[key][1:]:
            for dep in _dependencies(a, graph.dsk) + ([a] if isinstance(a, str) and a.startswith("phase:") else []):
                if dep in rerun:
                    continue
                if dep.startswith("phase:") and futures[dep].status != "finished":
                    futures[dep], held = scatter(cluster.client, new_plan, run_id, stream, dep, phase_values[dep], "recovery")
                    rescattered.append({"key": dep, "bytes": phase_values[dep].nbytes, "workers": held})
                if dep not in futures or dep in recovery.release or dep in missing:
                    given[dep] = None
    gen = max(generation.values(), default=0) + 1
    # a restored partition reads its cache entry, not its inputs: its task has no dependencies
    runtime = _OnWorker(run_id, gen)
    submitted = dataclasses.replace(graph, dsk={**graph.dsk, **{k: (runtime.restore_partition, graph.dsk[k][1])
                                                                  for k in recovery.restore}})
    cluster._submit(new_plan, run_id, submitted, futures, recovery.rerun, generation, gen, given)
    cluster.refresh()
    where = {k: new_plan.executors[graph.bound[k]] for k in recovery.rerun if k in graph.bound}
    # a worker that joined during the run is not in the record's scheduler.workers, written as the run started: the
    # libraries it runs where they differ from this process's are said where it takes executors over
    differ = {w.address: w.versions for w in alive}
    recoveries.append({
        "lost_workers": [{"address": w, "name": names.get(w)} for w in gone],
        "detected_at": utc_iso(detected),
        "generation": gen,
        "executors": {n: {"from": {"address": plan.executors[n].worker, "name": plan.executors[n].worker_name},
                          "to": {"address": e.worker, "name": e.worker_name,
                                 **({"versions": dict(differ[e.worker])} if differ.get(e.worker) else {})}}
                      for n, e in moved.items()},
        "recomputed": [{"task": k, "executor": where[k].name if k in where else None,
                        "worker": where[k].worker if k in where else None,
                        "had_finished": k in ran or k in completed, "restored": k in recovery.restore}
                       for k in recovery.rerun],
        "released": sorted(recovery.release | (missing - rerun)),
        "missing": sorted(missing),
        "cause": cause,
        "memory": memory or None,
        "silent": "; ".join(f"worker {w} {why}" for w, why in silent.items()) or None,
        "lost_data": sorted({*lost_data, *(r["key"] for r in rescattered)}),
        "rescattered": rescattered,
    })
    _announce(stream, run_id, gone, names, detected, recoveries[-1]["recomputed"],
              {n: (plan.executors[n].worker, e.worker_name) for n, e in moved.items()}, cause, kills, silent)
    return new_plan


def _announce(stream: EventStream, run_id: str, gone: list[str], names: Mapping[str, str], detected: float,
              recomputed: list[dict], moved: Mapping[str, tuple[str, str]], cause: str,
              kills: Mapping[str, str] | None = None, silent: Mapping[str, str] | None = None) -> None:
    """One ``worker-lost`` run event per lost worker; ``worker: None`` when Dask alone recomputed a task.

    ``moved`` maps each re-created executor to (its lost worker's address, its new worker's name).
    """
    rerun = [item["task"] for item in recomputed]
    for address in gone or [None]:
        stream.emit(run_event("worker-lost", run_id, worker=address, name=names.get(address) if address else None,
                              at=utc_iso(detected), rerun=rerun, cause=cause,
                              moved={n: to for n, (was, to) in moved.items() if was == address},
                              **({"memory": kills[address]} if kills and address in kills else {}),
                              **({"silent": silent[address]} if silent and address in silent else {})))


def _missing(client: Any, futures: Mapping[str, Any], finished: set[str], alive: set[str]) -> set[str]:
    """The finished tasks whose Dask result no live worker holds (the scheduler's word, asked now)."""
    # scattered phase data has no lineage: its loss is found and mended apart (``lost_data``)
    keys = [k for k in finished if k in futures and not k.startswith("phase:")]
    gone = {k for k in keys if futures[k].status != "finished"}
    asked = [k for k in keys if k not in gone]
    try:
        holders = client.who_has([futures[k] for k in asked]) if asked else {}
    except Exception:  # noqa: BLE001 - one of them was forgotten meanwhile: nothing asked is trusted
        return set(keys)
    return gone | {k for k in asked if not set(holders.get(futures[k].key, ())) & alive}


def _memory_kills(cluster: Any, gone: list[str], detected: float) -> dict[str, str]:
    """The ``gone`` workers their nanny restarted for exceeding their memory limit: {address: that, in words}.

    A nanny's memory monitor logs ``worker-restart-memory`` with the
    worker's address and resident memory on the scheduler; a worker lost
    that way is otherwise told from a crash by nothing the client sees.
    Only the minute before the loss was ``detected`` counts: a worker on
    a fixed port may have been restarted so long before, in another run.
    """
    try:
        events = cluster.client.get_events("worker-restart-memory")
    except Exception:  # noqa: BLE001 - the reason is a courtesy; the recovery goes on without it
        return {}
    held: dict[str, Any] = {}
    for at, event in events:
        if isinstance(event, dict) and event.get("worker") in gone and at >= detected - _MEMORY_KILL_WINDOW_S:
            held[event["worker"]] = event.get("rss")  # the latest, where one address was restarted more than once
    return {w: f"restarted by its nanny for exceeding its memory limit: its process held "
               f"{human_bytes(rss if isinstance(rss, int) else None)}" for w, rss in held.items()}


def outgrown(cluster: Any, run_id: str, gone: list[str], recoveries: list[dict], stream: EventStream, cause: str,
             times: int) -> ClusterFailure | None:
    """The failure of a run whose workers their nannies restarted for exceeding their memory limit ``times`` times
    in a row, the loss of ``gone`` the last of them; None where it is not.

    As Dask's allowed-failures: the same work that outgrew its worker would
    outgrow the next one. The loss that ends the run is told as the others
    were (a ``worker-lost`` event, running nothing again) and named in the
    failure, with the workers' names: a worker its nanny restarted joined
    after placement.
    """
    before = recoveries[len(recoveries) - (times - 1):] if times > 1 else []
    if len(before) < times - 1 or not all(r.get("memory") for r in before):
        return None
    detected = time.time()
    kills = _memory_kills(cluster, gone, detected)
    if not kills:
        return None
    names = {**cluster.names, **{w.address: w.name for w in cluster.workers()}}
    _announce(stream, run_id, gone, names, detected, [], {}, cause, kills)
    last = "; ".join(f"worker {names[w]} ({w}) {why}" if names.get(w) else f"worker {w} {why}"
                     for w, why in sorted(kills.items()))
    return ClusterFailure(
        f"run {run_id} gave up: its workers were restarted for exceeding their memory limit {times} times in a row "
        f"while running it (the last: {last}); give the workers more memory (dask worker --memory-limit) or the run "
        "less to hold at once",
        {"workers": [{"address": w, "name": names.get(w), **({"memory": kills[w]} if w in kills else {})}
                     for w in gone], "recoveries": list(recoveries)})


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
