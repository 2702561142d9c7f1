"""The CUDA executor: cupy on one GPU, NVIDIA CUDA or AMD ROCm.

One :class:`CudaExecutor` owns one device (``device: N`` in the manifest)
and reports :attr:`Vendor.cuda`, or :attr:`Vendor.rocm` when cupy is a
ROCm (HIP) build. It runs the same sub-graph plans as the CPU executor
(:func:`hetflow.executors.payload.decode_plan`) with the same op bodies
(:func:`hetflow.executors.ops.compute`), on ``cupy`` instead of ``numpy``.
:class:`SplitCudaExecutor` is one executor over several GPUs
(``devices: [0, 1]``), its activations in pieces, one a GPU, laid out as
every split executor's are (:mod:`hetflow.executors.split_layout`).

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
from concurrent.futures import Future
from typing import Any, Sequence

import numpy as np

from hetflow.executors import ops
from hetflow.executors.base import (
    ActivationHandle,
    Backend,
    BoundDevice,
    DeviceSet,
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
from hetflow.executors.cpu import next_handle, node_error
from hetflow.executors.payload import decode_plan
from hetflow.executors.split_layout import Pieces, SplitDevices, combine, cut, move_kind, one_node
from hetflow.executors.staging import StagingPool

__all__ = ["CARRIERS", "NATIVE", "CudaExecutor", "SplitCudaExecutor", "DevicePortable", "peer_access", "run_carriers", "cupy_build", "probe_devices", "widen", "narrow", "pack_int4", "unpack_int4"]

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
        return run_carriers(self._cp, decoded, entries, self.supported_dtypes, self.vendor, f"device {self._index}")

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


def run_carriers(cp: Any, decoded: dict, entries: Sequence[tuple[Any, Dtype]], supported: Sequence[Dtype],
                 vendor: Vendor, where: str) -> list[tuple[Any, Dtype]]:
    """A decoded plan's nodes on carrier arrays of the current device: each input widened once, each result
    narrowed to its stage's dtype; ``where`` (``device 0``) names the device in an out-of-memory error."""
    values: dict[str, tuple[Any, Dtype]] = dict(zip(decoded["inputs"], entries, strict=True))
    wide: dict[str, Any] = {}
    for node in decoded["nodes"]:
        dtype = Dtype(node["dtype"])
        if dtype not in supported:
            err = UnsupportedDtype(dtype)
            err.node = node["id"]
            raise err
        try:
            args = []
            for ref in node["inputs"]:
                if ref not in wide:
                    wide[ref] = widen(cp, *values[ref])
                args.append(wide[ref])
            out = ops.compute(cp, node["op"], args, node["args"], dtype, vendor)
            out = narrow(cp, out, dtype)
            # ascontiguousarray makes a 0-d array 1-d, in cupy as in numpy: a scalar stays one
            values[node["id"]] = (cp.ascontiguousarray(out).reshape(out.shape), dtype)
        except Exception as e:
            raise node_error(node, e, where)
    return [values[t] for t in decoded["outputs"]]


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


# -- one executor over several GPUs ---------------------------------------------------------

_PEERS: dict[tuple[int, int], bool] = {}
_PEERS_LOCK = threading.Lock()


def peer_access(cp: Any, device: int, peer: int) -> bool:
    """Whether GPU ``device`` may read GPU ``peer``'s memory; asked once a pair per process, and where the
    devices allow it, peer access is enabled then (enabling it twice is an error in CUDA)."""
    with _PEERS_LOCK:
        known = _PEERS.get((device, peer))
        if known is None:
            known = bool(cp.cuda.runtime.deviceCanAccessPeer(device, peer))
            if known:
                with cp.cuda.Device(device):
                    try:
                        cp.cuda.runtime.deviceEnablePeerAccess(peer)
                    except cp.cuda.runtime.CUDARuntimeError as e:
                        # cupy may have enabled it already for a copy of its own; any other refusal: stage
                        known = "AlreadyEnabled" in str(e)
            _PEERS[device, peer] = known
        return known


class SplitCudaExecutor(SplitDevices, CudaExecutor):
    """cupy over several GPUs of one executor (``devices: [0, 1]``, ``split: [3, 1]``): activations in pieces,
    one piece a GPU; thread-safe.

    The layout is :class:`~hetflow.executors.split_layout.SplitDevices`' (the CPU
    split executor's, to the line): each piece is allocated and computed
    under ``cupy.cuda.Device(i)`` on that GPU's stream of the calling
    thread. A piece that must change device goes GPU to GPU
    (``memcpyPeerAsync``) where ``deviceCanAccessPeer`` allows it, peer
    access enabled once a pair (:func:`peer_access`), through host memory
    otherwise; :attr:`move_bytes` counts each kind, as the cost model prices
    them (:func:`hetflow.engine.plan.costs.split_move_link`). An import is laid
    out by rows, each GPU copying its rows from the host bytes; an export
    assembles the pieces on the first GPU and hands out a
    :class:`DevicePortable` of it, so bridges are unchanged.
    ``memory_limit`` is divided evenly among the GPUs (or ``device_limits``
    gives each its own).
    """

    def __init__(self, name: str, devices: DeviceSet, memory_limit: int | None = None,
                 device_limits: Sequence[int] | None = None) -> None:
        cp = _cupy()
        count = cp.cuda.runtime.getDeviceCount()
        wanted = tuple(range(count)) if devices.indexes is None else devices.indexes
        missing = [i for i in wanted if not 0 <= i < count]
        if missing or not wanted:
            raise ValueError(f"device {missing[0] if missing else 0} does not exist: cupy sees {count} "
                             f"device{'s' * (count != 1)}")
        CudaExecutor.__init__(self, name, wanted[0], memory_limit=memory_limit)  # the first GPU stages and exports
        n = len(wanted)
        self._gpus = [cp.cuda.Device(i) for i in wanted]
        self._devices = tuple(_bound_device(cp, i) for i in wanted)
        self._init_split(wanted, devices.shares(n), self._device_limits(name, n, memory_limit, device_limits, devices))
        self.move_bytes = {"peer": 0, "staged": 0}
        """Bytes moved between this executor's GPUs, by how they went."""

    @property
    def memory_bytes(self) -> int | None:
        if self._limit is not None:
            return self._limit
        memory = [d.memory_bytes for d in self._devices]
        return None if None in memory else sum(memory)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"SplitCudaExecutor({self._name!r}, devices={list(self._indexes)})"

    # -- plumbing -------------------------------------------------------------------

    def _stream_on(self, d: int) -> Any:
        """This thread's stream on GPU position ``d``."""
        streams = getattr(self._local, "streams", None)
        if streams is None:
            streams = self._local.streams = {}
        stream = streams.get(d)
        if stream is None:
            with self._gpus[d]:
                stream = streams[d] = self._cp.cuda.Stream(non_blocking=True)
        return stream

    def _sync(self) -> None:
        for d in range(len(self._gpus)):
            self._stream_on(d).synchronize()

    def _peers(self, dst: int, src: int) -> bool:
        return peer_access(self._cp, self._indexes[dst], self._indexes[src])

    def _move(self, array: Any, src: int, dst: int) -> Any:
        """``array`` (on GPU position ``src``) on GPU position ``dst``: as it is, a peer copy, or through the host."""
        kind = move_kind(src, dst, self._peers)
        if kind is None:
            return array
        cp = self._cp
        with self._gpus[src], self._stream_on(src) as stream:
            array = cp.ascontiguousarray(array).reshape(array.shape)  # a 0-d array stays one
            stream.synchronize()  # the copy reads what the source's stream wrote
        with self._lock:
            self.move_bytes[kind] += array.nbytes
        with self._gpus[dst], self._stream_on(dst) as stream:
            target = cp.empty(array.shape, dtype=array.dtype)
            if array.nbytes and kind == "peer":
                cp.cuda.runtime.memcpyPeerAsync(target.data.ptr, self._indexes[dst], array.data.ptr,
                                                self._indexes[src], array.nbytes, stream.ptr)
            elif array.nbytes:
                with self._gpus[src]:
                    source = self._stream_on(src)
                    host = array.get(stream=source)
                    source.synchronize()
                target.set(host, stream=stream)
            # the source may return to its GPU's pool once this returns: the copy must have read it by then
            stream.synchronize()
        return target

    def _held(self, entry: tuple[Any, Dtype]) -> Any:
        return entry[0]

    def _register_all(self, entries: Sequence[tuple[Any, Dtype]], what: Any) -> list[ActivationHandle]:
        return self._register_values([v for v, _ in entries], what, entries)

    def _get(self, handle: ActivationHandle) -> tuple[Any, Dtype]:
        return self._value(handle)

    # -- the contract -----------------------------------------------------------------

    def alloc_activation(self, shape: TensorShape, dtype: Dtype) -> ActivationHandle:
        dims = shape.dims
        if dtype not in self.supported_dtypes or not dims or dims[0] < 2:
            return CudaExecutor.alloc_activation(self, shape, dtype)
        what = f"allocation of {list(dims)} {dtype}"
        bounds = cut(dims[0], self._shares)
        arrays: list[Any] = []
        with self._guard(what):
            for d, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                with self._gpus[d], self._stream_on(d):
                    arrays.append(self._cp.zeros((hi - lo,) + tuple(dims[1:]), dtype=CARRIERS[dtype]) if hi > lo
                                  else None)
            self._sync()
        return self._register_all([(Pieces(0, bounds, arrays), dtype)], what)[0]

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not self._vendor:
            raise VendorMismatch(plan.vendor, self._vendor)
        entries = [self._get(h) for h in inputs]
        decoded = decode_plan(plan)
        if len(entries) != len(decoded["inputs"]):
            raise Backend(f"plan takes {len(decoded['inputs'])} inputs, got {len(entries)}")
        values: dict[str, tuple[Any, Dtype]] = dict(zip(decoded["inputs"], entries))
        with self._guard(f"the partition of {', '.join(decoded['outputs'])}"):
            for node in decoded["nodes"]:
                ins = [values[r] for r in node["inputs"]]
                values[node["id"]] = (self._run(node, [v for v, _ in ins], [t for _, t in ins]), Dtype(node["dtype"]))
            self._sync()
        return self._register_all([values[t] for t in decoded["outputs"]],
                                  f"the results of {', '.join(decoded['outputs'])}")

    def export_activation(self, handle: ActivationHandle) -> PortableActivation:
        value, dtype = self._get(handle)
        if isinstance(value, Pieces):
            with self._guard("assembling the pieces for export"):
                value = self._assemble(value)
                self._sync()
        return DevicePortable(TensorShape(value.shape), dtype, self, value)

    def import_activation(self, portable: PortableActivation) -> ActivationHandle:
        dtype, dims = portable.dtype, portable.shape.dims
        direct = isinstance(portable, DevicePortable) and portable._staged is None
        if direct or dtype is Dtype.int4 or not dims or dims[0] < 2 or sys.byteorder != "little":
            return CudaExecutor.import_activation(self, portable)  # whole, on the first GPU
        if dtype not in self.supported_dtypes:
            raise UnsupportedDtype(dtype)
        what = f"import of {list(dims)} {dtype}"
        carrier = CARRIERS[dtype]
        host = np.frombuffer(portable.bytes, dtype=carrier, count=portable.shape.element_count()).reshape(dims)
        bounds = cut(dims[0], self._shares)
        arrays: list[Any] = []
        with self._guard(what):
            for d, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                if hi <= lo:
                    arrays.append(None)
                    continue
                with self._gpus[d], self._stream_on(d) as stream:
                    piece = self._cp.empty((hi - lo,) + tuple(dims[1:]), dtype=carrier)
                    piece.set(np.ascontiguousarray(host[lo:hi]), stream=stream)
                arrays.append(piece)
            self._sync()
        return self._register_all([(Pieces(0, bounds, arrays), dtype)], what)[0]

    # -- how the GPUs compute (SplitDevices' hooks) ---------------------------------------

    def _submit(self, d: int, fn: Any, *args: Any) -> Future:
        # kernels launch asynchronously on each GPU's stream: one thread keeps every GPU busy
        done: Future = Future()
        try:
            with self._gpus[d], self._stream_on(d):
                done.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            done.set_exception(e)
        return done

    def _run_whole(self, node: dict, inputs: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        with self._gpus[0], self._stream_on(0):
            return run_carriers(self._cp, one_node(node), list(zip(inputs, dtypes or ())), self.supported_dtypes,
                                self.vendor, f"device {self._indexes[0]}")[0][0]

    def _compute(self, d: int, node: dict, args: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        return run_carriers(self._cp, one_node(node), list(zip(args, dtypes or ())), self.supported_dtypes,
                            self.vendor, f"device {self._indexes[d]}")[0][0]

    def _cut_to(self, value: Any, axis: int, lo: int, hi: int, d: int) -> Any:
        index = [slice(None)] * value.ndim
        index[axis] = slice(lo, hi)
        with self._gpus[0], self._stream_on(0):
            piece = self._cp.ascontiguousarray(value[tuple(index)])
        return self._move(piece, 0, d)

    def _share_to(self, value: Any, d: int) -> Any:
        return self._move(value, 0, d)

    def _assemble(self, value: Pieces) -> Any:
        parts = [self._move(a, d, 0) for d, a in enumerate(value.arrays) if a is not None]
        with self._gpus[0], self._stream_on(0):
            return self._cp.concatenate(parts, axis=value.axis)

    def _combine_parts(self, how: str | None, parts: list[Any], where: list[int], rows: list[int], extent: int,
                       dtype: Dtype) -> Any:
        near = [self._move(p, d, 0) for p, d in zip(parts, where)]
        with self._gpus[0], self._stream_on(0):
            return combine(self._cp, how, near, rows, extent, dtype)
