"""One executor over several devices on the host: the CPU executor whose activations lie in pieces, one
piece a device.

A device is a NUMA node, or a set of cores where the machine has one node
(:func:`hetflow.executors.cpu.cpu_devices`). Each device has its own
thread, pinned to its cores, its own BLAS pool size and its own memory
account. How a node divides, which inputs move and how the pieces join is
:mod:`hetflow.executors.split_layout`'s (:class:`SplitDevices`, shared with
the CUDA and Vulkan split executors); this module says how the host's
devices compute: each device copies the rows it is given in its own
thread, so the memory is first touched where it is used, and every device
reads an input the rule reads whole in place (an import's pieces are
views of its one array: gathering them copies nothing and moves nothing).

A device's thread is shared by every executor on its cores and computes
one piece at a time, as a device would: partitions that Dask runs at once
on a split executor take turns on each device.

A handle is still one logical activation: :meth:`export_activation`
assembles the pieces into the portable bytes, so bridges do not change.
An import is laid out by rows across the devices (views of the adopted
bytes, counted on each device). ``memory_limit`` is divided evenly among
the devices; a device past its share raises :class:`OutOfMemory`, naming it.

Examples
--------
>>> import numpy as np
>>> from hetflow.executors.base import DeviceSet
>>> from hetflow.executors.payload import encode_plan
>>> ex = SplitCpuExecutor("accel", DeviceSet((0, 1), (3, 1)))
>>> x = ex.import_activation(PortableActivation.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), Dtype.fp32))
>>> plan = encode_plan(Vendor.cpu, ["x"], [{"id": "y", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["x"]}], ["y"])
>>> [y] = ex.execute(plan, [x])
>>> ex.export_activation(y).to_array().tolist(), ex.device_memory_used(), ex.moves
([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]], [48, 16], 0)
>>> ex.release_activation(x); ex.release_activation(y); ex.live_activations()
0
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from hetflow.executors.base import (
    ActivationHandle,
    DeviceSet,
    Dtype,
    OutOfMemory,
    PortableActivation,
    SubGraphPlan,
    TensorShape,
    UnsupportedDtype,
    Vendor,
    VendorMismatch,
    portable_of_own,
)
from hetflow.executors.cpu import _SUPPORTED, CpuDevice, CpuExecutor, _dtype_of, cpu_devices, run_nodes
from hetflow.executors.payload import decode_plan
from hetflow.executors.split_layout import (  # noqa: F401 - the layout's names, imported from here by the planner and tests
    RESPLIT,
    TAKE,
    WHOLE,
    Pieces,
    SplitDevices,
    arrange,
    bound_devices,
    combine,
    cut,
    layout,
    layout_text,
    move_kind,
    one_node,
    planned_devices,
)

__all__ = ["SplitCpuExecutor", "SplitDevices", "Pieces", "cut", "layout", "layout_text", "arrange", "move_kind",
           "bound_devices", "planned_devices", "TAKE", "RESPLIT", "WHOLE"]


class _BlasShare:
    """While devices compute at once, a process-wide BLAS pool (OpenBLAS on pthreads) is held at one device's
    cores: each device's call then runs on its own thread alone instead of every call asking for all the cores.
    A pool whose limit is per calling thread (OpenMP) is set in each device's thread once. A user's
    ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` or ``OMP_NUM_THREADS`` wins: no pool is changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: list[tuple[Any, int]] = []
        self._libs: list[Any] | None = None

    def libs(self) -> list[Any]:
        if self._libs is None:
            if any(os.environ.get(k, "").strip() for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")):
                self._libs = []
            else:
                try:
                    from threadpoolctl import ThreadpoolController

                    self._libs = list(ThreadpoolController().lib_controllers)
                except Exception:  # threadpoolctl missing or a library it cannot read: the pools stay as they are
                    self._libs = []
        return self._libs

    def per_thread(self, n: int) -> None:
        for lib in self.libs():
            if lib.user_api == "openmp" or getattr(lib, "threading_layer", None) == "openmp":
                lib.set_num_threads(n)

    def hold(self, n: int) -> None:
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                self._saved = []
                for lib in self.libs():
                    if lib.user_api == "openmp" or getattr(lib, "threading_layer", None) == "openmp":
                        continue
                    own = lib.get_num_threads()
                    if own is not None and own > n:
                        self._saved.append((lib, own))
                        _set_shared(lib, n)

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                for lib, own in self._saved:
                    _set_shared(lib, own)
                self._saved = []


def _set_shared(lib: Any, n: int) -> None:
    # OpenBLAS through its own symbol: threadpoolctl lets only the first thread that limited it limit it again
    if lib.internal_api == "openblas":
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_", "_64"):
                fn = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if fn is not None:
                    fn(n)
                    return
    lib.set_num_threads(n)


_BLAS = _BlasShare()
_THREADS: dict[tuple[int, ...], ThreadPoolExecutor] = {}
_THREADS_LOCK = threading.Lock()


def _device_thread(device: CpuDevice) -> ThreadPoolExecutor:
    """The one thread that computes a device's pieces, pinned to its cores; shared by every executor on them."""
    with _THREADS_LOCK:
        pool = _THREADS.get(device.cpus)
        if pool is None:
            def pin(cpus: tuple[int, ...] = device.cpus) -> None:
                try:
                    os.sched_setaffinity(0, cpus)  # 0: the calling thread, on Linux
                except (AttributeError, OSError):
                    pass
                _BLAS.per_thread(len(cpus))

            pool = _THREADS[device.cpus] = ThreadPoolExecutor(1, f"hetflow-cores{device.cpus[0]}", initializer=pin)
        return pool


class SplitCpuExecutor(SplitDevices, CpuExecutor):
    """The CPU executor over several host devices (NUMA nodes or core sets), activations held in pieces.

    ``devices``: the indexes and split; ``memory_limit``: the executor's,
    divided evenly among its devices (``device_limits``, or the
    ``DeviceSet``'s ``limits``, gives each its own).
    """

    def __init__(self, name: str, devices: DeviceSet, memory_limit: int | None = None,
                 device_limits: Sequence[int] | None = None) -> None:
        CpuExecutor.__init__(self, name, memory_limit=memory_limit)
        wanted = devices.indexes
        host = cpu_devices(None if wanted is None else max(wanted) + 1)
        if wanted is None:
            wanted = tuple(d.index for d in host)
        missing = [i for i in wanted if i >= len(host)]
        if missing:
            raise ValueError(f"executor {name!r}: no CPU device {missing[0]} (this host has {len(host)})")
        self._host = [host[i] for i in wanted]
        self._devices = tuple(d.bound() for d in self._host)
        n = len(self._host)
        self._init_split(wanted, devices.shares(n), self._device_limits(name, n, memory_limit, device_limits, devices))
        self._threads = [_device_thread(d) for d in self._host]
        self._blas_n = min(len(d.cpus) for d in self._host)

    def _register_values(self, values: Sequence[Any], what: str | Callable[[], str],
                         entries: Sequence[Any] | None = None) -> list[ActivationHandle]:
        for v in values:
            for a in (v.arrays if isinstance(v, Pieces) else (v,)):
                if a is not None:
                    a.flags.writeable = False
        return SplitDevices._register_values(self, values, what, entries)

    def _by_rows(self, array: np.ndarray) -> Any:
        """``array`` laid out by rows across the devices (views, no copy), or whole where it has under 2 rows."""
        if array.ndim == 0 or array.shape[0] < 2:
            return array
        bounds = cut(array.shape[0], self._shares)
        return Pieces(0, bounds, [array[lo:hi] if hi > lo else None for lo, hi in zip(bounds, bounds[1:])], array)

    # -- the contract ----------------------------------------------------------------------------------------

    def alloc_activation(self, shape: TensorShape, dtype: Dtype) -> ActivationHandle:
        if dtype not in self.supported_dtypes:
            raise UnsupportedDtype(dtype)
        try:
            array = np.zeros(shape.dims, dtype=dtype.numpy)
        except MemoryError:
            raise OutOfMemory(f"{shape.dims} {dtype}") from None
        return self._register_values([self._by_rows(array)], f"allocation of {list(shape.dims)} {dtype}")[0]

    def import_activation(self, portable: PortableActivation) -> ActivationHandle:
        dtype = portable.dtype
        if dtype not in _SUPPORTED:
            raise UnsupportedDtype(dtype)
        data, shape = portable.bytes, portable.shape
        try:
            if dtype is not Dtype.int4 and (type(data) is bytes or memoryview(data).readonly):
                array = np.frombuffer(data, dtype=dtype.numpy, count=shape.element_count()).reshape(shape.dims)
            else:
                array = portable.to_array()
        except MemoryError:
            raise OutOfMemory(f"{shape.dims} {dtype}") from None
        return self._register_values([self._by_rows(array)], f"import of {list(shape.dims)} {dtype}")[0]

    def export_activation(self, handle: ActivationHandle) -> PortableActivation:
        value = self._value(handle)
        array = value.assemble() if isinstance(value, Pieces) else value
        dtype = _dtype_of(array)
        if dtype is Dtype.int4 or not array.flags.c_contiguous:
            return PortableActivation.from_array(array, dtype)
        array.flags.writeable = False
        return portable_of_own(array.shape, dtype, memoryview(array.reshape(-1).view(np.uint8)))

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not Vendor.cpu:
            raise VendorMismatch(plan.vendor, Vendor.cpu)
        decoded = decode_plan(plan)
        results = self._run_plan(decoded, inputs)
        return self._register_values(results, lambda: f"the results of {', '.join(decoded['outputs'])}")

    # -- how the host's devices compute ------------------------------------------------------------------------

    def _submit(self, d: int, fn: Callable[..., Any], *args: Any) -> Future:
        return self._threads[d].submit(fn, *args)

    def _run_whole(self, node: dict, inputs: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        return np.asarray(self._threads[0].submit(run_nodes, np, one_node(node), inputs, _SUPPORTED).result()[0])

    def _compute(self, d: int, node: dict, args: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        return run_nodes(np, one_node(node), args, _SUPPORTED)[0]

    def _cut_to(self, value: Any, axis: int, lo: int, hi: int, d: int) -> Any:
        index = [slice(None)] * value.ndim
        index[axis] = slice(lo, hi)
        return np.array(value[tuple(index)])  # a copy made on this device's thread: its memory

    def _share_to(self, value: Any, d: int) -> Any:
        return value  # one host memory: every device reads the one array

    def _assemble(self, value: Pieces) -> Any:
        return value.assemble()

    def _combine_parts(self, how: str | None, parts: list[Any], where: list[int], rows: list[int], extent: int,
                       dtype: Dtype) -> Any:
        return combine(np, how, parts, rows, extent, dtype)

    @contextlib.contextmanager
    def _pieces_at_once(self, count: int) -> Iterator[None]:
        holding = len(self._host) > 1 and count > 1
        if holding:
            _BLAS.hold(self._blas_n)
        try:
            yield
        finally:
            if holding:
                _BLAS.release()

    def __repr__(self) -> str:
        return f"SplitCpuExecutor({self._name!r}, devices={list(self._indexes)})"
