"""The executor contract: seed 000 rendered in Python.

An *executor* is a vendor-specific compute backend bound to one or more
devices. The engine hands it opaque :class:`SubGraphPlan` units and moves
activations between executors only through :class:`PortableActivation`,
the wire form whose bytes are row-major, little-endian and dequantized to
the declared dtype.

Handles mean something only to the executor instance that issued them;
every other instance answers :class:`UnknownHandle`. The engine counts
references and calls :meth:`Executor.release_activation` when the last
consumer is done; releasing twice is not an error.

Every method may be called from many threads at once: implementations
synchronize internally.

Examples
--------
>>> TensorShape((2, 3, 4)).element_count()
24
>>> str(VendorMismatch(Vendor.cuda, Vendor.rocm))
'plan vendor cuda does not match executor vendor rocm'
>>> Dtype.parse("bf16").itemsize_bits
16
"""

from __future__ import annotations

import enum
import pickle
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, NamedTuple, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

# numpy loads where array data is handled, not with this module: ``hetflow
# emulate`` imports the executors package and never touches an array.

__all__ = [
    "Vendor",
    "Dtype",
    "TensorShape",
    "BoundDevice",
    "DeviceSet",
    "ActivationHandle",
    "PortableActivation",
    "SubGraphPlan",
    "ExecutorError",
    "UnsupportedDtype",
    "VendorMismatch",
    "OutOfMemory",
    "UnknownHandle",
    "Backend",
    "Executor",
]


class Vendor(str, enum.Enum):
    """Vendor of the kernel collection an executor wraps."""

    cuda = "cuda"
    rocm = "rocm"
    vulkan = "vulkan"
    cpu = "cpu"

    def __str__(self) -> str:
        return self.value


class Dtype(str, enum.Enum):
    """Numeric type of the values in a tensor.

    Tagged by name everywhere (``dtype.str`` does not round-trip for the
    ml_dtypes types). ``int4`` is carried in numpy as ``ml_dtypes.int4``,
    one value per byte in memory; its portable bytes pack two values per
    byte, low nibble first (see :class:`PortableActivation`).

    Four kinds (:attr:`kind`): floats (``fp32``, ``fp16``, ``bf16``, the
    two fp8s, ``fp64``); the quantized activations ``int8`` and ``int4``,
    which ops compute on as float32 and saturate back; the integers
    ``int16``, ``int32``, ``int64`` and ``uint8``, which ops compute on
    as they are, wrapping; and ``bool``, one byte 0 or 1.
    """

    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"
    fp8e4m3 = "fp8e4m3"
    fp8e5m2 = "fp8e5m2"
    int8 = "int8"
    int4 = "int4"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint8 = "uint8"
    bool = "bool"
    fp64 = "fp64"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: str) -> "Dtype":
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown dtype {name!r} (known: {known})") from None

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds this dtype's values on the host."""
        found = _NUMPY_DTYPES.get(self)
        return found if found is not None else _numpy_dtypes(self in _EXTENSION_DTYPES)[self]

    @property
    def itemsize_bits(self) -> int:
        return _BITS[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_exact(self) -> bool:
        """An integer or boolean type whose values an op computes on as they are (not ``int8``/``int4``,
        which are quantized activations that ops compute on as float32)."""
        return self in _EXACT

    @property
    def kind(self) -> str:
        """``float``, ``quant`` (int8, int4), ``int`` (int16, int32, int64, uint8) or ``bool``."""
        return _KIND[self]

    def nbytes(self, element_count: int) -> int:
        """Bytes of ``element_count`` values in the portable layout."""
        return (element_count * _BITS[self] + 7) // 8


_BITS = {Dtype.fp32: 32, Dtype.fp16: 16, Dtype.bf16: 16, Dtype.fp8e4m3: 8, Dtype.fp8e5m2: 8, Dtype.int8: 8, Dtype.int4: 4,
         Dtype.int16: 16, Dtype.int32: 32, Dtype.int64: 64, Dtype.uint8: 8, Dtype.bool: 8, Dtype.fp64: 64}
_FLOATS = frozenset({Dtype.fp32, Dtype.fp16, Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2, Dtype.fp64})
_EXACT = frozenset({Dtype.int16, Dtype.int32, Dtype.int64, Dtype.uint8, Dtype.bool})
_KIND = {d: "float" if d in _FLOATS else "bool" if d is Dtype.bool else "int" if d in _EXACT else "quant" for d in Dtype}


# Filled on first use, numpy's own dtypes first: ml_dtypes takes about a second to import, and only the
# extension dtypes need it; commands that never touch tensor data (validate, plan) load neither, and a
# run whose tensors are all fp32, fp16 or int8 loads numpy alone.
_NUMPY_DTYPES: dict[Dtype, np.dtype] = {}
_EXTENSION_DTYPES = frozenset({Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2, Dtype.int4})


def _numpy_dtypes(extensions: bool = True) -> dict[Dtype, np.dtype]:
    import numpy as np

    if not _NUMPY_DTYPES:
        _NUMPY_DTYPES.update({Dtype.fp32: np.dtype(np.float32), Dtype.fp16: np.dtype(np.float16),
                              Dtype.int8: np.dtype(np.int8), Dtype.int16: np.dtype(np.int16),
                              Dtype.int32: np.dtype(np.int32), Dtype.int64: np.dtype(np.int64),
                              Dtype.uint8: np.dtype(np.uint8), Dtype.bool: np.dtype(np.bool_),
                              Dtype.fp64: np.dtype(np.float64)})
    if extensions and len(_NUMPY_DTYPES) < len(Dtype):
        import ml_dtypes

        _NUMPY_DTYPES.update({Dtype.bf16: np.dtype(ml_dtypes.bfloat16), Dtype.fp8e4m3: np.dtype(ml_dtypes.float8_e4m3fn),
                              Dtype.fp8e5m2: np.dtype(ml_dtypes.float8_e5m2), Dtype.int4: np.dtype(ml_dtypes.int4)})
    return _NUMPY_DTYPES


@dataclass(frozen=True)
class TensorShape:
    """Logical tensor shape, row-major; rank up to eight."""

    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        dims = tuple(map(int, self.dims))
        object.__setattr__(self, "dims", dims)
        if len(dims) > 8:
            raise ValueError(f"rank {len(dims)} exceeds the maximum of 8")
        if dims and min(dims) < 0:
            raise ValueError(f"negative dimension in {dims}")

    def element_count(self) -> int:
        return prod(self.dims)


@dataclass(frozen=True)
class BoundDevice:
    """One device an executor is bound to. ``bus_address`` is the stable identity.

    ``memory_bytes`` is the device's total memory where the vendor reports it.
    """

    bus_address: str
    display_name: str
    memory_bytes: int | None = None


class DeviceSet(int):
    """The devices of one executor (``devices: [0, 1]``, ``split: [3, 1]``), passed where one device index goes.

    Its value as an int is the first device, so everything that reads one
    device index (a worker's GPU, the memory check) keeps working;
    ``indexes`` is every device (None for ``all``: every device the vendor
    has here), ``split`` the share of each (None: even).

    >>> d = DeviceSet((1, 2), (3, 1))
    >>> int(d), d.indexes, d.shares(2)
    (1, (1, 2), (0.75, 0.25))
    >>> DeviceSet(None).shares(4)
    (0.25, 0.25, 0.25, 0.25)
    >>> import pickle; pickle.loads(pickle.dumps(d)) == d, repr(d)
    (True, 'DeviceSet((1, 2), split=(3, 1))')
    """

    indexes: tuple[int, ...] | None
    split: tuple[float, ...] | None
    limits: tuple[int, ...] | None
    """Each device's own ``memory_limit`` in bytes, where the manifest gives one per device."""

    def __new__(cls, indexes: Sequence[int] | None, split: Sequence[float] | None = None,
                limits: Sequence[int] | None = None) -> "DeviceSet":
        self = super().__new__(cls, indexes[0] if indexes else 0)
        self.indexes = None if indexes is None else tuple(int(i) for i in indexes)
        self.split = None if split is None else tuple(split)
        self.limits = None if limits is None else tuple(int(n) for n in limits)
        return self

    def __reduce__(self):
        return (DeviceSet, (self.indexes, self.split, self.limits))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeviceSet):
            return (self.indexes, self.split, self.limits) == (other.indexes, other.split, other.limits)
        return isinstance(other, int) and self.indexes is not None and len(self.indexes) == 1 and int(self) == other

    def __hash__(self) -> int:
        return hash((self.indexes, self.split, self.limits))

    def __repr__(self) -> str:
        shown = "all" if self.indexes is None else self.indexes
        return (f"DeviceSet({shown!r}" + (f", split={self.split!r}" if self.split is not None else "")
                + (f", limits={self.limits!r}" if self.limits is not None else "") + ")")

    def shares(self, count: int) -> tuple[float, ...]:
        """Each of ``count`` devices' share of the work, summing to 1."""
        weights = self.split if self.split is not None and len(self.split) == count else (1.0,) * count
        total = float(sum(weights))
        return tuple(w / total for w in weights)


class ActivationHandle(NamedTuple):
    """Opaque handle to an activation inside one executor's address space.

    Immutable, hashed and compared by its ``value``. A named tuple rather
    than a dataclass: an executor keys its activations by handle, and a
    dataclass's hash and equality run as Python code at every lookup, two
    or more per task of a run.

    >>> ActivationHandle(7), ActivationHandle(7) == ActivationHandle(7), {ActivationHandle(7): 1}[ActivationHandle(7)]
    (ActivationHandle(7), True, 1)
    """

    value: int

    def __repr__(self) -> str:
        return f"ActivationHandle({self.value})"


@dataclass(frozen=True)
class PortableActivation:
    """Wire-portable activation.

    ``bytes`` holds the values in row-major order at ``dtype``,
    little-endian, dequantized. ``int4`` packs two values per byte, the
    element with the lower index in the low nibble; an odd count leaves
    the last high nibble zero. ``bool`` is one byte per value, 0 or 1.

    ``bytes`` is any read-only bytes-like object: a ``bytes``, or a
    ``memoryview`` over an executor's reused staging buffer (see
    :mod:`hetflow.executors.staging`), which saves a copy of every bridged
    tensor.

    Pickled with protocol 5, the bytes travel out of band as a
    ``pickle.PickleBuffer`` (Dask's comms send such buffers as frames of
    their own, straight from memory, and hand the received frame back):
    no copy into the pickle stream on the sending side, none out of it on
    the receiving side, where ``bytes`` is a read-only view of the frame
    that nothing else holds, so an importer may adopt it. Older protocols
    carry a plain ``bytes``.

    Examples
    --------
    >>> import pickle
    >>> import numpy as np
    >>> p = PortableActivation.from_array(np.arange(4, dtype=np.float32), Dtype.fp32)
    >>> buffers = []
    >>> stream = pickle.dumps(p, protocol=5, buffer_callback=buffers.append)
    >>> len(stream) < 200, [len(b.raw()) for b in buffers]
    (True, [16])
    >>> q = pickle.loads(stream, buffers=buffers)
    >>> q.to_array().tolist(), q.bytes.readonly
    ([0.0, 1.0, 2.0, 3.0], True)
    """

    shape: TensorShape
    dtype: Dtype
    bytes: bytes | memoryview = field(repr=False)

    def __reduce_ex__(self, protocol):
        if protocol >= 5:
            return (_portable_from_buffer, (self.shape, self.dtype, pickle.PickleBuffer(self.bytes)))
        return (PortableActivation, (self.shape, self.dtype, bytes(self.bytes)))

    @property
    def nbytes(self) -> int:
        """Length of ``bytes``, known without reading them (an executor may produce them lazily)."""
        return self.dtype.nbytes(prod(self.shape.dims))

    def __post_init__(self) -> None:
        if isinstance(self.bytes, memoryview) and (self.bytes.format != "B" or self.bytes.ndim != 1):
            object.__setattr__(self, "bytes", self.bytes.cast("B"))
        want = self.dtype.nbytes(prod(self.shape.dims))
        if len(self.bytes) != want:
            raise ValueError(
                f"portable activation of shape {self.shape.dims} and dtype {self.dtype} "
                f"needs {want} bytes, got {len(self.bytes)}"
            )

    @classmethod
    def from_array(cls, array: np.ndarray, dtype: Dtype) -> "PortableActivation":
        """Encode a host array already holding ``dtype.numpy`` values."""
        import numpy as np

        host = np.asarray(array, dtype=dtype.numpy, order="C")  # a 0-d array stays one (ascontiguousarray: 1-d)
        if dtype is Dtype.int4:
            nibbles = host.reshape(-1).view(np.int8).astype(np.uint8) & 0x0F
            if nibbles.size % 2:
                nibbles = np.concatenate([nibbles, np.zeros(1, np.uint8)])
            payload = (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()
        else:
            payload = host.astype(host.dtype.newbyteorder("<"), copy=False).tobytes()
        return cls(TensorShape(host.shape), dtype, payload)

    def to_array(self) -> np.ndarray:
        """Decode into a new host array of ``dtype.numpy`` values."""
        import numpy as np

        n = self.shape.element_count()
        if self.dtype is Dtype.int4:
            packed = np.frombuffer(self.bytes, dtype=np.uint8)
            nibbles = np.empty(packed.size * 2, dtype=np.uint8)
            nibbles[0::2] = packed & 0x0F
            nibbles[1::2] = packed >> 4
            signed = ((nibbles[:n].astype(np.int16) ^ 8) - 8).astype(np.int8)
            return signed.astype(Dtype.int4.numpy).reshape(self.shape.dims)
        host = np.frombuffer(self.bytes, dtype=self.dtype.numpy.newbyteorder("<"), count=n)
        return host.astype(self.dtype.numpy).reshape(self.shape.dims)


def portable_of_own(dims: tuple[int, ...], dtype: Dtype, data: memoryview) -> PortableActivation:
    """A :class:`PortableActivation` over an executor's own read-only array, whose checks hold by construction.

    ``dims`` is the array's ``shape`` (a tuple of ints, rank at most
    eight), ``data`` a read-only one-dimensional byte view of exactly its
    bytes. Every bridge exports one, and the two dataclasses' generated
    ``__init__`` and checks were a third of an export; this sets the
    fields directly (a rank over eight still gets the checked path's error).
    """
    if len(dims) > 8:
        return PortableActivation(TensorShape(dims), dtype, data)
    shape = object.__new__(TensorShape)
    object.__setattr__(shape, "dims", dims)
    portable = object.__new__(PortableActivation)
    object.__setattr__(portable, "shape", shape)
    object.__setattr__(portable, "dtype", dtype)
    object.__setattr__(portable, "bytes", data)
    return portable


def _portable_from_buffer(shape: TensorShape, dtype: Dtype, buffer) -> PortableActivation:
    return PortableActivation(shape, dtype, memoryview(buffer).toreadonly())


@dataclass(frozen=True)
class SubGraphPlan:
    """A unit of compute the planner assigned to one executor.

    The payload is opaque to the engine: only an executor of ``vendor``
    decodes it.
    """

    vendor: Vendor
    payload: bytes = field(repr=False)


class ExecutorError(Exception):
    """Base of the errors an executor call raises.

    ``node`` names the plan node that failed, when the executor knows it.
    """

    node: str | None = None


class UnsupportedDtype(ExecutorError):
    def __init__(self, dtype: Dtype) -> None:
        super().__init__(f"executor does not support dtype {dtype}")
        self.dtype = dtype


class VendorMismatch(ExecutorError):
    def __init__(self, plan: Vendor, executor: Vendor) -> None:
        super().__init__(f"plan vendor {plan} does not match executor vendor {executor}")
        self.plan = plan
        self.executor = executor


class OutOfMemory(ExecutorError):
    def __init__(self, detail: str = "") -> None:
        super().__init__("executor allocation failed" + (f": {detail}" if detail else ""))


class UnknownHandle(ExecutorError):
    def __init__(self, handle: ActivationHandle, executor: str = "") -> None:
        where = f" for executor {executor!r}" if executor else ""
        super().__init__(f"unknown activation handle {handle!r}{where}")
        self.handle = handle


class Backend(ExecutorError):
    """The vendor SDK (or an op) failed; the message is passed through."""

    def __init__(self, message: str, node: str | None = None) -> None:
        super().__init__(f"backend error: {message}")
        self.message = message
        self.node = node


@runtime_checkable
class Executor(Protocol):
    """The vendor backend boundary. Every method is callable across threads."""

    @property
    def vendor(self) -> Vendor: ...

    @property
    def name(self) -> str: ...

    @property
    def devices(self) -> Sequence[BoundDevice]: ...

    @property
    def supported_dtypes(self) -> Sequence[Dtype]: ...

    def alloc_activation(self, shape: TensorShape, dtype: Dtype) -> ActivationHandle: ...

    def release_activation(self, handle: ActivationHandle) -> None: ...

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]: ...

    def export_activation(self, handle: ActivationHandle) -> PortableActivation: ...

    def import_activation(self, portable: PortableActivation) -> ActivationHandle: ...

    def live_activations(self) -> int:
        """Number of activations allocated and not yet released."""
        ...
