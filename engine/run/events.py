"""One event stream per run, the same in every scheduler mode.

Dask's own progress tools each see only one kind of scheduler
(``dask.diagnostics`` the threaded one, ``distributed``'s progress bar
the cluster), so hetflow reports from its own task wrappers instead:
:class:`~hetflow.engine.run.runtime.LocalRuntime`'s methods emit one event when
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
(:mod:`hetflow.engine.run.distributed` waits for one per worker before the
record is written).

**Sinks.** The stream keeps every event (the run record stores them) and
hands each one to its sinks, which the CLI chooses: :class:`ProgressDisplay`
(a ``rich`` progress bar, on a terminal), :class:`LineLog` (one plain
line per event), :class:`JsonLog` (one JSON object per line), or none
(``--quiet``). Sinks write to the stream the CLI gives them, through a
:class:`QuietStream`: a sink runs in the engine's threads, and a reader
that went away (``hetflow run m.yaml 2>&1 | head -1``) silences it instead
of failing the run.

When several runs share one stream (a ``--parallel`` sweep), each event
also carries ``run`` (the run's id) and, for a matrix point, ``point``
(its name); :class:`LineLog` then starts each line with them.

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

# _thread's lock is threading.Lock itself, without the threading module (0.5 ms of ``hetflow emulate``)
import _thread
import errno
import os
import time
from collections.abc import Callable

TYPE_CHECKING = False       # typing itself costs ``hetflow emulate`` 3 ms of its start
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, TextIO

__all__ = ["EventStream", "Sink", "run_event", "format_line", "run_tag", "short_id", "LineLog", "JsonLog",
           "ProgressDisplay", "is_task_end", "QuietStream", "quiet", "printable"]

Sink = Callable[[dict], None]

TASK_END = ("finished", "failed")


# C0 but newline and tab, DEL and C1: what a terminal acts on rather than shows; and the bidirectional
# embeddings, overrides and isolates, which make the words after them read in another order than they are
_CONTROLS = {**{c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0b, 0x20), 0x7f)},
             **{c: f"\\u{c:04x}" for c in (*range(0x80, 0xa0), *range(0x202a, 0x202f), *range(0x2066, 0x206a))}}


def printable(text: str) -> str:
    """``text`` with its control characters written as escapes, newlines and tabs kept.

    An op's error message, a param's value or a file's name is the user's
    text: said raw, an escape sequence in it would clear the terminal,
    recolour or hide what follows, or make a link, a carriage return or
    backspace would write over the words before it, and a right-to-left
    override would show a file's name backwards.

    >>> printable("boom \\x1b[2J\\rdone\\n\\tnext \\x9b")
    'boom \\\\x1b[2J\\\\x0ddone\\n\\tnext \\\\u009b'
    >>> printable("run-\\u202elmy.txt")
    'run-\\\\u202elmy.txt'
    """
    return text.translate(_CONTROLS)


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
        self._lock = _thread.allocate_lock()

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


class QuietStream:
    """A stream (text or binary) that falls silent when its reader is gone, instead of raising.

    ``hetflow runs | head -1`` closes the pipe after one line, a pager
    closes it when it quits, a terminal that hung up fails every write
    with ``EIO``. What the command prints is then of no use to anyone, but
    what it does still is: a run must go on to its end and write its
    record. The first write or flush that fails because the reader is gone
    (``EPIPE``, ``EIO``, or ``ValueError`` from a closed file) marks the
    stream :attr:`gone`, and that write and every later one do nothing.
    When the stream is the process's standard output or error, its file
    descriptor is pointed at ``/dev/null`` as well, so that the
    interpreter's last flush at exit, which writes what is still buffered,
    has nothing to complain about. A file on a disk that refuses the write
    (full, over quota, read-only) falls silent the same way, and keeps the
    error in :attr:`lost`: the run still ends and writes its record, and
    the command then says that its output was lost (the CLI exits 5).
    Other attributes (``fileno``, ``encoding``...) are the wrapped
    stream's; ``buffer`` is wrapped too and goes silent with it.

    >>> import io
    >>> class Closed(io.StringIO):
    ...     def write(self, text):
    ...         raise BrokenPipeError(errno.EPIPE, "Broken pipe")
    >>> out = QuietStream(Closed())
    >>> print("nobody reads this", file=out, flush=True)
    >>> out.gone, out.wrote
    (True, True)
    """

    def __init__(self, stream: Any, *, _root: QuietStream | None = None) -> None:
        self._stream = stream
        self._root = _root or self
        self._gone = stream is None  # Python's sys.stdout when the process started with its stdout closed
        #: the disk's error that silenced the stream (:func:`hetflow.engine.errors.is_storage_error`), or None
        self.lost: OSError | None = None
        #: whether anything was handed to :meth:`write`, delivered or not (the CLI asks before it prints a
        #: JSON object of its own)
        self.wrote = False
        self._lock = _thread.RLock()  # the root's: a write is whole before or after a seal()
        self._sealed: int | None = None  # the thread that alone writes from now on (seal())

    @property
    def gone(self) -> bool:
        """Whether the reader is gone: nothing is written any more."""
        return self._root._gone

    def write(self, data: Any) -> int:
        root = self._root
        with root._lock:
            if root._sealed is not None and root._sealed != _thread.get_ident():
                return len(data)  # another thread has said the command's last words
            root.wrote = root.wrote or bool(data)
            if not self.gone:
                try:
                    return self._stream.write(data)
                except (OSError, ValueError) as e:
                    self._fall_silent(e)
            return len(data)

    def seal(self) -> None:
        """From now on only this thread writes here: what a forced exit says last (a sweep's id, which
        ``id=$(hetflow run ... | tail -1)`` reads) is not followed by a line another thread was about to print.
        A write under way when it is called ends first; a thread that holds the stream's lock for longer than a
        second (it cannot, short of a stuck pipe) is not waited for."""
        root = self._root
        took = root._lock.acquire(timeout=1.0)
        root._sealed = _thread.get_ident()
        if took:
            root._lock.release()

    def wrap(self, stream: Any) -> Any:
        """Write to ``stream`` from now on; return the stream written to until now."""
        with self._root._lock:
            before, self._stream = self._stream, stream
        return before

    def writelines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except (OSError, ValueError) as e:
                self._fall_silent(e)

    def isatty(self) -> bool:
        if self.gone:
            return False
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    @property
    def buffer(self) -> QuietStream | None:
        inner = getattr(self._stream, "buffer", None)
        return None if inner is None else QuietStream(inner, _root=self._root)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # asked before __init__ ran (copy, pickle): not the wrapped stream's
            raise AttributeError(name)
        return getattr(self._stream, name)

    def _fall_silent(self, error: OSError | ValueError) -> None:
        from hetflow.engine.errors import is_storage_error

        if is_storage_error(error):
            self._root.lost = self._root.lost or error  # type: ignore[assignment]
        elif not _reader_gone(error, self._stream):
            raise error
        self._root._gone = True
        _to_devnull(self._stream)


def quiet(stream: Any) -> QuietStream:
    """``stream`` as a :class:`QuietStream` (itself when it is one already)."""
    return stream if isinstance(stream, QuietStream) else QuietStream(stream)


def _reader_gone(error: OSError | ValueError, stream: Any) -> bool:
    """Whether ``error`` from writing to ``stream`` says that nobody reads it any more (a full disk does not)."""
    if isinstance(error, OSError):
        return error.errno in (errno.EPIPE, errno.EIO)
    # a UnicodeEncodeError is a ValueError too, and says nothing about the reader
    return not isinstance(error, UnicodeError) and bool(getattr(stream, "closed", False))


def _to_devnull(stream: Any) -> None:
    """Point the process's standard output or error at ``/dev/null`` when ``stream`` writes to it."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    if fd not in (1, 2):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


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
    >>> format_line({"event": "failed", "kind": "run", "id": "r1", "error": "stage 'y' failed: boom",
    ...              "origin": "m.yaml:7:3"})
    "run r1 failed: m.yaml:7:3: stage 'y' failed: boom"
    >>> lost = {"event": "worker-lost", "kind": "run", "id": "r1", "worker": "tcp://10.0.0.2:4000", "at": "T",
    ...         "moved": {"b": "tcp://10.0.0.3:4000"}, "rerun": ["partition:p3"]}
    >>> format_line({**lost, "name": "w2"})
    'worker w2 (tcp://10.0.0.2:4000) lost at T; b re-created on worker tcp://10.0.0.3:4000; running again: partition:p3'
    >>> format_line({**lost, "name": None})[:37]
    'worker tcp://10.0.0.2:4000 lost at T;'
    >>> format_line({"event": "worker-silent", "kind": "run", "id": "r1", "worker": "tcp://10.0.0.2:4000",
    ...              "name": "w2", "seconds": 5.2, "lost_after": 30.0})
    'worker w2 (tcp://10.0.0.2:4000) has sent the scheduler no heartbeat for 5.2 s: its process may be stopped or hung; the run takes it for lost at 30 s'
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
        if what == "worker-lost":
            # the second run to hear of a worker may find it gone from the scheduler's names: its address says it
            name = event.get("name")
            who = ((f"worker {name} ({event['worker']})" if name and name != event["worker"] else f"worker {event['worker']}")
                   if event.get("worker") else "a task Dask ran again")
            moved = "".join(f"; {n} re-created on worker {w}" for n, w in sorted((event.get("moved") or {}).items()))
            rerun = ", ".join(event.get("rerun") or []) or "nothing"
            memory = f" ({event['memory']})" if event.get("memory") else ""
            silent = f" ({event['silent']})" if event.get("silent") else ""
            return f"{who} lost at {event.get('at')}{memory}{silent}{moved}; running again: {rerun}"
        if what == "worker-silent":
            name = event.get("name")
            who = f"worker {name} ({event['worker']})" if name and name != event.get("worker") else f"worker {event.get('worker')}"
            return (f"{who} has sent the scheduler no heartbeat for {event.get('seconds', 0):g} s: its process may be "
                    f"stopped or hung; the run takes it for lost at {event.get('lost_after', 0):g} s")
        if what == "worker-paused":
            name = event.get("name")
            who = f"worker {name} ({event['worker']})" if name and name != event.get("worker") else f"worker {event.get('worker')}"
            memory, limit = event.get("memory"), event.get("memory_limit")
            held = (f": its process holds {memory / 2**20:.1f} MiB of its {limit / 2**20:.1f} MiB memory limit"
                    if isinstance(memory, (int, float)) and isinstance(limit, (int, float)) and limit else "")
            return (f"{who} has been paused for {event.get('seconds', 0):g} s{held}; Dask starts none of the run's "
                    "tasks there until it resumes (it pauses a worker past its pause threshold, 80% of its memory "
                    "limit unless configured otherwise)")
        if what == "warm-up":
            return f"worker {event.get('worker')} warmed up for run {event['id']} in {event.get('duration_s', 0):.3f} s"
        if what == "witness-placed":
            return (f"witness {event.get('phase')}: {event.get('chunks')} chunks ({event.get('steps')} steps) run "
                    f"{event.get('why') or event.get('where')}")
        if what == "witness-ran":
            cpu = ", ".join(f"{w} {s:.3f} s" for w, s in (event.get("worker_cpu_s") or {}).items()) or "none"
            return (f"witness {event.get('phase')}: {event.get('batches')} batches on the workers, their CPU: {cpu}"
                    f"{'; rows of ' + str(event['copied_batches']) + ' sent back' if event.get('copied_batches') else ''}")
        # a failed run's origin is the FILE:LINE:COL of the stage that failed, where an editor jumps to
        tail = f": {event['origin'] + ': ' if event.get('origin') else ''}{event['error']}" if event.get("error") else ""
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


def short_id(run_id: str) -> str:
    """The random part of a run id (its manifest digest and token), which is unique among a sweep's runs.

    >>> short_id("20260301T120000Z-rf-6bbe1414-a3f0")
    '6bbe1414-a3f0'
    >>> short_id("r1")
    'r1'
    """
    parts = run_id.rsplit("-", 2)
    return "-".join(parts[-2:]) if len(parts) == 3 else run_id


def run_tag(event: dict) -> str:
    """``RUN POINT: `` for an event that names its run (several runs share the stream), else nothing.

    >>> run_tag({"run": "20260301T120000Z-rf-6bbe1414-a3f0", "point": "rf[features=32]"})
    '6bbe1414-a3f0 rf[features=32]: '
    >>> run_tag({"event": "started"})
    ''
    """
    if not event.get("run"):
        return ""
    point = f" {event['point']}" if event.get("point") else ""
    return f"{short_id(str(event['run']))}{point}: "


class LineLog:
    """One plain line per event, prefixed by the seconds since the first event and, when the event names
    its run, by the run and its point (:func:`run_tag`).

    >>> import io
    >>> out = io.StringIO()
    >>> log = LineLog(out)
    >>> log({"event": "started", "kind": "partition", "id": "p0", "executor": "host", "time": 5.0,
    ...      "run": "20260301T120000Z-rf-6bbe1414-a3f0", "point": "rf[features=32]"})
    >>> print(out.getvalue(), end="")
    [   0.000s] 6bbe1414-a3f0 rf[features=32]: partition p0 started on host

    A witness phase's chunks, thousands of tasks, are two lines together:
    the first chunk's start, and their count and span once the phase hands
    on its table (or its run ends); a chunk that fails or is retried has its
    own line. ``--log-format json`` keeps every event.

    >>> out = io.StringIO()
    >>> log = LineLog(out)
    >>> for i, t in enumerate((1.0, 1.5)):
    ...     log({"event": "started", "kind": "witness", "id": f"wit:{i}", "executor": "emulator:emu", "time": t})
    ...     log({"event": "finished", "kind": "witness", "id": f"wit:{i}", "executor": "emulator:emu",
    ...          "time": t + 0.4, "status": "succeeded", "duration_s": 0.4})
    >>> log({"event": "started", "kind": "phase", "id": "wit", "executor": "emulator:emu", "time": 2.0})
    >>> print(out.getvalue(), end="")
    [   0.000s] witness wit: chunks started on emulator:emu
    [   0.900s] witness wit: 2 chunks finished on emulator:emu in 0.900s
    [   1.000s] phase wit started on emulator:emu
    """

    def __init__(self, out: TextIO) -> None:
        self._out = quiet(out)
        self._t0: float | None = None
        self._lock = _thread.allocate_lock()
        self._chunks: dict[tuple[str, str], list] = {}  # (run, phase) -> [chunks finished, first start, last end, where]

    def __call__(self, event: dict) -> None:
        if event.get("event") == "flush" or self._out.gone:
            return
        now = event.get("time", time.time())
        if self._t0 is None:
            self._t0 = now
        what, kind = event.get("event"), event.get("kind")
        if kind == "witness" and what in ("started", "finished"):
            key = (str(event.get("run", "")), str(event.get("id", "")).rsplit(":", 1)[0])
            seen = self._chunks.get(key)
            if seen is None:
                seen = self._chunks[key] = [0, now, now, event.get("executor")]
                if what == "started":
                    line = f"witness {key[1]}: chunks started{_where(event)}"
                    _write_line(self._out, printable(f"[{now - self._t0:8.3f}s] {run_tag(event)}{line}"), self._lock)
            if what == "finished":
                seen[0] += 1
                seen[2] = max(seen[2], now)
            return
        if kind == "phase" or kind == "run":
            run = str(event.get("run", ""))
            for key in [k for k in self._chunks if k[0] == run and (kind == "run" or k[1] == event.get("id"))]:
                self._summary(event, *self._chunks.pop(key), key[1])
        _write_line(self._out, printable(f"[{now - self._t0:8.3f}s] {run_tag(event)}{format_line(event)}"), self._lock)

    def _summary(self, event: dict, done: int, first: float, last: float, where: Any, pid: str) -> None:
        at = f" on {where}" if where else ""
        line = f"witness {pid}: {done} chunk{'s' if done != 1 else ''} finished{at} in {last - first:.3f}s"
        _write_line(self._out, printable(f"[{last - self._t0:8.3f}s] {run_tag(event)}{line}"), self._lock)


def _write_line(out: TextIO, text: str, lock: _thread.LockType) -> None:
    # one write per line under the sink's lock: the runs of a --parallel sweep share the sink, and print()
    # writes the text and its newline apart, so lines of two threads would interleave
    with lock:
        out.write(text + "\n")
        out.flush()


class JsonLog:
    """One JSON object per event per line (``--log-format json``), every key kept (``run`` and ``point`` too)."""

    def __init__(self, out: TextIO) -> None:
        import json  # for this log alone: ``hetflow emulate`` starts without it

        self._out = quiet(out)
        self._lock = _thread.allocate_lock()
        self._dumps = json.dumps

    def __call__(self, event: dict) -> None:
        if event.get("event") == "flush" or self._out.gone:
            return
        _write_line(self._out, self._dumps(event, sort_keys=True, default=str), self._lock)


class ProgressDisplay:
    """A ``rich`` progress bar per run over its tasks, with bridged bytes and the task last seen.

    Failures and retries are printed above the bars as they come; a run's
    bar stops moving when its closing event arrives, and the display stops
    when no run is left (or on :meth:`close`). The runs of a ``--parallel``
    sweep each get a bar, found by their events' ``run``.
    """

    def __init__(self, out: TextIO, *, force_terminal: bool | None = None) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        # rich ends the process on a broken pipe (Console.on_broken_pipe); the quiet stream never lets it see one
        self.console = Console(file=quiet(out), force_terminal=force_terminal)
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[bridged]}"), TimeElapsedColumn(), console=self.console,
        )
        self._bars: dict[str, Any] = {}  # run id -> its task in the progress display
        self._bridged: dict[str, int] = {}
        self._last: str | None = None  # the run whose events carry no ``run`` (the only one)
        self._escape = escape  # a point's name and an error's text are no markup: rich would eat "[k=1]"

    def __call__(self, event: dict) -> None:
        from hetflow.engine.plan.planner import human_bytes

        what, kind = event.get("event"), event.get("kind")
        if kind == "run":
            if what == "started":
                self._start(event)
            elif what in ("finished", "failed", "cancelled"):
                if what != "finished":
                    self._say("red", event)
                self._end(event["id"])
            return
        run = event.get("run") or self._last
        bar = self._bars.get(run)
        if bar is None:
            return
        point = f"{event['point']}: " if event.get("point") else ""
        if what == "started":
            self.progress.update(bar, description=self._escape(printable(f"{point}{_task_name(event)}{_where(event)}")))
        elif what == "retried":
            self._say("yellow", event)
        elif what in TASK_END:
            if kind == "export" and event.get("bytes"):
                self._bridged[run] += event["bytes"]
            if what == "failed":
                self._say("red", event)
            bridged = f"{human_bytes(self._bridged[run])} bridged" if self._bridged[run] else ""
            self.progress.update(bar, advance=1, bridged=bridged)

    def _start(self, event: dict) -> None:
        if event.get("dashboard"):
            self.console.print(f"dashboard: {event['dashboard']}")
        if not self._bars:
            self.progress.start()
        run = event["id"]
        point = f" {event['point']}" if event.get("point") else ""
        self._bars[run] = self.progress.add_task(self._escape(printable(f"run {run}{point}")), total=event.get("tasks"), bridged="")
        self._bridged[run] = 0
        self._last = run

    def _say(self, color: str, event: dict) -> None:
        """Print ``event``'s line above the bars."""
        self.console.print(f"[{color}]{self._escape(printable(run_tag(event) + format_line(event)))}[/{color}]",
                           highlight=False)

    def _end(self, run: str) -> None:
        if self._bars.pop(run, None) is not None and not self._bars:
            self.progress.stop()

    def close(self) -> None:
        if self._bars:
            self._bars.clear()
            self.progress.stop()
