"""One Vulkan executor over several adapters (``devices: [0, 1]``, ``split: [3, 1]``): activations in pieces,
one piece an adapter.

The layout is :class:`~hetflow.executors.split_layout.SplitDevices`' (the CPU and
CUDA split executors' own): each adapter's piece is computed by that
adapter's one-device :class:`~hetflow.executors.vulkan.VulkanExecutor`
(its wgpu device, pipelines and lock: :mod:`hetflow.executors.vulkan_device`),
a node at a time, since WebGPU has no command encoder that spans devices.
WebGPU has no peer copies either: a piece that changes adapter is read
back to host memory and written to the other (``staged``, counted in
:attr:`SplitVulkanExecutor.move_bytes`, priced by
:func:`hetflow.engine.plan.costs.split_move_link`), and so is an input every
adapter reads whole (matmul's weights). An import is laid out by rows,
each adapter taking its rows of the host bytes; an export assembles the
pieces in host memory, the portable bytes.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable, Sequence

import numpy as np

from hetflow.executors.base import (
    ActivationHandle,
    DeviceSet,
    Dtype,
    PortableActivation,
    SubGraphPlan,
    TensorShape,
    UnsupportedDtype,
    Vendor,
    VendorMismatch,
)
from hetflow.executors.payload import decode_plan, encode_plan
from hetflow.executors.split_layout import Pieces, SplitDevices, combine, cut, move_kind, one_node
from hetflow.executors.vulkan import SUPPORTED_DTYPES, VulkanExecutor, wgpu_error
from hetflow.executors.vulkan_device import Tensor, adapters

__all__ = ["SplitVulkanExecutor"]


def _never_peers(dst: int, src: int) -> bool:
    return False  # WebGPU cannot copy between two devices' buffers


class SplitVulkanExecutor(SplitDevices, VulkanExecutor):
    """WGSL compute on several Vulkan adapters of one executor; thread-safe.

    ``devices``: the adapters' indexes (as ``hetflow executors`` lists them)
    and the split; ``memory_limit``: the executor's, divided evenly among
    them (``device_limits``, or the ``DeviceSet``'s ``limits``, gives each
    its own).
    """

    def __init__(self, name: str, devices: DeviceSet, memory_limit: int | None = None,
                 device_limits: Sequence[int] | None = None) -> None:
        found = len(adapters())
        wanted = tuple(range(found)) if devices.indexes is None else devices.indexes
        missing = [i for i in wanted if not 0 <= i < found]
        if missing or not wanted:
            raise ValueError(f"no Vulkan adapter {missing[0] if missing else 0} (found {found})")
        VulkanExecutor.__init__(self, name, wanted[0], memory_limit=memory_limit)
        self._members = [VulkanExecutor(f"{name}[{i}]", i) for i in wanted]
        self._devices = tuple(m.devices[0] for m in self._members)
        n = len(wanted)
        self._init_split(wanted, devices.shares(n), self._device_limits(name, n, memory_limit, device_limits, devices))
        self.move_bytes = {"peer": 0, "staged": 0}
        """Bytes moved between this executor's adapters, by how they went (always staged on Vulkan)."""

    @property
    def devices(self) -> Sequence[Any]:
        return self._devices

    def __repr__(self) -> str:
        return f"SplitVulkanExecutor({self._name!r}, devices={list(self._indexes)})"

    # -- host transfers -------------------------------------------------------------

    def _download(self, tensor: Tensor, d: int) -> PortableActivation:
        dev = self._members[d]._dev
        with dev.lock:
            try:
                data = dev.download(tensor.buffer, tensor.nbytes)
            except Exception as e:
                raise wgpu_error(e, "reading a piece back") from None
        return PortableActivation(TensorShape(tensor.shape), tensor.dtype, data)

    def _to_host(self, tensor: Tensor, d: int) -> np.ndarray:
        return self._download(tensor, d).to_array()

    def _to_device(self, array: np.ndarray, dtype: Dtype, d: int) -> Tensor:
        member = self._members[d]
        data = PortableActivation.from_array(array, dtype).bytes
        with member._dev.lock:
            return member._upload(tuple(array.shape), dtype, data)

    def _move(self, tensor: Tensor, src: int, dst: int) -> Tensor:
        if move_kind(src, dst, _never_peers) is None:
            return tensor
        with self._lock:
            self.move_bytes["staged"] += tensor.nbytes
        return self._to_device(self._to_host(tensor, src), tensor.dtype, dst)

    def _by_rows(self, array: np.ndarray, dtype: Dtype) -> Any:
        if array.ndim == 0 or array.shape[0] < 2:
            return self._to_device(array, dtype, 0)
        bounds = cut(array.shape[0], self._shares)
        return Pieces(0, bounds, [self._to_device(array[lo:hi], dtype, d) if hi > lo else None
                                  for d, (lo, hi) in enumerate(zip(bounds, bounds[1:]))])

    # -- the contract -----------------------------------------------------------------

    def alloc_activation(self, shape: TensorShape, dtype: Dtype) -> ActivationHandle:
        if dtype not in SUPPORTED_DTYPES:
            raise UnsupportedDtype(dtype)
        array = np.zeros(shape.dims, dtype=dtype.numpy)
        return self._register_values([self._by_rows(array, dtype)], f"allocation of {list(shape.dims)} {dtype}")[0]

    def import_activation(self, portable: PortableActivation) -> ActivationHandle:
        if portable.dtype not in SUPPORTED_DTYPES:
            raise UnsupportedDtype(portable.dtype)
        return self._register_values([self._by_rows(portable.to_array(), portable.dtype)],
                                     f"import of {list(portable.shape.dims)} {portable.dtype}")[0]

    def export_activation(self, handle: ActivationHandle) -> PortableActivation:
        value = self._value(handle)
        if not isinstance(value, Pieces):
            return self._download(value, 0)
        array = np.concatenate([self._to_host(t, d) for d, t in enumerate(value.arrays) if t is not None],
                               axis=value.axis)
        return PortableActivation.from_array(array, value.dtype)

    def execute(self, plan: SubGraphPlan, inputs: Sequence[ActivationHandle]) -> list[ActivationHandle]:
        if plan.vendor is not Vendor.vulkan:
            raise VendorMismatch(plan.vendor, Vendor.vulkan)
        decoded = decode_plan(plan)
        return self._register_values(self._run_plan(decoded, inputs),
                                     lambda: f"the results of {', '.join(decoded['outputs'])}")

    # -- how the adapters compute (SplitDevices' hooks) -------------------------------------

    def _submit(self, d: int, fn: Callable[..., Any], *args: Any) -> Future:
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            done.set_exception(e)
        return done

    def _walk_one(self, d: int, node: dict, inputs: list[Any]) -> Tensor:
        one = one_node(node)
        plan = encode_plan(Vendor.vulkan, one["inputs"], one["nodes"], one["outputs"])
        return self._members[d]._walk(plan, list(inputs))[0]

    def _run_whole(self, node: dict, inputs: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        return self._walk_one(0, node, inputs)

    def _compute(self, d: int, node: dict, args: list[Any], dtypes: Sequence[Dtype] | None) -> Any:
        return self._walk_one(d, node, args)

    def _cut_to(self, value: Any, axis: int, lo: int, hi: int, d: int) -> Any:
        index = [slice(None)] * len(value.shape)
        index[axis] = slice(lo, hi)
        piece = self._to_host(value, 0)[tuple(index)]
        if d != 0:
            with self._lock:
                self.move_bytes["staged"] += value.dtype.nbytes(piece.size)
        return self._to_device(piece, value.dtype, d)

    def _share_to(self, value: Any, d: int) -> Any:
        return self._move(value, 0, d)

    def _assemble(self, value: Pieces) -> Any:
        parts = [self._to_host(t, d) for d, t in enumerate(value.arrays) if t is not None]
        moved = sum(t.nbytes for d, t in enumerate(value.arrays) if t is not None and d != 0)
        with self._lock:
            self.move_bytes["staged"] += moved
        return self._to_device(np.concatenate(parts, axis=value.axis), value.dtype, 0)

    def _combine_parts(self, how: str | None, parts: list[Any], where: list[int], rows: list[int], extent: int,
                       dtype: Dtype) -> Any:
        host = [self._to_host(p, d) for p, d in zip(parts, where)]
        with self._lock:
            self.move_bytes["staged"] += sum(p.nbytes for p, d in zip(parts, where) if d != 0)
        return self._to_device(combine(np, how, host, rows, extent, dtype), dtype, 0)
