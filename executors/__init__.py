"""hetflow executors: the vendor boundary, the op library, the emulator.

This package knows nothing of manifests, plans or Dask. :func:`probe`
tells what one vendor offers on this machine, :func:`inventory` asks all
of them, and :func:`create` makes an executor instance. A vendor that
cannot start here is reported unavailable with the reason; probing never
raises.

Examples
--------
>>> probe(Vendor.cpu).available
True
>>> create(Vendor.cpu, "host").vendor
<Vendor.cpu: 'cpu'>
"""

from __future__ import annotations

__all__ = ["Offer", "probe", "inventory", "create", "ExecutorUnavailable"]


def __getattr__(name: str):
    # The names load on first use (PEP 562) from .probing, with the contract's types (Vendor, Dtype...):
    # a subpackage imported alone, like the emulator that ``hetflow emulate`` runs, loads neither.
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    probing = importlib.import_module("hetflow.executors.probing")
    try:
        value = getattr(probing, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    for public in ("Vendor", "Dtype", *__all__):     # the docstring's examples use them as names of this module
        globals()[public] = getattr(probing, public)
    globals()[name] = value
    return value
