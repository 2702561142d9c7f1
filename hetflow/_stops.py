"""The stop signals of ``hetflow schedule serve`` kept from its first moment, before the command line loads.

Apart from :mod:`hetflow._start` (the console script, which goes on to load the command line) so that the
``hetflow`` package can take them for ``python -m hetflow.engine.cli schedule serve`` importing nothing more.
"""

from __future__ import annotations

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


def keep_stops_of_module_run() -> None:
    """Keep the stop signals of ``python -m hetflow.engine.cli schedule serve`` (how a service whose Python has no
    console script starts serve) from the first line of the ``hetflow`` package, which ``-m`` imports before the
    command line's modules, as the console script keeps its own (:func:`hetflow._start.entry`).

    Only while ``-m`` locates that very module (``sys.argv[0]`` is ``"-m"`` until it runs): an import of
    ``hetflow`` by any other program installs nothing.
    """
    if sys.argv[:1] != ["-m"]:
        return
    orig = getattr(sys, "orig_argv", [])
    try:
        module = orig[orig.index("-m") + 1]
    except (ValueError, IndexError):
        return
    if module in ("hetflow.engine.cli", "hetflow.engine.cli.__main__") and _serving(sys.argv[1:]):
        _keep_stops()
