"""Every way a command can fail, as what its user is told: the exit code, the lines on standard error,
the ``--json`` object and the id that ends standard output.

A command that returns has chosen its exit code and printed its result
itself. A command that raises ends here: :func:`outcome` finds the first
rule in :data:`RULES` whose exception type matches, most specific first,
and the last rule (any other exception: a bug) writes the traceback to a
crash log. ``main`` prints the :class:`Outcome`: its lines on standard
error always, and on standard output the JSON object (with ``--json``,
unless the command printed its own) or else the run's or sweep's id, so
that ``id=$(hetflow run m.yaml | tail -n 1)`` holds for a cancelled run
too.

The JSON object of a failure:

``status``
    ``"cancelled"`` (a signal stopped the command), ``"failed"`` (exit 1),
    or ``"error"``: the command could not start, or broke.
``exit_code``
    the process's exit code.
``error``
    with ``"error"``: ``"bad-input"`` (2), ``"internal"`` (3), ``"locked"``
    (4) or ``"environment"`` (5).
``message``
    what was wrong, as standard error says it.

and by kind: ``diagnostics`` (bad input: one ``{file, line, col,
severity, message}`` per manifest problem, every one of them, empty for a
bad argument) and ``count`` (a bad manifest: how many; standard error and
``message`` list the first 50, then ``... and N more``),
``lock`` and ``holder`` (locked: the lock file and who holds it: pid,
host, run, since), ``run_id`` and ``record`` (environment: a run whose
disk refused its files, where its failed record was written; ``run_id``
alone where not even that could be, its folder left with its running
record; verify's
rerun adds ``rerun_id``, ``run_id`` being the run verified; a full
disk, a quota, a read-only or failing file system is the environment's,
exit 5, wherever hetflow meets it), ``sweep_id``, ``summary`` and
``points`` (environment: a sweep whose summary's last write was
refused), ``crash_log`` (internal), ``signal`` with ``run_id``
and ``record`` or, for a sweep, ``sweep_id`` and ``summary`` (cancelled).

Examples
--------
>>> from hetflow.engine.errors import Diagnostic, ManifestError, Origin
>>> o = outcome(ManifestError([Diagnostic(Origin("m.yaml", 5, 11), "unknown op 'relu2'")]))
>>> o.code, o.lines
(2, ["m.yaml:5:11: error: unknown op 'relu2'"])
>>> o.data["error"], o.data["diagnostics"]
('bad-input', [{'file': 'm.yaml', 'line': 5, 'col': 11, 'severity': 'error', 'message': "unknown op 'relu2'"}])
>>> c = outcome(RunCancelled("run r cancelled by SIGTERM", "runs/r/record.json", "SIGTERM"))
>>> c.code, c.ref, c.data["run_id"], c.data["status"]
(143, 'r', 'r', 'cancelled')
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hetflow.engine.cli.common import (EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERNAL, EXIT_LOCKED,
                                       EXIT_RUN_FAILED, problem_lines)
from hetflow.engine.errors import (Diagnostic, EnvironmentUnavailable, HetflowError, LockHeld, ManifestError,
                                   RunCancelled, RunFailed, UsageError,
                                   is_storage_error)

__all__ = ["Outcome", "outcome", "RULES"]


@dataclass
class Outcome:
    """How a command that raised ends."""

    code: int
    #: printed to standard error, one a line
    lines: list[str]
    #: the ``--json`` object
    data: dict[str, Any]
    #: the id of the run or sweep the command made, standard output's last line without ``--json``
    ref: str | None = None


def _error(kind: str, code: int, message: str, **extra: Any) -> dict[str, Any]:
    return {"status": "error", "exit_code": code, "error": kind, "message": message, **extra}


def _diagnostic(d: Diagnostic) -> dict[str, Any]:
    o = d.origin
    out = {"file": o.file if o else None, "line": o.line if o else None, "col": o.col if o else None,
           "severity": d.severity, "message": d.message}
    notes = getattr(o, "notes", ())
    if notes:  # a problem inside a block's instance: where each use that made the instance is, innermost first
        out["notes"] = [{"file": at.file, "line": at.line, "col": at.col, "message": text} for at, text in notes]
    return out


def _bad_manifest(e: ManifestError, debug: bool) -> Outcome:
    # standard error shows the first SHOWN problems, as a person reads them; the JSON object, for programs,
    # keeps every one and says how many there are
    return Outcome(EXIT_BAD_INPUT, problem_lines(e.diagnostics),
                   _error("bad-input", EXIT_BAD_INPUT, str(e), count=len(e.diagnostics),
                          diagnostics=[_diagnostic(d) for d in e.diagnostics]))


def _bad_usage(e: UsageError, debug: bool) -> Outcome:
    return Outcome(EXIT_BAD_INPUT, [f"hetflow: error: {e}"], _error("bad-input", EXIT_BAD_INPUT, str(e), diagnostics=[]))


def _unavailable(e: EnvironmentUnavailable, debug: bool) -> Outcome:
    points = getattr(e, "points", None)
    if points is not None:
        # a sweep that ran but whose summary's end its disk refused: its id, and the runs its points left
        from hetflow.engine.cli.pipelines import _point_json

        said = {"sweep_id": e.sweep_id, "summary": e.summary, "points": [_point_json(r) for r in points]}
        # one line, which names the summary; the id ends standard output only where that is still there to read
        return Outcome(EXIT_ENVIRONMENT, [f"hetflow: error: {e}"],
                       _error("environment", EXIT_ENVIRONMENT, str(e), **said), e.sweep_id if e.summary else None)
    # a run whose disk refused its files (StorageUnavailable) names its record where that says failed
    record = getattr(e, "record_path", None)
    # a run whose record could not be written at all: its folder, named by its id, is still there to look at
    made = _made(record) or ({"run_id": e.run_id} if getattr(e, "run_id", None) else {})
    lines = [f"hetflow: error: {e}"] + ([f"record: {record}"] if record else [])
    verifies = getattr(e, "verifies", None)  # verify's rerun: run_id is the run it verifies, as verify's own object
    said = {"run_id": verifies, "rerun_id": made.get("run_id"), "record": made.get("record")} if verifies else made
    return Outcome(EXIT_ENVIRONMENT, lines, _error("environment", EXIT_ENVIRONMENT, str(e), **said),
                   made.get("run_id"))


def _os_error(e: OSError, debug: bool) -> Outcome:
    """A file hetflow writes outside a run (a sweep's summary, a lock, a schedule's claim, a report) that its
    file system refused: the environment's, as a full disk is; any other ``OSError`` is a bug."""
    if not is_storage_error(e):
        return _internal(e, debug)
    where = f"cannot write {e.filename}" if e.filename else "a write failed"
    message = f"{where}: {e.strerror or e}"
    return Outcome(EXIT_ENVIRONMENT, [f"hetflow: error: {message}"], _error("environment", EXIT_ENVIRONMENT, message))


def _locked(e: LockHeld, debug: bool) -> Outcome:
    return Outcome(EXIT_LOCKED, [f"hetflow: {e}"], _error("locked", EXIT_LOCKED, str(e), lock=e.path, holder=e.holder))


def _made(record_path: str | None) -> dict[str, Any]:
    """The id and record of the run (``RUN_DIR/record.json``) or sweep (``SWEEP_DIR/sweep.json``) at ``record_path``."""
    if not record_path:
        return {}
    ref = os.path.basename(os.path.dirname(record_path))
    if os.path.basename(record_path) == "sweep.json":
        return {"sweep_id": ref, "summary": record_path}
    return {"run_id": ref, "record": record_path}


def _cancelled(e: RunCancelled, debug: bool) -> Outcome:
    from hetflow.engine.run.cancel import exit_code_of

    code, made = exit_code_of(e.signal), _made(e.record_path)
    lines = [f"hetflow: {e}"] + ([f"record: {e.record_path}"] if e.record_path else [])
    verifies = getattr(e, "verifies", None)  # verify's rerun stopped: run_id is the run it verifies
    said = {"run_id": verifies, "rerun_id": made.get("run_id"), "record": made.get("record")} if verifies else made
    data = {"status": "cancelled", "exit_code": code, "signal": e.signal, "message": str(e), **said}
    return Outcome(code, lines, data, made.get("run_id") or made.get("sweep_id"))


def _failed(e: HetflowError, debug: bool) -> Outcome:
    if e.exit_code == EXIT_BAD_INPUT:  # bad input of a kind outside the engine (a malformed @op: PluginError)
        return _bad_usage(e, debug)
    made = _made(e.record_path) if isinstance(e, RunFailed) else {}
    data = {"status": "failed", "exit_code": EXIT_RUN_FAILED, "message": str(e), **made}
    return Outcome(EXIT_RUN_FAILED, [f"hetflow: error: {e}"], data, made.get("run_id") or made.get("sweep_id"))


def _interrupted(e: KeyboardInterrupt, debug: bool) -> Outcome:
    import signal

    number = getattr(e, "signum", signal.SIGINT)  # a SIGTERM or SIGHUP a writing command took as a Ctrl-C
    name = signal.Signals(number).name
    return Outcome(128 + number, ["hetflow: interrupted" + (f" by {name}" if number != signal.SIGINT else "")],
                   {"status": "cancelled", "exit_code": 128 + number, "signal": name, "message": "interrupted"})


def _internal(e: BaseException, debug: bool) -> Outcome:
    import traceback

    text = "".join(traceback.format_exception(e))
    message = f"{type(e).__name__}: {e}"
    try:
        log = _write_crash_log(text)
        where = f"traceback in {log}"
    except OSError as unwritable:  # a full or read-only temp folder must not hide the bug behind its own
        log, where = None, f"no crash log: {unwritable}"
    lines = [f"hetflow: internal error: {message} ({where}; --debug shows it)"]
    if debug:
        lines.append(text.rstrip("\n"))
    return Outcome(EXIT_INTERNAL, lines, _error("internal", EXIT_INTERNAL, message, crash_log=log))


def _write_crash_log(text: str) -> str:
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), "hetflow")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


#: (exception type, rule), most specific first; what none matches is an internal error
RULES: tuple[tuple[type[BaseException], Callable[[Any, bool], Outcome]], ...] = (
    (RunCancelled, _cancelled),
    (ManifestError, _bad_manifest),
    (UsageError, _bad_usage),
    (EnvironmentUnavailable, _unavailable),
    (LockHeld, _locked),
    (HetflowError, _failed),
    (KeyboardInterrupt, _interrupted),
    (OSError, _os_error),
)


def outcome(error: BaseException, debug: bool = False) -> Outcome:
    """How a command that raised ``error`` ends; ``debug`` adds an internal error's traceback to its lines."""
    for kind, rule in RULES:
        if isinstance(error, kind):
            return rule(error, debug)
    return _internal(error, debug)
