"""Time as records say it: ISO 8601 UTC instants, and a start with the instants measured from it.

Kept apart from :mod:`hetflow.engine.store.records` so that the commands
that only read records (``hetflow runs``) load no numpy.
"""

from __future__ import annotations

import time
from functools import lru_cache

__all__ = ["utc_iso", "Stopwatch"]


def utc_iso(t: float) -> str:
    """``t`` (epoch seconds) as ISO 8601 UTC with milliseconds.

    >>> utc_iso(1764720000.25)
    '2025-12-03T00:00:00.250Z'
    """
    second = int(t // 1)
    return "%s.%03dZ" % (_utc_second(second), (t - second) * 1000)


class Stopwatch:
    """A start on the wall clock, and later instants measured from it on the monotonic clock.

    A record's ``started_at`` is the wall clock's, but its ``ended_at``
    and ``duration_s`` are the start plus the time that truly passed: a
    clock stepped while the run ran (NTP's first sync after boot, a VM
    resumed) moves neither, so no duration reads negative or hours long.

    >>> watch = Stopwatch()
    >>> watch.now() >= watch.started and watch.now() - watch.started < 60
    True
    """

    __slots__ = ("started", "_mono")

    def __init__(self) -> None:
        self.started = time.time()
        self._mono = time.monotonic()

    def now(self) -> float:
        """Epoch seconds: the start plus the monotonic time since."""
        return self.started + (time.monotonic() - self._mono)


@lru_cache(maxsize=256)
def _utc_second(second: int) -> str:
    # a record stamps every task's start and end; most of them fall in a few seconds
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
