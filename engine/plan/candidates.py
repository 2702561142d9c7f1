"""The placement problem: units, their candidate executors, and what a placement costs.

Steps 1 and 4 of :mod:`hetflow.engine.plan.placement`, and the cost
evaluation its search (step 3) calls:

* :func:`candidates` groups the stages into :class:`Unit` s (a stage, or
  a ``colocate_with:`` group) and gives each the executors it may run on;
* :class:`Problem` holds what the search needs, read from the graph once:
  each stage's execution estimate per candidate, its distinct inputs and
  consumers, and the transfer of a tensor between two executors;
* :func:`total_cost` is a placement's estimated time, :func:`local_cost`
  the part of it that moving some stages can change;
* :func:`explain` gives every stage its ``reason`` and ``why``: for each
  candidate, the stage's execution plus the bridges into and out of it,
  all other stages held where they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from hetflow.engine.adjacency import roots
from hetflow.engine.plan.costs import human_bytes
from hetflow.engine.errors import Diagnostic, ManifestError
from hetflow.executors import ops as oplib

if TYPE_CHECKING:
    from hetflow.engine.adjacency import Graph

__all__ = [
    "Unit",
    "Problem",
    "is_phase",
    "node_inputs",
    "import_s",
    "node_data",
    "candidates",
    "largest_input",
    "total_cost",
    "local_cost",
    "explain",
    "format_s",
    "vendor_offers",
    "reachable",
    "machines",
    "check_vendors",
]


def format_s(seconds: float) -> str:
    """
    >>> format_s(0.0000123), format_s(0.0123), format_s(12.3)
    ('12.3 us', '12.30 ms', '12.30 s')
    """
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


@dataclass
class Unit:
    """Stages placed together, their candidate executors and what constrained them.

    Units alike in their constraint share one ``candidates`` list: read it, never change it.
    """

    id: int
    nodes: list[str]
    candidates: list[str]
    constraint: str = ""          # "pinned", "colocated", "preference", "capability" or ""
    constraint_text: str = ""
    pinned: bool = False
    fallback: str | None = None   # the warning text when a vendor preference fell back


@dataclass
class Problem:
    """Everything the optimiser needs, precomputed once: costs are plain floats in dicts."""

    graph: Graph
    order: list[str]                                  # a topological order of the stages
    units: list[Unit]
    unit_of: dict[str, int]
    vendor: dict[str, Any]                            # executor name -> Vendor
    exec_s: dict[str, dict[str, float]]               # stage -> executor -> seconds
    consumers: dict[str, list[str]]                   # distinct consumers, in order
    model: Any
    pos: dict[str, int] = field(default_factory=dict)  # stage -> index in order
    # read from the graph once: the passes below look these up millions of times on large plans
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)   # distinct inputs, in slot order
    nbytes: dict[str, int | None] = field(default_factory=dict)
    _transfers: dict[tuple, float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.pos:
            self.pos = {n: i for i, n in enumerate(self.order)}
        attrs = node_data(self.graph)
        if not self.inputs:
            self.inputs = {n: (ins if len(ins) < 2 else tuple(dict.fromkeys(ins)))
                           for n, ins in ((n, node_inputs(attrs[n])) for n in self.order)}
        if not self.nbytes:
            self.nbytes = {n: attrs[n]["bytes"] for n in self.order}

    def transfer(self, tensor: str, src: str, dst: str) -> float:
        # the model is a pure function of bytes and vendors, and most tensors share a few sizes
        key = (self.nbytes[tensor], src, dst)
        cost = self._transfers.get(key)
        if cost is None:
            source = self.vendor[src]
            cost = self._transfers[key] = (self.model.transfer_s(key[0], source, self.vendor[dst]) if source is not None
                                           else import_s(self.model, key[0], self.vendor[dst]))
        return cost

    def tensor_cost(self, u: str, exe: Mapping[str, str]) -> float:
        consumers = self.consumers[u]
        home = exe[u]
        if len(consumers) == 1:
            dest = exe[consumers[0]]
            return 0.0 if dest == home else self.transfer(u, home, dest)
        dests = {exe[c] for c in consumers}
        dests.discard(home)
        return sum(self.transfer(u, home, d) for d in dests)

    def free_units(self) -> list[Unit]:
        return [u for u in self.units if len(u.candidates) > 1]


def is_phase(d: Mapping[str, Any]) -> bool:
    """Whether a node's attributes are an emulator phase's (placed on its emulator, never moved).

    >>> is_phase({"phase": object()}), is_phase({"stage": object()})
    (True, False)
    """
    return "phase" in d


def node_inputs(d: Mapping[str, Any]) -> tuple[str, ...]:
    """The inputs of a stage or a phase, in slot order."""
    return d["phase"].inputs if "phase" in d else d["stage"].inputs


def import_s(model: Any, nbytes: int | None, vendor: Any) -> float:
    """Seconds to bring an emulator phase's host array onto an executor of ``vendor``.

    A cost model without ``import_s`` prices it as a bridge from a CPU executor.
    """
    own = getattr(model, "import_s", None)
    if own is not None:
        return own(nbytes, vendor)
    from hetflow.executors.base import Vendor
    return model.transfer_s(nbytes, Vendor.cpu, vendor)


def node_data(graph: Graph) -> Mapping[str, dict]:
    """Each node's attribute dict (the graph's own, not a copy), as a plain mapping; read it, never change it.

    A networkx node view checks its key's type on every lookup; the passes
    below look up nodes millions of times on a large plan. The mapping is
    the graph's own node table (networkx's ``_node``, what its views
    read), so no pass pays for a copy of it.
    """
    table = getattr(graph, "_node", None)
    return table if type(table) is dict else dict(graph.nodes.items())


def _colocation_roots(graph: Graph) -> dict[str, str]:
    return roots(graph, ((n, d["stage"].colocate_with) for n, d in graph.nodes.items()
                         if "stage" in d and d["stage"].colocate_with is not None and d["stage"].colocate_with in graph
                         and d["stage"].colocate_with != n))


def _vendor_list(vs: Sequence[Any]) -> str:
    return "[" + ", ".join(v.value for v in vs) + "]"


def candidates(graph: Graph, order: Sequence[str], executors: Mapping[str, Any],
               offers: Mapping[str, Any]) -> tuple[list[Unit], dict[str, int]]:
    """Units in first-member order and each stage's unit; raises :class:`ManifestError`."""
    names = list(executors)
    problems: list[Diagnostic] = []

    def capable(stage: Any, ex: str) -> bool:
        offer = offers[ex]
        ops = getattr(offer, "ops", None)
        return stage.dtype in offer.dtypes and (not ops or stage.op in ops or _user_op_runs(offer, stage.op))

    per_node: dict[str, tuple[list[str], str, str, str | None]] = {}
    attrs = node_data(graph)
    arriving = _arriving(attrs)
    refusers = {e: f for e in names if (f := _vendor_refusal(offers[e])) is not None}
    limits = {e: found for e in refusers if (found := _size_limits(offers[e], executors[e])) is not None}
    refused: dict[str, str] = {}  # executor -> why it refuses the stage at hand
    able_for: dict[tuple, list[str]] = {}
    free: dict[tuple, tuple] = {}
    pinned: dict[str, tuple] = {}
    colocated = False
    for n in order:
        d = attrs[n]
        if "phase" in d:
            where = d["target"]
            per_node[n] = ([where], "emulator", f"emulator: {d['phase'].phase} phase, runs on {where}", None)
            continue
        stage = d["stage"]
        if stage.colocate_with:
            colocated = True
        extra = arriving(stage)
        key = (stage.op, stage.dtype._value_, extra)  # an Enum's value property is a Python-level call
        able = able_for.get(key)
        if able is None:
            able = able_for[key] = [e for e in names if capable(stage, e) and all(x in offers[e].dtypes for x in extra)]
        refused = _refused(refusers, able, stage, attrs, limits) if refusers else refused
        if refused:
            able = [e for e in able if e not in refused]
            if able and not stage.executor and not stage.vendors:
                per_node[n] = (able, "capability", _only(stage, able[0], extra, names, offers, executors, refused), None) \
                    if len(able) == 1 else (able, "", "", None)
                continue
        if not stage.executor and not stage.vendors and able:
            # the common case, one entry per op and dtype
            entry = free.get(key)
            if entry is None:
                entry = free[key] = ((able, "capability", _only(stage, able[0], extra, names, offers, executors), None)
                                     if len(able) < len(names) and len(able) == 1 else (able, "", "", None))
            per_node[n] = entry
            continue
        if stage.executor:
            ex = executors[stage.executor]
            if stage.vendors and ex.vendor not in stage.vendors:
                problems.append(Diagnostic(stage.vendor_origin, (
                    f"stage {n!r} wants vendor {_vendor_list(stage.vendors)} but its executor {ex.name!r} "
                    f"runs {ex.vendor.value} on this machine ({ex.reason})")))
            if stage.executor in refused:
                problems.append(Diagnostic(stage.origin, (
                    f"stage {n!r} cannot run on executor {stage.executor!r} ({ex.vendor.value}): {refused[stage.executor]}; "
                    f"pin it to another executor (a cpu one computes it as written)")))
            elif stage.executor not in able:
                problems.append(_dtype_problem(stage, [stage.executor], executors, offers, attrs))
            entry = pinned.get(stage.executor)
            if entry is None:
                # one entry (and one candidate list) per executor: units never change their candidates
                entry = pinned[stage.executor] = ([stage.executor], "pinned", f"pinned (executor: {stage.executor})", None)
            per_node[n] = entry
            continue
        if not able and refused:
            problems.append(Diagnostic(stage.origin, f"stage {n!r} has no executor that runs it: " + "; ".join(
                f"{e!r} ({executors[e].vendor.value}): {why}" for e, why in refused.items())
                + " (declare a cpu executor, which computes it as written)"))
            per_node[n] = (names[:1], "", "", None)
            continue
        if not able:
            problems.append(_dtype_problem(stage, names, executors, offers, attrs))
            per_node[n] = (names[:1], "", "", None)
            continue
        if stage.vendors:
            pick = next((v for v in stage.vendors if any(executors[e].vendor is v for e in able)), None)
            if pick is None:
                running = ", ".join(f"{e} {executors[e].vendor.value}" for e in names)
                problems.append(Diagnostic(stage.vendor_origin, (
                    f"stage {n!r} wants vendor {_vendor_list(stage.vendors)}, and no executor able to run it "
                    f"has one here (executors: {running})")))
                per_node[n] = (able, "", "", None)
                continue
            chosen = [e for e in able if executors[e].vendor is pick]
            skipped = stage.vendors[: stage.vendors.index(pick)]
            if skipped:
                text = f"preference: vendor {pick.value}, fell back from {_vendor_list(stage.vendors)}"
                warn = (f"stage {n!r} runs on {pick.value}: its preferred vendor "
                        f"{', '.join(v.value for v in skipped)} has no capable executor here")
            else:
                text, warn = f"preference: vendor {pick.value}, first of {_vendor_list(stage.vendors)}", None
            per_node[n] = (chosen, "preference", text, warn)
            continue
        if len(able) < len(names) and len(able) == 1:
            per_node[n] = (able, "capability", _only(stage, able[0], extra, names, offers, executors, refused), None)
            continue
        per_node[n] = (able, "", "", None)
    if problems:
        raise ManifestError(problems)

    if not colocated:
        # no colocation: every stage is its own unit, already in first-member order
        units = []
        for uid, n in enumerate(order):
            cands, kind, text, warn = per_node[n]
            units.append(Unit(uid, [n], cands, kind, text, kind == "pinned", warn))
        return units, dict(zip(order, range(len(order))))

    pos = {n: i for i, n in enumerate(order)}
    root_of = _colocation_roots(graph)
    members: dict[str, list[str]] = {}
    for n in order:
        members.setdefault(root_of[n], []).append(n)
    units: list[Unit] = []
    unit_of: dict[str, int] = {}
    for root, nodes in sorted(members.items(), key=lambda kv: pos[kv[1][0]]):
        uid = len(units)
        for n in nodes:
            unit_of[n] = uid
        if len(nodes) == 1:
            cands, kind, text, warn = per_node[nodes[0]]
            units.append(Unit(uid, nodes, cands, kind, text, kind == "pinned", warn))
            continue
        allowed = [e for e in names if all(e in per_node[n][0] for n in nodes)]
        pins = [n for n in nodes if per_node[n][1] == "pinned"]
        if not allowed:
            first = next((graph.nodes[n]["stage"] for n in nodes if graph.nodes[n]["stage"].colocate_origin), graph.nodes[nodes[0]]["stage"])
            offers_text = "; ".join(f"{n}: {', '.join(per_node[n][0])}" for n in nodes)
            problems.append(Diagnostic(first.colocate_origin or first.origin, (
                f"stages {', '.join(map(repr, nodes))} are colocated, but no executor can run them all "
                f"({offers_text})")))
            continue
        if pins:
            text = f"colocated with {', '.join(repr(m) for m in nodes if m != pins[0])} and {pins[0]!r}, pinned (executor: {allowed[0]})"
        else:
            text = f"colocated: {', '.join(map(repr, nodes))} run together"
        warn = next((per_node[n][3] for n in nodes if per_node[n][3]), None)
        units.append(Unit(uid, nodes, allowed, "colocated", text, bool(pins), warn))
    if problems:
        raise ManifestError(problems)
    return units, unit_of


def _user_op_runs(offer: Any, op: str) -> bool:
    """A user's op runs where it has a kernel, whatever the vendor's (earlier) list of ops says."""
    found = oplib.REGISTRY.get(op)
    vendor = getattr(getattr(offer, "vendor", None), "value", None)
    return found is not None and found.invoke is not None and vendor is not None and found.runs_on(vendor)


def _arriving(attrs: Mapping[str, dict]) -> Callable[[Any], tuple]:
    """The dtypes a stage's inputs arrive at other than its own, each once, in input order.

    An executor imports every input a bridge brings it, so it must support
    their dtypes too (an int64 tensor cannot be bridged to a Vulkan device,
    which has no 64-bit types). Most stages take inputs of their own dtype:
    for them this is the empty tuple.
    """
    def extra(stage: Any) -> tuple:
        own = stage.dtype
        found: tuple = ()
        for ref in stage.inputs:
            other = attrs[ref].get("stage")
            dtype = other.dtype if other is not None else arriving_dtype(attrs[ref])
            if dtype is not None and dtype is not own and dtype not in found:
                found += (dtype,)
        return found

    return extra


def arriving_dtype(d: Mapping[str, Any]) -> Any:
    """The dtype a node's output arrives at: a stage's own, an emulator phase's array's (a witness table, a
    register file: int64), None for a phase that yields no array."""
    stage = d.get("stage")
    if stage is not None:
        return stage.dtype
    name = (d.get("planned") or {}).get("dtype")
    if not name:
        return None
    from hetflow.executors.base import Dtype

    return Dtype(name)


def _only(stage: Any, able: str, extra: tuple, names: Sequence[str], offers: Mapping[str, Any],
          executors: Mapping[str, Any], refused: Mapping[str, str] | None = None) -> str:
    """The reason of a stage only one executor can run, naming an input dtype the others cannot import,
    or what an executor's vendor said when it refused the stage."""
    text = f"capability: only {able!r} runs {stage.op} at {stage.dtype.value}"
    lacking = [(e, [x for x in extra if x not in offers[e].dtypes]) for e in names if e != able]
    lacking = [(e, xs) for e, xs in lacking if xs]
    if lacking:
        text += " with " + ", ".join(x.value for x in extra) + " inputs (" + "; ".join(
            f"{e!r} ({executors[e].vendor.value}) does not support {', '.join(x.value for x in xs)}" for e, xs in lacking) + ")"
    if refused:
        text += " (" + "; ".join(f"{e!r} ({executors[e].vendor.value}): {why}" for e, why in refused.items()) + ")"
    return text


def _vendor_refusal(offer: Any) -> Callable[..., str | None] | None:
    """A vendor's own rule for the ops and dtypes it computes, where its executor has one.

    The Vulkan executor computes some ops only at some input dtypes and
    args (:func:`hetflow.executors.vulkan.refusal`); asking it at plan time
    keeps such a stage off it instead of failing the run.
    """
    vendor = getattr(getattr(offer, "vendor", None), "value", None)
    if vendor != "vulkan" or not getattr(offer, "available", True):
        return None
    try:
        from hetflow.executors import vulkan
    except Exception:  # noqa: BLE001 - a Vulkan module that does not import offers nothing to ask
        return None
    return getattr(vulkan, "refusal", None)


def _size_limits(offer: Any, executor: Any) -> tuple[int | None, int | None, str | None] | None:
    """The largest tensor a kernel of ``executor``'s device binds, the largest it holds and the device's type,
    where its offer says them (a Vulkan adapter's); None elsewhere, and for an executor over several devices,
    whose tensors are held in pieces."""
    device = getattr(executor, "device", 0)
    if len(getattr(device, "indexes", None) or ()) > 1:
        return None
    devices = getattr(offer, "devices", None) or ()
    index = int(device)
    found = devices[index] if 0 <= index < len(devices) else None
    binding, largest = getattr(found, "max_binding_bytes", None), getattr(found, "max_buffer_bytes", None)
    kind = getattr(found, "device_type", None)
    return None if binding is None and largest is None and kind is None else (binding, largest, kind)


def _too_large(op: Any, stage: Any, attrs: Mapping[str, dict], limits: tuple[int | None, int | None]) -> str | None:
    """Why ``stage`` is too large for the device: a shape the vendor's rule refuses there (attention looping
    past a software device's limit), a tensor past its largest buffer, or, for an op whose kernel binds its
    tensors, past its largest storage binding. A size that is a bound (read from a witness table) is left to
    the run."""
    binding, largest, kind = limits
    if kind is not None:
        try:
            from hetflow.executors import vulkan

            why = vulkan.shape_refusal(op, [attrs[r]["shape"] for r in stage.inputs], dict(stage.args), kind)
        except Exception:  # noqa: BLE001 - a Vulkan module that does not import has no rule to ask
            why = None
        if why:
            return why
    bound = op.wgsl is not None and op.wgsl.template != "host"
    for ref, what in ((stage.id, "output"), *((r, f"input {r!r}") for r in dict.fromkeys(stage.inputs))):
        d = attrs[ref]
        size = d.get("bytes")
        if not size or d.get("bound"):
            continue
        if largest is not None and size > largest:
            return f"its {what} of {human_bytes(size)} is larger than the device's largest buffer ({human_bytes(largest)})"
        if bound and binding is not None and size > binding:
            return (f"its {what} of {human_bytes(size)} is larger than the {human_bytes(binding)} the device's "
                    "kernels bind at once (its max-storage-buffer-binding-size)")
    return None


def _refused(refusers: Mapping[str, Callable], able: Sequence[str], stage: Any, attrs: Mapping[str, dict],
             limits: Mapping[str, tuple] | None = None) -> dict[str, str]:
    """The executors among ``able`` whose vendor refuses ``stage``, each with its reason."""
    found: dict[str, str] = {}
    asked = [e for e in able if e in refusers]
    if not asked:
        return found
    op = oplib.REGISTRY.get(stage.op)
    if op is None or op.invoke is not None:
        return found  # a user's op runs where it has a kernel: its kernels are its own rule
    inputs = [arriving_dtype(attrs[ref]) or stage.dtype for ref in stage.inputs]
    for e in asked:
        try:
            why = refusers[e](op, inputs, stage.dtype, dict(stage.args))
        except Exception as err:  # noqa: BLE001 - a vendor's rule failing on odd args refuses, with its words
            why = f"{type(err).__name__}: {err}"
        if not why and limits and e in limits:
            why = _too_large(op, stage, attrs, limits[e])
        if why:
            found[e] = why
    return found


def _dtype_problem(stage: Any, names: Sequence[str], executors: Mapping[str, Any], offers: Mapping[str, Any],
                   attrs: Mapping[str, dict] | None = None) -> Diagnostic:
    first = executors[names[0]]
    supported = ", ".join(d.value for d in offers[names[0]].dtypes)
    ops = getattr(offers[names[0]], "ops", None)
    arriving = [(ref, arriving_dtype(attrs[ref])) for ref in stage.inputs] if attrs is not None else []
    refused = [(ref, dtype) for ref, dtype in arriving if dtype is not None and dtype not in offers[names[0]].dtypes]
    where = stage.origin
    pinned = len(names) == 1 and stage.executor is not None
    others = f", nor does any other executor ({', '.join(names[1:])})" if len(names) > 1 else ""
    if stage.dtype in offers[names[0]].dtypes and ops and stage.op not in ops and not _user_op_runs(offers[names[0]], stage.op):
        what = (f"stage {stage.id!r} uses op {stage.op!r}, which executor {first.name!r} ({first.vendor.value}) does not "
                f"run{others}{remedy(stage, pinned=pinned, op=True)}")
    elif stage.dtype in offers[names[0]].dtypes and refused:
        where = stage.inputs_origin
        taken = ", ".join(f"{ref!r} at {dtype.value}" for ref, dtype in dict(refused).items())
        what = (f"stage {stage.id!r} takes {taken}, which executor {first.name!r} ({first.vendor.value}) cannot import "
                f"(supported: {supported}); cast it to a supported dtype first, or run the stage elsewhere{others}")
    else:
        what = (f"stage {stage.id!r} produces {stage.dtype.value}, which executor {first.name!r} ({first.vendor.value}) "
                f"does not support (supported: {supported}){others}{remedy(stage, pinned=pinned)}")
    return Diagnostic(where, what)


def remedy(stage: Any, *, pinned: bool, op: bool = False) -> str:
    """What the author of a stage that no executor (or its pinned one) can run does about it, in a message's words."""
    if op:
        return ("; pin the stage to an executor whose vendor runs the op (a cpu one runs every op)" if pinned
                else "; declare an executor whose vendor runs the op (a cpu one runs every op)")
    if pinned:
        return f"; give the stage a dtype: from those, or pin it to an executor that holds {stage.dtype.value}"
    return f"; give the stage a dtype: from those, or declare an executor that holds {stage.dtype.value} (a cpu one holds every dtype)"


def largest_input(p: Problem, n: str) -> str | None:
    inputs = p.inputs[n]
    if not inputs:
        return None
    if len(inputs) == 1:
        return inputs[0]
    nbytes = p.nbytes
    # the first slot wins a tie; a repeated input counts at its first slot, as ``inputs`` keeps it
    return max(((nbytes[ref] or 0, -slot, ref) for slot, ref in enumerate(inputs)))[2]


def total_cost(p: Problem, exe: Mapping[str, str]) -> float:
    """The plan's estimated time under ``exe``: every execution plus every bridge, once each."""
    exec_s, consumers, transfer = p.exec_s, p.consumers, p.transfer
    run = bridged = 0  # what ``sum`` starts from: the same additions in the same order, the same float
    for u in p.order:
        run += exec_s[u][exe[u]]
        cs = consumers[u]
        if len(cs) == 1:  # most tensors: :meth:`Problem.tensor_cost` written out
            home, dest = exe[u], exe[cs[0]]
            bridged += 0.0 if dest == home else transfer(u, home, dest)
        else:
            bridged += p.tensor_cost(u, exe)
    return run + bridged


def _moved_cost(p: Problem, nodes: Sequence[str], exe: Mapping[str, str], counts: Mapping[str, Mapping[str, int]],
                target: str) -> float:
    """:func:`_local` of ``nodes`` moved to ``target``, from per-tensor consumer counts under ``exe``."""
    if len(nodes) == 1:
        return _moved_cost_one(p, nodes[0], exe, counts, target)
    moved = set(nodes)
    adjusted: dict[str, dict[str, int]] = {}
    for n in nodes:
        for ref in p.inputs[n]:
            dests = adjusted.setdefault(ref, dict(counts[ref]))
            dests[exe[n]] -= 1
            dests[target] = dests.get(target, 0) + 1
    total = sum(p.exec_s[n][target] for n in nodes)
    for u in set(nodes) | set(adjusted):
        home = target if u in moved else exe[u]
        dests = adjusted.get(u, counts[u])
        total += sum(p.transfer(u, home, d) for d, k in dests.items() if k > 0 and d != home)
    return total


def _moved_cost_one(p: Problem, n: str, exe: Mapping[str, str], counts: Mapping[str, Mapping[str, int]],
                    target: str) -> float:
    """:func:`_moved_cost` of one stage, without copying its inputs' counts."""
    transfer = p.transfer
    total = p.exec_s[n][target]
    for d, k in counts[n].items():
        if k > 0 and d != target:
            total += transfer(n, target, d)
    here = exe[n]
    for ref in p.inputs[n]:
        home = exe[ref]
        c = counts[ref]
        for d, k in c.items():
            if d == here:
                k -= 1
            if d == target:
                k += 1
            if k > 0 and d != home:
                total += transfer(ref, home, d)
        if target not in c and target != home:
            total += transfer(ref, home, target)
    return total


def local_cost(p: Problem, nodes: Sequence[str], exe: Mapping[str, str]) -> float:
    """The part of :func:`total_cost` that moving ``nodes`` can change."""
    tensors = set(nodes)
    for n in nodes:
        tensors.update(p.inputs[n])
    return sum(p.exec_s[n][exe[n]] for n in nodes) + sum(p.tensor_cost(u, exe) for u in tensors)


def explain(p: Problem, exe: Mapping[str, str], declared_first: str) -> dict[str, tuple[str, dict]]:
    """``reason`` text and ``why`` data for every stage under the final placement ``exe``."""
    out: dict[str, tuple[str, dict]] = {}
    # How many consumers of each tensor sit on each executor under ``exe``: moving one unit changes a
    # tensor's bridges only through these counts, so a tensor with thousands of consumers is not
    # rescanned for every one of them.
    counts: dict[str, dict[str, int]] = {}
    alone: dict[str, dict[str, int]] = {}  # the counts of a tensor with one consumer, shared per executor: only read
    unread: dict[str, int] = {}  # the counts of a tensor no stage reads, shared alike
    for u, cs in p.consumers.items():
        if len(cs) == 1:
            e = exe[cs[0]]
            c = alone.get(e)
            counts[u] = c if c is not None else alone.setdefault(e, {e: 1})
            continue
        if not cs:
            counts[u] = unread
            continue
        c: dict[str, int] = {}
        for consumer in cs:
            e = exe[consumer]
            c[e] = c.get(e, 0) + 1
        counts[u] = c
    exec_s, inputs, nbytes = p.exec_s, p.inputs, p.nbytes
    # Stages alike in constraint, candidates, costs and kind (most of a large plan) share one ``why``
    # and one ``costs``: equal data, made once, and what prints it can tell them apart by identity.
    shared_costs: dict[tuple, dict[str, dict[str, float]]] = {}
    shared_why: dict[tuple, dict[str, Any]] = {}
    alike_of: dict[int, bool] = {}
    cost_text: dict[tuple, str] = {}
    # A lone stage's figures depend only on its execution row, its candidates, where it and its inputs
    # sit, their bytes and their consumers' counts: stages alike in all of these (rows, candidate
    # lists and counts are shared objects, compared by identity) are priced once.
    priced: dict[tuple, dict[str, dict[str, float]]] = {}

    def decided(unit: Any, costs: dict, kind: str, decision: str) -> tuple[str, dict[str, Any]]:
        text = f"{unit.constraint_text}; {decision}" if unit.constraint_text else decision
        # a ``costs`` object lists exactly the unit's candidates: it stands for them in the key
        key = (unit.constraint, id(costs), kind)
        why = shared_why.get(key)
        if why is None:
            why = shared_why[key] = {"constraint": unit.constraint or None, "candidates": unit.candidates,
                                     "costs": costs, "kind": kind}
        return text, why

    for unit in p.units:
        nodes = unit.nodes
        cands = unit.candidates
        here = exe[nodes[0]]
        if len(cands) == 1:
            kind = unit.constraint or "default"
            text = unit.constraint_text or f"default: {here!r} is the only executor"
            key = (unit.constraint, cands[0], None, kind)
            why = shared_why.get(key)
            if why is None:
                why = shared_why[key] = {"constraint": unit.constraint or None, "candidates": cands, "kind": kind}
            for n in nodes:
                out[n] = (text, why)
            continue
        if len(nodes) == 1:
            n = nodes[0]
            ins = inputs[n]
            row = exec_s[n]
            if len(ins) == 1:
                ref = ins[0]
                sig: tuple = (id(row), id(cands), here, nbytes[n], id(counts[n]), exe[ref], nbytes[ref], id(counts[ref]))
            else:
                sig = (id(row), id(cands), here, nbytes[n], id(counts[n]))
                for ref in ins:
                    sig += (exe[ref], nbytes[ref], id(counts[ref]))
            costs = priced.get(sig)
            if costs is None:
                figures = tuple([(e, _moved_cost_one(p, n, exe, counts, e), row[e]) for e in cands])
                costs = priced[sig] = _shared_costs(shared_costs, figures)
            if len(ins) == 1 and exe[ins[0]] == here and alike_of.get(id(costs)):
                # most stages of a large plan: :func:`_decision`'s inferred case, without the call
                kind, decision = "inferred", f"inferred: with its input {ins[0]!r}"
            else:
                kind, decision = _decision(p, unit, n, exe, costs, declared_first, alike_of, cost_text)
            out[n] = decided(unit, costs, kind, decision)
            continue
        costs = _shared_costs(shared_costs, tuple([
            (e, _moved_cost(p, nodes, exe, counts, e), sum(exec_s[n][e] for n in nodes)) for e in cands]))
        for n in nodes:
            kind, decision = _decision(p, unit, n, exe, costs, declared_first, alike_of, cost_text)
            out[n] = decided(unit, costs, kind, decision)
    return out


def _shared_costs(shared: dict[tuple, dict[str, dict[str, float]]],
                  figures: tuple[tuple[str, float, float], ...]) -> dict[str, dict[str, float]]:
    """The one ``costs`` mapping of ``figures`` (candidate, total, execution), made on first sight."""
    costs = shared.get(figures)
    if costs is None:
        costs = shared[figures] = {e: {"total_s": total, "exec_s": ex, "bridges_s": total - ex}
                                   for e, total, ex in figures}
    return costs


def _decision(p: Problem, unit: Unit, n: str, exe: Mapping[str, str], costs: Mapping[str, Mapping[str, float]],
              declared_first: str, alike_of: dict[int, bool] | None = None,
              cost_text: dict[tuple, str] | None = None) -> tuple[str, str]:
    """The kind and text of ``n``'s decision; ``alike_of`` memoizes, per ``costs`` object, whether
    every candidate executes alike (``costs`` holds exactly the unit's candidates), and ``cost_text``
    the text of a cost decision, per ``costs`` object and executor."""
    here = exe[n]
    alike = alike_of.get(id(costs)) if alike_of is not None else None
    if alike is None:
        execs = [costs[e]["exec_s"] for e in unit.candidates]
        # equal estimates, to the last digits the cost model's arithmetic may leave
        alike = all(x == execs[0] for x in execs) or len({round(x, 15) for x in execs}) == 1
        if alike_of is not None:
            alike_of[id(costs)] = alike
    if alike and len(unit.nodes) == 1:
        inputs = p.inputs[n]
        ref = inputs[0] if len(inputs) == 1 else largest_input(p, n)
        if ref is None and (here == declared_first or here == unit.candidates[0]):
            return "default", "default: no inputs and no pin, first declared executor"
        if ref is not None and exe[ref] == here:
            if len(inputs) == 1:
                return "inferred", f"inferred: with its input {ref!r}"
            size = p.nbytes[ref] or 0
            return "inferred", f"inferred: with its largest input {ref!r} ({human_bytes(size)})"
    key = (id(costs), here)  # a ``costs`` object lists exactly the unit's candidates, in their order
    text = cost_text.get(key) if cost_text is not None else None
    if text is None:
        mine = costs[here]
        others = ", ".join(f"{e} {format_s(costs[e]['total_s'])}" for e in unit.candidates if e != here)
        text = (f"cost: {here} {format_s(mine['total_s'])} (exec {format_s(mine['exec_s'])} + bridges "
                f"{format_s(mine['bridges_s'])}) vs {others}")
        cheapest = min(unit.candidates, key=lambda e: costs[e]["total_s"])
        saved = mine["total_s"] - costs[cheapest]["total_s"]
        least = getattr(p.model, "min_gain_s", 0.0) or 0.0
        if 0 < saved <= least and saved > 1e-9 * mine["total_s"]:
            # a cheaper executor that was not taken: the figures alone would read as a wrong choice
            text += (f"; kept on {here}: {cheapest} would save {format_s(saved)}, not the "
                     f"{format_s(least)} a placement must save to leave the baseline")
        if cost_text is not None:
            cost_text[key] = text
    return "cost", text


def vendor_offers(wanted: Iterable[Any] | None = None) -> dict[Any, Any]:
    """What each vendor computes wherever it runs: its dtypes and ops, as its probe reports them on a machine
    that has it, without asking this machine for a device. ``wanted`` (vendors) leaves the others' modules
    unimported: the Vulkan executor's is 2-12 ms of a command's start.

    The CPU is numpy (every dtype, every op); CUDA and ROCm are cupy
    (the dtypes it carries, every op); Vulkan is wgpu (32-bit words, the
    ops with a kernel, and its own refusals, asked through the same
    :func:`_vendor_refusal` as a plan). A vendor whose module does not
    import here is left out: nothing can be said of it.
    """
    from hetflow.executors import Offer, probe
    from hetflow.executors.base import Vendor

    want = set(Vendor) if wanted is None else set(wanted)
    offers: dict[Any, Any] = {Vendor.cpu: probe(Vendor.cpu)}
    if want & {Vendor.cuda, Vendor.rocm}:
        try:
            from hetflow.executors.carriers import CARRIERS
        except Exception:  # noqa: BLE001 - a module that does not import says nothing of its vendor
            pass
        else:
            for v in (Vendor.cuda, Vendor.rocm):
                offers[v] = Offer(v, True, "cupy", (), tuple(CARRIERS))
    if Vendor.vulkan in want:
        try:
            from hetflow.executors import vulkan
        except Exception:  # noqa: BLE001
            pass
        else:
            offers[Vendor.vulkan] = Offer(Vendor.vulkan, True, "wgpu", (), vulkan.SUPPORTED_DTYPES,
                                          vulkan.offered_ops())
    return offers


def reachable(vendors: Sequence[Any]) -> tuple[Any, ...]:
    """The vendors of a preference list that some machine gives the executor: the list up to its first ``cpu``,
    which every machine has.

    >>> from hetflow.executors.base import Vendor
    >>> [v.value for v in reachable([Vendor.vulkan, Vendor.cpu, Vendor.cuda])]
    ['vulkan', 'cpu']
    """
    out = []
    for v in vendors:
        out.append(v)
        if v.value == "cpu":
            break
    return tuple(out)


def machines(executors: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each distinct way the declared executors resolve, one per kind of machine: executor name -> vendor.

    A machine offers the CPU and any of CUDA or ROCm (one cupy build
    serves one of them) and Vulkan; each executor gets the first vendor
    of its list the machine offers. A machine on which some executor gets
    none is left out: ``plan`` reports that there, and no manifest can fix
    what a machine lacks.

    >>> from types import SimpleNamespace as NS
    >>> from hetflow.executors.base import Vendor
    >>> found = machines({"a": NS(vendors=(Vendor.vulkan, Vendor.cpu)), "h": NS(vendors=(Vendor.cpu,))})
    >>> sorted(tuple(v.value for v in m.values()) for m in found)
    [('cpu', 'cpu'), ('vulkan', 'cpu')]
    """
    from hetflow.executors.base import Vendor

    found: dict[tuple, dict[str, Any]] = {}
    for gpu in (None, Vendor.cuda, Vendor.rocm):
        for vulkan in (False, True):
            offered = {Vendor.cpu} | ({gpu} if gpu else set()) | ({Vendor.vulkan} if vulkan else set())
            chosen = {name: next((v for v in decl.vendors if v in offered), None) for name, decl in executors.items()}
            if None not in chosen.values():
                found.setdefault(tuple(chosen.values()), chosen)
    return list(found.values())


def check_vendors(graph: Graph | None, executors: Mapping[str, Any],
                  order: Sequence[str]) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """Every stage against every vendor its executors may resolve to: (errors, warnings).

    ``graph`` None checks the executors' lists alone (a manifest whose
    executors all run on the CPU on every machine, and no stage names a
    vendor: the CPU runs every op at every dtype).

    The candidates step of the plan runs once per kind of machine
    (:func:`machines`) against what each vendor computes
    (:func:`vendor_offers`), so a problem has the words ``plan`` would
    print on such a machine. A problem found on some kinds of machine
    only says on which: where an executor with a vendor list gets a
    given vendor. A ``vendor:`` preference of a stage that falls back is a
    warning, as in the plan; so is a vendor listed after ``cpu``, which
    no machine gives.
    """
    from hetflow.engine.plan.plandata import ExecutorPlan

    offers = vendor_offers({v for decl in executors.values() for v in decl.vendors})
    warnings: list[Diagnostic] = []
    for decl in executors.values():
        after = decl.vendors[len(reachable(decl.vendors)):]
        if after:
            warnings.append(Diagnostic(decl.vendor_origin, (
                f"executor {decl.name!r} lists {', '.join(v.value for v in after)} after cpu, which every machine has: "
                f"{'it is' if len(after) == 1 else 'they are'} never chosen"), "warning"))
    kinds = [m for m in machines(executors) if all(v in offers for v in m.values())] if graph is not None else []
    found: dict[tuple, list[int]] = {}
    for i, chosen in enumerate(kinds):
        plans = {name: ExecutorPlan(name, v, executors[name].device,
                                    f"the first of {_vendor_list(executors[name].vendors)} such a machine offers")
                 for name, v in chosen.items()}
        try:
            units, _ = candidates(graph, order, plans, {name: offers[v] for name, v in chosen.items()})
        except ManifestError as e:
            for d in e.diagnostics:
                found.setdefault((d.origin, d.message), []).append(i)
            continue
        for unit in units:
            if unit.fallback:
                stage = graph.nodes[unit.nodes[0]]["stage"]
                found.setdefault((stage.vendor_origin or stage.origin, unit.fallback, "warning"), []).append(i)
    errors: list[Diagnostic] = []
    for key, where in found.items():
        origin, message = key[0], key[1]
        if len(where) < len(kinds):
            message += f" ({_machines_text([kinds[i] for i in where], kinds, executors)})"
        (warnings if len(key) > 2 else errors).append(Diagnostic(origin, message, "warning" if len(key) > 2 else "error"))
    return errors, warnings


def _machines_text(some: Sequence[Mapping[str, Any]], every: Sequence[Mapping[str, Any]],
                   executors: Mapping[str, Any]) -> str:
    """Which machines ``some`` are, in the words of the executors whose vendor tells them from the others."""
    told = []
    for name, decl in executors.items():
        got = {m[name] for m in some}
        if len(got) == 1 and len({m[name] for m in every}) > 1:
            (v,) = got
            told.append(f"executor {name!r} gets {v.value}, the first of {_vendor_list(decl.vendors)} the machine offers")
    return "on a machine where " + " and ".join(told) if told else "on some machines"
