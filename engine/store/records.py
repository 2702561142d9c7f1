"""Run records: atomic files, run ids, versions, output digests.

A run writes ``RUNS_DIR/RUN_ID/record.json`` when it starts (status
``running``) and again when it ends, and each output as ``NAME.npy``;
every write goes to a temporary file in the same folder and is renamed
over the target, so a crash never leaves a half-written file.

Outputs keep their dtype: ``record.json`` names it under
``outputs.NAME.dtype``. For fp32, fp16 and int8 the ``.npy`` is an
ordinary numpy file. numpy's format cannot name bf16, fp8 or int4, so
those are stored as raw bytes of the same width (``|V1``/``|V2``);
:func:`load_output` views them back as the ml_dtypes type, exactly::

    from hetflow.engine.store.records import load_output
    y = load_output("runs/RUN_ID", "y")      # dtype bfloat16, bit-exact
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import sys
import threading
import time
from functools import lru_cache
from math import floor as _floor
from typing import Any, Mapping

import numpy as np
import orjson

from hetflow.engine.errors import name_file
from hetflow.engine.store import gitstate
from hetflow.engine.store.clock import Stopwatch, utc_iso
from hetflow.executors.base import Dtype, PortableActivation

__all__ = [
    "RECORD_FORMAT",
    "Batch",
    "Stopwatch",
    "micros",
    "write_json_atomic",
    "write_text_atomic",
    "remove_partial_writes",
    "remove_temporaries",
    "remove_tree",
    "dumps_record",
    "encode_value",
    "encode_entries",
    "encode_events",
    "new_run_dir",
    "versions",
    "digest_portable",
    "load_output",
    "read_output",
    "array_digest",
    "utc_iso",
    "provenance",
    "file_mode",
    "folder_mode",
]

RECORD_FORMAT = 2


def micros(seconds: float) -> float:
    """``seconds`` rounded to the microsecond, as ``round(seconds, 6)`` would, in a fifth of its time.

    A record holds a duration and an offset per task: 60,000 of them in a
    10,000-stage run, where ``round`` (which goes through a decimal
    string) was 30 ms. A value exactly halfway between two microseconds
    may round up where ``round`` rounds to even.

    >>> micros(0.1234567), micros(2.0), micros(-0.0000014)
    (0.123457, 2.0, -1e-06)
    """
    return _floor(seconds * 1e6 + 0.5) / 1e6


def _read_umask() -> int:
    # /proc says it without changing it; os.umask can only be read by setting it, which races with a
    # thread creating a file meanwhile, so that is done where /proc has no answer, at import, once
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def file_mode() -> int:
    """The mode a new file gets here: ``0o666`` less the process's umask (read once per process).

    Records, outputs, claims and cache entries are written through
    temporary files, made ``0o600``; each is given this
    mode instead, so runs are as shared as any other file the user writes.

    >>> file_mode() == 0o666 & ~_UMASK
    True
    """
    return 0o666 & ~_UMASK


def folder_mode() -> int:
    """The mode a new folder gets here: ``0o777`` less the process's umask (read once per process).

    >>> folder_mode() == 0o777 & ~_UMASK
    True
    """
    return 0o777 & ~_UMASK


def _temp_beside(path: str) -> tuple[int, str]:
    """A new file ``.tmp-RANDOM`` + the name of ``path`` in its folder, opened for writing: (fd, its path).

    What ``tempfile.mkstemp`` makes (a fresh name, ``O_EXCL``, mode 0600),
    without importing ``tempfile`` and ``random`` on every command's path.
    """
    folder, name = os.path.split(os.path.abspath(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(folder, f".tmp-{secrets.token_hex(6)}{name}")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue


def _atomic(path: str, write) -> None:
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        name_file(e, path)
        raise


def encode_value(value: Any) -> str:
    """One value of a record as compact JSON text: the values ``json.dumps`` writes.

    orjson writes it, ten times faster than the standard library (the
    plan and the resolved manifest of a 100,000-stage run are 27 MB of
    text, 1.4 s). orjson spells NaN and the infinities ``null`` where the
    standard library writes ``NaN`` and ``Infinity``, so text that holds a
    ``null`` is not taken as it is: a dict's entries are then written one
    by one (a plan's partitions hold ``null`` timeouts, its 100,000 nodes
    none), the standard library writing those that hold a ``null`` and
    anything orjson leaves to it: subclasses, dataclasses, integers beyond
    64 bits.

    >>> encode_value({"a": [1, 2.5], "b": "é"})
    '{"a":[1,2.5],"b":"é"}'
    >>> encode_value({"timeout": float("inf"), "shape": [2], "none": None})
    '{"timeout":Infinity,"shape":[2],"none":null}'
    """
    if value is None:  # a record's many empty fields: the null below would send each to the standard library
        return "null"
    text = _orjson(value)
    if text is not None and b"null" not in text:
        return text.decode()
    if text is not None and len(text) < _ONE_PASS:
        return _encode_std(value)  # a small value: one pass of the C encoder costs less than one per entry
    if isinstance(value, dict) and all(type(k) is str for k in value):
        return "{" + ",".join(f"{_encode_std(k)}:{_encode_part(v)}" for k, v in value.items()) + "}"
    return _encode_std(value)


# below this many bytes of text a value that holds a null is written again whole, not entry by entry
_ONE_PASS = 1 << 16


def encode_entries(value: Mapping[str, Any]) -> str:
    """A dict of a few large entries (a plan, a resolved manifest) as :func:`encode_value` writes it, entry by entry.

    :func:`encode_value` tries the whole dict first, and a plan holds a
    ``null`` somewhere (a partition's timeout), so that was a second pass
    over all of it (0.2 s of a 100,000-stage run); here each entry is
    tried alone, and only an entry whose text holds a ``null`` is written
    again.

    >>> encode_entries({"nodes": {"a": [1]}, "partitions": [{"timeout": None}]})
    '{"nodes":{"a":[1]},"partitions":[{"timeout":null}]}'
    """
    return "{" + ",".join(f"{_encode_std(k)}:{_encode_part(v)}" for k, v in value.items()) + "}"


def _encode_part(value: Any) -> str:
    text = _orjson(value)
    return text.decode() if text is not None and b"null" not in text else _encode_std(value)


def _orjson(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value, option=_ORJSON_EXACT)
    except (TypeError, orjson.JSONEncodeError):
        return None


def _encode_std(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(',', ':'))


# what orjson would write differently from the standard library is left to it (which writes it or raises)
_ORJSON_EXACT = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def encode_events(events: Any) -> str:
    """A record's task events (``tasks``, ``events``) or node states (``nodes``) as compact JSON text.

    These hold a dict or a few per task of the run, of strings, finite
    numbers, booleans and lists, and are most of a large run's record;
    orjson encodes them 4-7 times faster than the standard library (0.06
    against 0.4 s for 70,000 events here). The text parses to the same values.

    >>> encode_events([{"id": "p0", "duration_s": 0.5, "nodes": ["x"], "cached": False}])
    '[{"id":"p0","duration_s":0.5,"nodes":["x"],"cached":false}]'
    """
    try:
        return orjson.dumps(events, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return encode_value(events)


def dumps_record(data: Mapping[str, Any], encoded: Mapping[str, str] | None = None) -> str:
    """One top-level key per line, each value compact.

    Python's JSON encoder is ten times slower when it indents (it falls
    back from C to Python), and a record of a 10,000-stage run is large;
    this keeps records diffable by key and fast to write. ``encoded``
    holds values already encoded (:func:`encode_value`) by key, for a
    record written more than once.

    >>> print(dumps_record({"a": [1, 2], "b": {"c": None}}, {"b": '"as given"'}), end="")
    {
      "a": [1,2],
      "b": "as given"
    }
    """
    return "".join(_record_parts(data, encoded))


_KEYS: dict[str, str] = {}  # a record's keys as JSON: the same few dozen in every record


def _record_parts(data: Mapping[str, Any], encoded: Mapping[str, str] | None) -> list[str]:
    encoded = encoded or {}
    parts = ["{\n"]
    for i, (k, v) in enumerate(data.items()):
        key = _KEYS.get(k)
        if key is None:
            key = _KEYS[k] = json.dumps(k) + ": "
        parts.append((",\n  " if i else "  ") + key)
        parts.append(encoded[k] if k in encoded else encode_value(v))
    parts.append("\n}\n")
    return parts


def write_together(files: list[tuple[str, Any]], fresh: int = 0, before_replace: Any = None) -> None:
    """Write several files, each atomically as :func:`_atomic` does, with their ``fsync`` calls at once.

    ``files`` are ``(path, write)`` pairs, ``write`` taking the open
    binary file. Every file's data is written and made durable before any
    of them replaces its path, and they replace their paths in the order
    given: a run's outputs, then the record that names them, so a record
    on disk never names an output that is not there. The fsyncs run
    concurrently (the journal commits them together: three small files
    took 0.33 ms against 0.66 ms one after another here).

    The first ``fresh`` files are written at their own paths, without a
    temporary file and its rename: files no reader looks for until a
    later file of the batch (a run's record) names them. Where one fails,
    nothing is renamed and every temporary file and fresh file is removed.

    ``before_replace``, where given, is called once every file is durable
    and before the first rename: a wait for another writer of the same
    paths whose file must land first (a run's ``running`` record, written
    by its own thread), so its fsync and these overlap. What it raises
    ends the batch as a failed write does.

    :class:`Batch` is the same, a file at a time: each written as it is
    added, while the caller makes the next.
    """
    if len(files) == 1 and not fresh and before_replace is None:
        _atomic(*files[0])
        return
    batch = Batch()
    try:
        for i, (path, write) in enumerate(files):
            batch.add(path, write, fresh=i < fresh)
    except BaseException:
        batch.abandon()
        raise
    batch.commit(before_replace)


class Batch:
    """:func:`write_together`, a file at a time: each file is written when it is added, and :meth:`commit` makes
    them all durable, then renames them in the order they were added.

    So a run writes each output as soon as it is known, and writes its
    ``running`` record in its own thread, leaving the fsync and the rename
    to a writer thread (see :meth:`supersede`). ``fresh`` files are written
    at their own paths, as :func:`write_together`'s first ``fresh`` are;
    every other file through a temporary file renamed over its path. A
    batch that is neither committed nor :meth:`abandon`-ed renames nothing:
    a file it added is either fresh (named by no record yet) or a temporary
    file, and :meth:`abandon` removes both. (Starting each file's writeback as
    it is added, with ``posix_fadvise``, moved the data's write out of the
    fsyncs but cost as much again in the calls themselves here: 60-100 us
    each.)
    """

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._early: list[Any] = []  # the fsyncs add(sync_now=True) began, each on a descriptor of its own
        self._renames: list[tuple[str, str]] = []  # (temporary file, path), in the order added
        self._renaming = threading.Lock()  # held from the first rename to the last, and by supersede()
        self._state = "writing"  # then "renamed" (its renames began) or "superseded" (they never will)
        self._fresh: list[str] = []  # files written at their own paths

    def add(self, path: str, write: Any, fresh: bool = False, sync_now: bool = False) -> None:
        """Write ``path`` now (``write`` takes the open binary file); renamed over it at :meth:`commit` unless
        ``fresh``. ``sync_now``: its fsync begins now, in a writer thread, while the caller makes the next file
        (a run's outputs, while it encodes the record that names them), and :meth:`commit` waits for it."""
        if fresh:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), file_mode())
            self._fresh.append(path)
        else:
            fd, tmp = _temp_beside(path)
            self._renames.append((tmp, path))
        self._fds.append(fd)
        if not fresh:
            os.fchmod(fd, file_mode())
        f = os.fdopen(fd, "wb", closefd=False)
        try:
            write(f)
            f.flush()
        except OSError as e:
            name_file(e, path)
            raise
        finally:
            # closed here, the descriptor left open: after a failed write the rest of its buffer is dropped now,
            # not flushed when the object is collected into whatever file holds this descriptor number by then
            try:
                f.close()
            except OSError:
                pass
        if sync_now:
            # the writer thread owns the descriptor from here and closes it: abandon() never closes one a queued
            # fsync is still to use (the number may be another file's by then)
            self._fds.pop()
            self._early.append(_syncers().submit(_sync_and_close, fd))

    def commit(self, before_replace: Any = None) -> None:
        """Make every file durable (their fsyncs at once), call ``before_replace``, then rename each over its path,
        in the order added. Where any of that fails, nothing more is renamed and the temporary files are removed."""
        try:
            fds = self._fds
            if self._state == "superseded":
                return  # before its fsyncs: a writer queued behind slow disks does not make them slower
            waits = self._early + [_syncers().submit(os.fsync, fd) for fd in fds[1:]]
            try:
                if fds:
                    os.fsync(fds[0])
            finally:
                for wait in waits:
                    wait.result()
            if before_replace is not None:
                before_replace()
            with self._renaming:
                if self._state == "superseded":
                    return
                self._state = "renamed"
                while self._renames:
                    tmp, path = self._renames[0]
                    os.replace(tmp, path)
                    self._renames.pop(0)
        finally:
            self.abandon()

    def supersede(self, timeout: float | None = None) -> bool:
        """Another writer's files take the place of this batch's: it renames nothing from now on. True when it had
        renamed nothing; False when its renames had begun, in which case they have ended when this returns.

        A run's ``running`` record, still on its way to the disk when the
        final record is durable, is superseded rather than waited for: no
        reader ever saw it, the final record would replace it at once, and
        at every moment the path holds a durable record or none, as it would
        have. Its temporary files are removed here, not when its commit
        ends (an fsync may still be under way on them): a caller that lists
        the folder once this returns, or a process that ends, finds none.
        ``timeout``: False, as if renames had begun, when they hold it longer
        (a second signal's handler, which waits no longer than that).
        """
        if not self._renaming.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            if self._state == "renamed":
                return False
            self._state = "superseded"
            for tmp, _ in list(self._renames):
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
            return True
        finally:
            self._renaming.release()

    def abandon(self) -> None:
        """Close every file and remove the temporary files not renamed yet, and the fresh files of a batch whose
        renames never began: no record names them, and one cut short by a full disk is half written."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)
        renames, self._renames = self._renames, []
        fresh, self._fresh = self._fresh, []
        for tmp in [t for t, _ in renames] + (fresh if self._state != "renamed" else []):
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def _sync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNCERS: list[Any] = []


def _syncers() -> Any:
    if not _SYNCERS:
        from concurrent.futures import ThreadPoolExecutor

        _SYNCERS.append(ThreadPoolExecutor(max_workers=4, thread_name_prefix="hetflow-fsync"))
    return _SYNCERS[0]


def _forget_syncers_after_fork() -> None:
    # a forked child has none of its parent's threads
    _SYNCERS.clear()


os.register_at_fork(after_in_child=_forget_syncers_after_fork)


def json_writer(data: Mapping[str, Any], encoded: Mapping[str, str] | None = None) -> Any:
    """The ``write`` of :func:`write_json_atomic`, for :func:`write_together`.

    A small record is one ``write`` of its joined text (a quarter of the
    time of its 70 parts one by one); a large one goes part by part, as
    joining tens of MB would copy them twice.
    """
    parts = _record_parts(data, encoded)
    if sum(map(len, parts)) < _JOIN_BELOW:
        text = "".join(parts).encode("utf-8", "backslashreplace")
        return lambda f: f.write(text)
    return lambda f: f.writelines(part.encode("utf-8", "backslashreplace") for part in parts)


# A path's bytes that are not UTF-8 (a folder named in Latin-1, or any name under LC_ALL=C) reach Python as lone
# surrogates (os.fsdecode's surrogateescape), which UTF-8 cannot encode: written as the JSON escape \udcXX,
# the one form such a character has in JSON, they read back as the same string, os.fsencode() of it the same
# bytes. Every other character is UTF-8, as before.

_JOIN_BELOW = 1 << 20  # characters


def npy_writer(array: np.ndarray) -> Any:
    """The ``write`` of an array as ``.npy``, for :func:`write_together` (bf16 and fp8 as raw bytes of their width).

    The bytes ``np.save`` writes: its header, then the data in the array's
    own order, C or Fortran. The header is made once per dtype, shape and
    order in this process (a run writes the same outputs every time), and
    the data goes to the file as the array's buffer: ``np.save`` builds the
    header anew and writes through ``ndarray.tofile``, which duplicates the
    file's descriptor and seeks, 20-40 us an output here.

    >>> import io
    >>> a, mine, theirs = np.arange(6, dtype=np.float32).reshape(2, 3).T, io.BytesIO(), io.BytesIO()
    >>> npy_writer(a)(mine); np.save(theirs, a, allow_pickle=False)
    >>> mine.getvalue() == theirs.getvalue()
    True
    """
    if array.dtype.kind == "V" or array.dtype.type.__module__.startswith("ml_dtypes"):
        array = array.view(np.dtype(f"V{array.dtype.itemsize}"))
    if array.dtype.hasobject:
        raise ValueError("an output cannot hold Python objects")
    if array.flags.c_contiguous:
        data, fortran = array, False
    elif array.flags.f_contiguous:
        data, fortran = array.T, True  # its transpose is C-contiguous and holds the bytes in Fortran order
    else:
        data = array = np.ascontiguousarray(array)
        fortran = False
    header = _npy_header(array.dtype, array.shape, fortran)
    flat = data.reshape(-1).view(np.uint8) if data.size else b""

    def write(f: Any) -> None:
        f.write(header)
        f.write(flat)

    return write


@lru_cache(maxsize=256)
def _npy_header(dtype: np.dtype, shape: tuple, fortran: bool) -> bytes:
    from io import BytesIO

    from numpy.lib import format as npy

    fields = {"descr": npy.dtype_to_descr(dtype), "fortran_order": fortran, "shape": shape}
    out = BytesIO()
    try:  # np.save's own choice: version 1.0 unless the header needs more room
        npy.write_array_header_1_0(out, fields)
    except ValueError:
        out = BytesIO()
        npy.write_array_header_2_0(out, fields)
    return out.getvalue()


def write_json_atomic(path: str, data: Mapping[str, Any], encoded: Mapping[str, str] | None = None) -> None:
    """:func:`dumps_record`'s text, written atomically; its parts go to the file one by one (a large run's
    record is tens of MB, and joining its parts copied all of it twice)."""
    _atomic(path, json_writer(data, encoded))


def remove_partial_writes(path: str) -> int:
    """Remove the temporary files of unfinished atomic writes to ``path``; how many there were.

    A process that ends at once (a second signal's forced exit) after
    writing ``path`` itself may have interrupted an earlier write to it
    in the same thread, between its temporary file and the rename.
    """
    folder, name = os.path.split(os.path.abspath(path))
    removed = 0
    for entry in os.listdir(folder):
        if entry.startswith(".tmp-") and entry.endswith(name):
            try:
                os.unlink(os.path.join(folder, entry))
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def remove_temporaries(folder: str, older_than_s: float | None = None) -> int:
    """Remove the temporary files of every unfinished atomic write in ``folder`` (a process killed between a
    file and its rename leaves one, a whole record perhaps, beside the one in force); only those older than
    ``older_than_s`` seconds where given, as a live writer's may be younger. How many went."""
    before = None if older_than_s is None else time.time() - older_than_s
    removed = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for entry in names:
        if not entry.startswith(".tmp-"):
            continue
        path = os.path.join(folder, entry)
        try:
            if before is not None and os.lstat(path).st_mtime >= before:
                continue
            os.unlink(path)
            removed += 1
        except OSError:
            pass  # gone already, or a folder: not a write of this module's
    return removed


def remove_tree(path: str) -> str | None:
    """Delete the folder ``path`` and all in it; None when it is gone (or going: another process deleting it at
    once), else why not, for its first file that could not be removed (``FILE: Operation not permitted``), as
    much of the rest removed as can be.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp(); open(os.path.join(folder, "f"), "w").close()
    >>> remove_tree(folder), os.path.exists(folder)
    (None, False)
    """
    import shutil

    first: list[str] = []

    def refused(function: Any, where: str, error: BaseException) -> None:
        if not first and not isinstance(error, FileNotFoundError):
            first.append(f"{where}: {getattr(error, 'strerror', None) or error}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=refused)
    else:
        shutil.rmtree(path, onerror=lambda function, where, info: refused(function, where, info[1]))
    # still there without a refusal seen: another process (a second gc) is deleting it at the same time
    return first[0] if first and os.path.lexists(path) else None


def write_atomic(path: str, write: Any) -> None:
    """``write(file)`` (a :func:`json_writer`, an :func:`npy_writer`) into ``path`` atomically: a temporary file
    beside it, fsynced, then renamed over it."""
    _atomic(path, write)


def write_text_atomic(path: str, text: str) -> None:
    _atomic(path, lambda f: f.write(text.encode()))


def load_output(run_dir: str, name: str) -> np.ndarray:
    """Load output ``name`` of a finished run with its exact dtype, checked against its record (:func:`read_output`)."""
    with open(os.path.join(run_dir, "record.json"), encoding="utf-8") as f:
        record = json.load(f)
    return read_output(run_dir, name, record["outputs"][name])


def read_output(run_dir: str, name: str, entry: Mapping[str, Any]) -> np.ndarray:
    """The array of output ``name`` from its file in ``run_dir``, as its record's ``entry`` names it: the exact
    dtype, and the bytes whose digest the record keeps.

    A run's outputs are what its record vouches for: a file changed or
    damaged since (edited, truncated, replaced, bit rot) is refused
    rather than handed on as the run's. The check is one sha256 over the
    bytes read, about as long again as reading them.

    Raises
    ------
    OutputDamaged
        the file is gone, cannot be read as an array of the record's dtype, or its digest is not the record's.
    """
    from hetflow.engine.errors import OutputDamaged

    file, recorded = entry.get("file"), entry.get("digest")
    if not isinstance(file, str) or not isinstance(recorded, str) or entry.get("dtype") not in _DTYPE_NAMES:
        # a record edited or damaged: without its file, dtype and digest nothing vouches for the bytes
        missing = [k for k, ok in (("file", isinstance(file, str)), ("dtype", entry.get("dtype") in _DTYPE_NAMES),
                                   ("digest", isinstance(recorded, str))) if not ok]
        raise OutputDamaged(name, f"its record gives no valid {', '.join(missing)} for it")
    if file in ("", ".", "..") or os.path.basename(file) != file or (os.altsep and os.altsep in file):
        # a run writes its outputs in its own folder, by name: a path elsewhere (/etc/passwd, ../other/x.npy) is a
        # record edited, and nothing there is read
        raise OutputDamaged(name, f"its record names {file!r}, which is not a file of the run's folder")
    path = os.path.join(run_dir, file)
    try:
        raw = np.load(path, allow_pickle=False)
        dtype = Dtype(entry["dtype"]).numpy
        array = raw if raw.dtype == dtype else raw.view(dtype)
    except FileNotFoundError:
        raise OutputDamaged(name, f"{entry['file']} is not in {run_dir}") from None
    except (OSError, ValueError, EOFError) as e:
        # numpy takes a file without its magic string for a pickle, and says so: it is no .npy file at all
        why = "it is not a .npy file" if "allow_pickle" in str(e) else str(e)
        raise OutputDamaged(name, f"{path} cannot be read as the {entry['dtype']} array its record names: {why}") from None
    if array_digest(entry["dtype"], array) != recorded:
        raise OutputDamaged(name, f"{path} is not the array its record's digest names ({recorded[:23]}): it was "
                                  "changed or damaged after the run")
    return array


_DTYPE_NAMES = frozenset(d.value for d in Dtype)


def array_digest(dtype: str, array: np.ndarray) -> str:
    """:func:`digest_portable` of an output read back: sha256 over the dtype's name, the shape and the portable
    bytes (C order, little-endian; int4 two to a byte).

    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> array_digest("fp32", a) == digest_portable(PortableActivation.from_array(a, Dtype("fp32")))
    True
    """
    if dtype == "int4" or array.dtype.byteorder == ">":
        return digest_portable(PortableActivation.from_array(array, Dtype(dtype)))
    h = hashlib.sha256()
    h.update(dtype.encode() + b"\0")
    h.update(json.dumps([int(d) for d in array.shape]).encode() + b"\0")
    h.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    return "sha256:" + h.hexdigest()


def new_run_dir(runs_dir: str, name: str, digest: str) -> tuple[str, str]:
    """Create a fresh ``RUNS_DIR/RUN_ID`` and return (run id, path)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    short = digest.split(":")[-1][:8]
    made = False
    while True:
        run_id = f"{stamp}-{name}-{short}-{secrets.token_hex(2)}"
        path = os.path.join(runs_dir, run_id)
        try:
            os.mkdir(path)
            return run_id, path
        except FileExistsError:
            continue
        except FileNotFoundError:
            if made:
                raise
            # the runs directory is made here the first time only: os.makedirs asks the disk for every folder
            os.makedirs(runs_dir, exist_ok=True)
            made = True


@lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str | None], ...]:
    return tuple(_read_versions().items())


def versions() -> dict[str, str | None]:
    """Versions of hetflow, Python and the libraries a run's results depend on (read once per process)."""
    return dict(_versions())


def _read_versions() -> dict[str, str | None]:
    from importlib import metadata  # 4 ms at start-up, which a plan, reading records, never needs

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    out: dict[str, str | None] = {"hetflow": version("hetflow"), "python": platform.python_version()}
    for dist in ("numpy", "dask", "distributed", "networkx", "ml_dtypes", "pyyaml", "jsonschema"):
        out[dist] = version(dist)
    out["cupy"] = next((v for v in (version("cupy-cuda12x"), version("cupy-cuda11x"), version("cupy-rocm-6-0"), version("cupy")) if v), None)
    out["platform"] = f"{sys.platform}-{platform.machine()}"
    return out


def digest_portable(portable: PortableActivation) -> str:
    """sha256 over dtype name, shape and the portable bytes: equal digests mean identical outputs."""
    h = hashlib.sha256()
    h.update(portable.dtype.value.encode() + b"\0")
    h.update(json.dumps(list(portable.shape.dims)).encode() + b"\0")
    h.update(portable.bytes)
    return "sha256:" + h.hexdigest()


def provenance(manifest_file: str) -> dict[str, Any]:
    """Where and by whom a run ran, and the git state of the manifest's repository
    (:func:`hetflow.engine.store.gitstate.state`: asked of git once per state of the tree, not once per run)."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = None
    return {"hostname": socket.gethostname(), "user": user, "pid": os.getpid(), "git": gitstate.state(manifest_file)}
