"""What the commands share: the exit codes, the cluster flags as the API's keywords, the event sink."""

from __future__ import annotations

import os

TYPE_CHECKING = False       # typing itself costs ``hetflow emulate`` 3 ms of its start

if TYPE_CHECKING:      # argparse loads with the parser, which a plain ``hetflow emulate`` line does without
    import argparse

__all__ = ["EXIT_OK", "EXIT_RUN_FAILED", "EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_LOCKED", "EXIT_ENVIRONMENT",
           "cluster_kwargs", "event_sink", "write_output", "problem_lines"]

EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_LOCKED, EXIT_ENVIRONMENT = 0, 1, 2, 3, 4, 5


def problem_lines(diagnostics: list, *, fold: bool = True) -> list[str]:
    """The lines that say ``diagnostics`` on standard error: each at its ``FILE:LINE:COL``, and one that has no
    place in a file (a manifest that is not there, or cannot be read) as the program's own, ``hetflow: error:``,
    as every other error without a place is said."""
    from hetflow.engine.errors import capped, folded

    lines = capped(folded(diagnostics) if fold and len(diagnostics) > 1 else diagnostics)
    return [f"hetflow: {line}" if line.startswith(("error: ", "warning: ")) else line for line in lines]


class _ShowVersion(Exception):
    """``--version`` was given: main prints the version to its output stream (here, not in the parser's module,
    so that main catches it without loading argparse)."""


def cluster_kwargs(args: argparse.Namespace) -> dict:
    """The cluster flags as the API's keywords; their combinations are checked here, in the flags' own words."""
    from hetflow.engine.errors import UsageError   # here: ``hetflow emulate`` starts without the errors module
    if args.workers is not None and args.scheduler is not None:
        raise UsageError("--workers starts a new cluster and --scheduler joins one; give one of them")
    for flag, count in (("--workers", args.workers), ("--threads-per-worker", args.threads_per_worker)):
        if count is not None and count < 1:
            raise UsageError(f"{flag} must be at least 1")
    if args.threads_per_worker is not None and args.workers is None:
        raise UsageError("--threads-per-worker goes with --workers")
    if args.workers is None and args.scheduler is None:
        if args.place:
            raise UsageError("--place needs a cluster: add --workers N or --scheduler ADDRESS")
    elif getattr(args, "threads", None) is not None:
        raise UsageError("--threads sets the in-process scheduler; with a cluster use --threads-per-worker")
    place = {}
    for pair in args.place:
        name, sep, worker = pair.partition("=")
        if not sep or not name.strip() or not worker.strip():
            raise UsageError(f"--place expects EXECUTOR=WORKER, got {pair!r}")
        place[name.strip()] = worker.strip()
    return {"workers": args.workers, "threads_per_worker": args.threads_per_worker, "scheduler": args.scheduler,
            "place": place or None}


def event_sink(args: argparse.Namespace, err):
    if args.quiet:
        return None
    from hetflow.engine.run import events

    if args.log_format == "json":
        return events.JsonLog(err)
    if hasattr(err, "isatty") and err.isatty():
        return events.ProgressDisplay(err)
    return events.LineLog(err)


def write_output(path: str, data: bytes, out=None, flag: str = "-o ") -> str:
    """Write ``data`` into the file a command was told to make (``plan -o``, ``schema -o``, ``report``), whole
    or not at all; returns where it went.

    ``-`` is standard output (``out``). A symbolic link is written through:
    the file it names is replaced, the link stays. A path that is no
    regular file (``/dev/stdout``, a FIFO, a terminal) is written into as
    it is, since such a file cannot be replaced. Any other is written
    beside itself and renamed over, so nothing of it is left on a failure.
    A file system that refuses the bytes (a full or read-only disk) is the
    environment's: the ``OSError`` goes on, naming ``path`` (exit 5). A
    path that cannot be such a file (its folder missing, a folder there, a
    file where a folder should be) is bad input: a :class:`UsageError`
    naming the path after ``flag`` (exit 2).
    """
    import errno
    import stat

    from hetflow.engine.errors import UsageError, is_storage_error
    from hetflow.engine.store.records import write_atomic

    if path == "-" and out is not None:
        buffer = getattr(out, "buffer", None)
        if buffer is not None:
            out.flush()
            buffer.write(data)
            buffer.flush()
        else:
            out.write(data.decode("utf-8", "replace"))
        return "standard output"
    try:
        try:
            kind = os.stat(path).st_mode  # through any link: /dev/stdout names whatever fd 1 is
        except FileNotFoundError:
            kind = None
        if kind is not None and stat.S_ISDIR(kind):
            raise IsADirectoryError(21, "Is a directory")
        if kind is not None and not stat.S_ISREG(kind):
            with open(path, "wb") as f:
                f.write(data)
        else:
            write_atomic(os.path.realpath(path) if os.path.islink(path) else path, lambda f: f.write(data))
    except OSError as e:
        # a path the command line names that the user may not write is bad input, as one that is no file
        if is_storage_error(e) and e.errno not in (errno.EACCES, errno.EPERM):
            e.filename = path
            raise
        raise UsageError(f"{flag}{path}: cannot write: {e.strerror or e}") from None
    return path
