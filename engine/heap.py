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
from typing import Iterator

__all__ = ["gc_paused", "frozen_heap"]

_LOCK = threading.Lock()
_PAUSED = {"count": 0, "was_enabled": False}  # passes in gc_paused now, and whether the GC was on before the first
_HEAP_HOLDERS = 0
_HEAP_THRESHOLD = gc.get_threshold()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic GC off for a pass that allocates millions of small acyclic objects (nodes, stages,
    plan entries): collections would walk them again and again and free nothing.

    On the way out the survivors move straight to the oldest generation
    (``gc.freeze`` then ``gc.unfreeze``: two list splices), so the first
    young collection after the pass does not walk all of them once more;
    they stay collectable like any long-lived object. A process that has
    frozen objects of its own (before forking workers, say) keeps them
    frozen: there the survivors are left where they are.

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
                if _HEAP_HOLDERS == 0 and gc.get_freeze_count() == 0:
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Move what exists before a run out of the cyclic GC's reach until the last concurrent run ends.

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
    they die, and older garbage by the first full collection after the last
    run ends.
    """
    global _HEAP_HOLDERS, _HEAP_THRESHOLD
    with _LOCK:
        if _HEAP_HOLDERS == 0:
            gc.freeze()
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
