"""A scheduled manifest and its state on disk: which manifests, the slots claimed or recorded, the claims.

A schedule's identity is its manifest's ``name`` within a runs directory,
not the file's path: a copy of the file, or the folder moved, continues
the same history and takes the same run lock. Two different files that
claim one name are an error, in one invocation (:func:`check_identities`)
and across invocations (:func:`check_claimed`: the newest claim names the
file it came from).

The *history* of a manifest (:func:`history`) is the set of slots that
have a **claim** (a file ``RUNS_DIR/.schedule/NAME/SLOT.json``, created
with ``O_CREAT | O_EXCL`` so exactly one process wins it, :func:`claim`),
a claim given back before its run ran (``SLOT.returned``,
:func:`give_back`: decided again, in its turn) or a **record** (a run
record whose ``schedule.slot`` names it, for a manifest of this name). A
claim is rewritten as its slot moves on (:func:`mark`: claimed, queued,
starting, started, then one of :data:`TERMINAL`).
The step to a terminal state is taken under ``flock`` of the slot's log
(:func:`settling`), so exactly one process does a slot's book-keeping.
A manifest is *active* while a live process holds the run lock a slot's
run would take: its name with the schedule's resolved params
(:meth:`Entry.active`). :mod:`hetflow.engine.batch.schedule` decides and runs
the due slots; :mod:`hetflow.engine.batch.serve` keeps doing so.

Examples
--------
>>> import tempfile
>>> from hetflow.engine.manifest.cron import Schedule, parse_instant
>>> entry = Entry("nightly.yaml", "nightly", Schedule("0 0 * * *", "UTC", False, "skip", {}))
>>> runs = tempfile.mkdtemp()
>>> slot = parse_instant("2026-01-15T00:00:00Z")
>>> claim(runs, entry, slot) is not None, claim(runs, entry, slot)
(True, None)
>>> history(runs, entry)
{'2026-01-15T00:00:00Z': 'claimed'}
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator, Mapping, Sequence

from hetflow.engine.store import owner
from hetflow.engine.manifest.cron import _UTC, RETURNED, Schedule, _slot_file, from_tree, slot_id
from hetflow.engine.errors import UsageError, name_file
from hetflow.engine.store.records import utc_iso, write_json_atomic

__all__ = ["TERMINAL", "Entry", "discover", "load_entry", "check_identities", "check_claimed", "history", "slot_records", "claim", "claim_body", "mark",
           "give_back", "read_claim", "settling", "lock_active", "older_unfinished"]

#: the states a claim ends in; ``died``: its run, or the scheduler that claimed it, ended without a result
TERMINAL = ("succeeded", "failed", "skipped", "died")


@dataclass(frozen=True)
class Entry:
    """One scheduled manifest: its file, name and schedule, the params its runs resolve to, where its claims go."""

    file: str
    name: str
    schedule: Schedule
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        return self.name

    def claims_dir(self, runs_dir: str) -> str:
        return os.path.join(runs_dir, ".schedule", self.key)

    def legacy_claims_dir(self, runs_dir: str) -> str:
        """Where claims went while a schedule was its file's path (``NAME-HASH``): read for the history only."""
        digest = hashlib.sha256(os.path.abspath(self.file).encode()).hexdigest()[:12]
        return os.path.join(runs_dir, ".schedule", f"{self.name}-{digest}")

    def active(self, runs_dir: str) -> bool:
        """Whether a live process holds the run lock a slot's run would take (this name, these params).

        The one rule of overlap, for runs by hand and scheduled ones alike: a
        run with other params neither blocks a slot nor is blocked by one.
        """
        from hetflow.engine.store.locks import lock_path

        return lock_active(lock_path(runs_dir, self.file, self.name, self.params))

    def running(self, runs_dir: str) -> bool:
        """Whether any run of this schedule is active: :meth:`active`'s, or a slot's run started under ``allow``,
        which holds a lock of its own slot (``NAME@SLOT``, these params) so as to run beside others."""
        from hetflow.engine.store.locks import lock_path

        if self.active(runs_dir):
            return True
        own = os.path.basename(lock_path(runs_dir, self.file, self.name, self.params))
        tail = own[len(self.name):]  # -PARAMS.lock
        folder = os.path.join(runs_dir, ".locks")
        try:
            names = os.listdir(folder)
        except OSError:
            return False
        return any(lock_active(os.path.join(folder, n)) for n in names
                   if n.startswith(self.name + "@") and n.endswith(tail))


def discover(paths: Sequence[str]) -> list[str]:
    """Manifest files named by ``paths``: a file as given, a folder's ``*.yaml``/``*.yml`` (not recursive)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(os.path.join(path, n) for n in sorted(os.listdir(path))
                         if n.endswith((".yaml", ".yml")) and not n.startswith("."))
        elif os.path.exists(path):
            files.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return list(dict.fromkeys(os.path.normpath(f) for f in files))


def load_entry(file: str) -> Entry | None:
    """The scheduled manifest in ``file`` (validated as ``run`` would), or None without ``schedule:``."""
    from hetflow.engine.manifest.validate import compile_manifest, load

    doc = load(file)
    manifest = compile_manifest(doc, {})
    sched = from_tree(doc.value)
    if sched is None:
        return None
    if sched.params:
        manifest = compile_manifest(doc, sched.params)
    return Entry(file, manifest.name, sched, dict(manifest.params))


def check_identities(entries: Sequence[Entry]) -> list[Entry]:
    """The entries with one per name: a copy of a file (same bytes) counts once; two different files
    with one name are a :class:`~hetflow.engine.errors.UsageError` that names both.
    """
    first: dict[str, Entry] = {}
    for entry in entries:
        seen = first.get(entry.name)
        if seen is None:
            first[entry.name] = entry
        elif not _same_text(seen.file, entry.file):
            raise UsageError(f"{seen.file} and {entry.file} both name the manifest {entry.name!r} but differ; a schedule "
                             "is its manifest's name within a runs directory: rename one, or give the same file")
    return list(first.values())


def check_claimed(runs_dir: str, entry: Entry) -> None:
    """Refuse ``entry`` when the newest claim of its name in ``runs_dir`` came from a different file that still claims it.

    The cross-invocation side of :func:`check_identities`: a serve or
    ``run-due`` of one file and another of a different file with the same
    name would otherwise share one history. A file moved or copied (the
    other path gone, or the same bytes), or one that no longer names this
    manifest or has no schedule, hands the history on.
    """
    folder = entry.claims_dir(runs_dir)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith("."))
    except OSError:
        return
    for name in reversed(names):
        other = read_claim(os.path.join(folder, name)).get("manifest")
        if other:
            break
    else:
        return
    ours = os.path.abspath(entry.file)
    if other == ours or not os.path.isfile(other) or _same_text(other, ours):
        return
    try:
        theirs = load_entry(other)
    except Exception:  # noqa: BLE001 - a file that no longer loads claims nothing
        return
    if theirs is not None and theirs.name == entry.name:
        raise UsageError(f"{entry.file} and {other} both name the manifest {entry.name!r} but differ, and {other} "
                         f"already keeps its schedule in {runs_dir}; a schedule is its manifest's name within a runs "
                         "directory: rename one, or give the same file")


def _same_text(a: str, b: str) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def history(runs_dir: str, entry: Entry) -> dict[str, str]:
    """Slot id -> state for every slot of ``entry`` claimed, given back (:data:`RETURNED`) or recorded in
    ``runs_dir``."""
    done: dict[str, str] = {}
    for folder in (entry.legacy_claims_dir(runs_dir), entry.claims_dir(runs_dir)):
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            stem, _, kind = name.partition(".")
            if kind not in ("json", "returned"):
                continue
            try:
                slot = slot_id(datetime.strptime(stem, "%Y%m%dT%H%M%SZ").replace(tzinfo=_UTC))
            except ValueError:
                continue
            if kind == "json":
                done[slot] = "claimed"
            else:
                done.setdefault(slot, RETURNED)  # a claim beside it is the newer word
    # The records of slots before the newest claimed one decide nothing (the due slots come after the newest
    # decided slot; a given-back one is its claim's): read, they made every decision read every run of the
    # runs directory, every tick of a long-lived serve.
    decided = [k for k, v in done.items() if v != RETURNED]
    for slot, data in slot_records(runs_dir, entry.name, since=max(decided) if decided else None).items():
        done[slot] = data.get("status") or "recorded"
    return done


def slot_records(runs_dir: str, name: str, since: str | None = None) -> dict[str, dict]:
    """Slot id -> the newest run record of that slot, for the manifest ``name``.

    Only the folders of runs of ``name`` are read, told by their names; with ``since`` (a slot id), only
    those of runs begun after an hour before it (a slot's run begins at its slot or later, but for a run by
    hand of a slot still to come). A slot whose run is a sweep has the sweep as its record, read from its
    summary (:func:`hetflow.engine.store.runs.sweep_record`): its outcome is the sweep's, not its newest
    point's, which may have succeeded after another point failed, or before the sweep was killed.
    """
    from hetflow.engine.store.runs import LISTED, SWEEP_FOLDER, read_fields, run_folders, sweep_record

    found: dict[str, dict] = {}

    def keep(slot: str, data: dict) -> None:
        if slot not in found or (data.get("started_at") or "") > (found[slot].get("started_at") or ""):
            found[slot] = data

    points: dict[str, tuple[str, dict]] = {}  # sweep id -> the slot of its points, and one point's record
    for folder in run_folders(runs_dir, name, since=since):
        # the fields a slot's outcome is read from, not each record's plan and events: cron asks every minute
        data = read_fields(os.path.join(runs_dir, folder, "record.json"), LISTED + ("schedule", "error"))
        slot = ((data or {}).get("schedule") or {}).get("slot")
        if slot and (data.get("manifest") or {}).get("name") == name:
            sweep = (data.get("matrix_point") or {}).get("sweep")
            if isinstance(sweep, str) and sweep:
                points.setdefault(sweep, (slot, data))
            else:
                keep(slot, data)
    sweeps = dict.fromkeys(run_folders(runs_dir, name, since=since, pattern=SWEEP_FOLDER))
    sweeps.update(points)  # a summary written before sweeps said their slot: its points say it
    for sweep_id, told in sweeps.items():
        data = sweep_record(runs_dir, sweep_id)
        if data is None:
            if told is not None:
                keep(*told)  # no summary to read: the slot is what its points' runs say
            continue
        slot = (data.get("schedule") or {}).get("slot") or (told[0] if told else None)
        if slot and data["manifest"]["name"] == name:
            keep(slot, data)
    return found


def claim(runs_dir: str, entry: Entry, slot: datetime, state: str = "claimed") -> str | None:
    """Claim ``slot`` for this process: the claim's path, or None when another process has it."""
    folder = entry.claims_dir(runs_dir)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, _slot_file(slot) + ".json")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)  # less the umask, as any file the user writes
    except FileExistsError:
        return None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(claim_body(entry, slot, state), f)
    except BaseException as e:
        # a claim its disk would not take whole is no claim: the slot stays open for the next decision
        os.unlink(path)
        name_file(e, path)
        raise
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path[:-5] + ".returned")  # a slot given back, taken again
    return path


def give_back(path: str) -> bool:
    """Give the claim at ``path`` back undecided, its run never ran: it becomes ``SLOT.returned`` (:data:`RETURNED`
    in the history), which the next decision takes again in its turn; whether this call did."""
    try:
        os.replace(path, path[:-5] + ".returned")
    except FileNotFoundError:
        return False
    return True


def claim_body(entry: Entry, slot: datetime, state: str, **more: Any) -> dict:
    """What a claim file holds: the slot, the manifest, the state, and which process on which host wrote it."""
    return {"slot": slot_id(slot), "manifest": os.path.abspath(entry.file), "state": state, **owner.current(),
            "at": utc_iso(time.time()), **more}


def mark(path: str, entry: Entry, slot: datetime, state: str, **more: Any) -> None:
    """Rewrite the claim at ``path`` with ``state`` (``started``, ``succeeded``, ``skipped``...) and ``more``."""
    write_json_atomic(path, claim_body(entry, slot, state, **more))


def read_claim(path: str) -> dict:
    """The body of the claim at ``path``; empty when it is gone or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


@contextlib.contextmanager
def settling(path: str) -> Iterator[dict | None]:
    """Hold the right to move the claim at ``path`` on; yields its body, or None when another process holds it.

    The right is ``flock`` on the slot's log (created if need be), a file
    that is only ever appended to, never replaced, so every process locks
    the same inode. Whoever holds it rereads the claim and moves it on only
    from a state that is not :data:`TERMINAL`: a slot is concluded, and its
    hook run, exactly once however many processes try at once.
    """
    fd = os.open(path[:-5] + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield read_claim(path)
    finally:
        os.close(fd)  # closing drops the flock


#: a claim's states while its scheduler has yet to start its slot's run
WAITING = ("claimed", "queued", "starting")

#: claim path -> (its file's identity, its body), for the claims that are concluded: read once, not at every look
_concluded: dict[str, tuple[tuple[int, int, int], dict]] = {}


def older_unfinished(runs_dir: str, entry: Entry, slot: datetime, returned: bool = False) -> str | None:
    """The oldest slot of ``entry`` before ``slot`` whose run a live scheduler has yet to start, or whose run still
    runs; None when there is none.

    Slots run in the order of their fire times, however many schedulers
    share the runs directory: a slot does not start while an older one
    waits its turn in another scheduler (a backlog two of them share, a
    ``serve`` beside a cron'd ``run-due``), nor while an older one's run
    is starting and has not taken the run lock yet. A run started under
    ``allow`` for the live schedule runs beside the others and holds back
    none. A claim whose scheduler is gone holds back nothing: the next
    decision gives it back and takes it again in its turn. With
    ``returned``, a slot given back (``SLOT.returned``) holds it back too,
    for a scheduler whose next decision takes it (``serve``).
    """
    folder = entry.claims_dir(runs_dir)
    before = _slot_file(slot)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith((".json", ".returned")) and not n.startswith(".")
                       and n.split(".")[0] < before)
    except OSError:
        return None
    for name in names:
        if name.endswith(".returned"):
            if returned:
                return read_claim(os.path.join(folder, name)).get("slot") or name.split(".")[0]
            continue
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        seen = _concluded.get(path)
        if seen is not None and seen[0] == stamp:
            continue
        body = read_claim(path)
        state = body.get("state")
        if state in TERMINAL:
            _concluded[path] = (stamp, body)
            continue
        if state in WAITING and owner.alive(body) is True:
            return body.get("slot") or name[:-5]
        if state == "started" and owner.alive(body.get("run_owner")) is True and (
                entry.schedule.max_active != "allow" or body.get("requeue")):
            return body.get("slot") or name[:-5]
    return None


def lock_active(path: str) -> bool:
    """Whether a live process holds the run lock at ``path``, read from the holder it wrote.

    Reading, not trying the lock, so that probing never makes a starting run see the lock held.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        holder = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return False
    if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
        return False
    return owner.alive(holder) is not False  # another host's holder cannot be looked at: taken as live
