"""One executor over several devices: the CPU executor whose activations lie in pieces, one piece a device.

The seed's second step (an executor's ``devices()`` is a list) on the
host, where a device is a NUMA node or a set of cores
(:func:`hetflow.executors.cpu.cpu_devices`). Each device has its own
thread, pinned to its cores, its own BLAS pool size and its own memory
account.

The algorithm, for each node of a partition in order:

1. Ask the op for its :class:`~hetflow.executors.opdecl.Split` at these
   input shapes. No rule, no division of these shapes, or an *extent*
   (the length the devices share) under 2: the node runs whole on the
   first device, its inputs *gathered* there.
2. Cut the extent in proportion to the executor's ``split`` (the
   *bounds*, ``[0, b1, ..., extent]``). An input the rule cuts along an
   axis is taken as it lies when it is already in pieces along that axis
   at those bounds; otherwise it is *re-split*: each device copies its
   rows in its own thread (a *move*, counted in :attr:`moves`), so the
   memory is first touched where it is used. An input the rule reads
   whole is gathered once and shared read-only (an import's pieces are
   views of its one array: gathering them copies nothing and moves
   nothing).
3. Each device computes its piece in its thread; the pieces of the
   result join along the rule's ``output`` axis (the value stays in
   pieces, so the next split op finds them where they are), or, for a
   reduction over the divided axis, the partial results are combined
   (``sum``, ``mean`` weighted by rows, ``max``, ``min``) on the first
   device.

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

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hetflow.executors import ops
from hetflow.executors.base import (
    ActivationHandle,
    Backend,
    DeviceSet,
    Dtype,
    OutOfMemory,
    PortableActivation,
    SubGraphPlan,
    TensorShape,
    UnknownHandle,
    UnsupportedDtype,
    Vendor,
    VendorMismatch,
    portable_of_own,
)
from hetflow.executors.cpu import _SUPPORTED, CpuDevice, CpuExecutor, _dtype_of, cpu_devices, next_handle, run_nodes
from hetflow.executors.payload import decode_plan

__all__ = ["SplitCpuExecutor", "Pieces", "cut", "layout", "layout_text"]

_COMBINED = frozenset({Dtype.fp32, Dtype.fp64})
"""Output dtypes whose partial reductions combine to the unsplit result within rounding; others run whole."""


def cut(extent: int, shares: Sequence[float]) -> tuple[int, ...]:
    """Bounds dividing ``extent`` in proportion to ``shares``: ``[0, ..., extent]``, one more than the shares.

    >>> cut(10, (0.75, 0.25)), cut(4, (0.5, 0.5)), cut(1, (0.5, 0.5))
    ((0, 8, 10), (0, 2, 4), (0, 1, 1))
    """
    bounds, total = [0], 0.0
    for share in shares[:-1]:
        total += share
        bounds.append(min(extent, max(bounds[-1], int(extent * total + 0.5))))
    bounds.append(extent)
    return tuple(bounds)


def layout_text(shares: Sequence[float], indexes: Sequence[int]) -> str:
    """How a plan names a split executor's devices: ``0:3/4, 1:1/4``.

    >>> layout_text((0.75, 0.25), (0, 1)), layout_text((0.5, 0.5), (2, 3))
    ('0:3/4, 1:1/4', '2:1/2, 3:1/2')
    """
    from fractions import Fraction

    return ", ".join(f"{i}:{Fraction(s).limit_denominator(64)}" for i, s in zip(indexes, shares))


def layout(op_name: str, shapes: Sequence[Sequence[int] | None], args: Mapping[str, Any], dtype: Dtype) -> Any:
    """``(split, extent)`` a node of ``op_name`` divides by at these input shapes, or None: it runs whole on the
    first device (no rule, shapes it does not divide, an extent under 2, or a combine step at a dtype whose
    partial results would round differently). The plan asks the same question the executor does.

    >>> layout("matmul", [(8, 4), (4, 4)], {}, Dtype.fp32)
    (Split(inputs=(0, None), output=0, combine=None, shape_arg=None), 8)
    >>> layout("transpose", [(8, 4)], {"axes": [1, 0]}, Dtype.fp32) is None
    True
    """
    op = ops.REGISTRY.get(op_name)
    if op is None or op.split is None or any(s is None for s in shapes):
        return None
    shapes = [tuple(s) for s in shapes]  # type: ignore[union-attr]
    try:
        out = op.shape(shapes, args)
    except Exception:  # the op's own call names the problem
        return None
    if out is None:
        return None
    rule = op.split_for(shapes, op.with_defaults(args), out)
    if rule is None or (rule.combine is not None and dtype not in _COMBINED):
        return None
    cut_inputs = [shapes[i][a] for i, a in enumerate(rule.inputs) if a is not None]
    if cut_inputs:
        if len(set(cut_inputs)) != 1:
            return None
        extent = cut_inputs[0]
    elif rule.shape_arg is not None and rule.output is not None:
        extent = out[rule.output]
    else:
        return None
    return (rule, extent) if extent >= 2 else None


class Pieces:
    """One activation held in pieces: ``arrays[d]`` is device ``d``'s slice ``bounds[d]:bounds[d+1]`` along
    ``axis`` (None where that slice is empty)."""

    __slots__ = ("axis", "bounds", "arrays", "shape", "dtype", "whole")

    def __init__(self, axis: int, bounds: tuple[int, ...], arrays: Sequence[np.ndarray | None],
                 whole: np.ndarray | None = None) -> None:
        self.axis, self.bounds, self.arrays = axis, bounds, tuple(arrays)
        self.whole = whole  # the one array the pieces are views of (an import's adopted bytes), or None
        first = next(a for a in self.arrays if a is not None)
        shape = list(first.shape)
        shape[axis] = bounds[-1]
        self.shape, self.dtype = tuple(shape), first.dtype

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays if a is not None)

    def assemble(self) -> np.ndarray:
        if self.whole is not None:
            return self.whole
        return np.concatenate([a for a in self.arrays if a is not None], axis=self.axis)


def _shape(value: Any) -> tuple[int, ...]:
    return value.shape


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


class SplitCpuExecutor(CpuExecutor):
    """The CPU executor over several host devices (NUMA nodes or core sets), activations held in pieces.

    ``devices``: the indexes and split; ``memory_limit``: the executor's,
    divided evenly among its devices (``device_limits``, or the
    ``DeviceSet``'s ``limits``, gives each its own).
    """

    def __init__(self, name: str, devices: DeviceSet, memory_limit: int | None = None,
                 device_limits: Sequence[int] | None = None) -> None:
        super().__init__(name, memory_limit=memory_limit)
        wanted = devices.indexes
        host = cpu_devices(None if wanted is None else max(wanted) + 1)
        if wanted is None:
            wanted = tuple(d.index for d in host)
        missing = [i for i in wanted if i >= len(host)]
        if missing:
            raise ValueError(f"executor {name!r}: no CPU device {missing[0]} (this host has {len(host)})")
        self._host = [host[i] for i in wanted]
        self._indexes = tuple(wanted)
        self._shares = devices.shares(len(self._host))
        self._devices = tuple(d.bound() for d in self._host)
        n = len(self._host)
        device_limits = device_limits if device_limits is not None else devices.limits
        if device_limits is not None:
            if len(device_limits) != n:
                raise ValueError(f"executor {name!r}: {len(device_limits)} memory limits for {n} devices")
            self._limits: list[int | None] = list(device_limits)
        else:
            self._limits = [None if memory_limit is None else memory_limit // n] * n
        self._device_used = [0] * n
        self._values: dict[ActivationHandle, Any] = {}
        self._threads = [_device_thread(d) for d in self._host]
        self._blas_n = min(len(d.cpus) for d in self._host)
        self.moves = 0
        """Pieces copied between devices because the next op's rule needed another layout (and gathers)."""

    @property
    def shares(self) -> tuple[float, ...]:
        return self._shares

    @property
    def device_indexes(self) -> tuple[int, ...]:
        return self._indexes

    def device_memory_used(self) -> list[int]:
        with self._lock:
            return list(self._device_used)

    def memory_used(self) -> int:
        with self._lock:
            return sum(self._device_used)

    # -- memory ---------------------------------------------------------------------------------------------

    def _per_device(self, value: Any) -> list[int]:
        if isinstance(value, Pieces):
            return [0 if a is None else a.nbytes for a in value.arrays]
        return [value.nbytes] + [0] * (len(self._host) - 1)

    def _reserve_all(self, values: Sequence[Any], what: str | Callable[[], str]) -> None:
        """Count ``values`` on their devices (caller holds the lock), all or none."""
        need = [0] * len(self._host)
        for v in values:
            for d, b in enumerate(self._per_device(v)):
                need[d] += b
        for d, (used, more, limit) in enumerate(zip(self._device_used, need, self._limits)):
            if limit is not None and used + more > limit:
                raise OutOfMemory(
                    f"{what() if callable(what) else what} needs {more} bytes on device {self._indexes[d]} "
                    f"({self._devices[d].bus_address}), {used} of its memory_limit of {limit} bytes are in use "
                    f"on executor {self._name!r}")
        for d, more in enumerate(need):
            self._device_used[d] += more

    def _register_values(self, values: Sequence[Any], what: str | Callable[[], str]) -> list[ActivationHandle]:
        for v in values:
            for a in (v.arrays if isinstance(v, Pieces) else (v,)):
                if a is not None:
                    a.flags.writeable = False
        handles = [next_handle() for _ in values]
        with self._lock:
            self._reserve_all(values, what)
            self._values.update(zip(handles, values))
        return handles

    def _value(self, handle: ActivationHandle) -> Any:
        with self._lock:
            try:
                return self._values[handle]
            except (KeyError, TypeError):
                raise UnknownHandle(handle, self._name) from None

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

    def release_activation(self, handle: ActivationHandle) -> None:
        with self._lock:
            value = self._values.pop(handle, None) if isinstance(handle, ActivationHandle) else None
            if value is not None:
                for d, b in enumerate(self._per_device(value)):
                    self._device_used[d] -= b

    def live_activations(self) -> int:
        with self._lock:
            return len(self._values)

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
        names = decoded["inputs"]
        if len(names) != len(inputs):
            raise Backend(f"plan takes {len(names)} inputs, got {len(inputs)}")
        values: dict[str, Any] = dict(zip(names, (self._value(h) for h in inputs)))
        for node in decoded["nodes"]:
            values[node["id"]] = self._run(node, [values[r] for r in node["inputs"]])
        results = [values[t] for t in decoded["outputs"]]
        return self._register_values(results, lambda: f"the results of {', '.join(decoded['outputs'])}")

    # -- running one node --------------------------------------------------------------------------------------

    def _run(self, node: dict, inputs: list[Any]) -> Any:
        dtype = Dtype(node["dtype"])
        found = layout(node["op"], [_shape(v) for v in inputs], node["args"], dtype)
        if found is None:
            whole = [self._gather(v) for v in inputs]
            return np.asarray(self._threads[0].submit(run_nodes, np, _one(node), whole, _SUPPORTED).result()[0])
        rule, extent = found
        bounds = cut(extent, self._shares)
        shared = [None if a is not None else self._gather(v) for v, a in zip(inputs, rule.inputs)]
        # a cut input not already in these pieces is assembled once; each device then copies its slice
        sources = [v if a is None or (isinstance(v, Pieces) and v.axis == a and v.bounds == bounds) else self._gather(v)
                   for v, a in zip(inputs, rule.inputs)]
        resplit = sum(a is not None and not isinstance(v, Pieces) for v, a in zip(sources, rule.inputs))
        if resplit:
            with self._lock:
                self.moves += resplit
        futures: list[Future | None] = []
        parts = list(zip(bounds, bounds[1:]))
        holding = len(self._host) > 1 and sum(hi > lo for lo, hi in parts) > 1
        if holding:
            _BLAS.hold(self._blas_n)
        try:
            for d, (lo, hi) in enumerate(parts):
                if hi <= lo:
                    futures.append(None)
                    continue
                piece_node = node
                if rule.shape_arg is not None:
                    shape = list(node["args"][rule.shape_arg])
                    shape[rule.output] = hi - lo
                    piece_node = dict(node, args={**node["args"], rule.shape_arg: shape})
                futures.append(self._threads[d].submit(self._piece, d, piece_node, sources, shared, rule.inputs, bounds))
            pieces = [None if f is None else f.result() for f in futures]
        finally:
            if holding:
                _BLAS.release()
        if rule.output is not None:
            return Pieces(rule.output, bounds, pieces)
        return _combine(rule.combine, [p for p in pieces if p is not None],
                        [hi - lo for (lo, hi), p in zip(parts, pieces) if p is not None], extent, dtype)

    def _piece(self, d: int, node: dict, inputs: list[Any], shared: list[Any], axes: tuple, bounds: tuple) -> Any:
        """Device ``d``'s piece of ``node``, in its own thread: its inputs' pieces, re-split here where needed."""
        args = []
        for v, whole, axis in zip(inputs, shared, axes):
            if axis is None:
                args.append(whole)
            elif isinstance(v, Pieces):
                args.append(v.arrays[d])
            else:
                index = [slice(None)] * v.ndim
                index[axis] = slice(bounds[d], bounds[d + 1])
                args.append(np.array(v[tuple(index)]))  # a copy made on this device's thread: its memory
        return run_nodes(np, _one(node), args, _SUPPORTED)[0]

    def _gather(self, value: Any) -> np.ndarray:
        if not isinstance(value, Pieces):
            return value
        if value.whole is None:  # an import's pieces are views of its one array: no copy, no move
            with self._lock:
                self.moves += 1
        return value.assemble()

    def __repr__(self) -> str:
        return f"SplitCpuExecutor({self._name!r}, devices={list(self._indexes)})"


def _one(node: dict) -> dict:
    return {"inputs": [f"in{i}" for i in range(len(node["inputs"]))],
            "nodes": [dict(node, inputs=[f"in{i}" for i in range(len(node["inputs"]))])], "outputs": [node["id"]]}


def _combine(how: str | None, parts: list[np.ndarray], rows: list[int], extent: int, dtype: Dtype) -> np.ndarray:
    """The partial reductions of the devices joined into the whole one (in float64, then the output dtype)."""
    if how == "max":
        return np.asarray(np.maximum.reduce(parts))
    if how == "min":
        return np.asarray(np.minimum.reduce(parts))
    wide = [p.astype(np.float64) for p in parts]
    if how == "sum":
        total = sum(wide[1:], wide[0])
    elif how == "mean":
        total = sum((w * (n / extent) for w, n in zip(wide[1:], rows[1:])), wide[0] * (rows[0] / extent))
    else:
        raise Backend(f"unknown combine step {how!r} of a split rule")
    return np.asarray(total).astype(dtype.numpy)
