"""The ``hetflow`` console script: the command line, with a Ctrl-C that comes while it loads ending it quietly.

Kept apart from :mod:`hetflow.engine.cli` so that the script's own import is this file alone: an interrupt
while the command line's modules load (the first tenth of a second) exits 130, as the command's own
cancellation does, instead of printing Python's traceback of the import it cut short.

``hetflow schedule serve`` takes its stop signals here, before anything loads: one that comes while the
command line's modules load is kept (:class:`Stops`) and stops ``serve`` as soon as it is up, which then
exits 0 as a stop does later, where the signal's default action ended it (-15, -1). Only the interpreter's
own start, before this file runs, is left to the default action.
"""

from __future__ import annotations

import os
import sys


class Stops(list):
    """The handler of the stop signals that come before ``serve`` has its own: it keeps them, in order.
    ``serve`` finds it in the handlers it replaces and takes what it kept as its own."""

    def __call__(self, signum: int, frame: object) -> None:
        self.append(signum)


def _serving(argv: list[str]) -> bool:
    """Whether the command line is ``schedule serve`` (after the options before the command, ``--debug``)."""
    words = [a for a in argv if not a.startswith("-")]
    return words[:2] == ["schedule", "serve"]


def _keep_stops() -> None:
    import signal

    stops = Stops()
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        # a signal the process was started ignoring (SIGHUP under nohup) stays ignored, as serve leaves it
        if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, stops)


def entry() -> None:
    if _serving(sys.argv[1:]):
        _keep_stops()
    try:
        from hetflow.engine.cli.main import entry as command
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        os._exit(130)
    command()
