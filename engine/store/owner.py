"""Which process owns a run or a sweep, and whether it still lives.

A record that says ``running`` is only true while the process writing it
lives. A process killed by SIGKILL, the OOM killer or a power loss writes
nothing more, so a record names its owner when it is first written
(``owner``: host, pid, the boot it ran in and the process's start time in
clock ticks since that boot) and readers decide from that whether the
owner is gone. A pid is reused by later processes; the pair (boot id,
start time) is not, so a reused pid is never taken for the owner.

:func:`state_of` is the one rule every reader applies: a ``running``
record whose owner is known to be dead reads as ``died``. An owner on
another host cannot be looked at from here, so such a record stays
``running``.

Examples
--------
>>> me = current()
>>> me["pid"] == os.getpid(), alive(me)
(True, True)
>>> state_of("running", {**me, "start_ticks": (me["start_ticks"] or 0) + 1}) if me["start_ticks"] else "died"
'died'
>>> state_of("succeeded", None), state_of("running", None)
('succeeded', 'running')
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from typing import Any, Mapping

__all__ = ["DIED", "current", "of", "alive", "state_of", "boot_id", "start_ticks"]

DIED = "died"


@lru_cache(maxsize=1)
def boot_id() -> str | None:
    """This boot's id (Linux: ``/proc/sys/kernel/random/boot_id``), or None where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of ``/proc/PID/stat``); None if unknown."""
    return _stat(pid)[1]


def _stat(pid: int) -> tuple[bytes | None, int | None]:
    """Process ``pid``'s state letter and start time (fields 3 and 22 of ``/proc/PID/stat``); None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None, None
    # the command name (field 2) is in parentheses and may hold spaces or parentheses itself
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return (fields[0] if fields else None), None


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, to any depth, as ``/proc`` tells them now; none without ``/proc``.

    >>> import subprocess, time
    >>> p = subprocess.Popen(["sh", "-c", "sleep 30; true"])  # the shell, and its sleep
    >>> for _ in range(200):
    ...     if descendants(p.pid): break
    ...     time.sleep(0.05)
    >>> len(descendants(p.pid)), p.pid in descendants(os.getpid())
    (1, True)
    >>> for q in descendants(p.pid) + [p.pid]: os.kill(q, 9)
    >>> p.wait()
    -9
    """
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            # after the command name (in parentheses, which may hold either): the state, then the parent's pid
            children.setdefault(int(data[data.rfind(b")") + 2:].split()[1]), []).append(int(name))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


@lru_cache(maxsize=1)
def _hostname() -> str:
    return socket.gethostname()


_CURRENT: dict[int, dict[str, Any]] = {}


def current() -> dict[str, Any]:
    """This process as a record's ``owner`` (read once per process: none of it changes while it runs; a
    forked child has another pid, so it reads its own)."""
    pid = os.getpid()
    found = _CURRENT.get(pid)
    if found is None:
        found = _CURRENT[pid] = {"host": _hostname(), "pid": pid, "boot_id": boot_id(), "start_ticks": start_ticks(pid)}
    return dict(found)


def of(pid: int) -> dict[str, Any]:
    """Another process of this host (a child, say) as an ``owner``, as :func:`current` gives this one."""
    return {"host": _hostname(), "pid": pid, "boot_id": boot_id(), "start_ticks": start_ticks(pid)}


def alive(owner: Mapping[str, Any] | None) -> bool | None:
    """Whether ``owner`` still runs: True, False, or None when it cannot be told from here (another host)."""
    if not isinstance(owner, Mapping) or not isinstance(owner.get("pid"), int):
        return None
    if owner.get("host") != _hostname():
        return None
    if owner.get("boot_id") and boot_id() and owner["boot_id"] != boot_id():
        return False  # the machine restarted since: every process of that boot is gone
    pid = owner["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process of that pid: its start time decides
    except OSError:
        return None
    state, now = _stat(pid)
    recorded = owner.get("start_ticks")
    if recorded is not None and now is not None and recorded != now:
        return False  # the pid was reused by another process
    if state in (b"Z", b"X"):
        # it has ended and waits to be reaped: by a parent that is gone, by an init that reaps late or never
        return False
    if now is None and recorded is not None:
        return _zombie_or_gone(pid)
    return True


def _zombie_or_gone(pid: int) -> bool:
    # /proc cannot be read although kill(0) answered: the process ended between the two looks
    return os.path.exists(f"/proc/{pid}")


def state_of(status: str | None, owner: Mapping[str, Any] | None) -> str | None:
    """The status a reader shows: ``running`` becomes :data:`DIED` when the owner is known to be dead."""
    if status == "running" and alive(owner) is False:
        return DIED
    return status
