"""The ``hetflow`` command line: a thin layer over :mod:`hetflow` that alone prints and chooses exit codes.

``main(argv) -> int`` parses, dispatches and maps every failure to an
exit code: 0 success, 1 the run failed, 2 bad input (manifest, arguments),
3 internal error (one line on screen, the traceback in a log file, shown
in full with ``--debug``), 4 the manifest's run lock is held, 5 the
environment is not there (a cluster, a usable runs directory). It is the
only place that prints.

One module per command group:

``parser``       every command, its flags and their help (the docs' CLI reference comes from it)
``main``         ``main`` and the console script's ``entry``: dispatch, the output streams
``outcomes``     every way a command ends as its exit code, its message and its ``--json`` object
``pipelines``    ``validate``, ``plan``, ``run``, ``verify``
``runs``         ``runs`` (list, show, diff, table, gc) and ``report``
``scheduling``   ``schedule list|run-due|status|serve``
``emulate``      ``emulate``
``catalog``      ``executors``, ``examples``, ``schema``
``importing``    ``import onnx``

Each command imports the passes it uses when it runs: ``hetflow emulate``
and ``--help`` start without numpy, networkx, jsonschema or dask.
"""

from __future__ import annotations

from hetflow.engine.cli.common import (EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERNAL, EXIT_LOCKED, EXIT_OK,
                                      EXIT_RUN_FAILED)
from hetflow.engine.cli.emulate import INTERPRETER_START_STEPS
from hetflow.engine.cli.main import entry, main

__all__ = ["main", "entry", "EXIT_OK", "EXIT_RUN_FAILED", "EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_LOCKED",
           "EXIT_ENVIRONMENT", "INTERPRETER_START_STEPS", "_parser"]


def __getattr__(name: str):
    # the parser (argparse) loads on first use: a plain ``hetflow emulate`` line never builds it
    if name == "_parser":
        from hetflow.engine.cli.parser import _parser
        return _parser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
