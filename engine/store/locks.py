"""One run at a time per manifest, resolved params and runs directory.

A scheduled job (cron, Airflow) that starts while the previous run of the
same manifest still runs must stop with a clear message instead of racing
it, while different points of one sweep may run side by side. :class:`RunLock`
is a file ``RUNS_DIR/.locks/NAME-PARAMS.lock`` (PARAMS a hash of the
resolved params' canonical JSON; the manifest's path is not part of it, so
a copy of the file is the same manifest) held with ``fcntl.flock``: the
kernel drops the lock when its holder dies, however it dies, so a lock
left behind by a dead process is simply taken over. The file also says who holds it (pid,
host, run id, since when), which goes into the message a second run gets.

The file lives only while it is held: :meth:`RunLock.release` unlinks it
while still holding the lock, then unlocks. A process that opened the
file just before it was unlinked then locks a file no longer at the
path, so after ``flock`` succeeds :meth:`RunLock.acquire` compares the
inode it locked with the one at the path and starts again when they
differ. A holder killed outright leaves its file behind, unlocked;
:func:`stale_locks` finds such files (its lock can be taken at once) and
``hetflow runs gc`` removes them the same way a release does.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from typing import Any, Mapping

from hetflow.engine.store import owner
from hetflow.engine.errors import EnvironmentUnavailable, LockHeld, name_file  # raised here; defined with the other errors, which need no lock code

__all__ = ["LockHeld", "RunLock", "held_runs", "lock_path", "manifest_locks", "stale_locks"]


def lock_path(runs_dir: str, manifest_file: str, name: str, params: Mapping[str, Any] | None = None) -> str:
    """The lock of manifest ``name`` run with the resolved ``params``.

    A manifest is its ``name`` within a runs directory, not its path: a copy of
    the file, or the folder moved elsewhere, takes the same lock, so two copies
    never run the same params at once. ``manifest_file`` is not part of it.

    >>> lock_path("runs", "/p/m.yaml", "m", {"b": 2, "a": 1}) == lock_path("runs", "/p/m.yaml", "m", {"a": 1, "b": 2})
    True
    >>> lock_path("runs", "/p/m.yaml", "m", {"a": 1}) != lock_path("runs", "/p/m.yaml", "m", {"a": 2})
    True
    """
    tail = ""
    if params is not None:
        text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
        tail = "-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return os.path.join(runs_dir, ".locks", f"{name}{tail}.lock")


def manifest_locks(runs_dir: str, manifest_file: str, name: str) -> list[str]:
    """Every lock file of manifest ``name``, whatever its params."""
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
        fd: int | None = None
        locked = False
        try:
            fd, locked = self._take()
            # the holder as a record's owner (pid, host, boot, start time): a reused pid is not taken for it
            info = {**owner.current(), "manifest": self.manifest, "run": self.run,
                    "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            try:
                os.ftruncate(fd, 0)
                data, done = json.dumps(info).encode(), 0
                while done < len(data):  # a disk short of space takes part of a write, then refuses the rest
                    done += os.pwrite(fd, data[done:], done)
            except OSError as e:  # a full disk: the lock is given back as a release gives it, its file with it
                self._fd, fd = fd, None
                self.release()
                name_file(e, self.path)
                raise
            self._fd, fd = fd, None
            return self
        except BaseException:
            # a Ctrl-C between the open and the return: a descriptor dropped here would hold the lock for as long
            # as this process lives, every run of the manifest refused as "already running" meanwhile
            if fd is not None:
                if locked:
                    self._fd, fd = fd, None
                    self.release()
                else:
                    fd, dropped = None, fd
                    os.close(dropped)
            raise

    def _take(self) -> tuple[int, bool]:
        """The lock file's descriptor, flocked: (descriptor, True); raises :class:`LockHeld` while another holds it.

        A descriptor this opens is closed whatever is raised, a ``KeyboardInterrupt`` too, unless it is
        returned.
        """
        deadline = time.monotonic() + _SETTLE_S
        made = False
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except FileNotFoundError:
                if made:
                    raise
                # the folder is made the first time only: os.makedirs asks the disk for every folder above it
                try:
                    os.makedirs(os.path.dirname(self.path), exist_ok=True)
                except FileExistsError:
                    raise self._unusable("is not a folder", os.path.dirname(self.path)) from None
                made = True
                continue
            except NotADirectoryError:
                raise self._unusable("is not a folder", os.path.dirname(self.path)) from None
            except IsADirectoryError:
                raise self._unusable("is a folder, where its lock file goes", self.path) from None
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _read(fd)
                    if _settling(holder) and time.monotonic() < deadline:
                        time.sleep(0.01)
                        continue
                    mine = owner.current()
                    here = bool(holder) and all(holder.get(k) == mine[k] for k in ("host", "pid", "start_ticks"))
                    raise LockHeld(self.path, holder, here=here) from None
                except OSError as e:
                    # ENOLCK, EOPNOTSUPP: a file system that keeps no locks (NFS without its lock service, some
                    # FUSE mounts) is the environment's, not a bug, and running without the lock would let two
                    # runs at once
                    raise EnvironmentUnavailable(
                        f"the file system of {os.path.dirname(self.path)} refused a lock on "
                        f"{os.path.basename(self.path)}: {e.strerror or e}; hetflow needs a runs directory that "
                        "keeps flock locks (an NFS mount without its lock service does not)") from None
                if _same_file(fd, self.path):
                    fd, taken = -1, fd
                    return taken, True
                # its holder unlinked it on release after we opened it: lock the file now at the path
            finally:
                if fd >= 0:
                    os.close(fd)

    @staticmethod
    def _unusable(what: str, path: str) -> EnvironmentUnavailable:
        """Something other than hetflow's put where the runs directory keeps its locks: the runs directory cannot
        be used as it is (exit 5), as one that is a file."""
        return EnvironmentUnavailable(f"the runs directory's locks cannot be kept: {path} {what}; move it away")

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # where the unlink is refused, readers still see that no one holds it
            if _same_file(fd, self.path):
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def stale_locks(runs_dir: str, remove: bool = False) -> list[str]:
    """The lock files under ``RUNS_DIR/.locks`` that no process holds; with ``remove``, each is unlinked.

    Each is tried with ``flock`` (a file held by a live run, or one being
    taken, is left alone) and unlinked while locked, as a release does.

    >>> import tempfile
    >>> runs = tempfile.mkdtemp()
    >>> with RunLock(lock_path(runs, "/p/m.yaml", "m")):
    ...     stale_locks(runs)
    []
    >>> os.listdir(os.path.join(runs, ".locks"))
    []
    >>> open(lock_path(runs, "/p/m.yaml", "m"), "w").close()  # what a killed holder leaves
    >>> [os.path.basename(p) for p in stale_locks(runs, remove=True)], os.listdir(os.path.join(runs, ".locks"))
    (['m.lock'], [])
    """
    folder = os.path.join(runs_dir, ".locks")
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".lock"))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            if not _same_file(fd, path):
                continue
            if remove:
                os.unlink(path)
            out.append(path)
        except OSError:
            continue
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
    return out


def held_runs(runs_dir: str) -> dict[str, dict[str, Any]]:
    """The runs that a live process holds the lock of, by run id: ``{run_id: holder}``.

    A ``--resume`` names the run it continues in the lock it takes before
    anything else, so a run being resumed is live here from the resume's
    first moment, while its record still says how its last attempt ended.

    >>> import tempfile
    >>> runs = tempfile.mkdtemp()
    >>> with RunLock(lock_path(runs, "/p/m.yaml", "m"), run="20261204T000000Z-m-1"):
    ...     sorted(held_runs(runs))
    ['20261204T000000Z-m-1']
    >>> held_runs(runs)
    {}
    """
    folder = os.path.join(runs_dir, ".locks")
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".lock"))
    except OSError:
        return {}
    out = {}
    for name in names:
        try:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            holder = _read(fd)
            if isinstance(holder.get("run"), str):
                out[holder["run"]] = holder
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return out


#: how long a run waits for a lock held by no live run: ``runs gc`` trying it, or a run between taking it and
#: writing who it is
_SETTLE_S = 0.5


def _settling(holder: Mapping[str, Any]) -> bool:
    """Whether the lock's holder is passing: the file names no one, or a process of this host that is gone."""
    if not isinstance(holder.get("pid"), int):
        return True
    return owner.alive(holder) is False


def _same_file(fd: int, path: str) -> bool:
    try:
        there = os.stat(path)
    except OSError:
        return False
    held = os.fstat(fd)
    return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)


def _read(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
