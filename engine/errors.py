"""Typed errors of the engine's passes.

Every pass raises one of these; only the CLI prints them and picks the
exit code. A :class:`Diagnostic` is one problem at one place of a
manifest, printed as ``FILE:LINE:COL: error: MESSAGE`` (1-based line and
column, the way compilers and editors read them).

Examples
--------
>>> str(Diagnostic(Origin("m.yaml", 3, 7), "unknown op 'relu2'"))
"m.yaml:3:7: error: unknown op 'relu2'"
"""

from __future__ import annotations

import errno
import re
import functools
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = ["Origin", "Noted", "Diagnostic", "SHOWN", "capped", "HetflowError", "ManifestError", "UsageError", "EnvironmentUnavailable",
           "StorageUnavailable", "STORAGE_ERRNOS", "is_storage_error", "name_file", "refuse_file_in_the_way", "require_runs_dir", "RunFailed", "RunCancelled", "StageFailure", "LockHeld", "StillRunning",
           "argument"]


@functools.total_ordering
class Origin:
    """Where a value of a manifest was written.

    An origin may be *pending*: a large manifest is loaded without
    recording where each value was written, and a pending origin finds
    its line and column (by re-reading the file precisely, once per
    document) only when something asks for them, which is when an error
    or a warning is printed. Either kind compares, hashes, prints and
    pickles the same.

    >>> asked = []
    >>> o = Origin.pending("m.yaml", lambda: asked.append(1) or Origin("m.yaml", 4, 2))
    >>> len(asked)
    0
    >>> str(o), o == Origin("m.yaml", 4, 2), len(asked)
    ('m.yaml:4:2', True, 1)
    """

    __slots__ = ("file", "_line", "_col")

    def __init__(self, file: str, line: int, col: int) -> None:
        self.file = file
        self._line = line
        self._col = col

    @staticmethod
    def pending(file: str, find: Callable[[], Origin]) -> Origin:
        """An origin in ``file`` whose position ``find()`` computes when first needed."""
        return _Deferred(file, find)

    def _resolve(self) -> None:
        """Sets ``_line`` and ``_col`` of a pending origin (subclasses say how)."""

    @property
    def line(self) -> int:
        if self._line is None:
            self._resolve()
        return self._line

    @property
    def col(self) -> int:
        if self._line is None:
            self._resolve()
        return self._col

    def _key(self) -> tuple[str, int, int]:
        return (self.file, self.line, self.col)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Origin) else NotImplemented

    def __lt__(self, other: object) -> bool:
        return self._key() < other._key() if isinstance(other, Origin) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self):
        return (Origin, self._key())

    def __repr__(self) -> str:
        return f"Origin(file={self.file!r}, line={self.line!r}, col={self.col!r})"

    def __str__(self) -> str:
        if self._line is None:
            self._resolve()
        return f"{self.file}:{self._line}:{self._col}"


class _Deferred(Origin):
    __slots__ = ("_find",)

    def __init__(self, file: str, find: Callable[[], Origin]) -> None:
        self.file, self._line, self._col, self._find = file, None, None, find

    def _resolve(self) -> None:
        found = self._find()
        self._line, self._col = found.line, found.col


class Noted(Origin):
    """An origin inside a block's instance, with the places that made the instance: its uses, innermost first.

    A problem in a block's stage is written where the block is, which may
    be another file; alone, that line does not say which of its instances
    is wrong, so each use adds a note. It compares, hashes and pickles as
    the plain origin it wraps (the notes are for the reader).

    >>> o = Noted(Origin("lib.yaml", 7, 5), [(Origin("m.yaml", 40, 3), "in layers.3 (block decoder_layer)")])
    >>> print(Diagnostic(o, "unknown op 'matmull'"))
    lib.yaml:7:5: error: unknown op 'matmull'
    m.yaml:40:3: note: in layers.3 (block decoder_layer)
    """

    __slots__ = ("_inner", "notes")

    def __init__(self, inner: Origin, notes: Sequence[tuple[Origin, str]]) -> None:
        self.file, self._line, self._col = inner.file, None, None
        self._inner = inner
        self.notes = tuple(notes)

    def _resolve(self) -> None:
        self._line, self._col = self._inner.line, self._inner.col


class Diagnostic(NamedTuple):
    origin: Origin | None
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.origin}: " if self.origin else ""
        # the first line keeps its form (editors and scripts parse it); a block's uses follow, one located note each
        notes = "".join(f"\n{at}: note: {text}" for at, text in getattr(self.origin, "notes", ()))
        return f"{where}{self.severity}: {self.message}{notes}"


# defined apart from the engine: hetflow.executors raises errors of it too (a malformed @op), and never imports this
from hetflow._errors import HetflowError  # noqa: E402


#: the most problems a message lists before "... and N more": what a person reads before fixing the first
SHOWN = 50


def capped(items: Sequence[object], limit: int = SHOWN) -> list[str]:
    """The first ``limit`` of ``items`` as text, then one line saying how many more there are.

    Only those shown are formatted: a pending :class:`Origin` finds its
    line by re-reading the file, which 10,000 problems should not pay for.

    >>> capped([f"problem {i}" for i in range(53)])[-2:]
    ['problem 49', '... and 3 more']
    >>> capped(["a", "b"])
    ['a', 'b']
    """
    shown = [str(item) for item in items[:limit]]
    return shown + [f"... and {len(items) - limit:,} more"] if len(items) > limit else shown


# an instance's id, quoted ('L.17.m', 'attn.q'), or in a key's path (stages.L.17.m)
_INSTANCE = re.compile(r"'[^'\s]*\.[^'\s]*'|\b[\w-]+(?:\.[\w-]+)*\.\d+(?:\.[\w-]+)*\b")


def folded(diagnostics: Sequence[Diagnostic]) -> list[str]:
    """The diagnostics as text, those said at one place of a block for each of its instances as one line.

    A block's stage written wrong is wrong in every instance: 10,000
    lines that differ only in the instance's id (``'L.17.m'``) hid the
    one line that says why (an unknown key, further along the same line).
    The first instance's line stands for them, saying how many more.

    >>> o = Origin("m.yaml", 9, 7)
    >>> folded([Diagnostic(o, f"stage 'L.{i}.m' gives 0 inputs") for i in range(3)] + [Diagnostic(o, "other")])
    ["m.yaml:9:7: error: stage 'L.0.m' gives 0 inputs (and in 2 more instances)", 'm.yaml:9:7: error: other']
    """
    groups: dict[tuple, list[Diagnostic]] = {}
    for d in diagnostics:
        o = d.origin
        where = (o.file, o.line, o.col) if o is not None else None
        groups.setdefault((where, d.severity, _INSTANCE.sub("'-'", d.message)), []).append(d)
    out = []
    for same in groups.values():
        text = str(same[0])
        if len(same) > 1:
            first, _, rest = text.partition("\n")
            text = f"{first} (and in {len(same) - 1:,} more instances)" + (f"\n{rest}" if rest else "")
        out.append(text)
    return out


class ManifestError(HetflowError):
    """A manifest is wrong; carries every problem found, in file order.

    ``diagnostics`` holds them all; the message lists the first
    :data:`SHOWN` and says how many more there are.
    """

    exit_code = 2

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = sorted(
            diagnostics, key=lambda d: (d.origin or Origin("", 0, 0), d.message)
        )
        super().__init__("\n".join(capped(folded(self.diagnostics) if len(self.diagnostics) > 1 else self.diagnostics)))


#: the API's keywords whose option has another name than ``--`` and the keyword with dashes
_OPTIONS = {"params": "-p", "inputs": "--input"}


def argument(keyword: str, value: object = None, key: str | None = None) -> str:
    """How a message names the argument ``keyword`` of the Python API (``hetflow.run(point=...)``) to its reader,
    given ``value`` if not None (the entry ``key: value`` of a mapping if ``key`` is given): ``point=`` from
    Python, ``--point`` while a command of the CLI runs (:data:`hetflow.engine.cli.main.RUNNING`).

    >>> argument("threads_per_worker"), argument("runs_dir", "/r"), argument("place", "w0", key="accel")
    ('threads_per_worker=', "runs_dir='/r'", "place={'accel': 'w0'}")
    >>> import importlib
    >>> commands = importlib.import_module("hetflow.engine.cli.main")
    >>> commands.RUNNING[0] = True
    >>> argument("threads_per_worker"), argument("runs_dir", "/r"), argument("place", "w0", key="accel")
    ('--threads-per-worker', '--runs-dir /r', '--place accel=w0')
    >>> commands.RUNNING[0] = False
    """
    if _on_the_command_line():
        option = _OPTIONS.get(keyword) or "--" + keyword.replace("_", "-")
        if value is None:
            return option
        return f"{option} {value}" if key is None else f"{option} {key}={value}"
    if value is None:
        return keyword + "="
    return f"{keyword}={value!r}" if key is None else f"{keyword}={{{key!r}: {value!r}}}"


def _on_the_command_line() -> bool:
    """Whether a command of the CLI runs in this process. Its module is looked up, not imported: the lightest
    commands (``hetflow emulate``) load neither it nor this module's users, and a process that never ran a
    command is Python's."""
    import sys

    main = sys.modules.get("hetflow.engine.cli.main")
    return bool(main is not None and main.RUNNING[0])


class UsageError(HetflowError):
    """The command line is wrong (an unknown param, a bad value)."""

    exit_code = 2


class EnvironmentUnavailable(HetflowError):
    """What a command runs in is not there: a Dask cluster that does not answer or has no workers, a runs
    directory that cannot be created or written.

    The input is right and the same command may succeed later, so the CLI
    tells it apart from bad input (exit 5, not 2). It is raised before
    anything is written, but for :class:`StorageUnavailable`.
    """

    exit_code = 5


#: what a file system answers when it cannot take a write: full, over quota, read-only, failing, file too large,
#: or a folder whose write permission was taken away while the command ran (a chmod, a clean-up job)
STORAGE_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EROFS", "EIO", "EFBIG", "EACCES",
                                                             "EPERM") if hasattr(errno, name))


def is_storage_error(error: BaseException) -> bool:
    """Whether ``error`` is a file system refusing a write (:data:`STORAGE_ERRNOS`).

    >>> is_storage_error(OSError(errno.ENOSPC, "No space left on device")), is_storage_error(KeyError("x"))
    (True, False)
    """
    return isinstance(error, OSError) and error.errno in STORAGE_ERRNOS


def name_file(error: BaseException, path: str) -> None:
    """Give a file system's error the path being written where it names none (``write`` and ``flush`` say
    only "No space left on device"), so that the message of a full disk says which file.

    >>> e = OSError(errno.ENOSPC, "No space left on device"); name_file(e, "runs/r/record.json"); e.filename
    'runs/r/record.json'
    """
    if isinstance(error, OSError) and error.filename is None and error.errno is not None:
        error.filename = path


class StorageUnavailable(EnvironmentUnavailable):
    """A file of a run could not be written: its disk is full, over quota, read-only or failing.

    Raised after the run's work, or during it: ``record_path`` is the
    run's record where a final one was written (``status: failed``, the
    file system's error in ``error``), None where not even that could be
    written (the ``running`` record then stays, and reads ``died`` once
    this process has ended); ``run_id`` names the run whose folder is left
    in either case (None where nothing of it is).
    """

    def __init__(self, message: str, record_path: str | None = None, run_id: str | None = None) -> None:
        super().__init__(message)
        self.record_path = record_path
        self.run_id = run_id


def refuse_file_in_the_way(path: str | os.PathLike, keyword: str) -> None:
    """Refuse the folder argument ``keyword`` (``runs_dir``, ``cache_dir``) whose ``path`` is a file or lies
    inside one: a slip in what was typed, the same for every command (exit 2), before anything is read or written.

    A runs directory that is a file was listed as empty, planned against
    as if it held no run, and refused by ``run`` as the environment's
    fault; a cache directory inside a file failed every entry's write.

    >>> refuse_file_in_the_way(__file__, "runs_dir")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hetflow.engine.errors.UsageError: runs_dir= '...errors.py' is a file, not a folder
    """
    text = os.fspath(path)
    above = os.path.abspath(text)
    while not os.path.exists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if os.path.exists(above) and not os.path.isdir(above):
        where = f"{text!r} is a file" if os.path.abspath(text) == above else f"{text!r} is inside a file, {above}"
        raise UsageError(f"{argument(keyword)} {where}, not a folder")


def require_runs_dir(path: str, *, create: bool = True) -> None:
    """Make sure the runs directory ``path`` can be written to, creating it unless ``create`` is false.

    The one check the API and the CLI make before they write a run, a
    sweep, a lock or a schedule claim there; with ``create=False`` it
    writes nothing and only refuses what can never work (a file in the
    way), cheaply enough to ask before a cluster is started.

    Raises
    ------
    UsageError
        the path is a file or lies inside one (:func:`refuse_file_in_the_way`).
    EnvironmentUnavailable
        the folder cannot be created or written.
    """
    if isinstance(path, str) and "\0" in path:
        raise UsageError(f"the runs directory {path!r} cannot be a folder's name: it holds a NUL character")
    refuse_file_in_the_way(path, "runs_dir")
    if not create:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise EnvironmentUnavailable(f"the runs directory {path} cannot be created: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise EnvironmentUnavailable(f"the runs directory {path} is not writable")


class RunFailed(HetflowError):
    """A stage failed while the pipeline ran; the run record says which and why (``record``: its data, as written)."""

    def __init__(self, message: str, record_path: str | None = None, record: dict | None = None) -> None:
        super().__init__(message)
        self.record_path = record_path
        self.record = record


class SourceChanged(UserWarning):
    """Warned when what a resumed run or sweep began from has changed: its manifest file, or a file a ``load``
    stage reads.

    A resumed run goes on as its record says it began, and a resumed
    sweep's points not yet run compile from the copy of the file the sweep
    took when it began, so that every point of a sweep is one manifest's:
    the manifest's change is not in them; run the file anew for it. A data
    file is read as it is now (its old bytes are gone): the stages that
    read it, and those after them, run again on its new bytes, and the
    record's ``data`` names them.
    """


class RunCancelled(HetflowError):
    """SIGINT or SIGTERM stopped a run; its record says ``cancelled``, the signal and what had finished."""

    def __init__(self, message: str, record_path: str | None = None, signal: str | None = None) -> None:
        super().__init__(message)
        self.record_path = record_path
        self.signal = signal

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        """128 + the signal's number, as a shell reports a process it ended (130, SIGINT's, when unknown)."""
        import signal as signals

        try:
            return 128 + int(signals.Signals[self.signal or "SIGINT"])
        except KeyError:
            return 128 + int(signals.SIGINT)


class OutputDamaged(HetflowError):
    """A run's output file is gone, unreadable, or no longer the array its record's digest names (changed or
    damaged since the run); ``why`` says which, without the output's name."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"output {name!r}: {why}")
        self.name = name
        self.why = why


class StageFailure(Exception):
    """A task of a run failed: a partition's executor, a bridge, or an emulator phase.

    ``partition`` is the failing task's partition (``phase:ID`` for an
    emulator phase); ``node`` names the stage or phase when it is known.
    When a user's op raised, ``op`` names it and ``user_traceback`` is the
    traceback of the user's code alone. The run records it; the error the
    user sees is the :class:`RunFailed` that follows.
    """

    def __init__(self, partition: str, node: str | None, message: str, op: str | None = None,
                 user_traceback: str | None = None) -> None:
        super().__init__(partition, node, message)
        self.partition = partition
        self.node = node
        self.message = message
        self.op = op
        self.user_traceback = user_traceback

    def __reduce__(self) -> tuple:
        return (type(self), (self.partition, self.node, self.message, self.op, self.user_traceback))

    def __str__(self) -> str:
        where = f"stage {self.node!r}" if self.node else f"partition {self.partition}"
        return f"{where} failed: {self.message}"


class LockHeld(HetflowError):
    """Another live process runs this manifest against this runs directory (``here``: another thread of this one,
    a notebook's or a service's)."""

    exit_code = 4

    def __init__(self, path: str, holder: dict, here: bool = False) -> None:
        who = (f"another call in this process (pid {holder.get('pid')}), in another thread" if here
               else f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another process")
        since = f" since {holder['since']}" if holder.get("since") else ""
        run = f" (run {holder['run']})" if holder.get("run") else ""
        super().__init__(f"{holder.get('manifest') or 'this manifest'} is already running: {who}{since}{run}; lock {path}")
        self.path = path
        self.holder = holder


class StillRunning(LockHeld):
    """A ``--resume`` of a run or sweep whose process still runs it: another process holds what the resume would
    take, as a held lock says (exit 4), whichever of the two the resume met first."""

    def __init__(self, message: str, holder: dict) -> None:
        HetflowError.__init__(self, message)
        self.path = None
        self.holder = holder
