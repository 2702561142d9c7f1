"""Reused staging buffers for the portable bytes of a bridge.

A bridge copies a tensor into host bytes on export and out of them on
import. Copying into freshly allocated memory runs at page-fault speed
(the kernel zeroes and maps every page on first touch, about a tenth of
memcpy bandwidth for a large buffer), so exports write into *stores*
kept in a :class:`StagingPool` and reused from one export to the next.

A store is lent out as a read-only ``memoryview`` over a fresh numpy view
of it (the *lease*). Whatever keeps those bytes alive, the portable
activation, an importer's ``np.frombuffer`` array, a slice of that, holds
the lease through the memoryview's exporter chain; when the last of them
is gone the lease object dies and a ``weakref.finalize`` puts the store
back. A store is therefore never handed out twice while anything can
still read it, and nobody has to remember to return it.

The allocator is a parameter: ``numpy.empty`` for the CPU executor,
page-locked (pinned) memory for a GPU executor, whose DMA engine reads
and writes pinned memory directly.

Examples
--------
>>> import numpy as np
>>> pool = StagingPool(np.empty)
>>> view = pool.lease(8)
>>> view.readonly, len(view), pool.lent
(True, 8, 1)
>>> del view; pool.lent, pool.idle
(0, 1)
>>> len(pool.lease(6)), pool.idle     # the idle store of 8 bytes is reused
(6, 0)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import numpy as np

__all__ = ["StagingPool", "Lease"]


class Lease:
    """A writable numpy view of a pooled store and the read-only bytes over it."""

    __slots__ = ("array", "view")

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.view = memoryview(array).toreadonly()


class StagingPool:
    """Stores of uint8 reused across exports; thread-safe.

    ``max_idle_bytes`` caps what the pool keeps while nothing is lent: a
    store returned beyond it is dropped to the allocator. A request takes
    the smallest idle store that holds it if that store is at most twice
    the request, so a small export never pins down a large store.
    """

    def __init__(self, alloc: Callable[..., Any], max_idle_bytes: int = 1 << 30) -> None:
        self._alloc = alloc
        self._max_idle = max_idle_bytes
        self._idle: list[np.ndarray] = []
        self._lent = 0
        self._lock = threading.Lock()

    @property
    def lent(self) -> int:
        with self._lock:
            return self._lent

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def _take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            fits = [i for i, s in enumerate(self._idle) if nbytes <= s.size <= max(2 * nbytes, 4096)]
            # by index: list.remove would compare the arrays elementwise
            store = self._idle.pop(min(fits, key=lambda i: self._idle[i].size)) if fits else None
            self._lent += 1
        if store is None:
            try:
                store = np.asarray(self._alloc(max(nbytes, 1), dtype=np.uint8)).reshape(-1)
            except BaseException:
                with self._lock:
                    self._lent -= 1
                raise
        return store

    def _give_back(self, store: np.ndarray) -> None:
        with self._lock:
            self._lent -= 1
            if sum(s.size for s in self._idle) + store.size <= self._max_idle:
                self._idle.append(store)

    def lease_array(self, nbytes: int) -> Lease:
        """A :class:`Lease` of ``nbytes``; the store returns when the lease and all views of it are gone."""
        store = self._take(nbytes)
        array = store[:nbytes]
        weakref.finalize(array, self._give_back, store)
        return Lease(array)

    def lease(self, nbytes: int) -> memoryview:
        """Read-only bytes of a store, for callers that fill it through :meth:`lease_array` instead."""
        return self.lease_array(nbytes).view

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()
