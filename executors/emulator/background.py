"""The MO and RH runners' threads: started beside a main execution, stopped when no one will join them.

A runner is a daemon thread, so that a caller that never joins it (a
script that reads only the main execution's output, a pipeline whose
guest exited with a code it does not accept) is not kept waiting for a
whole second run of the program.  A daemon thread must not still be in
LLVM when the process ends, though: the native backend's runners
translate the program for their own modes, and the process's exit
destroys LLVM's global context under the code generator, which then
crashes (a segmentation fault or an LLVM assertion instead of the exit
status the program chose); a linker run cut off left its temporary file
in the cache.

So each runner has a stop flag, looked at between its slices of steps
and between the parts it compiles (:func:`check`): :meth:`RunnerFuture.stop`
sets it (``BackendArtifacts.stop``, and :func:`.execute` when the main
execution fails), and at the process's exit every runner still going is
stopped and joined before the interpreter shuts down (the longest wait
is one part's compile).  A stopped runner's handle raises
:class:`RunnerStopped` (``RunnerFailed`` when awaited).  Nothing here
imports numpy or numba.
"""

from __future__ import annotations

import atexit
import threading
import time
from concurrent.futures import Future

from .machine import EmulatorError

__all__ = ["RunnerFuture", "RunnerStopped", "spawn", "check", "stop_all"]

#: the longest the process's exit waits for its runners to stop
EXIT_WAIT_S = 120.0

_local = threading.local()
_live: dict[threading.Thread, threading.Event] = {}
_guard = threading.Lock()
_hooked = False


class RunnerStopped(EmulatorError):
    """A runner stopped before its end: its main execution failed, its result was dropped, or the process ends."""


class RunnerFuture(Future):
    """A runner's handle: a :class:`~concurrent.futures.Future` that can also stop the runner."""

    def __init__(self) -> None:
        super().__init__()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the runner to stop at its next slice or part; returns at once. Its result then raises
        :class:`RunnerStopped`, unless it had already ended."""
        self._stop.set()


def spawn(fn, *args, name: str | None = None) -> RunnerFuture:
    """Run ``fn(*args)`` in a daemon thread (``hetflow-NAME``); its result or exception lands in the returned
    handle."""
    global _hooked
    fut = RunnerFuture()
    stop = fut._stop

    def target() -> None:
        _local.stop = stop
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to whoever awaits the runner
            fut.set_exception(e)
        finally:
            with _guard:
                _live.pop(thread, None)

    thread = threading.Thread(target=target, name=f"hetflow-{name or getattr(fn, '__name__', 'runner')}", daemon=True)
    with _guard:
        if not _hooked:
            atexit.register(stop_all)
            _hooked = True
        _live[thread] = stop
    thread.start()
    return fut


def check() -> None:
    """Raise :class:`RunnerStopped` in a runner asked to stop; nothing in any other thread."""
    stop = getattr(_local, "stop", None)
    if stop is not None and stop.is_set():
        raise RunnerStopped("the runner was stopped before its end (its main execution failed, its result was "
                            "dropped, or the process is ending)")


def stop_all(wait: float = EXIT_WAIT_S) -> int:
    """Stop every runner still going and wait up to ``wait`` seconds for their threads to end; how many were
    still going. Registered to run at the process's exit, before the interpreter (and LLVM) shut down."""
    with _guard:
        live = list(_live.items())
    for _, stop in live:
        stop.set()
    deadline = time.monotonic() + wait
    for thread, _ in live:
        thread.join(max(0.0, deadline - time.monotonic()))
    return len(live)
