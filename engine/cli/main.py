"""``main(argv) -> int``: parse, dispatch to the command's module, map every failure to an exit code.

0 success, 1 the run failed, 2 bad input (manifest, arguments), 3
internal error (one line on screen, the traceback in a log file, shown in
full with ``--debug``), 4 the manifest's run lock is held, 5 the
environment is not there (a cluster that does not answer, a runs
directory that cannot be used). A command cancelled by a signal exits
128 + the signal. :mod:`hetflow.engine.cli.outcomes` says what each
failure prints, and the ``--json`` object it prints, so that a command
given ``--json`` prints exactly one JSON object on standard output
however it ends.

A command writes to ``out`` and ``err`` as
:class:`~hetflow.engine.run.events.QuietStream`: when the reader of either
goes away (``hetflow runs | head -1``), what is still to print is dropped
and the command goes on and ends with the exit code it would have had;
a run or sweep writes its whole record.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Sequence

from hetflow.engine.cli.common import EXIT_ENVIRONMENT, EXIT_OK, _ShowVersion
from hetflow.engine.run.events import QuietStream, printable, quiet

# no typing, contextlib or importlib here: together 2-4 ms of every ``hetflow emulate``
TYPE_CHECKING = False
if TYPE_CHECKING:
    from hetflow.engine.cli.outcomes import Outcome

__all__ = ["main", "entry"]

# Each command's module loads when the command runs: ``hetflow emulate`` imports neither the
# pipeline commands nor what they import.
_COMMANDS = {"validate": "pipelines.cmd_validate", "plan": "pipelines.cmd_plan", "run": "pipelines.cmd_run",
             "verify": "pipelines.cmd_verify", "runs": "runs.cmd_runs", "report": "runs.cmd_report",
             "executors": "catalog.cmd_executors", "examples": "catalog.cmd_examples", "schema": "catalog.cmd_schema",
             "emulate": "emulate.cmd_emulate", "schedule": "scheduling.cmd_schedule",
             "import": "importing.cmd_import"}


def _command(name: str):
    module, function = _COMMANDS[name].split(".")
    return getattr(__import__(f"hetflow.engine.cli.{module}", fromlist=[function]), function)

# Commands that run pipelines: SIGINT and SIGTERM cancel them (hetflow.engine.run.cancel) and they exit 128 + signal.
_STOPPABLE = frozenset({"run", "verify"})
#: commands that write files through temporary ones: a SIGTERM or SIGHUP ends them as a Ctrl-C does, their
#: temporary files removed on the way out (the default action ended the process with them left)
_WRITERS = frozenset({"import", "report", "schema"})


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread of a command of :data:`_WRITERS` or one given ``--json``."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum


@contextlib.contextmanager
def _terminable(wanted: bool):
    if not wanted:  # before any import: emulate's start-up loads nothing it does not use
        yield
        return
    import signal

    def raise_it(signum: int, frame: object) -> None:
        raise Terminated(signum)

    old = {}
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is signal.SIG_DFL:  # not one nohup set to be ignored
            try:
                old[number] = signal.signal(number, raise_it)
            except ValueError:
                break  # not the main thread (main() called from a thread): no handler can be set there
    try:
        yield
    finally:
        for number, handler in old.items():
            signal.signal(number, handler)


#: whether the command's run or sweep has ended (its record final): a stop signal after it is no cancellation
DONE = [False]

#: whether the command is the process's own (``hetflow ...``, :func:`entry`), not a call of :func:`main` from
#: Python: its signal handlers are then the process's until it ends
ENTRY = [False]

#: whether a command runs in this process: its messages name the command line's options, not the Python API's
#: keywords (:func:`hetflow.engine.errors.argument`). A list, not a context variable, so that the threads a
#: command starts (a sweep's points) speak as it does.
RUNNING = [False]


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    before, RUNNING[0], DONE[0] = RUNNING[0], True, False
    try:
        streams = _Streams(out, err)
        with streams as (out, err):
            code = _dispatch(argv, out, err, streams.set_aside)
            out.flush()
            err.flush()
            return _output_lost(code, out, err)
    finally:
        RUNNING[0] = before


def _output_lost(code: int, out: QuietStream, err: QuietStream) -> int:
    """``code``, or the environment's (5) where a command that did its work could not write its output: a disk
    that refused standard output or error (a file on a full disk). The run or sweep went on to its end and its
    record says how it ended; what it printed is what was lost, and standard error says so either way."""
    lost = [(name, stream.lost) for name, stream in (("standard output", out), ("standard error", err))
            if stream.lost is not None]
    if not lost:
        return code
    for name, error in lost:  # said even where the command failed: what it printed of why is lost
        print(f"hetflow: error: {name} could not be written: {error.strerror or error}", file=err)
    # a command that failed says so by its own code, the more telling one
    return EXIT_ENVIRONMENT if code == EXIT_OK else code


class _Streams:
    """``out`` and ``err`` (default: the process's own) as quiet streams, flushed at the end.

    The process's own streams are replaced by their quiet ones in ``sys``
    while the command runs: argparse's usage, warnings and a plugin's
    ``print`` write there, and a closed pipe must not fail them either.
    """

    def __init__(self, out, err) -> None:
        self.own_out, self.own_err = out is None, err is None
        self.moved = None  # standard output's duplicate while file descriptor 1 is set aside (set_aside)
        self.out = quiet(sys.stdout if self.own_out else out)
        self.err = quiet(sys.stderr if self.own_err else err)

    def __enter__(self) -> tuple[QuietStream, QuietStream]:
        self.saved = sys.stdout, sys.stderr
        if self.own_out:
            sys.stdout = self.out
        if self.own_err:
            sys.stderr = self.err
        return self.out, self.err

    def set_aside(self) -> None:
        """Point file descriptor 1 at standard error until the command ends, its own output going on to standard
        output through a duplicate of it. What a pipeline's op writes there, past Python's ``sys.stdout`` (a
        subprocess it starts, ``os.write(1, ...)``, a C library's ``printf``, a local cluster's worker it
        prints from), is then not taken for the command's result: ``hetflow run --json | jq`` holds."""
        if not self.own_out or self.out.gone:
            return
        own = self.saved[0]
        try:
            if own.fileno() != 1:  # a caller's stream in its place (pytest's capture, a redirect in Python)
                return
            own.flush()
            duplicate = os.dup(1)
        except (AttributeError, OSError, ValueError):
            return
        try:
            moved = open(duplicate, "w", buffering=1 if own.line_buffering else -1,  # noqa: SIM115 - closed at exit
                         encoding=own.encoding, errors=own.errors)
            os.dup2(2, 1)
        except (OSError, ValueError):
            os.close(duplicate)
            return
        self.moved = moved
        self.out.wrap(moved)

    def __exit__(self, *exc) -> None:
        try:
            self.out.flush()
            self.err.flush()
        finally:
            sys.stdout, sys.stderr = self.saved
            if self.moved is not None:
                self._put_back()

    def _put_back(self) -> None:
        """File descriptor 1 back where it was, once what was written to it meanwhile has gone to standard error;
        at ``/dev/null`` where the reader of standard output is gone, for the interpreter's last flush."""
        moved, self.moved = self.moved, None
        try:
            self.saved[0].flush()
        except (OSError, ValueError):
            pass
        self.out.wrap(self.saved[0])
        try:
            if self.out.gone:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.close(null)
            else:
                os.dup2(moved.fileno(), 1)
        finally:
            try:
                moved.close()
            except (OSError, ValueError):
                pass


def _dispatch(argv: list[str], out: QuietStream, err: QuietStream, set_aside=lambda: None) -> int:
    debug = "--debug" in argv
    as_json = "--json" in argv  # until the arguments are parsed: a command line that does not parse is bad input
    try:
        args = None
        if argv[:1] == ["emulate"]:
            from hetflow.engine.cli.emulate import plain_args
            args = plain_args(argv)      # a plain command line, read without argparse (2-8 ms to load and build)
        if args is None:
            from hetflow.engine.cli.parser import _parser
            # emulate's own parser alone: the same usage, help and errors without building every command's
            args = _parser("emulate" if argv[:1] == ["emulate"] else None).parse_args(argv)
        as_json = bool(getattr(args, "json", False))
        if sys.stdout is out:
            # Standard output is the command's own (its result, its JSON, the id on the last line): what else
            # prints while it runs, a plugin's or an op's print(), goes to standard error, so that
            # `hetflow run --json | jq` and `id=$(hetflow run m.yaml | tail -n 1)` hold with chatty ops too
            sys.stdout = err
        if args.command not in _STOPPABLE:
            # and a --json command, whose one object says how it ended however that was
            with _terminable(args.command in _WRITERS or as_json):
                return _command(args.command)(args, out, err)
        set_aside()  # a pipeline's ops run in this process or its cluster's: what they write is no result
        from hetflow.engine.run.cancel import stopping
        # now, not in a second signal's handler, which may interrupt an import under way
        from hetflow.engine.cli import outcomes  # noqa: F401

        with stopping() as cancel:
            # registered first, so it runs last: the run's and the sweep's own hooks have written their records
            cancel.on_forced_exit(lambda: _report_forced_exit(cancel, as_json, out, err))
            code = _command(args.command)(args, out, err)
            DONE[0] = True  # a signal from now on stops nothing: the run or sweep has ended, its record says how
            if ENTRY[0]:
                _ended(code)
            return code
    except _ShowVersion:
        import hetflow

        print(f"hetflow {hetflow.__version__}", file=out)
        return EXIT_OK
    except SystemExit as e:  # --help, argparse's own errors; anything else that calls sys.exit("...") is a bug here
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        from hetflow.engine.cli.outcomes import outcome

        return _report(outcome(e, debug), as_json, out, err)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - the one place that maps every failure to an exit code
        # loaded only when a command fails: its dataclasses and inspect are a tenth of --help's start-up
        from hetflow.engine.cli.outcomes import outcome

        return _report(outcome(e, debug), as_json, out, err)


def _report(ended: Outcome, as_json: bool, out: QuietStream, err: QuietStream) -> int:
    """Print how a command that raised ended; return its exit code."""
    for line in ended.lines:
        print(printable(line), file=err)
    if as_json:
        if not out.wrote:  # one JSON object in all: a command that printed its own keeps it
            import json  # here: a cached ``hetflow emulate`` starts without it

            print(json.dumps(ended.data), file=out)
    elif ended.ref:
        print(ended.ref, file=out)
    return ended.code


def _report_forced_exit(cancel, as_json: bool, out: QuietStream, err: QuietStream) -> None:
    """A second signal ends the process at once: say what it stopped as a first signal's end says it."""
    from hetflow.engine.cli.outcomes import outcome
    from hetflow.engine.errors import RunCancelled

    subject = cancel.subject
    if subject is None:
        return
    message = f"{subject['kind']} {subject['id']} cancelled by {cancel.signal} (a second signal: forced exit)"
    out.seal()  # a sweep's points still print their rows from their threads while the process ends
    err.seal()
    _report(outcome(RunCancelled(message, subject["record"], cancel.signal)), as_json, out, err)
    out.flush()
    err.flush()


def _load_numpy(computes: bool) -> None:
    """numpy, loaded before anything else of a pipeline command; for one that only checks and plans
    (``computes`` false), with OpenBLAS's thread pool at one thread.

    Both measured on the quickstart, whole processes on two cores:

    - loaded first, before the parser and the engine's modules, numpy's
      own module code (its typing aliases) took half the time it took
      when loaded after them: 15 ms of a 0.18 s ``hetflow plan``;
    - OpenBLAS starts its pool as it loads, and each thread of it then
      spins for a while waiting for work that ``validate`` and ``plan``
      never give it, on a core the command's own work needs: 11 ms more.

    The variable is set only while numpy loads, so no process this one
    starts (a local cluster's workers) takes it for the user's own limit,
    and a user who set any pool's size keeps it as it is.
    """
    from hetflow.engine.run.threads import USER_THREAD_VARS

    if "numpy" in sys.modules:
        return
    one = not computes and not any(os.environ.get(k, "").strip() for k in USER_THREAD_VARS)
    if one:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass  # the command itself says what is missing
    finally:
        if one:
            del os.environ["OPENBLAS_NUM_THREADS"]


def _interrupt_until_done(signum: int, frame: object) -> None:
    """SIGINT as Python's own handler takes it (``KeyboardInterrupt``) until the command's run has ended: after
    that, between the end of its signal handlers and the end of the process, one exited 130 ("cancelled") or was
    killed by it, after a run that succeeded and whose record says so."""
    if not DONE[0]:
        raise KeyboardInterrupt


def _end_now(code: int) -> None:
    """End the process at once, its output flushed and the cache entries its abandoned threads were writing
    removed (half written, they would stay until a ``runs gc`` an hour later)."""
    from hetflow.engine.run.cancel import abandon_cache_writes

    for stream in (sys.stdout, sys.stderr):
        quiet(stream).flush()
    abandon_cache_writes()
    os._exit(code)


def _ended(code: int) -> None:
    """The run or sweep has ended and said so: until the command returns (its executors and cluster closing), a
    stop signal stops nothing, and a second one ends the process with ``code``. The default action took over
    there from the command's own handlers, and a SIGTERM or SIGHUP that came after the id was printed killed the
    process (143, 129) after a run that succeeded and whose record says so."""
    import signal

    from hetflow.engine.run.cancel import listened

    came: list[int] = []

    def later(signum: int, frame: object) -> None:
        if came:
            _end_now(code)
        came.append(signum)

    for number in listened():
        signal.signal(number, later)


def _signals_end_with(code: int) -> None:
    """The command has done its work and said how it ended: a Ctrl-C from now on is ignored, and SIGTERM or
    SIGHUP end the process at once with ``code``. A Ctrl-C in the interpreter's teardown killed the process
    (exit -2, or 130 from a shell), "cancelled", after a run that succeeded and whose record says so; ignored,
    it stays ignored through the teardown, where Python puts back the default action of its own handlers."""
    import signal

    def done(signum: int, frame: object) -> None:
        _end_now(code)

    for number in _stop_signals():
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, signal.SIG_IGN if number == signal.SIGINT else done)


def _stop_signals() -> list[int]:
    import signal

    return [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)]


def _ignore_stop_signals() -> None:
    import signal

    for number in _stop_signals():
        signal.signal(number, signal.SIG_IGN)


def entry() -> None:
    # a path or a name the terminal's encoding cannot show (a Latin-1 locale, PYTHONIOENCODING=ascii) is written
    # escaped, as a traceback's text is, rather than ending the command halfway through its output
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    command = sys.argv[1:2]
    try:
        if command in (["validate"], ["plan"], ["run"], ["verify"]):
            _load_numpy(computes=command in (["run"], ["verify"]))
    except KeyboardInterrupt:
        # Ctrl-C while numpy loads, before the command began: nothing of it to say or to undo
        sys.stderr.write("\n")
        os._exit(130)
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt_until_done)
    ENTRY[0] = True
    code = main()
    _signals_end_with(code)
    runtime = sys.modules.get("hetflow.engine.run.runtime")
    # emulate leaves nothing to finish at exit (a translation is cached when it is made): the interpreter's
    # teardown of its modules and the guest's memory would be an eighth of a short guest's whole process
    if code > 128 or (runtime is not None and runtime.abandoned_calls()) or sys.argv[1:2] == ["emulate"]:
        # A cancelled run, or a timed-out attempt, left executor calls going in daemon threads: the interpreter
        # would wait for them, and a BLAS library's exit handler would wait forever for a call it stopped.
        _end_now(code)
    # The interpreter's last collection would walk everything still alive and free the cycles a large
    # pipeline left (its plan, the run's task graph): 1.2 s after a 100,000-stage run. The process ends
    # now and the OS takes the memory back; what the command wrote is closed and flushed by now.
    gc.freeze()
    # The interpreter's teardown puts back the default action of the handlers above, and SIGTERM or SIGHUP then
    # killed the process (143, 129) after a run that succeeded and said so: ignored, as SIGINT is, from here on.
    _ignore_stop_signals()
    sys.exit(code)
