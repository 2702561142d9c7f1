"""The runs directory: records, sweeps, listing, garbage collection.

``RUNS_DIR`` holds one folder per run (``record.json`` and outputs), one
folder per matrix sweep (``sweep.json``, one row per point naming the run
of that point), ``.cache/`` (the partition cache) and ``.locks/``.

:func:`manifest_from_record` rebuilds the exact manifest a record ran
(its resolved, fully concrete form), which is what ``verify`` and
``--resume`` run again. :func:`resolve_id` reads the ids users type (a
unique prefix, ``latest``). :func:`collect_garbage` keeps the newest runs
of each manifest (or those younger than an age) and every cache entry one
of them used, and removes the sweeps and schedule claims left without runs.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Iterable, Iterator, Mapping

import orjson

from hetflow.engine.cache import Cache
from hetflow.engine.errors import UsageError
from hetflow.engine.manifest import Document, Manifest, compile_manifest, gc_paused
from hetflow.engine.records import utc_iso, write_json_atomic

__all__ = [
    "SWEEP_FORMAT",
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
]

SWEEP_FORMAT = 1


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def read_fields(path: str, keys: Iterable[str]) -> dict | None:
    """Top-level ``keys`` of the JSON object in file ``path`` (those it has), or None when it is unreadable.

    A record is written one top-level key per line
    (:func:`hetflow.engine.records.dumps_record`), and its values hold no
    raw newline, so a key's value is the rest of its line: only the values
    asked for are parsed (the earlier record of a 100,000-stage run is
    44 MB of JSON, its ``cache`` a tenth of it). A file in any other
    layout, or a line that does not parse, is parsed whole.

    >>> import tempfile
    >>> from hetflow.engine.records import write_json_atomic
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
                for key in keys:
                    head = b'\n  ' + json.dumps(key).encode() + b': '
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


def _parse(value: bytes) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)  # NaN, the infinities, integers beyond 64 bits; or not JSON: ValueError


def resolve_id(runs_dir: str, ref: str, kind: str | None = None) -> str:
    """The folder name of a run or sweep named by ``ref``: its id, a unique prefix of it, or ``latest``.

    ``latest`` is the newest entry of ``kind`` (``"run"``, ``"sweep"``, or either when None).
    An unknown or ambiguous ``ref`` is a :class:`UsageError` naming the candidates.
    """
    if ref and os.path.isdir(os.path.join(runs_dir, ref)) and not ref.startswith("."):
        return ref
    rows = [r for r in list_runs(runs_dir) if kind is None or r["kind"] == kind]
    what = kind or "run or sweep"
    if ref == "latest":
        if not rows:
            raise UsageError(f"no {what} in {runs_dir} yet")
        return rows[0]["id"]
    matches = [r["id"] for r in rows if r["id"].startswith(ref)] if ref else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
        raise UsageError(f"{ref!r} is the start of {len(matches)} ids in {runs_dir} ({shown}); give more of it")
    known = [r["id"] for r in rows][:5]
    hint = f" (recent: {', '.join(known)})" if known else ""
    raise UsageError(f"no {what} {ref!r} in {runs_dir}{hint}")


def read_record(runs_dir: str, run_id: str) -> dict:
    """The record of ``run_id`` (an id, a unique prefix or ``latest``); a missing or unreadable one is a
    :class:`UsageError` (exit 2)."""
    path = os.path.join(runs_dir, resolve_id(runs_dir, run_id, "run"), "record.json")
    if not os.path.isfile(path):
        raise UsageError(f"{os.path.dirname(path)} is a sweep, not a run: give one of its points' run ids")
    record = _read_json(path)
    if record is None:
        raise UsageError(f"{path}: not a readable run record")
    return record


def iter_entries(runs_dir: str) -> Iterator[tuple[str, str, dict]]:
    """(kind, id, data) for every run record and sweep summary, in folder order."""
    if not os.path.isdir(runs_dir):
        return
    for name in sorted(os.listdir(runs_dir)):
        folder = os.path.join(runs_dir, name)
        if name.startswith(".") or not os.path.isdir(folder):
            continue
        if os.path.isfile(os.path.join(folder, "sweep.json")):
            data = _read_json(os.path.join(folder, "sweep.json"))
            if data is not None:
                yield "sweep", name, data
        elif os.path.isfile(os.path.join(folder, "record.json")):
            data = _read_json(os.path.join(folder, "record.json"))
            if data is not None:
                yield "run", name, data


def parse_since(text: str, now: float | None = None) -> str:
    """The UTC ISO instant ``--since`` and ``--older-than`` name: ``30d``, ``12h``, ``45m``, ``2w`` ago, or a date.

    >>> parse_since("2026-03-01")
    '2026-03-01T00:00:00.000Z'
    >>> parse_since("1d", now=86400.0 * 2)
    '1970-01-02T00:00:00.000Z'
    """
    now = time.time() if now is None else now
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    text = text.strip()
    if len(text) > 1 and text[-1] in units and text[:-1].replace(".", "", 1).isdigit():
        return utc_iso(now - float(text[:-1]) * units[text[-1]])
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
    those with that status, ``since`` (see :func:`parse_since`) those
    started at or after it.
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
    rows = []
    for kind, name, data in iter_entries(runs_dir):
        if kind == "sweep":
            rows.append({"kind": "sweep", "id": name, "manifest": data.get("name"), "point": f"{len(data.get('points', []))} points",
                         "status": data.get("status"), "started_at": data.get("started_at"), "duration_s": data.get("duration_s"),
                         "file": data.get("manifest"), "verifies": None})
        else:
            point = (data.get("matrix_point") or {}).get("name")
            rows.append({"kind": "run", "id": name, "manifest": (data.get("manifest") or {}).get("name"), "point": point,
                         "status": data.get("status"), "started_at": data.get("started_at"), "duration_s": data.get("duration_s"),
                         "file": (data.get("manifest") or {}).get("file"), "verifies": data.get("verifies")})
    rows.sort(key=lambda r: (r["started_at"] or "", r["id"]), reverse=True)
    return rows


def manifest_from_record(record: Mapping[str, Any]) -> Manifest:
    """The manifest a record ran, rebuilt from its resolved form; checks the digest."""
    entry = record.get("manifest") or {}
    resolved = entry.get("resolved")
    if not isinstance(resolved, dict):
        raise UsageError(f"run {record.get('run_id')} has no resolved manifest in its record")
    file = entry.get("file") or "record.json"
    manifest = compile_manifest(Document(file, json.loads(json.dumps(resolved)), {}, {}))
    if manifest.digest != entry.get("digest"):
        raise UsageError(
            f"run {record.get('run_id')}: the resolved manifest no longer compiles to digest {entry.get('digest')} "
            f"(got {manifest.digest}); a hetflow version change alters how manifests resolve"
        )
    return manifest


def new_sweep(runs_dir: str, name: str, manifest_file: str, points: list,
              overrides: Mapping[str, Any] | None = None) -> tuple[str, str, dict]:
    """Create the sweep folder and its summary with every point pending; ``overrides`` are the sweep's ``-p``."""
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
        "started_at": utc_iso(time.time()),
        "ended_at": None,
        "duration_s": None,
        "params": list(dict.fromkeys(k for p in points for k in p.values)),
        "overrides": dict(overrides or {}),
        "points": [{"name": p.name, "values": dict(p.values), "status": "pending", "run_id": None,
                    "record": None, "outputs": {}, "error": None} for p in points],
    }
    write_json_atomic(os.path.join(folder, "sweep.json"), summary)
    return sweep_id, folder, summary


def write_sweep(folder: str, summary: dict) -> None:
    write_json_atomic(os.path.join(folder, "sweep.json"), summary)


def _cache_keys(record: Mapping[str, Any]) -> set[str]:
    keys = ((record.get("cache") or {}).get("keys") or {}).values()
    return {k["key"] for k in keys if isinstance(k, dict) and k.get("key")}


def collect_garbage(runs_dir: str, keep: int | None = None, cache_dir: str | None = None, dry_run: bool = False,
                    older_than: str | None = None) -> dict:
    """Remove old runs, the sweeps and schedule claims left without runs, and cache entries no kept run uses.

    ``keep`` keeps the newest N runs *of each manifest* (by name);
    ``older_than`` (an age such as ``30d``, see :func:`parse_since`) removes
    only runs started before it. Given both, a run goes when both say so.
    A run whose process still lives on this host is never removed. Returns
    what was (or, with ``dry_run``, would be) removed, each run with why.
    """
    if keep is None and older_than is None:
        raise UsageError("runs gc needs --keep N (per manifest), --older-than AGE, or both")
    if keep is not None and keep < 0:
        raise UsageError("--keep must be 0 or more")
    cutoff = parse_since(older_than) if older_than is not None else None
    rows = [r for r in list_runs(runs_dir) if r["kind"] == "run"]
    seen: dict[str, int] = {}
    removed: list[dict] = []
    kept: list[str] = []
    for r in rows:  # newest first
        name = r["manifest"] or "?"
        seen[name] = seen.get(name, 0) + 1
        why = []
        if keep is not None:
            if seen[name] <= keep:
                kept.append(r["id"])
                continue
            why.append(f"beyond the newest {keep} of {name}")
        if cutoff is not None:
            if (r["started_at"] or "") >= cutoff:
                kept.append(r["id"])
                continue
            why.append(f"started before {cutoff} ({older_than} ago)")
        if _alive(runs_dir, r["id"]):
            kept.append(r["id"])
            continue
        removed.append({"id": r["id"], "manifest": name, "status": r["status"], "started_at": r["started_at"],
                        "why": "; ".join(why)})
    gone = {r["id"] for r in removed}
    needed: set[str] = set()
    for run_id in kept:
        record = _read_json(os.path.join(runs_dir, run_id, "record.json")) or {}
        needed |= _cache_keys(record)
    removed_sweeps = []
    for kind, name, data in list(iter_entries(runs_dir)):
        if kind != "sweep":
            continue
        ran = [p.get("run_id") for p in data.get("points", []) if p.get("run_id")]
        if ran and all(run_id in gone or not os.path.isdir(os.path.join(runs_dir, run_id)) for run_id in ran):
            removed_sweeps.append(name)
        elif not ran and cutoff is not None and (data.get("started_at") or "") < cutoff:
            removed_sweeps.append(name)
    claims = _stale_claims(runs_dir, gone, cutoff)
    cache = Cache(cache_dir or os.path.join(runs_dir, ".cache"))
    removed_entries = [k for k in cache.keys() if k not in needed]
    if not dry_run:
        for name in [r["id"] for r in removed] + removed_sweeps:
            shutil.rmtree(os.path.join(runs_dir, name), ignore_errors=True)
        for path in claims:
            for file in (path, path[: -len(".json")] + ".log"):
                try:
                    os.unlink(file)
                except FileNotFoundError:
                    pass
        for key in removed_entries:
            cache.remove(key)
        cache.clean_temporaries()
    return {"kept_runs": sorted(kept), "removed_runs": [r["id"] for r in removed], "removed": removed,
            "removed_sweeps": removed_sweeps, "removed_claims": [os.path.relpath(c, runs_dir) for c in claims],
            "removed_cache_entries": len(removed_entries), "kept_cache_entries": len(needed), "dry_run": dry_run}


def _alive(runs_dir: str, run_id: str) -> bool:
    """Whether the run's record says ``running`` and names a process that still lives on this host."""
    import socket

    record = _read_json(os.path.join(runs_dir, run_id, "record.json")) or {}
    host = record.get("host") or {}
    if record.get("status") != "running" or host.get("hostname") != socket.gethostname() or not isinstance(host.get("pid"), int):
        return False
    try:
        os.kill(host["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_claims(runs_dir: str, gone: set[str], cutoff: str | None) -> list[str]:
    """Schedule claims whose run is removed, and run-less claims (skipped slots) older than ``cutoff``.

    The newest claim of each manifest stays: it is where ``run-due`` continues from.
    """
    root = os.path.join(runs_dir, ".schedule")
    out = []
    for folder in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        names = sorted(n for n in os.listdir(os.path.join(root, folder)) if n.endswith(".json"))
        for n in names[:-1]:
            path = os.path.join(root, folder, n)
            body = _read_json(path) or {}
            if body.get("run_id") in gone or (not body.get("run_id") and cutoff is not None and (body.get("at") or "") < cutoff):
                out.append(path)
    return out


def latest_record(runs_dir: str, name: str, point: str | None = None, keys: Iterable[str] | None = None) -> dict | None:
    """The newest record of manifest ``name`` (at matrix point ``point``), or None.

    Verification runs (``hetflow verify``'s reruns, whose record names the run they verify) are never taken.
    ``keys`` (top-level keys) returns only those of it: each record is read for the few keys that choose
    the newest (:func:`read_fields`), and the newest for ``keys``, or whole when ``keys`` is None.
    """
    best: tuple[str, str] | None = None
    if os.path.isdir(runs_dir):
        for folder in sorted(os.listdir(runs_dir)):
            path = os.path.join(runs_dir, folder, "record.json")
            if folder.startswith(".") or os.path.isfile(os.path.join(runs_dir, folder, "sweep.json")):
                continue
            data = read_fields(path, ("manifest", "verifies", "matrix_point", "started_at")) if os.path.isfile(path) else None
            if data is None or not isinstance(data.get("manifest") or {}, dict) or data.get("verifies"):
                continue
            if (data.get("manifest") or {}).get("name") != name or (data.get("matrix_point") or {}).get("name") != point:
                continue
            if best is None or (data.get("started_at") or "") > best[0]:
                best = (data.get("started_at") or "", path)
    if best is None:
        return None
    return _read_json(best[1]) if keys is None else read_fields(best[1], keys)
