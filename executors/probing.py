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

from hetflow.executors.base import BoundDevice, DeviceSet, Dtype, Executor, Vendor

__all__ = ["Offer", "probe", "inventory", "create", "device_problem", "ExecutorUnavailable"]


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

    from hetflow.executors.cpu import cpu_devices

    ex = CpuExecutor("cpu")
    nodes = cpu_devices()
    if len(nodes) > 1:  # an executor's devices: [...] binds NUMA nodes; on one node it deals out core sets
        return Offer(Vendor.cpu, True, f"numpy on the host, {len(nodes)} NUMA nodes",
                     tuple(d.bound() for d in nodes), tuple(ex.supported_dtypes))
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


def device_problem(vendor: Vendor, device: int | DeviceSet | None) -> str | None:
    """What this machine lacks for an executor of ``vendor`` on ``device`` (an index, or the devices of
    ``devices:``), or None: the planner asks before a run, so that a missing device is a located error.

    >>> device_problem(Vendor.cpu, 0) is None, device_problem(Vendor.cpu, DeviceSet((0, 4096)))
    (True, 'cpu device 4096: ...')
    >>> device_problem(Vendor.cpu, 99999)
    'cpu device 99999: this host has ...'
    """
    indexes = (device.indexes if isinstance(device, DeviceSet) else (int(device or 0),))
    if vendor is Vendor.cpu:
        from hetflow.executors.cpu import cpu_devices

        if not isinstance(device, DeviceSet):
            # the whole host is device 0; a host of several NUMA nodes has one device for each
            found = len(cpu_devices(None))
            return (f"cpu device {indexes[0]}: this host has {found} (a CPU executor is the whole host, device 0"
                    + (f", or one of its {found} NUMA nodes" if found > 1 else "") + ")") if indexes[0] >= found else None
        if indexes is None:
            return None  # every NUMA node it has

        try:
            found = len(cpu_devices(max(indexes) + 1))
        except ValueError as e:
            return f"cpu device {max(indexes)}: {e}"
        missing = [i for i in indexes if i >= found]
        return f"cpu device {missing[0]}: this host has {found} NUMA nodes" if missing else None
    offer = probe(vendor)
    if offer.available and indexes and max(indexes) >= len(offer.devices):
        return f"{vendor.value} device {max(indexes)}: this machine has {len(offer.devices)}"
    return None


def create(vendor: Vendor, name: str, device: int | DeviceSet | None = None, memory_limit: int | None = None) -> Executor:
    """A new executor instance of ``vendor`` named ``name``.

    ``device`` picks the GPU of a cuda/rocm executor (default 0), or is
    a :class:`~hetflow.executors.base.DeviceSet` (``devices:`` and
    ``split:``): on the CPU, NUMA nodes or core sets
    (:class:`~hetflow.executors.split.SplitCpuExecutor`), GPUs
    (:class:`~hetflow.executors.cuda.SplitCudaExecutor`) or Vulkan adapters
    (:class:`~hetflow.executors.vulkan_split.SplitVulkanExecutor`).
    ``memory_limit`` caps the bytes of its live activations: past it an
    allocation raises :class:`~hetflow.executors.base.OutOfMemory`.
    """
    offer = probe(vendor)
    if not offer.available:
        raise ExecutorUnavailable(f"{vendor.value}: {offer.reason}")
    problem = device_problem(vendor, device) if isinstance(device, DeviceSet) else None
    if problem is not None:
        raise ExecutorUnavailable(f"executor {name!r}: {problem}")
    if vendor is Vendor.cpu:
        from hetflow.executors.cpu import CpuExecutor

        if isinstance(device, DeviceSet):
            from hetflow.executors.split import SplitCpuExecutor

            try:
                return SplitCpuExecutor(name, device, memory_limit=memory_limit)
            except ValueError as e:
                raise ExecutorUnavailable(f"cpu: {e}") from None
        return CpuExecutor(name, memory_limit=memory_limit)
    if vendor in (Vendor.cuda, Vendor.rocm):
        from hetflow.executors.cuda import CudaExecutor, SplitCudaExecutor

        if isinstance(device, DeviceSet):
            try:
                return SplitCudaExecutor(name, device, memory_limit=memory_limit)
            except ValueError as e:
                raise ExecutorUnavailable(f"{vendor.value}: {e}") from None
        index = int(device or 0)
        if index >= len(offer.devices):
            raise ExecutorUnavailable(f"{vendor.value}: no device {index} (this machine has {len(offer.devices)})")
        return CudaExecutor(name, index, memory_limit=memory_limit)
    if vendor is Vendor.vulkan:
        from hetflow.executors.vulkan import VulkanExecutor

        if isinstance(device, DeviceSet):
            from hetflow.executors.vulkan_split import SplitVulkanExecutor

            try:
                return SplitVulkanExecutor(name, device, memory_limit=memory_limit)
            except ValueError as e:
                raise ExecutorUnavailable(f"vulkan: {e}") from None
        index = int(device or 0)
        if index >= len(offer.devices):
            raise ExecutorUnavailable(f"vulkan: no adapter {index} (this machine has {len(offer.devices)})")
        return VulkanExecutor(name, index, memory_limit=memory_limit)
    raise ExecutorUnavailable(f"{vendor.value}: no executor implementation")
