"""Scheduled batch runs: the ``schedule:`` block, its slots, ``run-due`` and ``serve``.

A manifest's ``schedule:`` names a cron expression read in an IANA time
zone. Each fire time is a *slot*, identified by its instant in UTC
(``2026-03-29T01:00:00Z``). The scheduler's whole job is to decide, for
each slot, once: run it, skip it, or queue it.

State lives on disk, never only in memory, so any number of schedulers
(cron calling ``run-due`` every minute, a ``serve`` restarted by systemd)
agree:

* a schedule is its manifest's ``name`` within a runs directory: a copy
  of the file continues the same history;
* the *history* of a manifest is the set of slots that have a **claim**
  (a file ``RUNS_DIR/.schedule/NAME/SLOT.json``, created with
  ``O_CREAT | O_EXCL`` so exactly one process wins it) or a **record**
  (a run record whose ``schedule.slot`` names it, for this manifest name);
* the *due* slots at instant ``now`` are the fire times after the newest
  slot of the history and at or before ``now``: all of them (at most
  :data:`CATCHUP_LIMIT`, the newest) when ``catchup`` is true, only the
  newest when it is false. A manifest with no history has one due slot,
  its latest fire time; nothing before it is back-filled;
* a due slot is *claimed* before anything else happens; a process that
  loses the claim does nothing with that slot. That is why two
  overlapping ``run-due`` invocations never start a slot twice, and why a
  slot once decided (run, skipped, failed) is never run again: at most
  once, never twice. The one exception is asked for: ``run-due`` with an
  explicit ``--now`` that is exactly a fire time whose slot failed or
  died runs that slot again
  (:func:`retry_claim`), for Airflow's retries and a rerun by hand;
* more than one slot due at one decision is a *backlog* (``catchup``
  after downtime): its slots run one after another, oldest first, each
  waiting for any active run, whatever ``max_active`` says;
* ``max_active`` decides about a single due slot (the live schedule)
  while a run of the same manifest is *active* (the run lock the slot's
  run would take, its name and resolved params, is held by a live
  process, or ``serve`` still waits on a run it started or queued):
  ``skip`` marks the claim skipped, ``queue`` waits for the active run to
  end and then starts, ``allow`` starts at once. An allowed run takes a
  run lock of its own slot (``NAME@SLOT``) instead of the manifest's, so
  it can run beside another;
* a slot is *concluded* once its run ends: the claim moves to a terminal
  state and its hook runs, under the slot's ``flock``
  (:func:`~hetflow.engine.batch.claims.settling`), so exactly once. The process
  that started the run concludes it; when that process is gone (a
  ``serve`` stopped or killed while the run went on), the next ``serve``
  or ``run-due`` does (:func:`settle`), from the run's record: a run that
  died, or never wrote a record, concludes ``died`` and runs
  ``on_failure``.

A slot runs as a normal run in a separate process,
``python -m hetflow.engine.cli run FILE --schedule-slot SLOT -p ...``,
whose record carries ``schedule: {slot, cron, timezone}`` and which
``hetflow runs`` lists like any other. Its output goes to
``SLOT.log`` beside the claim.

:func:`run_due` decides and runs every due slot of the given manifests
and returns. The parts live in four modules: :mod:`hetflow.engine.manifest.cron`
(fire times, slots, which are due: pure), :mod:`hetflow.engine.batch.claims`
(scheduled manifests, their history and claims on disk), this one
(starting a slot's run, ``run-due``, ``status``) and
:mod:`hetflow.engine.batch.serve` (the :class:`~hetflow.engine.batch.serve.Server`
loop of ``hetflow schedule serve``).

Examples
--------
>>> s = Schedule("0 0 L * *", "UTC", False, "skip", {})
>>> [slot_id(t) for t in s.after(parse_instant("2026-01-15T00:00:00Z"), 3)]
['2026-01-31T00:00:00Z', '2026-02-28T00:00:00Z', '2026-03-31T00:00:00Z']
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Sequence

from hetflow.engine.store import owner
from hetflow.engine.batch.claims import (  # noqa: F401 - the claims' names are part of this module's API
    TERMINAL,
    Entry,
    check_claimed,
    check_identities,
    claim,
    discover,
    give_back,
    history,
    load_entry,
    lock_active,
    mark,
    older_unfinished,
    read_claim,
    settling,
    slot_records,
)
from hetflow.engine.manifest.cron import (  # noqa: F401 - the cron names are part of this module's API
    RETURNED,
    _UTC,
    CATCHUP_LIMIT,
    POLICIES,
    Schedule,
    _slot_file,
    check,
    due_slots,
    from_tree,
    parse_instant,
    passed_over,
    past_catchup,
    slot_id,
    slot_run,
)
from hetflow.engine.errors import Diagnostic, ManifestError, UsageError
from hetflow.engine.store.records import utc_iso

__all__ = [
    "CATCHUP_LIMIT",
    "Schedule",
    "Entry",
    "check",
    "from_tree",
    "slot_id",
    "parse_instant",
    "discover",
    "load_entry",
    "history",
    "due_slots",
    "claim",
    "conclude",
    "NotStarted",
    "fail_start",
    "settle",
    "pay_hook",
    "defer_hook",
    "retry_claim",
    "run_due",
    "run_hook",
    "requeue",
    "say_missed",
    "pass_over",
    "status",
    "format_event",
]


# --- starting a slot's run ------------------------------------------------------------------------


def command(entry: Entry, slot: datetime, runs_dir: str) -> list[str]:
    """The ``hetflow run`` command line of one slot."""
    argv = [sys.executable, "-m", "hetflow.engine.cli", "run", entry.file, "--runs-dir", runs_dir,
            "--schedule-slot", slot_id(slot), "--quiet", "--json"]
    for key, value in entry.schedule.params.items():
        argv += ["-p", f"{key}={json.dumps(value)}"]
    return argv


@dataclass
class Child:
    """A slot's run in its own process."""

    entry: Entry
    slot: datetime
    claim: str
    process: subprocess.Popen
    log: str
    started: float = field(default_factory=time.monotonic)  # for its duration, which a stepped wall clock does not move
    runs_dir: str = "runs"
    backlog: bool = False


def start(entry: Entry, slot: datetime, runs_dir: str, claim_path: str, backlog: bool = False,
          requeue: bool | None = None) -> Child:
    """Start the run of ``slot`` in its own process. ``requeue``: a start that finds the run lock taken waits
    for its turn (``queue``, a backlog) rather than being skipped; said in the claim, for whoever concludes it."""
    log = claim_path[:-5] + ".log"
    tries = read_claim(claim_path).get("tries")
    if requeue is None:
        requeue = backlog or entry.schedule.max_active == "queue"
    more = {**({"tries": tries} if tries else {}), **({"requeue": True} if requeue else {})}
    # Said before the run's process exists: a claim still ``claimed`` or ``queued`` whose scheduler is gone
    # never had a run, and is given back (:func:`settle`); one ``starting`` may have had one, and is not.
    mark(claim_path, entry, slot, "starting", **more)
    try:
        with open(log, "ab") as f:
            # Its own session: a SIGTERM or Ctrl-C meant for the scheduler does not reach the run.
            process = subprocess.Popen(command(entry, slot, runs_dir), stdin=subprocess.DEVNULL, stdout=f,
                                       stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        mark(claim_path, entry, slot, "claimed", **more)
        raise NotStarted(e) from e
    except BaseException:
        mark(claim_path, entry, slot, "claimed", **more)
        raise
    # the run's own identity, so that a later scheduler can tell whether it still runs once this one is gone
    run_owner = {**owner.current(), "pid": process.pid, "start_ticks": owner.start_ticks(process.pid)}
    mark(claim_path, entry, slot, "started", run_pid=process.pid, run_owner=run_owner, log=log, **more)
    return Child(entry, slot, claim_path, process, log, runs_dir=runs_dir, backlog=backlog)


class NotStarted(Exception):
    """The process of a slot's run could not be made (no file descriptors or processes left, the interpreter
    gone from under a long-lived ``serve``): ``error`` is the ``OSError``."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def fail_start(entry: Entry, slot: datetime, path: str, error: NotStarted, runs_dir: str, log: Log) -> dict:
    """Conclude the slot whose run could not be started: ``failed``, saying why, with its ``on_failure``.

    Its claim would otherwise stay ``claimed`` for as long as its scheduler
    lives, the slot decided and never run. ``run-due --now SLOT`` reruns it.
    """
    cause = error.error
    info = {"status": "failed", "run_id": None, "rc": None,
            "error": f"its run could not be started: {cause.strerror or cause}"
                     + (f": {cause.filename}" if getattr(cause, "filename", None) else "")}
    conclude(entry, slot, path, info, runs_dir, log)
    return info


LOCKED = 4  # hetflow run's exit code when the manifest's run lock is held


def outcome(child: Child) -> dict:
    """What a finished child did: status, run id, error, from its JSON result line."""
    rc = child.process.returncode
    result = _result_line(child.log)
    status = "succeeded" if rc == 0 else "locked" if locked_out(child) else "failed"
    run_id = result.get("run_id") or result.get("sweep_id")
    out = {"status": status, "rc": rc, "run_id": run_id, "duration_s": round(time.monotonic() - child.started, 3)}
    if rc != 0:
        # a run that could not start says its category in ``error`` (bad-input) and what was wrong in ``message``
        # a result object's own error (a run's, a sweep's with its points), else an error object's message
        out["error"] = ((result.get("message") if result.get("status") == "error" else None) or result.get("error")
                        or result.get("message") or _last_line(child.log))
    if rc is not None and rc < 0:
        # killed: after its result line too (the OOM killer, a crash at the interpreter's exit), when the line
        # said one thing and the record another, or the record was finished after the line
        killed = _killed(child, -rc)
        if not result or killed.get("run_id") is not None:
            out.update(killed)
            if out["status"] == "succeeded":
                out.pop("error", None)
    return out


def _killed(child: Child, signum: int) -> dict:
    """What a run killed by signal ``signum`` (SIGKILL, the OOM killer) before it said its result left: its record
    names the outcome if the run finished it, else the slot ``died``, as it does when its scheduler is gone."""
    from hetflow.engine.store.runs import status_of

    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    record = slot_records(child.runs_dir, child.entry.name, since=slot_id(child.slot)).get(slot_id(child.slot))
    if record is None or (record.get("owner") or {}).get("pid") != child.process.pid:
        return {"status": "died", "error": f"its run was killed by {name} before it wrote a record"}
    ended = _ended({}, record) or {"status": "died"}
    if ended["status"] == "died":
        ended["error"] = f"its run was killed by {name} before it finished its record"
    return {**ended, "run_id": record.get("run_id"), "rc": -signum}


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        return lines[-1] if lines else ""
    except OSError:
        return ""


Log = Callable[[str, Mapping[str, Any]], None]


def _finish(child: Child, log: Log, hook: bool = True) -> dict:
    info = outcome(child)
    conclude(child.entry, child.slot, child.claim, info, child.runs_dir, log, hook=hook)
    return info


_STATE = {"succeeded": "succeeded", "failed": "failed", "locked": "skipped", "died": "died"}


def conclude(entry: Entry, slot: datetime, path: str, info: Mapping[str, Any], runs_dir: str, log: Log,
             detached: bool = False, hook: bool = True, later: Callable[[str, bool], None] | None = None) -> bool:
    """Move the claim at ``path`` to the terminal state of ``info`` and run the slot's hook; whether this call did.

    Exactly once per run: under the slot's ``flock``, and only from a
    claim that is not terminal yet, so a second process that tries (a
    restarted ``serve`` and a ``run-due`` settling the same detached run)
    does nothing. ``detached`` marks a run concluded by a process other
    than the one that started it. Without ``hook`` (a ``serve`` that is
    stopping), the claim says its hook is still owed, and the next
    scheduler runs it (``hook-owed``). With ``later``, the hook is not
    run here: ``later(path, False)`` is called once the slot's lock is
    given up, to run it (:func:`pay_hook`, which takes that lock), as
    ``serve`` does in a thread of the manifest's; the claim says it is
    owed meanwhile.
    """
    handed = False
    with settling(path) as body:
        if body is None or body.get("state") in TERMINAL:
            return False
        extra = {k: v for k, v in info.items() if k != "status"}
        kept = {k: body[k] for k in ("run_pid", "run_owner", "log", "tries") if k in body}
        # the hook is owed until it has run: whoever settles a claim whose concluder died mid-hook runs it
        found = _hook_command(entry, info["status"])
        owed = {"hook": "pending"} if found else {}
        mark(path, entry, slot, _STATE[info["status"]], **{**kept, **extra, **owed})
        event = "skipped" if info["status"] == "locked" else info["status"]
        fields = {"manifest": entry.name, "slot": slot_id(slot), **extra}
        if event == "skipped":
            fields["reason"] = "another run took the run lock first"
        if detached:
            fields["detached"] = True
        log(event, fields)
        if owed and not hook:
            log("hook-deferred", {"manifest": entry.name, "slot": slot_id(slot), "hook": found[0],
                                  "reason": "the scheduler is stopping: the next one runs it"})
        elif owed and later is not None:
            handed = True
        elif owed:
            fields = {**kept, **extra}
            try:
                rc = _hook(entry, slot, path[:-5] + ".log", runs_dir, info, log,
                           running=lambda how: mark(path, entry, slot, _STATE[info["status"]],
                                                    **{**fields, **owed, **how}))
            except HookNotStarted:
                return True  # the claim says it is owed: the next scheduler runs it
            mark(path, entry, slot, _STATE[info["status"]], **{**fields, **_hook_outcome(entry, slot, rc, log)})
            _forget_exit(path)
    if handed:
        later(path, False)
    return True


def pay_hook(entry: Entry, path: str, runs_dir: str, log: Log, owed: bool = True) -> bool:
    """Run the hook of a terminal claim that says its hook is owed; whether it is settled now (False while another
    process holds the slot's lock). ``owed``: its concluder ended before the hook had run (``hook-owed``), rather
    than leaving it to this process (``conclude``'s ``later``)."""
    with settling(path) as body:
        if body is None:
            return False  # its concluder is still at it
        if body.get("hook") != "pending":
            return True
        slot = parse_instant(body["slot"])
        status = body["state"]
        info = {"status": status, **{k: body[k] for k in ("run_id", "error") if k in body}}
        written = {"slot", "manifest", "state", "at", "hook", "hook_rc", "hook_process", "hook_started",
                   *owner.current()}
        rest = {k: v for k, v in body.items() if k not in written}
        outlived = _outlived_hook(entry, body, path, log)
        if outlived is False:
            return False  # the hook its concluder began runs on, that concluder gone: its end is waited for
        if outlived is not None:
            mark(path, entry, slot, status, **{**rest, "hook": "ran", "hook_rc": outlived[0]})
            _forget_exit(path)
            return True
        if owed:
            log("hook-owed", {"manifest": entry.name, "slot": body["slot"], "detached": True,
                              "reason": "the process that concluded the slot ended before its hook had run"})
        try:
            rc = _hook(entry, slot, path[:-5] + ".log", runs_dir, info, log,
                       running=lambda how: mark(path, entry, slot, status, **{**rest, "hook": "pending", **how}))
        except HookNotStarted:
            return True  # still owed, as the claim says: the next scheduler runs it
        mark(path, entry, slot, status, **{**rest, **_hook_outcome(entry, slot, rc, log)})
        _forget_exit(path)
        return True


#: the signals a terminal, ``timeout`` or ``kill -- -PGID`` send a scheduler's whole process group
_GROUP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def _hook_outcome(entry: Entry, slot: datetime, rc: int | None, log: Log) -> dict[str, Any]:
    """What a claim says of a hook that ended with ``rc``: ran, with its exit code; or still owed, where its shell
    was ended by a signal its scheduler's process group receives whole (a Ctrl-C, a SIGTERM to the group): the
    hook was cut short with its scheduler, not run, and the next scheduler runs it again."""
    if rc is not None and rc < 0 and -rc in _GROUP_SIGNALS:
        log("hook-deferred", {"manifest": entry.name, "slot": slot_id(slot),
                              "reason": f"the hook was ended by {signal.Signals(-rc).name} with its scheduler: "
                                        "the next one runs it again"})
        return {"hook": "pending"}
    return {"hook": "ran", "hook_rc": rc}


def _outlived_hook(entry: Entry, body: Mapping[str, Any], path: str, log: Log) -> tuple[int | None] | bool | None:
    """What became of the hook a claim says was running when its scheduler ended (``hook_process``).

    Its scheduler's death (SIGKILL, the OOM killer) does not end it: it
    runs on, its own process. So it is not run a second time beside or
    after itself. While it runs (or cannot be looked at, on another
    host) this is False: wait. Past the hooks' time limit it is ended with
    every process it started, as its scheduler would have ended it. Once
    it has ended, ``(its exit code,)`` (None when it was ended for its
    time), from the file its shell wrote as it exited. None when there is
    nothing to wait for or take: no hook was begun, or it was cut short
    before it could say how it ended (its process group killed, a
    reboot), and it runs again from the start.
    """
    process = body.get("hook_process")
    if not isinstance(process, Mapping) or not isinstance(process.get("pid"), int) or isinstance(process["pid"], bool):
        return None  # no process it can look at: waited for, it would be waited for for ever
    found = _hook_command(entry, body.get("state") or "")
    which = found[0] if found else "hook"
    alive = owner.alive(process)
    if alive is None:
        return False
    if alive:
        started = _epoch(body.get("hook_started"))
        started = started if started is not None else _epoch(body.get("at"))  # the claim's rewrite, just after
        if started is None or time.time() - started <= HOOK_TIMEOUT_S:
            return False
        _end_tree(process["pid"])
        rc: int | None = None
    else:
        rc = _read_exit(path)
        if rc is None:
            return None
    log("hook", {"manifest": entry.name, "slot": body.get("slot"), "hook": which,
                 "rc": "timed out" if rc is None else rc, "outlived_its_scheduler": True})
    return (rc,)


def _epoch(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _exit_path(claim_path: str) -> str:
    """Where a hook's shell writes its exit code as it exits (``SLOT.hook-exit``), beside the slot's claim."""
    return claim_path[:-5] + ".hook-exit"


def _read_exit(claim_path: str) -> int | None:
    try:
        with open(_exit_path(claim_path), encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _forget_exit(claim_path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_exit_path(claim_path))


def defer_hook(entry: Entry, path: str, log: Log) -> None:
    """Leave the hook a terminal claim owes to the next scheduler (``hook-deferred``): this one is stopping."""
    body = read_claim(path)
    found = _hook_command(entry, body.get("state") or "")
    if body.get("hook") == "pending" and found is not None:
        log("hook-deferred", {"manifest": entry.name, "slot": body.get("slot"), "hook": found[0],
                              "reason": "the scheduler is stopping: the next one runs it"})


def settle(entry: Entry, runs_dir: str, log: Log, known: set[str] | None = None,
           later: Callable[[str, bool], None] | None = None) -> list[dict]:
    """Conclude the slots of ``entry`` whose starter is gone and whose run has ended; what each ended as.

    A claim still ``claimed``, ``queued``, ``starting`` or ``started`` is
    left alone while the process that wrote it lives (it concludes the slot
    itself), while that process is on another host (it cannot be looked at
    from here), and while the run it started still runs (a detached run).
    A slot whose scheduler is gone before it began to start its run
    (``claimed``, ``queued``) is given back, as a stopped ``serve`` gives
    back its queued slots (:func:`give_back`): the next decision takes it
    again, with ``catchup: true`` in its turn. Otherwise the slot ends as
    its newest record says (``died`` for a ``running`` record whose owner
    is gone), or ``died`` when no record was written. ``known`` collects
    the claims seen terminal, which need no second look. With ``later``,
    no hook runs here: ``later(path, owed)`` is given each slot whose hook
    is to run (see :func:`conclude`), a slot whose concluder ended before
    its hook had run with ``owed`` true.
    """
    folder = entry.claims_dir(runs_dir)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []
    records: dict[str, dict] | None = None
    done = []
    for name in names:
        path = os.path.join(folder, name)
        if known is not None and path in known:
            continue
        body = read_claim(path)
        if body.get("state") in TERMINAL:
            if body.get("hook") == "pending" and owner.alive(body) is False:
                if later is not None:
                    later(path, True)
                elif not pay_hook(entry, path, runs_dir, log):
                    continue
            if known is not None:
                known.add(path)
            continue
        if not body.get("slot") or owner.alive(body) is not False:
            continue
        if body.get("state") == "started" and owner.alive(_run_owner(body)) is not False:
            continue
        if records is None:  # the claims go oldest first: runs begun before this one's slot name none of them
            records = slot_records(runs_dir, entry.name, since=body["slot"])
        if records.get(body["slot"]) is None:
            if body.get("state") in UNSTARTED:
                _give_back(entry, path, log)
                continue
            if body.get("state") == "starting" and _may_be_starting(entry, body, runs_dir):
                continue
            if body.get("state") == "started" and _locked_out(body.get("log") or ""):
                # its run found the run lock taken and ran nothing: it waits its turn, or was skipped
                if body.get("requeue"):
                    _give_back(entry, path, log, states=("started",))
                    continue
                if conclude(entry, parse_instant(body["slot"]), path, {"status": "locked"}, runs_dir, log,
                            detached=True, later=later):
                    done.append({"status": "locked"})
                continue
        info = _ended(body, records.get(body["slot"]))
        if info is not None and conclude(entry, parse_instant(body["slot"]), path, info, runs_dir, log, detached=True,
                                         later=later):
            done.append(info)
    return done


#: a claim's states before its scheduler began to start the slot's run
UNSTARTED = ("claimed", "queued")


def _give_back(entry: Entry, path: str, log: Log, states: Sequence[str] = UNSTARTED) -> None:
    """Give back the claim at ``path`` of a slot whose scheduler ended before the slot's run ran: before it began
    to start it, or after a start that found the run lock taken."""
    with settling(path) as body:
        if body is None or body.get("state") not in states or owner.alive(body) is not False:
            return  # another process is at it, or the slot was claimed again meanwhile
        if not give_back(path):
            return
        log("unqueued", {"manifest": entry.name, "slot": body["slot"], "detached": True,
                         "reason": "the scheduler that claimed it ended before its run ran; it is decided again"})


def _take_back(entry: Entry, runs_dir: str, slot: datetime, log: Log) -> bool:
    """Give back the claim of ``slot`` when the scheduler that claimed it ended before starting its run (a
    ``run-due`` killed while it waited its turn beside this one): whether it is given back, for this process
    to claim it in its turn rather than pass over it and run the slots after it first."""
    path = os.path.join(entry.claims_dir(runs_dir), _slot_file(slot) + ".json")
    body = read_claim(path)
    if body.get("state") not in UNSTARTED or owner.alive(body) is not False:
        return False
    _give_back(entry, path, log)
    return not os.path.exists(path)


def requeue(child: Child, log: Log) -> None:
    """Put the slot of ``child``, whose run found the run lock taken and ran nothing (:func:`locked_out`), back in
    the queue: its claim ``queued`` again and a ``queued`` line that says why, so that its ``started`` line is not
    the log's last word on a process that never ran the slot."""
    tries = read_claim(child.claim).get("tries")
    mark(child.claim, child.entry, child.slot, "queued", **({"tries": tries} if tries else {}))
    log("queued", {"manifest": child.entry.name, "slot": slot_id(child.slot), "pid": child.process.pid,
                   "reason": LOCKED_OUT})


#: why a slot whose run was started is queued again
LOCKED_OUT = "its run found the run lock taken by another run of this manifest and ran nothing; it waits its turn"


def locked_out(child: Child) -> bool:
    """Whether a slot's run ended at once because another run held the run lock, having run nothing: exit 4 and a
    result that says so. A sweep whose point alone found its lock taken exits 4 too, after its other points ran:
    that slot ran, and failed, and is neither skipped nor started again."""
    return child.process.returncode == LOCKED and _locked_out(child.log)


def _locked_out(log: str) -> bool:
    """Whether the newest start of a slot's run ended at once because another run held the run lock (exit 4,
    the result line its log, at path ``log``, ends with)."""
    result = _result_line(log)
    return result.get("exit_code") == LOCKED and result.get("error") == "locked"


def _result_line(path: str) -> dict:
    """The last JSON result line (``hetflow run --json``) in a slot's log; empty when there is none."""
    result: dict = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    try:
                        result = json.loads(line)
                    except ValueError:
                        pass
    except OSError:
        pass
    return result if isinstance(result, dict) else {}


#: how long a run's process may take from its start to its record (Python's start, the manifest's load)
STARTING_S = 60.0


def _may_be_starting(entry: Entry, body: Mapping[str, Any], runs_dir: str) -> bool:
    """Whether the slot of a ``starting`` claim whose scheduler is gone may have a run that has not written its
    record yet: one holds the manifest's run lock, or the claim is younger than :data:`STARTING_S`."""
    try:
        age = time.time() - parse_instant(body["at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        age = STARTING_S
    return age < STARTING_S or entry.active(runs_dir)


def _run_owner(body: Mapping[str, Any]) -> dict:
    if isinstance(body.get("run_owner"), dict):
        return body["run_owner"]
    # a claim written before it named its run's owner: the pid, on the starter's host and boot
    return {"host": body.get("host"), "pid": body.get("run_pid"), "boot_id": body.get("boot_id")}


def _ended(body: Mapping[str, Any], record: Mapping[str, Any] | None) -> dict | None:
    """What a slot whose starter is gone ended as, from its claim and newest record; None while it may still run."""
    from hetflow.engine.store.runs import status_of

    if record is not None:
        status = status_of(record)
        info = {"run_id": record.get("run_id"), "rc": None}
        if status == "succeeded":
            return {"status": "succeeded", **info}
        if status in ("failed", "cancelled"):
            return {"status": "failed", **info, "error": (record.get("error") or {}).get("message")
                    if isinstance(record.get("error"), dict) else record.get("error") or status}
        if status == "died":
            return {"status": "died", **info, "error": "its run died: the process ended without finishing its record"}
        return None
    if body.get("state") == "started":
        return {"status": "died", "run_id": None, "rc": None, "error": "its run ended without writing a record"}
    return {"status": "died", "run_id": None, "rc": None,
            "error": "the scheduler that started it ended before it could name its run, and no run wrote a record"}


def retry_claim(runs_dir: str, entry: Entry, slot: datetime) -> str | None:
    """Take the claim of ``slot`` back for a new run when its run failed or died: its path, or None.

    The step from ``failed`` or ``died`` to ``claimed`` is taken under the
    slot's ``flock``, so of two retries at once one reruns the slot.
    """
    path = os.path.join(entry.claims_dir(runs_dir), _slot_file(slot) + ".json")
    if not os.path.isfile(path):
        return None
    with settling(path) as body:
        if body is None or body.get("state") not in ("failed", "died"):
            return None
        mark(path, entry, slot, "claimed", tries=int(body.get("tries") or 1) + 1, log=body.get("log"))
    return path


HOOK_TIMEOUT_S = 300


def run_hook(child: Child, info: Mapping[str, Any], log: Log) -> int | None:
    """Run the schedule's ``on_success`` or ``on_failure`` command for a finished slot; its exit code.

    The command runs through the shell from the manifest's folder, its
    output appended to the slot's log, with the record's path and the
    outcome in its environment (see the schema's ``on_failure``).
    ``on_failure`` runs for a slot that failed or died. :func:`conclude`
    calls it once per run.
    """
    return _hook(child.entry, child.slot, child.log, child.runs_dir, info, log)


def _hook_command(entry: Entry, status: str) -> tuple[str, str] | None:
    """(which hook, its command) that a slot ending as ``status`` runs; None when there is none."""
    which = "on_success" if status == "succeeded" else "on_failure" if status in ("failed", "died") else None
    command = getattr(entry.schedule, which) if which else None
    return (which, command) if command else None


# The hook's command runs in a shell of its own, as ``/bin/sh -c COMMAND`` would run it; the shell around it
# writes its exit code beside the claim as it exits, so that a scheduler killed meanwhile is not the only one
# that can learn how the hook ended (see _outlived_hook).
_HOOK_SHELL = '/bin/sh -c "$1"; rc=$?; printf "%s\\n" "$rc" > "$2.tmp" && mv -f "$2.tmp" "$2"; exit "$rc"'


def _hook(entry: Entry, slot: datetime, log_path: str, runs_dir: str, info: Mapping[str, Any], log: Log,
          running: Callable[[dict], None] | None = None) -> int | None:
    """Run the hook a slot ending as ``info["status"]`` runs, if any; its exit code (None past its time limit).
    ``running`` is given the hook's process once it is started (``hook_process``, ``hook_started``), for the
    claim to say while it runs."""
    found = _hook_command(entry, info["status"])
    if found is None:
        return None
    which, command = found
    record = ""
    if info.get("run_id"):
        folder = os.path.join(runs_dir, info["run_id"])
        record = next((os.path.abspath(os.path.join(folder, n)) for n in ("record.json", "sweep.json")
                       if os.path.isfile(os.path.join(folder, n))), "")
    env = {**os.environ, "HETFLOW_RECORD": record, "HETFLOW_RUN_ID": info.get("run_id") or "",
           "HETFLOW_STATUS": info["status"], "HETFLOW_MANIFEST": entry.name, "HETFLOW_SLOT": slot_id(slot),
           "HETFLOW_ERROR": str(info.get("error") or "")}
    folder = os.path.dirname(os.path.abspath(entry.file))
    with open(log_path, "ab") as f:
        f.write(f"{which}: {command}\n".encode())
        f.flush()
        exit_path = _exit_path(log_path[:-4] + ".json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(exit_path)  # a run before this one's, cut short
        try:
            process = subprocess.Popen(["/bin/sh", "-c", _HOOK_SHELL, "hetflow-hook", command, exit_path],
                                       cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=f,
                                       stderr=subprocess.STDOUT)
        except OSError as e:
            # its folder moved or removed while the slot ran, no processes or file descriptors left: the hook
            # stays owed rather than lost, and the scheduler goes on
            why = (f"the manifest's folder {folder} is gone" if not os.path.isdir(folder)
                   else f"its process could not be made: {e.strerror or e}")
            f.write(f"{which} not started: {why}\n".encode())
            log("hook-deferred", {"manifest": entry.name, "slot": slot_id(slot), "hook": which,
                                  "reason": f"{why}: the next scheduler of the manifest runs it"})
            raise HookNotStarted(why) from e
        rc: int | None = None
        try:
            if running is not None:
                running({"hook_process": owner.of(process.pid), "hook_started": utc_iso(time.time())})
            rc = process.wait(timeout=HOOK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if rc is None:  # timed out, or its scheduler was interrupted
                _end_tree(process.pid)
                process.wait()
    log("hook", {"manifest": entry.name, "slot": slot_id(slot), "hook": which, "rc": "timed out" if rc is None else rc})
    return rc


class HookNotStarted(Exception):
    """A slot's hook whose process could not be made (its manifest's folder gone, no processes left): it stays
    owed (``hook: pending``) for the next scheduler, which logs ``hook-owed`` and runs it."""


def _end_tree(pid: int) -> None:
    """Kill a hook's shell and every process it started. The shell alone, killed, left its commands running with
    no one to end them. Each is stopped as it is found, so that none starts another between the look and the
    kill; the hook stays in its scheduler's process group, which a terminal's signals and a reboot reach whole."""
    found: set[int] = set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGSTOP)
    for _ in range(5):
        more = [child for child in owner.descendants(pid) if child not in found]
        if not more:
            break
        for child in more:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGSTOP)
        found.update(more)
    for each in [pid, *found]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(each, signal.SIGKILL)


# --- run-due ------------------------------------------------------------------------------------


def run_due(files: Sequence[str], runs_dir: str, now: datetime, log: Log,
            wait: float = 0.5, dry_run: bool = False, retry: bool = False) -> tuple[dict, list[Diagnostic]]:
    """Decide and run every slot of ``files`` due at ``now``, and return when all have ended.

    ``dry_run`` decides without acting: each due slot is logged as
    ``would-run``, ``would-skip`` or ``would-queue``; nothing is claimed,
    started or written.

    First the slots whose starter is gone are concluded (:func:`settle`),
    again once a slot has waited for such a run, and last before returning.
    The slots of one manifest run one after another, oldest first; different
    manifests run side by side. ``queue``, and every slot of a backlog, waits
    (polling every ``wait`` seconds) for the active run to end. ``retry``
    (``--now`` given) also reruns the slot ``now`` names, when ``now`` is
    exactly one of its fire times, if that slot's run failed or died. Returns counts per
    outcome and the diagnostics of manifests that did not validate (those
    are left alone; the others still run). Two different files that name
    one manifest are a :class:`UsageError`.
    """
    counts = {"started": 0, "succeeded": 0, "failed": 0, "died": 0, "skipped": 0, "claimed_elsewhere": 0, "invalid": 0,
              "would_run": 0, "would_skip": 0, "would_queue": 0, "settled": 0, "retried": 0}
    problems: list[Diagnostic] = []
    entries = []
    for file in files:
        try:
            entry = load_entry(file)
        except ManifestError as e:
            problems.extend(e.diagnostics)
            counts["invalid"] += 1
            continue
        except UsageError as e:
            problems.append(Diagnostic(None, f"{file}: {e}"))
            counts["invalid"] += 1
            continue
        if entry is not None:
            entries.append(entry)
    entries = check_identities(entries)
    claimed = []
    for entry in entries:
        try:
            check_claimed(runs_dir, entry)
        except UsageError as e:
            problems.append(Diagnostic(None, str(e)))
            counts["invalid"] += 1
            continue
        claimed.append(entry)
    entries = claimed
    guard = threading.Lock()

    def locked_log(event: str, fields: Mapping[str, Any]) -> None:
        with guard:
            log(event, fields)

    def count(key: str) -> None:
        with guard:
            counts[key] += 1

    with ThreadPoolExecutor(max_workers=max(1, len(entries))) as pool:
        due = _dry_entry_due if dry_run else _run_entry_due
        for f in [pool.submit(due, e, runs_dir, now, locked_log, count, wait, retry) for e in entries]:
            problems.extend(f.result() or ())
    return counts, problems


def _dry_entry_due(entry: Entry, runs_dir: str, now: datetime, log: Log, count: Callable[[str], None], wait: float,
                   retry: bool = False) -> None:
    done = history(runs_dir, entry)
    slots = due_slots(entry.schedule, done, now)
    say_missed(entry, done, slots, log, event="would-miss")
    pass_over(entry, runs_dir, done, slots, now, log, dry_run=True)
    policy = _policy(entry, slots, done)
    active = policy != "allow" and entry.active(runs_dir)
    for slot in slots:
        fields = {"manifest": entry.name, "slot": slot_id(slot)}
        if active and policy == "skip":
            count("would_skip")
            log("would-skip", {**fields, "reason": "a run of this manifest is active"})
        elif active:
            count("would_queue")
            log("would-queue", {**fields, "reason": "a run of this manifest is active"})
        else:
            count("would_run")
            log("would-run", {**fields, "command": " ".join(command(entry, slot, runs_dir)[3:])})


def say_missed(entry: Entry, done: Mapping[str, str], slots: Sequence[datetime], log: Log,
               event: str = "missed") -> None:
    """Log ``missed`` when the due ``slots`` leave out fire times after the newest decided one (a downtime longer
    than the catch-up's :data:`CATCHUP_LIMIT` fire times): they are never run, and nothing else would say so."""
    gap = past_catchup(entry.schedule, done, list(slots))
    if gap is not None:
        log(event, {"manifest": entry.name, "after": gap[0], "before": gap[1],
                       "reason": f"the fire times between are not run: a catch-up runs the newest {len(slots)}"})


def pass_over(entry: Entry, runs_dir: str, done: Mapping[str, str], slots: Sequence[datetime], now: datetime,
              log: Log, dry_run: bool = False) -> None:
    """Conclude the slots given back that the decision of ``slots`` leaves out for good (:func:`passed_over`): each
    is claimed and ``skipped``, its claim saying it was missed and why, with a ``missed`` line naming it
    (``would-miss`` with ``dry_run``, which writes nothing). Left as given back, a slot no decision takes again
    was called overdue by ``status`` for ever, and one a catch-up's limit cut ran a decision later, out of
    its turn."""
    for key in passed_over(entry.schedule, done, list(slots), now):
        why = ("it was given back before its run ran, and " + (
            f"a catch-up runs the newest {len(slots)} fire times, which are all after it" if entry.schedule.catchup
            else "with catchup: false only the latest fire time runs") + ": it is never run")
        fields = {"manifest": entry.name, "slot": key, "reason": why}
        if dry_run:
            log("would-miss", fields)
            continue
        slot = parse_instant(key)
        path = claim(runs_dir, entry, slot)
        if path is None:
            continue  # another scheduler decided it first
        mark(path, entry, slot, "skipped", reason=why, missed=True)
        log("missed", fields)


def _policy(entry: Entry, slots: Sequence[datetime], done: Mapping[str, str]) -> str:
    """``max_active`` for a single due slot; a backlog (more than one, or a slot given back) is always queued, one
    slot after another."""
    return "queue" if backlogged(slots, done) else entry.schedule.max_active


def backlogged(slots: Sequence[datetime], done: Mapping[str, str]) -> bool:
    """Whether the due ``slots`` of the history ``done`` are a backlog: more than one, or one given back
    (:data:`RETURNED`), the rest of a backlog whose scheduler ended, which waits its turn as the backlog would
    have and is not skipped for a live run."""
    return len(slots) > 1 or any(done.get(slot_id(t)) == RETURNED for t in slots)


GRACE_S = 300.0


def status(files: Sequence[str], runs_dir: str, now: datetime,
           grace: float = GRACE_S) -> tuple[list[dict], list[Diagnostic]]:
    """Per scheduled manifest: its last slot and what became of it (the run, its status), and its next slot.

    ``overdue`` names the newest fire time more than ``grace`` seconds
    before ``now`` when no claim or record has it yet (no scheduler decided
    it), else None.
    """
    from hetflow.engine.store.runs import status_of

    entries, problems = [], []
    for file in files:
        try:
            entry = load_entry(file)
        except ManifestError as e:
            problems.extend(e.diagnostics)
            continue
        if entry is not None:
            entries.append(entry)
    rows = []
    for entry in check_identities(entries):
        done = history(runs_dir, entry)
        last = max(done) if done else None
        row: dict[str, Any] = {"manifest": entry.name, "file": entry.file, "cron": entry.schedule.cron,
                               "last_slot": last, "state": None, "run_id": None, "status": None, "duration_s": None,
                               "active": entry.running(runs_dir),
                               "next_slot": slot_id(entry.schedule.after(now, 1)[0]), "overdue": None}
        expected = slot_id(entry.schedule.latest(now - timedelta(seconds=grace), 1)[0])
        decided = [k for k, v in done.items() if v != RETURNED]
        # a slot given back is overdue while a decision would still take it: not one it passes over for good
        due = {slot_id(t) for t in due_slots(entry.schedule, done, now)}
        returned = sorted(k for k, v in done.items() if v == RETURNED and k in due)
        if not decided or expected > max(decided):
            row["overdue"] = expected
        elif returned and returned[0] <= expected:
            row["overdue"] = returned[0]  # given back, and no scheduler has taken it again since
        if last is not None:
            claim_file = os.path.join(entry.claims_dir(runs_dir), _slot_file(parse_instant(last)) + ".json")
            try:
                with open(claim_file, encoding="utf-8") as f:
                    body = json.load(f)
            except (OSError, ValueError):
                body = {}
            row["state"] = body.get("state") or done[last]
            row["run_id"] = body.get("run_id")
            rec = slot_records(runs_dir, entry.name, since=last).get(last)
            if rec is not None:
                row.update(run_id=rec.get("run_id"), status=status_of(rec), duration_s=rec.get("duration_s"))
        rows.append(row)
    return rows, problems


def _run_entry_due(entry: Entry, runs_dir: str, now: datetime, log: Log, count: Callable[[str], None], wait: float,
                   retry: bool = False) -> list[Diagnostic]:
    _settle(entry, runs_dir, log, count)
    named = entry.schedule.latest(now, 1)[0]
    if retry and named == now:
        path = retry_claim(runs_dir, entry, named)
        if path is not None:
            count("retried")
            log("retrying", {"manifest": entry.name, "slot": slot_id(named)})
            _run_slot(entry, named, path, entry.schedule.max_active, runs_dir, log, count, wait)
    done = history(runs_dir, entry)
    slots = due_slots(entry.schedule, done, now)
    say_missed(entry, done, slots, log)
    pass_over(entry, runs_dir, done, slots, now, log)
    wrong: list[Diagnostic] = []
    for slot in slots:
        path = claim(runs_dir, entry, slot)
        if path is None and _take_back(entry, runs_dir, slot, log):
            path = claim(runs_dir, entry, slot)
        if path is None:
            count("claimed_elsewhere")
            log("claimed-elsewhere", {"manifest": entry.name, "slot": slot_id(slot)})
            continue
        try:
            _run_slot(entry, slot, path, _policy(entry, slots, done), runs_dir, log, count, wait, recheck=True)
        except _NoLongerValid as e:
            # the slots after it are not claimed: the next decision, once the file is fixed, takes them in turn
            count("invalid")
            wrong = e.diagnostics
            break
    # a detached run of a scheduler that is gone may have ended while these slots ran
    _settle(entry, runs_dir, log, count)
    return wrong


class _NoLongerValid(Exception):
    """The manifest of a slot about to start no longer validates, or no longer schedules that manifest."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("; ".join(str(d) for d in diagnostics))
        self.diagnostics = diagnostics


def _still_valid(entry: Entry) -> list[Diagnostic]:
    """What is wrong with ``entry``'s file as it is now (empty when it still schedules the manifest): read again
    before each slot's run starts, since a backlog, or a slot that waits its turn, may outlast an edit."""
    try:
        now = load_entry(entry.file)
    except ManifestError as e:
        return list(e.diagnostics)
    except (UsageError, OSError) as e:
        return [Diagnostic(None, f"{entry.file}: {e}")]
    if now is None:
        return [Diagnostic(None, f"{entry.file} has no schedule: block any more")]
    if now.name != entry.name:
        return [Diagnostic(None, f"{entry.file} now names the manifest {now.name!r}, not {entry.name!r}")]
    return []


def _settle(entry: Entry, runs_dir: str, log: Log, count: Callable[[str], None]) -> None:
    for _ in settle(entry, runs_dir, log):
        count("settled")


def _settle_detached(entry: Entry, runs_dir: str, log: Log, count: Callable[[str], None], within: float = 5.0) -> None:
    """Conclude the slot of a detached run that was just waited for, before the next slot starts.

    Its run lock is given back a moment before its process ends, and a slot
    is concluded only once its run's process is gone: wait for that, at most
    ``within`` seconds (a detached run beside it, under ``allow``, ends when it ends).
    """
    deadline = time.monotonic() + within
    while True:
        _settle(entry, runs_dir, log, count)
        if not _detached_running(entry, runs_dir) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _detached_running(entry: Entry, runs_dir: str) -> bool:
    """Whether a slot of ``entry`` started by a scheduler that is gone still has its run's process."""
    folder = entry.claims_dir(runs_dir)
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if not name.endswith(".json"):
            continue
        body = read_claim(os.path.join(folder, name))
        if (body.get("state") == "started" and owner.alive(body) is False
                and owner.alive(_run_owner(body)) is True):
            return True
    return False


def _run_slot(entry: Entry, slot: datetime, path: str, policy: str, runs_dir: str, log: Log,
              count: Callable[[str], None], wait: float, recheck: bool = False) -> None:
    """Run the claimed ``slot`` under ``policy``. ``recheck``: first read the manifest again, and give the claim
    back (raising :class:`_NoLongerValid`) where it no longer validates: its run would fail as bad input and run
    ``on_failure`` for a slot the schedule never ran."""
    fields = {"manifest": entry.name, "slot": slot_id(slot)}
    older = None if policy == "allow" or entry.active(runs_dir) else older_unfinished(runs_dir, entry, slot)
    if policy != "allow" and (older is not None or entry.active(runs_dir)):
        if policy == "skip":
            why = (f"an older slot of this manifest, {older}, is still to run or running" if older is not None
                   else "a run of this manifest is active")
            mark(path, entry, slot, "skipped", reason=why)
            count("skipped")
            log("skipped", {**fields, "reason": why})
            return
        log("queued", fields)
    while True:
        # in slot order: another scheduler's older slot (a backlog two share) starts first, though the lock is free
        if policy == "queue" and (entry.active(runs_dir) or older_unfinished(runs_dir, entry, slot)):
            while entry.active(runs_dir) or older_unfinished(runs_dir, entry, slot):
                time.sleep(wait)
            _settle_detached(entry, runs_dir, log, count)
        wrong = _still_valid(entry) if recheck else []
        if wrong:
            give_back(path)
            log("unqueued", {**fields, "reason": f"its manifest no longer validates: {wrong[0]}"})
            raise _NoLongerValid(wrong)
        try:
            child = start(entry, slot, runs_dir, path, requeue=policy == "queue")
        except NotStarted as e:
            fail_start(entry, slot, path, e, runs_dir, log)
            count("failed")
            return
        count("started")
        log("started", {**fields, "pid": child.process.pid})
        child.process.wait()
        if policy == "queue" and locked_out(child):
            # Another scheduler's run took the lock between the look and the start (run-due beside run-due on one
            # backlog): this process ran nothing, and the log says so before the slot starts again in its turn.
            requeue(child, log)
            continue
        info = _finish(child, log)
        count("skipped" if info["status"] == "locked" else info["status"])
        return


def format_event(event: str, fields: Mapping[str, Any], fmt: str = "text", at: float | None = None) -> str:
    """One log line: ``TIME EVENT key=value ...`` or a JSON object with ``ts`` and ``event``.

    >>> format_event("started", {"manifest": "m", "slot": "2026-01-01T00:00:00Z"}, at=0)
    '1970-01-01T00:00:00.000Z started manifest=m slot=2026-01-01T00:00:00Z'
    """
    ts = utc_iso(time.time() if at is None else at)
    if fmt == "json":
        return json.dumps({"ts": ts, "event": event, **fields}, default=str)
    parts = []
    for k, v in fields.items():
        if v is None:
            continue
        text = v if isinstance(v, str) else json.dumps(v, default=str)
        parts.append(f"{k}={json.dumps(text) if (' ' in text or not text) else text}")
    return " ".join([ts, event, *parts])
