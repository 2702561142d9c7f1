"""Stopping a run on SIGINT, SIGTERM or SIGHUP.

A :class:`Cancel` is the stop flag of one command: a run, a sweep, a
verification. :func:`stopping` installs SIGINT, SIGTERM and SIGHUP
handlers for its duration (in the main thread; elsewhere it installs
nothing) that work in two steps:

1. the first signal only *requests* cancellation: it sets the flag and
   notes the signal and the time. The engine looks at the flag where it
   is safe to: a run waits for its task graph in a loop that checks it
   (:meth:`Cancel.wait`), a partition checks it before it starts, a sweep
   before each point. Running executor calls cannot be interrupted (a GPU
   kernel, a BLAS call), so they are abandoned as timed-out attempts are:
   they finish in the background and whatever they return is released.
   The run then writes its record with ``status: cancelled`` and the
   command exits with 128 + the signal's number (130 for SIGINT, 143 for
   SIGTERM, 129 for SIGHUP: a closed terminal or a dropped ssh session);
2. a second signal, any of the three, runs the *forced-exit hooks* and
   ends the process at once with ``os._exit`` (128 + the first signal's
   number). A run registers a hook that writes its record as cancelled,
   atomically, unless the final record is already written; a sweep one
   that writes ``sweep.json`` as cancelled with the run of every point
   that had started. Hooks run newest first, so the points' records are
   final before the sweep's summary names them.

The handler takes no lock and touches no engine state beyond the flag's
own attributes, so it cannot deadlock with the thread it interrupts. A
signal the process was started ignoring (SIGHUP under ``nohup``) gets no
handler: the command goes on to its end, as its caller asked.

Examples
--------
>>> cancel = Cancel()
>>> cancel.requested
False
>>> cancel.request("SIGTERM")
>>> cancel.requested, cancel.signal, cancel.exit_code
(True, 'SIGTERM', 143)
>>> cancel.wait(lambda: 42)
Traceback (most recent call last):
...
hetflow.engine.run.cancel.Cancelled: cancelled by SIGTERM
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

__all__ = ["Cancel", "Cancelled", "stopping", "ctrl_c_requests", "listened", "current", "exit_code_of", "SIGNALS",
           "abandon_cache_writes"]

_POLL_S = 0.05
# the signals that stop a command: an interrupt, a termination request, a hangup
SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
_current: list["Cancel"] = []
# the lists of the interrupts_held blocks open in the main thread under ctrl_c_requests, innermost last
_HELD: list[list[int]] = []


def exit_code_of(signal_name: str | None) -> int:
    """The shell's exit code of a process ended by ``signal_name``: 128 + its number (130 when unknown).

    >>> exit_code_of("SIGINT"), exit_code_of("SIGTERM")
    (130, 143)
    """
    try:
        return 128 + int(signal.Signals[signal_name])
    except (KeyError, TypeError):
        return 128 + int(signal.SIGINT)


class Cancelled(BaseException):
    """Raised where the engine stops for a requested cancellation.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that no
    ``except Exception`` on the way takes it for a stage's failure.
    """

    def __init__(self, signal_name: str | None, at: float | None) -> None:
        super().__init__(signal_name, at)
        self.signal = signal_name
        self.at = at

    def __str__(self) -> str:
        return f"cancelled by {self.signal or 'request'}"


class Cancel:
    """The stop flag of one command; see the module docstring."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.at: float | None = None
        self._requested = False
        self._hooks: dict[int, Callable[[], None]] = {}
        self._next_hook = 0
        # what the command stops: the first run or sweep that names itself (a sweep before its points' runs)
        self.subject: dict[str, str] | None = None

    @property
    def requested(self) -> bool:
        return self._requested

    @property
    def exit_code(self) -> int:
        return exit_code_of(self.signal)

    def request(self, signal_name: str = "cancel") -> None:
        """Ask everything that watches this flag to stop; the first request's signal and time are kept."""
        if not self._requested:
            self.signal, self.at = signal_name, time.time()
            self._requested = True

    def check(self) -> None:
        """Raise :class:`Cancelled` when cancellation has been requested."""
        if self._requested:
            raise Cancelled(self.signal, self.at)

    def wait(self, work: Callable[[], Any]) -> Any:
        """Run ``work()`` in a helper thread and return its result, or raise :class:`Cancelled` first.

        The helper is a daemon thread: a cancelled ``work`` is abandoned and
        ends on its own while the caller writes its record.
        """
        self.check()
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                box["result"] = work()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                box["error"] = e
            finally:
                done.set()

        # under ctrl_c_requests, a second Ctrl-C waits for this loop's end (a first one ends it within a poll): raised
        # inside Event.wait, it released the event's lock twice ('release unlocked lock', the run recorded failed)
        with _second_held():
            _HELPERS.start(target)
            while not done.wait(_POLL_S):
                self.check()
        if "error" in box:
            raise box["error"]
        return box["result"]

    def name_subject(self, kind: str, ident: str, record: str) -> None:
        """Say which run or sweep this flag stops (``kind``, its id, its record's path), unless one has."""
        if self.subject is None:
            self.subject = {"kind": kind, "id": ident, "record": record}

    def on_forced_exit(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` if a second signal ends the process; returns the function that unregisters it."""
        key = self._next_hook
        self._next_hook += 1
        self._hooks[key] = hook
        return lambda: self._hooks.pop(key, None)

    def _forced_exit(self, signum: int) -> None:
        code = self.exit_code if self.signal in _NAMES else 128 + signum
        for hook in reversed(list(self._hooks.values())):
            try:
                hook()
            except Exception:  # noqa: BLE001 - exiting at once matters more than one hook
                pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        abandon_cache_writes()
        os._exit(code)

    def _handle(self, signum: int, frame: Any) -> None:
        if self._requested:
            self._forced_exit(signum)
        self.request(signal.Signals(signum).name)


_NAMES = frozenset(s.name for s in SIGNALS)


def abandon_cache_writes() -> None:
    """Remove the cache entries this process's threads were storing, half written, as it ends at once; where the
    cache module is loaded, whole: a point's thread may be importing it as a second signal comes."""
    abandon = getattr(sys.modules.get("hetflow.engine.store.cache"), "abandon_writes", None)
    if abandon is not None:
        abandon()


def current() -> Cancel | None:
    """The flag of the innermost :func:`stopping` block, which runs started inside it watch by default."""
    return _current[-1] if _current else None


def listened() -> tuple[signal.Signals, ...]:
    """The stop signals this process takes: :data:`SIGNALS` but those it was started ignoring.

    ``nohup`` (or a shell's ``trap '' HUP``) starts a command with SIGHUP
    ignored, so that it outlives its terminal: a hangup is then not a
    request to stop, and no handler of ours replaces what its caller chose.
    """
    return tuple(s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN)


@contextlib.contextmanager
def stopping(cancel: Cancel | None = None) -> Iterator[Cancel]:
    """SIGINT, SIGTERM and SIGHUP request ``cancel`` (a new :class:`Cancel` by default) while the block runs;
    a signal the process was started ignoring (SIGHUP under ``nohup``) stays ignored (:func:`listened`).

    Signal handlers belong to the process, so the flag is the process's
    too: :func:`current` returns it, and every run started in the block
    (in any thread) watches it unless given its own. Outside the main
    thread Python cannot install handlers: the flag still works, and only
    :meth:`Cancel.request` sets it.
    """
    cancel = cancel or Cancel()
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, cancel._handle) for s in listened()} if main else {}
    _current.append(cancel)
    try:
        yield cancel
    finally:
        _current.remove(cancel)
        for s, handler in previous.items():
            if signal.getsignal(s) == cancel._handle:  # not one the block put in its place (its command's end)
                signal.signal(s, handler)


@contextlib.contextmanager
def ctrl_c_requests(cancel: Cancel) -> Iterator[Cancel]:
    """Python's own Ctrl-C turned into a request of ``cancel`` while the block runs: the Python API's run or sweep.

    Python's default SIGINT handler raises ``KeyboardInterrupt`` at
    whatever bytecode the main thread is at, inside ``threading``'s own
    locks too: one that came in ``Condition.wait`` released its lock
    twice (the run recorded ``failed``, ``RuntimeError: release unlocked
    lock``), one in a pool's ``submit`` or an event's wait left a lock
    taken for good, and every later run of the process hung. Here the
    first Ctrl-C only sets the flag, which the run looks at where it is
    safe to (as the CLI's :func:`stopping` does): the run or sweep stops,
    its records say ``cancelled``, and ``RunCancelled`` is raised. A
    second raises ``KeyboardInterrupt`` where the main thread is, as
    Python would, so that a call stuck outside the engine's checks still
    gives the caller back; inside a stretch that must not be cut
    (:func:`interrupts_held`: the wait for the run's work, which the first
    one ends within a poll, the writes of its records) it is raised at the
    stretch's end, and the run's own handler writes its record. The
    CLI's forced-exit hooks are not run: they are for a process about to
    end, and a signal's handler may have interrupted this thread inside a
    lock they would wait on. One that came too late to stop anything (the
    run had ended) is raised as ``KeyboardInterrupt`` once the block is
    done, so that a loop of runs stops. Only the main thread, and only
    under Python's own handler: under :func:`stopping`, or a handler the
    caller installed, the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield cancel
        return
    came: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        came.append(signum)
        if not cancel.requested:
            cancel.request("SIGINT")
        elif _HELD:
            # a stretch that must not be cut (a folder made and not yet its record's, the wait for the run's work,
            # the final record's write): raised at its end
            _HELD[-1].append(signum)
        else:
            raise KeyboardInterrupt

    handle.requests = True  # type: ignore[attr-defined]
    previous = signal.signal(signal.SIGINT, handle)
    try:
        yield cancel
    finally:
        if signal.getsignal(signal.SIGINT) is handle:
            signal.signal(signal.SIGINT, previous)
    if came:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _second_held() -> Iterator[list[int]]:
    """:func:`interrupts_held` where :func:`ctrl_c_requests` is in place, nothing elsewhere: under Python's own
    handler a Ctrl-C there is the one that stops the block."""
    if threading.current_thread() is threading.main_thread() and \
            getattr(signal.getsignal(signal.SIGINT), "requests", False):
        with interrupts_held() as came:
            yield came
    else:
        yield []


@contextlib.contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """A Ctrl-C (Python's own SIGINT handler, ``_thread.interrupt_main``) held back while the block runs; the
    list yielded says whether one came, for the caller to raise once the block is done.

    For the end of a sweep, whose summary must be written whole: a
    ``KeyboardInterrupt`` in the middle of that write left it ``running``
    for as long as its process lived. Only the main thread gets
    ``KeyboardInterrupt``, and only Python's default handler raises it, or
    :func:`ctrl_c_requests`'s on a second Ctrl-C (held here the same way):
    elsewhere, or under :func:`stopping`, the block runs as it is.
    """
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    handler = signal.getsignal(signal.SIGINT)
    if getattr(handler, "requests", False):
        # under ctrl_c_requests: a first Ctrl-C is a request and raises nothing; a second waits for the block's end
        _HELD.append(came)
        try:
            yield came
        finally:
            _HELD.pop()  # blocks of one thread end innermost first
        return
    if handler is not signal.default_int_handler:
        yield came
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, previous)


class _Helpers:
    """Daemon threads that run :meth:`Cancel.wait`'s work, kept idle between calls.

    Starting a thread waits until it runs; with another thread running
    Python (a record's writer) that wait was up to the interpreter's switch
    interval, 1-3 ms of every short run here. An idle helper takes the next
    work from its queue instead. A helper whose work was abandoned comes
    back when the work ends, or never: it is a daemon either way.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Any] = []

    def start(self, target: Callable[[], None]) -> None:
        import queue

        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="hetflow-wait", daemon=True).start()
        inbox.put(target)

    def _serve(self, inbox: Any) -> None:
        while True:
            target = inbox.get()
            target()
            with self._lock:
                if len(self._idle) >= _IDLE_HELPERS:
                    return
                self._idle.append(inbox)

    def after_fork(self) -> None:
        # a forked child has none of its parent's threads: their queues would never be served
        self._lock = threading.Lock()
        self._idle = []


_IDLE_HELPERS = 8
_HELPERS = _Helpers()
os.register_at_fork(after_in_child=_HELPERS.after_fork)
