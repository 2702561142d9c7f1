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
3. **host**: a :class:`~hetflow.engine.run.workerside.HetflowWorkerPlugin`,
   registered from the client with ``Client.register_plugin`` (plain
   workers need nothing but hetflow installed), creates inside each worker
   the executors placed on it and one
   :class:`~hetflow.engine.run.runtime.LocalRuntime` over them. The scheduler
   also hands it to workers that join later, a restarted one included.
   (:mod:`hetflow.engine.run.workerside` holds everything that runs inside a
   worker.)
4. **submit**: each task of :func:`~hetflow.engine.run.lowering.lower`'s graph
   is one ``Client.submit``, in dependency order, whose function is the
   ``_OnWorker`` runtime: it finds the run's ``LocalRuntime`` in the
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
   worker that hosted an executor and is gone, or a scattered phase array
   lost with the only worker holding it, starts a **recovery**
   (:func:`hetflow.engine.run.recovery.recover`): the lost executors are
   re-created on live workers, the lost array is scattered again from the
   client's copy, and only the tasks whose results were lost, or that
   would read one, run again, as the next *generation*.
6. **close**, on success and on every failure: remaining futures are
   cancelled; on each worker the plugin stops accepting tasks, waits for
   the ones running, releases every handle the run still holds and
   reports each executor's live activations; it then logs the flush
   marker of :mod:`hetflow.engine.run.events`. The client waits for every
   marker, so the event stream (carried by ``Worker.log_event`` and
   ``Client.subscribe_topic``) is complete before the record is written,
   and unregisters the plugin, whose teardown drops the executors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import graphlib
import importlib.util
import logging
import os
import queue
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import dask.config
from dask.sizeof import sizeof
from distributed import Client

from hetflow.engine.store.cache import CacheUse
from hetflow.engine.run.clusterphases import place_witness, run_phases
from hetflow.engine.errors import Diagnostic, EnvironmentUnavailable, ManifestError, UsageError, argument
from hetflow.engine.run.cancel import Cancelled, current as current_cancel
from hetflow.engine.run.events import EventStream, run_event
from hetflow.engine.run import malloc
from hetflow.engine.run.threads import USER_THREAD_VARS
from hetflow.engine.run.lowering import TaskGraph, lower
from hetflow.engine.manifest.validate import Manifest
from hetflow.engine.plan.costs import human_bytes
from hetflow.engine.plan.plandata import Plan
from hetflow.engine.run.recovery import _Gone, _mark_cached, outgrown, plan_recovery, recover
from hetflow.engine.run.runtime import ClusterFailure, NotHeld
from hetflow.engine.run.workerside import (
    CLOSE_WAIT_S,
    PLUGIN_PREFIX,
    RESOURCE_PREFIX,
    ExitPlugin,
    HetflowWorkerPlugin,
    WorkerInfo,
    _can_host,
    _close_run,
    _dependencies,
    _OnWorker,
    _sort_name,
    _substitute,
    code_version,
    worker_offers,
    worker_versions,
)
from hetflow.executors import Offer
from hetflow.executors.base import PortableActivation, Vendor

__all__ = ["Cluster", "WorkerInfo", "HetflowWorkerPlugin", "worker_offers", "plan_recovery", "PLUGIN_PREFIX",
           "RESOURCE_PREFIX"]

_POLL_S = 0.2
# a recovery that keeps finding more lost is a cluster that keeps losing workers
_MAX_RECOVERIES = 20
# how long a hosting worker stays paused before the run says so
_PAUSED_SAY_S = 5.0
# how long a hosting worker sends no heartbeat before the run says so (it is taken for lost after worker_silent_after)
_SILENT_SAY_S = 5.0
# recoveries in a row from workers their nanny restarted for memory, after which a run gives up
_MEMORY_KILLS = 3
_FLUSH_WAIT_S = 10.0
_CONNECT_TIMEOUT_S = 10.0
_GATHER_POLL_S = 1.0
# A scheduler started a moment ago may not listen yet; past this, a refused connection means none is there.
_REFUSED_GRACE_S = 2.0


_UNASKED = object()

# What a terminal sends to every process of its foreground job: Ctrl-C, and a hangup when it closes. hetflow
# answers each itself and closes its local cluster in order; the cluster's processes must not answer too.
_TERMINAL_SIGNALS = frozenset(getattr(signal, name) for name in ("SIGINT", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _terminal_signals_held() -> Any:
    """Start the processes of a local cluster inside this, so that a terminal's Ctrl-C or hangup reaches hetflow alone.

    A signal a thread blocks stays blocked in the threads it starts and the
    processes they spawn: Dask's event-loop thread and its nannies' worker
    processes are started while this thread blocks them, and a worker then
    never sees them. Seen without: a Ctrl-C on ``hetflow run --workers 2``
    printed each worker's ``KeyboardInterrupt`` traceback beside hetflow's
    own answer, and a hangup killed multiprocessing's resource tracker, whose
    replacement printed a ``KeyError`` traceback for every semaphore the
    nannies released. The tracker is started here for that reason (its
    start unblocks SIGINT and SIGTERM in the calling thread, so they are
    blocked again after). A signal that comes meanwhile waits, and this
    thread takes it when the cluster is up.

    The tracker is told not to warn of the semaphores it cleans up when
    hetflow ends: a Ctrl-C while the cluster starts ends hetflow before
    the half-made cluster's nannies release theirs, and the tracker's
    ``UserWarning`` of "leaked semaphore objects" then came after
    hetflow's own message, though the tracker removes every one of them.
    """
    if not _TERMINAL_SIGNALS or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _TERMINAL_SIGNALS)
    try:
        from multiprocessing import resource_tracker

        # the tracker's interpreter takes this process's -W options as it starts, and reads no other
        quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
        sys.warnoptions.append(quiet)
        try:
            resource_tracker.ensure_running()
        except OSError:
            pass                 # no process to be had: the cluster's start meets the same refusal and says so
        finally:
            sys.warnoptions.remove(quiet)
        signal.pthread_sigmask(signal.SIG_BLOCK, _TERMINAL_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class _DropCancelled(logging.Filter):
    """Drops a log record that carries a cancelled task's error."""

    def filter(self, record: logging.LogRecord) -> bool:
        import asyncio

        return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


class _TracebackLessClosedComm(logging.Filter):
    """Keeps Dask's note that a batched connection closed (``Batched Comm Closed``) but not its traceback: a
    scheduler killed under a run closes the client's stream in the middle of a send, and the command says what
    happened to the scheduler itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Batched Comm Closed"):
            record.exc_info = None
            record.exc_text = None
        return True


_CLOSED_COMM = _TracebackLessClosedComm()


class _DropClientGone(logging.Filter):
    """Drops the scheduler's report that it had news for a client whose connection is closed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Closed comm %r while trying to write")


class SchedulerSilent(TimeoutError):
    """The scheduler kept its connection open but did not answer a question in :func:`silent_after` seconds."""

    def __init__(self, address: str, seconds: float) -> None:
        self.address, self.seconds = address, seconds
        self.why = (f"it did not answer in {seconds:g} s: its process may be stopped or hung, or its machine out of "
                    "memory (Dask's distributed.comm.timeouts.tcp sets this wait)")
        super().__init__(f"the Dask scheduler at {address} stopped answering: {self.why}")


def worker_silent_after(workers: int) -> float:
    """How long a worker that hosts a run's executors may send no heartbeat before the run takes it for lost.

    :func:`silent_after`, the wait Dask gives a connection that does not
    answer (30 s unless set), as for a silent scheduler; at least the ten
    heartbeats Dask's own ``worker-ttl`` allows a cluster of ``workers``
    (one each 0.5 s up to 10 workers, then more slowly).
    """
    from distributed.scheduler import heartbeat_interval

    return max(silent_after(), 10 * heartbeat_interval(max(1, workers)))


# how long the scheduler waits for a silent worker's nanny to end its process
_DROP_WAIT_S = 30.0
# an answer of the scheduler slower than this restarts the timing of the workers' silence
_SLOW_ANSWER_S = 1.0


def _tcp_timeout() -> tuple[Any, float | None]:
    """Dask's ``distributed.comm.timeouts.tcp`` as configured, and in seconds (None where it is not a time)."""
    from dask.utils import parse_timedelta

    value = dask.config.get("distributed.comm.timeouts.tcp", "30s")
    try:
        seconds = parse_timedelta(value, "s")
    except (TypeError, ValueError, KeyError):
        return value, None
    return value, float(seconds) if seconds is not None else None


def tcp_timeout_problem() -> str | None:
    """What is wrong with Dask's ``distributed.comm.timeouts.tcp`` as configured, or None.

    Dask sets ten keepalive probes on every connection and asserts its
    timeout leaves room for them: below 11 s every connection fails with
    a bare ``AssertionError: Timeout too low``.
    """
    value, seconds = _tcp_timeout()
    if seconds is None and value is not None:
        return f"Dask's distributed.comm.timeouts.tcp is {value!r}, not a time (such as 30s)"
    if seconds is not None and int(seconds) < 11:
        return (f"Dask's distributed.comm.timeouts.tcp is {value!r}: Dask takes no less than 11 s (each connection "
                "gets ten keepalive probes within it); set it to 11s or more (DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP)")
    return None


_REGISTER_TRIES = 3  # a registration the scheduler could not hand to a worker that then left, asked again
_ASK_POLL_S = 1.0  # how often a question to the workers looks for one that left while it waits


def _unreachable(answer: Any) -> bool:
    """A worker's answer to ``Client.run`` that says the worker could not be reached (rather than that it ran
    hetflow's function and failed): Dask's ``CommClosedError``, a connection refused or timed out."""
    return isinstance(answer, (OSError, TimeoutError))


def _said(answer: Any) -> str:
    return f"{type(answer).__name__}: {answer}"


def silent_after() -> float:
    """How long a scheduler may leave a question unanswered before a run takes it for lost, in seconds.

    Dask's ``distributed.comm.timeouts.tcp``, the time after which Dask
    calls a connection that does not answer dead (30 s unless configured,
    e.g. ``DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP=120s``): a scheduler busy
    with a large graph may take seconds to answer, not that long.
    """
    _, seconds = _tcp_timeout()
    return seconds if seconds is not None and seconds > 0 else 30.0


@sizeof.register(PortableActivation)
def _sizeof_portable(portable: PortableActivation) -> int:
    # Dask's memory accounting (spilling, transfer batching) sees the bytes, not a small object
    return portable.nbytes


@dataclass
class _ClusterRun:
    """What ``execute`` reads back from a cluster run: the graph, the completed tasks and the recoveries."""

    graph: TaskGraph
    events: list[dict]
    recoveries: list[dict] = dataclasses.field(default_factory=list)


def _restore_environ(kept: Mapping[str, str | None]) -> None:
    """Put back this process's ``kept`` environment variables (name -> value, None where unset)."""
    for name, value in kept.items():
        if value is None:
            os.environ.pop(name, None)
        elif os.environ.get(name) != value:
            os.environ[name] = value


def _environ_keeper(kept: Mapping[str, str | None]) -> Any:
    """A plugin for a local cluster's scheduler (which runs in this process) that puts back ``kept`` whenever a
    worker joins: a nanny that restarts a lost worker writes its thread variables here again before it spawns it."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class KeepEnviron(SchedulerPlugin):
        name = "hetflow-keep-environ"

        def add_worker(self, scheduler: Any = None, worker: Any = None) -> None:
            _restore_environ(kept)

    return KeepEnviron()


class Cluster:
    """A Dask cluster hetflow runs on, and the client connected to it."""

    def __init__(self, client: Client, kind: str, target: str, owned: Any = None) -> None:
        self.client = client
        self.kind = kind
        self.target = target
        self._owned = owned
        self._workers: list[WorkerInfo] | None = None
        # worker address -> its nanny's, or None: every worker seen, kept after it leaves (a lost worker that
        # has a nanny is started again by it)
        self.nannies: dict[str, str | None] = {}
        # worker address -> its name, for every worker seen, kept after it leaves: a worker its nanny restarted
        # joins after placement asked the workers, and a record of its loss must still name it
        self.names: dict[str, str] = {}
        # worker address -> (since when it has been seen paused, its process's memory, its memory limit)
        self.paused: dict[str, tuple[float, Any, Any]] = {}
        # worker address -> (the scheduler's last_seen of it, when this client saw that value first): a worker
        # whose last_seen stays the same sends no heartbeat, timed on this client's clock, not the scheduler's
        self._heard: dict[str, tuple[Any, float]] = {}
        self._listed = 0  # how many workers the scheduler listed when last asked
        self._present: set[str] = set()  # their addresses
        self._dropping: set[str] = set()  # silent workers the scheduler is being asked to restart or remove
        self._dashboard: Any = _UNASKED
        # what the runs on this cluster asked of its workers and keep (threads.on_cluster), by what was asked
        self.memo: dict[Any, Any] = {}
        # worker address -> executors of this client's placed plans that have not ended: the runs of a
        # --parallel sweep each place theirs where the fewest are, and do not all queue on the first worker
        self._hosting: dict[str, int] = {}
        self._hosting_lock = threading.Lock()
        self._releases: dict[int, Any] = {}  # id(placed plan) -> the release of its executors' places
        # worker address -> why a worker that joined after the workers were asked is not used (another hetflow)
        self.foreign: dict[str, str] = {}
        # those asked, used or not, by address, with their versions where they differ from this process's
        self._joined: dict[str, WorkerInfo] = {}

    @classmethod
    def local(cls, workers: int, threads_per_worker: int | None = None, dashboard: bool = True) -> Cluster:
        """Start a ``LocalCluster`` of ``workers`` processes on loopback, serving Dask's dashboard unless
        ``dashboard`` is false (its scheduler then starts 0.3-0.4 s sooner: no bokeh to load).

        Its workers' own logs are silenced: hetflow reports a failing task
        itself, and Dask's "Compute Failed" tracebacks would bury that.

        Its workers get the malloc thresholds of a plain process, not
        Dask's trim threshold that sends every array of 128 KiB or more
        through ``mmap`` (:mod:`hetflow.engine.run.malloc`).

        Its workers freeze their heap when they close
        (:class:`~hetflow.engine.run.workerside.ExitPlugin`), so that closing
        the cluster does not wait for each interpreter's last collection.

        Its scheduler runs without the active memory manager, for the cost
        of a recovery, not for its correctness: ReduceReplicas keeps one
        copy of a result, often the destination's copy of a bridge's bytes,
        and a lost destination then costs the export and the partition
        that made its tensor as well as the import. Recovery holds with it
        on, as on any cluster hetflow joins (:mod:`hetflow.engine.run.recovery`).
        """
        import dask.config
        from distributed import LocalCluster

        if workers < 1:
            raise UsageError(f"{argument('workers')} must be at least 1")
        if threads_per_worker is not None and threads_per_worker < 1:
            raise UsageError(f"{argument('threads_per_worker')} must be at least 1")
        _refuse_in_a_starting_worker()
        _refuse_beyond_memory(workers)
        _room_for_open_files(workers)
        threads = threads_per_worker or max(1, (os.cpu_count() or 1) // workers)
        spawn = malloc.spawn_environ(dask.config.get("distributed.nanny.pre-spawn-environ", default={}))
        # the nanny takes a variable already in this process's environment over its configuration (and writes its
        # own there before it spawns a worker): an earlier nanny's trim threshold would win over these
        os.environ.update({k: v for k, v in spawn.items() if k.startswith("MALLOC_")})
        # ... and its thread variables (OMP_NUM_THREADS=1 and the like) there too, where they stayed: a BLAS this
        # process loaded later (scipy's, say) then kept one thread whatever the cores
        kept = {k: os.environ.get(k) for k in USER_THREAD_VARS}
        with dask.config.set({"distributed.scheduler.active-memory-manager.start": False,
                              "distributed.nanny.pre-spawn-environ": spawn}), _terminal_signals_held():
            try:
                lc = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                                  dashboard_address=":0" if dashboard else None, silence_logs=logging.CRITICAL,
                                  # without the dashboard the scheduler still serves its HTTP routes (health,
                                  # metrics), by default on 8787: a port of its own, as with the dashboard
                                  scheduler_kwargs=None if dashboard else {"dashboard_address": ":0"},
                                  # the workers' exit without the interpreter's last collection (ExitPlugin)
                                  plugins={ExitPlugin()})
            except (RuntimeError, OSError, TimeoutError) as e:
                # Dask says "Nanny failed to start."; what the machine refused (open files, processes, memory,
                # ports) is at the root of its chain
                raise EnvironmentUnavailable(f"a local cluster of {workers} worker(s) could not start: "
                                             f"{_root_cause(e)}") from e
            finally:
                _restore_environ(kept)
        lc.scheduler.add_plugin(_environ_keeper(kept))
        try:
            client = Client(lc, set_as_default=False)
        except BaseException:
            lc.close()
            raise
        cluster = cls(client, "local-cluster", lc.scheduler_address, owned=lc)
        if not dashboard:
            cluster._dashboard = None  # its HTTP routes are named "dashboard" among its services all the same
        return cluster

    @classmethod
    def connect(cls, target: str, *, timeout: float = _CONNECT_TIMEOUT_S) -> Cluster:
        """Join an existing cluster: ``tcp://HOST:PORT`` or the path of a scheduler file."""
        if os.path.isfile(target):
            kwargs: dict[str, Any] = {"scheduler_file": target}
            address, why = _file_address(target)
            if address is None:
                raise UsageError(f"{argument('scheduler')} {target}: not a Dask scheduler file: {why} (dask scheduler "
                                 "--scheduler-file PATH writes one)")
        elif "://" in target:
            kwargs = {"address": target}
            address = target
        else:
            raise UsageError(f"{argument('scheduler')} expects tcp://HOST:PORT or a scheduler file; {target!r} is neither "
                             "(no such file, no scheme)")
        bad = _bad_address(address)
        if bad:
            named = target if address == target else f"{address} (from {target})"
            raise UsageError(f"{argument('scheduler')} {named}: {bad}")
        wrong = _probe(address, min(timeout, _REFUSED_GRACE_S), timeout) if address else None
        if wrong:
            named = target if address == target else f"{address} (from {target})"
            raise EnvironmentUnavailable(f"cannot connect to the Dask scheduler at {named}: {wrong}")
        try:
            client = Client(**kwargs, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise EnvironmentUnavailable(f"cannot connect to the Dask scheduler at {target}: {e}") from None
        except TypeError as e:
            if address.startswith("tls://"):
                # Dask's own words: "TLS expects a `ssl_context` argument of type ssl.SSLContext ... Instead got None"
                raise UsageError(f"{argument('scheduler')} {target}: a tls:// scheduler needs Dask's TLS settings "
                                 "for the client (distributed.comm.tls.ca-file, and client.cert and client.key, in "
                                 "the Dask config or DASK_DISTRIBUTED__COMM__TLS__* variables)") from None
            raise
        except MemoryError:
            # Dask read another protocol's answer to its handshake as a frame length of exabytes
            raise EnvironmentUnavailable(f"cannot connect to the Dask scheduler at {target}: what answered its "
                                         f"handshake does not speak Dask's protocol ({_PORTS})") from None
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (TimeoutError, OSError):
            # Dask counts running workers only: a cluster whose workers are all paused is not one without any
            try:
                workers = list(client.sync(client.scheduler.identity, n_workers=-1).get("workers", {}).items())
            except (OSError, TimeoutError):
                workers = []
            client.close()
            if workers:
                held = "; ".join(_paused_words(a, w) for a, w in workers)
                raise EnvironmentUnavailable(f"the Dask cluster at {target} has no running worker (waited {timeout:g} "
                                             f"s): {held}") from None
            raise EnvironmentUnavailable(f"the Dask cluster at {target} has no workers (waited {timeout:g} s)") from None
        logging.getLogger("distributed.batched").addFilter(_CLOSED_COMM)  # once: a filter is kept in a set
        return cls(client, "cluster", target)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        # a client closed while it reconnects to a scheduler that is gone cancels the reconnection, which Dask
        # logs as an error with its traceback: the command has said what happened to the scheduler already
        quiet = _DropCancelled()
        logger = logging.getLogger("distributed.client")
        logger.addFilter(quiet)
        # a local cluster's scheduler runs in this process, and until it closes too it may have news for the
        # client closed a moment ago (a task of a cancelled run that ends): Dask logs that as critical, with a
        # traceback, after the command has said how the run ended
        gone = _DropClientGone()
        scheduler_log = logging.getLogger("distributed.scheduler")
        scheduler_log.addFilter(gone)
        try:
            try:
                self.client.close()
            finally:
                logger.removeFilter(quiet)
            if self._owned is not None:
                self._owned.close()
                self._owned = None
        finally:
            scheduler_log.removeFilter(gone)

    def _ids(self) -> dict[str, str]:
        """Each live worker's incarnation by address: its scratch folder, new in every worker process.

        A nanny may restart a worker on the same address (a fixed
        ``--worker-port``); the scheduler's identity gives no process id,
        and the folder is what tells the restarted worker from the lost one.
        """
        return {a: str(w.get("local_directory") or a) for a, w in self._identity()["workers"].items()}

    def _identity(self, n_workers: int = -1) -> dict:
        """The scheduler's identity, asked now: ``Client.scheduler_info``'s cache is overwritten
        in the background by a refresh that carries no workers.

        Raises :class:`SchedulerSilent` when the scheduler does not answer
        in :func:`silent_after` seconds: a scheduler process that is stopped
        or hung keeps its connections open, and its kernel acknowledges
        what the client sends, so nothing else would ever say so.
        """
        wait = silent_after()
        asked = time.monotonic()
        try:
            identity = self.client.sync(self.client.scheduler.identity, n_workers=n_workers, callback_timeout=wait)
        except TimeoutError:
            if time.monotonic() - asked < wait:
                raise  # a connection's own timeout, within the wait: the client is losing the scheduler
            raise SchedulerSilent(self.address, wait) from None
        now = time.monotonic()
        if now - asked > _SLOW_ANSWER_S:
            # the scheduler itself was slow to answer (stopped, swapping): the heartbeats it has not handled yet
            # are no worker's silence, which is timed again from here
            self._heard = {a: (seen, now) for a, (seen, _) in self._heard.items()}
        if n_workers:
            self._listed = len(identity.get("workers") or {})
            self._present = set(identity.get("workers") or {})
        for address, w in (identity.get("workers") or {}).items():
            seen = w.get("last_seen")
            if self._heard.get(address, (None,))[0] != seen or seen is None:
                self._heard[address] = (seen, now)
            self.nannies[address] = w.get("nanny")
            self.names[address] = str(w.get("name", address))
            if w.get("status") == "paused":
                since = self.paused.get(address, (now,))[0]
                self.paused[address] = (since, (w.get("metrics") or {}).get("memory"), w.get("memory_limit"))
            else:
                self.paused.pop(address, None)
        return identity

    def patient(self, call: Callable[[], Any]) -> Any:
        """``call()``, a blocking call into the client, waited for as long as the scheduler answers.

        Dask waits without limit for an answer to a call such as
        ``Client.run``: a worker that is stopped holds it until the
        scheduler drops that worker (its ``worker-ttl``), which is Dask's to
        judge; a scheduler that is stopped or hung would hold it for ever.
        So the call runs in a thread of its own, and every second without
        its answer the scheduler is asked for its identity:
        :class:`SchedulerSilent` when that goes unanswered for
        :func:`silent_after` seconds (the call's thread is left waiting on a
        client that will be closed). A worker that has sent no heartbeat for
        :func:`worker_silent_after` seconds meanwhile, which such a call
        would wait on, is restarted or removed (:meth:`_drop_silent`).
        """
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                box["value"] = call()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=target, name="hetflow-cluster-call", daemon=True).start()
        while not done.wait(_ASK_POLL_S):
            self._identity()
            self._drop_silent()
        if "error" in box:
            raise box["error"]
        return box["value"]

    @property
    def address(self) -> str:
        return self.client.scheduler.address

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's URL; ``None`` when the scheduler serves none (a local one without bokeh).

        Asked once per cluster: a scheduler's services are fixed when it
        starts, and the two round trips were a tenth of the client's time
        in each point of a sweep.
        """
        if self._dashboard is not _UNASKED:
            return self._dashboard
        link = None
        if "dashboard" in self._identity(0).get("services", {}) and not (
                self._owned is not None and importlib.util.find_spec("bokeh") is None):
            link = self.client.dashboard_link
        self._dashboard = link
        return link

    def workers(self, vendors: tuple[Vendor, ...] = ()) -> list[WorkerInfo]:
        """Every worker, sorted by name, with its offers for ``vendors`` probed; cached."""
        if self._workers is None:
            info = self._identity()["workers"]
            workers = sorted(
                (WorkerInfo(address, str(w.get("name", address)), int(w.get("nthreads", 1)),
                            dict(w.get("resources") or {})) for address, w in info.items()),
                key=lambda w: (_sort_name(w.name), w.address))
            if self._owned is None:
                # a cluster started by hand may run another installation than this process's: the tasks are
                # hetflow's code, so its version must match; the libraries' are recorded where they differ
                workers = self._check_versions(workers)
            self._workers = workers
        missing = [v for v in vendors if any(v not in w.offers for w in self._workers)]
        if missing:
            got = self._ask(self._workers, worker_offers, [v.value for v in missing])
            self._workers = [w for w in self._workers if w.address in got]
            for w in self._workers:
                w.offers.update({o.vendor: o for o in got[w.address]})
        return self._workers

    def _ask(self, workers: list[WorkerInfo], function: Callable, *args: Any) -> dict[str, Any]:
        """``function(*args)`` run on each of ``workers``: {address: answer}, for the workers that answered.

        A worker that cannot run hetflow's code (none installed, another
        version without the function) is a :class:`UsageError`. One that
        left the cluster while it was asked (killed, its machine gone; a
        nanny starts another in its place) is left out of the answers; so
        is one the scheduler still lists but that cannot be reached twice
        running, with the reason in :attr:`foreign`. None answering is
        :class:`~hetflow.engine.errors.EnvironmentUnavailable`.
        """
        asked, got, tries = list(workers), {}, {}
        while asked:
            answers = self._ask_once([w.address for w in asked], function, *args)
            listed = self._identity()["workers"] if any(_unreachable(a) for a in answers.values()) else None
            again = []
            for w in asked:
                answer = answers.get(w.address)
                if not _unreachable(answer):
                    if isinstance(answer, BaseException) or answer is None:
                        why = f"{type(answer).__name__}: {answer}" if answer is not None else "it did not answer"
                        raise UsageError(f"worker {w.name} ({w.address}) cannot run hetflow: {why}; install this "
                                         f"hetflow ({code_version()}) on every worker") from None
                    got[w.address] = answer
                elif w.address in listed:
                    tries[w.address] = tries.get(w.address, 0) + 1
                    if tries[w.address] < 2:
                        again.append(w)
                    else:
                        self.foreign[w.address] = (f"worker {w.name} ({w.address}) could not be reached: "
                                                   f"{_said(answer)}")
            asked = again
        if not got and workers:
            why = "; ".join(self.foreign.get(w.address) or f"worker {w.name} ({w.address}) left the cluster"
                            for w in workers)
            raise EnvironmentUnavailable(f"no worker of the Dask cluster at {self.target} answered: {why}")
        return got

    def _ask_once(self, addresses: list[str], function: Callable, *args: Any) -> dict[str, Any]:
        """One ``Client.run`` of ``function`` on ``addresses``, given up once a worker it waits on has left.

        The scheduler asks each worker over a connection of its own, and
        one to a worker killed a moment before is retried until Dask's
        connect timeout (30 s): long after the scheduler has dropped the
        worker. So the scheduler is asked every second which workers it
        has; when one asked is gone, the answers are ``CommClosedError``
        for the gone ones and a new question goes to the rest.
        """
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                box["value"] = self.client.run(function, *args, on_error="return", workers=addresses)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=target, name="hetflow-cluster-ask", daemon=True).start()
        while not done.wait(_ASK_POLL_S):
            self._identity()
            self._drop_silent()
            listed = self._identity()["workers"]
            gone = [a for a in addresses if a not in listed]
            if gone:
                from distributed.comm.core import CommClosedError

                left = {a: CommClosedError(f"worker {a} left the cluster while it was asked") for a in gone}
                rest = [a for a in addresses if a not in left]
                return {**left, **(self._ask_once(rest, function, *args) if rest else {})}
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _check_versions(self, workers: list[WorkerInfo]) -> list[WorkerInfo]:
        """``workers`` that answered, each checked to run this hetflow (see :meth:`_ask`)."""
        from hetflow.engine.store.records import versions

        mine = {**versions(), "hetflow": code_version()}
        got = self._ask(workers, worker_versions)
        workers = [w for w in workers if w.address in got]
        for w in workers:
            theirs = got[w.address]
            if theirs.get("hetflow") != mine["hetflow"]:
                raise UsageError(_other_hetflow(w, theirs.get("hetflow"), mine["hetflow"]))
            w.versions.update({k: v for k, v in theirs.items() if v != mine.get(k)})
        return workers

    def _admit(self, joined: list[WorkerInfo]) -> None:
        """Ask workers that joined after placement what :meth:`_check_versions` asks: one of another hetflow,
        or that cannot answer, goes into :attr:`foreign` (a recovery does not hand it executors); the others'
        differing libraries go into their ``versions``."""
        from hetflow.engine.store.records import versions

        mine = {**versions(), "hetflow": code_version()}
        got = self.patient(lambda: self.client.run(worker_versions, on_error="return",
                                                   workers=[w.address for w in joined]))
        for w in joined:
            self._joined[w.address] = w
            theirs = got.get(w.address)
            if not isinstance(theirs, dict):
                why = f"{type(theirs).__name__}: {theirs}" if theirs is not None else "it did not answer"
                self.foreign[w.address] = f"worker {w.name} ({w.address}) cannot run hetflow: {why}"
            elif theirs.get("hetflow") != mine["hetflow"]:
                self.foreign[w.address] = _other_hetflow(w, theirs.get("hetflow"), mine["hetflow"])
            else:
                w.versions.update({k: v for k, v in theirs.items() if v != mine.get(k)})

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
            raise UsageError(f"{argument('place')} names executor {unknown[0]!r}, which the manifest does not declare "
                             f"(declared: {', '.join(plan.executors)})")
        with self._hosting_lock:
            load = {w.address: self._hosting.get(w.address, 0) for w in workers}
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
        # each witness phase priced on these workers and in this process, the faster chosen (clusterphases)
        made = place_witness(dataclasses.replace(plan, executors={name: placed[name] for name in plan.executors}),
                             workers)
        self._hold_places(made)
        return made

    def _hold_places(self, plan: Plan) -> None:
        """Count ``plan``'s executors on their workers until its run ends (:meth:`run_graph`) or it is dropped."""
        import weakref

        addresses = [e.worker for e in plan.executors.values()]
        with self._hosting_lock:
            for address in addresses:
                self._hosting[address] = self._hosting.get(address, 0) + 1
        key = id(plan)

        def release() -> None:
            with self._hosting_lock:
                self._releases.pop(key, None)
                for address in addresses:
                    left = self._hosting.get(address, 0) - 1
                    if left > 0:
                        self._hosting[address] = left
                    else:
                        self._hosting.pop(address, None)

        self._releases[key] = weakref.finalize(plan, release)

    @staticmethod
    def _candidates(e: Any, workers: list[WorkerInfo], mapping: Mapping[str, str]) -> tuple[list[WorkerInfo], str]:
        if e.name in mapping:
            wanted = mapping[e.name]
            return [w for w in workers if wanted in (w.name, w.address)], argument("place", wanted, key=e.name)
        resource = RESOURCE_PREFIX + e.name
        tagged = [w for w in workers if w.resources.get(resource, 0) > 0]
        if tagged:
            return tagged, f"worker resource {resource}"
        return workers, f"offers {e.vendor.value}, fewest executors"

    def describe(self) -> dict:
        return {
            "kind": self.kind, "address": self.address, "dashboard": self.dashboard_link,
            # a worker's "versions": the libraries whose version differs from this process's (the record's)
            "workers": [{"address": w.address, "name": w.name, "nthreads": w.nthreads, "resources": dict(w.resources),
                         **({"versions": dict(w.versions)} if w.versions else {})} for w in self.workers()],
            # workers the scheduler lists that this client could not use: unreachable, or another hetflow
            **({"not_used": [self.foreign[a] for a in sorted(self.foreign)]} if self.foreign else {}),
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
        stopped = _abandonment(stream, run_id)
        client.subscribe_topic(topic, on_event)
        ids = self._ids()
        plugin = HetflowWorkerPlugin(run_id, plan, cache, ids, client=client.id)
        futures: dict[str, Any] = {}
        failure: BaseException | None = None
        results: list[Any] = []
        recoveries: list[dict] = []
        registered = False
        try:
            # before the plugin: its set-up on each worker reports the worker's warm-up
            stream.emit(run_event("started", run_id, tasks=len(graph.dsk), mode=self.kind, scheduler=self.address,
                                  dashboard=self.dashboard_link, workers=len(self.workers())))
            self._register(plugin)
            registered = True
            phase_values: dict[str, Any] = {}
            if phases is not None:
                run_phases(self.client, phases, run_id, plan, stream, futures, phase_values)
            generation: dict[str, int] = {}
            self._submit(plan, run_id, graph, futures, graph.dsk, generation, 0)
            finished: set[str] = set()
            kept: dict[str, Any] = {}
            while True:
                outcome = self._watch(plan, futures, finished, ids, kept, graph, stream, run_id, stopped)
                if not isinstance(outcome, _Gone):
                    failure = outcome
                    break
                if len(recoveries) >= _MAX_RECOVERIES:
                    failure = ClusterFailure(f"run {run_id} gave up after {len(recoveries)} recoveries from lost "
                                             f"workers; the last: {outcome.cause}", {"recoveries": list(recoveries)})
                    break
                failure = outgrown(self, run_id, outcome.workers, recoveries, stream, outcome.cause, _MEMORY_KILLS)
                if failure is not None:
                    break
                plan = recover(self, plan, run_id, graph, futures, generation, outcome.workers, recoveries,
                               phase_values, finished, stream, outcome.data, kept=set(kept), cause=outcome.cause,
                               cache=cache, silent=outcome.silent)
                ids.update({a: i for a, i in self._ids().items() if a not in outcome.workers})
            if failure is None:
                results = [kept.get(k) for k in graph.keys]
        except Exception as e:  # noqa: BLE001 - recorded by execute, like a stage failure
            failure = failure or e
        live: dict[str, int] = {}
        try:
            if failure is not None and self.scheduler_gone(failure):
                raise failure  # no worker can be asked for its handles or its last events
            pending = [f for f in futures.values() if not f.done()]
            if pending:  # a round trip to the scheduler, even for none
                self.patient(lambda: client.cancel(pending))
            # a cancelled run waits for none of its running tasks: what they return is released as they end
            wait = 0.0 if isinstance(failure, Cancelled) else CLOSE_WAIT_S
            reports = self.patient(lambda: client.run(_close_run, run_id, wait, on_error="return")
                                   ) if registered else {}
            answered = set()
            for address, report in reports.items():
                if isinstance(report, BaseException):
                    continue
                answered.add(address)
                live.update(report["live"])
            with flush_cond:
                flush_cond.wait_for(lambda: answered <= flushed, timeout=_FLUSH_WAIT_S)
        except (OSError, TimeoutError) as e:
            if not self.scheduler_gone(e):
                raise
            failure = e  # the run's own failure, if it had one, was this loss seen from inside
        finally:
            try:
                client.unsubscribe_topic(topic)
            except Exception:  # noqa: BLE001 - a scheduler that is gone holds no subscription
                pass
            # a registration that failed on one worker is still held by the scheduler, which would give it to new
            # workers; a scheduler that answers nothing would hold this call for ever
            try:
                if not isinstance(failure, SchedulerSilent):
                    client.unregister_worker_plugin(plugin.name)
            except Exception:  # noqa: BLE001 - a worker that died has no plugin to remove
                pass
        release = self._releases.get(id(plan))
        if release is not None:
            release()  # a finalizer runs once: the plan's own end does nothing more
        for name in plan.executors:
            live.setdefault(name, 0)
        for entry in recoveries:
            _mark_cached(entry, stream.events)
        if failure is not None and self.scheduler_gone(failure):
            why = failure.why if isinstance(failure, SchedulerSilent) else failure
            failure = ClusterFailure(f"the Dask scheduler at {self.address} stopped answering during run {run_id}: "
                                     f"{why}", {"scheduler": self.address})
        return (_ClusterRun(graph, stream.tasks(), recoveries), results, _as_failure(failure),
                dict(sorted(live.items())))

    def _register(self, plugin: HetflowWorkerPlugin) -> None:
        """Register the run's worker plugin with the scheduler, which hands it to every worker.

        The scheduler's hand-over fails as a whole when one worker cannot
        be reached: one killed a moment before it is dropped (the
        registration is asked again of the workers left; a worker that
        already has the plugin sets it up again, before any task of the
        run); one the scheduler still lists but cannot reach (an address
        the scheduler's machine cannot connect to) is a
        :class:`~hetflow.engine.run.runtime.ClusterFailure` that names it.
        """
        for attempt in range(_REGISTER_TRIES):
            try:
                self.patient(lambda: self.client.register_plugin(plugin, name=plugin.name))
                return
            except (OSError, TimeoutError) as e:
                if self.scheduler_gone(e):
                    raise
                listed = self._identity()["workers"]
                said = set(re.findall(r"[a-z]+://[^\s>,;]+", str(e)))
                unreached = [a for a in self._all_known() if a in said]
                if unreached and not any(a in listed for a in unreached) and attempt + 1 < _REGISTER_TRIES:
                    continue
                names = {a: str(w.get("name", a)) for a, w in listed.items()}
                who = ", ".join(f"{names.get(a, a)} ({a})" for a in unreached) or "one of them"
                raise ClusterFailure(f"the run's plugin could not be handed to every worker of the cluster at "
                                     f"{self.target}: the scheduler could not reach worker {who}: "
                                     f"{type(e).__name__}: {e}", {"workers": unreached}) from None

    def _all_known(self) -> list[str]:
        """Every worker address this client has heard of: those it asked, joined or not, and the scheduler's."""
        return sorted({*(w.address for w in self._workers or ()), *self.foreign, *self._joined,
                       *self.nannies})

    def scheduler_gone(self, error: BaseException) -> bool:
        """Whether ``error`` is the client losing its scheduler: a connection's error or timeout while the client
        reconnects or has closed itself (it does once it has failed to reconnect), or one that names the
        scheduler's address (a call that timed out connecting to it, as the client gives up)."""
        if isinstance(error, SchedulerSilent):
            return True
        if not isinstance(error, (OSError, TimeoutError)):
            return False
        return getattr(self.client, "status", "running") != "running" or bool(self.address and self.address in str(error))

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

    def _watch(self, plan: Plan, futures: dict[str, Any], finished: set[str], ids: Mapping[str, str],
               kept: dict[str, Any], graph: TaskGraph, stream: EventStream | None = None,
               run_id: str = "", stopped: Callable[[], BaseException | None] | None = None
               ) -> BaseException | _Gone | None:
        """Wait for every future: ``None``, the first failure, or the hosting workers that are gone.

        ``finished`` gathers the keys whose futures finished, as they do: a
        future of a result lost with its worker later says ``lost`` or
        ``pending``, but the task did run. An output's value is gathered
        into ``kept`` as soon as it finishes and its future released: the
        client's copy cannot be lost with a worker, so a finished output
        never runs again. A hosting worker is gone when its address left
        or came back with another Dask id (``ids``: a nanny restarting it on
        a fixed port). A task that raised :class:`NotHeld` is Dask running
        it again from lineage: that is a loss too, even when no hosting
        worker left. A hosting worker paused for :data:`_PAUSED_SAY_S` is
        said once in ``stream`` (``worker-paused``): Dask starts no task on
        it until it resumes, and the run waits with no other sign. ``stopped``
        (see :func:`_abandonment`) says the run was cancelled: its answer is
        returned as the failure.
        """
        hosting = {e.worker for e in plan.executors.values()}
        said: set[str] = set()
        outputs = set(graph.output_keys.values())
        done: queue.Queue = queue.Queue()

        def on_done(f: Any, key: str) -> None:
            if f.status == "finished" and futures.get(key) is f:
                finished.add(key)
            done.put((key, f))

        def gone_now() -> list[str]:
            alive = self._ids()
            return sorted(w for w in hosting if alive.get(w) != ids.get(w, alive.get(w)) or w not in alive)

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
                if f.status == "finished" and key in outputs:
                    try:
                        kept[key] = _gather_or_gone(f, gone_now)
                    except Exception:  # noqa: BLE001 - lost between finishing and the gather: a recovery reruns it
                        remaining.add(key)
                        finished.discard(key)
                        gone = gone_now()
                        if gone:
                            return _Gone(gone, cause=f"worker {', '.join(gone)} left the cluster")
                        continue
                    futures.pop(key).release()
                    continue
                if f.status == "error":
                    # a failure that follows a hosting worker's loss is the loss
                    gone = gone_now()
                    exc = f.exception()
                    if gone:
                        return _Gone(gone, cause=f"worker {', '.join(gone)} left the cluster")
                    if isinstance(exc, NotHeld):
                        alive = self._ids()
                        left = sorted(w.address for w in self.workers() if w.address not in alive)
                        return _Gone(left, cause=str(exc))
                    return exc
                if f.status == "cancelled":
                    # the scheduler forgets scattered data lost with its only worker, and every task waiting on it
                    lost = sorted(k for k, g in futures.items() if k.startswith("phase:") and g.status != "finished")
                    if lost:
                        alive = self._ids()
                        return _Gone(sorted(w.address for w in self.workers() if w.address not in alive), lost,
                                     cause=f"the only copy of {', '.join(lost)} was lost")
                    return ClusterFailure(f"task {f.key} was cancelled by the cluster", {"tasks": [str(f.key)]})
            if time.monotonic() >= poll:
                cancelled = stopped() if stopped is not None else None
                if cancelled is not None:
                    return cancelled
                gone = gone_now()
                if gone:
                    return _Gone(gone, cause=f"worker {', '.join(gone)} left the cluster")
                silent = self._silent_hosts(hosting, said, stream, run_id)
                if silent is not None:
                    return silent
                if stream is not None:
                    self._say_paused(hosting, said, stream, run_id)
                poll = time.monotonic() + _POLL_S
        return None

    def _silent_hosts(self, hosting: set[str], said: set[str], stream: EventStream | None,
                      run_id: str) -> _Gone | None:
        """The hosting workers that sent the scheduler no heartbeat for :func:`worker_silent_after` seconds, taken
        out of the cluster as lost; one ``worker-silent`` event for each that has been silent :data:`_SILENT_SAY_S`.

        A worker whose process is stopped (``kill -STOP``, a paused VM) or
        hung keeps its connections open: the scheduler drops it only after
        its ``worker-ttl`` (5 minutes unless set), and meanwhile the run, and
        every question to all the workers (each run's plugin, its close),
        waits on it without a word. Past the bound the scheduler is asked to
        do what its ``worker-ttl`` does, now: restart the worker through its
        nanny, or remove it where it has none. The run then recovers as from
        a lost worker.
        """
        now = time.monotonic()
        bound = worker_silent_after(self._listed)
        for address in sorted(hosting):
            heard = self._heard.get(address)
            if heard is None or heard[0] is None:
                continue
            quiet = now - heard[1]
            name = self.names.get(address)
            if quiet >= _SILENT_SAY_S and "silent:" + address not in said and stream is not None:
                said.add("silent:" + address)
                stream.emit(run_event("worker-silent", run_id, worker=address, name=name, seconds=round(quiet, 1),
                                      lost_after=bound))
            if quiet >= bound:
                why = (f"sent the scheduler no heartbeat for {quiet:.1f} s, its process stopped or hung: "
                       f"{'restarted through its nanny' if self.nannies.get(address) else 'removed from the cluster'}"
                       f", as Dask's worker-ttl does later (distributed.comm.timeouts.tcp sets this wait)")
                who = f"worker {name} ({address})" if name and name != address else f"worker {address}"
                self._drop(address, f"{who} {why}")
                return _Gone([address], cause=f"{who} {why}", silent={address: why})
        return None

    def _drop_silent(self) -> None:
        """Restart or remove every worker the scheduler lists that has sent no heartbeat for
        :func:`worker_silent_after` seconds (see :meth:`_silent_hosts`), each said in :attr:`foreign`.

        A question to all the workers (what they run, the run's plugin, its
        close) waits for each of them, a stopped one included, and the
        scheduler would drop that one only after its ``worker-ttl``.
        """
        now = time.monotonic()
        bound = worker_silent_after(self._listed)
        for address in sorted(self._present - self._dropping):
            seen, since = self._heard.get(address, (None, now))
            if seen is None or now - since < bound:
                continue
            name = self.names.get(address)
            who = f"worker {name} ({address})" if name and name != address else f"worker {address}"
            self._drop(address, f"{who} sent the scheduler no heartbeat for {now - since:.1f} s, its process stopped "
                                f"or hung: {'restarted through its nanny' if self.nannies.get(address) else 'removed from the cluster'}, "
                                "as Dask's worker-ttl does later (distributed.comm.timeouts.tcp sets this wait)")

    def _drop(self, address: str, why: str) -> None:
        """Ask the scheduler to restart the worker at ``address`` through its nanny, or remove it where it has none;
        ``why`` goes into :attr:`foreign`, which the record's ``scheduler.not_used`` lists.

        The scheduler's own answer to a worker past its ``worker-ttl``: a
        nanny kills its stopped process (SIGKILL reaches one) and starts a
        new one; a worker without one is dropped, its connections closed,
        and closes itself if it is ever resumed.
        """
        from distributed.comm.core import CommClosedError

        stimulus = f"hetflow-worker-silent-{time.time()}"
        self.foreign[address] = why
        self._dropping.add(address)
        try:
            self.patient(lambda: self.client.sync(self.client.scheduler.restart_workers, workers=[address],
                                                  timeout=_DROP_WAIT_S, wait_for_workers=False, on_error="return",
                                                  stimulus_id=stimulus))
        except (CommClosedError, OSError, TimeoutError) as e:
            if self.scheduler_gone(e):
                raise
            # the worker went meanwhile, or its nanny did not answer: the recovery looks at the workers again
        finally:
            self._dropping.discard(address)

    def _say_paused(self, hosting: set[str], said: set[str], stream: EventStream, run_id: str) -> None:
        """One ``worker-paused`` event for each hosting worker paused for :data:`_PAUSED_SAY_S`, with its memory."""
        now = time.monotonic()
        for address in sorted(hosting - said):
            since, memory, limit = self.paused.get(address, (None, None, None))
            if since is None or now - since < _PAUSED_SAY_S:
                continue
            said.add(address)
            name = next((w.name for w in self.workers() if w.address == address), None)
            stream.emit(run_event("worker-paused", run_id, worker=address, name=name, memory=memory,
                                  memory_limit=limit, seconds=round(now - since, 1)))

    def _alive_workers(self, vendors: tuple[Vendor, ...], gone: list[str]) -> list[WorkerInfo]:
        """The workers alive now, a restarted one included, with their offers for ``vendors``."""
        known = {w.address: w for w in self.workers()}
        info = self._identity()["workers"]
        alive = [known.get(a) or self._joined.get(a)
                 or WorkerInfo(a, str(w.get("name", a)), int(w.get("nthreads", 1)), dict(w.get("resources") or {}))
                 for a, w in info.items() if a not in gone]
        # a worker started by hand that joined meanwhile may import another installation: asked once, as the
        # workers were before placement (a local cluster's are this process's own)
        joined = [w for w in alive if w.address not in known and w.address not in self._joined]
        if joined and self._owned is None:
            self._admit(joined)
        alive = [w for w in alive if w.address not in self.foreign]
        fresh = [w for w in alive if any(v not in w.offers for v in vendors)]
        if fresh:
            got = self.patient(lambda: self.client.run(worker_offers, [v.value for v in vendors], on_error="return",
                                                       workers=[w.address for w in fresh]))
            for w in fresh:
                answer = got.get(w.address)
                if isinstance(answer, list):
                    w.offers.update({o.vendor: o for o in answer})
        return sorted(alive, key=lambda w: (_sort_name(w.name), w.address))


def _abandonment(stream: EventStream, run_id: str) -> Callable[[], BaseException | None]:
    """What says that run ``run_id`` was given up by the thread that waits for it: a :class:`Cancelled` once it is.

    A run waits for its graph in a helper thread (``Cancel.wait``); cancelled
    (a signal under ``stopping``, a ``KeyboardInterrupt`` in a notebook's
    cell), it writes its record and leaves that thread to itself. On the
    caller's own ``Client``, which lives on, the thread then waited for the
    rest of the run, which the workers went on computing, and the run's
    plugin with its executors and held activations stayed on every worker
    until the graph ended, for ever where a task never did. It is given up
    here when the run's own end (``cancelled``, ``failed``, ``finished``)
    comes down the event stream, which is after its record is written: the
    record says which partitions the cancellation abandoned, and giving the
    run up sooner would fail them first.
    """
    cancel = current_cancel()
    seen = [0]

    def stopped() -> BaseException | None:
        events = stream.events
        upto = len(events)
        for event in events[seen[0]:upto]:
            if event.get("kind") == "run" and event.get("id") == run_id and event.get("event") in _RUN_ENDS:
                return Cancelled(cancel.signal if cancel is not None else None, event.get("time"))
        seen[0] = upto
        return None

    return stopped


_RUN_ENDS = frozenset({"cancelled", "failed", "finished"})


class _HostLeft(Exception):
    """The worker that held a finished output left before the client had it."""


def _other_hetflow(worker: WorkerInfo, theirs: Any, mine: str) -> str:
    return (f"worker {worker.name} ({worker.address}) runs hetflow {theirs}, this process hetflow {mine}: install "
            "the same hetflow on every worker (a run's tasks are its code, and its record and cache keys name one "
            "version)")


def _gather_or_gone(future: Any, gone_now: Callable[[], list[str]]) -> Any:
    """The value of a finished ``future``, or :class:`_HostLeft` when a hosting worker is gone meanwhile.

    A result lost with its worker is recomputed by Dask, but a task bound to
    that worker's executor can run nowhere else (``allow_other_workers`` is
    off), so waiting for it without looking at the workers would wait for ever.
    """
    while True:
        try:
            return future.result(timeout=_GATHER_POLL_S)
        except TimeoutError:
            if gone_now():
                raise _HostLeft() from None


def _paused_words(address: str, worker: Mapping[str, Any]) -> str:
    """What the scheduler's identity of a worker says of it: ``worker NAME (ADDRESS) is paused: its process holds
    N MiB of its M MiB memory limit, ...``, or ``worker NAME (ADDRESS) is STATUS``."""
    status = worker.get("status") or "not running"
    memory, limit = (worker.get("metrics") or {}).get("memory"), worker.get("memory_limit")
    held = (f": its process holds {human_bytes(memory)} of its {human_bytes(limit)} memory limit, and Dask starts no "
            "task on it until that falls below its pause threshold"
            if status == "paused" and isinstance(memory, int) and isinstance(limit, int) and limit else "")
    return f"worker {worker.get('name')} ({address}) is {status}{held}"


def _file_address(path: str) -> tuple[str | None, str]:
    """The address a scheduler file names, or None and why it names none."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        return None, f"cannot read it: {e.strerror or e}"
    except ValueError:
        return None, "it is not JSON"
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address:
        return None, "it gives no address (a string such as tcp://HOST:PORT under \"address\")"
    return address, ""


#: the schemes a Dask scheduler of another process listens on
_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")


def _bad_address(address: str) -> str | None:
    """What is wrong with a scheduler's address as written (its scheme, host, port), or None.

    >>> _bad_address("tcp://127.0.0.1:99999")
    'port 99999 is not a port (1-65535)'
    >>> _bad_address("inproc://x")
    'inproc:// names a scheduler inside one process, which no other reaches; give tcp://HOST:PORT or a scheduler file'
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
    except (ValueError, TypeError) as e:
        return f"not an address: {e}"
    if scheme == "inproc":
        return "inproc:// names a scheduler inside one process, which no other reaches; give tcp://HOST:PORT or a scheduler file"
    if scheme not in _SCHEMES:
        return f"unknown scheme {scheme}:// (Dask's are {', '.join(s + '://' for s in _SCHEMES)})"
    if scheme == "ucx":
        return None
    try:
        host, port = parse_host_port(location)
    except (ValueError, TypeError):
        return f"no HOST:PORT after {scheme}:// (found {location!r})"
    if not host:
        return f"no host before the port (found {location!r})"
    if not isinstance(port, int) or not 0 < port < 65536:
        return f"port {port} is not a port (1-65535)"
    return None


def _probe(address: str, grace: float, wait: float) -> str | None:
    """What is wrong at ``address`` for a Dask client, seen with a plain socket; None where nothing is (or the
    client is left to say it).

    Dask's client retries a refused connection until its whole timeout; a
    refusal is the operating system's word that nothing listens there, so
    it needs no more than the ``grace`` a scheduler that is starting needs.
    A socket's refusal comes at once however loaded the machine is (Dask's
    own connect can spend its whole grace on one attempt that times out and
    says nothing). Where something listens, a Dask scheduler greets a new
    connection at once with its handshake, a frame whose first 8 bytes are
    its length; Dask's client waits for that greeting without a time limit,
    so a port that never sends it (an HTTP server, as the dashboard's 8787
    is) would hold the command for ever. Up to ``wait`` seconds are given
    for it. The probe then closes the connection, which a scheduler logs
    at INFO level. Left to the client: a time-out to connect, an address
    it cannot parse, a scheme other than ``tcp`` (``tls`` greets only after
    its own handshake).
    """
    import socket
    import struct

    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme != "tcp":
            return None
        host, port = parse_host_port(location)
    except (ValueError, TypeError):
        return None
    deadline = time.monotonic() + grace
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
            break
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                return f"connection refused for {grace:g} s; is the scheduler running?"
            time.sleep(0.1)
        except OSError:
            return None
    head = b""
    with sock:
        sock.settimeout(wait)
        try:
            while len(head) < 8:
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    raise ConnectionResetError
                head += chunk
        except socket.timeout:
            return (f"it accepted the connection but sent no Dask handshake in {wait:g} s: is that a scheduler's "
                    f"port, and is its process running, not stopped or hung? ({_PORTS})")
        except (ConnectionResetError, ConnectionAbortedError):
            return f"it accepted the connection and closed it without a Dask handshake: is that a scheduler's port? ({_PORTS})"
        except OSError:
            return None
    (length,) = struct.unpack("Q", head)  # the frame's length, in Dask's byte order (tcp.py packs it with "Q")
    if length > _HANDSHAKE_MAX:
        return f"what listens there is not a Dask scheduler: its first bytes are {head!r}"
    return None


_PORTS = "a scheduler listens on 8786 unless told otherwise; 8787 serves its dashboard"
# a scheduler's handshake is a small msgpack map; anything this long is another protocol's text read as a length
_HANDSHAKE_MAX = 1 << 20


def _as_failure(failure: BaseException | None) -> BaseException | None:
    """Dask's own errors about a lost task become a ClusterFailure; stage failures pass through.

    >>> lost = _as_failure(RuntimeError("worker tcp://127.0.0.1:1234 does not host run r1"))
    >>> type(lost).__name__, str(lost)
    ('ClusterFailure', 'worker tcp://127.0.0.1:1234 does not host run r1')
    >>> _as_failure(None) is None
    True
    """
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


#: what one local worker holds once started, before any work: an interpreter with numpy, Dask and hetflow
_WORKER_START_B = 100 * 2**20


def _available_memory() -> int | None:
    """Bytes of memory this machine can give now (Linux's MemAvailable), or None where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _refuse_beyond_memory(workers: int) -> None:
    """Refuse a local cluster whose workers alone would take more memory than the machine has: ``--workers
    1000`` typed for ``--workers 10`` would otherwise start processes until the machine swaps or kills.

    Raises
    ------
    EnvironmentUnavailable
        ``workers`` times a started worker's memory is more than the machine has available.
    """
    available = _available_memory()
    if available is None or workers * _WORKER_START_B <= available:
        return
    raise EnvironmentUnavailable(
        f"a local cluster of {workers} workers needs about {workers * _WORKER_START_B / 2**30:.1f} GiB to start "
        f"({_WORKER_START_B // 2**20} MiB each before any work), more than the {available / 2**30:.1f} GiB this "
        f"machine has available; ask for at most {max(1, available // _WORKER_START_B)}, or join a cluster with "
        f"{argument('scheduler')}")


# The files a local cluster and the run on it keep open: measured here, --workers 1 ran with 36, 2 needed 41-48
# and 4 65-72 (sockets, the nannies' pipes and queues, the modules a run imports later); with margin
_FILES_BASE, _FILES_PER_WORKER = 48, 10


def _room_for_open_files(workers: int) -> None:
    """Raise this process's soft limit of open files to what a local cluster needs, or refuse the cluster.

    Short of files, Dask's start did not fail cleanly: past some limits
    the scheduler's ``accept`` met ``EMFILE`` in a loop and the command
    hung for ever, past others the run crashed on a module it could no
    longer open, or the error named another file (``File exists:
    '/tmp/dask-scratch-space'``). The soft limit is raised as far as the
    hard one allows (the workers inherit it); where the hard one is too
    low, the cluster is refused before it starts.

    Raises
    ------
    EnvironmentUnavailable
        the hard limit is below what ``workers`` need.
    """
    try:
        import resource
    except ImportError:
        return                                    # no such limit where there is no resource module (Windows)
    need = _FILES_BASE + _FILES_PER_WORKER * workers
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return
        except (ValueError, OSError):
            pass
    raise EnvironmentUnavailable(
        f"a local cluster of {workers} worker(s) needs about {need} open files, and this process may open only "
        f"{soft} (its hard limit: {hard}; `ulimit -n` in a shell): raise the limit, ask for fewer workers, or join "
        f"a cluster with {argument('scheduler')}")


def _refuse_in_a_starting_worker() -> None:
    """Refuse to start a local cluster in a worker process that is still importing the caller's script.

    Dask starts a worker as a fresh interpreter that first imports the
    parent's main module (multiprocessing's "spawn"), so a script whose top
    level calls ``hetflow.run(..., workers=N)`` without the
    ``if __name__ == "__main__":`` guard calls it again in every worker.
    There the nanny's own start failed deep in Dask, with a
    multiprocessing ``RuntimeError`` about a "bootstrapping phase" that
    names neither the script nor the fix, once per worker.
    """
    import multiprocessing

    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    main = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or "the main module"
    raise UsageError(f"a worker process of a local cluster is importing {script}, and its top level starts a "
                     "local cluster again (hetflow.run or hetflow.sweep with workers=N): each worker imports the "
                     "script that started the cluster, so put that call under `if __name__ == \"__main__\":`")


def _root_cause(error: BaseException) -> str:
    """The first error of ``error``'s chain (what it was raised from, or while handling), said as Python says it.

    >>> try:
    ...     try:
    ...         raise OSError(24, "Too many open files")
    ...     except OSError as e:
    ...         raise RuntimeError("Nanny failed to start.") from e
    ... except RuntimeError as e:
    ...     _root_cause(e)
    '[Errno 24] Too many open files'
    """
    seen, root = set(), error
    while id(root) not in seen:
        seen.add(id(root))
        nxt = root.__cause__ or root.__context__
        if nxt is None:
            break
        root = nxt
    return str(root) or type(root).__name__
