"""The files ops read: what tells a file's bytes from its earlier ones, and the sha256 of those bytes.

The engine digests every file a ``load`` stage reads when a run starts:
the digest goes into the run's record and the partition's cache key. The
``load`` op checks, where it reads the file (this process or a worker of
a cluster), that it reads those bytes and not ones put there since
(:func:`check_unchanged`), so a file replaced while a run runs fails the
stage instead of leaving a record and a cache entry that name bytes the
run never read.
"""

from __future__ import annotations

import hashlib
import os
from typing import Sequence

__all__ = ["file_stamp", "file_digest", "digest_and_stamp", "portable_stamp", "check_unchanged", "FileChanged"]

_TRIES = 3


class FileChanged(ValueError):
    """A file an op reads is not the one the run digested when it started."""


def not_a_file(path: str) -> str:
    """Why ``path`` is no file a stage can read: ``no such file``, or what it is instead (a directory, a FIFO,
    a device), for a path where :func:`os.path.isfile` is false.

    >>> not_a_file("/"), not_a_file("/no/such/thing")
    ('is a directory, not a file', 'no such file')
    """
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "no such file"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    kinds = {stat.S_IFIFO: "a FIFO (a named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
             stat.S_IFSOCK: "a socket"}
    return f"is {kinds.get(stat.S_IFMT(mode), 'not a regular file')}, not a file it can read"


def file_stamp(st: os.stat_result) -> tuple:
    """What tells a file's bytes from its earlier ones without reading them: a file renamed over it has another
    inode, one written in place or given back its old mtime (``cp -p``, ``rsync -a``, ``os.utime``) a new ctime,
    which nothing but the kernel sets."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def portable_stamp(stamp: tuple) -> list[int]:
    """A stamp another machine reading the same file over a shared file system can compare: the device number
    is each machine's own (a mount's), the inode, size and times are the file server's."""
    return list(stamp[1:])


# (path, stamp) -> sha256; a process reads a file's bytes once while they stay the same
_DIGESTS: dict[tuple, str] = {}


def digest_and_stamp(path: str) -> tuple[str | None, tuple | None]:
    """The sha256 of a file's bytes (``sha256:HEX``) and the stamp of the file they are the bytes of; (None,
    None) when it cannot be read or keeps changing while it is read."""
    for _ in range(_TRIES):
        try:
            stamp = file_stamp(os.stat(path))
        except OSError:
            return None, None
        memo = (path, *stamp)
        known = _DIGESTS.get(memo)
        if known is not None:
            return known, stamp
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                if file_stamp(os.fstat(f.fileno())) != stamp:
                    continue  # replaced between the stat and the open
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
                if file_stamp(os.fstat(f.fileno())) != stamp:
                    continue  # written while it was read
        except OSError:
            return None, None
        _DIGESTS[memo] = digest = "sha256:" + h.hexdigest()
        return digest, stamp
    return None, None


def file_digest(path: str) -> str | None:
    """sha256 of a file's bytes, memoized by its path and :func:`file_stamp`; None when it cannot be read."""
    return digest_and_stamp(path)[0]


def check_unchanged(path: str, digest: str, stamp: Sequence[int] | None) -> None:
    """Raise :class:`FileChanged` unless ``path`` holds the bytes whose sha256 is ``digest``.

    ``stamp`` (:func:`portable_stamp`) is the file's when it was digested:
    while the file still has it, its bytes are the same and are not read
    again; otherwise they are digested anew (a file only touched passes).
    """
    try:
        if stamp is not None and portable_stamp(file_stamp(os.stat(path))) == list(stamp):
            return
    except OSError:
        pass
    now = file_digest(path)
    if now != digest:
        what = "is gone or cannot be read" if now is None else f"now holds other bytes ({now[:23]})"
        raise FileChanged(f"{path} changed while the run ran: it {what}, not the bytes the run's record and cache "
                          f"key name ({digest[:23]}); run it again to read the file as it is now")
