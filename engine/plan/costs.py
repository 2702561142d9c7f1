"""The planner's cost model: seconds to run a stage on a vendor, seconds to bridge a tensor.

The planner places free stages to minimise one number, the plan's
*estimated time*: the sum, over every stage, of its execution estimate on
the executor it runs on, plus, over every bridge, its transfer estimate.
It is a sum (as if every task ran one after another), which is what the
placement decides; overlap between executors is left to Dask.

Execution: a roofline with a fixed overhead, StarPU's ``dmda`` idea
without the calibration run::

    exec_s(stage, vendor) = launch_s + max(flops / flops_per_s, bytes / bytes_per_s)

where the stage's :class:`Work` (``flops``, ``bytes`` read and written)
comes from a per-op rule in :data:`OP_RULES` (op name -> rule), with
:func:`default_rule` for every op without one (one flop per output
element, every input and the output touched once). A vendor's
:class:`DeviceProfile` holds ``flops_per_s``, ``bytes_per_s`` and
``launch_s``.

Transfer: a bridge exports on the source, carries portable bytes and
imports on the destination: two tasks and a link::

    transfer_s(bytes, src, dst) = latency_s + bytes / bytes_per_s

from the :class:`Link` for the vendor pair in :data:`LINKS` (host memcpy
between two CPU executors, PCIe between host and device, a device copy
between two devices of one vendor). ``latency_s`` includes the Dask
overhead of the bridge's two tasks, so a bridge is never free. A vendor
is not where memory is, though: a Vulkan device of type ``cpu`` (lavapipe,
Mesa's software device) keeps its buffers in host memory, so
:func:`device_link` prices a bridge by each end's *device type* (the
``device_type`` of the executor's :class:`BoundDevice`, as the inventory
reports it): an end of type ``cpu`` is host memory, and a bridge between
two host-memory ends is :data:`HOST_MEMORY_LINK`, host memcpy, whatever
the vendors.

Emulator phases: a phase runs on its emulator, never on an executor, so
it is priced but never moved. Its estimate is its steps at the measured
rate of its backend (:data:`PHASE_RATES`, from ``bench/results.json``'s
``bench_emulator`` rows) plus Dask's overhead per task::

    phase_s(phase, backend, steps, tasks) = tasks * task_s + steps / rate

except a ``witness`` phase (one task per chunk), priced as it runs
in-process (:meth:`CostModel.witness_in_process_s`: its rows' replay and
the first touch of their bytes, a cost per chunk, the client's threads);
on a cluster :func:`hetflow.engine.run.clusterphases.witness_where` compares
that with :meth:`CostModel.witness_cluster_s` and picks the faster.

At plan time the guest has not run, so ``steps`` is the emulator's
``max_steps``: the estimate is an upper bound. A phase's array (a
``witness`` table) is host memory when the phase ends; a bridge from it
is the destination executor's import alone (:data:`IMPORT_LINKS`): one
host copy into a CPU executor, a host-to-device copy into a device.

The figures are planning numbers from published measurements (see
``/work/shared/research/placement-and-bridges.md`` §8: host memcpy
5-10 GB/s per core, PCIe Gen4 pinned about 25 GB/s and pageable 1.4-8
GB/s), not a calibration of this machine. The model is replaceable:
pass any object with ``exec_s``, ``transfer_s``, ``link`` and ``name`` to
:func:`hetflow.engine.plan.planner.plan`. Its methods must be pure functions of
their arguments: the planner asks once per distinct question (op, shapes,
dtype, vendor; bytes and vendor pair) and reuses the answer.

Examples
--------
>>> from hetflow.executors.base import Dtype, Vendor
>>> model = CostModel()
>>> w = model.work("matmul", [(64, 128), (128, 256)], (64, 256), Dtype.fp32)
>>> w.flops, w.bytes
(4194304, 229376)
>>> model.exec_s("matmul", [(64, 128), (128, 256)], (64, 256), Dtype.fp32, Vendor.cpu) > \\
...     model.exec_s("matmul", [(64, 128), (128, 256)], (64, 256), Dtype.fp32, Vendor.cuda)
True
>>> round(model.transfer_s(10**9, Vendor.cpu, Vendor.cuda), 3)
0.167
>>> device_link(Vendor.cpu, Vendor.vulkan, None, "cpu").description
'host memory of a CPU-type device, memcpy (export copy + import copy)'
>>> device_link(Vendor.cpu, Vendor.vulkan, None, "discrete-gpu").description
'PCIe, pageable host staging'
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from hetflow.engine.manifest.phasedecl import EMULATOR_BRIDGE, EmulatorDecl, PhaseDecl
from hetflow.executors import ops as oplib
from hetflow.executors.base import Dtype, Vendor

__all__ = [
    "split_exec_s",
    "split_capacity",
    "split_move_link",
    "split_move_s",
    "SPLIT_MOVE",
    "SPLIT_MOVE_LINKS",
    "Work",
    "DeviceProfile",
    "Link",
    "OP_RULES",
    "PROFILES",
    "LINKS",
    "HOST_STAGING",
    "DEVICE_COPY",
    "default_rule",
    "compute_width",
    "CostModel",
    "human_bytes",
    "host_memory",
    "memory_bound_warning",
    "EMULATOR_IMPORT",
    "PHASE_RATES",
    "IMPORT_LINKS",
    "HOST_MEMORY_TYPES",
    "HOST_MEMORY_LINK",
    "device_link",
    "device_import_link",
]

Shape = tuple[int, ...]

HOST_STAGING = "portable host staging"
DEVICE_COPY = "same-vendor device copy"
EMULATOR_IMPORT = EMULATOR_BRIDGE
SPLIT_MOVE = "move between one executor's devices"


@dataclass(frozen=True)
class Work:
    """What one stage does: floating-point operations and bytes read plus written."""

    flops: int
    bytes: int


@dataclass(frozen=True)
class DeviceProfile:
    flops_per_s: float
    bytes_per_s: float
    launch_s: float


@dataclass(frozen=True)
class Link:
    """How a bridge between two vendors moves bytes."""

    kind: str
    bytes_per_s: float
    latency_s: float
    description: str


def _elements(shape: Shape | None) -> int:
    return 0 if shape is None else math.prod(shape)


def _bytes(shape: Shape | None, dtype: Dtype) -> int:
    return 0 if shape is None else dtype.nbytes(_elements(shape))


def compute_width(dtype: Dtype) -> int:
    """Bytes per element a stage of output ``dtype`` reads its inputs at: its compute type's width.

    Inputs are widened to float32 before the op (the numeric rule), to
    float64 for an fp64 stage; a stage that makes integers computes on
    them in their own width. A bool stage (a comparison) reads the float32
    values it compares.

    >>> [compute_width(d) for d in (Dtype.fp16, Dtype.fp64, Dtype.int64, Dtype.uint8, Dtype.bool)]
    [4, 8, 8, 1, 4]
    """
    if dtype is Dtype.fp64:
        return 8
    if dtype.kind == "int":
        return dtype.numpy.itemsize
    return 4


def default_rule(flops_per_element: int = 1) -> Callable[..., Work]:
    """An elementwise rule: ``flops_per_element`` per output element, every tensor touched once."""

    def rule(inputs: Sequence[Shape | None], output: Shape | None, dtype: Dtype) -> Work:
        n = _elements(output)
        # inputs arrive at their producer's dtype; the executor widens them to the compute type first
        width = compute_width(dtype)
        read = sum(width * _elements(s) for s in inputs)
        return Work(flops_per_element * n, read + _bytes(output, dtype))

    return rule


def _matmul(inputs: Sequence[Shape | None], output: Shape | None, dtype: Dtype) -> Work:
    a, b = inputs
    if a is None or b is None or output is None:
        return Work(0, 0)
    inner = a[-1]
    return Work(2 * _elements(output) * inner, compute_width(dtype) * (_elements(a) + _elements(b)) + _bytes(output, dtype))


def _generator(flops_per_element: int) -> Callable[..., Work]:
    def rule(inputs: Sequence[Shape | None], output: Shape | None, dtype: Dtype) -> Work:
        return Work(flops_per_element * _elements(output), _bytes(output, dtype))

    return rule


OP_RULES: dict[str, Callable[[Sequence[Shape | None], Shape | None, Dtype], Work]] = {
    "matmul": _matmul,
    # numpy's generators run on the host for every executor; their cost is the drawing
    "random.normal": _generator(20),
    "random.uniform": _generator(10),
    "zeros": _generator(0),
    "ones": _generator(0),
    "arange": _generator(1),
    "load": _generator(0),
    "gelu": default_rule(12),
    "silu": default_rule(6),
    "softmax": default_rule(6),
    "div": default_rule(4),
    "transpose": default_rule(0),
    "reshape": default_rule(0),
    "cast": default_rule(1),
}
"""Per-op work rules; an op not listed uses ``default_rule()``."""

PROFILES: dict[Vendor, DeviceProfile] = {
    # one numpy call on one core: ~20 GFLOP/s vectorised, ~5 GB/s touched, ~10 us of Python per op
    Vendor.cpu: DeviceProfile(flops_per_s=2e10, bytes_per_s=5e9, launch_s=1e-5),
    # a data-centre GPU through cupy: tens of TFLOP/s, ~1.5 TB/s HBM, ~20 us per kernel launch from Python
    Vendor.cuda: DeviceProfile(flops_per_s=2e13, bytes_per_s=1.5e12, launch_s=2e-5),
    Vendor.rocm: DeviceProfile(flops_per_s=2e13, bytes_per_s=1.5e12, launch_s=2e-5),
    Vendor.vulkan: DeviceProfile(flops_per_s=5e12, bytes_per_s=4e11, launch_s=5e-5),
}

_TASKS_S = 2 * 2.5e-4  # a bridge is two Dask tasks (export, import), ~0.25 ms each in-process

LINKS: dict[tuple[Vendor, Vendor], Link] = {}
for _src in Vendor:
    for _dst in Vendor:
        if _src is Vendor.cpu and _dst is Vendor.cpu:
            LINKS[_src, _dst] = Link(HOST_STAGING, 5e9, _TASKS_S, "host memcpy (export copy + import copy)")
        elif _src is _dst:
            LINKS[_src, _dst] = Link(DEVICE_COPY, 2.5e10, _TASKS_S + 1e-5, f"{_src.value} device to device")
        elif Vendor.cpu in (_src, _dst):
            LINKS[_src, _dst] = Link(HOST_STAGING, 6e9, _TASKS_S + 1e-5, "PCIe, pageable host staging")
        else:
            LINKS[_src, _dst] = Link(HOST_STAGING, 3e9, _TASKS_S + 2e-5, "PCIe twice, through host memory")


IMPORT_LINKS: dict[Vendor, Link] = {
    # the import's one copy (an executor-to-executor bridge makes two, export and import: 5 GB/s for both)
    v: Link(EMULATOR_IMPORT, 1e10, _TASKS_S / 2, "host memory, the import's copy") if v is Vendor.cpu
    else Link(EMULATOR_IMPORT, 6e9, _TASKS_S / 2 + 1e-5, "PCIe, pageable host staging")
    for v in Vendor
}
"""How an emulator phase's array reaches an executor of each vendor: the import task alone."""

HOST_MEMORY_TYPES = frozenset({"cpu"})
"""Device types whose memory is host memory: Vulkan's ``CPU`` adapter type (lavapipe), as
:class:`hetflow.executors.vulkan_device.AdapterDevice` names it."""

HOST_MEMORY_LINK = Link(HOST_STAGING, 5e9, _TASKS_S + 1e-5,
                        "host memory of a CPU-type device, memcpy (export copy + import copy)")
"""A bridge between host memory and a CPU-type device (or two of them): the export's and the import's
copies, each a memcpy (a staging buffer mapped in host memory, then a copy on the device, which is the
host's CPU), at the host memcpy rate of two CPU executors; the extra 10 us is the device's submit."""


SPLIT_MOVE_LINKS: dict[tuple[Vendor, str], Link] = {
    # inside one executor: no Dask task and no export/import, only the copy and its call
    (Vendor.cpu, "host"): Link(SPLIT_MOVE, 1e10, 1e-5, "host memcpy between two core sets or NUMA nodes"),
    **{(v, "peer"): Link(SPLIT_MOVE, 2.5e10, 1e-5, f"{v.value} peer copy, GPU to GPU (NVLink or PCIe peer to peer)")
       for v in (Vendor.cuda, Vendor.rocm)},
    **{(v, "staged"): Link(SPLIT_MOVE, 3e9, 2e-5, f"{v.value} through host memory (PCIe out, then in)")
       for v in (Vendor.cuda, Vendor.rocm, Vendor.vulkan)},
}
"""How a piece moves between two devices of one split executor, by vendor and kind
(:func:`hetflow.executors.split_layout.move_kind`): ``host`` on the CPU, ``peer`` where two GPUs may read each
other's memory, ``staged`` through host memory where not (and always on Vulkan, which has no peer copy)."""


def split_move_link(vendor: Vendor, kind: str | None = None) -> Link:
    """The link of a move of ``kind`` (``peer`` or ``staged``; None: the vendor's usual one) between two devices
    of one ``vendor`` executor. A CPU executor's devices share host memory; a Vulkan executor's adapters stage.

    >>> split_move_link(Vendor.cuda, "peer").bytes_per_s > split_move_link(Vendor.cuda, "staged").bytes_per_s
    True
    >>> split_move_link(Vendor.cpu, "peer").kind == SPLIT_MOVE, split_move_link(Vendor.vulkan).description
    (True, 'vulkan through host memory (PCIe out, then in)')
    """
    if vendor is Vendor.cpu:
        return SPLIT_MOVE_LINKS[vendor, "host"]
    if vendor is Vendor.vulkan or kind == "staged":
        return SPLIT_MOVE_LINKS[vendor, "staged"]
    return SPLIT_MOVE_LINKS[vendor, "peer"]


def split_move_s(vendor: Vendor, nbytes: int | None, kind: str | None = None) -> float:
    """Seconds to move ``nbytes`` between two devices of one ``vendor`` executor by :func:`split_move_link`.

    >>> round(split_move_s(Vendor.cuda, 10**9, "staged") / split_move_s(Vendor.cuda, 10**9, "peer"), 1)
    8.3
    """
    link = split_move_link(vendor, kind)
    return link.latency_s + (nbytes or 0) / link.bytes_per_s


def _is_host(vendor: Vendor, device_type: str | None) -> bool:
    return vendor is Vendor.cpu or device_type in HOST_MEMORY_TYPES


def device_link(src: Vendor, dst: Vendor, src_type: str | None = None, dst_type: str | None = None,
                links: Mapping[tuple[Vendor, Vendor], Link] | None = None) -> Link:
    """The link of a bridge from a ``src_type`` device of vendor ``src`` to a ``dst_type`` one of ``dst``.

    Types are the inventory's (``cpu``, ``discrete-gpu``, ``integrated-gpu``,
    ``virtual-gpu``, ``unknown``; ``None`` when not known). Both ends in host
    memory: :data:`HOST_MEMORY_LINK` when a device is one of them (two CPU
    executors keep their own link); one end a CPU-type device, the other a
    device across PCIe: the host's link to that device; else ``links``'
    (default :data:`LINKS`) link for the vendor pair.

    >>> device_link(Vendor.vulkan, Vendor.cpu, "cpu", None).bytes_per_s == LINKS[Vendor.cpu, Vendor.cpu].bytes_per_s
    True
    >>> device_link(Vendor.vulkan, Vendor.cuda, "cpu", "discrete-gpu") == LINKS[Vendor.cpu, Vendor.cuda]
    True
    >>> device_link(Vendor.vulkan, Vendor.vulkan, "discrete-gpu", "discrete-gpu").kind
    'same-vendor device copy'
    """
    links = LINKS if links is None else links
    host_src, host_dst = _is_host(src, src_type), _is_host(dst, dst_type)
    if host_src and host_dst:
        return links[src, dst] if src is Vendor.cpu and dst is Vendor.cpu else HOST_MEMORY_LINK
    return links[Vendor.cpu if host_src else src, Vendor.cpu if host_dst else dst]


def device_import_link(dst: Vendor, dst_type: str | None = None) -> Link:
    """How an emulator phase's host array reaches a ``dst_type`` device of vendor ``dst``: one host copy into
    a CPU executor or a CPU-type device (:data:`IMPORT_LINKS`' cpu link), else ``dst``'s link."""
    return IMPORT_LINKS[Vendor.cpu if _is_host(dst, dst_type) else dst]


PHASE_RATES: dict[tuple[str, str], float | None] = {
    # bench_emulator, "emulate sort.elf with min traces": fast whole run 225.0 M steps/s, reference 0.308 M steps/s
    ("execute", "fast"): 2.25e8,
    ("execute", "reference"): 3.08e5,
    # "execute() with MO and RH runners": 75.1 M steps/s end to end; the runners are what these phases wait for
    ("mem-plans", "fast"): 7.51e7,
    ("rom-histogram", "fast"): 7.51e7,
    # the reference derives them by replaying the min traces, at its execution rate
    ("mem-plans", "reference"): 3.08e5,
    ("rom-histogram", "reference"): 3.08e5,
    # "witness tables of sort.elf chunks": 29.6 M rows/s on one thread; a row is a step
    ("witness", "fast"): 2.96e7,
    ("witness", "reference"): 3.08e5,
    # native_main.run of sha256.elf over 1 MiB with min traces (bench_emulator's native row): 1.70 G steps/s of
    # CPU time, best of 8, on 2026-12-03 (2.08 G wall at a quieter minute); its MO and RH runners and witness
    # rows run translated code too, without numba: bench_emulator.native_runner_rows, side by side with fast's
    # on 22.9 M steps (2026-12-05), measured MO 2.6x, RH 5.4x, witness 3.8-4.2x fast's; the lower ends here
    ("execute", "native"): 1.70e9,
    ("mem-plans", "native"): 7.51e7 * 2.6,
    ("rom-histogram", "native"): 7.51e7 * 5.4,
    ("witness", "native"): 2.96e7 * 3.8,
    ("plan", "native"): None,
    # packing instances from per-chunk counters does not depend on the steps
    ("plan", "fast"): None,
    ("plan", "reference"): None,
}
"""Steps per second of each (phase, backend); ``None``: the phase's time does not grow with the steps."""

# The numba-compiled interpreter loads from numba's disk cache once per process, in the first phase that runs
# it: 0.57 s for a first fast ``execute`` of a 1.6 M-step SHA-256 guest against 0.01 s for the second, and
# 0.61 s for a first witness chunk after a native ``execute`` against 0.002 s (2-core VM, 2026-12-05), before the
# native backend's runners and replay moved to translated code: no native phase loads it now.
INTERPRETER_LOAD_S = 0.55
_ON_INTERPRETER = {("execute", "fast"), ("mem-plans", "fast"), ("rom-histogram", "fast"), ("witness", "fast")}


# Where a witness phase runs on a cluster (:func:`hetflow.engine.run.clusterphases.witness_where`), from
# ``python bench/bench_witness.py --cluster`` (SHA-256, 1,024-step chunks, 705 and 4,551 of them, a 2-core VM
# shared with other work, 2026-12-05). A row costs its replay at ``PHASE_RATES`` plus the first touch of its 128
# bytes in a fresh table (the batches' thread CPU time on a worker: 0.66-0.73 s for 4,659,981 rows, 0.145 us a
# row, against 0.034 us of replay). In-process a chunk adds its threaded-scheduler task and its events. On a
# cluster a chunk adds its min trace packed into its batch's arrays and its event emitted, on the client one
# after another (2.3 us and about 2.5 us for 4,551 traces), and its trace read back on its worker (5 us); a
# batch is a task queued, run and answered (5.5 ms: the 1- and 2-worker spans, 0.76-0.80 s in 5 batches and
# 0.45-0.49 s in 12); a phase starts 30 ms after ``execute`` ends (the workers asked, the table made, the
# batches packed and the first one started). Rows from a worker on another host cross a network.
WITNESS_TOUCH_BYTES_S = 1.15e9
WITNESS_CHUNK_S = 4.5e-5
WITNESS_CLIENT_CHUNK_S = 5.0e-6
WITNESS_WORKER_CHUNK_S = 5.0e-6
WITNESS_BATCH_S = 5.5e-3
WITNESS_CLUSTER_START_S = 3.0e-2
WITNESS_NETWORK_BYTES_S = 1.0e9
# Threads of one process share the GIL around each chunk's replay: "witness tables of sort.elf chunks" ran 1.23x
# faster on 2 threads than on 1; the reference backend is Python throughout and gains nothing.
WITNESS_THREAD_GAIN = {"fast": 0.23, "native": 0.23, "reference": 0.0}


def interpreter_loaded() -> bool:
    """Whether this process has the compiled interpreter loaded already (a plan then prices no load)."""
    import sys

    kernel = sys.modules.get("hetflow.executors.emulator.fast_kernel")
    return bool(getattr(getattr(kernel, "_run", None), "signatures", None))


def split_exec_s(model: Any, op: str, inputs: Sequence[Shape | None], output: Shape | None, dtype: Dtype,
                 vendor: Vendor, device: Any, args: Mapping[str, Any] | None = None,
                 held: Sequence[int | None] | None = None) -> float:
    """A stage's estimate on an executor over several devices (``device`` a
    :class:`~hetflow.executors.base.DeviceSet`): the devices compute their
    pieces at once, so the stage takes as long as the slowest piece.

    A GPU or a Vulkan adapter brings its own throughput: two even devices
    halve the work's time. A CPU device (a NUMA node or a core set) is a
    share of the one host the CPU profile describes, so the split is
    priced with the combined throughput of the host: even shares on even
    devices cost what the unsplit executor costs, uneven ones more. An op
    that does not divide at these shapes runs on the first device (the
    same question the executor asks: :func:`hetflow.executors.split_layout.layout`).
    On a GPU or an adapter, an input every device reads whole (matmul's
    weights) lies on the first device and is copied to each other one:
    priced as the vendor's usual move (:func:`split_move_s`: a peer copy
    between GPUs, through host memory on Vulkan); CPU devices read it in
    the one host memory.

    ``held`` says how each input lies on the executor's devices when the
    stage starts: the axis its pieces are cut along (what its producer's
    rule yields; an import is laid out by rows, axis 0), or None where it
    lies whole on the first device. Left out, every input lies as the rule
    reads it. An input the rule cuts along another axis is cut anew, a
    move between the devices (:func:`hetflow.executors.split_layout.arrange`):
    from one device, all but the first device's share moves; from pieces
    along another axis, all but the parts each device already holds
    (``1 - sum(share**2)``). Each is priced as the vendor's move
    (:func:`split_move_s`; a host memcpy on the CPU).

    >>> from hetflow.executors.base import DeviceSet
    >>> m, shapes = CostModel(), [(4096, 4096), (4096, 4096)]
    >>> one = m.exec_s("matmul", shapes, (4096, 4096), Dtype.fp32, Vendor.cuda)
    >>> two = split_exec_s(m, "matmul", shapes, (4096, 4096), Dtype.fp32, Vendor.cuda, DeviceSet((0, 1)))
    >>> round((two - split_move_s(Vendor.cuda, 4096 * 4096 * 4)) / one, 2), round(two / one, 2)  # the weights' copy
    (0.5, 0.89)
    >>> cpu = m.exec_s("matmul", shapes, (4096, 4096), Dtype.fp32, Vendor.cpu)
    >>> split_exec_s(m, "matmul", shapes, (4096, 4096), Dtype.fp32, Vendor.cpu, DeviceSet((0, 1))) == cpu
    True
    >>> split_exec_s(m, "matmul", shapes, (4096, 4096), Dtype.fp32, Vendor.cpu, DeviceSet((0, 1), (3, 1))) > cpu
    True

    A matmul whose activations lie whole on the first GPU (its producer did
    not split) moves half of them before the pieces start:

    >>> as_wanted = split_exec_s(m, "matmul", shapes, (4096, 4096), Dtype.fp32, Vendor.cuda, DeviceSet((0, 1)))
    >>> whole = split_exec_s(m, "matmul", shapes, (4096, 4096), Dtype.fp32, Vendor.cuda, DeviceSet((0, 1)),
    ...                      held=(None, None))
    >>> round((whole - as_wanted) / split_move_s(Vendor.cuda, 4096 * 4096 * 4 // 2), 2)
    1.0
    """
    seconds = model.exec_s(op, inputs, output, dtype, vendor, **({"args": args} if args else {}))
    indexes = getattr(device, "indexes", None)
    if not indexes or len(indexes) < 2:
        return seconds
    from hetflow.executors.split_layout import layout

    found = layout(op, inputs, dict(args or {}), dtype)
    if found is None:
        return seconds
    profile = getattr(model, "profiles", {}).get(vendor)
    launch = profile.launch_s if profile is not None else 0.0
    shares = device.shares(len(indexes))
    own = 1.0 / len(indexes) if vendor is Vendor.cpu else 1.0  # each device's part of the profile's throughput
    piece_s = launch + (seconds - launch) * max(share / own for share in shares)
    moved = 0.0
    for shape, axis, lies in zip(inputs, found[0].inputs, held if held is not None else found[0].inputs):
        if axis is not None and lies != axis:
            keep = shares[0] if lies is None else sum(share * share for share in shares)
            moved += (_bytes(shape, dtype) or 0) * (1.0 - keep)
    if moved:
        piece_s += split_move_s(vendor, int(moved))
    if vendor is Vendor.cpu:
        return piece_s
    shared = sum(_bytes(shape, dtype) for shape, axis in zip(inputs, found[0].inputs) if axis is None)
    return piece_s + ((len(indexes) - 1) * split_move_s(vendor, shared) if shared else 0.0)


def split_capacity(memory: Sequence[int | None]) -> int | None:
    """The memory of an executor over devices with these memories: their sum, or None where one is unknown.

    A tensor larger than one device's memory but within the sum fits,
    in pieces, on the executor.

    >>> split_capacity([16 << 30, 16 << 30]) == 32 << 30, split_capacity([16 << 30, None])
    (True, None)
    """
    return None if any(m is None for m in memory) else sum(memory)  # type: ignore[arg-type]


def human_bytes(n: int | None) -> str:
    """
    >>> human_bytes(262144), human_bytes(None), human_bytes(12), human_bytes(40 * 2**50)
    ('256.0 KiB', 'unknown size', '12 B', '40.0 PiB')
    """
    if n is None:
        return "unknown size"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} EiB"



def host_memory() -> int | None:
    """This machine's physical memory in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def memory_bound_warning(p: PhaseDecl, info: Mapping[str, Any], emulator: EmulatorDecl,
                         memory: int | None = None) -> str | None:
    """Why phase ``p``'s array bound (:func:`hetflow.engine.manifest.phasedecl.planned`) cannot be met on this machine, or None.

    A witness table has one 128-byte row per step, so the bound from
    ``max_steps`` (2^28 by default: 32 GiB) can pass the machine's memory:
    a guest that ran that long would fail the run when its table is built,
    after the whole execution. ``memory`` defaults to :func:`host_memory`.

    >>> from hetflow.engine.manifest.phasedecl import planned
    >>> e = EmulatorDecl("guest", "rv64imac", "fast", "/g.elf", chunk_steps=1024, max_steps=1 << 28, input=None)
    >>> w = PhaseDecl("trace", "witness", "guest", ("run",), {})
    >>> print(memory_bound_warning(w, planned(w, e), e, memory=16 << 30))
    witness phase 'trace' may hold up to 32.0 GiB (268435456 rows, one per step up to max_steps), more than this machine's 16.0 GiB of memory; set max_steps on emulator 'guest' to the most steps its guest needs (at most 134217728 here)
    >>> memory_bound_warning(w, planned(w, e), e, memory=128 << 30) is None
    True
    """
    memory = host_memory() if memory is None else memory
    bound = info.get("bytes")
    if not memory or not bound or bound <= memory:
        return None
    fits = memory // (bound // max(int(info.get("rows_max") or emulator.max_steps), 1))
    return (f"{p.phase} phase {p.id!r} may hold up to {human_bytes(bound)} ({info.get('rows_max')} rows, one per step "
            f"up to max_steps), more than this machine's {human_bytes(memory)} of memory; set max_steps on emulator "
            f"{emulator.name!r} to the most steps its guest needs (at most {fits} here)")

class CostModel:
    """The default, replaceable cost model: per-op work rules, vendor profiles, links."""

    name = "roofline-v1"
    min_gain_s = 1e-3
    """The planner leaves the baseline placement only to save more than this (about four Dask tasks)."""

    def __init__(
        self,
        rules: Mapping[str, Callable[..., Work]] | None = None,
        profiles: Mapping[Vendor, DeviceProfile] | None = None,
        links: Mapping[tuple[Vendor, Vendor], Link] | None = None,
        device_types: Mapping[Vendor, str | None] | None = None,
    ) -> None:
        self.rules = dict(OP_RULES if rules is None else rules)
        self.profiles = dict(PROFILES if profiles is None else profiles)
        self.links = dict(LINKS if links is None else links)
        self._default = default_rule()
        self._device_types: dict[Vendor, str | None] = {Vendor.cpu: "cpu"}
        self._given_types = device_types is not None
        self.cost_failures: dict[str, str] = {}
        """Op -> why its ``cost=`` gave no figure (the first time): its stages were priced by the default rule."""
        if device_types is not None:
            self._device_types.update(device_types)

    def device_type(self, vendor: Vendor) -> str | None:
        """The type of ``vendor``'s device: as given to the model, else its first device's in the inventory
        (adapters list GPUs first); ``None`` when not known. Asked only of vendors the plan's executors run,
        whose offers the planner has already probed."""
        if vendor not in self._device_types:
            found = None
            if not self._given_types:
                from hetflow.executors import probe

                offer = probe(vendor)
                found = getattr(offer.devices[0], "device_type", None) if offer.available and offer.devices else None
            self._device_types[vendor] = found
        return self._device_types[vendor]

    def work(self, op: str, inputs: Sequence[Shape | None], output: Shape | None, dtype: Dtype,
             args: Mapping[str, Any] | None = None) -> Work:
        """The stage's work; a user's op with ``cost=`` answers for itself from its shapes and ``args``."""
        user = oplib.REGISTRY.get(op)
        if user is not None and user.cost_rule is not None and all(s is not None for s in inputs):
            try:
                flops, nbytes = user.cost_rule(list(inputs), user.with_defaults(args or {}))
                return Work(flops, nbytes)
            except Exception as e:  # noqa: BLE001 - a broken cost= falls back to the default rule; the plan warns
                self.cost_failures.setdefault(op, str(e))
        return self.rules.get(op, self._default)(inputs, output, dtype)

    def exec_s(self, op: str, inputs: Sequence[Shape | None], output: Shape | None, dtype: Dtype,
               vendor: Vendor, args: Mapping[str, Any] | None = None) -> float:
        w = self.work(op, inputs, output, dtype, args)
        p = self.profiles[vendor]
        return p.launch_s + max(w.flops / p.flops_per_s, w.bytes / p.bytes_per_s)

    def link(self, src: Vendor, dst: Vendor) -> Link:
        """:func:`device_link` for the two vendors' device types (:meth:`device_type`)."""
        return device_link(src, dst, self.device_type(src), self.device_type(dst), self.links)

    def transfer_s(self, nbytes: int | None, src: Vendor, dst: Vendor) -> float:
        link = self.link(src, dst)
        return link.latency_s + (nbytes or 0) / link.bytes_per_s

    def import_link(self, dst: Vendor) -> Link:
        """The link that carries an emulator phase's array into an executor of vendor ``dst``."""
        return device_import_link(dst, self.device_type(dst))

    def import_s(self, nbytes: int | None, dst: Vendor) -> float:
        """Seconds to import ``nbytes`` of a phase's host array on an executor of vendor ``dst``.

        >>> round(CostModel().import_s(10**9, Vendor.cpu), 4)
        0.1003
        """
        link = self.import_link(dst)
        return link.latency_s + (nbytes or 0) / link.bytes_per_s

    def phase_s(self, phase: str, backend: str, steps: int, tasks: int = 1) -> float:
        """Seconds of an emulator phase of ``steps`` steps run as ``tasks`` Dask tasks.

        A ``witness`` phase (``tasks`` its chunks) is priced as it runs by
        default, in-process on this machine's threads
        (:meth:`witness_in_process_s`), the figure a cluster's placement
        compares with its own.

        >>> round(CostModel().phase_s("execute", "fast", 225_000_000), 4)
        1.0003
        >>> m = CostModel()
        >>> threads = os.cpu_count() or 1
        >>> m.phase_s("witness", "fast", 10**6, 1000) == m.witness_in_process_s("fast", 10**6, 1000, threads)
        True
        """
        if phase == "witness" and ("witness", backend) in PHASE_RATES:
            return self.witness_in_process_s(backend, steps, tasks, os.cpu_count() or 1)
        rate = PHASE_RATES.get((phase, backend))
        return tasks * _TASKS_S / 2 + (steps / rate if rate else 0.0)

    def witness_row_s(self, backend: str) -> float:
        """Seconds of one witness row on one thread: its replay and the first touch of its bytes in a fresh table.

        >>> round(CostModel().witness_row_s("fast") * 1e9)
        145
        """
        from hetflow.executors.emulator import WITNESS_COLUMNS

        return 1 / PHASE_RATES[("witness", backend)] + len(WITNESS_COLUMNS) * 8 / WITNESS_TOUCH_BYTES_S

    def witness_in_process_s(self, backend: str, steps: int, chunks: int, threads: int) -> float:
        """Seconds of a witness phase's chunks on the client's threaded scheduler, ``threads`` threads.

        >>> round(CostModel().witness_in_process_s("fast", 4_659_981, 4551, 2), 3)
        0.716
        """
        work = steps * self.witness_row_s(backend) + chunks * WITNESS_CHUNK_S
        return work / (1 + (max(threads, 1) - 1) * WITNESS_THREAD_GAIN.get(backend, 0.0))

    def witness_cluster_s(self, backend: str, steps: int, chunks: int, threads: int, batches: int,
                          shared: bool) -> float:
        """Seconds of a witness phase's chunks in ``batches`` tasks on ``threads`` worker threads, one process
        each: the rows divide among them; the start, the batches and each chunk's share of the client's work
        do not; rows that cannot be written in place (``shared`` false: a worker on another host) cross the
        network.

        >>> m = CostModel()
        >>> round(m.witness_cluster_s("fast", 4_659_981, 4551, 1, 5, True), 3)
        0.779
        >>> round(m.witness_cluster_s("fast", 4_659_981, 4551, 2, 12, True), 3)
        0.468
        """
        from hetflow.executors.emulator import WITNESS_COLUMNS

        moved = 0.0 if shared else steps * len(WITNESS_COLUMNS) * 8 / WITNESS_NETWORK_BYTES_S
        work = steps * self.witness_row_s(backend) + chunks * WITNESS_WORKER_CHUNK_S
        return (WITNESS_CLUSTER_START_S + batches * WITNESS_BATCH_S + chunks * WITNESS_CLIENT_CHUNK_S
                + work / max(threads, 1) + moved)

    def load_s(self, phase: str, backend: str) -> float:
        """Seconds the first phase of a process that runs the compiled interpreter spends loading it.

        >>> CostModel().load_s("execute", "fast"), CostModel().load_s("execute", "native")
        (0.55, 0.0)
        """
        return INTERPRETER_LOAD_S if (phase, backend) in _ON_INTERPRETER else 0.0

    def describe(self) -> dict:
        """The model's numbers, as plan JSON carries them."""
        return {
            "name": self.name,
            "profiles": {v.value: {"flops_per_s": p.flops_per_s, "bytes_per_s": p.bytes_per_s,
                                   "launch_s": p.launch_s} for v, p in self.profiles.items()},
            "phase_rates": {f"{phase}/{backend}": rate for (phase, backend), rate in PHASE_RATES.items()},
        }
