"""hetflow: declarative YAML pipelines across heterogeneous compute.

The public Python API lives here; the CLI (``hetflow ...``) is a thin
layer over it. ``hetflow.engine`` (manifest -> plan -> Dask -> run record)
and ``hetflow.executors`` (the vendor boundary, the op library, the
emulator) are the packages behind it.

Examples
--------
>>> import hetflow
>>> isinstance(hetflow.__version__, str)
True
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__: str = _metadata.version("hetflow")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

from hetflow.executors.plugins import op  # noqa: E402 - after __version__, which plugins may read

__all__ = ["__version__", "op"]
