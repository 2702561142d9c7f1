"""One run at a time per manifest, resolved params and runs directory.

A scheduled job (cron, Airflow) that starts while the previous run of the
same manifest still runs must stop with a clear message instead of racing
it, while different points of one sweep may run side by side. :class:`RunLock`
is a file ``RUNS_DIR/.locks/NAME-HASH-PARAMS.lock`` (HASH of the manifest's
absolute path, PARAMS of its resolved params' canonical JSON) held with
``fcntl.flock``: the kernel drops
the lock when its holder dies, however it dies, so a lock left behind by a
dead process is simply taken over. The file also says who holds it (pid,
host, run id, since when), which goes into the message a second run gets.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from typing import Any, Mapping

from hetflow.engine.errors import HetflowError

__all__ = ["LockHeld", "RunLock", "lock_path", "manifest_locks"]


class LockHeld(HetflowError):
    """Another live process runs this manifest against this runs directory."""

    def __init__(self, path: str, holder: dict[str, Any]) -> None:
        who = f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another process"
        since = f" since {holder['since']}" if holder.get("since") else ""
        run = f" (run {holder['run']})" if holder.get("run") else ""
        super().__init__(f"{holder.get('manifest') or 'this manifest'} is already running: {who}{since}{run}; lock {path}")
        self.path = path
        self.holder = holder


def lock_path(runs_dir: str, manifest_file: str, name: str, params: Mapping[str, Any] | None = None) -> str:
    """The lock of manifest ``name`` in ``manifest_file`` run with the resolved ``params``.

    >>> lock_path("runs", "/p/m.yaml", "m", {"b": 2, "a": 1}) == lock_path("runs", "/p/m.yaml", "m", {"a": 1, "b": 2})
    True
    >>> lock_path("runs", "/p/m.yaml", "m", {"a": 1}) != lock_path("runs", "/p/m.yaml", "m", {"a": 2})
    True
    """
    digest = hashlib.sha256(os.path.abspath(manifest_file).encode()).hexdigest()[:12]
    tail = ""
    if params is not None:
        text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
        tail = "-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return os.path.join(runs_dir, ".locks", f"{name}-{digest}{tail}.lock")


def manifest_locks(runs_dir: str, manifest_file: str, name: str) -> list[str]:
    """Every lock file of manifest ``name`` in ``manifest_file``, whatever its params."""
    base = os.path.basename(lock_path(runs_dir, manifest_file, name))[: -len(".lock")]
    folder = os.path.join(runs_dir, ".locks")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names
                  if n.endswith(".lock") and (n == base + ".lock" or n.startswith(base + "-")))


class RunLock:
    """``with RunLock(path, manifest=...):`` holds the lock or raises :class:`LockHeld`."""

    def __init__(self, path: str, manifest: str = "", run: str | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self.run = run
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise LockHeld(self.path, holder) from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "manifest": self.manifest, "run": self.run,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
