"""The Vulkan executor: WGSL compute shaders on a Vulkan adapter, through wgpu.

Memory. Every activation is one device storage buffer holding exactly the
tensor's portable bytes (row-major, little-endian; fp16/bf16 two values
per 32-bit word, int8 and the fp8 types four, int4 eight, low bits first),
padded with zeros to a multiple of four bytes. Export and import are
therefore plain copies, bit for bit, through two mapped *staging buffers*
per device (one ``MAP_WRITE`` for uploads, one ``MAP_READ`` for
downloads), made once, grown to the largest transfer up to
``STAGING_CHUNK`` bytes and reused; a larger tensor goes through them in
chunks. A fresh WebGPU buffer is zero-filled, which is what
``alloc_activation`` promises.

Compute. A :class:`SubGraphPlan` is the JSON partition every vendor reads
(:func:`hetflow.executors.payload.decode_plan`). Every node follows the op
library's numeric rule on the device: each input that is not fp32 is
*widened* by ``widen.wgsl`` into a temporary f32 buffer, the op's kernel
computes f32, and a result of another dtype is *narrowed* by
``narrow.wgsl``, one 32-bit output word per invocation (so no two
invocations write one word), with round-to-nearest-even done in integer
arithmetic on the bits; both match numpy/ml_dtypes bit for bit. Which
kernel computes an op is the op's own ``wgsl`` field in the registry
(:class:`hetflow.executors.ops.Kernel`): a template file in ``wgsl/``
and the expression or mode it takes. An op without one is not offered
(:func:`offered_ops`) and the planner places it elsewhere. Source ops
(``Kernel("host")``: random draws, files, constants) are made by the
op's numpy body on the host, as on every executor, and uploaded. All of
a partition's dispatches are recorded in one command encoder and
submitted once; WebGPU orders the dispatches and makes each one's
writes visible to the next.

Devices and threads. The Vulkan adapters wgpu finds are listed by
:func:`adapters`, GPUs before CPU-type ones (lavapipe, Mesa's software
Vulkan device, reports itself as a CPU-type adapter). One wgpu device per
adapter is shared by every executor instance in the process, with its
compiled pipelines and staging buffers, behind one lock: the queue is a
single ordered stream anyway. Handles are per instance. Errors wgpu
raises become :class:`Backend` with wgpu's message, and
:class:`OutOfMemory` when the device is out of memory or a tensor is
larger than its largest buffer.

Examples
--------
>>> "matmul" in offered_ops() and "layernorm" in offered_ops()
True
>>> _axis_view((2, 3, 4), 1)        # a reduction over axis 1: (outer, R, inner)
(2, 3, 4)
>>> _broadcast_strides((3, 1), (2, 3, 5))
[0, 1, 0]
>>> import numpy as np
>>> vk = VulkanExecutor("vk")                                  # doctest: +SKIP
>>> h = vk.import_activation(PortableActivation.from_array(np.ones(3, np.float32), Dtype.fp32))  # doctest: +SKIP
>>> vk.export_activation(h).to_array().tolist()               # doctest: +SKIP
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
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
from hetflow.executors.cpu import next_handle
from hetflow.executors.payload import decode_plan

__all__ = ["VulkanExecutor", "adapters", "describe", "offered_ops", "SUPPORTED_DTYPES", "STAGING_CHUNK", "wgpu_version", "enumeration_chatter"]

KERNELS = Path(__file__).with_name("wgsl")
STAGING_CHUNK = 64 << 20
"""Largest staging buffer, in bytes; larger transfers go in chunks of this size."""

SUPPORTED_DTYPES: tuple[Dtype, ...] = tuple(Dtype)
"""Every dtype: storage is packed 32-bit words and conversions are integer code, so no device feature is needed."""

_DT_CODE = {Dtype.fp32: 0, Dtype.fp16: 1, Dtype.bf16: 2, Dtype.fp8e4m3: 3, Dtype.fp8e5m2: 4, Dtype.int8: 5, Dtype.int4: 6}
_REDUCE_MODE = {"sum": 0, "mean": 1, "max": 2, "argmax": 3}
_NORM_MODE = {"rms": 0, "layer": 1}
_WG = 256
_MAX_GROUPS = 65535
_TYPE_ORDER = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3, "Unknown": 4}


def wgpu_version() -> str | None:
    try:
        import wgpu
    except Exception:
        return None
    return wgpu.__version__


@lru_cache(maxsize=1)
def adapters() -> tuple[Any, ...]:
    """The Vulkan adapters wgpu finds, GPUs first; raises ImportError without wgpu."""
    import wgpu

    try:
        from wgpu.backends.wgpu_native import extras

        # Only Vulkan: probing the GL backend too would print EGL noise and
        # list the same device twice.
        extras.set_instance_extras(backends=["Vulkan"])
    except Exception:  # the instance already exists; the filter below still applies
        pass
    with _stderr_captured() as chatter:
        found = [a for a in wgpu.gpu.enumerate_adapters_sync() if a.info.get("backend_type") == "Vulkan"]
    global _ENUMERATION_CHATTER
    _ENUMERATION_CHATTER = chatter.text()
    return tuple(sorted(found, key=lambda a: _TYPE_ORDER.get(a.info.get("adapter_type", "Unknown"), 4)))


_ENUMERATION_CHATTER = ""


def enumeration_chatter() -> str:
    """What the Vulkan loader and drivers printed while adapters were enumerated."""
    return _ENUMERATION_CHATTER


class _stderr_captured:
    """Collect what C code writes to file descriptor 2 (Mesa's WSI layers print
    about a missing XDG_RUNTIME_DIR while the loader starts) instead of
    letting it reach the user's terminal between hetflow's own lines."""

    def __enter__(self) -> "_stderr_captured":
        import os
        import sys
        import tempfile

        self._text = ""
        try:
            sys.stderr.flush()
            self._file = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._file.fileno(), 2)
        except (OSError, ValueError, AttributeError):
            self._saved = None
        return self

    def __exit__(self, *exc: Any) -> None:
        import os

        if self._saved is None:
            return
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self._text = self._file.read().decode(errors="replace").strip()
        self._file.close()

    def text(self) -> str:
        return self._text


def describe(adapter: Any, index: int) -> BoundDevice:
    """A :class:`BoundDevice` from an adapter's info: name, vendor, device type, backend."""
    info = adapter.info
    kind = info.get("adapter_type", "Unknown")
    if kind == "CPU":
        kind_text = "CPU-type adapter (a software Vulkan device running on the host CPU, not a GPU)"
    else:
        kind_text = f"{kind} adapter"
    vendor = info.get("vendor") or f"vendor 0x{info.get('vendor_id', 0):04x}"
    name = f"{info.get('device', '?')}: {kind_text}, {vendor}, {info.get('backend_type', '?')}, {info.get('description', '')}".rstrip(", ")
    return BoundDevice(f"vulkan:{index}:{info.get('vendor_id', 0):04x}:{info.get('device_id', 0):04x}", name)


def offered_ops() -> tuple[str, ...]:
    """The registry's ops that carry a Vulkan kernel."""
    return tuple(name for name, op in ops.REGISTRY.items() if op.wgsl is not None)


@lru_cache(maxsize=None)
def _source(template: str, **subs: Any) -> str:
    if template == "source":  # a user's op brings its own WGSL (ops.Kernel("source", code))
        return subs["CODE"]
    text = (KERNELS / f"{template}.wgsl").read_text()
    if template in ("widen", "narrow"):
        text = (KERNELS / "dtypes.wgsl").read_text() + "\n" + text
    for key, value in subs.items():
        text = text.replace("{{" + key + "}}", str(value))
    return text


def _wgpu_error(e: Exception, what: str, node: str | None = None) -> ExecutorError:
    import wgpu

    if isinstance(e, ExecutorError):
        return e
    if isinstance(e, (wgpu.GPUOutOfMemoryError, MemoryError)):
        err: ExecutorError = OutOfMemory(f"{what}: {e}")
        err.node = node
        return err
    return Backend(f"{what}: {type(e).__name__}: {str(e).strip()}", node=node)


class _Device:
    """One wgpu device per adapter in the process: queue, pipelines, staging, one lock."""

    _instances: dict[int, "_Device"] = {}
    _guard = threading.Lock()

    @classmethod
    def get(cls, index: int) -> "_Device":
        with cls._guard:
            if index not in cls._instances:
                cls._instances[index] = cls(index)
            return cls._instances[index]

    def __init__(self, index: int) -> None:
        import wgpu

        self.wgpu = wgpu
        found = adapters()
        if not 0 <= index < len(found):
            raise Backend(f"no Vulkan adapter {index} (found {len(found)})")
        adapter = found[index]
        self.bound = describe(adapter, index)
        want = {
            "max-storage-buffer-binding-size": adapter.limits["max-storage-buffer-binding-size"],
            "max-buffer-size": adapter.limits["max-buffer-size"],
        }
        try:
            self.device = adapter.request_device_sync(label=f"hetflow-vulkan-{index}", required_limits=want)
        except Exception as e:
            raise _wgpu_error(e, "creating the Vulkan device") from None
        self.queue = self.device.queue
        self.max_buffer = int(self.device.limits["max-buffer-size"])
        self.max_binding = int(self.device.limits["max-storage-buffer-binding-size"])
        self.lock = threading.RLock()
        self._pipelines: dict[tuple, Any] = {}
        self._up: Any = None
        self._down: Any = None
        self._fence_src: Any = None

    # -- buffers and transfers (callers hold self.lock) ---------------------------

    def buffer(self, nbytes: int, what: str) -> Any:
        size = max(4, (nbytes + 3) // 4 * 4)
        if size > self.max_buffer:
            raise OutOfMemory(f"{what} needs {nbytes} bytes, more than the device's largest buffer ({self.max_buffer} bytes)")
        usage = self.wgpu.BufferUsage.STORAGE | self.wgpu.BufferUsage.COPY_SRC | self.wgpu.BufferUsage.COPY_DST
        try:
            return self.device.create_buffer(size=size, usage=usage)
        except Exception as e:
            raise _wgpu_error(e, f"allocating {nbytes} bytes for {what}") from None

    def _staging(self, current: Any, need: int, usage: int) -> Any:
        if current is not None and current.size >= need:
            return current
        size = min(max(1 << 16, 1 << (need - 1).bit_length()), max(STAGING_CHUNK, need))
        return self.device.create_buffer(size=size, usage=usage)

    def upload(self, dst: Any, data: Any) -> None:
        view = memoryview(data).cast("B")
        total = len(view)
        chunk = min(STAGING_CHUNK, self.max_buffer)
        off = 0
        while off < total:
            size = min(chunk, total - off)
            padded = (size + 3) // 4 * 4
            self._up = self._staging(self._up, padded, self.wgpu.BufferUsage.MAP_WRITE | self.wgpu.BufferUsage.COPY_SRC)
            self._up.map_sync(self.wgpu.MapMode.WRITE, 0, padded)
            part = view[off : off + size]
            self._up.write_mapped(part if padded == size else bytes(part) + bytes(padded - size), 0)
            self._up.unmap()
            enc = self.device.create_command_encoder()
            enc.copy_buffer_to_buffer(self._up, 0, dst, off, padded)
            self.queue.submit([enc.finish()])
            off += size

    def download(self, src: Any, nbytes: int) -> bytes:
        chunk = min(STAGING_CHUNK, self.max_buffer)
        parts = []
        off = 0
        while off < nbytes:
            size = min(chunk, nbytes - off)
            padded = (size + 3) // 4 * 4
            self._down = self._staging(self._down, padded, self.wgpu.BufferUsage.MAP_READ | self.wgpu.BufferUsage.COPY_DST)
            enc = self.device.create_command_encoder()
            enc.copy_buffer_to_buffer(src, off, self._down, 0, padded)
            self.queue.submit([enc.finish()])
            self._down.map_sync(self.wgpu.MapMode.READ, 0, padded)
            try:
                parts.append(bytes(self._down.read_mapped(0, padded, copy=False)[:size]))
            finally:
                self._down.unmap()
            off += size
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def wait(self) -> None:
        """Block until the queue has finished everything submitted so far.

        Mapping a buffer waits for the submissions before it, so a 4-byte
        copy into the download staging buffer is the fence."""
        with self.lock:
            self._down = self._staging(self._down, 4, self.wgpu.BufferUsage.MAP_READ | self.wgpu.BufferUsage.COPY_DST)
            if self._fence_src is None:
                self._fence_src = self.buffer(4, "the fence")
            enc = self.device.create_command_encoder()
            enc.copy_buffer_to_buffer(self._fence_src, 0, self._down, 0, 4)
            self.queue.submit([enc.finish()])
            self._down.map_sync(self.wgpu.MapMode.READ, 0, 4)
            self._down.unmap()

    # -- pipelines ----------------------------------------------------------------

    def pipeline(self, template: str, **subs: Any) -> Any:
        key = (template, tuple(sorted(subs.items())))
        if key not in self._pipelines:
            module = self.device.create_shader_module(label=template, code=_source(template, **subs))
            self._pipelines[key] = self.device.create_compute_pipeline(
                label=template, layout="auto", compute={"module": module, "entry_point": "main"}
            )
        return self._pipelines[key]


@dataclass(frozen=True)
class _Tensor:
    buffer: Any
    shape: tuple[int, ...]
    dtype: Dtype

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.dtype.nbytes(self.count)


class _Recording:
    """The dispatches of one execute call, recorded into one command encoder."""

    def __init__(self, dev: _Device) -> None:
        self.dev = dev
        self.encoder = dev.device.create_command_encoder()
        self.pass_ = self.encoder.begin_compute_pass()
        self.keep: list[Any] = []  # parameter buffers, alive until the submit

    def new(self, shape: Sequence[int], dtype: Dtype, what: str) -> _Tensor:
        shape = tuple(int(d) for d in shape)
        return _Tensor(self.dev.buffer(dtype.nbytes(math.prod(shape)), what), shape, dtype)

    def dispatch(self, template: str, subs: dict, buffers: Sequence[Any], params: Sequence[int], groups: tuple[int, int, int]) -> None:
        dev = self.dev
        for b in buffers:
            if b.size > dev.max_binding:
                raise Backend(f"a tensor of {b.size} bytes exceeds the device's largest storage binding ({dev.max_binding} bytes)")
        if max(groups) > _MAX_GROUPS:
            raise Backend(f"{template}: dispatch of {groups} workgroups exceeds the limit of {_MAX_GROUPS} per dimension")
        pipe = dev.pipeline(template, **subs)
        pbuf = dev.device.create_buffer_with_data(
            data=np.asarray(list(params) or [0], dtype=np.uint32).tobytes(), usage=dev.wgpu.BufferUsage.STORAGE
        )
        self.keep.append(pbuf)
        entries = [
            {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
            for i, b in enumerate([*buffers, pbuf])
        ]
        group = dev.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
        self.keep.append(group)
        self.pass_.set_pipeline(pipe)
        self.pass_.set_bind_group(0, group)
        self.pass_.dispatch_workgroups(*groups)

    def submit(self) -> None:
        self.pass_.end()
        self.dev.queue.submit([self.encoder.finish()])
        self.keep.clear()


def _user_params(op: ops.Op, kernel: ops.Kernel, shapes: list[tuple[int, ...]], args: dict) -> list[int]:
    """The words after P[0] for a user's WGSL kernel: its params function's, else the args in declared order."""
    if kernel.params is not None:
        values = list(kernel.params(*shapes, **{k: v for k, v in args.items() if k in op.args}))
    else:
        values = [float(args[k]) if op.args[k].kind.startswith("number") else args[k] for k in op.args]
    words = []
    for v in values:
        if isinstance(v, (bool, np.bool_)) or isinstance(v, (int, np.integer)) and not isinstance(v, float):
            words.append(int(v) & 0xFFFFFFFF)
        elif isinstance(v, (float, np.floating)):
            words.append(int(np.array([v], np.float32).view(np.uint32)[0]))
        else:
            raise ValueError(f"op {op.name!r}: its WGSL parameter {v!r} is not a number")
    return words


def _linear_groups(count: int) -> tuple[int, int, int]:
    x = min(count, _MAX_GROUPS)
    return (x, -(-count // x), 1)


def _strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _broadcast_strides(shape: Sequence[int], out: Sequence[int]) -> list[int]:
    padded = [1] * (len(out) - len(shape)) + list(shape)
    return [0 if d == 1 else s for d, s in zip(padded, _strides(padded))]


def _axis_view(shape: Sequence[int], axis: int | None) -> tuple[int, int, int]:
    """(outer, R, inner) of a reduction over ``axis`` (all axes when None)."""
    if axis is None:
        return 1, math.prod(shape), 1
    ax = axis % max(len(shape), 1)
    return math.prod(shape[:ax]), (shape[ax] if shape else 1), math.prod(shape[ax + 1 :])


class VulkanExecutor:
    """WGSL compute on one Vulkan adapter; thread-safe, every dtype."""

    def __init__(self, name: str = "vulkan", device: int | None = None, memory_limit: int | None = None) -> None:
        if memory_limit is not None and memory_limit < 0:
            raise ValueError(f"memory_limit must be >= 0, got {memory_limit}")
        self._name = name
        self._dev = _Device.get(device or 0)
        self._lock = threading.Lock()
        self._tensors: dict[ActivationHandle, _Tensor] = {}
        self._limit = memory_limit
        self._used = 0

    @property
    def vendor(self) -> Vendor:
        return Vendor.vulkan

    @property
    def name(self) -> str:
        return self._name

    @property
    def devices(self) -> Sequence[BoundDevice]:
        return (self._dev.bound,)

    @property
    def supported_dtypes(self) -> Sequence[Dtype]:
        return SUPPORTED_DTYPES

    @property
    def supported_ops(self) -> tuple[str, ...]:
        return offered_ops()

    @property
    def memory_bytes(self) -> int | None:
        """``memory_limit``; WebGPU does not report a device's memory."""
        return self._limit

    @property
    def memory_limit(self) -> int | None:
        return self._limit

    def memory_used(self) -> int:
        """Bytes of the live activations."""
        with self._lock:
            return self._used

    # -- handles ------------------------------------------------------------------

    def _register_all(self, tensors: Sequence[_Tensor], what: str) -> list[ActivationHandle]:
        handles = [next_handle() for _ in tensors]
        nbytes = sum(t.nbytes for t in tensors)
        with self._lock:
            if self._limit is not None and self._used + nbytes > self._limit:
                raise OutOfMemory(
                    f"{what} needs {nbytes} bytes, {self._used} of the memory_limit of {self._limit} bytes "
                    f"are in use on executor {self._name!r}"
                )
            self._used += nbytes
            self._tensors.update(zip(handles, tensors))
        return handles

    def _register(self, tensor: _Tensor, what: str = "activation") -> ActivationHandle:
        return self._register_all([tensor], what)[0]

    def _get(self, handle: ActivationHandle) -> _Tensor:
        with self._lock:
            try:
                return self._tensors[handle]
            except (KeyError, TypeError):
                raise UnknownHandle(handle, self._name) from None

    def alloc_activation(self, shape: TensorShape, dtype: Dtype) -> ActivationHandle:
        if dtype not in SUPPORTED_DTYPES:
            raise UnsupportedDtype(dtype)
        with self._dev.lock:
            buf = self._dev.buffer(dtype.nbytes(shape.element_count()), f"{shape.dims} {dtype}")
        return self._register(_Tensor(buf, shape.dims, dtype))

    def release_activation(self, handle: ActivationHandle) -> None:
        with self._lock:
            t = self._tensors.pop(handle, None) if isinstance(handle, ActivationHandle) else None
            if t is not None:
                self._used -= t.nbytes

    def live_activations(self) -> int:
        with self._lock:
            return len(self._tensors)

    def synchronize(self) -> None:
        """Wait until the device has finished all work submitted to it (for timing)."""
        self._dev.wait()

    # -- bridges ------------------------------------------------------------------

    def export_activation(self, handle: ActivationHandle) -> PortableActivation:
        t = self._get(handle)
        with self._dev.lock:
            try:
                data = self._dev.download(t.buffer, t.nbytes)
            except Exception as e:
                raise _wgpu_error(e, "reading an activation back") from None
        return PortableActivation(TensorShape(t.shape), t.dtype, data)

    def import_activation(self, portable: PortableActivation) -> ActivationHandle:
        if portable.dtype not in SUPPORTED_DTYPES:
            raise UnsupportedDtype(portable.dtype)
        with self._dev.lock:
            t = self._upload(portable.shape.dims, portable.dtype, portable.bytes)
        return self._register(t)

    def _upload(self, shape: tuple[int, ...], dtype: Dtype, data: Any) -> _Tensor:
        buf = self._dev.buffer(dtype.nbytes(math.prod(shape)), f"{list(shape)} {dtype}")
        try:
            self._dev.upload(buf, data)
        except Exception as e:
            raise _wgpu_error(e, "uploading an activation") from None
        return _Tensor(buf, tuple(shape), dtype)

    # -- compute ------------------------------------------------------------------

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not Vendor.vulkan:
            raise VendorMismatch(plan.vendor, Vendor.vulkan)
        given = [self._get(h) for h in inputs]
        decoded = decode_plan(plan)
        if len(given) != len(decoded["inputs"]):
            raise Backend(f"plan takes {len(decoded['inputs'])} inputs, got {len(given)}")
        with self._dev.lock:
            rec = _Recording(self._dev)
            values: dict[str, _Tensor] = dict(zip(decoded["inputs"], given))
            for node in decoded["nodes"]:
                values[node["id"]] = self._node(rec, node, values)
            try:
                rec.submit()
            except Exception as e:
                raise _wgpu_error(e, "submitting the partition") from None
        return self._register_all([values[t] for t in decoded["outputs"]], "the results of a sub-graph")

    def _node(self, rec: _Recording, node: dict, values: dict[str, _Tensor]) -> _Tensor:
        nid, name = node["id"], node["op"]
        dtype = Dtype(node["dtype"])
        if dtype not in SUPPORTED_DTYPES:
            err = UnsupportedDtype(dtype)
            err.node = nid
            raise err
        op = ops.REGISTRY.get(name)
        if op is None or op.wgsl is None:
            raise Backend(f"op {name!r} has no Vulkan kernel", node=nid)
        try:
            args = op.with_defaults(node["args"])
            if op.wgsl.template == "host":
                host = ops.run(np, name, [], node["args"], dtype)
                return self._upload(host.shape, dtype, PortableActivation.from_array(host, dtype).bytes)
            xs = [values[ref] for ref in node["inputs"]]
            shape = tuple(op.shape([x.shape for x in xs], node["args"]))
            wide = [self._widen(rec, x) for x in xs]
            y = self._compute(rec, op, args, wide, shape)
            return self._narrow(rec, y, dtype)
        except ExecutorError as e:
            e.node = e.node or nid
            raise
        except Exception as e:
            if isinstance(e, MemoryError) or type(e).__name__.startswith("GPU"):
                raise _wgpu_error(e, f"{name} failed", node=nid) from None
            raise Backend(f"{name} failed: {type(e).__name__}: {e}", node=nid) from e

    def _widen(self, rec: _Recording, x: _Tensor) -> _Tensor:
        if x.dtype is Dtype.fp32:
            return x
        y = rec.new(x.shape, Dtype.fp32, "a widened input")
        if x.count:
            rec.dispatch("widen", {"DT": _DT_CODE[x.dtype], "BITS": x.dtype.itemsize_bits},
                         [x.buffer, y.buffer], [x.count], _linear_groups(-(-x.count // _WG)))
        return y

    def _narrow(self, rec: _Recording, x: _Tensor, dtype: Dtype) -> _Tensor:
        if dtype is Dtype.fp32:
            return x
        y = rec.new(x.shape, dtype, "a result")
        words = -(-x.count * dtype.itemsize_bits // 32)
        if words:
            rec.dispatch("narrow", {"DT": _DT_CODE[dtype], "BITS": dtype.itemsize_bits},
                         [x.buffer, y.buffer], [x.count, words], _linear_groups(-(-words // _WG)))
        return y

    def _compute(self, rec: _Recording, op: ops.Op, args: dict, xs: list[_Tensor], shape: tuple[int, ...]) -> _Tensor:
        kernel = op.wgsl
        assert kernel is not None
        y = rec.new(shape, Dtype.fp32, f"the result of {op.name}")
        n = y.count
        if kernel.template == "unary":
            if n:
                rec.dispatch("unary", {"EXPR": kernel.expr}, [xs[0].buffer, y.buffer], [n], _linear_groups(-(-n // _WG)))
        elif kernel.template == "binary":
            a, b = xs if len(xs) == 2 else (xs[0], self._upload((), Dtype.fp32, np.float32(args["value"]).tobytes()))
            params = [n, len(shape), *shape, *_broadcast_strides(a.shape, shape), *_broadcast_strides(b.shape, shape)]
            if n:
                rec.dispatch("binary", {"EXPR": kernel.expr}, [a.buffer, b.buffer, y.buffer], params, _linear_groups(-(-n // _WG)))
        elif kernel.template == "permute":
            x = xs[0]
            axes = args["axes"]
            axes = list(reversed(range(len(x.shape)))) if axes is None else [a % max(len(x.shape), 1) for a in axes]
            strides = _strides(x.shape)
            params = [n, len(shape), *shape, *(strides[a] for a in axes)]
            if n:
                rec.dispatch("permute", {}, [x.buffer, y.buffer], params, _linear_groups(-(-n // _WG)))
        elif kernel.template == "matmul":
            self._matmul(rec, xs[0], xs[1], y)
        elif kernel.template == "source":
            if n:
                words = _user_params(op, kernel, [x.shape for x in xs], args)
                rec.dispatch("source", {"CODE": kernel.expr}, [*(x.buffer for x in xs), y.buffer], [n, *words],
                             _linear_groups(-(-n // _WG)))
        elif kernel.template in ("reduce", "softmax"):
            x = xs[0]
            axis = args["axis"]
            outer, R, inner = _axis_view(x.shape, axis)
            rows = outer * inner
            if kernel.template == "reduce" and R == 0 and rows:
                if kernel.expr in ("max", "argmax"):
                    raise ValueError(f"zero-size array to reduction operation {kernel.expr}, which has no identity")
                if kernel.expr == "mean":
                    return self._upload(shape, Dtype.fp32, np.full(shape, np.nan, np.float32).tobytes())
            if rows and (R or kernel.template == "reduce"):
                subs = {"MODE": _REDUCE_MODE[kernel.expr]} if kernel.template == "reduce" else {}
                rec.dispatch(kernel.template, subs, [x.buffer, y.buffer], [outer, R, inner, rows], _linear_groups(rows))
        elif kernel.template == "norm":
            x = xs[0]
            R = x.shape[-1]
            rows = x.count // R if R else 0
            eps = int(np.array([args["eps"]], np.float32).view(np.uint32)[0])
            extra = [t.buffer for t in xs[1:]]
            dummy = self._dev.buffer(4, "an absent weight")
            w = extra[0] if len(extra) > 0 else dummy
            bias = extra[1] if len(extra) > 1 else dummy
            if rows:
                rec.dispatch("norm", {"MODE": _NORM_MODE[kernel.expr]}, [x.buffer, w, bias, y.buffer],
                             [rows, R, int(len(extra) > 0), int(len(extra) > 1), eps], _linear_groups(rows))
        else:
            raise Backend(f"unknown WGSL template {kernel.template!r} for op {op.name!r}")
        return y

    def _matmul(self, rec: _Recording, a: _Tensor, b: _Tensor, y: _Tensor) -> None:
        a2 = (1,) + a.shape if len(a.shape) == 1 else a.shape
        b2 = b.shape + (1,) if len(b.shape) == 1 else b.shape
        M, K = a2[-2], a2[-1]
        N = b2[-1]
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        count = math.prod(batch)
        if not (M and N and count):
            return
        a_str = [s * M * K for s in _broadcast_strides(a2[:-2], batch)]
        b_str = [s * K * N for s in _broadcast_strides(b2[:-2], batch)]
        params = [M, N, K, len(batch), *batch, *a_str, *b_str]
        rec.dispatch("matmul", {}, [a.buffer, b.buffer, y.buffer], params, (-(-N // 64), -(-M // 64), count))

    def __repr__(self) -> str:
        return f"VulkanExecutor({self._name!r}, {self._dev.bound.display_name!r})"
