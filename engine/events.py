"""One event stream per run, the same in every scheduler mode.

Dask's own progress tools each see only one kind of scheduler
(``dask.diagnostics`` the threaded one, ``distributed``'s progress bar
the cluster), so hetflow reports from its own task wrappers instead:
:class:`~hetflow.engine.runtime.LocalRuntime`'s methods emit one event when
a task starts and one when it finishes, fails or is retried, whether they
run in a thread of this process or inside a Dask worker.

An event is a plain, msgpack- and JSON-ready dict:

``event``
    ``started``, ``finished``, ``failed`` or ``retried`` for a task;
    ``run`` events (``kind: "run"``) open and close the stream; on a
    cluster, ``warm-up`` (one per worker), ``scattered`` (a phase's array
    placed on a worker: ``key``, ``bytes``, ``workers``, ``why``) and
    ``flush`` come between.
``kind``, ``id``
    the task: ``partition`` (``id`` the partition), ``export`` /
    ``import`` (``id`` the bridge), ``output`` (``id`` the output name),
    or ``run``.
``executor``, ``worker``, ``thread``
    where it ran: the executor instance, the worker's address (``None``
    in-process) and the thread.
``attempt``
    1 for the first attempt; a ``retried`` event closes attempt N and the
    next ``started`` opens N + 1.
``start``, ``end``, ``duration_s``, ``status``
    epoch seconds and the task's outcome (``succeeded`` or ``failed``)
    on ``finished`` / ``failed`` events; ``bytes`` on bridge and output
    tasks; ``error`` and ``timed_out`` on ``failed`` and ``retried``.

**Transport.** In-process, a wrapper calls :meth:`EventStream.emit`
directly. On a cluster, it calls ``Worker.log_event(topic, event)``,
distributed's structured-event mechanism: the worker sends it to the
scheduler on its batched stream, and the scheduler forwards it to the
client that subscribed with ``Client.subscribe_topic(topic, handler)``;
the handler is :meth:`EventStream.emit`. Each worker's batched stream is
first in, first out, so a *flush* marker a worker logs after its last
task proves that every earlier event of that worker has arrived
(:mod:`hetflow.engine.distributed` waits for one per worker before the
record is written).

**Sinks.** The stream keeps every event (the run record stores them) and
hands each one to its sinks, which the CLI chooses: :class:`ProgressDisplay`
(a ``rich`` progress bar, on a terminal), :class:`LineLog` (one plain
line per event), :class:`JsonLog` (one JSON object per line), or none
(``--quiet``). Sinks write to the stream the CLI gives them.

Examples
--------
>>> import io
>>> out = io.StringIO()
>>> stream = EventStream([LineLog(out)])
>>> stream.emit(run_event("started", "r1", tasks=2, mode="threads"))
>>> stream.emit({"event": "finished", "kind": "partition", "id": "p0", "executor": "host",
...              "worker": None, "attempt": 1, "duration_s": 0.002, "status": "succeeded", "start": 0, "end": 0})
>>> print(out.getvalue().split("] ", 1)[1].splitlines()[0])
run r1 started: 2 tasks (threads)
>>> [e["event"] for e in stream.events]
['started', 'finished']
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Iterable, TextIO

__all__ = ["EventStream", "Sink", "run_event", "format_line", "LineLog", "JsonLog", "ProgressDisplay", "is_task_end"]

Sink = Callable[[dict], None]

TASK_END = ("finished", "failed")


def is_task_end(event: dict) -> bool:
    """Whether ``event`` closes a task (the run record's ``tasks`` are these)."""
    return event.get("kind") != "run" and event.get("event") in TASK_END


def run_event(what: str, run_id: str, **extra: Any) -> dict:
    """A ``run`` event: ``started`` (with ``tasks``, ``mode``...), ``finished`` or ``failed``."""
    return {"event": what, "kind": "run", "id": run_id, "time": time.time(), **extra}


class EventStream:
    """Collects a run's events in arrival order and fans each out to the sinks."""

    def __init__(self, sinks: Iterable[Sink] = ()) -> None:
        self.events: list[dict] = []
        self._sinks = list(sinks)
        self._lock = threading.Lock()

    def emit(self, event: dict) -> None:
        """Keep ``event`` (not a copy: an emitter hands over a dict it no longer changes) and pass it on.

        Without sinks this takes no lock (``list.append`` is atomic); with
        sinks, a lock keeps each sink seeing events one at a time, in order.
        """
        if "time" not in event:
            event["time"] = event["end"] if "end" in event else event["start"] if "start" in event else time.time()
        if not self._sinks:
            self.events.append(event)
            return
        with self._lock:
            self.events.append(event)
            for sink in self._sinks:
                sink(event)

    def emitter(self) -> Callable[[dict], None]:
        """What a task wrapper calls for its events, which always carry ``time``.

        Without sinks that is the list's own ``append``: a run of many
        small tasks emits two events for most of them, and :meth:`emit`
        was a Python call on each.
        """
        return self.events.append if not self._sinks else self.emit

    def tasks(self) -> list[dict]:
        """The events that close a task (copies), ordered by when the task started."""
        with self._lock:
            ends = [dict(e) for e in list(self.events) if is_task_end(e)]
        return sorted(ends, key=lambda e: e.get("start", e["time"]))


def _where(event: dict) -> str:
    out = f" on {event['executor']}" if event.get("executor") else ""
    if event.get("worker"):
        out += f" (worker {event['worker']})"
    return out


def _task_name(event: dict) -> str:
    return f"{event['kind']} {event['id']}"


def format_line(event: dict) -> str:
    """One event as one line of text, without the time prefix.

    >>> format_line({"event": "retried", "kind": "partition", "id": "p1", "executor": "accel",
    ...              "attempt": 1, "error": "boom", "timed_out": False})
    'partition p1 attempt 1 failed on accel: boom; retrying'
    """
    what = event["event"]
    if event.get("kind") == "run":
        if what == "started":
            extra = f" ({event['mode']})" if event.get("mode") else ""
            link = f"; dashboard {event['dashboard']}" if event.get("dashboard") else ""
            return f"run {event['id']} started: {event.get('tasks', '?')} tasks{extra}{link}"
        if what == "flush":
            return f"worker {event.get('worker')} flushed its events"
        if what == "scattered":
            again = " again after a lost worker" if event.get("why") == "recovery" else ""
            return f"{event.get('key')} ({event.get('bytes')} B) scattered to {', '.join(event.get('workers') or ['?'])}{again}"
        if what == "warm-up":
            return f"worker {event.get('worker')} warmed up for run {event['id']} in {event.get('duration_s', 0):.3f} s"
        tail = f": {event['error']}" if event.get("error") else ""
        return f"run {event['id']} {what}{tail}"
    name = _task_name(event)
    attempt = event.get("attempt", 1)
    again = f" (attempt {attempt})" if attempt > 1 else ""
    if what == "started":
        return f"{name} started{_where(event)}{again}"
    if what == "retried":
        why = "timed out" if event.get("timed_out") else "failed"
        return f"{name} attempt {attempt} {why}{_where(event)}: {event.get('error')}; retrying"
    took = f" in {event['duration_s']:.3f} s" if event.get("duration_s") is not None else ""
    size = f", {event['bytes']} B" if event.get("bytes") is not None else ""
    if what == "finished":
        return f"{name} finished{_where(event)}{took}{size}{again}"
    why = "timed out" if event.get("timed_out") else "failed"
    return f"{name} {why}{_where(event)}{took}{again}: {event.get('error')}"


class LineLog:
    """One plain line per event, prefixed by the seconds since the run started."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._t0: float | None = None

    def __call__(self, event: dict) -> None:
        if event.get("event") == "flush":
            return
        now = event.get("time", time.time())
        if self._t0 is None:
            self._t0 = now
        print(f"[{now - self._t0:8.3f}s] {format_line(event)}", file=self._out, flush=True)


class JsonLog:
    """One JSON object per event per line (``--log-format json``)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def __call__(self, event: dict) -> None:
        if event.get("event") == "flush":
            return
        print(json.dumps(event, sort_keys=True, default=str), file=self._out, flush=True)


class ProgressDisplay:
    """A ``rich`` progress bar over the run's tasks, with bridged bytes and the task last seen.

    Failures and retries are printed above the bar as they come; the bar
    stops when the run's closing event arrives (or :meth:`close`).
    """

    def __init__(self, out: TextIO, *, force_terminal: bool | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=out, force_terminal=force_terminal)
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[bridged]}"), TimeElapsedColumn(), console=self.console,
        )
        self._task = None
        self._bridged = 0
        self._done = 0

    def __call__(self, event: dict) -> None:
        from hetflow.engine.planner import human_bytes

        what, kind = event.get("event"), event.get("kind")
        if kind == "run":
            if what == "started":
                if event.get("dashboard"):
                    self.console.print(f"dashboard: {event['dashboard']}")
                self.progress.start()
                self._task = self.progress.add_task(f"run {event['id']}", total=event.get("tasks"), bridged="")
            elif what in ("finished", "failed", "cancelled"):
                if what != "finished":
                    self.console.print(f"[red]{format_line(event)}[/red]", highlight=False)
                self.close()
            return
        if self._task is None:
            return
        if what == "started":
            self.progress.update(self._task, description=f"{_task_name(event)}{_where(event)}")
        elif what == "retried":
            self.console.print(f"[yellow]{format_line(event)}[/yellow]", highlight=False)
        elif what in TASK_END:
            if kind == "export" and event.get("bytes"):
                self._bridged += event["bytes"]
            self._done += 1
            if what == "failed":
                self.console.print(f"[red]{format_line(event)}[/red]", highlight=False)
            bridged = f"{human_bytes(self._bridged)} bridged" if self._bridged else ""
            self.progress.update(self._task, advance=1, bridged=bridged)

    def close(self) -> None:
        if self._task is not None:
            self.progress.stop()
            self._task = None
