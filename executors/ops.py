"""The op library: one registry, written once against an array module.

Every op is an :class:`Op` entry in :data:`REGISTRY`: its name, how many
inputs it takes, the arguments it accepts, the output dtypes it supports,
a shape rule the planner uses before anything runs, and a body that takes
the array namespace ``xp`` explicitly (numpy on the host, cupy on a GPU),
so every executor shares one implementation.

Numeric rule, the same for every op and executor: inputs are widened to
float32, the body computes in float32, and the result is converted to the
stage's output dtype. Float outputs round to nearest even (ml_dtypes'
conversion); int8 and int4 outputs round to nearest even and saturate to
the type's range, NaN becoming 0. Random ops draw float32 values from
numpy's ``default_rng(seed)`` on the host, so a seed gives the same tensor
on every executor.

Examples
--------
>>> import numpy as np
>>> op = REGISTRY["matmul"]
>>> op.shape([(2, 3), (3, 5)], {})
(2, 5)
>>> run(np, "add", [np.ones(2, np.float32), np.ones(2, np.float32)], {}, Dtype.fp32).tolist()
[2.0, 2.0]
>>> run(np, "cast", [np.array([300.0, -1.5], np.float32)], {}, Dtype.int8).tolist()
[127, -2]
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hetflow.executors.base import Dtype

__all__ = ["Op", "Arg", "Kernel", "ShapeError", "BUILTIN", "QUANT_MAX", "QUANT_DTYPES", "compute", "REGISTRY", "FLOAT_DTYPES", "ALL_DTYPES", "run", "to_dtype", "check_args", "is_deterministic"]

Shape = tuple[int, ...]

FLOAT_DTYPES = frozenset({Dtype.fp32, Dtype.fp16, Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2})
ALL_DTYPES = frozenset(Dtype)


class ShapeError(ValueError):
    """The inputs' shapes or the arguments do not fit the op."""


@dataclass(frozen=True)
class Arg:
    """One argument an op accepts.

    ``kind`` is one of ``shape`` (list of non-negative ints), ``int``,
    ``number``, ``axis`` (an int or null), ``axes`` (list of ints or null),
    ``bool``, ``path`` (a file, relative to the manifest's folder), ``dtype``
    (a dtype name), ``int?`` and ``number?`` (the kind or null), ``seed``
    (an int, or null for fresh entropy, which makes the op nondeterministic).
    """

    kind: str
    required: bool = False
    default: Any = None
    doc: str = ""


@dataclass(frozen=True)
class Kernel:
    """How the Vulkan executor computes an op: a WGSL template and what fills it.

    ``template`` names a file in ``executors/wgsl/`` (``host`` for source
    ops, whose values are made on the host, as on every executor, and
    uploaded); ``expr`` is the WGSL expression or mode the template takes.
    """

    template: str
    expr: str = ""
    params: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    """For a user's WGSL kernel (``template`` ``source``, ``expr`` its source): the words after P[0]."""


@dataclass(frozen=True)
class Op:
    name: str
    arity: tuple[int, int]
    dtypes: frozenset[Dtype]
    body: Callable[..., Any] = field(repr=False)
    shape_rule: Callable[[list[Shape | None], dict], Shape | None] = field(repr=False)
    args: Mapping[str, Arg] = field(default_factory=dict)
    outputs: int = 1
    doc: str = ""
    wgsl: "Kernel | None" = None
    dtype_aware: bool = False
    kernels: Mapping[str, Callable[..., Any]] = field(default_factory=dict, repr=False)
    """Per-vendor replacements of ``body`` (vendor name -> callable), for the array-module vendors."""
    invoke: Callable[..., Any] | None = field(default=None, repr=False)
    """How a user's op is called: ``invoke(xp, vendor, inputs, args, dtype)``; None for built-in ops."""
    cost_rule: Callable[..., Any] | None = field(default=None, repr=False)
    """``cost_rule(input_shapes, args) -> (flops, bytes)``, or None for the cost model's own rule."""
    source: str = "built-in"
    """Where the op comes from: ``built-in``, or the plugin that defines it."""
    defined_at: str = ""
    """``FILE:LINE`` of a user's op."""
    identity: str | None = None
    """Digest of the code the op runs (plugin file or distribution, plus kernel sources); None for built-ins."""
    checks: Callable[[int, Mapping[str, Any]], list[tuple[str | None, str]]] | None = field(default=None, repr=False)
    """Problems with the number of inputs together with the args (the binary ops' scalar ``value``)."""

    def runs_on(self, vendor: str) -> bool:
        """Whether the op has an implementation for ``vendor`` (a vendor name).

        The array-module vendors (cpu, cuda, rocm) run the generic body;
        Vulkan needs a WGSL kernel.
        """
        if vendor == "vulkan":
            return self.wgsl is not None
        return True

    def shape(self, inputs: Sequence[Shape | None], args: Mapping[str, Any]) -> Shape | None:
        """Output shape, or None where an input's shape is not known before the run."""
        full = self.with_defaults(args)
        if any(s is None for s in inputs) and self.arity[1] > 0:
            return None
        return self.shape_rule([tuple(s) for s in inputs], full)  # type: ignore[arg-type]

    def with_defaults(self, args: Mapping[str, Any]) -> dict:
        full = {k: a.default for k, a in self.args.items()}
        full.update(args)
        return full


def _check_value(kind: str, value: Any) -> str | None:
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind == "shape":
        if not isinstance(value, list) or not all(is_int(v) and v >= 0 for v in value):
            return "a list of non-negative integers"
        if len(value) > 8:
            return "a shape of rank at most 8"
    elif kind == "seed" and value is not None and not is_int(value):
        return "an integer seed, or null for fresh entropy on every run"
    elif kind == "int" and not is_int(value):
        return "an integer"
    elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return "a number"
    elif kind == "axis" and value is not None and not is_int(value):
        return "an integer axis or null"
    elif kind == "axes" and value is not None and not (
        isinstance(value, list) and all(is_int(v) for v in value)
    ):
        return "a list of integer axes or null"
    elif kind == "bool" and not isinstance(value, bool):
        return "true or false"
    elif kind == "path" and not (isinstance(value, str) and value):
        return "a file path"
    elif kind == "int?" and value is not None and not is_int(value):
        return "an integer or null"
    elif kind == "number?" and value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return "a number or null"
    elif kind == "dtype" and not (isinstance(value, str) and value in {d.value for d in Dtype}):
        return "a dtype name (" + ", ".join(d.value for d in Dtype) + ")"
    elif kind == "str" and not isinstance(value, str):
        return "a string"
    elif kind == "str?" and value is not None and not isinstance(value, str):
        return "a string or null"
    return None


def is_deterministic(op: Op, args: Mapping[str, Any]) -> bool:
    """Whether the op gives the same output for the same inputs: false when a seed is null."""
    return not any(spec.kind == "seed" and args.get(key) is None for key, spec in op.args.items())


def check_args(op: Op, args: Mapping[str, Any], n_inputs: int | None = None) -> list[tuple[str | None, str]]:
    """Problems with ``args`` for ``op``: (argument name or None, message) pairs.

    With ``n_inputs``, also the rules that tie the args to the number of
    inputs (a binary op takes a second input or a scalar ``value``).

    >>> check_args(REGISTRY["mul"], {"value": 2.0}, 1)
    []
    >>> check_args(REGISTRY["mul"], {"value": 2.0}, 2)
    [('value', "op 'mul' takes a second input or args.value, not both")]
    """
    problems: list[tuple[str | None, str]] = []
    for key, value in args.items():
        spec = op.args.get(key)
        if spec is None:
            accepted = ", ".join(op.args) or "no arguments"
            problems.append((key, f"op {op.name!r} has no argument {key!r} (accepted: {accepted})"))
            continue
        expected = _check_value(spec.kind, value)
        if expected:
            problems.append((key, f"argument {key!r} of op {op.name!r} must be {expected}, got {value!r}"))
    for key, spec in op.args.items():
        if spec.required and key not in args:
            problems.append((None, f"op {op.name!r} needs argument {key!r}"))
    if n_inputs is not None and op.checks is not None and not problems:
        problems.extend(op.checks(n_inputs, args))
    return problems


def to_dtype(xp: Any, array: Any, dtype: Dtype) -> Any:
    """Convert a computed array to the stage's output dtype (the module's numeric rule)."""
    if dtype.is_float:
        return array.astype(dtype.numpy)
    lo, hi = (-128, 127) if dtype is Dtype.int8 else (-8, 7)
    finite = xp.nan_to_num(array.astype(np.float32), nan=0.0, posinf=hi, neginf=lo)
    return xp.clip(xp.rint(finite), lo, hi).astype(np.int8).astype(dtype.numpy)


def _widen(xp: Any, array: Any) -> Any:
    return array if array.dtype == np.float32 else array.astype(np.float32)


def run(xp: Any, name: str, inputs: Sequence[Any], args: Mapping[str, Any], dtype: Dtype, vendor: Any = None) -> Any:
    """Run op ``name`` on arrays of namespace ``xp`` and return its output at ``dtype``."""
    return to_dtype(xp, compute(xp, name, [_widen(xp, x) for x in inputs], args, dtype, vendor), dtype)


def compute(xp: Any, name: str, inputs: Sequence[Any], args: Mapping[str, Any], dtype: Dtype, vendor: Any = None) -> Any:
    """Op ``name``'s float32 result on float32 ``inputs``, before conversion to ``dtype``.

    Executors that carry a dtype in another form on their device (the CUDA
    executor's fp8 bytes) widen and narrow around this themselves.
    ``vendor`` (a :class:`Vendor` or its name) picks the op's kernel for
    that vendor where it has one.
    """
    op = REGISTRY[name]
    full = op.with_defaults(args)
    vendor = getattr(vendor, "value", vendor)
    if op.invoke is not None:
        out = op.invoke(xp, vendor, list(inputs), full, dtype)
    else:
        body = op.kernels.get(vendor, op.body) if op.kernels else op.body
        out = body(xp, list(inputs), full, dtype) if op.dtype_aware else body(xp, list(inputs), full)
    return xp.asarray(out, dtype=np.float32)


# -- shape rules ----------------------------------------------------------------


def _normalize_axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _same(inputs: list[Shape], args: dict) -> Shape:
    return inputs[0]


def _from_shape_arg(inputs: list[Shape], args: dict) -> Shape:
    return tuple(args["shape"])


def _broadcast(inputs: list[Shape], args: dict) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*inputs))
    except ValueError:
        raise ShapeError(
            "shapes " + " and ".join(str(list(s)) for s in inputs) + " do not broadcast"
        ) from None


def _matmul_shape(inputs: list[Shape], args: dict) -> Shape:
    a, b = inputs
    if not a or not b:
        raise ShapeError("matmul needs inputs of rank 1 or more")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {list(a)} @ {list(b)}")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions do not broadcast: {list(a)} @ {list(b)}") from None
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _reduce_shape(inputs: list[Shape], args: dict) -> Shape:
    shape, axis, keep = inputs[0], args["axis"], args["keepdims"]
    if axis is None:
        return tuple(1 for _ in shape) if keep else ()
    ax = _normalize_axis(axis, len(shape), "reduction")
    if keep:
        return shape[:ax] + (1,) + shape[ax + 1 :]
    return shape[:ax] + shape[ax + 1 :]


def _softmax_shape(inputs: list[Shape], args: dict) -> Shape:
    _normalize_axis(args["axis"], len(inputs[0]), "softmax")
    return inputs[0]


def _transpose_shape(inputs: list[Shape], args: dict) -> Shape:
    shape, axes = inputs[0], args["axes"]
    if axes is None:
        return tuple(reversed(shape))
    if sorted(a % max(len(shape), 1) for a in axes) != list(range(len(shape))):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {len(shape)} axes")
    return tuple(shape[a] for a in axes)


def _reshape_shape(inputs: list[Shape], args: dict) -> Shape:
    new = tuple(args["shape"])
    if math.prod(new) != math.prod(inputs[0]):
        raise ShapeError(f"reshape: cannot reshape {list(inputs[0])} into {list(new)}")
    return new


def _arange_shape(inputs: list[Shape], args: dict) -> Shape:
    if args["step"] == 0:
        raise ShapeError("arange: step must not be 0")
    return (max(0, math.ceil((args["stop"] - args["start"]) / args["step"])),)


LOAD_FORMATS = (".npy", ".npz", ".safetensors")
"""The file types ``load`` reads, by suffix."""

_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32",
                       "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16",
                       "U32": "uint32", "U64": "uint64"}


def read_array(path: str, key: str | None = None, *, header: bool = False) -> Any:
    """The array ``load`` reads from ``path`` (and ``key`` in an archive).

    With ``header``, only what the file says about the array, as a
    ``(shape, numpy dtype)`` pair, without reading its values. Raises
    :class:`ValueError` with a message that says what is wrong and what
    the file holds.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> np.savez(os.path.join(folder, "d.npz"), x=np.ones((2, 3), np.float32), y=np.arange(2))
    >>> read_array(os.path.join(folder, "d.npz"), "x", header=True)
    ((2, 3), dtype('float32'))
    >>> read_array(os.path.join(folder, "d.npz"), "z")
    Traceback (most recent call last):
    ...
    ValueError: d.npz has no array 'z' (it holds: x, y)
    """
    name = os.path.basename(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in LOAD_FORMATS:
        raise ValueError(f"{name}: load reads {', '.join(LOAD_FORMATS)} files, not {suffix or 'a file without a suffix'}")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    try:
        if suffix == ".npy":
            if key is not None:
                raise ValueError(f"{name} is a .npy file, which holds one array: leave out 'key'")
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            _numeric(name, key, array.dtype)
            return (tuple(array.shape), array.dtype) if header else np.asarray(array)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                key = _archive_key(name, key, list(archive.files))
                if not header:
                    array = archive[key]
                    _numeric(name, key, array.dtype)
                    return array
                with archive.zip.open(key + ".npy") as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                    else:
                        array = archive[key]
                        shape, dtype = array.shape, array.dtype
                    _numeric(name, key, dtype)
                    # the member's CRC is checked only once it is read to its end: a damaged archive fails here
                    while member.read(1 << 20):
                        pass
                return tuple(shape), dtype
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(path, framework="numpy") as f:
                key = _archive_key(name, key, list(f.keys()))
                if not header:
                    return f.get_tensor(key)
                part = f.get_slice(key)
                kind = part.get_dtype()
                if kind not in _SAFETENSORS_DTYPES:
                    raise ValueError(f"{name}: array {key!r} is {kind}, which numpy cannot read "
                                     f"(load reads {', '.join(_SAFETENSORS_DTYPES)})")
                return tuple(part.get_shape()), np.dtype(_SAFETENSORS_DTYPES[kind])
        except SafetensorError as e:
            raise ValueError(f"{name} is not a readable safetensors file: {e}") from None
    except ValueError as e:
        if str(e).startswith(name) or str(e).startswith(path):
            raise
        raise ValueError(f"{name} does not parse as {suffix}: {e}") from None
    except Exception as e:  # noqa: BLE001 - numpy and zipfile fail on damaged bytes in many ways (BadZipFile, zlib, tokenize)
        raise ValueError(f"{name} does not parse as {suffix}: {type(e).__name__}: {e}") from None


def _numeric(name: str, key: str | None, dtype: np.dtype) -> None:
    """Refuse arrays of strings, objects, records or dates: ``load`` reads numbers."""
    if dtype.kind not in "biufc":
        what = f"{name}: array {key!r}" if key else name
        raise ValueError(f"{what} holds {dtype} values; load reads numbers (bool, integer, float or complex)")


def _archive_key(name: str, key: str | None, keys: list[str]) -> str:
    if key is None:
        if len(keys) == 1:
            return keys[0]
        raise ValueError(f"{name} holds {len(keys)} arrays: say which with 'key' (one of: {', '.join(keys) or 'none'})")
    if key not in keys:
        raise ValueError(f"{name} has no array {key!r} (it holds: {', '.join(keys) or 'nothing'})")
    return key


def lossy_load(array: Any, dtype: Dtype) -> str | None:
    """Why converting ``array`` to ``dtype`` would lose values, or None.

    Complex values lose their imaginary part; finite floats beyond the
    dtype's range become infinities; integers (labels, indices) must come
    back unchanged. Float64 rounding within range is the numeric rule, not
    a loss.

    >>> lossy_load(np.array([1, 2, 3]), Dtype.fp32) is None
    True
    >>> lossy_load(np.array([2**40 + 1]), Dtype.fp32)
    'int64 values such as 1099511627777 do not survive conversion to fp32'
    """
    array = np.asarray(array)
    if array.dtype.kind == "c":
        return f"{array.dtype} values have an imaginary part, which {dtype.value} drops"
    if array.size == 0 or array.dtype.kind == "b":
        return None
    if array.dtype.kind == "f":
        finite = array[np.isfinite(array)]
        if finite.size == 0:
            return None
        top = float(np.max(np.abs(finite)))
        limit = float(QUANT_MAX.get(dtype, 0.0)) or float(ml_finfo_max(dtype))
        if top > limit:
            return f"{array.dtype} values up to {top:g} are beyond the range of {dtype.value} (largest {limit:g})"
        return None
    if array.dtype.kind in "iu":
        back = to_dtype(np, array.astype(np.float64).astype(np.float32), dtype).astype(np.float64)
        bad = np.flatnonzero(back.reshape(-1) != array.reshape(-1).astype(np.float64))
        if bad.size:
            return f"{array.dtype} values such as {array.reshape(-1)[bad[0]]} do not survive conversion to {dtype.value}"
        if np.any(np.abs(array.astype(np.float64)) > 2**24):
            worst = array.reshape(-1)[int(np.argmax(np.abs(array.reshape(-1).astype(np.float64))))]
            return f"{array.dtype} values such as {worst} do not survive conversion to {dtype.value}"
    return None


def ml_finfo_max(dtype: Dtype) -> float:
    """The largest finite value of a float dtype (ml_dtypes' finfo for the narrow ones)."""
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype.numpy).max)


def _load_shape(inputs: list[Shape], args: dict) -> Shape | None:
    try:
        return read_array(args["path"], args.get("key"), header=True)[0]
    except ValueError:
        return None


# -- bodies ---------------------------------------------------------------------


def _normal(xp: Any, inputs: list, args: dict) -> Any:
    rng = np.random.default_rng(args["seed"])
    host = rng.standard_normal(tuple(args["shape"]), dtype=np.float32)
    return xp.asarray(host * np.float32(args["std"]) + np.float32(args["mean"]))


def _uniform(xp: Any, inputs: list, args: dict) -> Any:
    rng = np.random.default_rng(args["seed"])
    host = rng.random(tuple(args["shape"]), dtype=np.float32)
    low, high = np.float32(args["low"]), np.float32(args["high"])
    return xp.asarray(host * (high - low) + low)


def _gelu(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    c = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + xp.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def _softmax(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    e = xp.exp(x - xp.max(x, axis=args["axis"], keepdims=True))
    return e / xp.sum(e, axis=args["axis"], keepdims=True)


def _norm_shape(inputs: list[Shape], args: dict) -> Shape:
    x = inputs[0]
    if not x:
        raise ShapeError("normalization needs an input of rank 1 or more")
    for name, s in zip(("weight", "bias"), inputs[1:]):
        if tuple(s) != x[-1:]:
            raise ShapeError(f"normalization: {name} of shape {list(s)} must be [{x[-1]}], the last axis of {list(x)}")
    return x


def _rmsnorm(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    y = x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + np.float32(args["eps"]))
    return y * inputs[1] if len(inputs) > 1 else y


def _layernorm(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    centered = x - xp.mean(x, axis=-1, keepdims=True)
    y = centered / xp.sqrt(xp.mean(centered * centered, axis=-1, keepdims=True) + np.float32(args["eps"]))
    if len(inputs) > 1:
        y = y * inputs[1]
    return y + inputs[2] if len(inputs) > 2 else y


def _load(xp: Any, inputs: list, args: dict) -> Any:
    host = np.asarray(read_array(args["path"], args.get("key")))
    if host.dtype.kind == "c":
        host = host.real
    with np.errstate(over="ignore"):  # validate refused lossy values unless the manifest asked to convert anyway
        return xp.asarray(host.astype(np.float32))


def _with_value(f: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    """A binary body that takes its second operand from ``args.value`` when there is one input."""

    def body(xp: Any, inputs: list, args: dict) -> Any:
        other = inputs[1] if len(inputs) > 1 else np.float32(args["value"])
        return f(inputs[0], other)

    return body


def _scalar_checks(n_inputs: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    if n_inputs == 2 and args.get("value") is not None:
        return [("value", "op {op} takes a second input or args.value, not both")]
    if n_inputs == 1 and args.get("value") is None:
        return [(None, "op {op} takes a second input or args.value (a number), and has neither")]
    return []


def _scalar_shape(inputs: list[Shape], args: dict) -> Shape:
    return _broadcast(inputs, args) if len(inputs) > 1 else inputs[0]


_VALUE = Arg("number?", default=None, doc="the second operand as a number, in place of a second input")


def _binary(name: str, f: Callable[[Any, Any], Any], dtypes: frozenset[Dtype], doc: str) -> Op:
    def checks(n: int, args: Mapping[str, Any]) -> list[tuple[str | None, str]]:
        return [(k, m.replace("{op}", repr(name))) for k, m in _scalar_checks(n, args)]

    return Op(name, (1, 2), dtypes, _with_value(f), _scalar_shape, {"value": _VALUE}, doc=doc, checks=checks)


def _where_shape(inputs: list[Shape], args: dict) -> Shape:
    return _broadcast(inputs, args)


def _input(xp: Any, inputs: list, args: dict) -> Any:
    # The engine puts the array handed to the run into ``data`` (its portable bytes, base64) when the run starts.
    import base64

    from hetflow.executors.base import PortableActivation, TensorShape

    if args.get("data") is None:
        raise ValueError("no array was handed in for this input stage (hetflow.run(..., inputs={STAGE: array}))")
    portable = PortableActivation(TensorShape(tuple(args["shape"])), Dtype(args["dtype"]), base64.b64decode(args["data"]))
    return xp.asarray(portable.to_array().astype(np.float32))


_SHAPE = Arg("shape", required=True, doc="output shape")
_SEED = Arg("seed", required=True, doc="seed of numpy's default_rng; null draws fresh entropy (nondeterministic)")

_ENTRIES = [
    Op("random.normal", (0, 0), FLOAT_DTYPES, _normal, _from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "mean": Arg("number", default=0.0), "std": Arg("number", default=1.0)},
       doc="normally distributed values"),
    Op("random.uniform", (0, 0), FLOAT_DTYPES, _uniform, _from_shape_arg,
       {"shape": _SHAPE, "seed": _SEED, "low": Arg("number", default=0.0), "high": Arg("number", default=1.0)},
       doc="uniformly distributed values in [low, high)"),
    Op("zeros", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.zeros(tuple(a["shape"]), np.float32),
       _from_shape_arg, {"shape": _SHAPE}, doc="a tensor of zeros"),
    Op("ones", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.ones(tuple(a["shape"]), np.float32),
       _from_shape_arg, {"shape": _SHAPE}, doc="a tensor of ones"),
    Op("arange", (0, 0), ALL_DTYPES,
       lambda xp, i, a: xp.arange(a["start"], a["stop"], a["step"], dtype=np.float64).astype(np.float32),
       _arange_shape,
       {"start": Arg("number", default=0), "stop": Arg("number", required=True), "step": Arg("number", default=1)},
       doc="evenly spaced values in [start, stop)"),
    Op("full", (0, 0), ALL_DTYPES, lambda xp, i, a: xp.full(tuple(a["shape"]), np.float32(a["value"]), np.float32),
       _from_shape_arg, {"shape": _SHAPE, "value": Arg("number", required=True, doc="the value of every element")},
       doc="a tensor of one value"),
    _binary("add", lambda a, b: a + b, ALL_DTYPES, "elementwise sum, broadcasting; or x + args.value"),
    _binary("sub", lambda a, b: a - b, ALL_DTYPES, "elementwise difference; or x - args.value"),
    _binary("mul", lambda a, b: a * b, ALL_DTYPES, "elementwise product; or x * args.value"),
    _binary("div", lambda a, b: a / b, FLOAT_DTYPES, "elementwise quotient; or x / args.value"),
    _binary("eq", lambda a, b: (a == b).astype(np.float32), ALL_DTYPES, "1 where x == y (or args.value), else 0"),
    _binary("lt", lambda a, b: (a < b).astype(np.float32), ALL_DTYPES, "1 where x < y (or args.value), else 0"),
    _binary("gt", lambda a, b: (a > b).astype(np.float32), ALL_DTYPES, "1 where x > y (or args.value), else 0"),
    Op("where", (3, 3), ALL_DTYPES, lambda xp, i, a: xp.where(i[0] != 0, i[1], i[2]), _where_shape,
       doc="elementwise: b where cond is nonzero, else c (inputs: cond, b, c), broadcasting"),
    Op("matmul", (2, 2), ALL_DTYPES, lambda xp, i, a: xp.matmul(i[0], i[1]), _matmul_shape,
       doc="matrix product with numpy's matmul rules"),
    Op("relu", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.maximum(i[0], np.float32(0)), _same, doc="max(x, 0)"),
    Op("gelu", (1, 1), FLOAT_DTYPES, _gelu, _same, doc="GELU, tanh approximation"),
    Op("silu", (1, 1), FLOAT_DTYPES, lambda xp, i, a: i[0] / (np.float32(1) + xp.exp(-i[0])), _same,
       doc="x * sigmoid(x)"),
    Op("softmax", (1, 1), FLOAT_DTYPES, _softmax, _softmax_shape, {"axis": Arg("int", default=-1)},
       doc="softmax along one axis"),
    Op("sum", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.sum(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, {"axis": Arg("axis"), "keepdims": Arg("bool", default=False)},
       doc="sum over one axis, or all axes when axis is null"),
    Op("mean", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.mean(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, {"axis": Arg("axis"), "keepdims": Arg("bool", default=False)},
       doc="mean over one axis, or all axes when axis is null"),
    Op("transpose", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.transpose(i[0], a["axes"]), _transpose_shape,
       {"axes": Arg("axes")}, doc="permute axes (reverse them when axes is null)"),
    Op("reshape", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.reshape(i[0], tuple(a["shape"])), _reshape_shape,
       {"shape": _SHAPE}, doc="same values, new shape"),
    Op("cast", (1, 1), ALL_DTYPES, lambda xp, i, a: i[0], _same, doc="convert to the stage's dtype"),
    Op("load", (0, 0), ALL_DTYPES, _load, _load_shape,
       {"path": Arg("path", required=True, doc="a .npy, .npz or .safetensors file, relative to the manifest's folder"),
        "key": Arg("str?", default=None, doc="the array's name in a .npz or .safetensors file"),
        "cast": Arg("bool", default=False, doc="convert to the stage's dtype even where values are lost")},
       doc="read an array from a .npy, .npz (key) or .safetensors (key) file (path relative to the manifest's folder)"),
    Op("input", (0, 0), ALL_DTYPES, _input, _from_shape_arg,
       {"shape": _SHAPE, "dtype": Arg("dtype", required=True, doc="dtype of the array handed in")},
       doc="an array handed in from Python: hetflow.run(..., inputs={STAGE: array}) of this shape and dtype"),
    Op("max", (1, 1), ALL_DTYPES, lambda xp, i, a: xp.max(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, {"axis": Arg("axis"), "keepdims": Arg("bool", default=False)},
       doc="maximum over one axis, or all axes when axis is null"),
    Op("argmax", (1, 1), frozenset({Dtype.fp32}),
       lambda xp, i, a: xp.argmax(i[0], axis=a["axis"], keepdims=a["keepdims"]),
       _reduce_shape, {"axis": Arg("axis"), "keepdims": Arg("bool", default=False)},
       doc="index of the first maximum (flat index when axis is null), as fp32"),
    Op("rmsnorm", (1, 2), FLOAT_DTYPES, _rmsnorm, _norm_shape, {"eps": Arg("number", default=1e-6)},
       doc="x / sqrt(mean(x^2) + eps) over the last axis, times an optional weight"),
    Op("layernorm", (1, 3), FLOAT_DTYPES, _layernorm, _norm_shape, {"eps": Arg("number", default=1e-5)},
       doc="(x - mean) / sqrt(var + eps) over the last axis, then optional weight and bias"),
]

# -- ops of issue 3: attention, rope, layout, elementwise math, quantization -----------------


def _attention_shape(inputs: list[Shape], args: dict) -> Shape:
    q, k, v = inputs
    if min(len(q), len(k), len(v)) < 2:
        raise ShapeError("attention needs q, k and v of rank 2 or more ([..., length, dim])")
    if q[-1] != k[-1]:
        raise ShapeError(f"attention: q {list(q)} and k {list(k)} differ in their last axis")
    if k[-2] != v[-2]:
        raise ShapeError(f"attention: k {list(k)} and v {list(v)} differ in their length axis")
    try:
        batch = tuple(np.broadcast_shapes(q[:-2], k[:-2], v[:-2]))
    except ValueError:
        raise ShapeError(f"attention: batch axes of {list(q)}, {list(k)}, {list(v)} do not broadcast") from None
    return batch + (q[-2], v[-1])


def _attention(xp: Any, inputs: list, args: dict) -> Any:
    q, k, v = inputs
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = np.float32(args["scale"] if args["scale"] is not None else 1.0 / math.sqrt(max(d, 1)))
    scores = xp.matmul(q, xp.swapaxes(k, -1, -2)) * scale
    if args["causal"]:
        # Aligned to the bottom right: query i sees keys up to i + (lk - lq),
        # so a query block that continues a longer key sequence (a KV cache)
        # sees everything before it; with lq == lk this is the usual lower triangle.
        rows = xp.arange(lq).reshape(lq, 1)
        cols = xp.arange(lk).reshape(1, lk)
        scores = xp.where(cols <= rows + (lk - lq), scores, np.float32(-np.inf))
    top = xp.max(scores, axis=-1, keepdims=True) if lk else xp.zeros(scores.shape[:-1] + (1,), np.float32)
    top = xp.where(xp.isfinite(top), top, np.float32(0))
    e = xp.exp(scores - top)
    total = xp.sum(e, axis=-1, keepdims=True)
    weights = e / xp.where(total > 0, total, np.float32(1))
    return xp.matmul(weights, v)


def _rope_shape(inputs: list[Shape], args: dict) -> Shape:
    x = inputs[0]
    if len(x) < 2 or x[-1] % 2:
        raise ShapeError(f"rope needs an input [..., length, dim] with an even dim, got {list(x)}")
    return x


def _rope(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    length, d = x.shape[-2], x.shape[-1]
    # Angles in float64 on the host: position * frequency loses digits in
    # float32 long before the positions a model uses.
    inv = float(args["base"]) ** (-np.arange(0, d // 2, dtype=np.float64) * 2.0 / d)
    angles = (np.arange(length, dtype=np.float64) + args["offset"])[:, None] * inv[None, :]
    cos, sin = xp.asarray(np.cos(angles).astype(np.float32)), xp.asarray(np.sin(angles).astype(np.float32))
    if args["interleaved"]:
        a, b = x[..., 0::2], x[..., 1::2]
        out = xp.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return xp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _concat_shape(inputs: list[Shape], args: dict) -> Shape:
    first = inputs[0]
    ax = _normalize_axis(args["axis"], len(first), "concat")
    for s in inputs[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != ax):
            raise ShapeError(f"concat: shape {list(s)} does not match {list(first)} outside axis {args['axis']}")
    return first[:ax] + (sum(s[ax] for s in inputs),) + first[ax + 1 :]


def _split_bounds(shape: Shape, args: dict) -> tuple[int, int, int]:
    """(axis, start, stop) of the part ``index`` of ``shape`` that split keeps."""
    ax = _normalize_axis(args["axis"], len(shape), "split")
    n = shape[ax] if shape else 0
    if (args["sections"] is None) == (args["sizes"] is None):
        raise ShapeError("split needs exactly one of 'sections' (equal parts) and 'sizes' (the length of each part)")
    if args["sections"] is not None:
        if args["sections"] < 1 or n % args["sections"]:
            raise ShapeError(f"split: axis {args['axis']} of length {n} does not divide into {args['sections']} equal parts")
        sizes = [n // args["sections"]] * args["sections"]
    else:
        sizes = list(args["sizes"])
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} add up to {sum(sizes)}, not the length {n} of axis {args['axis']}")
    if not 0 <= args["index"] < len(sizes):
        raise ShapeError(f"split: index {args['index']} is out of range for {len(sizes)} parts")
    start = sum(sizes[: args["index"]])
    return ax, start, start + sizes[args["index"]]


def _split_shape(inputs: list[Shape], args: dict) -> Shape:
    ax, start, stop = _split_bounds(inputs[0], args)
    return inputs[0][:ax] + (stop - start,) + inputs[0][ax + 1 :]


def _split(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    ax, start, stop = _split_bounds(tuple(x.shape), args)
    return xp.take(x, xp.arange(start, stop), axis=ax)


def _slice_range(shape: Shape, args: dict) -> tuple[int, range]:
    ax = _normalize_axis(args["axis"], len(shape), "slice")
    if args["step"] == 0:
        raise ShapeError("slice: step must not be 0")
    return ax, range(*slice(args["start"], args["stop"], args["step"]).indices(shape[ax]))


def _slice_shape(inputs: list[Shape], args: dict) -> Shape:
    ax, picked = _slice_range(inputs[0], args)
    return inputs[0][:ax] + (len(picked),) + inputs[0][ax + 1 :]


def _slice(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    ax, picked = _slice_range(tuple(x.shape), args)
    index = [slice(None)] * x.ndim
    index[ax] = slice(picked.start, picked.stop if picked.stop >= 0 else None, picked.step)
    return x[tuple(index)]


def _sigmoid(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    e = xp.exp(-xp.abs(x))  # never overflows, unlike exp(-x) for very negative x
    return xp.where(x >= 0, np.float32(1) / (np.float32(1) + e), e / (np.float32(1) + e))


QUANT_MAX = {Dtype.int8: 127.0, Dtype.int4: 7.0, Dtype.fp8e4m3: 448.0, Dtype.fp8e5m2: 57344.0}
"""The largest magnitude each quantized dtype holds: a symmetric scale maps absmax onto it."""

QUANT_DTYPES = frozenset(QUANT_MAX)


def _scale_axes(shape: Shape, axis: int | None) -> tuple[int, ...] | None:
    if axis is None:
        return None
    ax = _normalize_axis(axis, len(shape), "quantize.scale")
    return tuple(i for i in range(len(shape)) if i != ax)


def _scale_shape(inputs: list[Shape], args: dict) -> Shape:
    if Dtype(args["target"]) not in QUANT_DTYPES:
        raise ShapeError(f"quantize.scale: target must be one of {', '.join(d.value for d in QUANT_MAX)}, got {args['target']!r}")
    shape = inputs[0]
    if args["axis"] is None:
        return ()
    ax = _normalize_axis(args["axis"], len(shape), "quantize.scale")
    return tuple(n if i == ax else 1 for i, n in enumerate(shape))


def _scale(xp: Any, inputs: list, args: dict) -> Any:
    x = inputs[0]
    axes = _scale_axes(tuple(x.shape), args["axis"])
    keep = axes is not None
    top = xp.max(xp.abs(x), axis=axes, keepdims=keep) if x.size else xp.zeros((1,) * x.ndim if keep else (), np.float32)
    scale = top / np.float32(QUANT_MAX[Dtype(args["target"])])
    return xp.where(scale > 0, scale, np.float32(1))


def _quant_shape(inputs: list[Shape], args: dict) -> Shape:
    try:
        out = tuple(np.broadcast_shapes(*inputs))
    except ValueError:
        out = None
    if out != inputs[0]:
        raise ShapeError(f"the scale of shape {list(inputs[1])} must broadcast to the tensor's shape {list(inputs[0])}")
    return out


def _quantize(xp: Any, inputs: list, args: dict, dtype: Dtype) -> Any:
    limit = np.float32(QUANT_MAX[dtype])
    # Saturate first: fp8e4m3 has no infinity, so an overflow would become NaN.
    return xp.clip(inputs[0] / inputs[1], -limit, limit)


_ENTRIES += [
    Op("attention", (3, 3), FLOAT_DTYPES, _attention, _attention_shape,
       {"causal": Arg("bool", default=False), "scale": Arg("number?", default=None)},
       doc="softmax(q @ k^T * scale) @ v; scale defaults to 1/sqrt(dim); causal masks later keys"),
    Op("rope", (1, 1), FLOAT_DTYPES, _rope, _rope_shape,
       {"base": Arg("number", default=10000.0), "offset": Arg("int", default=0),
        "interleaved": Arg("bool", default=False)},
       doc="rotary position embedding over [..., length, dim]; halves rotate (interleaved: pairs)"),
    Op("concat", (1, 64), ALL_DTYPES, lambda xp, i, a: xp.concatenate(i, axis=a["axis"]), _concat_shape,
       {"axis": Arg("int", default=0)}, doc="join inputs along one axis"),
    Op("split", (1, 1), ALL_DTYPES, _split, _split_shape,
       {"axis": Arg("int", default=0), "sections": Arg("int"), "sizes": Arg("shape"),
        "index": Arg("int", required=True)},
       doc="part `index` of the input cut along `axis` into `sections` equal parts or parts of `sizes`"),
    Op("slice", (1, 1), ALL_DTYPES, _slice, _slice_shape,
       {"axis": Arg("int", default=0), "start": Arg("int?", default=None), "stop": Arg("int?", default=None),
        "step": Arg("int", default=1)},
       doc="x[start:stop:step] along one axis, Python's slice rules"),
    Op("exp", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.exp(i[0]), _same, doc="e^x"),
    Op("log", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.log(i[0]), _same, doc="natural logarithm"),
    Op("sqrt", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.sqrt(i[0]), _same, doc="square root"),
    Op("tanh", (1, 1), FLOAT_DTYPES, lambda xp, i, a: xp.tanh(i[0]), _same, doc="hyperbolic tangent"),
    Op("sigmoid", (1, 1), FLOAT_DTYPES, _sigmoid, _same, doc="1 / (1 + e^-x)"),
    Op("quantize.scale", (1, 1), frozenset({Dtype.fp32}), _scale, _scale_shape,
       {"target": Arg("dtype", required=True), "axis": Arg("axis", default=None)},
       doc="symmetric scale absmax / max(target): per tensor, or per channel along `axis`"),
    Op("quantize", (2, 2), QUANT_DTYPES, _quantize, _quant_shape, dtype_aware=True,
       doc="x / scale, saturated and rounded to the stage's int8, int4 or fp8 dtype"),
    Op("dequantize", (2, 2), FLOAT_DTYPES, lambda xp, i, a: i[0] * i[1], _quant_shape,
       doc="q * scale"),
]

# Each op's Vulkan kernel, beside the op: an op missing here is one the
# Vulkan executor does not offer.
_GELU = "0.5 * x * (1.0 + tanh(clamp(0.7978846 * (x + 0.044715 * x * x * x), -15.0, 15.0)))"
_WGSL: dict[str, Kernel] = {
    **{name: Kernel("host") for name in ("random.normal", "random.uniform", "zeros", "ones", "arange", "load", "input", "full")},
    "add": Kernel("binary", "a + b"),
    "sub": Kernel("binary", "a - b"),
    "mul": Kernel("binary", "a * b"),
    "div": Kernel("binary", "a / b"),
    "eq": Kernel("binary", "select(0.0, 1.0, a == b)"),
    "lt": Kernel("binary", "select(0.0, 1.0, a < b)"),
    "gt": Kernel("binary", "select(0.0, 1.0, a > b)"),
    "matmul": Kernel("matmul"),
    "relu": Kernel("unary", "max(x, 0.0)"),
    "gelu": Kernel("unary", _GELU),
    "silu": Kernel("unary", "x / (1.0 + exp(-x))"),
    "cast": Kernel("unary", "x"),
    "reshape": Kernel("unary", "x"),
    "transpose": Kernel("permute"),
    "softmax": Kernel("softmax"),
    "sum": Kernel("reduce", "sum"),
    "mean": Kernel("reduce", "mean"),
    "max": Kernel("reduce", "max"),
    "argmax": Kernel("reduce", "argmax"),
    "rmsnorm": Kernel("norm", "rms"),
    "layernorm": Kernel("norm", "layer"),
}

REGISTRY: dict[str, Op] = {op.name: replace(op, wgsl=_WGSL.get(op.name)) for op in _ENTRIES}

BUILTIN: frozenset[str] = frozenset(REGISTRY)
"""The names of the built-in ops, which no plugin may define."""
