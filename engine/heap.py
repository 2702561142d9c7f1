"""The cyclic garbage collector around the engine's passes: paused where a pass allocates millions of acyclic
objects, and the heap frozen while runs go on.

Both are the process's switches (``gc.disable``, ``gc.freeze``), so both
count their holders across threads: the points of a ``--parallel`` sweep
plan and run at once, and each must find the collector as the others
left it. Every room may use them.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from typing import Iterator

__all__ = ["gc_paused", "frozen_heap"]

_LOCK = threading.Lock()
_PAUSED = {"count": 0, "was_enabled": False}  # passes in gc_paused now, and whether the GC was on before the first
_HEAP_HOLDERS = 0
_HEAP_THRESHOLD = gc.get_threshold()
#: the tasks (stages and bridges) from which a run freezes the heap (:func:`frozen_heap`)
FREEZE_FROM = 1000
# frozen runs since the last full collection (their count and seconds), and what that collection took
_BIG_RUNS = {"count": 0, "seconds": 0.0, "full_s": 0.0, "started": 0.0}
_FULL_EVERY = 20
# objects a pass leaves in the young generation (its count) from which they are moved to the oldest at once
_MANY = 100_000


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic GC off for a pass that allocates millions of small acyclic objects (nodes, stages,
    plan entries): collections would walk them again and again and free nothing.

    On the way out of a pass that made many (:data:`_MANY`, by the
    collector's own count) the survivors move straight to the oldest
    generation (``gc.freeze`` then ``gc.unfreeze``: two list splices), so
    the first young collection after the pass does not walk all of them
    once more; they stay collectable like any long-lived object. A small
    pass's objects stay young: moved, the cycles among them would wait for
    a full collection, and ``gc.freeze`` sets the young count back to
    zero, so a process of small passes (a service checking one manifest
    after another) never collected at all and grew by 400 objects a call.
    A process that has frozen objects of its own (before forking workers,
    say) keeps them frozen: there the survivors are left where they are.

    The collector's switch is the process's, so passes that overlap in
    threads (the points of a ``--parallel`` sweep) share one pause: the
    first in turns it off, the last out turns it back on. A pass that ends
    while a run holds the heap frozen (:func:`frozen_heap`) leaves it so,
    without asking ``gc.get_freeze_count``, which walks every frozen
    object holding the GIL: with two points at once, each point's plan
    walked the whole heap of the other's run.
    """
    with _LOCK:
        if _PAUSED["count"] == 0:
            _PAUSED["was_enabled"] = gc.isenabled()
            gc.disable()
        _PAUSED["count"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _PAUSED["count"] -= 1
            if _PAUSED["count"] == 0 and _PAUSED["was_enabled"]:
                # a run's frozen heap (frozen_heap) stays frozen; asking how much is frozen walks all of it
                if _HEAP_HOLDERS == 0 and gc.get_count()[0] >= _MANY and gc.get_freeze_count() == 0:
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()


@contextlib.contextmanager
def frozen_heap(tasks: int) -> Iterator[None]:
    """Move what exists before a run of ``tasks`` tasks out of the cyclic GC's reach until the last concurrent
    run ends; a run of fewer than :data:`FREEZE_FROM` leaves the collector as it is.

    A run allocates a few objects per task; every so often that sets off a
    full collection, which walks the whole heap: the manifest, the plan,
    the graph, each the size of the pipeline. On a 10,000-stage pipeline
    that was over a third of the run (3.0 of 8.2 s, measured with
    ``gc.callbacks``). ``gc.freeze`` parks the objects alive at the start in
    the permanent generation, so collections see only what the run made;
    ``gc.unfreeze`` hands them back.

    Freezing empties the oldest generation, and CPython runs a full
    collection whenever that generation has grown by a quarter since the
    last one: from empty, every tenth young collection. The run's own data
    (the graph, its events, the record) then still cost 6 full
    collections, 1.0 of 7.5 s (young ones 0.4 s). Until the run ends the
    oldest generation is collected ten times less often (threshold 100
    instead of 10): none in that run; young cycles are still collected as
    they die, and older garbage before a later run freezes the heap again
    (:func:`_collect_before_freezing`).

    A small run makes too few objects for any of that to matter, and
    freezing would cost it its garbage: ``gc.freeze`` moves the cycles that
    died young before the run into the oldest generation, and sets the
    young count back to zero, so a process that ran the quickstart again
    and again (a notebook, a service) never collected at all and grew by
    19 KiB a run. Such a run neither freezes nor counts as a holder.
    """
    if tasks < FREEZE_FROM:
        yield
        return
    global _HEAP_HOLDERS, _HEAP_THRESHOLD
    with _LOCK:
        if _HEAP_HOLDERS == 0:
            _collect_before_freezing()
            gc.freeze()
            _BIG_RUNS["started"] = time.perf_counter()
            _HEAP_THRESHOLD = gc.get_threshold()
            young, middle, old = _HEAP_THRESHOLD
            gc.set_threshold(young, middle, max(old, 100))
        _HEAP_HOLDERS += 1
    try:
        yield
    finally:
        with _LOCK:
            _HEAP_HOLDERS -= 1
            if _HEAP_HOLDERS == 0:
                gc.set_threshold(*_HEAP_THRESHOLD)
                gc.unfreeze()
                _BIG_RUNS["seconds"] += time.perf_counter() - _BIG_RUNS["started"]
                _BIG_RUNS["count"] += 1


def _collect_before_freezing() -> None:
    """Collect what a freeze would otherwise park: the young generations always (a few thousand objects at
    most), and the whole heap once the frozen runs since the last time took :data:`_FULL_EVERY` times what it
    cost then.

    What was frozen comes back into the oldest generation, which only a full
    collection looks at, and CPython did not start one in a process that ran
    one large pipeline after another: its cycles that had died during a run
    stayed, 29 objects a run of 1,200 stages. The full collection comes at
    the start of a later run, never at the end of one, so a command that
    runs once (``hetflow run``) never pays it; its cost is a twentieth of
    the runs' time at most.
    """
    if _BIG_RUNS["count"] and _BIG_RUNS["seconds"] >= _FULL_EVERY * _BIG_RUNS["full_s"]:
        started = time.perf_counter()
        gc.collect()
        _BIG_RUNS.update(full_s=time.perf_counter() - started, seconds=0.0, count=0)
    else:
        gc.collect(1)
