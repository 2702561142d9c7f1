"""hetflow: declarative YAML pipelines across heterogeneous compute.

The public Python API lives here; the CLI (``hetflow ...``) is a thin
layer over it: ``hetflow validate``, ``plan`` and ``run`` call
:func:`validate`, :func:`plan` and :func:`run`. ``hetflow.engine``
(manifest -> plan -> Dask -> run record) and ``hetflow.executors`` (the
vendor boundary, the op library, the emulator) are the packages behind it.

* :func:`validate`, :func:`plan`, :func:`run`, :func:`sweep`,
  :func:`open_run`; what they return: :class:`Plan`, :class:`Run` (with
  its :class:`Failure` list), :class:`Sweep`.
* The errors, one hierarchy under :class:`HetflowError`:
  :class:`ManifestError` (the manifest is wrong; ``diagnostics`` holds each
  ``FILE:LINE:COL`` problem as a :class:`Diagnostic`), :class:`UsageError`
  (bad arguments: params, points, inputs), :class:`LockHeld` (another run
  of the manifest holds its lock), :class:`EnvironmentUnavailable` (the
  cluster cannot be reached, the runs directory cannot be used; its
  :class:`StorageUnavailable`: a disk refused a run's files, and
  ``record_path`` is the run's record where it says so),
  :class:`RunCancelled` (a signal or a ``KeyboardInterrupt`` stopped the run
  or sweep; its record says ``cancelled``), :class:`OutputDamaged` (an
  output read from a run's folder is gone, unreadable, or not the array
  its record's digest names). A stage that fails is not an exception:
  :func:`run` returns a :class:`Run` whose ``status`` is ``"failed"``.
* One warning, :class:`SourceChanged`: a run or sweep resumed after its
  manifest file changed goes on as it began, not as the file now says;
  one resumed after a ``load`` stage's file changed reads it as it is now.

Examples
--------
>>> import hetflow, tempfile
>>> from importlib.resources import files
>>> quickstart = files("hetflow.examples") / "quickstart.yaml"
>>> hetflow.validate(quickstart)
[]
>>> hetflow.plan(quickstart, params={"batch": 8}).totals["partitions"]
3
>>> r = hetflow.run(quickstart, params={"batch": 8}, runs_dir=tempfile.mkdtemp())
>>> r.status, r.outputs["probs"].shape
('succeeded', (8, 10))
>>> try:
...     hetflow.run(quickstart, params={"batchsize": 8})
... except hetflow.UsageError as e:
...     print(e)
params={'batchsize': 8}: ... declares no param 'batchsize' (declared: batch, hidden, seed)
>>> isinstance(hetflow.__version__, str)
True
"""

from __future__ import annotations

import sys as _sys

if _sys.argv[:1] == ["-m"]:
    # ``python -m hetflow.engine.cli schedule serve``: a stop signal that comes while the command line loads stops
    # serve once it is up (exit 0) rather than ending it by the default action
    from hetflow._stops import keep_stops_of_module_run

    keep_stops_of_module_run()
    del keep_stops_of_module_run
del _sys

__all__ = ["__version__", "op", "validate", "plan", "run", "sweep", "open_run", "Plan", "Run", "Failure", "Sweep",
           "HetflowError", "ManifestError", "UsageError", "LockHeld", "EnvironmentUnavailable", "StorageUnavailable",
           "RunCancelled", "OutputDamaged", "Diagnostic", "SourceChanged"]

# Where each public name is defined. They load on first use (PEP 562), so a
# command that needs none of them (``hetflow emulate``) does not pay for the
# engine's imports: numpy, networkx, jsonschema, dask.
_HOMES = {
    "op": "hetflow.executors.userops",
    **dict.fromkeys(("validate", "plan", "run", "sweep", "open_run"), "hetflow.engine.api"),
    **dict.fromkeys(("Plan", "Run", "Failure", "Sweep"), "hetflow.engine.results"),
    **dict.fromkeys(("HetflowError", "ManifestError", "UsageError", "LockHeld", "EnvironmentUnavailable",
                     "StorageUnavailable", "RunCancelled", "OutputDamaged", "Diagnostic", "SourceChanged"),
                    "hetflow.engine.errors"),
}

# The API's functions and classes are documented, and their Examples run, as members of this module.
_DOCUMENTED_HERE = frozenset(("validate", "plan", "run", "sweep", "open_run", "Plan", "Run", "Failure", "Sweep"))


def _read_version() -> str:
    # not named ``_version``: importing the submodule ``hetflow._version`` binds that name in this module
    from hetflow._version import __version__

    return __version__


def __getattr__(name: str):
    if name == "__version__":
        # read on first use: only ``--version`` and the record need it
        globals()["__version__"] = version = _read_version()
        return version
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'hetflow' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(home)
    for public, where in _HOMES.items():
        if where == home:
            value = getattr(module, public)
            if public in _DOCUMENTED_HERE:
                value.__module__ = __name__
            globals()[public] = value
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
