"""The Vulkan executor: WGSL compute shaders on a Vulkan adapter, through wgpu.

Compute. A :class:`SubGraphPlan` is the JSON partition every vendor reads
(:func:`hetflow.executors.payload.decode_plan`). Every node follows the op
library's numeric rule (:mod:`hetflow.executors.opdecl`) on the device, in
one of the two 32-bit *words* WGSL computes in: ``f32``, or ``i32`` where
the CPU computes on integers as they are (an ``exact`` op whose inputs are
all integers or bools, an op that only ``moves`` integer values). Each
input is *widened* by ``widen.wgsl`` from its packed storage into a
temporary buffer of the node's word (an fp32 input read as f32, an int32
one as i32, needs none), the op's kernel computes in that word, so i32
``+ - *`` wrap as numpy's do, and the result is *narrowed* by
``narrow.wgsl`` to the stage's dtype, one 32-bit output word per
invocation (so no two invocations write one word): an i32 result is first
wrapped to the integer type numpy's result has (``uint8 + uint8`` is
uint8), then converted. All conversions are integer arithmetic on the
bits and match numpy/ml_dtypes bit for bit: floats round to nearest even,
int8/int4 saturate, the integers take floats toward zero, saturating, and
other integers by wrapping, bool is ``!= 0``.

Dtypes. What the device computes natively: every dtype but ``int64`` and
``fp64`` (WGSL has no 64-bit types), which :data:`SUPPORTED_DTYPES` leaves
out so the planner keeps them elsewhere. Where an op's CPU body would
compute differently from a kernel (an integer ``sum`` that numpy does in
int64, an integer ``matmul``), :func:`refusal` says so and the executor
refuses the node rather than compute another result: the CPU is the
reference.

Which kernel computes an op is the op's own ``wgsl`` field in the registry
(:class:`hetflow.executors.ops.Kernel`): a template file in ``wgsl/``
and the expression or mode it takes. An op without one is not offered
(:func:`offered_ops`) and the planner places it elsewhere. Source ops
(``Kernel("host")``: random draws, files, constants) are made by the
op's numpy body on the host, as on every executor, and uploaded. All of
a partition's dispatches are recorded in one command encoder and
submitted once; WebGPU orders the dispatches and makes each one's
writes visible to the next. A kernel that can find its input invalid
(``gather``'s index out of range) sets a status word, read back after the
submit and raised as the error the CPU would raise.

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
>>> refusal(ops.REGISTRY["add"], [Dtype.int64, Dtype.int64], Dtype.int64)
'int64 has no 32-bit WGSL type'
>>> refusal(ops.REGISTRY["add"], [Dtype.int32, Dtype.uint8], Dtype.int32) is None
True
>>> import numpy as np
>>> vk = VulkanExecutor("vk")                                  # doctest: +SKIP
>>> h = vk.import_activation(PortableActivation.from_array(np.ones(3, np.float32), Dtype.fp32))  # doctest: +SKIP
>>> vk.export_activation(h).to_array().tolist()               # doctest: +SKIP
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import math
import threading
from typing import Any, Mapping, Sequence

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
from hetflow.executors.builtin.elementwise import int_clip_bounds
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

__all__ = ["VulkanExecutor", "adapters", "describe", "offered_ops", "refusal", "shape_refusal", "SUPPORTED_DTYPES", "STAGING_CHUNK",
           "wgpu_version", "enumeration_chatter"]

SUPPORTED_DTYPES: tuple[Dtype, ...] = tuple(d for d in Dtype if d not in (Dtype.int64, Dtype.fp64))
"""Every dtype with a 32-bit word to compute in: storage is packed 32-bit words and conversions are integer
code, so no device feature is needed; WGSL has no 64-bit types, so ``int64`` and ``fp64`` are left out."""

_DT_CODE = {Dtype.fp32: 0, Dtype.fp16: 1, Dtype.bf16: 2, Dtype.fp8e4m3: 3, Dtype.fp8e5m2: 4, Dtype.int8: 5, Dtype.int4: 6,
            Dtype.int16: 7, Dtype.int32: 8, Dtype.uint8: 9, Dtype.bool: 10}
_REDUCE_MODE = {"sum": 0, "mean": 1, "max": 2, "argmax": 3, "min": 4, "argmin": 5}
_WG = 256
_LOOP_LIMIT = 65535
"""The loop iterations one invocation may run on lavapipe: llvmpipe's loop limiter ends every loop of an
invocation after that many, in all, and the kernel goes on with what it has."""
_SPAN = 64 * _WG
"""Values one workgroup of reduce.wgsl reduces in a pass: 64 iterations of a loop an invocation, far below
:data:`_LOOP_LIMIT`."""
_K_SLICE = 16 * 2048
"""The K values one matmul dispatch sums: 2048 steps of 16, each 17 loop iterations (the step and its 16 products)."""

_F32, _I32 = Dtype.fp32, Dtype.int32
"""The two words kernels compute in, named by the dtype whose storage they are."""

_INTEGER_STORAGE = frozenset({Dtype.int8, Dtype.int16, Dtype.int32, Dtype.uint8, Dtype.bool})
"""Dtypes an op that only moves values keeps as integers: numpy holds them as integers (ml_dtypes' int4 is
not one, and converts as a float does, saturating), so they move as i32 words."""

_FP8 = frozenset({Dtype.fp8e4m3, Dtype.fp8e5m2})

_INTEGER_EXPR = {
    "add": "a + b", "sub": "a - b", "mul": "a * b", "maximum": "max(a, b)", "minimum": "min(a, b)",
    "eq": "select(0, 1, a == b)", "lt": "select(0, 1, a < b)", "le": "select(0, 1, a <= b)",
    "gt": "select(0, 1, a > b)", "ge": "select(0, 1, a >= b)",
    "abs": "abs(x)", "neg": "-x", "relu": "max(x, 0)", "clip": "min(max(x, s0), s1)", "cast": "x", "reshape": "x",
}
"""The i32 expressions of the elementwise ops whose kernels compute on integers exactly as numpy does (i32
``+ - *`` and negation wrap, WGSL's ``abs`` of the least i32 is itself, as numpy's is)."""

_INTEGER_OPS = frozenset(_INTEGER_EXPR) | {"where", "transpose", "gather"}
"""Ops computed on i32 words; any other op whose CPU body keeps integers as they are is refused on them
(numpy sums int32 in int64, divides integers toward zero, raises them to integer powers)."""

_EXACT_IN_F32 = frozenset({"add", "sub", "mul", "maximum", "minimum", "abs", "neg", "relu", "clip", "cast", "where",
                           "gather", "transpose", "reshape", "eq", "lt", "le", "gt", "ge", "max", "min", "argmax",
                           "argmin"})
"""Ops whose f32 result is what numpy's float32 gives bit for bit (IEEE arithmetic, selections), so an integer
or bool output truncated from it is the CPU's; others (device exp, log, division, sums in another order) are
refused for integer outputs."""

_AS_INT64 = frozenset({"add", "sub", "mul", "abs", "neg", "relu"})
"""Ops whose CPU body computes on a bool as the int64 0 or 1, so their result does not wrap back to bool."""


def offered_ops() -> tuple[str, ...]:
    """The registry's ops that carry a Vulkan kernel."""
    return tuple(name for name, op in ops.REGISTRY.items() if op.wgsl is not None)


def _data_inputs(op: ops.Op, dtypes: Sequence[Dtype]) -> list[Dtype]:
    """The inputs whose values reach the output: not ``where``'s condition, nor ``gather``'s indices;
    none of attention's, which it widens to float itself."""
    template = op.wgsl.template if op.wgsl is not None else None
    if template == "where":
        return list(dtypes[1:])
    if template == "gather":
        return list(dtypes[:1])
    if template == "attention":
        return []
    return list(dtypes)


def _word(op: ops.Op, dtypes: Sequence[Dtype], dtype: Dtype) -> Dtype:
    """The word a node computes in: i32 where the CPU keeps its integer inputs as they are, else f32."""
    data = _data_inputs(op, dtypes)
    if not data or (op.name == "cast" and dtype in _FP8 and Dtype.bool not in data):
        return _F32  # a cast to fp8 saturates a float32 at the largest finite value first
    if op.moves and all(d in _INTEGER_STORAGE for d in data):
        return _I32
    if op.exact and all(d.is_exact for d in data):
        return _I32
    return _F32


def _result_type(op: ops.Op, dtypes: Sequence[Dtype], args: dict) -> Dtype:
    """The integer type the CPU body's result has (numpy's promotion of the inputs), which an i32 result wraps to.

    int32 stands for int64 too: nothing wraps in i32 that the output would not wrap the same way.
    """
    if op.name in _AS_INT64 and Dtype.bool in dtypes:
        return Dtype.int32
    if len(dtypes) == 1 and args.get("value") is not None and op.wgsl is not None and op.wgsl.template == "binary":
        info = np.iinfo(dtypes[0].numpy) if dtypes[0] is not Dtype.bool else None
        if info is None or not info.min <= args["value"] <= info.max:
            return Dtype.int32
    found = np.result_type(*(d.numpy for d in dtypes))
    for d in (Dtype.bool, Dtype.uint8, Dtype.int8, Dtype.int16, Dtype.int32):
        if d.numpy == found:
            return d
    return Dtype.int32


def refusal(op: ops.Op, inputs: Sequence[Dtype], dtype: Dtype, args: dict | None = None) -> str | None:
    """Why the Vulkan executor does not compute ``op`` from ``inputs`` to ``dtype``; None when it does.

    The dtypes without a 32-bit word, ops without a kernel, and ops whose
    CPU body computes on integers in a way no kernel here reproduces:
    those stay on an executor that computes them as the CPU does.
    """
    for d in (*inputs, dtype):
        if d not in SUPPORTED_DTYPES:
            return f"{d.value} has no 32-bit WGSL type"
    if op.wgsl is None:
        return f"op {op.name!r} has no Vulkan kernel"
    if op.wgsl.template == "host":
        return None
    args = op.with_defaults(args or {})
    data = _data_inputs(op, inputs)
    template = op.wgsl.template
    if _word(op, inputs, dtype) is _I32:
        if op.name not in _INTEGER_OPS:
            return f"op {op.name!r} computes on {', '.join(sorted({d.value for d in data}))} on the CPU only"
        value = args.get("value")
        if template == "binary" and value is not None and (not isinstance(value, int) or abs(value) >= 2**31):
            return f"op {op.name!r} computes {data[0].value} with the value {value!r} in float64 or int64"
        if template == "binary" and value is not None and _leaves_int32(op.name, data[0], value, dtype):
            return (f"op {op.name!r} computes {data[0].value} with the value {value!r} in int64, and its {dtype.value} "
                    f"result can leave the int32 the kernel wraps in")
    elif op.moves and any(d in _INTEGER_STORAGE for d in data) and any(d.kind == "float" for d in data):
        return f"op {op.name!r} mixes integer and float values, which numpy promotes to float64"
    elif dtype.kind in ("int", "bool") and op.name not in _EXACT_IN_F32:
        return f"op {op.name!r} computes in float here, and its {dtype.value} result could round differently"
    if template == "gather" and len(inputs) > 1 and not inputs[1].is_exact:
        return f"gather's indices are {inputs[1].value}, not integers"
    return None


def _leaves_int32(name: str, dtype: Dtype, value: int, out: Dtype) -> bool:
    """Whether ``x name value`` can leave int32 where the CPU body computes it in int64 (a bool, or a value
    outside ``dtype``'s range) and ``out`` keeps what the i32 kernel wraps: an integer output of 32 bits or
    fewer wraps the int64 the same way, but not fp32, nor bool (a multiple of 2^32 is not 0)."""
    if out in (Dtype.int8, Dtype.int16, Dtype.int32, Dtype.uint8):
        return False
    if dtype is not Dtype.bool:
        info = np.iinfo(dtype.numpy)
        if info.min <= value <= info.max:
            return False  # numpy computes in the dtype and wraps there, as the result's wrap does
        low, high = int(info.min), int(info.max)
    else:
        low, high = 0, 1
    f = {"add": lambda x: x + value, "sub": lambda x: x - value, "mul": lambda x: x * value}.get(name)
    # each is monotonic in x, so the dtype's extremes give the extreme results
    return f is not None and any(not -(2**31) <= f(x) < 2**31 for x in (low, high))


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
    """``count`` workgroups as a grid of at most :data:`MAX_GROUPS` a row; none for an empty tensor."""
    x = min(count, MAX_GROUPS) or 1
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


def _unary_expr(op: ops.Op, args: dict, word: Dtype, dtype: Dtype, inputs: Sequence[Dtype]) -> str:
    """The unary kernel's expression: the op's, its integer one on i32 words, a saturating cast to fp8 (without
    ``saturate: 0``, whose out-of-range values the narrowing makes NaN or inf, as ml_dtypes does)."""
    if word is _I32:
        return _INTEGER_EXPR.get(op.name, op.wgsl.expr if op.wgsl is not None else "x")
    if op.name == "cast" and dtype in _FP8 and Dtype.bool not in inputs and args.get("saturate", 1):
        return "clip_f32(x, s0, s1)"
    return op.wgsl.expr if op.wgsl is not None else "x"


def _unary_words(op: ops.Op, args: dict, word: Dtype, dtype: Dtype, source: Dtype) -> list[int]:
    """The unary kernel's s0 and s1: clip's bounds (an absent one the word's extreme), gelu's form (1: erf),
    the largest finite value a cast to fp8 saturates at."""
    def f32(value: float) -> int:
        return int(np.array([value], np.float32).view(np.uint32)[0])

    if op.name == "cast" and dtype in _FP8 and word is _F32:
        return [f32(-ops.QUANT_MAX[dtype]), f32(ops.QUANT_MAX[dtype])]
    if op.name == "gelu":
        return [f32(1.0 if args.get("approximate") == "none" else 0.0), 0]
    if op.name != "clip":
        return [0, 0]
    lo, hi = args.get("min"), args.get("max")
    if word is _I32:
        # bounds within the input's own range, as the CPU body clamps them (uint8 with max -2 is all 0)
        low, high = (0, 1) if source is Dtype.bool else (int(np.iinfo(source.numpy).min), int(np.iinfo(source.numpy).max))
        lo, hi = int_clip_bounds(lo, hi, low, high)
        return [(low if lo is None else lo) & 0xFFFFFFFF, (high if hi is None else hi) & 0xFFFFFFFF]
    return [f32(-np.inf if lo is None else lo), f32(np.inf if hi is None else hi)]


def _reduce_view(shape: Sequence[int], args: dict) -> tuple[list[int] | None, int, int, int] | None:
    """How a reduction sees ``shape``: (a permutation first or None, outer, R, inner), R the reduced values.

    ``axis`` (one axis) or ``axes`` (a list) or neither (every axis);
    axes that are not next to each other are moved last by the permutation.
    None: ``noop_with_empty_axes`` with ``axes: []``, the input as it is.
    """
    rank = len(shape)
    axis, axes = args.get("axis"), args.get("axes")
    if axis is None and axes is not None and len(axes) == 1:
        axis = axes[0]
    if axis is not None:
        return (None, *_axis_view(shape, axis))
    if axes is None or not axes:
        if axes is not None and args.get("noop_with_empty_axes"):
            return None
        return None, 1, math.prod(shape), 1
    found = sorted(a % max(rank, 1) for a in axes)
    reduced = math.prod(shape[a] for a in found)
    if found == list(range(found[0], found[-1] + 1)):
        return None, math.prod(shape[: found[0]]), reduced, math.prod(shape[found[-1] + 1 :])
    kept = [a for a in range(rank) if a not in found]
    return kept + found, math.prod(shape[a] for a in kept), reduced, 1


def _attention_loops(Skv: int, D: int, Dv: int, device_type: str) -> str | None:
    """Why attention over ``Skv`` keys loops past a software device's limit in one invocation; None where it
    does not, or the device is not software."""
    loops = -(-Skv // 64) * (D + 2) + -(-Dv // 64) * (Skv + 1)
    if loops > _LOOP_LIMIT and device_type == "cpu":
        return (f"attention over {Skv} keys of head size {D} (values {Dv}) loops {loops} times in one invocation, "
                f"past the {_LOOP_LIMIT} after which a software Vulkan device (lavapipe) ends a loop")
    return None


def shape_refusal(op: ops.Op, shapes: Sequence[Sequence[int]], args: dict | None, device_type: str) -> str | None:
    """Why a device of ``device_type`` cannot run ``op`` on inputs of ``shapes``, which :func:`refusal` does not
    see: the planner asks it, so that such a stage is kept off the device instead of failing the run."""
    if op.name != "attention" or len(shapes) < 3:
        return None
    try:
        B, Hq, Sq, Skv, D, Dv = _attention_layout(shapes[0], shapes[1], shapes[2], op.with_defaults(args or {}))["dims"]
    except Exception:  # noqa: BLE001 - shapes the op's own rule refuses are said there
        return None
    return _attention_loops(Skv, D, Dv, device_type) if B * Hq * Sq else None


def _attention_layout(q: Sequence[int], k: Sequence[int], v: Sequence[int], args: dict) -> dict:
    """Dims (B, Hq, Sq, Skv, D, Dv), the kv head count, and (batch, head, position) strides of q, k, v and y.

    3-D inputs with ``q_num_heads`` hold the heads packed in the last axis,
    ``[B, S, H * D]``; every other rank up to 4 is ``[B, H, S, D]`` with
    the leading axes it lacks taken as 1, broadcast like numpy's matmul.
    """
    if len(q) == 3 and args.get("q_num_heads") is not None:
        Hq = args["q_num_heads"]
        Hkv = args.get("kv_num_heads") or Hq
        B, Sq, Skv = q[0], q[1], k[1]
        D, Dv = q[2] // Hq, v[2] // Hkv
        return {"dims": (B, Hq, Sq, Skv, D, Dv), "kv_heads": Hkv,
                "q": [Sq * Hq * D if q[0] > 1 else 0, D, Hq * D], "k": [Skv * Hkv * D if k[0] > 1 else 0, D, Hkv * D],
                "v": [Skv * Hkv * Dv if v[0] > 1 else 0, Dv, Hkv * Dv], "y": [Sq * Hq * Dv, Dv, Hq * Dv]}
    if max(len(q), len(k), len(v)) > 4:
        raise Backend(f"the attention kernel takes inputs of rank 2 to 4, got {list(q)}, {list(k)}, {list(v)}")
    q4, k4, v4 = ((1,) * (4 - len(s)) + tuple(s) for s in (q, k, v))
    B = max(q4[0], k4[0], v4[0])
    Hq, Hkv = q4[1], k4[1]
    Sq, Skv, D, Dv = q4[2], k4[2], q4[3], v4[3]

    def strides(s: tuple[int, ...]) -> list[int]:
        return [s[1] * s[2] * s[3] if s[0] > 1 else 0, s[2] * s[3] if s[1] > 1 else 0, s[3]]

    return {"dims": (B, Hq, Sq, Skv, D, Dv), "kv_heads": Hkv if Hkv > 1 else Hq,
            "q": strides(q4), "k": strides(k4), "v": strides(v4), "y": [Hq * Sq * Dv, Sq * Dv, Dv]}


def _mask_strides(mask: Sequence[int], target: tuple[int, int, int, int]) -> list[int]:
    """Strides of a mask broadcast right-aligned onto ``target`` (B, Hq, Sq, Skv); 0 along a broadcast axis."""
    m4 = (1,) * (4 - len(mask)) + tuple(mask)
    return [0 if d == 1 else s for d, s in zip(m4, _strides(m4))]


class VulkanExecutor:
    """WGSL compute on one Vulkan adapter; thread-safe, every dtype."""

    def __init__(self, name: str = "vulkan", device: int | None = None, memory_limit: int | None = None) -> None:
        if memory_limit is not None and memory_limit < 0:
            raise ValueError(f"memory_limit must be >= 0, got {memory_limit}")
        self._name = name
        self._index = device or 0
        self._dev = Device.get(self._index)
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
    def device_index(self) -> int:
        """The adapter's index, as ``hetflow executors`` lists the adapters."""
        return self._index

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

    def _upload(self, shape: tuple[int, ...], dtype: Dtype, data: Any, rec: Recording | None = None) -> Tensor:
        if rec is not None and rec.compile_only:
            return Tensor(None, tuple(shape), dtype)
        buf = self._dev.buffer(dtype.nbytes(math.prod(shape)), f"{list(shape)} {dtype}")
        try:
            self._dev.upload(buf, data)
        except Exception as e:
            raise wgpu_error(e, "uploading an activation") from None
        return Tensor(buf, tuple(shape), dtype)

    # -- compute ------------------------------------------------------------------

    def warm_up(self, partitions: Sequence[tuple[SubGraphPlan, Mapping[str, tuple[tuple[int, ...], Dtype]]]] = ()) -> None:
        """Do, before a run's clock starts, the start-up its first tasks would otherwise pay (0.25 s on lavapipe).

        Two things make a device's first use slow, measured on the decoder
        (``bench/bench_vulkan.py``): the first transfer (the staging buffers
        made and mapped, the queue's first submission: 75-95 ms in the
        first import) and each kernel's first dispatch (lavapipe translates
        the shader when the pipeline is made and compiles its machine code
        through LLVM when it first runs: 150-165 ms in the decoder's layers'
        partition, 13 ms once warm). A round trip through the staging
        buffers does the first. For the second, :meth:`execute`'s own walk
        goes over each of ``partitions`` (its :class:`SubGraphPlan` and the
        ``(shape, dtype)`` of its inputs and nodes, by name) in a
        compile-only :class:`Recording`, which makes exactly the pipelines
        the partition dispatches and runs each new one once on an empty
        problem; nothing of the partition is computed, allocated or
        uploaded. A partition that cannot be walked so (a shape not known
        before the run) is left to compile on its first use, and its errors
        are the run's to report, not the warm-up's. The device keeps the
        log of its compiles (``Device.compiled``).
        """
        try:
            probe = self.import_activation(PortableActivation(TensorShape((1,)), Dtype.fp32, bytes(4)))
            try:
                self.export_activation(probe)
            finally:
                self.release_activation(probe)
        except ExecutorError:  # a device that cannot take 4 bytes fails the run's first transfer, with the stage
            return
        for plan, tensors in partitions:
            try:
                self._walk(plan, [Tensor(None, *tensors[name]) for name in decode_plan(plan)["inputs"]], tensors)
            except Exception:  # noqa: BLE001 - the run meets the same problem in its partition, and reports it there
                continue
        self._dev.wait()  # the device compiles as it runs the empty dispatches: inside the warm-up, not after

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not Vendor.vulkan:
            raise VendorMismatch(plan.vendor, Vendor.vulkan)
        given = [self._get(h) for h in inputs]
        return self._register_all(self._walk(plan, given), "the results of a sub-graph")

    def _walk(self, plan: SubGraphPlan, given: list[Tensor],
              compile_only: Mapping[str, tuple[tuple[int, ...], Dtype]] | None = None) -> list[Tensor]:
        """Record, submit and check ``plan``'s dispatches on ``given``; its outputs. ``compile_only`` (the shapes
        and dtypes of the nodes, by name): compile the pipelines alone (:meth:`warm_up`)."""
        decoded = decode_plan(plan)
        if len(given) != len(decoded["inputs"]):
            raise Backend(f"plan takes {len(decoded['inputs'])} inputs, got {len(given)}")
        with self._dev.lock:
            rec = Recording(self._dev, compile_only=compile_only is not None)
            values: dict[str, Tensor] = dict(zip(decoded["inputs"], given))
            for node in decoded["nodes"]:
                kernel = getattr(ops.REGISTRY.get(node["op"]), "wgsl", None)
                if compile_only is not None and kernel is not None and kernel.template == "host":
                    # a source's numpy body and upload are the run's work; no pipeline is compiled for them
                    values[node["id"]] = Tensor(None, *compile_only[node["id"]])
                    continue
                values[node["id"]] = self._node(rec, node, values)
            try:
                rec.submit()
            except Exception as e:
                raise wgpu_error(e, "submitting the partition") from None
            rec.raise_failed_checks()
        return [values[t] for t in decoded["outputs"]]

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
            in_dtypes = [x.dtype for x in xs]
            why = refusal(op, in_dtypes, dtype, node["args"])
            if why is not None:
                raise Backend(f"the Vulkan executor does not compute this node: {why}")
            shape = tuple(op.shape([x.shape for x in xs], node["args"]))
            word = _word(op, in_dtypes, dtype)
            checks = len(rec.checks)
            y = self._compute(rec, op, args, xs, word, shape, dtype)
            rec.checks[checks:] = [(status, explain, nid) for status, explain, _ in rec.checks[checks:]]
            wrap = _result_type(op, _data_inputs(op, in_dtypes), args) if y.dtype is _I32 else None
            return self._narrow(rec, y, dtype, wrap)
        except ExecutorError as e:
            e.node = e.node or nid
            raise
        except Exception as e:
            if isinstance(e, MemoryError) or type(e).__name__.startswith("GPU"):
                raise wgpu_error(e, f"{name} failed", node=nid) from None
            raise Backend(f"{name} failed: {type(e).__name__}: {e}", node=nid) from e

    def _widen(self, rec: Recording, x: Tensor, word: Dtype = _F32) -> Tensor:
        """``x`` as words of ``word`` (f32, or i32 for an integer dtype)."""
        if x.dtype is word:
            return x
        y = rec.new(x.shape, word, "a widened input")
        if x.count:
            rec.dispatch("widen", {"DT": _DT_CODE[x.dtype], "BITS": x.dtype.itemsize_bits, "WORD": int(word is _I32)},
                         [x.buffer, y.buffer], [x.count], _linear_groups(-(-x.count // _WG)))
        return y

    def _narrow(self, rec: Recording, x: Tensor, dtype: Dtype, wrap: Dtype | None = None) -> Tensor:
        """Words ``x`` (f32 or i32; i32 first wrapped to the integer type ``wrap``) as the packed storage of ``dtype``."""
        if x.dtype is dtype and wrap in (None, Dtype.int32):
            return x
        y = rec.new(x.shape, dtype, "a result")
        words = -(-x.count * dtype.itemsize_bits // 32)
        if words:
            subs = {"DT": _DT_CODE[dtype], "BITS": dtype.itemsize_bits, "WORD": int(x.dtype is _I32),
                    "CT": _DT_CODE[wrap] if wrap is not None else 8}
            rec.dispatch("narrow", subs, [x.buffer, y.buffer], [x.count, words], _linear_groups(-(-words // _WG)))
        return y

    def _scalar(self, rec: Recording, value: Any, word: Dtype) -> Tensor:
        """A binary op's ``value`` argument as a one-element tensor of ``word``."""
        if word is _I32:
            if float(value) != int(value):
                raise Backend(f"the integer kernel takes an integer value, got {value!r}")
            return self._upload((), _I32, np.int32(int(value)).tobytes(), rec)
        return self._upload((), _F32, np.float32(value).tobytes(), rec)

    def _compute(self, rec: Recording, op: ops.Op, args: dict, given: list[Tensor], word: Dtype,
                 shape: tuple[int, ...], dtype: Dtype) -> Tensor:
        kernel = op.wgsl
        assert kernel is not None
        template = kernel.template
        if template == "gather":
            xs = [self._widen(rec, given[0], word), self._widen(rec, given[1], _I32)]
        elif template == "where":
            cond = _I32 if given[0].dtype in _INTEGER_STORAGE else _F32
            xs = [self._widen(rec, given[0], cond), *(self._widen(rec, x, word) for x in given[1:])]
        elif template == "attention":
            mask = given[3:]
            xs = [self._widen(rec, x) for x in given[:3]]
            xs += [self._widen(rec, m, _I32 if m.dtype is Dtype.bool else _F32) for m in mask]
        else:
            xs = [self._widen(rec, x, word) for x in given]
        y = rec.new(shape, word, f"the result of {op.name}")
        n = y.count
        T = "i32" if word is _I32 else "f32"
        groups = _linear_groups(-(-n // _WG))
        expr = _INTEGER_EXPR.get(op.name, kernel.expr) if word is _I32 else kernel.expr
        if template == "unary":
            if n:
                expr = _unary_expr(op, args, word, dtype, [x.dtype for x in given])
                rec.dispatch("unary", {"EXPR": expr, "T": T}, [xs[0].buffer, y.buffer],
                             [n, *_unary_words(op, args, word, dtype, given[0].dtype)], groups)
        elif template == "binary":
            a, b = xs if len(xs) == 2 else (xs[0], self._scalar(rec, args["value"], word))
            params = [n, len(shape), *shape, *_broadcast_strides(a.shape, shape), *_broadcast_strides(b.shape, shape)]
            if n:
                rec.dispatch("binary", {"EXPR": expr, "T": T}, [a.buffer, b.buffer, y.buffer], params, groups)
        elif template == "where":
            c, a, b = xs
            params = [n, len(shape), *shape, *(s for x in (c, a, b) for s in _broadcast_strides(x.shape, shape))]
            if n:
                rec.dispatch("where", {"T": T, "COND_F32": int(c.dtype is _F32)}, [c.buffer, a.buffer, b.buffer, y.buffer],
                             params, groups)
        elif template == "gather":
            self._gather(rec, args, xs[0], xs[1], y, T)
        elif template == "permute":
            x = xs[0]
            axes = args["axes"]
            axes = list(reversed(range(len(x.shape)))) if axes is None else [a % max(len(x.shape), 1) for a in axes]
            strides = _strides(x.shape)
            params = [n, len(shape), *shape, *(strides[a] for a in axes)]
            if n:
                rec.dispatch("permute", {"T": T}, [x.buffer, y.buffer], params, groups)
        elif template == "matmul":
            self._matmul(rec, xs[0], xs[1], y)
        elif template == "attention":
            self._attention(rec, args, xs, y)
        elif template == "source":
            if n:
                words = _user_params(op, kernel, [x.shape for x in xs], args)
                rec.dispatch("source", {"CODE": kernel.expr}, [*(x.buffer for x in xs), y.buffer], [n, *words], groups)
        elif template in ("reduce", "softmax"):
            x = xs[0]
            view = _reduce_view(x.shape, args)
            if view is None:  # noop_with_empty_axes with axes []: the input as it is
                if n:
                    rec.dispatch("unary", {"EXPR": "x", "T": T}, [x.buffer, y.buffer], [n, 0, 0], groups)
                return y
            perm, outer, R, inner = view
            if perm is not None:
                x = self._permute(rec, x, perm, T)
            rows = outer * inner
            if template == "reduce" and R == 0 and rows:
                # the identity of an empty reduction (or the error it is) is what the CPU body gives
                host = ops.compute(np, op.name, [np.zeros(given[0].shape, given[0].dtype.numpy)], args, dtype)
                return self._upload(shape, _F32, np.asarray(host, np.float32).tobytes(), rec)
            if not (rows and R):
                return y
            if template == "reduce":
                mode = _REDUCE_MODE[kernel.expr]
                y = self._reduce(rec, x, outer, R, inner, mode, bool(args.get("select_last_index")), out=y)
                return Tensor(y.buffer, y.shape, _I32) if mode in (3, 5) else y
            top = self._reduce(rec, x, outer, R, inner, _REDUCE_MODE["max"])
            total = self._reduce(rec, x, outer, R, inner, _REDUCE_MODE["sum"], pre=(1, top))
            rec.dispatch("softmax", {}, [x.buffer, top.buffer, total.buffer, y.buffer], [n, R, inner], groups)
        elif template == "norm":
            x = xs[0]
            ax = args.get("axis", -1) % max(len(x.shape), 1)
            R = math.prod(x.shape[ax:])
            rows = x.count // R if R else 0
            eps = int(np.array([args["eps"]], np.float32).view(np.uint32)[0])
            extra = [self._broadcast_to(rec, w, x.shape[ax:]) for w in xs[1:]]
            dummy = self._dev.buffer(4, "an absent weight")
            w = extra[0].buffer if len(extra) > 0 else dummy
            bias = extra[1].buffer if len(extra) > 1 else dummy
            if rows:
                mean = rec.new((rows,), _F32, "the means of a normalization")  # zeros: rms centres nothing
                if kernel.expr == "layer":
                    mean = self._reduce(rec, x, rows, R, 1, _REDUCE_MODE["mean"])
                var = self._reduce(rec, x, rows, R, 1, _REDUCE_MODE["mean"], pre=(2, mean))
                rec.dispatch("norm", {}, [x.buffer, w, bias, mean.buffer, var.buffer, y.buffer],
                             [n, R, int(len(extra) > 0), int(len(extra) > 1), eps], groups)
        else:
            raise Backend(f"unknown WGSL template {kernel.template!r} for op {op.name!r}")
        return y

    def _reduce(self, rec: Recording, x: Tensor, outer: int, R: int, inner: int, mode: int, last: bool = False,
                pre: tuple[int, Tensor] | None = None, out: Tensor | None = None) -> Tensor:
        """The ``outer * inner`` results (f32 words; an index's bits for argmax and argmin) of reducing ``x``,
        viewed as [outer, R, inner], over R: reduce.wgsl's passes, each cutting the rows into chunks of
        :data:`_SPAN` values and reducing them to one partial result per chunk, until one chunk is left.
        ``pre``: (1, m) sums exp(x - m), (2, m) takes the mean of (x - m)^2, m one value per row."""
        rows = outer * inner
        code, m = pre if pre is not None else (0, None)
        subs = {"MODE": mode, "LAST": int(last), "PRE": code}
        values, index, first, count = x, x, 1, R
        while True:
            chunks = -(-R // _SPAN)
            final = chunks == 1
            y = out if final and out is not None else rec.new((rows, chunks), _F32, "a reduction's partial results")
            yi = rec.new((rows, chunks) if not final else (1,), _I32, "a reduction's partial indices")
            rec.dispatch("reduce", subs,
                         [values.buffer, index.buffer, (m if m is not None else values).buffer, y.buffer, yi.buffer],
                         [outer, R, inner, rows, chunks, _SPAN, count, first], _linear_groups(rows * chunks))
            if final:
                return y
            values, index, first, outer, R, inner = y, yi, 0, rows, chunks, 1

    def _permute(self, rec: Recording, x: Tensor, axes: Sequence[int], T: str) -> Tensor:
        """``x`` with its axes in the order ``axes``, as a new tensor."""
        shape = tuple(x.shape[a] for a in axes)
        y = rec.new(shape, x.dtype, "a transposed input")
        strides = _strides(x.shape)
        if y.count:
            rec.dispatch("permute", {"T": T}, [x.buffer, y.buffer], [y.count, len(shape), *shape, *(strides[a] for a in axes)],
                         _linear_groups(-(-y.count // _WG)))
        return y

    def _broadcast_to(self, rec: Recording, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        """``x`` (f32 words) broadcast to ``shape``, numpy's rule: a weight over several normalized axes."""
        if x.shape == shape:
            return x
        y = rec.new(shape, x.dtype, "a broadcast weight")
        n = y.count
        if n:
            # the where kernel with an always-true condition is a broadcasting copy
            true = self._upload((), _I32, np.int32(1).tobytes(), rec)
            params = [n, len(shape), *shape, *([0] * len(shape)), *_broadcast_strides(x.shape, shape),
                      *_broadcast_strides(x.shape, shape)]
            rec.dispatch("where", {"T": "f32", "COND_F32": 0}, [true.buffer, x.buffer, x.buffer, y.buffer], params,
                         _linear_groups(-(-n // _WG)))
        return y

    def _gather(self, rec: Recording, args: dict, x: Tensor, idx: Tensor, y: Tensor, T: str) -> None:
        ax = args.get("axis", 0) % max(len(x.shape), 1)
        outer, D, inner = _axis_view(x.shape, ax) if x.shape else (1, 1, 1)
        n = y.count
        if not n:
            return
        status = self._dev.buffer(4, "the status of gather")
        rec.dispatch("gather", {"T": T}, [x.buffer, idx.buffer, y.buffer, status], [n, outer, D, inner, idx.count],
                     _linear_groups(-(-n // _WG)))
        axis = args.get("axis", 0)

        def explain(word: int) -> str:
            found = np.frombuffer(self._dev.download(idx.buffer, idx.nbytes), np.int32)
            low, high = int(found.min()), int(found.max())
            bad = low if low < -D else high
            return (f"gather: index {bad} is out of range for axis {axis} of length {D} "
                    f"(indices lie in [-{D}, {D}))")

        rec.check(status, explain)

    def _attention(self, rec: Recording, args: dict, xs: list[Tensor], y: Tensor) -> None:
        q, k, v = xs[:3]
        mask = xs[3] if len(xs) > 3 else None
        lay = _attention_layout(q.shape, k.shape, v.shape, args)
        B, Hq, Sq, Skv, D, Dv = lay["dims"]
        rows = B * Hq * Sq
        if not rows:
            return
        if mask is not None:
            mstr, mlen = _mask_strides(mask.shape, (B, Hq, Sq, Skv)), (mask.shape[-1] if mask.shape else 1)
            mode = 1 if mask.dtype is _I32 else 2
        else:
            mstr, mlen, mode = [0, 0, 0, 0], Skv, 0
        scale = args.get("scale")
        scale = 1.0 / math.sqrt(max(D, 1)) if scale is None else scale
        scale_bits = int(np.array([scale], np.float32).view(np.uint32)[0])
        causal = bool(args.get("causal"))
        offset = int(args.get("past_length") or 0)
        # attention.wgsl loops over every key in one invocation: past lavapipe's loop limit its sums would end
        # early and its results be wrong without a word, so a software device refuses it here
        too_long = _attention_loops(Skv, D, Dv, self._dev.bound.device_type)
        if too_long:
            raise ExecutorError(f"{too_long}; place the stage on another executor")
        scratch = rec.new((rows, max(Skv, 1)), _F32, "attention scores")
        dummy = self._dev.buffer(4, "an absent mask")
        params = [B, Hq, Sq, Skv, D, Dv, Hq // lay["kv_heads"], *lay["q"], *lay["k"], *lay["v"], *lay["y"],
                  *mstr, mlen, int(causal), offset & 0xFFFFFFFF, scale_bits]
        rec.dispatch("attention", {"MASK": mode},
                     [q.buffer, k.buffer, v.buffer, mask.buffer if mask is not None else dummy, scratch.buffer, y.buffer],
                     params, _linear_groups(rows))

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
        # batches beyond a dispatch's MAX_GROUPS in z, and K in slices of _K_SLICE (each slice adding its
        # products to C), so that no invocation loops past lavapipe's 65535 iterations
        for first in range(0, count, MAX_GROUPS):
            z = min(MAX_GROUPS, count - first)
            for k0 in range(0, K, _K_SLICE):
                params = [M, N, K, first, k0, min(K, k0 + _K_SLICE), len(batch), *batch, *a_str, *b_str]
                rec.dispatch("matmul", {}, [a.buffer, b.buffer, y.buffer], params, (-(-N // 64), -(-M // 64), z))

    def __repr__(self) -> str:
        return f"VulkanExecutor({self._name!r}, {self._dev.bound.display_name!r})"
