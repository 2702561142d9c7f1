"""``hetflow schedule serve``: the scheduler's loop, around the decisions of :mod:`hetflow.engine.batch.schedule`.

:class:`Server` loops: reread manifests whose file changed, reap finished
runs (their slots are concluded and their hooks run in a thread of each
manifest's, so that a slow hook holds back no other slot), conclude the
slots of runs whose scheduler is gone
(:func:`~hetflow.engine.batch.schedule.settle`; their hooks, and those a
scheduler gone left owed, run in the same threads), start queued slots, decide due
slots, sleep until the next fire time or the poll interval. A backlog
(more than one slot due at once, after downtime) is queued whole, oldest
first, whatever ``max_active`` says; a single due slot meets
``max_active``. On SIGTERM it stops starting runs, gives the claims of
queued slots back, and *detaches* the runs still going (they run in
their own session and write their own records); a restarted scheduler,
or ``run-due``, sees them through their records and run locks and
concludes each once it ends: its claim's terminal state and its hook.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Sequence

from hetflow.engine.manifest.cron import _UTC, due_slots, slot_id
from hetflow.engine.errors import ManifestError, UsageError
from hetflow.executors.files import file_stamp
from hetflow.engine.batch.claims import (Entry, check_claimed, check_identities, claim, discover, give_back, history,
                                         load_entry, mark, older_unfinished)
from hetflow.engine.batch.schedule import (Child, Log, NotStarted, _finish, backlogged, defer_hook, fail_start,
                                           locked_out, pass_over, pay_hook, requeue, say_missed, settle, start)

__all__ = ["Server"]


@dataclass
class _Watched:
    entry: Entry | None
    stamp: tuple
    error: str | None = None


@dataclass
class _Queued:
    entry: Entry
    slot: datetime
    claim: str
    backlog: bool = False


class Server:
    """``hetflow schedule serve``: a loop over :meth:`tick`; see the module docstring.

    ``clock`` gives the current instant (a test can move it); ``log(event, fields)``
    receives one call per event.
    """

    def __init__(self, paths: Sequence[str], runs_dir: str, log: Log, poll: float = 5.0,
                 clock: Callable[[], datetime] = lambda: datetime.now(_UTC)) -> None:
        if not 0 < poll <= 86400:  # NaN too: it never compares true, and a scheduler polling never would wait so
            raise UsageError(f"--poll must be more than 0 seconds and at most a day (86400), got {poll}")
        self.paths = list(paths)
        self.runs_dir = runs_dir
        self.log = log
        self.poll = poll
        self.clock = clock
        self.watched: dict[str, _Watched] = {}
        self.running: list[Child] = []
        self.queued: list[_Queued] = []
        self.settled: set[str] = set()
        # what concludes the slots whose runs ended, their hooks run (this scheduler's runs, and runs left by one
        # now gone): per manifest, in order, by a thread of its own while it has any
        self.concluding: dict[str, list[Callable[[], None]]] = {}
        self.paying: set[str] = set()  # the claims whose hooks are queued to run
        self.concluders: dict[str, threading.Thread] = {}
        self.raised: list[BaseException] = []  # what a concluding thread raised, raised again by the loop
        self._guard = threading.Lock()
        self.stopping = False
        self.missing: str | None = None  # the named paths not there at the last scan, as last logged

    def scan(self) -> None:
        """Load new manifests, reload changed ones, forget removed ones."""
        files, missing = [], []
        for path in self.paths:  # one named path gone does not hide the others, nor a file new in a folder
            try:
                files.extend(discover([path]))
            except UsageError as e:
                missing.append(str(e))
        files = list(dict.fromkeys(files))
        problem = "; ".join(missing) or None
        if problem != self.missing:  # said once, not at every poll while it lasts
            if problem:
                self.log("error", {"error": problem})
            self.missing = problem
        for file in list(self.watched):
            if file not in files:
                old = self.watched.pop(file)
                self.log("removed", {"file": file, "manifest": old.entry.name if old.entry else None})
        for file in files:
            try:
                st = os.stat(file)
            except OSError:
                continue
            stamp = file_stamp(st)
            seen = self.watched.get(file)
            if seen is not None and seen.stamp == stamp:
                continue
            try:
                entry = load_entry(file)
                error = None
                if entry is not None:
                    check_identities([w.entry for f, w in self.watched.items() if f != file and w.entry] + [entry])
                    check_claimed(self.runs_dir, entry)
            except ManifestError as e:
                entry, error = None, "; ".join(str(d) for d in e.diagnostics)
            except UsageError as e:
                entry, error = None, f"{file}: {e}"
            self.watched[file] = _Watched(entry, stamp, error)
            if error:
                self.log("invalid", {"file": file, "error": error})
            elif entry is not None:
                nxt = entry.schedule.after(self.clock(), 1)[0]
                self.log("reloaded" if seen is not None else "loaded",
                         {"file": file, "manifest": entry.name, "cron": entry.schedule.cron,
                          "timezone": entry.schedule.timezone, "catchup": entry.schedule.catchup,
                          "max_active": entry.schedule.max_active, "next": slot_id(nxt)})
            elif seen is not None and seen.entry is not None:
                self.log("unscheduled", {"file": file, "manifest": seen.entry.name})

    def _active(self, entry: Entry, slot: datetime, backlog: bool = False, hooks: bool = True,
                older: bool = True) -> bool:
        # Under ``allow`` the live schedule's runs may overlap anything: a backlog's slot waits for the backlog's
        # own runs and for the manifest's lock (a run by hand), not for them, or a schedule whose runs outlast
        # its period would never run its backlog.
        beside = backlog and entry.schedule.max_active == "allow"
        # a slot is active until it is concluded, its hook run: a hook slower than the schedule's period would
        # otherwise pile up its slots' hooks behind it
        return (any(c.entry.name == entry.name and (c.backlog or not beside) for c in self.running)
                or (hooks and not beside and entry.name in self.concluders) or entry.active(self.runs_dir)
                # another scheduler's older slot, still to start or starting, goes first: slots run in order; so does
                # one given back, which this scheduler's decision takes again in its turn (catchup) or passes over
                or (older and older_unfinished(self.runs_dir, entry, slot, returned=entry.schedule.catchup) is not None))

    def _busy(self, entry: Entry, slot: datetime, hooks: bool = True, older: bool = True) -> bool:
        return (self._active(entry, slot, hooks=hooks, older=older)
                or any(q.entry.name == entry.name for q in self.queued))

    def _start(self, entry: Entry, slot: datetime, path: str, backlog: bool = False) -> None:
        try:
            child = start(entry, slot, self.runs_dir, path, backlog=backlog)
        except NotStarted as e:
            fail_start(entry, slot, path, e, self.runs_dir, self.log)
            return
        self.running.append(child)
        self.log("started", {"manifest": entry.name, "slot": slot_id(slot), "pid": child.process.pid})

    def reap(self) -> None:
        for child in list(self.running):
            if child.process.poll() is None:
                continue
            self.running.remove(child)
            if (child.entry.schedule.max_active == "queue" or child.backlog) and locked_out(child):
                self.queued.insert(0, _Queued(child.entry, child.slot, child.claim, child.backlog))
                requeue(child, self.log)
                continue
            self._conclude(child)

    def _conclude(self, child: Child) -> None:
        """Conclude the slot of a run that ended, its hook included, in a thread of its manifest's: a hook may
        take minutes, and every other slot is decided, started and concluded meanwhile (one hook that hung held
        every schedule of the scheduler still, for as long as its time limit). One manifest's slots are
        concluded one after another, in the order their runs ended, so its hooks neither overlap nor pile up."""
        # once it is stopping, the slots still to conclude leave their hooks to the next scheduler
        self._queue(child.entry.name, lambda: _finish(child, self.log, hook=not self.stopping))

    def _later(self, entry: Entry, path: str, owed: bool) -> None:
        """Run the hook a slot concluded by :func:`settle` owes in the manifest's concluding thread, as
        :meth:`_conclude` runs the hooks of this scheduler's own runs: a restarted scheduler finds the slots of the
        runs that ended while it was away, and their hooks would hold every schedule still while they ran."""
        with self._guard:
            if path in self.paying:
                return
            self.paying.add(path)

        def pay() -> None:
            try:
                # another process holding the slot's lock (a run-due settling it too) is waited for: it either
                # pays the hook itself or gives the lock back with the hook still owed
                while not self.stopping and not pay_hook(entry, path, self.runs_dir, self.log, owed=owed):
                    time.sleep(0.1)
                if self.stopping:
                    defer_hook(entry, path, self.log)
            finally:
                with self._guard:
                    self.paying.discard(path)

        self._queue(entry.name, pay)

    def _queue(self, name: str, job: Callable[[], None]) -> None:
        with self._guard:
            self.concluding.setdefault(name, []).append(job)
            if name in self.concluders:
                return
            thread = self.concluders[name] = threading.Thread(target=self._concluder, args=(name,), daemon=True,
                                                              name=f"hetflow-conclude-{name}")
        thread.start()

    def _concluder(self, name: str) -> None:
        while True:
            with self._guard:
                if not self.concluding.get(name):
                    self.concluding.pop(name, None)
                    del self.concluders[name]
                    return
                job = self.concluding[name].pop(0)
            try:
                job()
            except OSError as e:  # as the loop does: a full disk must not end the scheduler
                self.log("error", {"error": f"{type(e).__name__}: {e}"})
            except BaseException as e:
                self.raised.append(e)

    def _concluded(self) -> None:
        """Wait until every slot whose run ended is concluded (a hook ends within its time limit)."""
        while True:
            with self._guard:
                threads = list(self.concluders.values())
            if not threads:
                break
            for thread in threads:
                thread.join()
        if self.raised:
            raise self.raised.pop(0)

    def _start_queued(self) -> None:
        """Start each queued slot, oldest first, whose manifest is idle: one per manifest at a time.

        A slot of a manifest that stopped validating waits, paused with it,
        until it is fixed: started, its run would fail as bad input and run
        ``on_failure`` for a slot the schedule never ran. One whose file is
        gone, no longer scheduled or no longer names its manifest is given
        back, as a stopped ``serve`` gives back its queued slots.
        """
        for item in list(self.queued):
            watched = self.watched.get(item.entry.file)
            if watched is not None and watched.error is not None:
                continue
            if watched is None or watched.entry is None or watched.entry.name != item.entry.name:
                self.queued.remove(item)
                try:
                    give_back(item.claim)
                except OSError as e:
                    self.log("error", {"error": f"{type(e).__name__}: {e}"})
                why = ("its manifest file is gone" if watched is None
                       else "its manifest is no longer scheduled" if watched.entry is None
                       else f"its manifest file now names {watched.entry.name!r}")
                self.log("unqueued", {"manifest": item.entry.name, "slot": slot_id(item.slot), "reason": why})
                continue
            if not self._active(item.entry, item.slot, item.backlog):
                self.queued.remove(item)
                self._start(item.entry, item.slot, item.claim, item.backlog)

    def tick(self) -> None:
        """One round: reap, conclude runs left by a scheduler now gone, start queued slots, decide due slots."""
        if self.raised:
            raise self.raised.pop(0)
        self.reap()
        entries = list({w.entry.name: w.entry for w in self.watched.values() if w.entry is not None}.values())
        for entry in entries:
            settle(entry, self.runs_dir, self.log, self.settled,
                   later=lambda path, owed, e=entry: self._later(e, path, owed))
        self._start_queued()
        now = self.clock()
        for entry in entries:
            done = history(self.runs_dir, entry)
            slots = due_slots(entry.schedule, done, now)
            say_missed(entry, done, slots, self.log)
            pass_over(entry, self.runs_dir, done, slots, now, self.log)
            backlog = backlogged(slots, done)
            for slot in slots:
                path = claim(self.runs_dir, entry, slot)
                fields = {"manifest": entry.name, "slot": slot_id(slot)}
                if path is None:
                    self.log("claimed-elsewhere", fields)
                    continue
                policy = entry.schedule.max_active
                if backlog:
                    mark(path, entry, slot, "queued")
                    self.queued.append(_Queued(entry, slot, path, backlog=True))
                    self.log("queued", {**fields, "reason": "a backlog of missed slots runs one slot after another"})
                elif policy == "allow" or not self._busy(entry, slot):
                    self._start(entry, slot, path)
                elif policy == "skip":
                    older = older_unfinished(self.runs_dir, entry, slot)
                    why = ("a run of this manifest is active" if self._busy(entry, slot, hooks=False, older=False)
                           else f"an older slot of this manifest, {older}, is still to run or running"
                           if older is not None else "the hook of its last slot is running")
                    mark(path, entry, slot, "skipped", reason=why)
                    self.log("skipped", {**fields, "reason": why})
                else:
                    mark(path, entry, slot, "queued")
                    self.queued.append(_Queued(entry, slot, path))
                    self.log("queued", fields)
        self._start_queued()

    def _sleep_for(self) -> float:
        now = self.clock()
        wake = self.poll
        for watched in self.watched.values():
            if watched.entry is not None:
                nxt = watched.entry.schedule.after(now, 1)[0]
                wake = min(wake, (nxt - now).total_seconds() + 0.05)
        if self.running or self.queued or self.concluders:
            wake = min(wake, 0.5)
        return max(wake, 0.05)

    def stop(self, *_: Any) -> None:
        self.stopping = True

    def serve(self, stopped: Callable[[], bool] | None = None) -> None:
        """Run until SIGTERM, SIGINT or SIGHUP (or :meth:`stop`); then give back queued claims and detach.
        ``stopped`` says whether a stop signal came before this was called (while the command started).

        A hangup (the terminal closed, an ssh session dropped) stops it as
        SIGTERM does, unless it was started ignoring SIGHUP (``nohup``),
        as the other commands do (:func:`hetflow.engine.run.cancel.listened`).
        """
        from hetflow.engine.run.cancel import listened

        old = {s: signal.signal(s, self.stop) for s in listened()}
        if stopped is not None and stopped():
            self.stopping = True
        self.log("serving", {"paths": self.paths, "runs_dir": self.runs_dir, "pid": os.getpid(), "poll_s": self.poll})
        try:
            while not self.stopping:
                try:
                    self.scan()
                    self.tick()
                except OSError as e:
                    # A full disk or a runs directory gone for a moment must not end the scheduler.
                    self.log("error", {"error": f"{type(e).__name__}: {e}"})
                deadline = time.monotonic() + self._sleep_for()
                while not self.stopping and time.monotonic() < deadline:
                    time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            self.reap()
            self._concluded()
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
        for item in self.queued:
            try:
                give_back(item.claim)
            except OSError:
                pass
            self.log("unqueued", {"manifest": item.entry.name, "slot": slot_id(item.slot)})
        self.queued.clear()
        for child in self.running:
            self.log("detached", {"manifest": child.entry.name, "slot": slot_id(child.slot), "pid": child.process.pid})
        self.log("stopped", {"detached": len(self.running)})
