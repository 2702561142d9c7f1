"""Where an API call runs: the in-process threaded scheduler or a Dask cluster, and the plan placed on it.

:func:`open_cluster` turns :func:`hetflow.run`'s cluster arguments
(``workers=``, ``threads_per_worker=``, ``scheduler=``, ``place=``,
``threads=``) into one context: ``None`` for the in-process scheduler,
otherwise a :class:`hetflow.engine.run.distributed.Cluster`, closed on the
way out when hetflow started or connected to it. :func:`plan_on` plans a
manifest against that machine or cluster. ``distributed`` is imported only
when a cluster is asked for.

Examples
--------
>>> with open_cluster(None, None, None, None) as cluster:
...     cluster is None
True
>>> with open_cluster(2, None, "current", None):
...     pass
Traceback (most recent call last):
...
hetflow.engine.errors.UsageError: workers= starts a new cluster and scheduler= joins one; give one of them
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any, Callable

from hetflow.engine.plan import planner
from hetflow.engine.errors import EnvironmentUnavailable, UsageError
from hetflow.engine.manifest.validate import Manifest
from hetflow.executors import probe

__all__ = ["open_cluster", "plan_on"]


def plan_on(manifest: Manifest, cluster: Any, place: Mapping[str, str] | None) -> planner.Plan:
    """The plan of ``manifest`` on this machine (``cluster`` None) or placed on the cluster's workers."""
    if cluster is None:
        return planner.plan(manifest, probe)
    try:
        return cluster.place(planner.plan(manifest, cluster.probe), manifest, dict(place or {}))
    except (OSError, TimeoutError) as e:
        # the workers' offers are asked of the scheduler: one that stops answering meanwhile is the cluster's
        # failure, before the run has a folder, as one that cannot be reached at all is
        if not cluster.scheduler_gone(e):
            raise
        why = getattr(e, "why", None) or f"{type(e).__name__}: {e}"
        raise EnvironmentUnavailable(f"the Dask scheduler at {cluster.address} stopped answering while the "
                                     f"run was placed on its workers: {why}") from None


@contextlib.contextmanager
def open_cluster(workers: int | None, threads_per_worker: int | None, scheduler: Any,
                 place: Mapping[str, str] | None, threads: int | None = None, dashboard: bool = True) -> Iterator[Any]:
    """The cluster a call runs on, or ``None`` for the in-process threaded scheduler.

    A cluster hetflow starts or connects to is closed on the way out; a
    ``distributed.Client`` given (or ``"current"``, the one in effect) is
    the caller's and stays open. ``dashboard``: a local cluster serves
    Dask's dashboard.
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
    from hetflow.engine.run.distributed import Cluster, tcp_timeout_problem  # distributed loads only for clusters

    wrong = tcp_timeout_problem()
    if wrong:
        raise UsageError(wrong)

    if workers is not None:
        with _stoppable(lambda: Cluster.local(workers, threads_per_worker, dashboard=dashboard),
                        f"a local cluster of {workers} worker(s) started") as cluster:
            yield cluster
        return
    if isinstance(scheduler, (str, os.PathLike)) and os.fspath(scheduler) != "current":
        with _stoppable(lambda: Cluster.connect(os.fspath(scheduler)),
                        f"it joined the cluster at {os.fspath(scheduler)}") as cluster:
            yield cluster
        return
    yield Cluster(_client(scheduler), "client", "")


def _stoppable(make: Callable[[], Any], what: str) -> Any:
    """``make()`` (a cluster started or joined), given up as soon as a stop signal asks the command to stop.

    Under :func:`hetflow.engine.run.cancel.stopping` (the CLI) a signal
    only sets a flag, and a cluster's start or join can wait seconds (for
    workers, for an answer): without this, Ctrl-C there would be answered
    by the wait's own end, a cluster that "could not start" or "has no
    workers" (exit 5). ``make`` runs in a helper thread; abandoned, a
    cluster it still makes is closed.
    """
    from hetflow.engine.errors import HetflowError, RunCancelled
    from hetflow.engine.run.cancel import Cancelled, current

    cancel = current()
    if cancel is None:
        return make()

    def made() -> Any:
        cluster = make()
        if cancel.requested:
            cluster.close()
        return cluster

    def stopped() -> RunCancelled:
        return RunCancelled(f"stopped by {cancel.signal} before {what}: nothing ran", None, cancel.signal)

    try:
        return cancel.wait(made)
    except Cancelled:
        raise stopped() from None
    except HetflowError:
        if cancel.requested:  # the signal's own doing: workers killed by it, a wait it cut short
            raise stopped() from None
        raise


def _client(scheduler: Any) -> Any:
    """The ``distributed.Client`` that ``scheduler`` names: itself, or the current one for ``"current"``."""
    from distributed import Client, default_client

    if isinstance(scheduler, Client):
        return _usable(scheduler, "a distributed.Client")
    if scheduler != "current":
        raise UsageError(f"scheduler= takes None, 'current', a distributed.Client, tcp://HOST:PORT or a scheduler "
                         f"file; got {scheduler!r}")
    try:
        client = default_client()
    except ValueError:
        raise UsageError("scheduler='current' needs a running distributed.Client (with Client(...): or "
                         "Client(...) made the default); none is") from None
    return _usable(client, "the current distributed.Client")


def _usable(client: Any, named: str) -> Any:
    """``client``, when this thread can make synchronous calls through it."""
    if client.status not in ("running", "connecting"):
        # its handle on the scheduler is gone: Dask would fail on the first request with an AttributeError on None
        raise UsageError(f"scheduler= got {named} that is {client.status}: give one that is open (a Client cannot "
                         "be reopened once closed)")
    if client.asynchronous:
        # called on the client's own event loop: each call through it would hand back a coroutine, and waiting on
        # one here would block the loop that has to answer it
        raise UsageError(f"scheduler= got {named} that is asynchronous, called on its event loop: this call blocks "
                         "until it ends, so run it in a thread (await asyncio.to_thread(...)) or give a synchronous "
                         "Client")
    return client
