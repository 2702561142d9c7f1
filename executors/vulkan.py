"""The Vulkan executor: WGSL compute shaders on a Vulkan adapter, through wgpu.

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

Devices, buffers, transfers and pipelines are
:mod:`hetflow.executors.vulkan_device`'s: one wgpu device per adapter,
shared by every executor instance in the process behind one lock, every
activation one storage buffer holding the tensor's portable bytes, so
export and import are plain copies.

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
from hetflow.executors.vulkan_device import (  # noqa: F401 - the device's names, imported from here by the probe and tests
    MAX_GROUPS,
    STAGING_CHUNK,
    Device,
    Recording,
    Tensor,
    adapters,
    describe,
    enumeration_chatter,
    wgpu_error,
    wgpu_version,
)

__all__ = ["VulkanExecutor", "adapters", "describe", "offered_ops", "SUPPORTED_DTYPES", "STAGING_CHUNK", "wgpu_version", "enumeration_chatter"]

SUPPORTED_DTYPES: tuple[Dtype, ...] = tuple(Dtype)
"""Every dtype: storage is packed 32-bit words and conversions are integer code, so no device feature is needed."""

_DT_CODE = {Dtype.fp32: 0, Dtype.fp16: 1, Dtype.bf16: 2, Dtype.fp8e4m3: 3, Dtype.fp8e5m2: 4, Dtype.int8: 5, Dtype.int4: 6}
_REDUCE_MODE = {"sum": 0, "mean": 1, "max": 2, "argmax": 3}
_NORM_MODE = {"rms": 0, "layer": 1}
_WG = 256


def offered_ops() -> tuple[str, ...]:
    """The registry's ops that carry a Vulkan kernel."""
    return tuple(name for name, op in ops.REGISTRY.items() if op.wgsl is not None)


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
    x = min(count, MAX_GROUPS)
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
        self._dev = Device.get(device or 0)
        self._lock = threading.Lock()
        self._tensors: dict[ActivationHandle, Tensor] = {}
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

    def _register_all(self, tensors: Sequence[Tensor], what: str) -> list[ActivationHandle]:
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

    def _register(self, tensor: Tensor, what: str = "activation") -> ActivationHandle:
        return self._register_all([tensor], what)[0]

    def _get(self, handle: ActivationHandle) -> Tensor:
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
        return self._register(Tensor(buf, shape.dims, dtype))

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
                raise wgpu_error(e, "reading an activation back") from None
        return PortableActivation(TensorShape(t.shape), t.dtype, data)

    def import_activation(self, portable: PortableActivation) -> ActivationHandle:
        if portable.dtype not in SUPPORTED_DTYPES:
            raise UnsupportedDtype(portable.dtype)
        with self._dev.lock:
            t = self._upload(portable.shape.dims, portable.dtype, portable.bytes)
        return self._register(t)

    def _upload(self, shape: tuple[int, ...], dtype: Dtype, data: Any) -> Tensor:
        buf = self._dev.buffer(dtype.nbytes(math.prod(shape)), f"{list(shape)} {dtype}")
        try:
            self._dev.upload(buf, data)
        except Exception as e:
            raise wgpu_error(e, "uploading an activation") from None
        return Tensor(buf, tuple(shape), dtype)

    # -- compute ------------------------------------------------------------------

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not Vendor.vulkan:
            raise VendorMismatch(plan.vendor, Vendor.vulkan)
        given = [self._get(h) for h in inputs]
        decoded = decode_plan(plan)
        if len(given) != len(decoded["inputs"]):
            raise Backend(f"plan takes {len(decoded['inputs'])} inputs, got {len(given)}")
        with self._dev.lock:
            rec = Recording(self._dev)
            values: dict[str, Tensor] = dict(zip(decoded["inputs"], given))
            for node in decoded["nodes"]:
                values[node["id"]] = self._node(rec, node, values)
            try:
                rec.submit()
            except Exception as e:
                raise wgpu_error(e, "submitting the partition") from None
        return self._register_all([values[t] for t in decoded["outputs"]], "the results of a sub-graph")

    def _node(self, rec: Recording, node: dict, values: dict[str, Tensor]) -> Tensor:
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
                raise wgpu_error(e, f"{name} failed", node=nid) from None
            raise Backend(f"{name} failed: {type(e).__name__}: {e}", node=nid) from e

    def _widen(self, rec: Recording, x: Tensor) -> Tensor:
        if x.dtype is Dtype.fp32:
            return x
        y = rec.new(x.shape, Dtype.fp32, "a widened input")
        if x.count:
            rec.dispatch("widen", {"DT": _DT_CODE[x.dtype], "BITS": x.dtype.itemsize_bits},
                         [x.buffer, y.buffer], [x.count], _linear_groups(-(-x.count // _WG)))
        return y

    def _narrow(self, rec: Recording, x: Tensor, dtype: Dtype) -> Tensor:
        if dtype is Dtype.fp32:
            return x
        y = rec.new(x.shape, dtype, "a result")
        words = -(-x.count * dtype.itemsize_bits // 32)
        if words:
            rec.dispatch("narrow", {"DT": _DT_CODE[dtype], "BITS": dtype.itemsize_bits},
                         [x.buffer, y.buffer], [x.count, words], _linear_groups(-(-words // _WG)))
        return y

    def _compute(self, rec: Recording, op: ops.Op, args: dict, xs: list[Tensor], shape: tuple[int, ...]) -> Tensor:
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

    def _matmul(self, rec: Recording, a: Tensor, b: Tensor, y: Tensor) -> None:
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
