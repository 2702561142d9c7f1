"""``main(argv) -> int``: parse, dispatch to the command's module, map every failure to an exit code.

0 success, 1 the run failed, 2 bad input (manifest, arguments), 3
internal error (one line on screen, the traceback in a log file, shown in
full with ``--debug``), 4 the manifest's run lock is held. A command
cancelled by SIGINT or SIGTERM exits 128 + the signal.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import time
from collections.abc import Sequence

from hetflow.engine.cli.common import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_LOCKED, EXIT_OK, EXIT_RUN_FAILED
from hetflow.engine.cli.parser import _parser, _ShowVersion
from hetflow.engine.errors import HetflowError, ManifestError, RunCancelled, UsageError

__all__ = ["main", "entry"]

# Each command's module loads when the command runs: ``hetflow emulate`` imports neither the
# pipeline commands nor what they import.
_COMMANDS = {"validate": "pipelines.cmd_validate", "plan": "pipelines.cmd_plan", "run": "pipelines.cmd_run",
             "verify": "pipelines.cmd_verify", "runs": "runs.cmd_runs", "report": "runs.cmd_report",
             "executors": "catalog.cmd_executors", "examples": "catalog.cmd_examples", "schema": "catalog.cmd_schema",
             "emulate": "emulate.cmd_emulate", "schedule": "scheduling.cmd_schedule"}


def _command(name: str):
    module, function = _COMMANDS[name].split(".")
    return getattr(importlib.import_module(f"hetflow.engine.cli.{module}"), function)

# Commands that run pipelines: SIGINT and SIGTERM cancel them (hetflow.engine.cancel) and they exit 128 + signal.
_STOPPABLE = frozenset({"run", "verify"})


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        # emulate's own parser alone: the same usage, help and errors without building every command's
        args = _parser("emulate" if argv[:1] == ["emulate"] else None).parse_args(argv)
        if args.command not in _STOPPABLE:
            return _command(args.command)(args, out, err)
        from hetflow.engine.cancel import stopping

        with stopping():
            return _command(args.command)(args, out, err)
    except RunCancelled as e:
        print(f"hetflow: {e}", file=err)
        if e.record_path:
            print(f"record: {e.record_path}", file=err)
        from hetflow.engine.cancel import exit_code_of

        return exit_code_of(e.signal)
    except _ShowVersion:
        import hetflow

        print(f"hetflow {hetflow.__version__}", file=out)
        return EXIT_OK
    except ManifestError as e:
        for d in e.diagnostics:
            print(d, file=err)
        return EXIT_BAD_INPUT
    except UsageError as e:
        print(f"hetflow: error: {e}", file=err)
        return EXIT_BAD_INPUT
    except HetflowError as e:
        from hetflow.engine.locks import LockHeld

        if isinstance(e, LockHeld):
            print(f"hetflow: {e}", file=err)
            return EXIT_LOCKED
        print(f"hetflow: error: {e}", file=err)
        return EXIT_RUN_FAILED
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except KeyboardInterrupt:
        print("hetflow: interrupted", file=err)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place that maps bugs to exit 3
        log = _write_crash_log()
        print(f"hetflow: internal error: {type(e).__name__}: {e} (traceback in {log}; --debug shows it)", file=err)
        if debug:
            import traceback

            traceback.print_exc(file=err)
        return EXIT_INTERNAL


def _write_crash_log() -> str:
    import tempfile
    import traceback

    folder = os.path.join(tempfile.gettempdir(), "hetflow")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log")
    with open(path, "w", encoding="utf-8") as f:
        f.write(traceback.format_exc())
    return path


def entry() -> None:
    code = main()
    runtime = sys.modules.get("hetflow.engine.runtime")
    if code > 128 or (runtime is not None and runtime.abandoned_calls()):
        # A cancelled run, or a timed-out attempt, left executor calls going in daemon threads: the interpreter
        # would wait for them, and a BLAS library's exit handler would wait forever for a call it stopped.
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    # The interpreter's last collection would walk everything still alive and free the cycles a large
    # pipeline left (its plan, the run's task graph): 1.2 s after a 100,000-stage run. The process ends
    # now and the OS takes the memory back; what the command wrote is closed and flushed by now.
    gc.freeze()
    sys.exit(code)
