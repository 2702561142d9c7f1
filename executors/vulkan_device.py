"""The Vulkan device under the executor: adapters, one wgpu device per adapter, buffers, transfers, pipelines.

Memory. Every activation is one device storage buffer holding exactly the
tensor's portable bytes (row-major, little-endian; fp16/bf16/int16 two
values per 32-bit word, int8, uint8, bool and the fp8 types four, int4
eight, low bits first; int32 one, which is also the i32 word kernels
compute integers in),
padded with zeros to a multiple of four bytes. Export and import are
therefore plain copies, bit for bit, through two mapped *staging buffers*
per device (one ``MAP_WRITE`` for uploads, one ``MAP_READ`` for
downloads), made once, grown to the largest transfer up to
``STAGING_CHUNK`` bytes and reused; a larger tensor goes through them in
chunks. A fresh WebGPU buffer is zero-filled, which is what
``alloc_activation`` promises.

Devices and threads. The Vulkan adapters wgpu finds are listed by
:func:`adapters`, GPUs before CPU-type ones (lavapipe, Mesa's software
Vulkan device, reports itself as a CPU-type adapter). One wgpu device per
adapter is shared by every executor instance in the process, with its
compiled pipelines and staging buffers, behind one lock: the queue is a
single ordered stream anyway. Handles are per instance. Errors wgpu
raises become :class:`Backend` with wgpu's message, and
:class:`OutOfMemory` when the device is out of memory or a tensor is
larger than its largest buffer.

The executor (:mod:`hetflow.executors.vulkan`) records its dispatches
with a :class:`Recording` and keeps its activations as :class:`Tensor`
buffers of a :class:`Device`.

Examples
--------
>>> kernel_source("unary", EXPR="max(x, 0.0)").count("max(x, 0.0)")
1
>>> Tensor(None, (2, 3), Dtype.bf16).nbytes
12
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hetflow.executors.base import Backend, BoundDevice, Dtype, ExecutorError, OutOfMemory

__all__ = ["Device", "Tensor", "Recording", "AdapterDevice", "adapters", "describe", "wgpu_version",
           "enumeration_chatter", "kernel_source", "wgpu_error", "STAGING_CHUNK", "KERNELS", "MAX_GROUPS"]

KERNELS = Path(__file__).with_name("wgsl")
STAGING_CHUNK = 64 << 20
"""Largest staging buffer, in bytes; larger transfers go in chunks of this size."""

MAX_GROUPS = 65535
"""The most workgroups one dispatch may have in each dimension."""

_TYPE_ORDER = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3, "Unknown": 4}
_DEVICE_TYPE = {"DiscreteGPU": "discrete-gpu", "IntegratedGPU": "integrated-gpu", "VirtualGPU": "virtual-gpu",
                "CPU": "cpu", "Unknown": "unknown"}
"""wgpu's adapter types as the ``device_type`` the cost model reads: ``cpu`` is a device whose memory is host
memory (lavapipe), so a bridge to it is a host memcpy, not a PCIe transfer."""


def wgpu_version() -> str | None:
    """The installed wgpu's version, or None when it does not import."""
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
    with _StderrCaptured() as chatter:
        found = [a for a in wgpu.gpu.enumerate_adapters_sync() if a.info.get("backend_type") == "Vulkan"]
    global _ENUMERATION_CHATTER
    _ENUMERATION_CHATTER = chatter.text()
    return tuple(sorted(found, key=lambda a: _TYPE_ORDER.get(a.info.get("adapter_type", "Unknown"), 4)))


_ENUMERATION_CHATTER = ""


def enumeration_chatter() -> str:
    """What the Vulkan loader and drivers printed while adapters were enumerated."""
    return _ENUMERATION_CHATTER


class _StderrCaptured:
    """Collect what C code writes to file descriptor 2 (Mesa's WSI layers print
    about a missing XDG_RUNTIME_DIR while the loader starts) instead of
    letting it reach the user's terminal between hetflow's own lines."""

    def __enter__(self) -> "_StderrCaptured":
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


@dataclass(frozen=True)
class AdapterDevice(BoundDevice):
    """A :class:`BoundDevice` that also says what kind of device the adapter is.

    The cost model prices a bridge by where the device's memory lives, and
    only the adapter knows that: ``device_type`` ``cpu`` (lavapipe) is host
    memory, a ``discrete-gpu`` sits across PCIe.
    """

    device_type: str = "unknown"
    #: the adapter's ``max-storage-buffer-binding-size`` and ``max-buffer-size``, which the executor's device
    #: asks for: a kernel binds no tensor larger than the first, and no tensor is larger than the second
    max_binding_bytes: int | None = None
    max_buffer_bytes: int | None = None


def describe(adapter: Any, index: int) -> AdapterDevice:
    """A :class:`BoundDevice` from an adapter's info: name, vendor, device type, backend."""
    info = adapter.info
    kind = info.get("adapter_type", "Unknown")
    if kind == "CPU":
        kind_text = "CPU-type adapter (a software Vulkan device running on the host CPU, not a GPU)"
    else:
        kind_text = f"{kind} adapter"
    vendor = info.get("vendor") or f"vendor 0x{info.get('vendor_id', 0):04x}"
    name = f"{info.get('device', '?')}: {kind_text}, {vendor}, {info.get('backend_type', '?')}, {info.get('description', '')}".rstrip(", ")
    try:
        limits = adapter.limits
        binding, largest = int(limits["max-storage-buffer-binding-size"]), int(limits["max-buffer-size"])
    except Exception:  # noqa: BLE001 - an adapter that does not say its limits: the run finds them
        binding = largest = None
    return AdapterDevice(f"vulkan:{index}:{info.get('vendor_id', 0):04x}:{info.get('device_id', 0):04x}", name,
                         device_type=_DEVICE_TYPE.get(kind, "unknown"), max_binding_bytes=binding,
                         max_buffer_bytes=largest)


@lru_cache(maxsize=None)
def kernel_source(template: str, **subs: Any) -> str:
    """The WGSL of ``template`` (a file in ``wgsl/``) with every ``{{KEY}}`` filled from ``subs``."""
    if template == "source":  # a user's op brings its own WGSL (ops.Kernel("source", code))
        return subs["CODE"]
    text = (KERNELS / f"{template}.wgsl").read_text()
    if template in ("widen", "narrow"):
        text = (KERNELS / "dtypes.wgsl").read_text() + "\n" + text
    if "{{LIB}}" in text:
        text = text.replace("{{LIB}}", (KERNELS / "math.wgsl").read_text())
    for key, value in subs.items():
        text = text.replace("{{" + key + "}}", str(value))
    return text


def wgpu_error(e: Exception, what: str, node: str | None = None) -> ExecutorError:
    """What wgpu raised as hetflow's error: :class:`OutOfMemory`, or :class:`Backend` with wgpu's message."""
    import wgpu

    if isinstance(e, ExecutorError):
        return e
    if isinstance(e, (wgpu.GPUOutOfMemoryError, MemoryError)):
        err: ExecutorError = OutOfMemory(f"{what}: {e}")
        err.node = node
        return err
    return Backend(f"{what}: {type(e).__name__}: {str(e).strip()}", node=node)


class Device:
    """One wgpu device per adapter in the process: queue, pipelines, staging, one lock."""

    _instances: dict[int, "Device"] = {}
    _guard = threading.Lock()

    @classmethod
    def get(cls, index: int) -> "Device":
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
            raise wgpu_error(e, "creating the Vulkan device") from None
        self.queue = self.device.queue
        self.max_buffer = int(self.device.limits["max-buffer-size"])
        self.max_binding = int(self.device.limits["max-storage-buffer-binding-size"])
        self.lock = threading.RLock()
        self._pipelines: dict[tuple, Any] = {}
        self.compiled: list[tuple[str, float]] = []
        """(template, ``time.time()`` when its compile ended) per pipeline compiled, in order: what shows
        whether a run paid for a compile inside a partition or its warm-up did."""
        self.first_dispatched: list[tuple[str, float]] = []
        """(template, ``time.time()`` when it was recorded) per pipeline's first dispatch: lavapipe compiles
        a kernel's machine code then, so a run whose kernels all ran first in its warm-up pays no compile."""
        self._dispatched: set[int] = set()
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
            raise wgpu_error(e, f"allocating {nbytes} bytes for {what}") from None

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

    def first_dispatch(self, pipe: Any, template: str) -> None:
        """Log ``pipe``'s first dispatch in :attr:`first_dispatched` (callers hold self.lock)."""
        if id(pipe) not in self._dispatched:
            self._dispatched.add(id(pipe))
            self.first_dispatched.append((template, time.time()))

    def pipeline(self, template: str, **subs: Any) -> Any:
        key = (template, tuple(sorted(subs.items())))
        if key not in self._pipelines:
            module = self.device.create_shader_module(label=template, code=kernel_source(template, **subs))
            self._pipelines[key] = self.device.create_compute_pipeline(
                label=template, layout="auto", compute={"module": module, "entry_point": "main"}
            )
            self.compiled.append((template, time.time()))
        return self._pipelines[key]


@dataclass(frozen=True)
class Tensor:
    """An activation on the device: its storage buffer, shape and dtype."""

    buffer: Any
    shape: tuple[int, ...]
    dtype: Dtype

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.dtype.nbytes(self.count)


class Recording:
    """The dispatches of one execute call, recorded into one command encoder.

    ``compile_only`` (a warm-up): the same walk allocates no tensor and
    computes nothing; each pipeline its dispatches use is compiled and,
    the first time, dispatched once on empty problems (its parameters all
    zero, one workgroup, tiny buffers of its own): creating a pipeline
    translates the shader, but lavapipe compiles its machine code through
    LLVM at its first dispatch, 5-30 ms a kernel.
    """

    def __init__(self, dev: Device, compile_only: bool = False) -> None:
        self.dev = dev
        self.compile_only = compile_only
        self.encoder = dev.device.create_command_encoder()
        self.pass_ = self.encoder.begin_compute_pass()
        self.keep: list[Any] = []  # parameter buffers, alive until the submit
        self.checks: list[tuple[Any, Any, str | None]] = []

    def new(self, shape: Sequence[int], dtype: Dtype, what: str) -> Tensor:
        shape = tuple(int(d) for d in shape)
        if self.compile_only:
            return Tensor(None, shape, dtype)
        return Tensor(self.dev.buffer(dtype.nbytes(math.prod(shape)), what), shape, dtype)

    def dispatch(self, template: str, subs: dict, buffers: Sequence[Any], params: Sequence[int], groups: tuple[int, int, int]) -> None:
        dev = self.dev
        if self.compile_only:
            compiled = len(dev.compiled)
            pipe = dev.pipeline(template, **subs)
            # a user's kernel ("source") is not run on made-up parameters: it compiles at its first real dispatch
            if len(dev.compiled) > compiled and template != "source":
                self._bind(pipe, [dev.buffer(16, "a warm-up's empty tensor") for _ in buffers], [0] * len(params))
                self.pass_.dispatch_workgroups(1, 1, 1)
                dev.first_dispatch(pipe, template)
            return
        for b in buffers:
            if b.size > dev.max_binding:
                raise OutOfMemory(f"a tensor of {b.size} bytes exceeds the device's largest storage binding "
                                  f"({dev.max_binding} bytes)")
        if max(groups) > MAX_GROUPS:
            raise Backend(f"{template}: dispatch of {groups} workgroups exceeds the limit of {MAX_GROUPS} per dimension")
        pipe = dev.pipeline(template, **subs)
        self._bind(pipe, buffers, params)
        self.pass_.dispatch_workgroups(*groups)
        dev.first_dispatch(pipe, template)

    def _bind(self, pipe: Any, buffers: Sequence[Any], params: Sequence[int]) -> None:
        dev = self.dev
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

    def check(self, status: Any, explain: Any, node: str | None = None) -> None:
        """After the submit, read the 4-byte ``status`` buffer a kernel sets when its input is invalid;
        nonzero raises :class:`Backend` with ``explain(word)``."""
        if not self.compile_only:
            self.checks.append((status, explain, node))

    def submit(self) -> None:
        self.pass_.end()
        self.dev.queue.submit([self.encoder.finish()])
        self.keep.clear()

    def raise_failed_checks(self) -> None:
        """The first failed :meth:`check` as :class:`Backend`; reading a status waits for the submit."""
        checks, self.checks = self.checks, []
        for status, explain, node in checks:
            word = int(np.frombuffer(self.dev.download(status, 4), np.uint32)[0])
            if word:
                raise Backend(explain(word), node=node)
