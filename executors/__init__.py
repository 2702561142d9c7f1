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

from dataclasses import dataclass, field
from typing import Callable

from hetflow.executors.base import BoundDevice, Dtype, Executor, Vendor

__all__ = ["Offer", "probe", "inventory", "create", "ExecutorUnavailable"]


class ExecutorUnavailable(RuntimeError):
    """The vendor asked for cannot run on this machine."""


@dataclass(frozen=True)
class Offer:
    """What one vendor offers on this machine."""

    vendor: Vendor
    available: bool
    reason: str
    devices: tuple[BoundDevice, ...] = ()
    dtypes: tuple[Dtype, ...] = field(default=())

    def to_json(self) -> dict:
        return {
            "vendor": self.vendor.value,
            "available": self.available,
            "reason": self.reason,
            "devices": [{"bus_address": d.bus_address, "display_name": d.display_name} for d in self.devices],
            "dtypes": [d.value for d in self.dtypes],
        }


def _probe_cpu() -> Offer:
    from hetflow.executors.cpu import CpuExecutor

    ex = CpuExecutor("cpu")
    return Offer(Vendor.cpu, True, "numpy on the host", tuple(ex.devices), tuple(ex.supported_dtypes))


def _unavailable(vendor: Vendor, reason: str) -> Callable[[], Offer]:
    return lambda: Offer(vendor, False, reason)


_PROBES: dict[Vendor, Callable[[], Offer]] = {
    Vendor.cpu: _probe_cpu,
    Vendor.cuda: _unavailable(Vendor.cuda, "this hetflow build has no cuda executor"),
    Vendor.rocm: _unavailable(Vendor.rocm, "this hetflow build has no rocm executor"),
    Vendor.vulkan: _unavailable(Vendor.vulkan, "this hetflow build has no vulkan executor"),
}

_CACHE: dict[Vendor, Offer] = {}


def probe(vendor: Vendor) -> Offer:
    """What ``vendor`` offers here; cached, never raises."""
    if vendor not in _CACHE:
        try:
            _CACHE[vendor] = _PROBES[vendor]()
        except Exception as e:  # a broken driver must not break the import
            _CACHE[vendor] = Offer(vendor, False, f"probe failed: {type(e).__name__}: {e}")
    return _CACHE[vendor]


def inventory() -> list[Offer]:
    return [probe(v) for v in Vendor]


def create(vendor: Vendor, name: str, device: int | None = None) -> Executor:
    """A new executor instance of ``vendor`` named ``name``."""
    offer = probe(vendor)
    if not offer.available:
        raise ExecutorUnavailable(f"{vendor.value}: {offer.reason}")
    if vendor is Vendor.cpu:
        from hetflow.executors.cpu import CpuExecutor

        return CpuExecutor(name)
    raise ExecutorUnavailable(f"{vendor.value}: no executor implementation")
