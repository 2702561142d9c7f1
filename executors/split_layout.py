"""How one executor's work divides across its devices: the layout every split executor shares.

The seed's second step: an executor's ``devices()`` is a list, and its ops
split across them by the rule each declares
(:class:`~hetflow.executors.opdecl.Split`). :class:`SplitDevices` is that
executor's bookkeeping, whatever its vendor: the CPU's over NUMA nodes or
core sets (:class:`hetflow.executors.split.SplitCpuExecutor`), CUDA's over
GPUs (:class:`hetflow.executors.cuda.SplitCudaExecutor`), Vulkan's over
adapters (:class:`hetflow.executors.vulkan_split.SplitVulkanExecutor`).

The algorithm, for each node of a partition in order:

1. Ask the op for its :class:`~hetflow.executors.opdecl.Split` at these
   input shapes (:func:`layout`, the question the planner asks too). No
   rule, no division of these shapes, or an *extent* (the length the
   devices share) under 2: the node runs whole on the first device, its
   inputs *gathered* there.
2. :func:`cut` the extent in proportion to the executor's ``split`` (the
   *bounds*, ``[0, b1, ..., extent]``). :func:`arrange` says how each
   input is read: an input the rule cuts along an axis is taken as it
   lies when it is already in pieces along that axis at those bounds;
   otherwise it is *re-split*: each device copies its slice (a *move*,
   counted in ``moves``). An input the rule reads whole is gathered once
   and shared (on the host: read in place; on GPUs and adapters: copied to
   each device). A move between two devices is a peer copy or goes
   through host memory, as :func:`move_kind` says.
3. Each device computes its piece; the pieces of the result join along
   the rule's ``output`` axis (the value stays in :class:`Pieces`, so the
   next split op finds them where they are), or, for a reduction over the
   divided axis, the partial results are combined (``sum``, ``mean``
   weighted by rows, ``max``, ``min``) on the first device.

A handle is still one logical activation: an export assembles the pieces
into the portable bytes, so bridges do not change. ``memory_limit`` is
divided evenly among the devices (or given per device); a device past its
share raises :class:`OutOfMemory`, naming it. :func:`bound_devices` is
what a run record says of an executor's devices.

>>> bounds = cut(8, (0.75, 0.25))
>>> bounds, arrange((0, None), bounds, [(0, bounds), None])
((0, 6, 8), ('take', 'whole'))
"""

from __future__ import annotations

import contextlib
import functools
import threading
from concurrent.futures import Future
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hetflow.executors import ops
from hetflow.executors.base import ActivationHandle, Backend, BoundDevice, DeviceSet, Dtype, OutOfMemory, UnknownHandle
from hetflow.executors.cpu import next_handle

__all__ = ["SplitDevices", "Pieces", "cut", "layout", "layout_text", "arrange", "move_kind", "bound_devices",
           "planned_devices", "combine", "one_node", "TAKE", "RESPLIT", "WHOLE"]

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


TAKE, RESPLIT, WHOLE = "take", "resplit", "whole"
"""How a split node reads one input (:func:`arrange`): its pieces as they lie, cut anew, or whole."""


def arrange(axes: Sequence[int | None], bounds: tuple[int, ...],
            held: Sequence[tuple[int, tuple[int, ...]] | None]) -> tuple[str, ...]:
    """How a node divided at ``bounds`` reads each input, given the rule's ``axes`` (a
    :class:`~hetflow.executors.opdecl.Split`'s ``inputs``) and how each input is ``held``: ``(axis, bounds)``
    of its pieces, or None where it lies whole on the first device.

    An input cut along the axis and at the bounds it already lies in is taken as it lies (:data:`TAKE`: no
    move); one the rule cuts otherwise is cut anew (:data:`RESPLIT`: a move); one the rule reads whole is
    :data:`WHOLE` (gathered first where it is in pieces). The CPU and the CUDA executors ask this one question.

    >>> arrange((0, None), (0, 6, 8), [(0, (0, 6, 8)), None])
    ('take', 'whole')
    >>> arrange((0,), (0, 6, 8), [(0, (0, 4, 8))]), arrange((1,), (0, 6, 8), [None])
    (('resplit',), ('resplit',))
    """
    return tuple(WHOLE if axis is None else TAKE if h is not None and h == (axis, bounds) else RESPLIT
                 for axis, h in zip(axes, held))


def move_kind(src: int, dst: int, peers: Callable[[int, int], bool]) -> str | None:
    """How a piece goes from device position ``src`` to ``dst`` of one executor: None (it is there), ``peer``
    (device to device, where ``peers(dst, src)`` says ``dst`` may read ``src``'s memory) or ``staged``
    (through host memory). The cost model prices each kind with its own link
    (:func:`hetflow.engine.plan.costs.split_move_link`).

    >>> move_kind(0, 0, lambda a, b: False), move_kind(0, 1, lambda a, b: True), move_kind(1, 0, lambda a, b: False)
    (None, 'peer', 'staged')
    """
    if src == dst:
        return None
    return "peer" if peers(dst, src) else "staged"


def bound_devices(executor: Any) -> list[dict]:
    """What a run record says of the devices ``executor`` bound: per device its index (its position among the
    vendor's devices), identity, name, memory, its share of a split and its ``memory_limit``.

    An executor over several devices (:class:`SplitDevices`) lists each; any other lists its one device,
    the whole of the work and the executor's ``memory_limit``.

    >>> from hetflow.executors.cpu import CpuExecutor
    >>> [(d["index"], d["share"], d["memory_limit"]) for d in bound_devices(CpuExecutor("host", memory_limit=64))]
    [(0, 1.0, 64)]
    """
    devices = list(executor.devices)
    indexes = getattr(executor, "device_indexes", None)
    if indexes is None:
        index = getattr(executor, "device_index", 0)
        indexes = tuple(range(index, index + len(devices)))
    shares = getattr(executor, "shares", None) or (1.0 / len(devices),) * len(devices)
    limits = getattr(executor, "device_limits", None)
    if limits is None:
        limit = getattr(executor, "memory_limit", None)
        limits = [None if limit is None else limit // len(devices)] * len(devices)
    return [{"index": i, "bus_address": d.bus_address, "display_name": d.display_name,
             "memory_bytes": d.memory_bytes, "share": share, "memory_limit": limit}
            for i, d, share, limit in zip(indexes, devices, shares, limits)]


def planned_devices(device: int | DeviceSet | None, memory_limit: int | None,
                    offered: Sequence[BoundDevice]) -> list[dict]:
    """:func:`bound_devices` of an executor that lives elsewhere (on a cluster's worker), from its ``device:``
    or ``devices:`` and what its worker ``offered``: the names of the devices the offer lists by index (a
    GPU, an adapter, a NUMA node), None for those it does not (a core set the worker deals out itself).

    >>> from hetflow.executors.base import BoundDevice
    >>> gpus = [BoundDevice("0000:01:00.0", "gpu a"), BoundDevice("0000:02:00.0", "gpu b")]
    >>> [(d["index"], d["display_name"], d["share"], d["memory_limit"])
    ...  for d in planned_devices(DeviceSet((0, 1), (3, 1)), 100, gpus)]
    [(0, 'gpu a', 0.75, 50), (1, 'gpu b', 0.25, 50)]
    >>> [(d["index"], d["display_name"]) for d in planned_devices(DeviceSet(None), None, gpus)]
    [(0, 'gpu a'), (1, 'gpu b')]
    """
    if isinstance(device, DeviceSet):
        indexes = device.indexes if device.indexes is not None else tuple(range(max(1, len(offered))))
        limits = device.limits
    else:
        indexes, limits = (int(device or 0),), None
    n = len(indexes)
    shares = device.shares(n) if isinstance(device, DeviceSet) else (1.0,)
    if limits is None:
        limits = (None if memory_limit is None else memory_limit // n,) * n
    # one device offered (the host): it is the executor's only when the executor has one device
    named = list(offered) if len(offered) > 1 or n == 1 else []
    out = []
    for i, share, limit in zip(indexes, shares, limits):
        d = named[i] if i < len(named) else None
        out.append({"index": i, "bus_address": None if d is None else d.bus_address,
                    "display_name": None if d is None else d.display_name,
                    "memory_bytes": None if d is None else d.memory_bytes, "share": share, "memory_limit": limit})
    return out


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


class SplitDevices:
    """What every executor over several devices shares, whatever its vendor: its handle table, the devices'
    memory accounts and the algorithm of the module's docstring (:meth:`_run`), one source of truth for the CPU,
    CUDA and Vulkan paths.

    A subclass holds ``_lock``, ``_name`` and ``_devices`` (one :class:`BoundDevice` a device), calls
    :meth:`_init_split`, and says how its devices compute and move: :meth:`_submit` (run a callable on a
    device), :meth:`_run_whole` (a node whole on the first device), :meth:`_compute` (a node's piece on a
    device), :meth:`_cut_to` (a slice of a whole value, copied onto a device), :meth:`_share_to` (a value read
    whole, as a device reads it), :meth:`_assemble` (pieces joined on the first device), :meth:`_combine_parts`
    (partial reductions, from the devices ``where`` they lie, joined on the first device) and
    :meth:`_pieces_at_once` (around the devices' work).
    A value is a :class:`Pieces` or one array on the first device.
    """

    _lock: threading.Lock
    _name: str
    _devices: tuple[BoundDevice, ...]

    @staticmethod
    def _device_limits(name: str, n: int, memory_limit: int | None, device_limits: Sequence[int] | None,
                       devices: DeviceSet) -> list[int | None]:
        """Each device's memory limit: ``device_limits`` (or the ``DeviceSet``'s ``limits``), one a device, else
        the executor's ``memory_limit`` divided evenly (None: no cap)."""
        given = device_limits if device_limits is not None else devices.limits
        if given is None:
            return [None if memory_limit is None else memory_limit // n] * n
        if len(given) != n:
            raise ValueError(f"executor {name!r}: {len(given)} memory limits for {n} devices")
        return list(given)

    def _run_plan(self, decoded: Mapping[str, Any], inputs: Sequence[ActivationHandle]) -> list[Any]:
        """A decoded partition's nodes run one after another on the devices (:meth:`_run`): its outputs' values."""
        names = decoded["inputs"]
        if len(names) != len(inputs):
            raise Backend(f"plan takes {len(names)} inputs, got {len(inputs)}")
        values: dict[str, Any] = dict(zip(names, (self._value(h) for h in inputs)))
        for node in decoded["nodes"]:
            values[node["id"]] = self._run(node, [values[r] for r in node["inputs"]])
        return [values[t] for t in decoded["outputs"]]

    def _init_split(self, indexes: Sequence[int], shares: Sequence[float], limits: Sequence[int | None]) -> None:
        self._indexes = tuple(indexes)
        self._shares = tuple(shares)
        self._limits: list[int | None] = list(limits)
        self._device_used = [0] * len(self._indexes)
        self._values: dict[ActivationHandle, Any] = {}
        """Handle -> entry: the value (a :class:`Pieces` or one array), or what a subclass keeps with it
        (:meth:`_held` finds the value in it)."""
        self.moves = 0
        """Values copied between devices because the next op's rule needed another layout (and gathers)."""

    @property
    def shares(self) -> tuple[float, ...]:
        return self._shares

    @property
    def device_indexes(self) -> tuple[int, ...]:
        return self._indexes

    @property
    def device_limits(self) -> tuple[int | None, ...]:
        """Each device's part of the ``memory_limit`` (None: no cap)."""
        return tuple(self._limits)

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
        return [value.nbytes] + [0] * (len(self._indexes) - 1)

    def _reserve_all(self, values: Sequence[Any], what: str | Callable[[], str]) -> None:
        """Count ``values`` on their devices (caller holds the lock), all or none."""
        need = [0] * len(self._indexes)
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

    def _unreserve(self, value: Any) -> None:
        """Forget ``value``'s bytes on its devices (caller holds the lock)."""
        for d, b in enumerate(self._per_device(value)):
            self._device_used[d] -= b

    # -- handles --------------------------------------------------------------------------------------------

    def _held(self, entry: Any) -> Any:
        """The value in a table entry (the entry itself, unless a subclass keeps more with it)."""
        return entry

    def _register_values(self, values: Sequence[Any], what: str | Callable[[], str],
                         entries: Sequence[Any] | None = None) -> list[ActivationHandle]:
        """Handles for ``values``, counted on their devices all or none; the table keeps ``entries`` (default:
        the values)."""
        handles = [next_handle() for _ in values]
        with self._lock:
            self._reserve_all(values, what)
            self._values.update(zip(handles, values if entries is None else entries))
        return handles

    def _value(self, handle: ActivationHandle) -> Any:
        """The entry of ``handle``; :class:`UnknownHandle` for one this executor did not issue or released."""
        with self._lock:
            try:
                return self._values[handle]
            except (KeyError, TypeError):
                raise UnknownHandle(handle, self._name) from None

    def release_activation(self, handle: ActivationHandle) -> None:
        with self._lock:
            entry = self._values.pop(handle, None) if isinstance(handle, ActivationHandle) else None
            if entry is not None:
                self._unreserve(self._held(entry))

    def live_activations(self) -> int:
        with self._lock:
            return len(self._values)

    # -- running one node --------------------------------------------------------------------------------------

    def _run(self, node: dict, inputs: list[Any], dtypes: Sequence[Dtype] | None = None) -> Any:
        """``node`` on ``inputs`` (values; ``dtypes`` their dtypes where the arrays do not say them): its result,
        in pieces where the op's rule divides it."""
        dtype = Dtype(node["dtype"])
        found = layout(node["op"], [v.shape for v in inputs], node["args"], dtype)
        if found is None:
            return self._run_whole(node, [self._gather(v) for v in inputs], dtypes)
        rule, extent = found
        bounds = cut(extent, self._shares)
        how = arrange(rule.inputs, bounds, [(v.axis, v.bounds) if isinstance(v, Pieces) else None for v in inputs])
        shared = [self._gather(v) if h == WHOLE else None for v, h in zip(inputs, how)]
        # a cut input not already in these pieces is assembled once; each device then copies its slice
        sources = [self._gather(v) if h == RESPLIT else v for v, h in zip(inputs, how)]
        if RESPLIT in how:
            with self._lock:
                self.moves += how.count(RESPLIT)
        futures: list[Future | None] = []
        parts = list(zip(bounds, bounds[1:]))
        with self._pieces_at_once(sum(hi > lo for lo, hi in parts)):
            for d, (lo, hi) in enumerate(parts):
                if hi <= lo:
                    futures.append(None)
                    continue
                piece_node = node
                if rule.shape_arg is not None:
                    shape = list(node["args"][rule.shape_arg])
                    shape[rule.output] = hi - lo
                    piece_node = dict(node, args={**node["args"], rule.shape_arg: shape})
                futures.append(self._submit(d, self._piece, d, piece_node, sources, shared, how, rule.inputs, bounds,
                                            dtypes))
            pieces = [None if f is None else f.result() for f in futures]
        if rule.output is not None:
            return Pieces(rule.output, bounds, pieces)
        where = [d for d, p in enumerate(pieces) if p is not None]
        return self._combine_parts(rule.combine, [pieces[d] for d in where], where,
                                   [parts[d][1] - parts[d][0] for d in where], extent, dtype)

    def _piece(self, d: int, node: dict, inputs: list[Any], shared: list[Any], how: tuple[str, ...], axes: tuple,
               bounds: tuple, dtypes: Sequence[Dtype] | None) -> Any:
        """Device ``d``'s piece of ``node``, on that device: its inputs' pieces, cut anew here where needed."""
        args = []
        for v, whole, h, axis in zip(inputs, shared, how, axes):
            if h == WHOLE:
                args.append(self._share_to(whole, d))
            elif h == TAKE:
                args.append(v.arrays[d])
            else:
                args.append(self._cut_to(v, axis, bounds[d], bounds[d + 1], d))
        return self._compute(d, node, args, dtypes)

    def _gather(self, value: Any) -> Any:
        """``value`` whole on the first device: its pieces assembled there (a move), unless they are views of one
        array already (an import's)."""
        if not isinstance(value, Pieces):
            return value
        if value.whole is not None:
            return value.whole
        with self._lock:
            self.moves += 1
        return self._assemble(value)

    # -- what a vendor says ------------------------------------------------------------------------------------

    def _submit(self, d: int, fn: Callable[..., Any], *args: Any) -> Future:
        raise NotImplementedError

    def _run_whole(self, node: dict, inputs: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        raise NotImplementedError

    def _compute(self, d: int, node: dict, args: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        raise NotImplementedError

    def _cut_to(self, value: Any, axis: int, lo: int, hi: int, d: int) -> Any:
        raise NotImplementedError

    def _share_to(self, value: Any, d: int) -> Any:
        raise NotImplementedError

    def _assemble(self, value: Pieces) -> Any:
        raise NotImplementedError

    def _combine_parts(self, how: str | None, parts: list[Any], where: list[int], rows: list[int], extent: int,
                       dtype: Dtype) -> Any:
        raise NotImplementedError

    def _pieces_at_once(self, count: int) -> Any:
        return contextlib.nullcontext()


def one_node(node: dict) -> dict:
    """A plan of ``node`` alone, its inputs renamed in order."""
    return {"inputs": [f"in{i}" for i in range(len(node["inputs"]))],
            "nodes": [dict(node, inputs=[f"in{i}" for i in range(len(node["inputs"]))])], "outputs": [node["id"]]}


def combine(xp: Any, how: str | None, parts: list[Any], rows: list[int], extent: int, dtype: Dtype) -> Any:
    """The partial reductions of the devices (arrays of ``xp``, on one device) joined into the whole one (in
    float64, then the output dtype)."""
    if how == "max":
        return xp.asarray(functools.reduce(xp.maximum, parts))
    if how == "min":
        return xp.asarray(functools.reduce(xp.minimum, parts))
    wide = [p.astype(np.float64) for p in parts]
    if how == "sum":
        total = sum(wide[1:], wide[0])
    elif how == "mean":
        total = sum((w * (n / extent) for w, n in zip(wide[1:], rows[1:])), wide[0] * (rows[0] / extent))
    else:
        raise Backend(f"unknown combine step {how!r} of a split rule")
    return xp.asarray(total).astype(dtype.numpy)
