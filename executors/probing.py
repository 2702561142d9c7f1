"""What each vendor offers on this machine, and making executors: :func:`probe`, :func:`inventory`, :func:`create`.

:mod:`hetflow.executors` exports these names; they live here so that a
subpackage imported alone (``hetflow emulate`` imports the emulator and
nothing else) does not load the executor contract's types.

Examples
--------
>>> from hetflow.executors.base import Vendor
>>> probe(Vendor.cpu).available
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

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
    ops: tuple[str, ...] | None = None
    """The registry ops this vendor computes; None when it computes every one."""

    def offers_op(self, op: str) -> bool:
        """Whether this vendor computes ``op``; a user's op asks its own kernels, which may be newer than the probe."""
        if self.ops is None or op in self.ops:
            return True
        from hetflow.executors.ops import REGISTRY

        found = REGISTRY.get(op)
        return found is not None and found.invoke is not None and found.runs_on(self.vendor.value)

    def to_json(self) -> dict:
        return {
            "vendor": self.vendor.value,
            "available": self.available,
            "reason": self.reason,
            "devices": [{"bus_address": d.bus_address, "display_name": d.display_name, "memory_bytes": d.memory_bytes}
                        for d in self.devices],
            "dtypes": [d.value for d in self.dtypes],
            "ops": None if self.ops is None else list(self.ops),
        }


def _probe_cpu() -> Offer:
    from hetflow.executors.cpu import CpuExecutor

    ex = CpuExecutor("cpu")
    return Offer(Vendor.cpu, True, "numpy on the host", tuple(ex.devices), tuple(ex.supported_dtypes))


def _unavailable(vendor: Vendor, reason: str) -> Callable[[], Offer]:
    return lambda: Offer(vendor, False, reason)


def _gpu_probe(vendor: Vendor) -> Callable[[], Offer]:
    """cupy serves both GPU vendors; which one depends on the cupy build, so one probe answers for both."""

    def probe_gpu() -> Offer:
        from hetflow.executors.cuda import CARRIERS, cupy_build, probe_devices

        try:
            build = cupy_build()
        except RuntimeError as e:
            return Offer(vendor, False, str(e))
        if build is not vendor:
            other = "a ROCm build of cupy" if vendor is Vendor.rocm else "a CUDA build of cupy (cupy-cuda12x)"
            return Offer(vendor, False, f"cupy here is a {build.value} build; {vendor.value} needs {other}")
        try:
            _, devices, description = _gpu_devices(probe_devices)
        except RuntimeError as e:
            return Offer(vendor, False, str(e))
        return Offer(vendor, True, description, tuple(devices), tuple(CARRIERS))

    return probe_gpu


_GPU: list = []


def _gpu_devices(probe_devices: Callable) -> tuple:
    if not _GPU:
        try:
            _GPU.append(probe_devices())
        except RuntimeError as e:
            _GPU.append(e)
    if isinstance(_GPU[0], RuntimeError):
        raise _GPU[0]
    return _GPU[0]


_PROBES: dict[Vendor, Callable[[], Offer]] = {
    Vendor.cpu: _probe_cpu,
    Vendor.cuda: _gpu_probe(Vendor.cuda),
    Vendor.rocm: _gpu_probe(Vendor.rocm),
    Vendor.vulkan: lambda: _probe_vulkan(),
}


def _probe_vulkan() -> Offer:
    from hetflow.executors import vulkan

    version = vulkan.wgpu_version()
    if version is None:
        return Offer(Vendor.vulkan, False, "the wgpu package is not installed (pip install 'hetflow[vulkan]')")
    found = vulkan.adapters()
    if not found:
        chatter = vulkan.enumeration_chatter()
        return Offer(Vendor.vulkan, False, "wgpu found no Vulkan adapter: no Vulkan driver is installed "
                     "(apt-get install mesa-vulkan-drivers gives lavapipe, a software device)"
                     + (f"; the loader said: {chatter.splitlines()[-1]}" if chatter else ""))
    devices = tuple(vulkan.describe(a, i) for i, a in enumerate(found))
    kinds = ", ".join(f"{a.info.get('device', '?')} ({a.info.get('adapter_type', '?')}-type)" for a in found)
    note = "; CPU-type means a software Vulkan device such as lavapipe, not a GPU" if any(
        a.info.get("adapter_type") == "CPU" for a in found) else ""
    return Offer(Vendor.vulkan, True, f"wgpu {version} on Vulkan: {kinds}{note}", devices,
                 vulkan.SUPPORTED_DTYPES, vulkan.offered_ops())

_CACHE: dict[Vendor, Offer] = {}


def probe(vendor: Vendor) -> Offer:
    """What ``vendor`` offers here; cached, never raises."""
    if vendor not in _CACHE:
        try:
            _CACHE[vendor] = _PROBES[vendor]()
        except Exception as e:  # a broken driver must not break the import
            _CACHE[vendor] = Offer(vendor, False, f"probe failed: {type(e).__name__}: {e}")
    return _CACHE[vendor]


def inventory(vendors: Iterable[Vendor] | None = None) -> list[Offer]:
    """What each of ``vendors`` (every vendor by default) offers here, in :class:`Vendor` order.

    Probing a vendor loads its SDK (wgpu parses a C header and enumerates
    Vulkan adapters, 0.9 s here; cupy initialises CUDA), so a caller that
    needs a few vendors names them, and the others are not loaded.

    >>> [o.vendor.value for o in inventory([Vendor.cpu])]
    ['cpu']
    """
    wanted = set(Vendor) if vendors is None else set(vendors)
    return [probe(v) for v in Vendor if v in wanted]


def create(vendor: Vendor, name: str, device: int | None = None, memory_limit: int | None = None) -> Executor:
    """A new executor instance of ``vendor`` named ``name``.

    ``device`` picks the GPU of a cuda/rocm executor (default 0);
    ``memory_limit`` caps the bytes of its live activations: past it an
    allocation raises :class:`~hetflow.executors.base.OutOfMemory`.
    """
    offer = probe(vendor)
    if not offer.available:
        raise ExecutorUnavailable(f"{vendor.value}: {offer.reason}")
    if vendor is Vendor.cpu:
        from hetflow.executors.cpu import CpuExecutor

        return CpuExecutor(name, memory_limit=memory_limit)
    if vendor in (Vendor.cuda, Vendor.rocm):
        from hetflow.executors.cuda import CudaExecutor

        index = device or 0
        if index >= len(offer.devices):
            raise ExecutorUnavailable(f"{vendor.value}: no device {index} (this machine has {len(offer.devices)})")
        return CudaExecutor(name, index, memory_limit=memory_limit)
    if vendor is Vendor.vulkan:
        from hetflow.executors.vulkan import VulkanExecutor

        index = device or 0
        if index >= len(offer.devices):
            raise ExecutorUnavailable(f"vulkan: no adapter {index} (this machine has {len(offer.devices)})")
        return VulkanExecutor(name, index, memory_limit=memory_limit)
    raise ExecutorUnavailable(f"{vendor.value}: no executor implementation")
