"""The ``hetflow`` console script: the command line, with a Ctrl-C that comes while it loads ending it quietly.

Kept apart from :mod:`hetflow.engine.cli` so that the script's own import is this file alone: an interrupt
while the command line's modules load (the first tenth of a second) exits 130, as the command's own
cancellation does, instead of printing Python's traceback of the import it cut short.
"""

from __future__ import annotations

import os
import sys


def entry() -> None:
    try:
        from hetflow.engine.cli.main import entry as command
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        os._exit(130)
    command()
