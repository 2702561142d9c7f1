"""Running the points of a matrix sweep: in parallel, cancellable, resumable.

A sweep's state is its ``sweep.json`` (:func:`hetflow.engine.store.runs.new_sweep`):
one row per point with its status (``pending``, ``running``, then
``succeeded``, ``failed`` or ``cancelled``) and the run that ran it.
:func:`run_points` runs the rows it is given, up to ``parallel`` at a time
in threads, each point under its own run lock (the lock is per manifest
and resolved params, so points never block each other), and rewrites
``sweep.json`` atomically whenever a row changes.

Cancellation (SIGINT or SIGTERM, :mod:`hetflow.engine.run.cancel`) reaches
every point's run through the shared flag: running points write their
records as ``cancelled``, points not started stay ``pending``, the sweep
says ``cancelled`` and :class:`~hetflow.engine.errors.RunCancelled` is
raised. :func:`resume_rows` then picks what a resumed sweep runs: every
point that did not succeed, a point whose run had started continuing
that run (``--resume RUN_ID``) so its finished partitions are reused.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from hetflow.engine.store import owner
from hetflow.engine.run.cancel import Cancel, Cancelled, current, interrupts_held
from hetflow.engine.errors import (HetflowError, RunCancelled, StillRunning, StorageUnavailable, UsageError, argument,
                                   is_storage_error)
from hetflow.engine.store.records import Stopwatch, json_writer, remove_partial_writes, utc_iso, write_atomic
from hetflow.engine.store.runs import owner_of, read_fields, status_of, unnamed_runs, write_sweep
from hetflow.engine.run.threads import POOLS, point

__all__ = ["run_points", "resume_rows", "exit_code", "RESUMABLE", "SummaryUnwritten"]

#: what a point (or a run, or a sweep) may say and still be resumed: ``died`` is a ``running`` record whose process
#: is gone (:func:`hetflow.engine.store.runs.status_of`)
RESUMABLE = ("cancelled", "failed", "running", "died")


def resume_rows(summary: Mapping[str, Any], runs_dir: str) -> list[tuple[dict, str | None]]:
    """(row, run id to continue or None) for every point of a sweep that did not succeed.

    A point that says ``running`` in a sweep whose process died is resumed,
    continuing its run; a point whose run still runs in a live process
    (resumed on its own by another command, say) is a :class:`UsageError`,
    since resuming it here would run it twice at once. A point whose run's
    record says ``succeeded`` though its row does not (the run ended after
    the summary's last write, then the sweep was killed) is marked
    ``succeeded`` from that record, in ``summary``, and not run again; a
    point whose row names no run while a run of it is on disk
    (:func:`~hetflow.engine.store.runs.unnamed_runs`) is that run's.

    >>> rows = [{"name": "a", "status": "succeeded", "run_id": "r1"}, {"name": "b", "status": "pending", "run_id": None},
    ...         {"name": "c", "status": "running", "run_id": None}]
    >>> [(r["name"], again) for r, again in resume_rows({"points": rows}, "runs")]
    [('b', None), ('c', None)]
    """
    out = []
    found = unnamed_runs(runs_dir, summary)
    for row in summary.get("points", []):
        if row.get("status") == "succeeded":
            continue
        if not row.get("run_id") and row.get("name") in found:
            row["run_id"] = found[row["name"]]
        run_id = row.get("run_id")
        record = os.path.join(runs_dir, run_id, "record.json") if run_id else None
        again = run_id if record and os.path.isfile(record) else None
        if again is not None:
            data = read_fields(record, ("status", "owner", "host", "outputs")) or {}
            if data.get("status") == "succeeded":
                # its run ended after the summary's last write, before the sweep was killed: it is done
                row.update(status="succeeded", record=os.path.join(run_id, "record.json"), error=None,
                           outputs={k: v.get("digest") for k, v in (data.get("outputs") or {}).items()})
                row.pop("exit_code", None)
                continue
            who = owner_of(data) or {}
            mine = who.get("pid") == os.getpid() and who.get("host") == owner.current()["host"]  # a call of ours ended
            if status_of(data) == "running" and owner.alive(who) and not mine:
                raise StillRunning(f"point {row.get('name')}: its run {again} is still running (pid {who.get('pid')} "
                                   f"on {who.get('host')}); stop it first, or wait for it to end", who)
        out.append((row, again))
    return out


def run_points(folder: str, summary: dict, todo: list[tuple[dict, Any]], run_one: Callable[..., Any], *,
               parallel: int = 1, on_point: Callable[[dict], None] | None = None, cancel: Cancel | None = None,
               resume: bool = False) -> dict:
    """Run ``run_one(job, row, named)`` for each (row, job) of ``todo`` and keep ``sweep.json`` in step.

    ``run_one`` returns an object with ``status``, ``run_id``, ``record_path``,
    ``record`` and ``error`` (a :class:`hetflow.Run`), and calls ``named(run_id)``
    as soon as the point's run has its folder, so that ``sweep.json`` names
    the run of a point that is stopped half way. Returns the summary;
    raises :class:`RunCancelled` when the sweep was cancelled.

    A sweep run again (``resume``) keeps its earlier attempts: each is an
    entry of ``attempts`` (started, ended, duration, status, cancellation,
    owner), ``started_at`` stays the first attempt's and ``duration_s`` is
    the sum of the attempts' durations. A second signal's forced exit
    writes the summary as cancelled (:meth:`Cancel.on_forced_exit`), and
    anything else that ends the sweep early (a ``KeyboardInterrupt`` in the
    Python API, an error) leaves it cancelled or failed, never ``running``.
    """
    if parallel < 1:
        raise UsageError(f"{argument('parallel')} must be at least 1")
    cancel = cancel or current() or Cancel()
    cancel.name_subject("sweep", summary["sweep_id"], os.path.join(folder, "sweep.json"))
    runs_dir = os.path.dirname(os.path.abspath(folder))
    guard = threading.Lock()
    watch = Stopwatch()
    started = watch.started
    attempts = _earlier_attempts(summary) if resume else []
    summary.update(status="running", ended_at=None, duration_s=None, parallel=parallel, owner=owner.current())
    summary.pop("cancelled", None)
    summary.pop("error", None)  # an earlier attempt's: this one says its own
    if attempts:
        summary["attempts"] = attempts
        summary["started_at"] = attempts[0].get("started_at") or summary.get("started_at")
    # a new sweep's summary was stamped when its folder was made: that is its first attempt's start
    this_start = summary["started_at"] if not attempts and summary.get("started_at") else utc_iso(started)
    summary.setdefault("started_at", this_start)
    # a Ctrl-C (a KeyboardInterrupt at whatever line runs) is held from the running summary's write until the
    # handler below can write its end: one between the two left the summary running for as long as the
    # process lived
    held = contextlib.ExitStack()
    came = held.enter_context(interrupts_held())
    try:
        try:
            write_sweep(folder, summary)
        except (StorageUnavailable, OSError) as e:
            if isinstance(e, OSError) and not is_storage_error(e):
                raise
            # nothing of this attempt has run: the summary on disk is the one the sweep was made (or last ended) with
            raise _unwritten(summary, folder, e, began=True) from e
        finished = threading.Event()
        # who writes the summary's end, and with what status: a second signal that comes in that thread while
        # it writes (signals run in the main thread) ends the process before the write resumes
        ending: dict[str, Any] = {}
        ended = threading.Event()
        writer = _Writer(os.path.join(folder, "sweep.json"), summary, guard, finished)

        def save(row: dict, **changes: Any) -> None:
            with guard:
                row.update(changes)
                if not finished.is_set():
                    writer.request()
            if on_point is not None and row["status"] not in ("running", "pending"):
                on_point(dict(row))

        def named(row: dict) -> Callable[[str], None]:
            def name(run_id: str) -> None:
                save(row, run_id=run_id, record=os.path.join(run_id, "record.json"))
            return name

        def one(row: dict, job: Any) -> None:
            if cancel.requested:
                return
            row.pop("exit_code", None)  # an earlier attempt's
            save(row, status="running", error=None)
            try:
                with point():
                    done = run_one(job, row, named(row))
            except RunCancelled as e:
                run_id = os.path.basename(os.path.dirname(e.record_path)) if e.record_path else row.get("run_id")
                save(row, status="cancelled", run_id=run_id, error=str(e),
                     record=os.path.relpath(e.record_path, runs_dir) if e.record_path else row.get("record"))
                return
            except HetflowError as e:  # a point that cannot start (its lock is held, its inputs are wrong, its disk is full)
                save(row, status="failed", error=str(e), exit_code=e.exit_code)
                return
            except BaseException as e:  # an interrupt or a bug: the point's state is known, the sweep ends
                save(row, status="cancelled" if isinstance(e, KeyboardInterrupt) else "failed",
                     error=f"{type(e).__name__}: {e}")
                raise
            save(row, status=done.status, run_id=done.run_id, record=os.path.relpath(done.record_path, runs_dir),
                 outputs={k: v["digest"] for k, v in done._record["outputs"].items()}, error=done.error,
                 **({} if done.status == "succeeded" else {"exit_code": 1}))

        def close(status: str, forced: bool = False, wait_s: float | None = None) -> None:
            """Write the summary's end: its status, this attempt's entry and, when cancelled, what had finished."""
            ending["status"] = status
            now = watch.now()
            rows = summary["points"]
            if status == "cancelled":
                for row in rows:
                    if row["status"] == "running":
                        row["status"] = "cancelled"
                        if forced and row.get("record") and not os.path.exists(os.path.join(runs_dir, row["record"])):
                            # a run ended by the second signal before its record was written leaves no folder
                            row.pop("run_id", None)
                            row.pop("record", None)
                summary["cancelled"] = {"signal": cancel.signal or "SIGINT", "at": utc_iso(cancel.at or now),
                                        "finished": [r["name"] for r in rows if r["status"] in ("succeeded", "failed")],
                                        "forced_exit": forced}
            this = {"attempt": len(attempts) + 1, "started_at": this_start, "ended_at": utc_iso(now),
                    "duration_s": round(now - started, 6), "status": status, "owner": summary.get("owner"),
                    "cancelled": summary.get("cancelled")}
            summary.update(status=status, ended_at=utc_iso(now), attempts=attempts + [this],
                           duration_s=round(sum(a.get("duration_s") or 0.0 for a in attempts) + now - started, 6))
            try:
                with writer.writing(wait_s=wait_s if wait_s is not None else 1.0 if forced else None):
                    write_sweep(folder, summary)
            except (StorageUnavailable, OSError) as e:
                if isinstance(e, OSError) and not is_storage_error(e):
                    raise
                # the points ran and their records are on disk: the sweep still ends, clean-up and all, and
                # then says which summary could not be written, and where its points' runs are
                ending["unwritten"] = e
            finally:
                ended.set()

        def finish(status: Callable[[], str]) -> str:
            """Claim the summary's end for this thread (holding the guard, ``finished`` not set) and write it."""
            ending["thread"] = threading.get_ident()
            finished.set()
            end = status()
            close(end)
            return end

        def forced_exit() -> None:
            # a second signal ends the process now: the summary says cancelled and names every point's run
            if ending.get("thread") == threading.get_ident() and not ended.is_set():
                # it came while this thread wrote the summary's end, which would never resume: written here again
                # (not waiting for the file's lock where this thread holds it)
                close(ending.get("status") or _overall(summary["points"], True, interrupted=True), forced=True,
                      wait_s=0 if writer.held_here() else 1.0)
                remove_partial_writes(os.path.join(folder, "sweep.json"))
                return
            # The guard is not waited for long: the signal may have come to a thread that holds it.
            got = guard.acquire(timeout=1.0)
            try:
                if not finished.is_set():
                    ending["thread"] = threading.get_ident()
                    finished.set()
                    close("cancelled", forced=True)
                    remove_partial_writes(os.path.join(folder, "sweep.json"))
                else:
                    ended.wait(_END_WAIT_S)  # another thread writes the end: the process ends once it is on disk
            finally:
                if got:
                    guard.release()

        forget_hook = cancel.on_forced_exit(forced_exit)
        # the points at once share the cores: each point's BLAS gets cores // parallel threads (hetflow.engine.run.threads)
        pools = POOLS.claim(min(parallel, max(1, len(todo))))
        pools.__enter__()
        # Each point's job (its compiled manifest, and the plan made of it) is let go once the point has run: held
        # to the end, a sweep of a big manifest held every point's plan at once. ``todo`` is emptied for the same
        # reason: the caller's list held them too.
        queue = collections.deque(todo)
        todo.clear()
        stopped_by: list[BaseException | None] = [None]  # the error that made this sweep stop its running points
    except BaseException:
        held.close()
        raise
    try:
        held.close()
        if came:
            raise KeyboardInterrupt
        if parallel == 1:
            while queue:
                row, job = queue.popleft()
                one(row, job)
                del job
        else:
            with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="hetflow-point") as pool:
                futures = [pool.submit(one, row, job) for row, job in queue]
                queue.clear()
                try:
                    for future in futures:
                        future.result()
                except BaseException as e:
                    # the points not started stay pending, running ones stop; an error (a caller's on_point that
                    # raised) stops them as a Ctrl-C would, and the sweep still ends failed, as without parallel
                    stopped_by[0] = None if isinstance(e, (KeyboardInterrupt, Cancelled, RunCancelled)) else e
                    cancel.request("SIGINT")
                    for future in futures:
                        future.cancel()
                    raise
    except BaseException as e:
        interrupted = isinstance(e, KeyboardInterrupt)
        with interrupts_held():  # the summary's end is written whole, a second Ctrl-C or not
            with guard:
                if not finished.is_set():
                    if interrupted:
                        cancel.request("SIGINT")
                    # an error that ended the sweep early (a caller's on_point that raised, a bug) is a failure
                    # with points left to --resume, not a cancellation nobody asked for; the summary says what it
                    # was, as no point's row does
                    failed = not interrupted and not isinstance(e, (Cancelled, RunCancelled))
                    if failed:
                        pending = [r["name"] for r in summary["points"] if r["status"] == "pending"]
                        # raised by the last point's on_point, it ended nothing early, and still failed the sweep
                        early = any(r["status"] not in ("succeeded", "failed") for r in summary["points"])
                        said = "the sweep ended early" if early else "the sweep failed after its last point ended"
                        summary["error"] = {"message": f"{said}: {type(e).__name__}: {e}", "pending": pending}
                    finish(lambda: "failed" if failed else _overall(
                        summary["points"], cancel.requested and stopped_by[0] is None, interrupted=interrupted))
            forget_hook()
            pools.__exit__(None, None, None)
            writer.stop()
        if "unwritten" in ending and (interrupted or isinstance(e, (Cancelled, RunCancelled))):
            raise _unwritten(summary, folder, ending["unwritten"]) from e
        if interrupted and summary.get("status") == "cancelled":
            # the Python API's Ctrl-C, raised in this thread (a point's own is its run's RunCancelled)
            raise _cancelled(summary, folder, "SIGINT") from e
        raise  # a Ctrl-C that found every point ended cancelled nothing: the summary says how the sweep ended
    rows = summary["points"]

    def final_status() -> str:
        status = _overall(rows, cancel.requested)
        if status != "cancelled":
            summary.pop("cancelled", None)
        return status

    # a Ctrl-C now finds every point ended: it cancels nothing, and the summary says how the sweep ended
    with interrupts_held() as late:
        pools.__exit__(None, None, None)
        writer.stop()
        with guard:
            forced = finished.is_set()  # a forced exit is writing the summary; the process ends with it
            if not forced:
                status = finish(final_status)
        forget_hook()
    if late:
        raise KeyboardInterrupt
    if forced:
        return summary
    if "unwritten" in ending:
        raise _unwritten(summary, folder, ending["unwritten"])
    if status == "cancelled":
        raise _cancelled(summary, folder, cancel.signal)
    return summary


def _cancelled(summary: Mapping[str, Any], folder: str, signal_name: str | None) -> RunCancelled:
    rows = summary["points"]
    done = len((summary.get("cancelled") or {}).get("finished") or
               [r for r in rows if r["status"] in ("succeeded", "failed")])
    return RunCancelled(f"sweep {summary['sweep_id']} cancelled by {signal_name or 'SIGINT'}: {done} of {len(rows)} "
                        "points had finished", os.path.join(folder, "sweep.json"), signal_name or "SIGINT")


class SummaryUnwritten(StorageUnavailable):
    """A sweep ran, but its summary's last write was refused (a full disk, a quota, a read-only file system, its
    folder removed): ``sweep_id``, ``summary`` (its ``sweep.json`` where an earlier state of it is on disk, else
    None) and ``points``, the rows as the sweep ended them, name the runs its points left."""

    def __init__(self, message: str, sweep_id: str, summary: str | None, points: list[dict]) -> None:
        super().__init__(message)
        self.sweep_id, self.summary, self.points = sweep_id, summary, points


def _unwritten(summary: Mapping[str, Any], folder: str, error: BaseException, began: bool = False) -> SummaryUnwritten:
    sweep_id, path = summary["sweep_id"], os.path.join(folder, "sweep.json")
    ran = sum(1 for r in summary["points"] if r.get("run_id"))
    there = os.path.isfile(path)
    if isinstance(error, StorageUnavailable) or not there:  # its folder was removed (the message says so)
        why = str(error)
    elif began:
        why = (f"sweep {sweep_id}: its summary {path} could not be written as it began ({error.strerror or error}): "
               f"no point has run, and --resume {sweep_id} runs them")
    else:
        why = (f"sweep {sweep_id}: its summary {path} could not be written as it ended ({error.strerror or error}): "
               f"it holds an earlier state, which hetflow runs show {sweep_id} completes from the points' records; "
               f"{ran} of {len(summary['points'])} points have a run, each with its record")
    return SummaryUnwritten(why, sweep_id, path if there else None, [dict(r) for r in summary["points"]])


# how long a second signal's exit waits for the summary's end another thread is writing
_END_WAIT_S = 5.0


#: the summary's writer rests this many times as long as its last write took before the next: a summary of N
#: points is N rows long, and written once per point it cost a sweep of N points N^2 rows and the fsyncs that
#: held up the points' own files (4,000 points of a two-stage run took 121 s; 19 s with the rest)
_REST = 4.0
#: and at most this long, so that a big summary stays within a second or two of its points
_REST_MAX_S = 1.0


class _Writer:
    """Writes ``sweep.json`` in its own thread whenever the summary changes: one write at a time, each of the
    state when it starts, so a point never waits on the summary's fsync, and the changes points make while a
    write is under way, or while the writer rests after it (:data:`_REST`), go out together in the next one.

    Each write is atomic (the file is a whole earlier state or the new one), so a sweep killed at any moment
    leaves a summary at most a write and a rest behind its points: a row may still say ``running`` for a run
    that ended, or name no run for a point whose run began. Each point's run names its sweep in its record
    (``matrix_point.sweep``), so :func:`resume_rows` and :func:`hetflow.engine.store.runs.sweep_view` settle
    both from the runs' own records. The summary's end is written by the sweep itself, after the last of these
    (:meth:`writing`); a write that starts once the sweep has finished leaves the file to it.
    """

    def __init__(self, path: str, summary: dict, guard: threading.Lock, finished: threading.Event) -> None:
        self._path, self._summary, self._guard, self._finished = path, summary, guard, finished
        self._wanted = self._written = 0
        self._stopping = False
        self._changed = threading.Condition()
        self._lock = threading.Lock()  # one write to the file at a time, this thread's or the sweep's end
        self._holder: int | None = None  # the thread in writing(), which holds the lock
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        """The summary changed (called holding the sweep's guard): write it soon."""
        with self._changed:
            self._wanted += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="hetflow-sweep-json", daemon=True)
                self._thread.start()
            self._changed.notify()

    def _loop(self) -> None:
        rest_until = 0.0
        while True:
            with self._changed:
                while self._written == self._wanted and not self._stopping:
                    self._changed.wait()
                if self._written == self._wanted:
                    return
                while not self._stopping and not self._finished.is_set() and time.monotonic() < rest_until:
                    self._changed.wait(rest_until - time.monotonic())
                target = self._wanted
            began = time.monotonic()
            with self._guard:
                write = None if self._finished.is_set() else json_writer(self._summary)
            if write is not None:
                with self._lock:
                    if not self._finished.is_set():
                        try:
                            write_atomic(self._path, write)
                        except OSError:
                            # a full disk: the file keeps its last whole state; the next change tries again,
                            # and the sweep's own end, which the command waits on, says what went wrong
                            pass
            ended = time.monotonic()
            rest_until = ended + min(_REST_MAX_S, _REST * (ended - began))
            with self._changed:
                self._written = target
                self._changed.notify_all()

    def stop(self) -> None:
        """Wait for the writes asked for so far, then end the thread."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()

    @contextlib.contextmanager
    def writing(self, wait_s: float | None = None):
        """Hold the file for the sweep's own write: after any write under way (waiting at most ``wait_s``)."""
        got = self._lock.acquire(timeout=-1 if wait_s is None else wait_s)
        if got:
            self._holder = threading.get_ident()
        try:
            yield
        finally:
            if got:
                self._holder = None
                self._lock.release()

    def held_here(self) -> bool:
        """Whether this thread holds the file for the sweep's own write (a signal handler may ask)."""
        return self._holder == threading.get_ident()


def exit_code(rows: list[Mapping[str, Any]]) -> int:
    """The exit code of a sweep that ended with ``rows``: 0 when every point succeeded, 1 when a point's run
    failed, and otherwise the smallest of the codes its points could not run with (2 bad input, 4 locked,
    5 the environment: a disk that refused a point's files).

    >>> exit_code([{"status": "succeeded"}, {"status": "failed", "exit_code": 5}])
    5
    >>> exit_code([{"status": "failed", "exit_code": 5}, {"status": "failed", "exit_code": 1}])
    1
    >>> exit_code([{"status": "failed"}])  # a summary written before points kept their code
    1
    """
    codes = [row.get("exit_code") or 1 for row in rows if row.get("status") != "succeeded"]
    return min(codes) if codes else 0


def _overall(rows: list[dict], cancelled: bool, interrupted: bool = False) -> str:
    """A sweep's status from its points': cancelled when it was stopped with points left, else failed unless
    every point succeeded.

    >>> _overall([{"status": "succeeded"}, {"status": "pending"}], cancelled=True)
    'cancelled'
    >>> _overall([{"status": "succeeded"}, {"status": "failed"}], cancelled=True)
    'failed'
    """
    states = {r["status"] for r in rows}
    if (cancelled or interrupted) and states - {"succeeded", "failed"}:
        return "cancelled"
    return "failed" if states - {"succeeded"} else "succeeded"


def _earlier_attempts(summary: Mapping[str, Any]) -> list[dict]:
    """The attempts a sweep's summary holds already: its ``attempts``, or for a summary written before any
    attempt was recorded, the one its own fields describe; none for a sweep that never ran.

    >>> _earlier_attempts({"status": "pending"})
    []
    >>> [a["status"] for a in _earlier_attempts({"status": "cancelled", "started_at": "t0", "duration_s": 2.0})]
    ['cancelled']
    """
    if summary.get("attempts"):
        return [dict(a) for a in summary["attempts"]]
    status = summary.get("status")
    if status in (None, "pending") or not summary.get("started_at"):
        return []
    if status == "running":
        status = owner.state_of(status, summary.get("owner"))
    return [{"attempt": 1, "started_at": summary.get("started_at"), "ended_at": summary.get("ended_at"),
             "duration_s": summary.get("duration_s"), "status": status, "owner": summary.get("owner"),
             "cancelled": summary.get("cancelled")}]
