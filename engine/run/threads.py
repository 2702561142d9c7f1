"""The BLAS and OpenMP thread pools of concurrent work: their threads never exceed the cores.

The rule: *partitions at once x threads of each pool <= cores*. A BLAS
library starts one thread a core for each call; two points of a sweep
each calling it on two cores run four threads that fight for two, and
``--parallel 2`` ends slower than ``--parallel 1`` (issue 30). So every
piece of concurrent work in this process *claims* how many BLAS callers it
adds: a sweep its ``parallel`` points (:mod:`hetflow.engine.batch.sweeps`), a
run the partitions it may run at once (:func:`width`; a run inside a sweep
point adds what it runs beyond the one its point already counts). While
claims are held, each pool is limited to ``max(1, cores // total)``; when
the last is given back, every pool gets its own limit back.

Two kinds of pool, two ways to set them:

* *Process-wide* (OpenBLAS on pthreads, MKL, BLIS): set once, under a
  lock, whenever the total changes. OpenBLAS is set through its own
  ``openblas_set_num_threads``, not threadpoolctl's ``set_num_threads``:
  threadpoolctl 3.8 lets only the first thread that limited OpenBLAS limit
  it again and silently ignores every other thread, so a limit set from a
  sweep point's thread after an in-process run (whose thread had become
  the "controlling" one) never reached the ops (the bug of the first
  attempt; ``tests/test_thread_pools.py`` runs that sequence).
* *Per-thread* (OpenMP's ``omp_set_num_threads``, and OpenBLAS built on
  OpenMP, which follows it): a limit holds only in the thread that set it,
  so :func:`here` sets it in the thread that calls the op, the runtime's
  partition task, when the total has changed since that thread last set it.

On a local cluster each worker process holds a standing claim of every
worker's threads (:func:`on_cluster`, :meth:`Pools.hold`); an existing
cluster's workers are only read.

A user's ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` or
``MKL_NUM_THREADS`` wins: with any of them set hetflow changes no pool,
and a run's record says the limits are the user's.

Examples
--------
>>> pools = Pools(cores=2, environ={})
>>> with pools.claim(2):
...     pools.limit()
1
>>> pools.limit(), pools.describe(width=1)["set_by"]
(2, 'hetflow')
>>> Pools(cores=2, environ={"OMP_NUM_THREADS": "2"}).describe(width=1)["set_by"]
'user'
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

__all__ = ["USER_THREAD_VARS", "Pools", "POOLS", "usable_cores", "user_limits", "width", "claim_run", "in_point",
           "point", "here", "on_cluster"]

#: the variables by which a user sets the pools themselves; hetflow then leaves every pool alone
USER_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

_AT_IMPORT = frozenset(k for k in USER_THREAD_VARS if os.environ.get(k, "").strip())

# the symbol affixes OpenBLAS builds use (numpy's and scipy's wheels add "scipy_" and "64_")
_OPENBLAS_AFFIXES = [(p, s) for p in ("", "scipy_") for s in ("", "64_", "_64")]


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which a container or ``taskset`` narrows."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def user_limits(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The thread variables the user set (non-empty), as given.

    Read from this process's environment, a variable that Dask's nanny
    wrote there (it sets ``distributed.nanny.pre-spawn-environ`` in its
    parent's environment too, before it spawns a local worker) is not the
    user's unless it was there when hetflow was imported.

    >>> user_limits({"OMP_NUM_THREADS": "3", "PATH": "/bin", "MKL_NUM_THREADS": ""})
    {'OMP_NUM_THREADS': '3'}
    """
    if environ is not None:
        return {k: environ[k] for k in USER_THREAD_VARS if environ.get(k, "").strip()}
    found = user_limits(os.environ)
    if not found:  # the common case, asked several times a run: Dask's configuration has nothing to take away
        return found
    dask_config = getattr(sys.modules.get("dask"), "config", None)
    spawned = dask_config.get("distributed.nanny.pre-spawn-environ", default={}) if dask_config else {}
    return {k: v for k, v in found.items()
            if k in _AT_IMPORT or not isinstance(spawned, dict) or v != str(spawned.get(k))}


def width(plan: Any, threads: int) -> int:
    """How many partitions of ``plan`` may run at once on ``threads`` scheduler threads.

    The widest level of the partition graph (a partition's level is one
    more than its producers' highest), at most ``threads``: a chain is 1,
    a fan-out of four partitions fed by one is 4. Found once per plan.
    """
    key = id(plan)
    widest = _WIDEST.get(key)
    if widest is None:
        import weakref

        widest = _WIDEST[key] = _widest_level(plan)
        weakref.finalize(plan, _WIDEST.pop, key, None)
    return max(1, min(threads, widest))


# id(plan) -> its widest level, while the plan lives
_WIDEST: dict[int, int] = {}


def _widest_level(plan: Any) -> int:
    home = {name: node.partition for name, node in plan.nodes.items()}
    level: dict[str, int] = {}
    counts: dict[int, int] = {}
    pending = list(plan.partitions)
    # partitions come in topological order from the planner; a later producer is met again until placed
    while pending:
        later = []
        for part in pending:
            producers = {home.get(t) for t in part.inputs} - {part.id, None}
            if any(p not in level for p in producers):
                later.append(part)
                continue
            level[part.id] = lv = 1 + max((level[p] for p in producers), default=0)
            counts[lv] = counts.get(lv, 0) + 1
        if len(later) == len(pending):  # no progress: not a DAG of partitions; count what is left as one level
            counts[0] = len(later)
            break
        pending = later
    return max(counts.values(), default=1)


class Pools:
    """The claims on this process's pools and the limits that follow from them (one per process: :data:`POOLS`)."""

    def __init__(self, cores: int | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.cores = cores or usable_cores()
        self._environ = environ
        self._lock = threading.Lock()
        self._total = 0
        self._standing = 0  # of the total, the part hold() keeps
        self._user_n: dict[str, int | None] = {}  # the user's limits hold() was given, per API
        self._applied: int | None = None  # the limit set on the process-wide pools, None: their own
        self._original: dict[str, int | None] = {}  # each library's own limit (filepath -> threads)
        self._libs: list[Any] = []
        self.generation = 0  # bumped whenever the limit changes: per-thread pools follow it in here()
        self._local = threading.local()
        # the limits pinned() holds, in the order they began: the latest still held is in force. A list, not one
        # value put back on the way out: the resumed points of a --parallel sweep pin from threads of their own and
        # end in any order, and the first to end put back a limit the other had already replaced
        self._pins: list[list[int]] = []

    @property
    def _pinned(self) -> int | None:
        """The limit pinned() holds now, whatever the claims; None where none is held."""
        return self._pins[-1][0] if self._pins else None

    def user(self) -> dict[str, str]:
        return user_limits(self._environ)

    def limit(self) -> int:
        """The threads each pool may use now."""
        if self._pinned is not None:
            return self._pinned
        return max(1, self.cores // max(1, self._total))

    @contextmanager
    def pinned(self, threads: int | None) -> Iterator[None]:
        """Hold every pool at ``threads`` while the block runs (None: as the claims have it).

        A run's float sums follow the order its BLAS threads split them in,
        so ``verify`` reruns a point of a ``--parallel`` sweep, one BLAS
        thread of two cores, at the threads its record gives, not at the
        two a run alone would get; a resumed run goes on at the threads its
        earlier attempt had, and takes the entries that attempt stored.
        """
        if threads is None:
            yield
            return
        pin = [max(1, int(threads))]  # its own object: removed by identity, wherever it stands among the others
        with self._lock:
            self._pins.append(pin)
            self._set()
        self._here()
        try:
            yield
        finally:
            with self._lock:
                self._pins[:] = [p for p in self._pins if p is not pin]
                self._set()

    @contextmanager
    def claim(self, callers: int) -> Iterator[int]:
        """Hold ``callers`` more concurrent BLAS callers while the block runs; yields the limit in force."""
        callers = max(0, int(callers))
        if callers == 0:
            yield self.limit()
            return
        with self._lock:
            self._total += callers
            self._set()
            limit = self.limit()
        self._here()
        try:
            yield limit
        finally:
            with self._lock:
                self._total -= callers
                self._set()

    def hold(self, callers: int, user: Mapping[str, str] | None = None) -> None:
        """A standing claim of ``callers``, replacing the last one (a worker process's threads, for its life).

        ``user`` are the thread variables of the user who started the
        cluster: Dask's nanny sets each worker's to 1 before it starts
        (``distributed.nanny.pre-spawn-environ``), so they reach the worker
        here, and its pools take their values instead of hetflow's.
        """
        with self._lock:
            # this process's variables were written by the nanny: the client's user is the user
            self._environ = {**{k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}, **(user or {})}
            self._total += max(0, callers) - self._standing
            self._standing = max(0, callers)
            if user:
                self._set_user(dict(user))
            else:
                self._set()
        self._here()

    def describe(self, width: int = 1) -> dict:
        """What a run's record says of the pools: ``blas`` and ``openmp`` threads, the cores, who set them.

        ``blas`` and ``openmp`` are what the libraries say (``None`` where
        none is loaded; numpy loads its BLAS at import); ``concurrent`` is
        the BLAS callers this process holds now, this run's included.
        """
        user = self.user()
        with self._lock:
            # a run alone reads the libraries found once; a claim that sets a limit finds them anew
            libs = self._libs or self._controllers()
            concurrent = self._total
        apis: dict[str, int | None] = {"blas": None, "openmp": None}
        for lib in libs:
            try:
                n = _read_limit(lib)
            except Exception:  # noqa: BLE001 - a library that cannot say is left out, not a failed run
                continue
            if n is not None:
                apis[lib.user_api] = n if apis[lib.user_api] is None else min(apis[lib.user_api], n)
        return {**apis, "cores": self.cores, "partitions_at_once": width, "concurrent": concurrent,
                "set_by": "user" if user else "hetflow", **({"user": user} if user else {})}

    def here(self) -> None:
        """Set the per-thread pools (OpenMP) of the calling thread, if the limit changed since it last did."""
        if getattr(self._local, "generation", -1) != self.generation:
            self._here()

    # -- internals ---------------------------------------------------------------------------------------------

    def _controllers(self) -> list[Any]:
        """The pools' libraries loaded now (threadpoolctl finds them; imported only when a limit is needed)."""
        from threadpoolctl import ThreadpoolController

        self._libs = list(ThreadpoolController().lib_controllers)
        return self._libs

    def _set(self) -> None:
        """Under the lock: bring the process-wide pools to the limit the claims ask for, or back to their own."""
        if self.user():
            return
        want = self._wanted()
        if want == self._applied:
            return
        libs = self._controllers()
        if self._applied is None:  # the pools are at their own limits now: read them (a user may have changed them)
            self._original = {lib.filepath: lib.get_num_threads() for lib in libs}
            if want is not None and not _PRIMED:
                _prime_openblas(libs, self.cores)
        for lib in libs:
            own = self._original.setdefault(lib.filepath, lib.get_num_threads())  # a library loaded since
            n = want if want is not None else own
            if n is not None and not _per_thread(lib):
                _set_shared(lib, n)
        self._applied = want
        self.generation += 1

    def _set_user(self, user: dict[str, str]) -> None:
        """Under the lock: set the pools to a user's variables, as the libraries read them when they load."""
        def number(*names: str) -> int | None:
            for name in names:
                try:
                    return max(1, int(user[name]))
                except (KeyError, ValueError):
                    continue
            return None

        blas, openmp = number("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"), number("OMP_NUM_THREADS")
        self._user_n = {"openmp": openmp, "blas": blas}
        for lib in self._controllers():
            n = self._user_n[lib.user_api]
            if n is not None:
                _set_shared(lib, n)  # a per-thread one in this thread; here() sets it in the others
        self._applied = None
        self.generation += 1

    def _here(self) -> None:
        self._local.generation = self.generation
        if self.user():
            for lib in list(self._libs) if self._user_n else ():
                n = self._user_n.get(lib.user_api)
                if n is not None and _per_thread(lib):
                    lib.set_num_threads(n)
            return
        want = self._wanted()
        for lib in list(self._libs):
            if _per_thread(lib):
                n = want if want is not None else self._original.get(lib.filepath)
                if n is not None:
                    lib.set_num_threads(n)

    def _wanted(self) -> int | None:
        """The limit to set, or None to leave each pool at its own: no claims, or no contention (a lone run).

        A worker's standing claim always sets it: its pools' own limit is the 1 Dask's nanny gave them.
        """
        if self._pinned is not None:
            return self._pinned
        limit = self.limit()
        return limit if self._total and (limit < self.cores or self._standing) else None


def _per_thread(lib: Any) -> bool:
    """Whether ``lib``'s limit holds per calling thread: OpenMP's ICV, and OpenBLAS built on OpenMP."""
    return lib.user_api == "openmp" or getattr(lib, "threading_layer", None) == "openmp"


# the getters' names by library, as threadpoolctl calls them (OpenBLAS's with its build's affixes)
_GETTERS = {"openmp": "omp_get_max_threads", "mkl": "MKL_Get_Max_Threads", "blis": "bli_thread_get_num_threads",
            "flexiblas": "flexiblas_get_num_threads"}
_READERS: dict[tuple[str, str], Any] = {}


def _read_limit(lib: Any) -> int | None:
    """``lib.get_num_threads()``, called without giving up the GIL.

    A ``ctypes`` call releases the GIL and waits to take it back; while
    another thread runs Python (a run's record writer) that wait is up to
    the interpreter's switch interval, 0.5 ms of a 6 ms run here for a
    getter that takes 0.1 us. ``ctypes.PyDLL`` calls the same symbol of the
    library already loaded (``RTLD_NOLOAD``) and keeps the GIL.
    """
    key = (lib.filepath, lib.internal_api)
    reader = _READERS.get(key)
    if reader is None:
        import ctypes

        name = _GETTERS.get(lib.internal_api)
        if lib.internal_api == "openblas":
            affixes = lib._find_affixes() if hasattr(lib, "_find_affixes") else None
            name = ("omp_get_max_threads" if getattr(lib, "threading_layer", None) == "openmp" else
                    f"{affixes[0]}openblas_get_num_threads{affixes[1]}" if affixes else None)
        try:
            fn = getattr(ctypes.PyDLL(lib.filepath, mode=getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0)), name) if name else None
        except (OSError, AttributeError):
            fn = None
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
        reader = _READERS[key] = fn or lib.get_num_threads
    return reader()


_PRIMED: list[bool] = []


def _prime_openblas(libs: list[Any], cores: int) -> None:
    """Multiply once in float32 and once in float64 with OpenBLAS's pool at ``cores`` threads, then give the pool
    back its limit: done once per process, before hetflow first limits the pool.

    OpenBLAS (0.3.31, numpy 2.4's, on an AMD EPYC with its ``Haswell``
    kernels) multiplies mid-sized matrices (128 to 320 a side) three to
    four times slower on one thread while that precision's GEMM has never
    run on several: 11-18 GFLOPS against 40. A sweep of two points at once
    limits the pool to one thread before its first matmul, and a worker of
    a local cluster starts with one (Dask's nanny sets
    ``OPENBLAS_NUM_THREADS=1``), so both ran on the slow path:
    ``--parallel 2`` took 12.4 s where ``--parallel 1`` took 8.1 s
    (``bench_sweep_threads``). One multiply of 256 x 256 per precision on
    several threads, about a millisecond, keeps them on the fast path
    (6.6 s); one of 128 a side is not enough.
    """
    _PRIMED.append(True)
    blas = [lib for lib in libs if lib.internal_api == "openblas" and not _per_thread(lib)]
    if cores < 2 or not blas:
        return
    import numpy as np

    before = [(lib, lib.get_num_threads()) for lib in blas]
    try:
        for lib, _ in before:
            _set_shared(lib, cores)
        for dtype in (np.float32, np.float64):
            a = np.ones((256, 256), dtype)
            a @ a
    finally:
        for lib, n in before:
            if n is not None:
                _set_shared(lib, n)


def _set_shared(lib: Any, n: int) -> None:
    """Set a process-wide pool; OpenBLAS through its own symbol (see the module's docstring for why)."""
    if lib.internal_api == "openblas":
        for prefix, suffix in _OPENBLAS_AFFIXES:
            fn = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if fn is not None:
                fn(n)
                return
    lib.set_num_threads(n)


#: this process's pools
POOLS = Pools()

_point = threading.local()


@contextmanager
def point() -> Iterator[None]:
    """Mark the calling thread as running one point of a sweep, whose claim already counts one caller for it."""
    _point.inside = True
    try:
        yield
    finally:
        _point.inside = False


def in_point() -> bool:
    return getattr(_point, "inside", False)


@contextmanager
def claim_run(at_once: int) -> Iterator[int]:
    """A run's claim: its partitions at once, less the one its sweep point counts already."""
    with POOLS.claim(at_once - 1 if in_point() else at_once) as limit:
        yield limit


def recorded_blas(record: Mapping[str, Any]) -> int | None:
    """The BLAS threads a run's record says its ops had (on a cluster, its workers' fewest: Dask's nanny starts
    them at one), or None where it says none."""
    pools = record.get("threads")
    if not isinstance(pools, dict):
        return None
    n = pools.get("blas")
    return n if type(n) is int and n >= 1 else None


def here() -> None:
    """:meth:`Pools.here` of this process's pools (the runtime calls it in the thread that runs a partition)."""
    POOLS.here()


def _settle_worker(callers: int, user: dict[str, str]) -> dict:
    """In a worker process: hold its share of the host's cores, then say what its pools are."""
    POOLS.hold(callers, user)
    return POOLS.describe(callers)


def _describe_worker() -> dict:
    return POOLS.describe(1)


def on_cluster(cluster: Any) -> dict | None:
    """The pools of a cluster's workers, set first on a local cluster hetflow started; what a record keeps.

    On a local cluster every worker shares this host's cores: each takes
    ``cores // (threads of all workers)`` BLAS threads (Dask's nanny would
    leave every worker at 1 whatever its threads; with the default
    threads, cores / workers each, the two agree), or the user's variables
    where they set them. An existing cluster's workers are its operator's:
    they are only read. None when the workers cannot say (a worker lost
    mid-call): the run goes on without it.
    """
    workers = cluster.describe().get("workers") or []
    local = cluster.kind == "local-cluster"
    at_once = sum(int(w.get("nthreads") or 1) for w in workers) or 1
    # the same workers asked the same: each point of a sweep would pay a round trip to every worker for it
    asked = (tuple(sorted(w["address"] for w in workers)), at_once, tuple(sorted(user_limits().items())))
    memo = getattr(cluster, "memo", None)
    found = memo.get(("threads", asked)) if memo is not None else None
    if found is None:
        try:
            if local:
                found = cluster.patient(lambda: cluster.client.run(_settle_worker, at_once, user_limits()))
            else:
                found = cluster.patient(lambda: cluster.client.run(_describe_worker))
        except Exception:  # noqa: BLE001 - the record says nothing rather than fail the run
            return None
        if memo is not None:
            memo[("threads", asked)] = found
    names = {w["address"]: w.get("name") or w["address"] for w in workers}
    per = {str(names.get(addr, addr)): {k: d.get(k) for k in ("blas", "openmp", "cores", "set_by")}
           for addr, d in sorted(found.items())}
    blas = [d["blas"] for d in per.values() if d["blas"] is not None]
    openmp = [d["openmp"] for d in per.values() if d["openmp"] is not None]
    return {"blas": min(blas, default=None), "openmp": min(openmp, default=None),
            "cores": min((d["cores"] for d in per.values()), default=None), "partitions_at_once": at_once,
            "concurrent": at_once, "set_by": ("user" if user_limits() else "hetflow") if local else "cluster",
            **({"user": user_limits()} if local and user_limits() else {}), "workers": per}
