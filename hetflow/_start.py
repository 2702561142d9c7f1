"""The ``hetflow`` console script: the command line, with a Ctrl-C that comes while it loads ending it quietly.

Kept apart from :mod:`hetflow.engine.cli` so that the script's own import is this file alone: an interrupt
while the command line's modules load (the first tenth of a second) exits 130, as the command's own
cancellation does, instead of printing Python's traceback of the import it cut short.

``hetflow schedule serve`` takes its stop signals here, before anything loads: one that comes while the
command line's modules load is kept (:class:`Stops`) and stops ``serve`` as soon as it is up, which then
exits 0 as a stop does later, where the signal's default action ended it (-15, -1). So does
``python -m hetflow.engine.cli schedule serve``, from the first line of the ``hetflow`` package
(:func:`hetflow._stops.keep_stops_of_module_run`). Only the interpreter's own start, before that runs, is left
to the default action.
"""

from __future__ import annotations

import os
import sys

from hetflow._stops import Stops, _keep_stops, _serving  # noqa: F401 - Stops: serve takes what it kept


def entry() -> None:
    if _serving(sys.argv[1:]):
        _keep_stops()
    try:
        from hetflow.engine.cli.main import entry as command
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        os._exit(130)
    command()
