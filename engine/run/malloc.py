"""glibc's malloc thresholds in the Dask worker processes hetflow runs partitions in.

Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``), so that freed memory goes back
to the system. Setting any of glibc's thresholds also turns off its
*dynamic* mmap threshold: in a plain process, the first large block freed
raises the threshold (up to 32 MiB), and arrays of that size are reused
from the heap from then on. In a nanny's worker the threshold stays at
128 KiB, so every array of 128 KiB or more is a fresh ``mmap``, zeroed
page by page on first touch, and unmapped when freed. A partition of 192
256x256 fp32 matmuls and GELUs (256 KiB each) took 0.16 s on such a
worker against 0.085 s on one with the thresholds below (the sweep of
27 such points 7.4 s against 5.6 s, its system time 2.2 s against 0.5 s).

So the local clusters hetflow starts give their workers the thresholds a
plain process ends up with: mmap above 32 MiB (glibc's own ceiling on
64-bit), the heap trimmed above twice that (the ratio glibc's dynamic rule
keeps). Freed memory still goes back to the system, above 64 MiB of free
heap rather than above 64 KiB. A user's own ``MALLOC_*`` variables win.

A worker of a cluster started by hand (``dask worker``) was spawned by
its nanny with Dask's setting already in force: :func:`tune_this_process`,
run by hetflow's worker plugin, sets the same two thresholds with
``mallopt`` there, but only where the worker's environment shows Dask's
default and no choice of the operator's.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "spawn_environ", "tune_this_process", "users_variables"]

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_DASK_TRIM = "65536"  # distributed's default pre-spawn value
_OURS = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def users_variables(configured: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's ``MALLOC_*`` thresholds that its user set: a nanny writes its pre-spawn environment into
    its parent's too, so a value equal to Dask's ``configured`` one or to hetflow's is a nanny's, not the user's.

    >>> users_variables({"MALLOC_TRIM_THRESHOLD_": 65536}, {"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_TOP_PAD_": "0"})
    {'MALLOC_TOP_PAD_': '0'}
    """
    environ = os.environ if environ is None else environ
    configured = configured or {}
    return {k: environ[k] for k in _VARS if environ.get(k, "").strip()
            and environ[k] not in (str(configured.get(k)), _OURS.get(k))}


def spawn_environ(configured: Mapping[str, Any] | None, user: Mapping[str, str] | None = None) -> dict[str, str]:
    """The pre-spawn environment of a local cluster's nanny: Dask's ``configured`` one with hetflow's thresholds,
    unless the ``user`` (:func:`users_variables` by default) set any, whose values then go as given.

    >>> spawn_environ({"MALLOC_TRIM_THRESHOLD_": 65536}, user={}) == {
    ...     "MALLOC_TRIM_THRESHOLD_": str(64 << 20), "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}
    True
    >>> spawn_environ({"MALLOC_TRIM_THRESHOLD_": 65536}, user={"MALLOC_TRIM_THRESHOLD_": "0"})
    {'MALLOC_TRIM_THRESHOLD_': '0'}
    """
    user = users_variables(configured) if user is None else user
    environ = {k: str(v) for k, v in (configured or {}).items()}
    if user:
        # a user who tuned malloc keeps exactly their tuning: glibc reads these together
        return {**environ, **user}
    return {**environ, **_OURS}


def tune_this_process(environ: Mapping[str, str] | None = None) -> dict[str, int] | None:
    """In a worker whose nanny set Dask's default trim threshold and nothing else of malloc's, set hetflow's two
    thresholds with ``mallopt``; returns what was set (None: left as it was, or not glibc)."""
    environ = os.environ if environ is None else environ
    given = {k: environ[k] for k in _VARS if environ.get(k, "").strip()}
    if given != {"MALLOC_TRIM_THRESHOLD_": _DASK_TRIM}:
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # no C library to load by name, or one without mallopt
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    if not (mallopt(m_mmap_threshold, MMAP_THRESHOLD) and mallopt(m_trim_threshold, TRIM_THRESHOLD)):
        return None
    return {"mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}
