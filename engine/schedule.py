"""Scheduled batch runs: the ``schedule:`` block, its slots, ``run-due`` and ``serve``.

A manifest's ``schedule:`` names a cron expression read in an IANA time
zone. Each fire time is a *slot*, identified by its instant in UTC
(``2026-03-29T01:00:00Z``). The scheduler's whole job is to decide, for
each slot, once: run it, skip it, or queue it.

State lives on disk, never only in memory, so any number of schedulers
(cron calling ``run-due`` every minute, a ``serve`` restarted by systemd)
agree:

* the *history* of a manifest is the set of slots that have a **claim**
  (a file ``RUNS_DIR/.schedule/NAME-HASH/SLOT.json``, created with
  ``O_CREAT | O_EXCL`` so exactly one process wins it) or a **record**
  (a run record whose ``schedule.slot`` names it, for this manifest file);
* the *due* slots at instant ``now`` are the fire times after the newest
  slot of the history and at or before ``now``: all of them (at most
  :data:`CATCHUP_LIMIT`, the newest) when ``catchup`` is true, only the
  newest when it is false. A manifest with no history has one due slot,
  its latest fire time; nothing before it is back-filled;
* a due slot is *claimed* before anything else happens; a process that
  loses the claim does nothing with that slot. That is why two
  overlapping ``run-due`` invocations never start a slot twice, and why a
  slot once decided (run, skipped, failed) is never run again: at most
  once, never twice;
* ``max_active`` decides about a claimed slot while a run of the same
  manifest is *active* (its run lock is held by a live process, or
  ``serve`` still waits on a run it started): ``skip`` marks the claim
  skipped, ``queue`` waits for the active run to end and then starts,
  ``allow`` starts at once. An allowed run takes a run lock of its own
  slot (``NAME@SLOT``) instead of the manifest's, so it can run beside
  another.

A slot runs as a normal run in a separate process,
``python -m hetflow.engine.cli run FILE --schedule-slot SLOT -p ...``,
whose record carries ``schedule: {slot, cron, timezone}`` and which
``hetflow runs`` lists like any other. Its output goes to
``SLOT.log`` beside the claim.

:func:`run_due` decides and runs every due slot of the given manifests
and returns. The parts live in four modules: :mod:`hetflow.engine.cron`
(fire times, slots, which are due: pure), :mod:`hetflow.engine.claims`
(scheduled manifests, their history and claims on disk), this one
(starting a slot's run, ``run-due``, ``status``) and
:mod:`hetflow.engine.serve` (the :class:`~hetflow.engine.serve.Server`
loop of ``hetflow schedule serve``).

Examples
--------
>>> s = Schedule("0 0 L * *", "UTC", False, "skip", {})
>>> [slot_id(t) for t in s.after(parse_instant("2026-01-15T00:00:00Z"), 3)]
['2026-01-31T00:00:00Z', '2026-02-28T00:00:00Z', '2026-03-31T00:00:00Z']
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

from hetflow.engine.claims import (  # noqa: F401 - the claims' names are part of this module's API
    Entry,
    claim,
    discover,
    history,
    load_entry,
    lock_active,
    mark,
)
from hetflow.engine.cron import (  # noqa: F401 - the cron names are part of this module's API
    _UTC,
    CATCHUP_LIMIT,
    POLICIES,
    Schedule,
    _slot_file,
    check,
    due_slots,
    from_tree,
    parse_instant,
    slot_id,
    slot_run,
)
from hetflow.engine.errors import Diagnostic, ManifestError, UsageError
from hetflow.engine.records import utc_iso

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
    "run_due",
    "run_hook",
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
    started: float = field(default_factory=time.time)
    runs_dir: str = "runs"


def start(entry: Entry, slot: datetime, runs_dir: str, claim_path: str) -> Child:
    log = claim_path[:-5] + ".log"
    with open(log, "ab") as f:
        # Its own session: a SIGTERM or Ctrl-C meant for the scheduler does not reach the run.
        process = subprocess.Popen(command(entry, slot, runs_dir), stdin=subprocess.DEVNULL, stdout=f,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    mark(claim_path, entry, slot, "started", run_pid=process.pid, log=log)
    return Child(entry, slot, claim_path, process, log, runs_dir=runs_dir)


LOCKED = 4  # hetflow run's exit code when the manifest's run lock is held


def outcome(child: Child) -> dict:
    """What a finished child did: status, run id, error, from its JSON result line."""
    rc = child.process.returncode
    result: dict[str, Any] = {}
    try:
        with open(child.log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    try:
                        result = json.loads(line)
                    except ValueError:
                        pass
    except OSError:
        pass
    status = "succeeded" if rc == 0 else "locked" if rc == LOCKED else "failed"
    run_id = result.get("run_id") or result.get("sweep_id")
    out = {"status": status, "rc": rc, "run_id": run_id, "duration_s": round(time.time() - child.started, 3)}
    if rc != 0:
        out["error"] = result.get("error") or _last_line(child.log)
    return out


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        return lines[-1] if lines else ""
    except OSError:
        return ""


Log = Callable[[str, Mapping[str, Any]], None]


def _finish(child: Child, log: Log) -> dict:
    info = outcome(child)
    state = {"succeeded": "succeeded", "failed": "failed", "locked": "skipped"}[info["status"]]
    extra = {k: v for k, v in info.items() if k != "status"}
    mark(child.claim, child.entry, child.slot, state, **extra)
    event = "skipped" if info["status"] == "locked" else info["status"]
    fields = {"manifest": child.entry.name, "slot": slot_id(child.slot), **extra}
    if event == "skipped":
        fields["reason"] = "another run took the run lock first"
    log(event, fields)
    run_hook(child, info, log)
    return info


HOOK_TIMEOUT_S = 300


def run_hook(child: Child, info: Mapping[str, Any], log: Log) -> int | None:
    """Run the schedule's ``on_success`` or ``on_failure`` command for a finished slot, once; its exit code.

    The command runs through the shell from the manifest's folder, its
    output appended to the slot's log, with the record's path and the
    outcome in its environment (see the schema's ``on_failure``).
    """
    sched = child.entry.schedule
    which = "on_success" if info["status"] == "succeeded" else "on_failure" if info["status"] == "failed" else None
    command = getattr(sched, which) if which else None
    if not command:
        return None
    record = ""
    if info.get("run_id"):
        folder = os.path.join(child.runs_dir, info["run_id"])
        record = next((os.path.abspath(os.path.join(folder, n)) for n in ("record.json", "sweep.json")
                       if os.path.isfile(os.path.join(folder, n))), "")
    env = {**os.environ, "HETFLOW_RECORD": record, "HETFLOW_RUN_ID": info.get("run_id") or "",
           "HETFLOW_STATUS": info["status"], "HETFLOW_MANIFEST": child.entry.name, "HETFLOW_SLOT": slot_id(child.slot),
           "HETFLOW_ERROR": str(info.get("error") or "")}
    with open(child.log, "ab") as f:
        f.write(f"{which}: {command}\n".encode())
        f.flush()
        try:
            rc: int | None = subprocess.run(command, shell=True, cwd=os.path.dirname(os.path.abspath(child.entry.file)),
                                            env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                            timeout=HOOK_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = None
    log("hook", {"manifest": child.entry.name, "slot": slot_id(child.slot), "hook": which,
                 "rc": "timed out" if rc is None else rc})
    return rc


# --- run-due ------------------------------------------------------------------------------------


def run_due(files: Sequence[str], runs_dir: str, now: datetime, log: Log,
            wait: float = 0.5, dry_run: bool = False) -> tuple[dict, list[Diagnostic]]:
    """Decide and run every slot of ``files`` due at ``now``, and return when all have ended.

    ``dry_run`` decides without acting: each due slot is logged as
    ``would-run``, ``would-skip`` or ``would-queue``; nothing is claimed,
    started or written.

    The slots of one manifest run one after another, oldest first; different
    manifests run side by side. ``queue`` waits (polling every ``wait``
    seconds) for the active run to end. Returns counts per outcome and the
    diagnostics of manifests that did not validate (those are left alone;
    the others still run).
    """
    counts = {"started": 0, "succeeded": 0, "failed": 0, "skipped": 0, "claimed_elsewhere": 0, "invalid": 0,
              "would_run": 0, "would_skip": 0, "would_queue": 0}
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
    guard = threading.Lock()

    def locked_log(event: str, fields: Mapping[str, Any]) -> None:
        with guard:
            log(event, fields)

    def count(key: str) -> None:
        with guard:
            counts[key] += 1

    with ThreadPoolExecutor(max_workers=max(1, len(entries))) as pool:
        due = _dry_entry_due if dry_run else _run_entry_due
        for f in [pool.submit(due, e, runs_dir, now, locked_log, count, wait) for e in entries]:
            f.result()
    return counts, problems


def _dry_entry_due(entry: Entry, runs_dir: str, now: datetime, log: Log, count: Callable[[str], None], wait: float) -> None:
    active = entry.schedule.max_active != "allow" and entry.active(runs_dir)
    for slot in due_slots(entry.schedule, history(runs_dir, entry), now):
        fields = {"manifest": entry.name, "slot": slot_id(slot)}
        if active and entry.schedule.max_active == "skip":
            count("would_skip")
            log("would-skip", {**fields, "reason": "a run of this manifest is active"})
        elif active:
            count("would_queue")
            log("would-queue", {**fields, "reason": "a run of this manifest is active"})
        else:
            count("would_run")
            log("would-run", {**fields, "command": " ".join(command(entry, slot, runs_dir)[3:])})


def status(files: Sequence[str], runs_dir: str, now: datetime) -> tuple[list[dict], list[Diagnostic]]:
    """Per scheduled manifest: its last slot and what became of it (the run, its status), and its next slot."""
    from hetflow.engine.runs import iter_entries

    entries, problems = [], []
    for file in files:
        try:
            entry = load_entry(file)
        except ManifestError as e:
            problems.extend(e.diagnostics)
            continue
        if entry is not None:
            entries.append(entry)
    records: dict[str, dict[str, dict]] = {}
    for kind, name, data in iter_entries(runs_dir):
        slot = (data.get("schedule") or {}).get("slot") if kind == "run" else None
        if slot:
            mine = records.setdefault((data.get("manifest") or {}).get("file") or "", {})
            if slot not in mine or (data.get("started_at") or "") > (mine[slot].get("started_at") or ""):
                mine[slot] = data
    rows = []
    for entry in entries:
        done = history(runs_dir, entry)
        last = max(done) if done else None
        row: dict[str, Any] = {"manifest": entry.name, "file": entry.file, "cron": entry.schedule.cron,
                               "last_slot": last, "state": None, "run_id": None, "status": None, "duration_s": None,
                               "active": entry.active(runs_dir),
                               "next_slot": slot_id(entry.schedule.after(now, 1)[0])}
        if last is not None:
            claim_file = os.path.join(entry.claims_dir(runs_dir), _slot_file(parse_instant(last)) + ".json")
            try:
                with open(claim_file, encoding="utf-8") as f:
                    body = json.load(f)
            except (OSError, ValueError):
                body = {}
            row["state"] = body.get("state") or done[last]
            row["run_id"] = body.get("run_id")
            rec = records.get(os.path.abspath(entry.file), {}).get(last)
            if rec is not None:
                row.update(run_id=rec.get("run_id"), status=rec.get("status"), duration_s=rec.get("duration_s"))
        rows.append(row)
    return rows, problems


def _run_entry_due(entry: Entry, runs_dir: str, now: datetime, log: Log, count: Callable[[str], None], wait: float) -> None:
    for slot in due_slots(entry.schedule, history(runs_dir, entry), now):
        path = claim(runs_dir, entry, slot)
        fields = {"manifest": entry.name, "slot": slot_id(slot)}
        if path is None:
            count("claimed_elsewhere")
            log("claimed-elsewhere", fields)
            continue
        policy = entry.schedule.max_active
        if policy != "allow" and entry.active(runs_dir):
            if policy == "skip":
                mark(path, entry, slot, "skipped", reason="a run of this manifest is active")
                count("skipped")
                log("skipped", {**fields, "reason": "a run of this manifest is active"})
                continue
            log("queued", fields)
        while True:
            while policy == "queue" and entry.active(runs_dir):
                time.sleep(wait)
            child = start(entry, slot, runs_dir, path)
            count("started")
            log("started", {**fields, "pid": child.process.pid})
            child.process.wait()
            if child.process.returncode == LOCKED and policy == "queue":
                continue
            info = _finish(child, log)
            count("skipped" if info["status"] == "locked" else info["status"])
            break


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
