"""The CUDA executor: cupy on one GPU, NVIDIA CUDA or AMD ROCm.

One :class:`CudaExecutor` owns one device (``device: N`` in the manifest)
and reports :attr:`Vendor.cuda`, or :attr:`Vendor.rocm` when cupy is a
ROCm (HIP) build. It runs the same sub-graph plans as the CPU executor
(:func:`hetflow.executors.payload.decode_plan`) with the same op bodies
(:func:`hetflow.executors.ops.compute`), on ``cupy`` instead of ``numpy``.

Carriers
--------
cupy has no float8 and no int4, and its bfloat16 is partial, so each
dtype lives on the device in a *carrier* array whose bytes are the
dtype's bytes; the integers, bool and fp64 are carried as themselves. An
op gets its inputs decoded (bf16, fp8, fp16 and the quantized int8/int4
as float32; the integers, bool and fp64 as they are, so it computes in
the same type as on the CPU) and its result is narrowed to the stage's
dtype (:mod:`hetflow.executors.carriers`, whose names are imported from
here too).

Bridges
-------
Export copies the carrier bytes (int4 packed on the device first) into a
reused pinned host buffer from a :class:`~hetflow.executors.staging.StagingPool`
with one DMA and hands out a read-only view of it: no pageable copy, no
fresh allocation. That copy is lazy: :meth:`export_activation` returns a
:class:`DevicePortable` that still refers to the device array, and only
reading its ``bytes`` stages it to the host. When the importer is another
``CudaExecutor`` in this process it reads the device array instead and
copies device to device (``memcpyPeer`` between two GPUs, a device copy on
the same GPU): the seed's same-vendor fast path, through the unchanged
export/import contract. Import from host bytes goes through a pinned
buffer too (or straight from the bytes when they already are pinned).

Every call runs on the executor's own non-blocking stream and waits for it
before returning, so a handle is always complete when another thread
sees it. ``memory_limit`` caps the bytes of live activations as on the CPU
executor; a real device allocation failure is :class:`OutOfMemory` too.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Sequence

import numpy as np

from hetflow.executors import ops
from hetflow.executors.base import (
    ActivationHandle,
    Backend,
    BoundDevice,
    Dtype,
    ExecutorError,
    OutOfMemory,
    PortableActivation,
    SubGraphPlan,
    TensorShape,
    UnknownHandle,
    UnsupportedDtype,
    Vendor,
    VendorMismatch,
)
from hetflow.executors.carriers import CARRIERS, NATIVE, narrow, pack_int4, unpack_int4, widen
from hetflow.executors.cpu import next_handle
from hetflow.executors.payload import decode_plan
from hetflow.executors.staging import StagingPool

__all__ = ["CARRIERS", "NATIVE", "CudaExecutor", "DevicePortable", "cupy_build", "probe_devices", "widen", "narrow", "pack_int4", "unpack_int4"]

# -- probing ----------------------------------------------------------------------


def _cupy() -> Any:
    import cupy

    return cupy


def cupy_build() -> Vendor:
    """Which GPU vendor the installed cupy is built for; raises RuntimeError when there is no cupy."""
    try:
        cp = _cupy()
    except ImportError as e:
        raise RuntimeError(f"cupy is not installed ({e}); install hetflow[cuda] (cupy-cuda12x) or a ROCm cupy build") from None
    return Vendor.rocm if cp.cuda.runtime.is_hip else Vendor.cuda


def probe_devices() -> tuple[Vendor, list[BoundDevice], str]:
    """(vendor, devices, description) of this machine's GPUs; raises RuntimeError with the reason."""
    vendor = cupy_build()
    cp = _cupy()
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # cupy raises CUDARuntimeError without a driver
        raise RuntimeError(f"cupy {cp.__version__} finds no usable {vendor.value} device: {e}") from None
    if count == 0:
        raise RuntimeError(f"cupy {cp.__version__} finds no {vendor.value} device")
    devices = [_bound_device(cp, i) for i in range(count)]
    version = cp.cuda.runtime.runtimeGetVersion()
    return vendor, devices, f"cupy {cp.__version__}, {vendor.value} runtime {version}, {count} device{'s' * (count != 1)}"


def _bound_device(cp: Any, index: int) -> BoundDevice:
    props = cp.cuda.runtime.getDeviceProperties(index)
    name = props.get("name", b"gpu")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    try:
        bus = cp.cuda.Device(index).pci_bus_id
    except Exception:
        bus = f"{props.get('pciDomainID', 0):04x}:{props.get('pciBusID', 0):02x}:{props.get('pciDeviceID', 0):02x}.0"
    return BoundDevice(str(bus), f"{name} (device {index})", int(props.get("totalGlobalMem", 0)) or None)


# -- the executor -------------------------------------------------------------------


class DevicePortable(PortableActivation):
    """A portable activation whose bytes are still on a GPU until someone reads them.

    ``bytes`` stages them to the host once (through the exporter's pinned
    pool) and keeps the result; a ``CudaExecutor`` importing it copies
    device to device instead, without touching ``bytes``.
    """

    def __init__(self, shape: TensorShape, dtype: Dtype, source: "CudaExecutor", array: Any) -> None:
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "_source", source)
        object.__setattr__(self, "_array", array)
        object.__setattr__(self, "_staged", None)
        object.__setattr__(self, "_lock", threading.Lock())

    @property
    def bytes(self) -> memoryview:  # type: ignore[override]
        with self._lock:
            if self._staged is None:
                object.__setattr__(self, "_staged", self._source._stage_out(self._array, self.dtype))
            return self._staged

    @property
    def device_array(self) -> tuple[int, Any]:
        """(device index, carrier array) of the bytes while still on the GPU."""
        return self._source.device_index, self._array


class CudaExecutor:
    """cupy executor bound to one device; thread-safe."""

    def __init__(self, name: str = "cuda", device: int = 0, memory_limit: int | None = None) -> None:
        cp = _cupy()
        count = cp.cuda.runtime.getDeviceCount()
        if not 0 <= device < count:
            raise ValueError(f"device {device} does not exist: cupy sees {count} device{'s' * (count != 1)}")
        if memory_limit is not None and memory_limit < 0:
            raise ValueError(f"memory_limit must be >= 0, got {memory_limit}")
        self._cp = cp
        self._name = name
        self._index = device
        self._vendor = Vendor.rocm if cp.cuda.runtime.is_hip else Vendor.cuda
        self._device = cp.cuda.Device(device)
        self._devices = (_bound_device(cp, device),)
        self._lock = threading.Lock()
        self._arrays: dict[ActivationHandle, tuple[Any, Dtype]] = {}
        self._used = 0
        self._limit = memory_limit
        self._pinned = StagingPool(self._alloc_pinned)
        self._local = threading.local()

    # -- identity -------------------------------------------------------------------

    @property
    def vendor(self) -> Vendor:
        return self._vendor

    @property
    def name(self) -> str:
        return self._name

    @property
    def devices(self) -> Sequence[BoundDevice]:
        return self._devices

    @property
    def device_index(self) -> int:
        return self._index

    @property
    def supported_dtypes(self) -> Sequence[Dtype]:
        return tuple(Dtype)

    @property
    def memory_bytes(self) -> int | None:
        return self._limit if self._limit is not None else self._devices[0].memory_bytes

    @property
    def memory_limit(self) -> int | None:
        return self._limit

    def memory_used(self) -> int:
        with self._lock:
            return self._used

    def live_activations(self) -> int:
        with self._lock:
            return len(self._arrays)

    def __repr__(self) -> str:
        return f"CudaExecutor({self._name!r}, device={self._index})"

    # -- plumbing -------------------------------------------------------------------

    def _alloc_pinned(self, nbytes: int, dtype: Any = np.uint8) -> np.ndarray:
        import cupyx

        with self._device:
            return cupyx.empty_pinned((nbytes,), dtype=dtype)

    def _stream(self) -> Any:
        """This thread's stream on this device: threads never wait on each other's work."""
        stream = getattr(self._local, "stream", None)
        if stream is None:
            with self._device:
                stream = self._cp.cuda.Stream(non_blocking=True)
            self._local.stream = stream
        return stream

    def _reserve(self, nbytes: int, what: str) -> None:
        if self._limit is not None and self._used + nbytes > self._limit:
            raise OutOfMemory(
                f"{what} needs {nbytes} bytes, {self._used} of the memory_limit of {self._limit} bytes "
                f"are in use on executor {self._name!r}"
            )
        self._used += nbytes

    def _check_room(self, nbytes: int, what: str) -> None:
        with self._lock:
            self._reserve(nbytes, what)
            self._used -= nbytes

    def _register_all(self, arrays: Sequence[tuple[Any, Dtype]], what: str) -> list[ActivationHandle]:
        handles = [next_handle() for _ in arrays]
        with self._lock:
            self._reserve(sum(a.nbytes for a, _ in arrays), what)
            self._arrays.update(zip(handles, arrays))
        return handles

    def _get(self, handle: ActivationHandle) -> tuple[Any, Dtype]:
        with self._lock:
            try:
                return self._arrays[handle]
            except (KeyError, TypeError):
                raise UnknownHandle(handle, self._name) from None

    def _guard(self, what: str):
        return _SdkErrors(self._cp, what)

    # -- the contract -----------------------------------------------------------------

    def alloc_activation(self, shape: TensorShape, dtype: Dtype) -> ActivationHandle:
        if dtype not in self.supported_dtypes:
            raise UnsupportedDtype(dtype)
        what = f"allocation of {list(shape.dims)} {dtype}"
        self._check_room(CARRIERS[dtype].itemsize * shape.element_count(), what)
        with self._guard(what), self._device, self._stream() as stream:
            array = self._cp.zeros(shape.dims, dtype=CARRIERS[dtype])
            stream.synchronize()
        return self._register_all([(array, dtype)], what)[0]

    def release_activation(self, handle: ActivationHandle) -> None:
        with self._lock:
            entry = self._arrays.pop(handle, None) if isinstance(handle, ActivationHandle) else None
            if entry is not None:
                self._used -= entry[0].nbytes

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not self._vendor:
            raise VendorMismatch(plan.vendor, self._vendor)
        entries = [self._get(h) for h in inputs]
        decoded = decode_plan(plan)
        if len(entries) != len(decoded["inputs"]):
            raise Backend(f"plan takes {len(decoded['inputs'])} inputs, got {len(entries)}")
        with self._device, self._stream() as stream:
            results = self._run_nodes(decoded, entries)
            stream.synchronize()
        return self._register_all(results, f"the results of {', '.join(decoded['outputs'])}")

    def _run_nodes(self, decoded: dict, entries: Sequence[tuple[Any, Dtype]]) -> list[tuple[Any, Dtype]]:
        cp = self._cp
        values: dict[str, tuple[Any, Dtype]] = dict(zip(decoded["inputs"], entries, strict=True))
        wide: dict[str, Any] = {}
        for node in decoded["nodes"]:
            dtype = Dtype(node["dtype"])
            if dtype not in self.supported_dtypes:
                err = UnsupportedDtype(dtype)
                err.node = node["id"]
                raise err
            try:
                args = []
                for ref in node["inputs"]:
                    if ref not in wide:
                        wide[ref] = widen(cp, *values[ref])
                    args.append(wide[ref])
                out = ops.compute(cp, node["op"], args, node["args"], dtype, self.vendor)
                values[node["id"]] = (cp.ascontiguousarray(narrow(cp, out, dtype)), dtype)
            except MemoryError:
                err = OutOfMemory(f"node {node['id']!r} on device {self._index}")
                err.node = node["id"]
                raise err from None
            except ExecutorError as e:
                e.node = e.node or node["id"]
                raise
            except Exception as e:
                raise Backend(f"{node['op']} failed: {type(e).__name__}: {e}", node=node["id"]) from e
        return [values[t] for t in decoded["outputs"]]

    def export_activation(self, handle: ActivationHandle) -> PortableActivation:
        array, dtype = self._get(handle)
        return DevicePortable(TensorShape(array.shape), dtype, self, array)

    def _stage_out(self, array: Any, dtype: Dtype) -> memoryview:
        """Device carrier -> portable bytes in a pinned store, one DMA."""
        with self._guard("staging copy to the host"), self._device, self._stream() as stream:
            data = pack_int4(self._cp, array) if dtype is Dtype.int4 else array.reshape(-1).view(np.uint8)
            lease = self._pinned.lease_array(data.nbytes)
            if data.nbytes:
                data.get(out=lease.array, stream=stream, blocking=False)
            stream.synchronize()
        return lease.view

    def import_activation(self, portable: PortableActivation) -> ActivationHandle:
        if portable.dtype not in self.supported_dtypes:
            raise UnsupportedDtype(portable.dtype)
        dtype, dims = portable.dtype, portable.shape.dims
        what = f"import of {list(dims)} {dtype}"
        self._check_room(CARRIERS[dtype].itemsize * portable.shape.element_count(), what)
        with self._guard(what), self._device, self._stream() as stream:
            if isinstance(portable, DevicePortable) and portable._staged is None:
                array = self._copy_from_device(*portable.device_array, stream)
            else:
                array = self._copy_from_host(portable, stream)
            stream.synchronize()
        return self._register_all([(array, dtype)], what)[0]

    def _copy_from_device(self, source_index: int, source: Any, stream: Any) -> Any:
        cp = self._cp
        target = cp.empty(source.shape, dtype=source.dtype)
        if source.nbytes == 0:
            return target
        if source_index == self._index:
            target.data.copy_from_device_async(source.data, source.nbytes, stream)
        else:
            # The copy engine moves it GPU to GPU (over NVLink or PCIe peer
            # to peer where the devices allow it), never through host memory.
            cp.cuda.runtime.memcpyPeerAsync(target.data.ptr, self._index, source.data.ptr, source_index,
                                            source.nbytes, stream.ptr)
        return target

    def _copy_from_host(self, portable: PortableActivation, stream: Any) -> Any:
        cp = self._cp
        dtype, n = portable.dtype, portable.shape.element_count()
        raw = np.frombuffer(portable.bytes, dtype=np.uint8)
        if sys.byteorder != "little" and CARRIERS[dtype].itemsize > 1:
            raw = np.frombuffer(portable.bytes, dtype=CARRIERS[dtype].newbyteorder("<")).astype(CARRIERS[dtype]).view(np.uint8)
        device = cp.empty(raw.size, dtype=np.uint8)
        if raw.size:
            lease = None
            if not _is_pinned(cp, raw):
                lease = self._pinned.lease_array(raw.size)
                np.copyto(lease.array, raw)
                raw = lease.array
            device.data.copy_from_host_async(raw.ctypes.data, raw.size, stream)
            stream.synchronize()
            del lease
        if dtype is Dtype.int4:
            return unpack_int4(cp, device, n).reshape(portable.shape.dims)
        return device.view(CARRIERS[dtype]).reshape(portable.shape.dims)


def _is_pinned(cp: Any, array: np.ndarray) -> bool:
    try:
        return bool(cp.cuda.pinned_memory.is_memory_pinned(array.ctypes.data))
    except Exception:
        return False


class _SdkErrors:
    """Maps cupy's errors inside a call to the seed's: allocation failures to OutOfMemory, the rest to Backend."""

    def __init__(self, cp: Any, what: str) -> None:
        self._cp = cp
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if error is None or isinstance(error, ExecutorError):
            return False
        if isinstance(error, MemoryError):
            raise OutOfMemory(f"{self._what}: {error}") from None
        if isinstance(error, Exception):
            raise Backend(f"{self._what}: {type(error).__name__}: {error}") from error
        return False
