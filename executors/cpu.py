"""The CPU executor: numpy on the host.

A :class:`SubGraphPlan` for this executor carries the partition the
planner assigned to it, in the payload every vendor reads
(:mod:`hetflow.executors.payload`); :func:`run_nodes` evaluates it against
any array namespace, so other executors reuse it. Every activation is an
immutable array in a table keyed by handle, guarded by one lock; ops run
outside the lock, so threads compute in parallel.

A bridge between two CPU executors costs one warm memcpy: an export
copies the array into a reused store of a :class:`StagingPool` and hands
out a read-only view of it, and an import adopts the portable bytes as
its (immutable) array without copying them again. The store returns to
the pool once neither the portable activation nor the imported array
refers to it.

``memory_limit`` caps the bytes of live activations: an allocation,
import or sub-graph result that would go past it raises
:class:`OutOfMemory`, as a device that ran out of memory would.

Examples
--------
>>> import numpy as np
>>> cpu = CpuExecutor("host")
>>> h = cpu.import_activation(PortableActivation.from_array(np.arange(3, dtype=np.float32), Dtype.fp32))
>>> cpu.export_activation(h).to_array().tolist()
[0.0, 1.0, 2.0]
>>> cpu.live_activations()
1
>>> cpu.release_activation(h); cpu.release_activation(h); cpu.live_activations()
0
"""

from __future__ import annotations

import itertools
import os
import platform
import sys
import threading
from typing import Any, Callable, Mapping, NamedTuple, Sequence

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
    portable_of_own,
)
from hetflow.executors.payload import decode_plan, encode_plan
from hetflow.executors.staging import StagingPool

__all__ = ["CpuExecutor", "CpuDevice", "cpu_devices", "decode_plan", "encode_plan", "run_nodes", "next_handle"]

_HANDLES = itertools.count(1)
_ALL_DTYPES = tuple(Dtype)
_SUPPORTED = frozenset(_ALL_DTYPES)
_DTYPE_NAMED = {d.value: d for d in Dtype}
_LITTLE = sys.byteorder == "little"


def next_handle() -> ActivationHandle:
    """A handle value no other executor in this process has issued."""
    return ActivationHandle(next(_HANDLES))


#: per thread: the floating-point errors numpy met in each node :func:`run_nodes` ran (:func:`take_numeric`)
_NUMERIC = threading.local()
# numpy's names for its errors, as a stage's note says them
_NUMERIC_SAID = {"invalid value": "invalid value (NaN)", "divide by zero": "division by zero (inf)",
                 "overflow": "overflow (inf)"}


def take_numeric() -> dict[str, list[str]]:
    """The floating-point errors (invalid value, division by zero, overflow) that numpy met in the nodes the calling
    thread ran since it last asked, by node; emptied as it is read."""
    notes = getattr(_NUMERIC, "notes", None)
    if not notes:
        return {}
    _NUMERIC.notes = {}
    return notes


def peek_numeric() -> dict[str, list[str]]:
    """What :func:`take_numeric` would return, left in place (a copy)."""
    return {node: list(kinds) for node, kinds in (getattr(_NUMERIC, "notes", None) or {}).items()}


def add_numeric(notes: Mapping[str, Sequence[str]]) -> None:
    """Add ``notes`` (node -> errors) to the calling thread's, as :func:`run_nodes` would have: a partition taken from
    the cache says what the run that computed it met."""
    mine = getattr(_NUMERIC, "notes", None)
    if mine is None:
        mine = _NUMERIC.notes = {}
    for node, kinds in notes.items():
        have = mine.setdefault(str(node), [])
        have.extend(str(k) for k in kinds if str(k) not in have)


def run_nodes(xp: Any, decoded: Mapping[str, Any], inputs: Sequence[Any], supported: frozenset[Dtype],
              vendor: Vendor = Vendor.cpu) -> list[Any]:
    """Evaluate a decoded plan's nodes on arrays of namespace ``xp``, with ``vendor``'s kernels where an op has one.

    A value is let go after the last node that reads it (outputs are kept):
    a long partition holds only what its later nodes still need, and each
    new result can reuse the memory of one no longer read instead of
    faulting in fresh pages.
    """
    names = decoded["inputs"]
    if len(names) != len(inputs):
        raise Backend(f"plan takes {len(names)} inputs, got {len(inputs)}")
    values: dict[str, Any] = dict(zip(names, inputs))
    nodes = decoded["nodes"]
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        last[node["id"]] = i
        for ref in node["inputs"]:
            last[ref] = i
    kept = set(decoded["outputs"])
    drops: dict[int, list[str]] = {}
    for ref, i in last.items():
        if ref not in kept:
            drops.setdefault(i, []).append(ref)
    at = [""]

    def met(kind: str, flag: int) -> None:
        # numpy's printed RuntimeWarning named hetflow's source line; the run's record names the stage instead
        said = _NUMERIC_SAID.get(kind, kind)
        notes = getattr(_NUMERIC, "notes", None)
        if notes is None:
            notes = _NUMERIC.notes = {}
        kinds = notes.setdefault(at[0], [])
        if said not in kinds:
            kinds.append(said)

    with np.errstate(divide="call", over="call", invalid="call", call=met):
        for i, node in enumerate(nodes):
            dtype = _DTYPE_NAMED.get(node["dtype"]) or Dtype(node["dtype"])  # a dict lookup: Enum's call is 1.5 us
            if dtype not in supported:
                err = UnsupportedDtype(dtype)
                err.node = node["id"]
                raise err
            at[0] = node["id"]
            try:
                args = [values[ref] for ref in node["inputs"]]
                values[node["id"]] = ops.run(xp, node["op"], args, node["args"], dtype, vendor)
            except Exception as e:
                raise node_error(node, e)
            for ref in drops.get(i, ()):
                values.pop(ref, None)
    return [values[t] for t in decoded["outputs"]]


def node_error(node: Mapping[str, Any], error: Exception, where: str | None = None) -> Exception:
    """What a node's failure is to the engine, naming the node: running out of memory is the executor's
    :class:`OutOfMemory` (``where``, ``device 0``, names the device), an executor's own error keeps its kind,
    anything else is :class:`Backend` with the op and the original error as its cause."""
    if isinstance(error, MemoryError):
        # numpy's says how much it was asked for ("Unable to allocate 7.28 EiB for an array with shape ...")
        said = f": {error}" if str(error) else ""
        err: Exception = OutOfMemory(f"node {node['id']!r}" + (f" on {where}" if where else "") + said)
        err.node = node["id"]
        err.__suppress_context__ = True  # its message is in this one's
        return err
    if isinstance(error, ExecutorError):
        error.node = error.node or node["id"]
        return error
    err = Backend(f"{node['op']} failed: {type(error).__name__}: {error}", node=node["id"])
    err.__cause__ = error  # the op's own traceback, which --debug shows
    return err


_PROCESSOR: list[str] = []


def _processor() -> str:
    """The host CPU's model name, read once per process: ``/proc/cpuinfo``'s where there is one.

    ``platform.processor()`` runs ``uname -p`` in a subprocess on Linux
    (a fork and an exec on every command that plans), and says ``x86_64``.
    """
    if not _PROCESSOR:
        name = ""
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    key, sep, value = line.partition(":")
                    if sep and key.strip() in ("model name", "Model", "cpu model", "uarch"):
                        name = value.strip()
                        break
        except OSError:
            pass
        _PROCESSOR.append(name or platform.machine() or "cpu")
    return _PROCESSOR[0]


class CpuExecutor:
    """numpy executor; thread-safe, all thirteen dtypes.

    ``memory_limit``: bytes of live activations this executor may hold
    (None: no cap beyond the host's memory).
    """

    def __init__(self, name: str = "cpu", memory_limit: int | None = None) -> None:
        if memory_limit is not None and memory_limit < 0:
            raise ValueError(f"memory_limit must be >= 0, got {memory_limit}")
        self._name = name
        self._lock = threading.Lock()
        self._arrays: dict[ActivationHandle, np.ndarray] = {}
        self._used = 0
        self._limit = memory_limit
        self._staging = StagingPool(np.empty)
        self._devices = (BoundDevice("host", _processor(), _host_memory()),)

    @property
    def vendor(self) -> Vendor:
        return Vendor.cpu

    @property
    def name(self) -> str:
        return self._name

    @property
    def devices(self) -> Sequence[BoundDevice]:
        return self._devices

    @property
    def supported_dtypes(self) -> Sequence[Dtype]:
        return _ALL_DTYPES

    @property
    def memory_bytes(self) -> int | None:
        """The capacity live activations are checked against: ``memory_limit``, else host memory."""
        return self._limit if self._limit is not None else _host_memory()

    @property
    def memory_limit(self) -> int | None:
        return self._limit

    def memory_used(self) -> int:
        """Bytes of the live activations."""
        with self._lock:
            return self._used

    def _reserve(self, nbytes: int, what: str | Callable[[], str]) -> None:
        """Count ``nbytes`` against the limit (caller holds the lock); ``what`` may be a callable that says it."""
        if self._limit is not None and self._used + nbytes > self._limit:
            raise OutOfMemory(
                f"{what() if callable(what) else what} needs {nbytes} bytes, {self._used} of the memory_limit of "
                f"{self._limit} bytes are in use on executor {self._name!r}"
            )
        self._used += nbytes

    def _check_room(self, nbytes: int, what: str) -> None:
        with self._lock:
            self._reserve(nbytes, what)
            self._used -= nbytes

    def _register_all(self, arrays: Sequence[np.ndarray], what: str | Callable[[], str]) -> list[ActivationHandle]:
        nbytes = 0
        for array in arrays:
            array.flags.writeable = False
            nbytes += array.nbytes
        handles = [next_handle() for _ in arrays]
        with self._lock:
            self._reserve(nbytes, what)
            self._arrays.update(zip(handles, arrays))
        return handles

    def _register(self, array: np.ndarray, what: str = "activation") -> ActivationHandle:
        return self._register_all([array], what)[0]

    def _get(self, handle: ActivationHandle) -> np.ndarray:
        with self._lock:
            try:
                return self._arrays[handle]
            except (KeyError, TypeError):
                raise UnknownHandle(handle, self._name) from None

    def alloc_activation(self, shape: TensorShape, dtype: Dtype) -> ActivationHandle:
        if dtype not in self.supported_dtypes:
            raise UnsupportedDtype(dtype)
        what = f"allocation of {list(shape.dims)} {dtype}"
        self._check_room(dtype.numpy.itemsize * shape.element_count(), what)
        try:
            return self._register(np.zeros(shape.dims, dtype=dtype.numpy), what)
        except MemoryError:
            raise OutOfMemory(f"{shape.dims} {dtype}") from None

    def release_activation(self, handle: ActivationHandle) -> None:
        with self._lock:
            array = self._arrays.pop(handle, None) if isinstance(handle, ActivationHandle) else None
            if array is not None:
                self._used -= array.nbytes

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not Vendor.cpu:
            raise VendorMismatch(plan.vendor, Vendor.cpu)
        arrays = [self._get(h) for h in inputs]
        decoded = decode_plan(plan)
        results = run_nodes(np, decoded, arrays, _SUPPORTED)
        # the message is made only when the memory limit refuses the results: a partition task's hot path
        return self._register_all([np.asarray(r) for r in results],
                                  lambda: f"the results of {', '.join(decoded['outputs'])}")

    def export_activation(self, handle: ActivationHandle) -> PortableActivation:
        array = self._get(handle)
        dtype = _dtype_of(array)
        if dtype is Dtype.int4 or not _LITTLE:
            return PortableActivation.from_array(array, dtype)
        flags = array.flags
        if flags.c_contiguous and not flags.writeable:
            # An activation never changes once registered, so its own memory is the portable bytes: no copy
            # here, and none on a cluster, where they are sent from it as an out-of-band frame. A view of a
            # read-only array is read-only.
            return portable_of_own(array.shape, dtype, memoryview(array.reshape(-1).view(np.uint8)))
        try:
            lease = self._staging.lease_array(array.nbytes)
        except MemoryError:
            raise OutOfMemory(f"staging buffer of {array.nbytes} bytes") from None
        np.copyto(lease.array.view(array.dtype).reshape(array.shape), array)
        return PortableActivation(TensorShape(array.shape), dtype, lease.view)

    def import_activation(self, portable: PortableActivation) -> ActivationHandle:
        dtype = portable.dtype
        if dtype not in _SUPPORTED:
            raise UnsupportedDtype(dtype)
        shape = portable.shape
        n = shape.element_count()
        if self._limit is not None:
            self._check_room(dtype.numpy.itemsize * n, f"import of {list(shape.dims)} {dtype}")
        data = portable.bytes
        try:
            if dtype is not Dtype.int4 and _LITTLE and (type(data) is bytes or memoryview(data).readonly):
                # Immutable bytes are adopted as they are: numpy makes an array over read-only memory read-only.
                array = np.frombuffer(data, dtype=dtype.numpy, count=n)
                if len(shape.dims) != 1:
                    array = array.reshape(shape.dims)
            else:
                array = portable.to_array()
                array.flags.writeable = False
        except MemoryError:
            raise OutOfMemory(f"{shape.dims} {dtype}") from None
        handle = next_handle()
        with self._lock:
            if self._limit is not None:
                self._reserve(array.nbytes, f"import of {list(portable.shape.dims)} {dtype}")
            else:
                self._used += array.nbytes
            self._arrays[handle] = array
        return handle

    def live_activations(self) -> int:
        with self._lock:
            return len(self._arrays)

    def __repr__(self) -> str:
        return f"CpuExecutor({self._name!r})"


class CpuDevice(NamedTuple):
    """One device of the host: a NUMA node, or a set of cores."""

    index: int
    cpus: tuple[int, ...]
    node: int | None
    memory_bytes: int | None

    def bound(self) -> BoundDevice:
        where = f"numa{self.node}" if self.node is not None else f"cores{_ranges(self.cpus)}"
        what = f"NUMA node {self.node}" if self.node is not None else "cores"
        return BoundDevice(where, f"{_processor()}, {what} {_ranges(self.cpus)} ({len(self.cpus)} threads)",
                           self.memory_bytes)


def cpu_devices(count: int | None = None, node_root: str = "/sys/devices/system/node") -> list[CpuDevice]:
    """The host's devices: its NUMA nodes where it has several, else ``count`` disjoint sets of its cores.

    Only the cores this process may run on count (``os.sched_getaffinity``:
    a container or ``taskset`` narrows them). On one node the cores are
    dealt in order into ``count`` sets (the first sets one core larger
    where they do not divide), so ``devices: [0, 1]`` on 16 cores is cores
    0-7 and 8-15; each set shares the host's memory in proportion.
    ``count`` None on one node is one device, the whole host.

    >>> devices = cpu_devices(2, node_root="/nonexistent")
    >>> len(devices), set(devices[0].cpus) & set(devices[1].cpus)
    (2, set())
    """
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = list(range(os.cpu_count() or 1))
    nodes = _numa_nodes(node_root, set(allowed))
    if len(nodes) > 1:
        return [CpuDevice(i, cpus, node, memory) for i, (node, cpus, memory) in enumerate(nodes)]
    count = max(1, count or 1)
    if count > len(allowed):
        raise ValueError(f"{count} CPU devices need {count} cores; this process may run on {len(allowed)}")
    memory = _host_memory()
    size, extra = divmod(len(allowed), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        cpus = tuple(allowed[start:end])
        out.append(CpuDevice(i, cpus, None, None if memory is None else memory * len(cpus) // len(allowed)))
        start = end
    return out


def _numa_nodes(root: str, allowed: set[int]) -> list[tuple[int, tuple[int, ...], int | None]]:
    """(node, its allowed cores, its memory) of every NUMA node with cores this process may use."""
    try:
        names = sorted((int(n[4:]), n) for n in os.listdir(root) if n.startswith("node") and n[4:].isdigit())
    except OSError:
        return []
    found = []
    for number, name in names:
        try:
            with open(os.path.join(root, name, "cpulist"), encoding="ascii") as f:
                cpus = tuple(c for c in _parse_ranges(f.read()) if c in allowed)
        except (OSError, ValueError):
            continue
        memory = None
        try:
            with open(os.path.join(root, name, "meminfo"), encoding="ascii") as f:
                for line in f:
                    if "MemTotal:" in line:
                        memory = int(line.split("MemTotal:")[1].split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        if cpus:
            found.append((number, cpus, memory))
    return found


def _parse_ranges(text: str) -> list[int]:
    """``0-3,8`` as [0, 1, 2, 3, 8]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            out.extend(range(int(low), int(high or low) + 1))
    return out


def _ranges(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 3, 8] as ``0-3,8``."""
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(f"{cpus[i]}-{cpus[j]}" if j > i else f"{cpus[i]}")
        i = j + 1
    return ",".join(parts)


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


_DTYPE_OF: dict[np.dtype, Dtype] = {}


def _dtype_of(array: np.ndarray) -> Dtype:
    found = _DTYPE_OF.get(array.dtype)
    if found is not None:
        return found
    for d in Dtype:
        if d.numpy == array.dtype:
            _DTYPE_OF[array.dtype] = d
            return d
    raise Backend(f"array of numpy dtype {array.dtype} has no hetflow dtype")
