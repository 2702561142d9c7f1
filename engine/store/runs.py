"""The runs directory: records, sweeps, listing, naming, garbage collection.

``RUNS_DIR`` holds one folder per run (``record.json`` and outputs), one
folder per matrix sweep (``sweep.json``, one row per point naming the run
of that point), ``.cache/`` (the partition cache) and ``.locks/``.

**State.** A record or summary that says ``running`` is true only while
its owner process lives (:mod:`hetflow.engine.store.owner`); every reader shows
what :func:`status_of` says, so a run killed outright reads ``died``, and
a sweep's rows that say ``running`` read ``died`` with it
(:func:`sweep_view`). Nothing on disk is rewritten for that.

**Names.** :func:`resolve_id` reads the names users type, one rule for
every command and the Python API, tried in this order:

1. a folder name: the run or sweep of that id; or a path to the folder
   (``runs/ID``, ``runs/ID/``, ``runs/ID/record.json``, as a shell
   completes it) inside the runs directory;
2. ``latest``: the newest run, verification runs left out; where a sweep
   is taken as well (``runs show``, ``runs table``, ``report``,
   ``--resume``) and that run is a point of a sweep, that sweep.
   ``latest-run``, ``latest-sweep`` and ``latest-verification`` name the
   newest of each;
3. a point name ``NAME[k=v,...]``, as ``hetflow runs`` lists it: the
   newest run of that point, verification runs left out;
4. a prefix of an id, or of its random part (the last four hex digits of
   ``20261204T184920Z-quickstart-da94c102-6bbe``, or the digest with
   them, ``da94c102-6bbe``), that matches one entry alone.

**Garbage.** :func:`collect_garbage` works in units: a sweep with every
run of its points, or a run alone, each with the verification runs of
its runs. ``--keep N`` keeps the newest N units of each manifest (a
verification run never counts), ``--older-than`` removes units started
before an age; a unit that still runs is never removed. A folder whose
record cannot be read goes by age alone, or with the sweep that lists it.
Then the cache
entries no kept run uses, the lock files no process holds and the
schedule claims of removed runs go.

:func:`manifest_from_record` rebuilds the exact manifest a record ran
(its resolved, fully concrete form), which is what ``verify`` and
``--resume`` run again.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import secrets
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from hetflow.engine.store import owner
from hetflow.executors.payload import loads_exact
from hetflow.engine.errors import EnvironmentUnavailable, UsageError, argument, refuse_file_in_the_way
from hetflow.engine.heap import gc_paused
from hetflow.engine.store.clock import utc_iso

if TYPE_CHECKING:
    from hetflow.engine.manifest.validate import Manifest

__all__ = [
    "SWEEP_FORMAT",
    "LATEST",
    "NoSuchRun",
    "owner_of",
    "status_of",
    "sweep_view",
    "resolve_id",
    "read_record",
    "parse_since",
    "iter_entries",
    "list_runs",
    "manifest_from_record",
    "new_sweep",
    "write_sweep",
    "collect_garbage",
    "latest_record",
    "read_fields",
    "json_text",
]

SWEEP_FORMAT = 2


def _read_json(path: str) -> dict | None:
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return None
    try:
        # orjson's parse, a fifth of json's time (a listing reads every record), json's for what orjson would not
        # keep as written: NaN and Infinity, which an older record may hold, and integers beyond 64 bits
        data = loads_exact(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_fields(path: str, keys: Iterable[str]) -> dict | None:
    """Top-level ``keys`` of the JSON object in file ``path`` (those it has), or None when it is unreadable.

    A record is written one top-level key per line
    (:func:`hetflow.engine.store.records.dumps_record`), and its values hold no
    raw newline, so a key's value is the rest of its line: only the values
    asked for are parsed (the earlier record of a 100,000-stage run is
    44 MB of JSON, its ``cache`` a tenth of it). A file in any other
    layout, or a line that does not parse, is parsed whole.

    >>> import tempfile
    >>> from hetflow.engine.store.records import write_json_atomic
    >>> path = os.path.join(tempfile.mkdtemp(), "record.json")
    >>> write_json_atomic(path, {"status": "succeeded", "plan": {"nodes": {}}, "cache": {"hits": ["p0"]}})
    >>> read_fields(path, ["cache", "status", "outputs"])
    {'cache': {'hits': ['p0']}, 'status': 'succeeded'}
    >>> with open(path, "w") as f:
    ...     json.dump({"status": "failed", "cache": None}, f, indent=4)
    >>> read_fields(path, ["status", "cache"])
    {'status': 'failed', 'cache': None}
    """
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return None
    if text.startswith(b'{\n  "') and text.endswith(b"\n}\n"):
        found = {}
        try:
            with gc_paused():  # a resolved manifest is 100,000 dicts: the GC would walk them as they are made
                for key, head in _heads(tuple(keys)):
                    at = text.find(head)
                    if at < 0:
                        continue
                    start = at + len(head)
                    value = text[start:text.index(b"\n", start)]
                    found[key] = _parse(value[:-1] if value.endswith(b",") else value)
            return found
        except ValueError:
            pass
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return {k: data[k] for k in keys if k in data} if isinstance(data, dict) else None


@functools.lru_cache(maxsize=16)
def _heads(keys: tuple[str, ...]) -> tuple[tuple[str, bytes], ...]:
    """Each key with the start of its line in a record: ``\\n  "key": ``."""
    return tuple((key, b'\n  ' + json.dumps(key).encode() + b': ') for key in keys)


def _parse(value: bytes) -> Any:
    # json's parse where orjson would not keep a value as written (NaN, the infinities, long integers), or for
    # what is not JSON: ValueError
    return loads_exact(value)


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON text that every JSON parser reads, for a command's ``--json`` (and ``runs table
    --format json``).

    A record keeps a NaN or an infinity (a param of ``.nan``, an output that
    overflowed) as Python's ``json`` writes it, ``NaN`` or ``Infinity``,
    which is not JSON: ``jq`` and JavaScript's ``JSON.parse`` refuse the
    whole document over one such value. Here each is the string of that
    word (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), as the record and a
    point's name spell it.

    >>> json_text({"lr": float("nan"), "span": [float("-inf"), 1.5, "x"]})
    '{"lr": "NaN", "span": ["-Infinity", 1.5, "x"]}'
    """
    try:
        return json.dumps(value, indent=indent, allow_nan=False)
    except ValueError:  # a value holds a NaN or an infinity: only then is it walked
        return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        if value != value:
            return "NaN"
        return value if abs(value) != float("inf") else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class NoSuchRun(UsageError):
    """No run or sweep has the name given (exit 2)."""


def owner_of(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The process that wrote a run record or sweep summary: its ``owner``, or, for a record written before
    that key, the hostname and pid of its ``host`` (enough to tell a process that is gone).

    >>> owner_of({"host": {"hostname": "h", "pid": 7, "user": "u"}})
    {'host': 'h', 'pid': 7}
    >>> owner_of({"owner": {"host": "h", "pid": 8}, "host": {"hostname": "h", "pid": 7}})
    {'host': 'h', 'pid': 8}
    """
    if isinstance(data.get("owner"), Mapping):
        return data["owner"]
    host = data.get("host")
    if isinstance(host, Mapping) and isinstance(host.get("pid"), int):
        return {"host": host.get("hostname"), "pid": host["pid"]}
    return None


def status_of(data: Mapping[str, Any]) -> str | None:
    """The status every reader shows for a run record or sweep summary: ``died`` for one that says
    ``running`` while its owner process is known to be gone (see :func:`hetflow.engine.store.owner.state_of`).

    >>> import socket
    >>> gone = {"host": socket.gethostname(), "pid": 2**30}  # beyond any pid the kernel gives
    >>> status_of({"status": "running", "owner": gone}), status_of({"status": "failed", "owner": gone})
    ('died', 'failed')
    >>> status_of({"status": "running", "owner": owner.current()})
    'running'
    """
    return owner.state_of(data.get("status"), owner_of(data))


def sweep_view(summary: Mapping[str, Any], runs_dir: str | None = None) -> dict:
    """A sweep summary as readers show it: when its owner process is gone, the sweep and each point that
    still says ``running`` read ``died``, but for a point whose run (in ``runs_dir``, when given) ended: that
    point reads as its run's record says. There, a point whose row names no run while a run of it is on disk
    (:func:`unnamed_runs`) reads as that run.

    The summary is written in its own thread, a moment behind the points (:mod:`hetflow.engine.batch.sweeps`):
    a sweep killed in that moment leaves a row ``running`` whose run has finished its record.

    A point whose row says ``succeeded`` while its run's record is gone (its folder removed) reads
    ``missing``: nothing is left of what the row names; one whose record cannot be read reads
    ``unreadable``. A point that ended reads as its run's record says where that says otherwise: the
    record is what the run left. A disk that refused a run's last record leaves it ``running``, so that
    it reads ``died`` once the sweep's process is gone, and a run resumed on its own after the sweep may
    have succeeded since.

    >>> import socket
    >>> view = sweep_view({"status": "running", "owner": {"host": socket.gethostname(), "pid": 2**30},
    ...                    "points": [{"status": "succeeded"}, {"status": "running"}, {"status": "pending"}]})
    >>> view["status"], [p["status"] for p in view["points"]]
    ('died', ['succeeded', 'died', 'pending'])
    """
    view = dict(summary)
    gone = owner.alive(owner_of(summary)) is False
    if gone and view.get("status") == "running":
        view["status"] = owner.DIED
    found = unnamed_runs(runs_dir, summary) if gone and runs_dir is not None else {}
    points = []
    for p in summary.get("points") or []:
        if not isinstance(p, Mapping):
            points.append(p)
            continue
        if p.get("name") in found and p.get("status") in ("pending", "running"):
            run_id = found[p["name"]]
            p = dict(p, status="running", run_id=run_id, record=os.path.join(run_id, "record.json"))
        if gone and p.get("status") == "running":
            p = _point_view(p, runs_dir)
        elif runs_dir is not None and p.get("status") in ("succeeded", "failed", "cancelled") and p.get("run_id"):
            p = _ended_view(p, runs_dir, summary)
        points.append(p)
    view["points"] = points
    return view


def unnamed_runs(runs_dir: str, summary: Mapping[str, Any]) -> dict[str, str]:
    """Point name -> the newest run of the sweep of ``summary`` that its row does not name, for each point
    whose row names no run.

    The summary is written a moment behind the points (:mod:`hetflow.engine.batch.sweeps`): a sweep killed in
    that moment leaves runs whose rows still say ``pending``. Each run of a sweep's point says the sweep in its
    record's ``matrix_point`` (``sweep``); a verification run of one does not count. Only runs begun after an
    hour before the sweep's first start are read, by the time in their id.
    """
    wanted = {p.get("name") for p in summary.get("points") or [] if isinstance(p, Mapping) and not p.get("run_id")}
    sweep_id, name = summary.get("sweep_id"), summary.get("name")
    if not wanted or not sweep_id or not name or not os.path.isdir(runs_dir):
        return {}
    found: dict[str, str] = {}
    for entry in run_folders(runs_dir, name, since=summary.get("started_at") or ""):
        data = read_fields(os.path.join(runs_dir, entry, "record.json"), ("matrix_point", "verifies"))
        point = (data or {}).get("matrix_point")
        if isinstance(point, Mapping) and point.get("sweep") == sweep_id and not data.get("verifies") \
                and point.get("name") in wanted:
            found[point["name"]] = entry  # in id order: the newest last
    return found


#: a run's folder name (its id): the time it began, its manifest's name, its digest's start, a random part
RUN_FOLDER = re.compile(r"(?P<stamp>\d{8}T\d{6}Z)-(?P<name>.+)-(?P<digest>[0-9a-f]{8})-(?P<random>[0-9a-f]{4})")
#: a sweep's folder name (its id): the time it began, its manifest's name, and a count where that second had one
SWEEP_FOLDER = re.compile(r"(?P<stamp>\d{8}T\d{6}Z)-(?P<name>.+)-sweep(?:-(?P<n>\d+))?")


def run_folders(runs_dir: str, name: str, since: str | None = None, pattern: re.Pattern = RUN_FOLDER) -> list[str]:
    """The folders of runs of manifest ``name`` in ``runs_dir``, oldest first, told by their names alone;
    with ``since`` (an ISO instant), those begun an hour before it or later. ``pattern`` :data:`SWEEP_FOLDER`
    finds its sweeps instead.

    Reading every record of a runs directory to find one manifest's cost a scheduler's every decision, and
    every ``plan``, a read of each of thousands of runs.

    >>> import tempfile
    >>> runs = tempfile.mkdtemp()
    >>> for folder in ("20261204T184920Z-m-da94c102-6bbe", "20261204T184921Z-m-big-da94c102-0001",
    ...                "20261204T204921Z-m-da94c102-0002", "20261204T184920Z-m-sweep"):
    ...     os.mkdir(os.path.join(runs, folder))
    >>> run_folders(runs, "m")
    ['20261204T184920Z-m-da94c102-6bbe', '20261204T204921Z-m-da94c102-0002']
    >>> run_folders(runs, "m", since="2026-12-04T21:00:00Z")
    ['20261204T204921Z-m-da94c102-0002']
    >>> run_folders(runs, "m", pattern=SWEEP_FOLDER)
    ['20261204T184920Z-m-sweep']
    """
    floor = _stamp_of(since, -3600.0) if since is not None else ""
    try:
        folders = os.listdir(runs_dir)
    except OSError:
        return []
    found = []
    for folder in folders:
        named = pattern.fullmatch(folder)
        if named is not None and named["name"] == name and named["stamp"] >= floor:
            found.append(folder)
    return sorted(found)


def _stamp_of(instant: Any, shift_s: float) -> str:
    """An ISO instant of a record, moved by ``shift_s``, as the stamp that begins a run's id (``20261204T184920Z``);
    the earliest stamp there is when it cannot be read."""
    from datetime import datetime, timezone

    try:
        at = datetime.fromisoformat(str(instant).replace("Z", "+00:00")).timestamp() + shift_s
    except ValueError:
        return ""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def read_object(path: str) -> dict:
    """The JSON object in the file ``path`` (a record or a sweep's summary) for a command that shows it; what
    cannot be read as one is a :class:`UsageError` (exit 2) that names the file, with the line and column
    where the text is not JSON."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        # orjson reads the record of a 20,000-stage run (11 MB) in a third of json's time; json still names
        # the line and column of what is wrong
        data = loads_exact(raw)
    except ValueError:
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise UsageError(f"{path}: error: not a JSON file hetflow wrote: byte {e.start} is not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{e.lineno}:{e.colno}: error: not valid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1:1: error: expected a JSON object, found {type(data).__name__}")
    return data


def read_summary(path: str) -> dict:
    """A sweep's summary (``SWEEP/sweep.json``) for a command that shows it: :func:`read_object`, whose
    ``points`` is a list of objects (absent: none); one that is not is a :class:`UsageError` naming the file."""
    summary = read_object(path)
    points = summary.get("points")
    if points is None:
        return {**summary, "points": []}
    if not isinstance(points, list):
        raise UsageError(f"{path}: error: not a sweep summary hetflow can read: its points are "
                         f"{type(points).__name__}, not a list")
    for i, p in enumerate(points):
        if not isinstance(p, Mapping):
            raise UsageError(f"{path}: error: not a sweep summary hetflow can read: its point {i} is "
                             f"{type(p).__name__}, not an object")
    return well_kept(summary, _SUMMARY_KINDS)


def sweep_record(runs_dir: str, sweep_id: str) -> dict | None:
    """A sweep as one run record's fields tell a run (``run_id``, ``status``, ``owner``, ``started_at``,
    ``duration_s``, ``manifest``, ``schedule``, ``error``), read from its summary as :func:`sweep_view` shows
    it; None when the summary cannot be read. What a scheduler reads of a slot whose run is a sweep: the
    sweep's outcome, not its newest point's.
    """
    summary = _read_json(os.path.join(runs_dir, sweep_id, "sweep.json"))
    if not isinstance(summary, dict) or summary.get("kind") != "sweep":
        return None
    view = sweep_view(summary, runs_dir)
    rows = [p for p in view.get("points") or [] if isinstance(p, Mapping)]
    return {"run_id": summary.get("sweep_id") or sweep_id, "kind": "sweep", "status": view.get("status"),
            "owner": summary.get("owner"), "started_at": summary.get("started_at"),
            "duration_s": summary.get("duration_s"), "manifest": {"name": summary.get("name")},
            "schedule": summary.get("schedule"),
            "error": (_said(summary.get("error")) or failure_text(rows))
            if view.get("status") not in ("succeeded", "running") else None}


def failure_text(rows: list[Mapping[str, Any]], shown: int = 3) -> str | None:
    """Why a sweep of ``rows`` did not succeed, in a line: how many points did not, and the first ``shown`` of
    them with their errors; None when every point succeeded.

    >>> failure_text([{"name": "m[t=1]", "status": "succeeded"}, {"name": "m[t=2]", "status": "failed",
    ...               "error": "partition p0 failed: timed out after 1e-06 s"}, {"name": "m[t=3]", "status": "pending"}])
    '2 of 3 points did not succeed: m[t=2] failed: partition p0 failed: timed out after 1e-06 s; m[t=3] pending'
    """
    bad = [r for r in rows if r.get("status") != "succeeded"]
    if not bad:
        return None
    said = [f"{r.get('name')} {r.get('status')}" + (f": {r['error']}" if r.get("error") else "") for r in bad[:shown]]
    more = f"; and {len(bad) - shown} more" if len(bad) > shown else ""
    return f"{len(bad)} of {len(rows)} points did not succeed: " + "; ".join(said) + more


def _said(error: Any) -> str | None:
    """An ``error`` entry of a record or summary as a line: its ``message`` where it is an object."""
    return error.get("message") if isinstance(error, Mapping) else error or None


def _point_view(row: Mapping[str, Any], runs_dir: str | None) -> dict:
    """The row of a point that says ``running`` in the summary of a sweep whose process is gone."""
    record = None
    if runs_dir is not None and row.get("run_id"):
        record = read_fields(os.path.join(runs_dir, row["run_id"], "record.json"),
                             ("status", "owner", "host", "outputs", "error"))
    said = status_of(record) if record else None
    if record is None and runs_dir is not None and row.get("run_id"):
        if _forbidden(os.path.join(runs_dir, row["run_id"])):
            return dict(row, status="forbidden")  # there, but not for this user to read
    if said in (None, "running"):  # no record, or one whose run goes on in a process of its own (not this sweep's)
        return dict(row, status=owner.DIED)
    # the run ended after the summary's last write: the row says what its record says, outputs and error too
    if said == "succeeded":
        outputs = as_object(record.get("outputs"))
        ended = dict(row, status=said, error=None, outputs={k: as_object(v).get("digest") for k, v in outputs.items()})
        ended.pop("exit_code", None)
        return ended
    return dict(row, status=said, error=_said(record.get("error")) or row.get("error"))


def _forbidden(folder: str) -> bool:
    """Whether ``folder`` is there but this user may not read it (another user's, a umask of 077)."""
    return os.path.isdir(folder) and not os.access(folder, os.R_OK | os.X_OK)


def _ended_view(row: Mapping[str, Any], runs_dir: str, summary: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row of a point that ended (``succeeded``, ``failed``, ``cancelled``), with the status its run's record
    gives where that differs. A row that says ``succeeded`` reads ``missing`` where the record is gone, and
    any row ``unreadable`` where it is there but cannot be read, as ``hetflow runs`` lists it. A record that
    still says ``running`` under the sweep's own live process is the run the sweep saw fail (its last record
    refused by the disk), which reads ``died`` once that process is gone."""
    path = os.path.join(runs_dir, str(row["run_id"]), "record.json")
    record = read_fields(path, ("status", "owner", "host", "outputs")) if os.path.isfile(path) else None
    # (a record that cannot be read because runs gc has just renamed its folder away is gone, not damaged)
    if not isinstance(record, dict) and not os.path.isfile(path):
        if _forbidden(os.path.dirname(path)):
            return dict(row, status="forbidden")  # there, but not for this user to read, as hetflow runs lists it
        # its run's folder is gone, and its outputs with it; a point that did not succeed claims none
        return dict(row, status="missing") if row.get("status") == "succeeded" else row
    if not isinstance(record, dict):
        return dict(row, status="unreadable")
    said = status_of(record)
    if not isinstance(said, str) or said == row.get("status"):
        return row
    if said == "running":
        mine, theirs = owner_of(record) or {}, owner_of(summary) or {}
        if (mine.get("pid"), mine.get("host")) == (theirs.get("pid"), theirs.get("host")):
            return row
    if said == "succeeded":  # resumed on its own since: its outputs are those of its record
        outputs = as_object(record.get("outputs"))
        ended = dict(row, status=said, error=None, outputs={k: as_object(v).get("digest") for k, v in outputs.items()})
        ended.pop("exit_code", None)
        return ended
    return dict(row, status=said)


#: the names of the newest entries :func:`resolve_id` takes, and what each names
LATEST = {
    "latest": "the newest run (not a verification run), or the sweep it is a point of where a sweep is taken",
    "latest-run": "the newest run, not a verification run",
    "latest-sweep": "the newest sweep",
    "latest-verification": "the newest verification run",
}



def _short_forms(entry_id: str) -> tuple[str, ...]:
    """The parts of a run id that may be typed alone: its random part, and its digest with the random part.

    >>> _short_forms("20261204T184920Z-quickstart-da94c102-6bbe")
    ('6bbe', 'da94c102-6bbe')
    >>> _short_forms("20261204T184920Z-sw-sweep")
    ()
    """
    m = RUN_FOLDER.fullmatch(entry_id)
    return (m["random"], f"{m['digest']}-{m['random']}") if m else ()


def resolve_id(runs_dir: str, ref: str, kind: str | None = None) -> str:
    """The folder name of the run or sweep ``ref`` names, by the rule in this module's docstring.

    ``kind`` is what the command takes: ``"run"``, ``"sweep"``, or either
    when None. Nothing of that name is a :class:`NoSuchRun`; a prefix
    that matches several entries is a :class:`UsageError` naming them.

    Examples
    --------
    >>> import tempfile
    >>> from hetflow.engine.store.records import write_json_atomic
    >>> runs = tempfile.mkdtemp()
    >>> first = "20261204T184920Z-m-da94c102-6bbe"
    >>> for i, (rid, more) in enumerate([(first, {}),
    ...                                  ("20261204T184921Z-m-da94c102-6b01", {"matrix_point": {"name": "m[k=1]"}}),
    ...                                  ("20261204T184922Z-m-da94c102-77aa", {"verifies": first})]):
    ...     os.mkdir(os.path.join(runs, rid))
    ...     write_json_atomic(os.path.join(runs, rid, "record.json"),
    ...                       {"run_id": rid, "status": "succeeded", "started_at": f"2026-12-04T18:49:2{i}Z", **more})
    >>> resolve_id(runs, "latest"), resolve_id(runs, "latest-verification")
    ('20261204T184921Z-m-da94c102-6b01', '20261204T184922Z-m-da94c102-77aa')
    >>> resolve_id(runs, "6bbe"), resolve_id(runs, "m[k=1]")
    ('20261204T184920Z-m-da94c102-6bbe', '20261204T184921Z-m-da94c102-6b01')
    >>> resolve_id(runs, "6b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hetflow.engine.errors.UsageError: '6b' matches 2 ids in ... (20261204T184921Z-m-da94c102-6b01, 20261204T184920Z-m-da94c102-6bbe); give more of it
    """
    if ref and not ref.startswith(".") and os.sep not in ref and os.path.isdir(os.path.join(runs_dir, ref)):
        return ref
    refuse_file_in_the_way(runs_dir, "runs_dir")
    named = _folder_named(runs_dir, ref)
    if named is not None:
        return named
    entries = list(iter_entries(runs_dir, LISTED))
    rows = _rows(entries)
    what = {"run": "run", "sweep": "sweep"}.get(kind or "", "run or sweep")
    if ref in LATEST:
        return _latest(runs_dir, ref, kind, rows, entries)
    rows = [r for r in rows if kind is None or r["kind"] == kind]
    if ref.endswith("]") and "[" in ref:
        point = [r for r in rows if r["kind"] == "run" and r["point"] == ref]
        if point:
            return next((r for r in point if not r["verifies"]), point[0])["id"]
    matches = [r["id"] for r in rows if ref and (r["id"].startswith(ref) or
                                                 any(s.startswith(ref) for s in _short_forms(r["id"])))]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:8]) + (f" and {len(matches) - 8} more" if len(matches) > 8 else "")
        raise UsageError(f"{ref!r} matches {len(matches)} ids in {runs_dir} ({shown}); give more of it")
    known = [r["id"] for r in rows][:5]
    hint = f" (recent: {', '.join(known)})" if known else ""
    raise NoSuchRun(f"no {what} {ref!r} in {runs_dir}{hint}")


def _folder_named(runs_dir: str, ref: str) -> str | None:
    """The id of the run or sweep folder that the path ``ref`` names (the folder, or its ``record.json`` or
    ``sweep.json``), when ``ref`` is a path to one inside ``runs_dir``; None when it is no path to a folder.

    >>> import tempfile
    >>> runs = tempfile.mkdtemp(); os.mkdir(os.path.join(runs, "r1"))
    >>> _folder_named(runs, os.path.join(runs, "r1") + os.sep), _folder_named(runs, "r1")
    ('r1', None)

    Raises
    ------
    UsageError
        the folder is a run's or sweep's in another runs directory, which this command does not read.
    """
    if not ref or (os.sep not in ref and not (os.altsep and os.altsep in ref) and ref not in (".", "..")):
        return None
    path = os.path.normpath(ref)
    if os.path.basename(path) in ("record.json", "sweep.json") and os.path.isfile(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return None
    folder = os.path.realpath(path)
    parent = os.path.dirname(folder)
    try:
        inside = os.path.samefile(parent, runs_dir)
    except OSError:
        inside = False
    if not inside:
        is_entry = any(os.path.isfile(os.path.join(folder, f)) for f in ("record.json", "sweep.json"))
        if not is_entry:
            return None
        raise UsageError(f"{ref} is a {'sweep' if os.path.isfile(os.path.join(folder, 'sweep.json')) else 'run'} "
                         f"of the runs directory {parent}, not of {runs_dir}; pass {argument('runs_dir', parent)}")
    return os.path.basename(folder)


def _latest(runs_dir: str, ref: str, kind: str | None, rows: list[dict], entries: list[tuple[str, str, dict]]) -> str:
    """The entry ``latest`` (or ``latest-run``, ``latest-sweep``, ``latest-verification``) names; see :data:`LATEST`."""
    sweep = ref == "latest-sweep" or (ref == "latest" and kind == "sweep")
    if (kind == "run" and sweep) or (kind == "sweep" and not sweep):
        raise UsageError(f"{ref} names {LATEST[ref]}; this command takes a {kind}")
    either = ref == "latest" and kind is None
    if sweep:
        found, what = [r for r in rows if r["kind"] == "sweep"], "sweep"
    elif either:
        found, what = [r for r in rows if r["kind"] == "sweep" or not r["verifies"]], "run or sweep"
    else:
        verification = ref == "latest-verification"
        found = [r for r in rows if r["kind"] == "run" and bool(r["verifies"]) == verification]
        what = "verification run" if verification else "run"
    if not found:
        raise NoSuchRun(f"no {what} in {runs_dir} yet")
    newest = found[0]["id"]
    if either and found[0]["kind"] == "run":
        # the run's record names its sweep from its first write; the summary names its run a moment later, or
        # never where the disk refused its last write
        sweeps = {name for k, name, data in entries if k == "sweep"}
        record = next((data for k, name, data in entries if k == "run" and name == newest), {})
        named = as_object(record.get("matrix_point")).get("sweep")
        if isinstance(named, str) and named in sweeps:
            return named
        for k, name, data in entries:
            points = data.get("points") or []
            if k == "sweep" and any(isinstance(p, Mapping) and p.get("run_id") == newest for p in points):
                return name
    return newest


def read_record(runs_dir: str, run_id: str, whole: bool = False) -> dict:
    """The record of the run ``run_id`` names (see :func:`resolve_id`); a missing or unreadable one is a
    :class:`UsageError` (exit 2). ``whole``: for a command that works from the record (verify, diff, resume),
    not one that shows what it holds, one whose keys hold what no record does (:func:`record_problem`) is too."""
    path = os.path.join(runs_dir, resolve_id(runs_dir, run_id, "run"), "record.json")
    if os.path.isdir(os.path.dirname(path)) and not os.access(os.path.dirname(path), os.R_OK | os.X_OK):
        raise UsageError(f"{os.path.dirname(path)}: the run's folder cannot be read by this user")
    if not os.path.isfile(path):
        if os.path.isfile(os.path.join(os.path.dirname(path), "sweep.json")):
            raise UsageError(f"{os.path.dirname(path)} is a sweep, not a run: give one of its points' run ids")
        raise UsageError(f"{os.path.dirname(path)} holds no record: a run that ended before its first write, "
                         "or one starting now")
    record = read_object(path)
    problem = record_problem(record) if whole else None
    if problem is not None:
        raise UsageError(f"{path}: error: not a run record hetflow wrote: {problem}")
    return well_kept(record)


# What each top-level key of a record holds, for the commands that read one whole (None: the key may be null).
# A record edited by hand, or written by something else, is refused with the key that is wrong, not read until
# some command trips over it.
_RECORD_KINDS: dict[str, tuple[type | None, ...]] = {
    **dict.fromkeys(("manifest", "params", "overrides", "data", "inputs", "host", "owner", "versions", "plan",
                     "nodes", "outputs", "cache"), (dict,)),
    **dict.fromkeys(("matrix_point", "error", "executors", "live_activations_after", "schedule", "cancelled",
                     "threads", "scheduler", "programs"), (dict, None)),
    **dict.fromkeys(("attempts", "plugins", "tasks", "events", "warm_up"), (list,)),
    "inventory": (list, None),
    **dict.fromkeys(("run_id", "status", "started_at"), (str,)),
    **dict.fromkeys(("ended_at", "verifies"), (str, None)),
    "duration_s": (int, float, None),
}
_KIND_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number", None: "null"}
# the same of a sweep's summary (its points are checked where they are read)
_SUMMARY_KINDS: dict[str, tuple[type | None, ...]] = {
    **dict.fromkeys(("overrides", "owner", "source"), (dict,)),
    **dict.fromkeys(("cancelled", "error", "schedule"), (dict, None)),
    **dict.fromkeys(("attempts", "params"), (list,)),
    **dict.fromkeys(("kind", "manifest", "name", "status", "sweep_id", "started_at"), (str,)),
    "ended_at": (str, None),
    **dict.fromkeys(("duration_s", "parallel"), (int, float, None)),
}


# the same of each of a summary's points
_POINT_KINDS: dict[str, tuple[type | None, ...]] = {
    **dict.fromkeys(("name", "status"), (str,)), **dict.fromkeys(("run_id", "record"), (str, None)),
    **dict.fromkeys(("values", "outputs"), (dict,)), "error": (dict, str, None),
}


class _Shape:
    """What a value inside a record holds: one of ``kinds`` (None: null); of an object, ``fields`` (each may be
    absent) or, with ``each``, every value; of a list, ``each`` item."""

    __slots__ = ("kinds", "fields", "each")

    def __init__(self, *kinds: type | None, fields: Mapping[str, Any] | None = None, each: Any = None) -> None:
        self.kinds, self.fields, self.each = kinds, fields or {}, each


_NUM, _INT, _STR = (int, float, None), (int, None), (str, None)
_NAMES = _Shape(list, None, each=(str,))
_OBJECTS = _Shape(list, each=(dict,))
# the fields inside the top-level keys that the commands read (show, diff, verify, report), with what each holds:
# a field holding one of another kind is as wrong as the key itself
_DEEP: dict[str, _Shape] = {
    "manifest": _Shape(dict, fields={"file": _STR, "name": _STR, "digest": _STR}),
    "attempts": _Shape(list, each=_Shape(dict, fields={"duration_s": _NUM, "status": _STR, "started_at": _STR,
                                                       "ended_at": _STR})),
    # (not an output's digest: verify says "the record gives no digest for it" of one that is no string, and fails)
    "outputs": _Shape(dict, each=_Shape(dict, fields={"file": _STR, "dtype": _STR, "tensor": _STR, "phase": _STR,
                                                      "shape": _Shape(list, None, each=(int,)), "bytes": _INT,
                                                      "columns": _NAMES})),
    "nodes": _Shape(dict, each=_Shape(dict, fields={"status": (str,), "partition": _STR, "executor": _STR,
                                                    "started_at": _NUM, "ended_at": _NUM, "duration_s": _NUM,
                                                    "attempts": _INT, "numeric": _Shape(list, None)})),
    "tasks": _Shape(list, each=_Shape(dict, fields={
        "kind": _STR, "id": _STR, "executor": _STR, "worker": _STR, "thread": _STR, "status": _STR, "start": _STR,
        "end": _STR, "duration_s": _NUM, "offset_s": _NUM, "nodes": _NAMES, "bytes": _INT, "attempt": _INT})),
    "warm_up": _Shape(list, each=_Shape(dict, fields={"seconds": _NUM})),
    "plugins": _OBJECTS, "events": _OBJECTS,
    "data": _Shape(dict, each=(dict,)), "inputs": _Shape(dict, each=(dict,)), "programs": _Shape(dict, None, each=(dict,)),
    "plan": _Shape(dict, fields={
        "nodes": _Shape(dict, None, each=_Shape(dict, fields={
            "op": _STR, "executor": _STR, "reason": _STR, "partition": _STR, "inputs": _NAMES,
            "shape": _Shape(list, None, each=(int, str)), "dtype": _STR, "bytes": _NUM, "size": _STR,
            "origin": _STR})),
        "executors": _Shape(dict, None, each=_Shape(dict, fields={"vendor": _STR, "device": _INT, "reason": _STR})),
        "partitions": _Shape(list, None, each=_Shape(dict, fields={"id": _STR, "executor": _STR, "nodes": _NAMES,
                                                                   "inputs": _NAMES, "outputs": _NAMES})),
        "bridges": _Shape(list, None, each=_Shape(dict, fields={
            "id": _STR, "tensor": _STR, "source": _STR, "destination": _STR, "bytes": _NUM, "size": _STR,
            "consumers": _NAMES, "kind": _STR})),
        "totals": _Shape(dict, None, fields={"nodes": _INT, "partitions": _INT, "bridges": _INT,
                                             "bytes_bridged": _NUM}),
        "outputs": _Shape(dict, None, each=(str,))}),
    "inventory": _Shape(list, None, each=_Shape(dict, fields={
        "vendor": _STR, "reason": _STR, "devices": _Shape(list, None, each=(dict,)), "dtypes": _NAMES,
        "ops": _NAMES})),
    "executors": _Shape(dict, None, each=_Shape(dict, fields={"vendor": _STR,
                                                              "devices": _Shape(list, None, each=(dict,))})),
    "scheduler": _Shape(dict, None, fields={"workers": _Shape(int, list, None, each=(dict,))}),
    "cancelled": _Shape(dict, None, fields={"signal": _STR, "at": _STR, "finished": _NAMES, "abandoned": _NAMES}),
    "error": _Shape(dict, None, fields={"message": _STR}),
    "cache": _Shape(dict, fields={"hits": _NAMES, "stored": _NAMES, "store_failed": (dict, None),
                                  "damaged": (dict, None), "unreadable": (dict, None)}),
}


def _is(value: Any, kinds: tuple[type | None, ...]) -> bool:
    return any((value is None) if kind is None else (isinstance(value, kind) and not isinstance(value, bool))
               for kind in kinds)


def _wrong(value: Any, shape: Any, path: str) -> tuple[str, Any, tuple[type | None, ...]] | None:
    """The first place in ``value`` that holds what ``shape`` does not: (its path, its value, what belongs there)."""
    kinds = shape.kinds if isinstance(shape, _Shape) else shape
    if not _is(value, kinds):
        return path, value, kinds
    if not isinstance(shape, _Shape) or value is None:
        return None
    if shape.fields and isinstance(value, dict):
        for field, inner in shape.fields.items():
            if field in value:
                found = _wrong(value[field], inner, f"{path}.{field}")
                if found is not None:
                    return found
    if shape.each is not None and isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for name, item in items:
            found = _wrong(item, shape.each, f"{path}.{name}" if isinstance(value, dict) else f"{path}[{name}]")
            if found is not None:
                return found
    return None


def _of_kind(value: Any, kinds: tuple[type | None, ...], key: str = "") -> bool:
    if not _is(value, kinds):
        return False
    return key not in _DEEP or _wrong(value, _DEEP[key], key) is None


def well_kept(data: dict, kinds: Mapping[str, tuple[type | None, ...]] | None = None) -> dict:
    """``data`` (a record, or with ``kinds`` :data:`_SUMMARY_KINDS` a sweep's summary) without the top-level keys
    that hold what hetflow never writes there: a listing, ``runs show`` and ``gc`` show such a key as absent, as
    they show a key that is not there, rather than fail on it.

    >>> well_kept({"status": "succeeded", "duration_s": "long", "error": None})
    {'status': 'succeeded', 'error': None}
    """
    kinds = _RECORD_KINDS if kinds is None else kinds
    kept = data
    deep = kinds is _RECORD_KINDS  # the fields inside a key (_DEEP) are a record's
    if not all(k not in kinds or _of_kind(v, kinds[k], k if deep else "") for k, v in data.items()):
        kept = {k: v for k, v in data.items() if k not in kinds or _of_kind(v, kinds[k], k if deep else "")}
    if kinds is _SUMMARY_KINDS:
        points = kept.get("points")
        if "points" in kept and not isinstance(points, list):
            kept = {k: v for k, v in kept.items() if k != "points"}
        elif isinstance(points, list) and not all(
                isinstance(p, dict) and all(k not in _POINT_KINDS or _of_kind(v, _POINT_KINDS[k]) for k, v in p.items())
                for p in points):
            kept = {**kept, "points": [{k: v for k, v in p.items() if k not in _POINT_KINDS
                                        or _of_kind(v, _POINT_KINDS[k])} if isinstance(p, dict) else p
                                       for p in points]}
        if isinstance(kept.get("params"), list) and not all(isinstance(p, str) for p in kept["params"]):
            kept = {k: v for k, v in kept.items() if k != "params"}
    return kept


def record_problem(record: Mapping[str, Any]) -> str | None:
    """The first top-level key of ``record`` that holds what no record does, in words; None when none does.

    >>> record_problem({"data": 5, "params": {}})
    "its 'data' is 5, where a run record holds an object"
    >>> record_problem({"manifest": None}) is not None, record_problem({"error": None, "duration_s": 1.5})
    (True, None)
    """
    for key, kinds in _RECORD_KINDS.items():
        if key not in record:
            continue
        found = _wrong(record[key], kinds, key) or (_wrong(record[key], _DEEP[key], key) if key in _DEEP else None)
        if found is None:
            continue
        path, value, wanted = found
        said = json.dumps(value)
        said = said if len(said) <= 40 else said[:37] + "..."
        named = " or ".join(dict.fromkeys(_KIND_NAMES[k] for k in wanted))
        return f"its {path!r} is {said}, where a run record holds {named}"
    return None


#: what a listing, a name's resolution and ``runs gc`` read of each record (:func:`read_fields`): the plan, the
#: tasks and the events they skip are most of a record's bytes
LISTED = ("run_id", "status", "owner", "host", "started_at", "duration_s", "manifest", "matrix_point", "verifies")


def iter_entries(runs_dir: str, fields: tuple[str, ...] | None = None) -> Iterator[tuple[str, str, dict]]:
    """(kind, id, data) for every run record and sweep summary, in folder order; ``fields`` limits a record's
    data to those top-level keys (a sweep's summary is read whole)."""
    for kind, name, data in _scan(runs_dir, fields):
        if isinstance(data, dict):
            yield kind, name, data


def _scan(runs_dir: str, fields: tuple[str, ...] | None = None) -> Iterator[tuple[str, str, dict | str]]:
    """(kind, id, data) for every folder of the runs directory, in folder order; for one whose record or summary
    cannot be read, ``data`` is why: ``"unreadable"`` (the file is there, damaged), ``"forbidden"`` (the folder
    cannot be read by this user) or ``"empty"`` (no file).
    ``fields``: as :func:`iter_entries` takes them."""
    if not os.path.isdir(runs_dir):
        return
    try:
        names = sorted(os.listdir(runs_dir))
    except OSError as e:
        raise EnvironmentUnavailable(f"{runs_dir}: the runs directory cannot be read here: {e.strerror or e}") from None
    for name in names:
        folder = os.path.join(runs_dir, name)
        if name.startswith(".") or not os.path.isdir(folder):
            continue
        # A folder that runs gc (in another process) renames away while it is read here is gone from the listing,
        # not damaged: a record or summary that cannot be read, or a folder that cannot be entered, is said so
        # only where it is still there.
        if not os.access(folder, os.R_OK | os.X_OK):
            if os.path.isdir(folder):
                # another user's folder (a umask of 077): its record is there, but not for this user to read
                yield "sweep" if name.endswith("-sweep") or "-sweep-" in name else "run", name, "forbidden"
        elif os.path.isfile(os.path.join(folder, "sweep.json")):
            path = os.path.join(folder, "sweep.json")
            data = _read_json(path)
            if isinstance(data, dict):
                yield "sweep", name, well_kept(data, _SUMMARY_KINDS)
            elif os.path.isfile(path):
                yield "sweep", name, "unreadable"
        elif os.path.isfile(os.path.join(folder, "record.json")):
            path = os.path.join(folder, "record.json")
            data = _read_json(path) if fields is None else read_fields(path, fields)
            if data is not None and _a_record(data, fields):
                yield "run", name, well_kept(data)
            elif os.path.isfile(path):
                yield "run", name, "unreadable"
        else:
            yield "sweep" if name.endswith("-sweep") or "-sweep-" in name else "run", name, "empty"


def _a_record(data: Any, fields: tuple[str, ...] | None) -> bool:
    """Whether JSON read from a ``record.json`` is a run's record: an object whose ``run_id`` and ``status`` (those
    of them read) are text, as every record hetflow writes has from its first write."""
    return isinstance(data, dict) and all(isinstance(data.get(k), str) for k in ("run_id", "status")
                                          if fields is None or k in fields)


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> str:
    """The UTC ISO instant ``--since`` and ``--older-than`` name: ``30d``, ``12h``, ``45m``, ``2w`` ago, or a date.

    >>> parse_since("2026-03-01")
    '2026-03-01T00:00:00.000Z'
    >>> parse_since("1d", now=86400.0 * 2)
    '1970-01-02T00:00:00.000Z'
    >>> parse_since("999999999999d", now=86400.0 * 2)
    '1970-01-01T00:00:00.000Z'
    """
    now = time.time() if now is None else now
    units = _AGE_UNITS
    text = text.strip()
    if len(text) > 1 and text[-1] in units and text[:-1].replace(".", "", 1).isdigit():
        # an age older than the clock's first day is that day: nothing on disk started before it
        return utc_iso(max(0.0, now - float(text[:-1]) * units[text[-1]]))
    from datetime import datetime, timezone

    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"expected an age such as 30d, 12h, 45m or 2w, or a date such as 2026-03-01, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return utc_iso(when.timestamp())


def list_runs(runs_dir: str, manifest: str | None = None, status: str | None = None, since: str | None = None) -> list[dict]:
    """One row per run and sweep, newest first.

    ``manifest`` keeps entries of that manifest name (or file), ``status``
    those with that status as readers show it (:func:`status_of`: ``died``
    for a ``running`` one whose process is gone), ``since`` (see
    :func:`parse_since`) those started at or after it.
    """
    rows = _list(runs_dir)
    if manifest is not None:
        path = os.path.abspath(manifest)
        rows = [r for r in rows if manifest == r["manifest"] or path == r["file"]]
    if status is not None:
        rows = [r for r in rows if r["status"] == status]
    if since is not None:
        after = parse_since(since)
        rows = [r for r in rows if (r["started_at"] or "") >= after]
    return rows


def _list(runs_dir: str) -> list[dict]:
    entries = list(_scan(runs_dir, LISTED))
    return _rows((k, n, d) for k, n, d in entries if isinstance(d, dict)) + _unreadable(runs_dir, entries)


# a folder without its record is a run being started for this long after its last change
_STARTING_S = 60.0


def _unreadable(runs_dir: str, entries: list[tuple[str, str, dict | str]]) -> list[dict]:
    """Rows for the folders of runs and sweeps whose record or summary cannot be read: ``unreadable`` (the file
    is there, damaged) or ``empty`` (only the folder: a run that ended before its first write landed, a minute
    or more ago), so that a listing never says there are no runs where there are some."""
    rows, now = [], time.time()
    for kind, name, why in entries:
        if isinstance(why, dict):
            continue
        if why == "empty":
            try:
                if now - os.stat(os.path.join(runs_dir, name)).st_mtime < _STARTING_S:
                    continue
            except OSError:
                continue
        rows.append({"kind": kind, "id": name, "manifest": None, "point": None, "status": why,
                     "started_at": None, "duration_s": None, "file": None, "verifies": None})
    return rows


def as_object(value: Any) -> Mapping[str, Any]:
    """``value`` where it is a JSON object, else an empty one: a field of a record another hetflow wrote, or one
    edited by hand, is shown as absent rather than failing the listing."""
    return value if isinstance(value, Mapping) else {}


def _list_of(value: Any) -> list:
    return value if isinstance(value, list) else []


def _rows(entries: Iterable[tuple[str, str, dict]]) -> list[dict]:
    """One row per entry, newest first, with the status readers show (:func:`status_of`)."""
    rows = []
    for kind, name, data in entries:
        if kind == "sweep":
            rows.append({"kind": "sweep", "id": name, "manifest": data.get("name"), "point": f"{len(_list_of(data.get('points')))} points",
                         "status": status_of(data), "started_at": data.get("started_at"), "duration_s": data.get("duration_s"),
                         "file": data.get("manifest"), "verifies": None})
        else:
            point = as_object(data.get("matrix_point")).get("name")
            rows.append({"kind": "run", "id": name, "manifest": as_object(data.get("manifest")).get("name"), "point": point,
                         "status": status_of(data), "started_at": data.get("started_at"), "duration_s": data.get("duration_s"),
                         "file": as_object(data.get("manifest")).get("file"), "verifies": data.get("verifies")})
    rows.sort(key=lambda r: (r["started_at"] or "", r["id"]), reverse=True)
    return rows


def manifest_from_record(record: Mapping[str, Any]) -> Manifest:
    """The manifest a record ran, rebuilt from its resolved form; checks the digest."""
    entry = record.get("manifest") or {}
    resolved = entry.get("resolved")
    if not isinstance(resolved, dict):
        raise UsageError(f"run {record.get('run_id')} has no resolved manifest in its record")
    file = entry.get("file") or "record.json"
    from hetflow.engine.manifest.validate import Document, compile_manifest  # a listing needs no checker

    from hetflow.engine.errors import ManifestError

    try:
        manifest = compile_manifest(Document(file, json.loads(json.dumps(resolved)), {}, {}))
    except ManifestError as e:
        # the resolved form has no positions: where the file it came from still says the same, its own error
        # says where (a load file gone since), not FILE:1:1
        raise _located(e, record, file) from None
    if manifest.digest != entry.get("digest"):
        from hetflow.engine.store.records import versions

        then, now = as_object(record.get("versions")).get("hetflow"), versions().get("hetflow")
        why = (f"the run was made by hetflow {then}, this is {now}, and a version change alters how manifests "
               "resolve" if then != now else
               f"the run was made by this hetflow ({now}), so its record's resolved manifest or digest was changed "
               "since (edited by hand, or damaged)")
        raise UsageError(f"run {record.get('run_id')}: the resolved manifest no longer compiles to digest "
                         f"{entry.get('digest')} (got {manifest.digest}); {why}")
    return manifest


def _located(error: Exception, record: Mapping[str, Any], file: str) -> Exception:
    """``error`` of a manifest rebuilt from ``record``, or the same error from the file it ran where that file
    still compiles to the same manifest but for what failed, so that it names lines and columns."""
    if record.get("matrix_point") is not None or not os.path.isfile(file):
        return error
    from hetflow.engine.errors import ManifestError
    from hetflow.engine.manifest.validate import compile_manifest, load

    try:
        compile_manifest(load(file), dict(as_object(record.get("overrides"))) or None)
    except ManifestError as again:
        if [d.message for d in again.diagnostics] == [d.message for d in error.diagnostics]:
            return again
    except Exception:  # noqa: BLE001 - the file is only a better place to say it; the record's error stands
        pass
    return error


#: the copy of a sweep's manifest, in its folder: a resumed sweep's points not yet run compile from it
SWEEP_SOURCE = "manifest.yaml"


def new_sweep(runs_dir: str, name: str, manifest_file: str, points: list,
              overrides: Mapping[str, Any] | None = None, schedule: Mapping[str, Any] | None = None,
              source: str | None = None) -> tuple[str, str, dict]:
    """Create the sweep folder and its summary with every point pending; ``overrides`` are the sweep's ``-p``,
    ``schedule`` the slot it runs as (its points' records say it too). ``source``, the manifest's text, is kept
    beside the summary (:data:`SWEEP_SOURCE`, its digest in the summary's ``source``), so that a resume runs
    the points not yet run as the sweep began, whatever the file says by then."""
    os.makedirs(runs_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(1000):
        sweep_id = f"{stamp}-{name}-sweep" + (f"-{n}" if n else "")
        folder = os.path.join(runs_dir, sweep_id)
        try:
            os.mkdir(folder)
            break
        except FileExistsError:
            continue
    summary = {
        "format": SWEEP_FORMAT,
        "kind": "sweep",
        "sweep_id": sweep_id,
        "name": name,
        "manifest": os.path.abspath(manifest_file),
        "status": "running",
        "owner": owner.current(),
        "started_at": utc_iso(time.time()),
        "ended_at": None,
        "duration_s": None,
        "params": list(dict.fromkeys(k for p in points for k in p.values)),
        "overrides": dict(overrides or {}),
        "points": [{"name": p.name, "values": dict(p.values), "status": "pending", "run_id": None,
                    "record": None, "outputs": {}, "error": None} for p in points],
    }
    if schedule:
        summary["schedule"] = dict(schedule)
    from hetflow.engine.store.records import write_json_atomic, write_text_atomic

    try:
        if source is not None:
            data = source.encode("utf-8")
            write_text_atomic(os.path.join(folder, SWEEP_SOURCE), source)
            summary["source"] = {"file": SWEEP_SOURCE, "sha256": "sha256:" + hashlib.sha256(data).hexdigest()}
        write_json_atomic(os.path.join(folder, "sweep.json"), summary)
    except OSError:
        # a disk that refused the summary: no sweep folder without one
        try:
            os.unlink(os.path.join(folder, SWEEP_SOURCE))
        except OSError:
            pass
        os.rmdir(folder)
        raise
    return sweep_id, folder, summary


def sweep_source(folder: str, summary: Mapping[str, Any]) -> str | None:
    """The text of the manifest as the sweep in ``folder`` began (:func:`new_sweep`'s ``source``); None for a
    sweep that kept none (begun by an earlier hetflow), or whose copy is gone or not the bytes its digest names."""
    kept = summary.get("source")
    if not isinstance(kept, dict) or not isinstance(kept.get("file"), str):
        return None
    try:
        with open(os.path.join(folder, os.path.basename(kept["file"])), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if "sha256:" + hashlib.sha256(data).hexdigest() != kept.get("sha256"):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def write_sweep(folder: str, summary: dict) -> None:
    from hetflow.engine.errors import StorageUnavailable
    from hetflow.engine.store.records import write_json_atomic

    try:
        write_json_atomic(os.path.join(folder, "sweep.json"), summary)
    except FileNotFoundError as e:
        if os.path.isdir(folder):
            raise
        # removed while the sweep ran (a clean-up script, a person), as a run's own folder can be
        raise StorageUnavailable(f"sweep {os.path.basename(os.path.normpath(folder))}: its folder {folder} was "
                                 "removed while it ran; its summary could not be written") from e


def _cache_keys(record: Mapping[str, Any]) -> set[str]:
    keys = (as_object(record.get("cache")).get("keys") or {}).values()
    return {k["key"] for k in keys if isinstance(k, dict) and k.get("key")}


def collect_garbage(runs_dir: str, keep: int | None = None, cache_dir: str | None = None, dry_run: bool = False,
                    older_than: str | None = None) -> dict:
    """Remove old units of runs, then the cache entries, lock files and schedule claims nothing needs.

    A unit is a sweep with the runs of its points, or a run that is no
    sweep's point; the verification runs of its runs go and stay with it.
    ``keep`` keeps the newest N units *of each manifest* (by name; a
    verification run never counts); ``older_than`` (an age such as
    ``30d``, see :func:`parse_since`) removes only units started before it.
    Given both, a unit goes when both say so. A unit with a run or sweep
    that still runs is never removed; a sweep none of whose runs is left,
    and a verification run whose run is gone, go whatever ``keep`` says.
    Returns what was (or, with ``dry_run``, would be) removed, each unit
    with why (see ``docs/concepts/runs.md``).
    """
    from hetflow.engine.store.locks import held_runs, stale_locks

    if keep is None and older_than is None:
        raise UsageError("runs gc needs --keep N (per manifest), --older-than AGE, or both")
    if keep is not None and keep < 0:
        raise UsageError("--keep must be 0 or more")
    cutoff = parse_since(older_than) if older_than is not None else None
    from hetflow.engine.store.cache import Cache

    cache = Cache(cache_dir or os.path.join(runs_dir, ".cache"))
    # before the look at the runs: an entry a run reads or writes from here on is that run's, begun or not (a dry
    # run, which writes nothing, not even the file that tells the file system's time, takes this process's clock)
    began = cache.now() if not dry_run else time.time()
    scanned = list(_scan(runs_dir, LISTED + ("cache", "params", "schedule")))
    entries = [(kind, name, data) for kind, name, data in scanned if isinstance(data, dict)]
    damaged = {row["id"]: row for row in _unreadable(runs_dir, scanned)}
    records = {name: data for kind, name, data in entries if kind == "run"}
    seen: dict[str, int] = {}
    removed: list[dict] = []
    spared: list[dict] = []
    kept: list[dict] = []
    # a sweep's points whose folder has no readable record go with it at any age: the sweep no longer runs them
    of_damaged: dict[str, dict] = {}
    units = _units(entries, {name for kind, name, data in scanned if not isinstance(data, dict)}, of_damaged)
    held = held_runs(runs_dir)
    # a scheduled run whose slot is not concluded yet is the record its claim will be concluded from: gone, the
    # slot was concluded "died", its on_failure run, for a run that had succeeded
    unconcluded = _unconcluded_slots(runs_dir)
    for name, data in records.items():
        slot = as_object(data.get("schedule")).get("slot")
        if isinstance(slot, str) and (as_object(data.get("manifest")).get("name"), slot) in unconcluded:
            held.setdefault(name, {"unconcluded": slot})
    left = _damaged_units(runs_dir, damaged, units, cutoff, older_than, removed, records, held, of_damaged)
    for unit in units:  # newest first
        why = _why_remove(unit, keep, cutoff, older_than, seen)
        if why is None:
            kept.append(unit)
            continue
        running = _still_running(unit, records, held)
        if running:
            spared.append({**_public(unit), "why": why, "kept_because": running})
            kept.append(unit)
            continue
        removed.append({**_public(unit), "why": why})
    refused: list[dict] = []  # what the file system would not remove, and why: said, never counted as removed
    if not dry_run:
        _finish_removals(runs_dir, refused)
        for unit in list(removed):
            # the summary first: a gc stopped half way leaves runs without their sweep, never a sweep without runs
            names = ([unit["id"]] if unit["kind"] == "sweep" else []) + unit["runs"] + unit["verifications"] \
                + unit.get("damaged", [])
            locks = _take_locks(runs_dir, unit, records)
            try:
                if locks is None:
                    # a --resume took a run's lock since the look above: the unit is live, and stays
                    removed.remove(unit)
                    spared.append({**_public(unit), "why": "", "kept_because": "a --resume of it began while gc ran"})
                    kept.append(unit)
                else:
                    done = _remove_unit(runs_dir, names, refused, renamed=lambda: [lock.release() for lock in locks])
                    if done is not True:
                        removed.remove(unit)
                    if done is False:
                        kept.append(unit)
            finally:
                for lock in locks or ():
                    lock.release()  # once the unit is out of every listing: a run started meanwhile is not refused
    kept_runs = sorted(r for u in kept for r in u["runs"] + u["verifications"])
    gone = [r for u in removed for r in u["runs"] + u["verifications"] + u.get("damaged", [])]
    needed = set().union(*(_cache_keys(records[r]) for r in kept_runs if r in records))
    # a record names its cache keys only when it ends: what a running or died run stored is told by its time,
    # and a run whose first record is still on its way to the disk (its folder alone) by its folder's
    unnamed = [_epoch(records[r].get("started_at")) for r in kept_runs if r in records and "cache" not in records[r]]
    unnamed += [_folder_began(runs_dir, name) for kind, name, data in scanned
                if kind == "run" and data == "empty" and name not in damaged]
    since = min([*unnamed, began])
    # a scheduled sweep's claim names the sweep
    claims = _stale_claims(runs_dir, set(gone) | {u["id"] for u in removed if u["kind"] == "sweep"}, cutoff)
    locks = stale_locks(runs_dir, remove=not dry_run)
    entries_now = list(cache.keys())
    # one whose time cannot be told is tried, and its removal says why it could not be
    removed_entries = [k for k in entries_now if k not in needed and not since <= cache.written_at(k) < float("inf")]
    if not dry_run:
        for path in claims:
            for file in (path, *(os.path.splitext(path)[0] + end for end in (".log", ".hook-exit"))):
                try:
                    os.unlink(file)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    refused.append({"path": os.path.relpath(file, runs_dir), "error": f"{file}: {e.strerror or e}"})
        for key in list(removed_entries):
            why = cache.remove(key, unless_used_since=since)
            if why is not None:
                removed_entries.remove(key)
                if why is not Cache.IN_USE:  # a run took it between the look above and its removal: it stays
                    refused.append({"path": f"cache entry {key}", "error": why})
        cache.clean_temporaries()
        from hetflow.engine.store.records import remove_temporaries

        # a process killed between a file and its rename left the file (a whole record perhaps) beside the one in
        # force; an hour old, no live writer's is
        for name in kept_runs + [u["id"] for u in kept if u["kind"] == "sweep"]:
            remove_temporaries(os.path.join(runs_dir, name), older_than_s=3600.0)
    return {"dry_run": dry_run, "kept_runs": kept_runs,
            "kept_sweeps": sorted(u["id"] for u in kept if u["kind"] == "sweep"), "removed": removed, "spared": spared, "removed_runs": gone,
            "removed_sweeps": [u["id"] for u in removed if u["kind"] == "sweep"],
            "removed_verifications": [r for u in removed for r in u["verifications"]]
            + [u["id"] for u in removed if u["kind"] == "verification"],
            "left_damaged": left, "removed_locks": [os.path.relpath(p, runs_dir) for p in locks],
            "removed_claims": [os.path.relpath(c, runs_dir) for c in claims],
            "removed_cache_entries": len(removed_entries), "kept_cache_entries": len(entries_now) - len(removed_entries),
            "not_removed": refused}


def _ago(older_than: str | None) -> str:
    """`` (30d ago)`` where ``--older-than`` gave an age; nothing where it gave the date itself."""
    text = (older_than or "").strip()
    return f" ({text} ago)" if len(text) > 1 and text[-1] in _AGE_UNITS and text[:-1].replace(".", "", 1).isdigit() \
        else ""


def _folder_began(runs_dir: str, name: str) -> float:
    """When the run of a folder without a record began, as :func:`_epoch` tells a record's: the time its name
    begins with, else the folder's own; 0 when neither can be read."""
    from datetime import datetime, timezone

    named = RUN_FOLDER.fullmatch(name)
    if named is not None:
        try:
            return datetime.strptime(named["stamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp() - 1.0
        except ValueError:
            pass
    try:
        return os.stat(os.path.join(runs_dir, name)).st_mtime - 1.0
    except OSError:
        return 0.0


def _epoch(stamp: str | None) -> float:
    """An ISO instant of a record as epoch seconds, a second early for the coarser clocks of file systems;
    0 when there is none, so that every cache entry may be the record's."""
    from datetime import datetime

    try:
        return datetime.fromisoformat((stamp or "").replace("Z", "+00:00")).timestamp() - 1.0
    except ValueError:
        return 0.0


def _units(entries: list[tuple[str, str, dict]], damaged: frozenset[str] | set[str] = frozenset(),
           of_damaged: dict[str, dict] | None = None) -> list[dict]:
    """The units :func:`collect_garbage` keeps or removes whole, newest first.

    Each has ``kind`` (``sweep``, ``run``, or ``verification`` for a
    verification run whose run is gone), ``id``, ``manifest``, ``status``,
    ``started_at``, ``runs`` (the sweep's point runs on disk, or the run)
    and ``verifications`` (every verification run of those, at any depth);
    a sweep's also ``damaged``: the folders of its points' runs among
    ``damaged`` (whose record cannot be read), which go and stay with it.
    The runs of a sweep whose own summary is among ``damaged`` are no
    unit of their own: they go into ``of_damaged`` (``{sweep: {"runs",
    "verifications"}}``), to go and stay with that sweep's folder.
    """
    of_damaged = {} if of_damaged is None else of_damaged
    records = {name: data for kind, name, data in entries if kind == "run"}
    sweep_of: dict[str, str] = {}
    units: dict[str, dict] = {}
    for kind, name, data in entries:
        if kind != "sweep":
            continue
        listed = [p.get("run_id") for p in data.get("points") or [] if isinstance(p, Mapping) and p.get("run_id")]
        runs = [r for r in dict.fromkeys(listed) if r in records and r not in sweep_of]
        sweep_of.update((r, name) for r in runs)
        units[name] = {"kind": "sweep", "id": name, "manifest": data.get("name"), "status": status_of(data),
                       "started_at": data.get("started_at"), "runs": runs, "verifications": [], "listed": len(listed),
                       "running": _running(data), "damaged": [r for r in dict.fromkeys(listed) if r in damaged]}
    for name, data in records.items():
        # a run of a sweep's point that the summary's last write did not name (the sweep killed that moment)
        point = data.get("matrix_point")
        sweep = point.get("sweep") if isinstance(point, Mapping) else None
        if sweep in units and name not in sweep_of and not data.get("verifies"):
            units[sweep]["runs"].append(name)
            sweep_of[name] = sweep
        elif isinstance(sweep, str) and sweep in damaged and sweep not in units and not data.get("verifies"):
            of_damaged.setdefault(sweep, {"runs": [], "verifications": []})["runs"].append(name)
            sweep_of[name] = sweep
    for name, data in records.items():
        root = _verified_root(name, records)
        if name != root:
            continue
        if name in sweep_of:
            continue
        kind = "verification" if data.get("verifies") else "run"
        units[name] = {"kind": kind, "id": name, "manifest": as_object(data.get("manifest")).get("name"),
                       "status": status_of(data), "started_at": data.get("started_at"), "runs": [name],
                       "verifications": [], "verifies": data.get("verifies")}
    for name in sorted(records, key=lambda r: (records[r].get("started_at") or "", r)):
        root = _verified_root(name, records)
        if name != root:
            unit = sweep_of.get(root, root)
            (units[unit] if unit in units else of_damaged[unit])["verifications"].append(name)
    return sorted(units.values(), key=lambda u: (u["started_at"] or "", u["id"]), reverse=True)


def _damaged_units(runs_dir: str, damaged: Mapping[str, Mapping[str, Any]], units: list[dict], cutoff: str | None,
                   older_than: str | None, removed: list[dict], records: Mapping[str, Mapping[str, Any]],
                   held: Mapping[str, Mapping[str, Any]], of_damaged: Mapping[str, Mapping[str, list]]) -> list[dict]:
    """Sort the folders whose record or summary cannot be read (``unreadable``, ``empty``; no sweep's point)
    into ``removed``, a unit each, when ``cutoff`` says they are old, by the time in their id (or, for a name
    without one, their folder's last change); returns the others with why they stay. A damaged sweep's unit
    holds the runs that name it (``of_damaged``): they go with it, or stay with it.

    Nothing says which manifest such a folder ran, nor whether its run still runs, so ``--keep`` never counts
    or removes one: only an age does, one no run being started can have.
    """
    owned = {r for u in units for r in u.get("damaged", [])}
    left = []
    for name, row in damaged.items():
        if name in owned:
            continue
        started = _started_of_folder(os.path.join(runs_dir, name), name)
        what = "summary" if row["kind"] == "sweep" else "record"
        if row["status"] == "forbidden":
            # not this user's to judge, nor, mostly, to delete: renamed out of every listing, it would stay
            left.append({"kind": row["kind"], "id": name, "manifest": None, "status": "forbidden",
                         "started_at": started, "runs": [], "verifications": [],
                         "why": "its folder cannot be read by this user: gc leaves it to its owner"})
            continue
        state = f"its {what} cannot be read" if row["status"] == "unreadable" else f"it has no {what}"
        points = of_damaged.get(name, {"runs": [], "verifications": []})
        unit = {"kind": row["kind"], "id": name, "manifest": None, "status": row["status"], "started_at": started,
                "runs": [name] if row["kind"] == "run" else list(points["runs"]),
                "verifications": list(points["verifications"])}
        running = _still_running(unit, records, held)
        if cutoff is not None and started < cutoff and running:
            left.append({**unit, "why": f"{state}; kept: {running}"})
        elif cutoff is not None and started < cutoff:
            removed.append({**unit, "why": f"{state}; started before {cutoff}{_ago(older_than)}"})
        else:
            left.append({**unit, "why": f"{state}: its manifest is unknown, so only --older-than removes it"
                         if cutoff is None else f"{state}, and it started after {cutoff}"})
    return left


def _started_of_folder(folder: str, name: str) -> str:
    """When the run or sweep of folder ``name`` started, as its id says (``20261204T184920Z-...``), or else
    the folder's last change.

    >>> _started_of_folder("/nowhere", "20261204T184920Z-quickstart-da94c102-6bbe")
    '2026-12-04T18:49:20.000Z'
    """
    from datetime import datetime, timezone

    try:
        return utc_iso(datetime.strptime(name[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp())
    except ValueError:
        try:
            return utc_iso(os.stat(folder).st_mtime)
        except OSError:
            return utc_iso(0.0)


def _verified_root(run_id: str, records: Mapping[str, Mapping[str, Any]]) -> str:
    """The run at the end of ``run_id``'s chain of ``verifies`` (itself when it verifies nothing), as far as the
    chain's runs are on disk."""
    seen = {run_id}
    while (records[run_id].get("verifies") or "") in records and records[run_id]["verifies"] not in seen:
        run_id = records[run_id]["verifies"]
        seen.add(run_id)
    return run_id


def _why_remove(unit: Mapping[str, Any], keep: int | None, cutoff: str | None, older_than: str | None,
                seen: dict[str, int]) -> str | None:
    """Why ``unit`` goes, or None when it stays; counts it among the kept of its manifest in ``seen``."""
    empty = unit["kind"] == "sweep" and not unit["runs"] and unit["listed"]
    orphan = unit["kind"] == "verification"
    if empty:
        return "none of its points' runs is left"
    why = []
    if orphan:
        why.append(f"it verifies {unit['verifies']}, which is gone")
    elif keep is not None:
        name = unit["manifest"] or "?"
        if unit["kind"] == "sweep" and not unit["runs"]:
            why.append("it ran no point")
        elif seen.get(name, 0) < keep:
            seen[name] = seen.get(name, 0) + 1
            return None
        else:
            why.append(f"beyond the newest {keep} of {name}")
    if cutoff is not None:
        if (unit["started_at"] or "") >= cutoff:
            return None
        why.append(f"started before {cutoff}{_ago(older_than)}")
    return "; ".join(why) if why else None


def _still_running(unit: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]],
                   held: Mapping[str, Mapping[str, Any]]) -> str | None:
    """How a run or the sweep of ``unit`` still runs (a process that lives, or one on another host that
    cannot be looked at from here; a ``--resume`` of it under way, by the lock it holds: ``held``), or None."""
    if unit.get("running"):
        return f"sweep {unit['id']} {unit['running']}"
    for name in unit["runs"] + unit["verifications"] + unit.get("damaged", []):
        said = _running(records[name]) if name in records else None
        if said:
            return f"run {name} {said}"
        if name in held and "unconcluded" in held[name]:
            return (f"run {name} is the run of schedule slot {held[name]['unconcluded']}, which is not concluded yet "
                    "(the next schedule run-due or serve concludes it)")
        if name in held:
            return f"run {name} is being resumed (pid {held[name].get('pid')} on {held[name].get('host')})"
    return None


def _running(data: Mapping[str, Any]) -> str | None:
    if data.get("status") != "running":
        return None
    who = owner_of(data)
    live = owner.alive(who)
    if live is True:
        return f"is still running (pid {who['pid']} on {who['host']})"
    if live is None and who is not None:
        return f"says running on {who.get('host')}, which cannot be looked at from here"
    return None


def _public(unit: Mapping[str, Any]) -> dict:
    return {k: v for k, v in unit.items() if k not in ("listed", "running")}


def _take_locks(runs_dir: str, unit: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]) -> list | None:
    """The run locks of the unit's runs (a run's manifest name and params name its lock), each taken; None, with
    none held, when another process holds one.

    Held while the unit is removed: a ``--resume`` takes its run's lock
    before it touches the run, so one that began after gc looked at the
    locks finds the lock taken (exit 4) rather than its run removed from
    under it, and one that took it first keeps its run.
    """
    from hetflow.engine.errors import LockHeld
    from hetflow.engine.store.locks import RunLock, lock_path

    paths = []
    for run in unit["runs"] + unit["verifications"]:
        manifest, params = as_object((records.get(run) or {}).get("manifest")), (records.get(run) or {}).get("params")
        if isinstance(manifest.get("name"), str) and isinstance(params, dict):
            paths.append(lock_path(runs_dir, "", manifest["name"], params))
    taken: list = []
    ours = set(unit["runs"]) | set(unit["verifications"])
    for path in dict.fromkeys(paths):
        try:
            taken.append(RunLock(path, manifest="hetflow runs gc").acquire())
        except LockHeld as e:
            if as_object(e.holder).get("run") in ours:
                for lock in taken:
                    lock.release()
                return None
            # another run of the manifest with the same params holds it: no resume of this unit can take it
        except OSError:
            pass  # a runs directory whose locks cannot be made here: the look above is all there is
    return taken


def _remove_unit(runs_dir: str, names: list[str], refused: list[dict], renamed: Any = None) -> bool | None:
    """Remove the folders ``names`` of one unit, whole or not at all: each is first renamed out of every listing
    (``.gc-NAME``), and only once all are is any deleted. Where a rename is refused (a runs directory the user
    cannot write to, a folder held by another mount), those renamed are put back, nothing is deleted, the refusal
    goes into ``refused`` and this returns False. What is renamed and then cannot be deleted (a file the file
    system will not let go) is added to ``refused`` with why; the next gc tries again. ``renamed`` is called
    once every folder is renamed, before the deletes. None where none of the folders was there any more (another
    gc, running at the same time, took the unit first): this gc removed nothing of it."""
    from hetflow.engine.store.records import remove_tree, write_json_atomic  # gc's alone

    # the unit's names first: a gc killed among the renames left a sweep's summary gone and some of its runs
    # listed as runs of their own; the next gc finishes what this one began (_finish_removals)
    # (one folder's rename is whole on its own: it needs no note)
    intent = os.path.join(runs_dir, f".gc-unit-{secrets.token_hex(4)}.json") if len(names) > 1 else None
    try:
        if intent is not None:
            write_json_atomic(intent, {"names": list(names)})
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            # a full disk (or a file size limit) is what gc is run to free, and renames and deletes write nothing:
            # the unit goes without its note, the summary first as ever, so a gc stopped among the renames leaves
            # runs without their sweep
            intent = None
        else:  # a runs directory gc may not change: its folders could not be renamed either
            first = names[0] if names else ""
            refused.append({"path": first, "error": f"{os.path.join(runs_dir, first)}: {e.strerror or e}"})
            return False
    moved: list[tuple[str, str]] = []
    for name in names:
        path = os.path.join(runs_dir, name)
        doomed = os.path.join(runs_dir, ".gc-" + name)
        if os.path.lexists(doomed):  # an earlier removal of that name is still there and could not be deleted
            doomed += "-" + secrets.token_hex(4)
        try:
            os.rename(path, doomed)
        except FileNotFoundError:
            continue
        except OSError as e:
            for back, there in reversed(moved):
                try:
                    os.rename(there, back)
                except OSError:
                    pass
            refused.append({"path": name, "error": f"{path}: {e.strerror or e}"})
            _forget(intent)
            return False
        moved.append((path, doomed))
    _forget(intent)  # every name is out of the listings: what is left is the deletes, which .gc- names say
    if renamed is not None:
        renamed()
    if names and not moved:
        return None
    for path, doomed in moved:
        why = remove_tree(doomed)
        if why is not None:
            refused.append({"path": os.path.relpath(doomed, runs_dir), "error": why})
    return True


def _forget(path: str | None) -> None:
    if path is None:
        return
    try:
        os.unlink(path)
    except OSError:
        pass


def _finish_removals(runs_dir: str, refused: list[dict]) -> None:
    """Delete what an earlier gc renamed for removal and did not get to delete."""
    from hetflow.engine.store.records import remove_tree

    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        if name.startswith(".gc-unit-") and name.endswith(".json"):
            # a gc killed while it renamed a unit's folders: the rest of the unit goes too
            said = _read_json(os.path.join(runs_dir, name))
            for left in (said.get("names") if isinstance(said, dict) and isinstance(said.get("names"), list) else []):
                if isinstance(left, str) and left and "/" not in left and not left.startswith("."):
                    try:
                        os.rename(os.path.join(runs_dir, left), os.path.join(runs_dir, f".gc-{left}-{secrets.token_hex(4)}"))
                    except OSError:
                        pass  # gone already, or not the gc's to move: it stays
            _forget(os.path.join(runs_dir, name))
    for name in os.listdir(runs_dir) if os.path.isdir(runs_dir) else []:
        if name.startswith(".gc-") and not name.startswith(".gc-unit-"):
            why = remove_tree(os.path.join(runs_dir, name))
            if why is not None:
                refused.append({"path": name, "error": why})


def _stale_claims(runs_dir: str, gone: set[str], cutoff: str | None) -> list[str]:
    """Schedule claims whose run is removed, and run-less claims (skipped slots, slots given back and not taken
    again) older than ``cutoff``.

    The newest claim of each manifest stays: it is where ``run-due`` continues from.
    """
    root = os.path.join(runs_dir, ".schedule")
    out = []
    for folder in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        names = sorted(n for n in os.listdir(os.path.join(root, folder)) if n.endswith(".json"))
        returned = sorted(n for n in os.listdir(os.path.join(root, folder)) if n.endswith(".returned"))
        for n in names[:-1] + returned:
            path = os.path.join(root, folder, n)
            body = _read_json(path)
            body = body if isinstance(body, dict) else {}
            if body.get("hook") == "pending" or (n.endswith(".json") and body.get("state") not in _CONCLUDED):
                continue  # its hook is owed, or its slot is not concluded: the next scheduler needs it
            run_id, at = body.get("run_id"), body.get("at")
            run_id = run_id if isinstance(run_id, str) else None
            if run_id in gone or (not run_id and cutoff is not None and isinstance(at, str) and at < cutoff):
                out.append(path)
    return out


# a claim's states that end it (hetflow.engine.batch.claims.TERMINAL, which gc does not import)
_CONCLUDED = frozenset(("succeeded", "failed", "skipped", "died"))


def _unconcluded_slots(runs_dir: str) -> set[tuple[str, str]]:
    """(manifest name, slot) of every schedule claim not concluded yet."""
    root = os.path.join(runs_dir, ".schedule")
    out = set()
    for folder in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        try:
            names = os.listdir(os.path.join(root, folder))
        except OSError:
            continue
        for n in names:
            if not n.endswith(".json"):
                continue
            body = _read_json(os.path.join(root, folder, n))
            if isinstance(body, dict) and body.get("state") not in _CONCLUDED and isinstance(body.get("slot"), str):
                out.add((folder, body["slot"]))
    return out


def latest_record(runs_dir: str, name: str, point: str | None = None, keys: Iterable[str] | None = None) -> dict | None:
    """The newest record of manifest ``name`` (at matrix point ``point``), or None.

    Verification runs (``hetflow verify``'s reruns, whose record names the run they verify) are never taken.
    ``keys`` (top-level keys) returns only those of it: each record is read for the few keys that choose
    the newest (:func:`read_fields`), and the newest for ``keys``, or whole when ``keys`` is None.
    """
    best: tuple[str, str, str] | None = None  # (started_at, record path, the stamp of its folder's name)
    # newest first by the time in their names: once one is found, only those begun the same second may be newer
    for folder in reversed(run_folders(runs_dir, name)):
        if best is not None and folder[:16] < best[2]:
            break
        path = os.path.join(runs_dir, folder, "record.json")
        data = read_fields(path, ("manifest", "verifies", "matrix_point", "started_at"))
        if data is None or not isinstance(data.get("manifest") or {}, dict) or data.get("verifies"):
            continue
        if as_object(data.get("manifest")).get("name") != name or as_object(data.get("matrix_point")).get("name") != point:
            continue
        if best is None or (data.get("started_at") or "") > best[0]:
            best = (data.get("started_at") or "", path, folder[:16])
    if best is None:
        return None
    return _read_json(best[1]) if keys is None else read_fields(best[1], keys)
