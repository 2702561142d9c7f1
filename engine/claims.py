"""A scheduled manifest and its state on disk: which manifests, the slots claimed or recorded, the claims.

The *history* of a manifest (:func:`history`) is the set of slots that
have a **claim** (a file ``RUNS_DIR/.schedule/NAME-HASH/SLOT.json``,
created with ``O_CREAT | O_EXCL`` so exactly one process wins it,
:func:`claim`) or a **record** (a run record whose ``schedule.slot``
names it, for this manifest file). A claim is rewritten as its slot
moves on (:func:`mark`: started, succeeded, failed, skipped). A manifest
is *active* while a live process holds one of its run locks
(:func:`lock_active`). :mod:`hetflow.engine.schedule` decides and runs
the due slots; :mod:`hetflow.engine.serve` keeps doing so.

Examples
--------
>>> import tempfile
>>> from hetflow.engine.cron import Schedule, parse_instant
>>> entry = Entry("nightly.yaml", "nightly", Schedule("0 0 * * *", "UTC", False, "skip", {}))
>>> runs = tempfile.mkdtemp()
>>> slot = parse_instant("2026-01-15T00:00:00Z")
>>> claim(runs, entry, slot) is not None, claim(runs, entry, slot)
(True, None)
>>> history(runs, entry)
{'2026-01-15T00:00:00Z': 'claimed'}
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from hetflow.engine import owner
from hetflow.engine.cron import _UTC, Schedule, _slot_file, from_tree, slot_id
from hetflow.engine.errors import UsageError
from hetflow.engine.records import utc_iso, write_json_atomic

__all__ = ["Entry", "discover", "load_entry", "history", "claim", "claim_body", "mark", "lock_active"]


@dataclass(frozen=True)
class Entry:
    """One scheduled manifest: its file, name and schedule, and where its claims go."""

    file: str
    name: str
    schedule: Schedule

    @property
    def key(self) -> str:
        digest = hashlib.sha256(os.path.abspath(self.file).encode()).hexdigest()[:12]
        return f"{self.name}-{digest}"

    def claims_dir(self, runs_dir: str) -> str:
        return os.path.join(runs_dir, ".schedule", self.key)

    def active(self, runs_dir: str) -> bool:
        """Whether a live process holds a run lock of this manifest, with any params."""
        from hetflow.engine.locks import manifest_locks

        return any(lock_active(path) for path in manifest_locks(runs_dir, self.file, self.name))


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
    from hetflow.engine.manifest import compile_manifest, load

    doc = load(file)
    manifest = compile_manifest(doc, {})
    sched = from_tree(doc.value)
    if sched is None:
        return None
    if sched.params:
        compile_manifest(doc, sched.params)
    return Entry(file, manifest.name, sched)


def history(runs_dir: str, entry: Entry) -> dict[str, str]:
    """Slot id -> state for every slot of ``entry`` claimed or recorded in ``runs_dir``."""
    from hetflow.engine.runs import iter_entries

    done: dict[str, str] = {}
    folder = entry.claims_dir(runs_dir)
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if name.endswith(".json"):
                try:
                    slot = datetime.strptime(name[:-5], "%Y%m%dT%H%M%SZ").replace(tzinfo=_UTC)
                except ValueError:
                    continue
                done[slot_id(slot)] = "claimed"
    me = os.path.abspath(entry.file)
    for kind, _, data in iter_entries(runs_dir):
        slot = (data.get("schedule") or {}).get("slot") if kind == "run" else None
        if slot and (data.get("manifest") or {}).get("file") == me:
            done[slot] = data.get("status") or "recorded"
    return done


def claim(runs_dir: str, entry: Entry, slot: datetime, state: str = "claimed") -> str | None:
    """Claim ``slot`` for this process: the claim's path, or None when another process has it."""
    folder = entry.claims_dir(runs_dir)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, _slot_file(slot) + ".json")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)  # less the umask, as any file the user writes
    except FileExistsError:
        return None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(claim_body(entry, slot, state), f)
    return path


def claim_body(entry: Entry, slot: datetime, state: str, **more: Any) -> dict:
    """What a claim file holds: the slot, the manifest, the state, and which process on which host wrote it."""
    return {"slot": slot_id(slot), "manifest": os.path.abspath(entry.file), "state": state, **owner.current(),
            "at": utc_iso(time.time()), **more}


def mark(path: str, entry: Entry, slot: datetime, state: str, **more: Any) -> None:
    """Rewrite the claim at ``path`` with ``state`` (``started``, ``succeeded``, ``skipped``...) and ``more``."""
    write_json_atomic(path, claim_body(entry, slot, state, **more))


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
