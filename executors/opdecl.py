"""What an op is: the declaration every op of the registry is made of, and the numeric rule.

An :class:`Op` holds its contract (arity, :class:`Arg` specs, output
dtypes, a shape rule, an optional :class:`Kernel` for Vulkan) and its
implementation: a body written once against an array namespace ``xp``.
The built-in ops are declared in :mod:`hetflow.executors.builtin`, users'
ops by :func:`hetflow.op`; :mod:`hetflow.executors.ops` gathers them in
the one registry. This module imports neither, so both may import it.

Numeric rule. Each call computes in one *compute type*
(:func:`compute_type`): an op that only moves or selects values
(``moves``) takes its inputs as they are; an op that computes on integers
(``exact``) takes integer and bool inputs as they are, in their common
numpy type, so integer arithmetic wraps; otherwise inputs are widened to
float32, or to float64 when an input or the output is ``fp64``. The
result is converted to the stage's output dtype (:func:`to_dtype`):
float outputs round to nearest even; ``int8`` and ``int4`` (quantized
activations) round to nearest even and saturate, NaN becoming 0; the
integers take a float by rounding toward zero and saturating to their
range (NaN becomes 0) and another integer by wrapping (two's complement);
``bool`` is ``value != 0``.

Examples
--------
>>> import numpy as np
>>> to_dtype(np, np.array([300.0, -1.5, np.nan], np.float32), Dtype.int8).tolist()
[127, -2, 0]
>>> to_dtype(np, np.array([3e10, -1.5, 2.7, np.nan], np.float64), Dtype.int32).tolist()
[2147483647, -1, 2, 0]
>>> to_dtype(np, np.array([300, -1], np.int64), Dtype.uint8).tolist()
[44, 255]
>>> to_dtype(np, np.array([0.0, -0.5]), Dtype.bool).tolist()
[False, True]
>>> broadcast([(2, 1), (3,)], {})
(2, 3)
>>> check_value("shape", [2, -1])
'a list of non-negative integers'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hetflow.executors.base import Dtype

__all__ = ["Op", "Arg", "Kernel", "Split", "ShapeError", "Shape", "split_rows", "split_none", "FLOAT_DTYPES", "ALL_DTYPES", "INT_DTYPES", "EXACT_DTYPES",
           "NUMERIC_DTYPES", "QUANT_MAX", "QUANT_DTYPES", "compute_type", "default_dtype", "dtype_of",
           "check_value", "check_args", "is_deterministic", "to_dtype", "widen", "normalize_axis", "same",
           "from_shape_arg", "broadcast"]

Shape = tuple[int, ...]

FLOAT_DTYPES = frozenset({Dtype.fp32, Dtype.fp16, Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2, Dtype.fp64})
ALL_DTYPES = frozenset(Dtype)
INT_DTYPES = frozenset({Dtype.int16, Dtype.int32, Dtype.int64, Dtype.uint8})
"""The integers ops compute on as they are (``int8``, ``int4`` are quantized activations)."""
EXACT_DTYPES = INT_DTYPES | {Dtype.bool}
NUMERIC_DTYPES = ALL_DTYPES - {Dtype.bool}

QUANT_MAX = {Dtype.int8: 127.0, Dtype.int4: 7.0, Dtype.fp8e4m3: 448.0, Dtype.fp8e5m2: 57344.0}
"""The largest magnitude each quantized dtype holds: a symmetric scale maps absmax onto it."""

QUANT_DTYPES = frozenset(QUANT_MAX)


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
class Split:
    """How one call of an op divides across an executor's devices, for given input shapes.

    ``inputs`` holds, per input, the axis its pieces are cut along, or None
    where every device reads the input whole (matmul's weights, a norm's
    scale, a broadcast operand). Every cut input has the same length along
    its axis: the *extent* the devices share in proportion to ``split:``.
    ``output`` is the axis along which the pieces of the result join; None
    when the pieces are partial results of a reduction, joined by
    ``combine`` (``sum``, ``mean``, ``max`` or ``min``). An op without
    inputs (``zeros``) cuts its own ``shape_arg`` at ``output``.

    >>> Split((0, None), 0)
    Split(inputs=(0, None), output=0, combine=None, shape_arg=None)
    """

    inputs: tuple[int | None, ...]
    output: int | None
    combine: str | None = None
    shape_arg: str | None = None


def split_rows(inputs: list[Shape], args: dict, out: Shape) -> "Split | None":
    """The elementwise rule: the output by rows (axis 0); an input of the output's rank and rows is cut with it,
    a broadcast one (fewer axes, or one row) is read whole by every device."""
    if not out:
        return None
    return Split(tuple(0 if len(s) == len(out) and s[0] == out[0] else None for s in inputs), 0)


def split_none(inputs: list[Shape], args: dict, out: Shape) -> "Split | None":
    return None


@dataclass(frozen=True)
class Op:
    """One op: its contract (arity, args, dtypes, shape rule) and its implementations.

    The planner and the checks ask the op, never its body: ``runs_on``
    for a vendor, ``shape`` for the output shape, ``args`` for what a
    stage may pass.
    """

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
    moves: bool = False
    """The op only moves, selects or converts values: its inputs reach the body as they are, at any dtype."""
    exact: bool = False
    """The op computes on integers: integer and bool inputs reach the body as they are (arithmetic wraps)."""
    result: Callable[[list[Dtype], Mapping[str, Any]], Dtype] | None = field(default=None, repr=False)
    """The output dtype of a stage that names none, from its inputs' dtypes and args; None: :func:`default_dtype`."""
    input_dtypes: Callable[[list[Dtype], Mapping[str, Any]], str | None] | None = field(default=None, repr=False)
    """What is wrong with the inputs' dtypes (``gather``'s indices must be integers), or None."""
    split: Callable[[list[Shape], dict, Shape], Split | None] | None = field(default=None, repr=False)
    """How a call divides across an executor's devices: ``split(input_shapes, args, output_shape)`` gives a
    :class:`Split`, or None where these shapes do not divide; an op without one runs on the first device."""

    def split_for(self, inputs: Sequence[Shape], args: Mapping[str, Any], out: Shape) -> "Split | None":
        """This op's :class:`Split` for these shapes (``args`` with defaults filled in), or None."""
        if self.split is None:
            return None
        try:
            return self.split([tuple(s) for s in inputs], dict(args), tuple(out))
        except (ShapeError, ValueError, IndexError, KeyError, TypeError):
            return None

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
        if not self.args:
            return dict(args)
        full = {k: a.default for k, a in self.args.items()}
        full.update(args)
        return full


def _float_holds(value: int) -> bool:
    """Whether the integer ``value`` converts to a float64 (ops compute with it as one)."""
    try:
        float(value)
    except OverflowError:
        return False
    return True


_MAX_DIM = (1 << 63) - 1


def check_value(kind: str, value: Any) -> str | None:
    """What an argument of ``kind`` must be, when ``value`` is not one; None when it is."""

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind == "shape":
        if not isinstance(value, list) or not all(is_int(v) and v >= 0 for v in value):
            return "a list of non-negative integers"
        if len(value) > 8:
            return "a shape of rank at most 8"
        if any(v > _MAX_DIM for v in value):
            return f"a shape whose sizes are at most {_MAX_DIM} (2^63 - 1, the most any array's axis holds)"
    elif kind == "seed" and value is not None and not (is_int(value) and value >= 0):
        # numpy's SeedSequence takes any non-negative integer, 64 bits or more
        return "a non-negative integer seed, or null for fresh entropy on every run"
    elif kind == "int" and not is_int(value):
        return "an integer"
    elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return "a number"
    elif kind in ("number", "number?") and is_int(value) and not _float_holds(value):
        return "a number within float64's range (about ±1.8e308)"
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

    >>> from hetflow.executors.ops import REGISTRY
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
        expected = check_value(spec.kind, value)
        if expected:
            problems.append((key, f"argument {key!r} of op {op.name!r} must be {expected}, got {value!r}"))
    for key, spec in op.args.items():
        if spec.required and key not in args:
            problems.append((None, f"op {op.name!r} needs argument {key!r}"))
    if n_inputs is not None and op.checks is not None and not problems:
        problems.extend(op.checks(n_inputs, args))
    return problems


_EXACT_NUMPY = frozenset(np.dtype(t) for t in (np.int16, np.int32, np.int64, np.uint8, np.bool_))


def is_exact_array(array: Any) -> bool:
    """Whether ``array`` holds an integer or bool dtype that ops compute on as it is (not int8/int4)."""
    return array.dtype in _EXACT_NUMPY


def compute_type(op: Op, inputs: Sequence[Any], dtype: Dtype) -> Any:
    """The numpy dtype op ``op`` computes in for these input arrays and output ``dtype``; None: as they are."""
    if op.moves:
        return None
    if not inputs and dtype.is_exact:
        return None  # a source of integers makes them as they are
    if op.exact and inputs and all(x.dtype in _EXACT_NUMPY for x in inputs):
        return None
    if dtype is Dtype.fp64 or any(x.dtype == np.float64 for x in inputs):
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def to_dtype(xp: Any, array: Any, dtype: Dtype) -> Any:
    """Convert a computed array to the stage's output dtype (the module's numeric rule)."""
    target = dtype.numpy
    if array.dtype == target:
        return array
    kind = dtype.kind
    if kind == "float":
        with np.errstate(over="ignore"):  # beyond the range is infinity (NaN for fp8e4m3): the rule, not a fault
            if dtype in _NARROW and (array.dtype == np.float64 or (array.dtype.kind in "iu" and array.dtype.itemsize > 2)):
                return _round_to_odd_fp32(xp, array).astype(target)
            return array.astype(target)
    if kind == "bool":
        return array != 0
    source = array.dtype
    if kind == "quant":
        lo, hi = (-128, 127) if dtype is Dtype.int8 else (-8, 7)
        if source.kind in "iub":
            return xp.clip(array, lo, hi).astype(np.int8).astype(target)
        finite = xp.nan_to_num(array.astype(np.float32), nan=0.0, posinf=hi, neginf=lo)
        return xp.clip(xp.rint(finite), lo, hi).astype(np.int8).astype(target)
    if source.kind in "iub":
        return array.astype(target)  # integer to integer wraps, two's complement
    # a float to an integer: toward zero, saturating at the range (compared in float64, where the bounds are exact)
    info = np.iinfo(target)
    wide = xp.nan_to_num(array.astype(np.float64), nan=0.0)
    low, top = float(info.min), float(info.max) + 1.0
    values = xp.trunc(xp.where((wide >= low) & (wide < top), wide, 0.0)).astype(target)
    return xp.where(wide >= top, target.type(info.max), xp.where(wide < low, target.type(info.min), values))


# bf16 and fp8 from float64 or a wide integer: ml_dtypes before 0.7 converts through float32, rounding
# twice (2**24 + 2**16 + 1 became 2**24 in bf16, not the nearer 2**24 + 2**17). Rounding to float32
# *to odd* first keeps the one rounding exact: float32 holds at least two more bits than these targets
# (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding
# to odd", 2008), so every ml_dtypes version gives the correctly rounded value.
_NARROW = frozenset({Dtype.bf16, Dtype.fp8e4m3, Dtype.fp8e5m2})


def _round_to_odd_fp32(xp: Any, array: Any) -> Any:
    """``array`` (float64, or integers through float64 as ml_dtypes 0.7 converts them) in float32, rounded to odd:
    truncated toward zero, with the last bit set where that dropped anything."""
    wide = array.astype(np.float64)
    near = wide.astype(np.float32)
    back = near.astype(np.float64)
    over = xp.abs(back) > xp.abs(wide)
    inexact = (back != wide) & xp.isfinite(wide) & xp.isfinite(back)
    toward = xp.where(over & inexact, xp.nextafter(near, np.float32(0)), near)
    bits = toward.view(np.uint32)
    return xp.where(inexact, (bits | np.uint32(1)).view(np.float32), toward)


def widen(xp: Any, array: Any, to: Any = np.float32) -> Any:
    """``array`` in the compute type ``to`` (float32 unless said otherwise); None leaves it as it is."""
    return array if to is None or array.dtype == to else array.astype(to)


def dtype_of(array: Any) -> Dtype:
    """The hetflow dtype of a numpy (or cupy) array's values."""
    if not _DTYPE_OF_NUMPY:
        _DTYPE_OF_NUMPY.update({d.numpy: d for d in reversed(Dtype)})
    return _DTYPE_OF_NUMPY[np.dtype(array.dtype)]


_DTYPE_OF_NUMPY: dict = {}


def default_dtype(op: Op, inputs: Sequence[Dtype], args: Mapping[str, Any]) -> Dtype:
    """The output dtype of a stage of ``op`` that names none.

    ``fp32``, as always, unless the op says otherwise (``result``: a
    comparison gives ``bool``, ``argmax`` ``int64``) or its inputs are of
    the kinds that keep their type: integers and bools for an op that
    computes on them or only moves them (their common type, ONNX's ``T``),
    ``fp64`` for any op that gives it.
    """
    if op.result is not None:
        return op.result(list(inputs), args)
    if inputs and (op.exact or op.moves) and all(d.is_exact for d in inputs):
        common = inputs[0]
        for d in inputs[1:]:
            if d is not common:
                common = _promote(common, d)
        if common in op.dtypes:
            return common
    if Dtype.fp64 in inputs and Dtype.fp64 in op.dtypes:
        return Dtype.fp64
    if inputs and op.moves and len(set(inputs)) == 1 and inputs[0] in op.dtypes and inputs[0].kind != "float":
        return inputs[0]
    return Dtype.fp32


def _promote(a: Dtype, b: Dtype) -> Dtype:
    """numpy's promotion of two exact dtypes, as a hetflow dtype (int64 where numpy would leave the integers)."""
    found = np.promote_types(a.numpy, b.numpy)
    for d in (Dtype.bool, Dtype.uint8, Dtype.int16, Dtype.int32, Dtype.int64):
        if d.numpy == found:
            return d
    return Dtype.int64


# -- shape rules shared by several families ----------------------------------------


def normalize_axis(axis: int, rank: int, op: str) -> int:
    """``axis`` in ``range(rank)``; :class:`ShapeError` naming ``op`` when it is out of range."""
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def same(inputs: list[Shape], args: dict) -> Shape:
    """The first input's shape."""
    return inputs[0]


def from_shape_arg(inputs: list[Shape], args: dict) -> Shape:
    """The ``shape`` argument, for ops that make a tensor."""
    return tuple(args["shape"])


def broadcast(inputs: list[Shape], args: dict) -> Shape:
    """The inputs' shapes broadcast together, numpy's rule."""
    try:
        return tuple(np.broadcast_shapes(*inputs))
    except ValueError:
        raise ShapeError(
            "shapes " + " and ".join(str(list(s)) for s in inputs) + " do not broadcast"
        ) from None
