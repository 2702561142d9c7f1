"""The plan for people: :func:`render_text` (``hetflow plan``) and :func:`render_dot` (``--format dot``).

Both read a :class:`~hetflow.engine.plan.planner.Plan` and nothing else: each
node with its executor and the reason it is there, each partition, each
bridge with its bytes (exact, or an upper bound) and kind, and the
emulator phases with what is known of them before the guest runs.
"""

from __future__ import annotations

from typing import Any, Mapping

from hetflow.engine.plan import placement as placing
from hetflow.engine.plan.costs import human_bytes
from hetflow.engine.plan.plandata import Plan

__all__ = ["render_text", "render_dot"]


def render_text(plan: Plan) -> str:
    """The plan for people: executors, nodes with where and why, partitions, bridges, totals."""
    lines = [f"plan for {plan.name} (manifest {plan.digest[:19]})", "", "executors:"]
    width = max(len(e) for e in plan.executors)
    for e in plan.executors.values():
        lines.append(f"  {e.name:<{width}}  {e.vendor.value:<6} {_devices_text(e.device)}  {e.reason}"
                     + (f"; on worker {e.worker} ({e.worker_reason})" if e.worker else ""))
    lines += ["", "nodes:"]
    nw = max((len(n) for n in plan.nodes), default=0)
    ow = max((len(n.op) for n in plan.nodes.values()), default=0)
    split = {name: e.device for name, e in plan.executors.items() if _is_split(e.device)}
    if split:
        width = max(width, *(len(_on(plan, n, split)) for n in plan.nodes.values()))
    for n in plan.nodes.values():
        shape = _shape_text(n.shape, n.bound)
        est = "" if n.estimated_s is None else f"  ~{placing.format_s(n.estimated_s)}"
        lines.append(
            f"  {n.id:<{nw}}  {n.op:<{ow}}  {n.partition:<4} on {_on(plan, n, split):<{width}}  {shape} {n.dtype.value} "
            f"({_bytes_text(n.bytes, n.bound)}){est}  {n.reason}"
        )
    if plan.phases:
        lines += ["", "emulator phases:"]
        pw = max(len(p) for p in plan.phases)
        tw = max(len(p.get("target", "")) for p in plan.phases.values())
        for pid, p in plan.phases.items():
            lines.append(f"  {pid:<{pw}}  {p['phase']:<13} on {p.get('target', ''):<{tw}}  " + _phase_text(plan, pid, p))
    lines += ["", "partitions:"]
    for p in plan.partitions:
        ins = ", ".join(list(p.inputs) + list(plan.phase_inputs.get(p.id, ()))) or "-"
        outs = ", ".join(p.outputs) or "-"
        limits = (f"; retries: {p.retries}" if p.retries else "") + (f"; timeout: {p.timeout:g} s" if p.timeout is not None else "")
        mem = plan.memory.get(p.id)
        if mem and mem.get("memory_bytes"):
            limits += f"; peak {human_bytes(mem['peak_bytes'])}" + (
                f" (at most {human_bytes(mem['peak_bound_bytes'])} with bounded sizes)" if "peak_bound_bytes" in mem else "")
            limits += f" of {human_bytes(mem['memory_bytes'])} {mem['memory_source']}"
        lines.append(f"  {p.id} on {p.executor}: {', '.join(p.nodes)}  (inputs: {ins}; outputs: {outs}{limits})")
    lines += ["", "bridges:"]
    if not plan.bridges:
        lines.append("  none: every edge stays on one executor")
    for b in plan.bridges:
        lines.append(
            f"  {b.id}: {b.tensor} {b.source} -> {b.destination}, {_bytes_text(b.bytes, b.bound)}, {b.kind}; "
            f"consumers: {', '.join(b.consumers)}"
            + ("" if b.estimated_s is None else f"; ~{placing.format_s(b.estimated_s)} over {b.link}")
        )
    t = plan.totals()
    total = plan.estimate.get("total_s")
    lines += ["", f"totals: {t['nodes']} nodes, {t['partitions']} partitions, {t['bridges']} bridges, "
              + ("at most " if t["bytes_bridged_bound"] else "")
              + f"{human_bytes(t['bytes_bridged'])} bridged" + (" (some sizes unknown)" if t["bytes_bridged_unknown"] else "")
              + ("" if total is None else
                 f", estimated {'at most ' if 'phases_s' in plan.estimate else ''}{placing.format_s(total)} "
                 f"(exec {placing.format_s(plan.estimate['exec_s'])} + bridges {placing.format_s(plan.estimate['bridges_s'])}"
                 + (f" + phases {placing.format_s(plan.estimate['phases_s'])}" if "phases_s" in plan.estimate else "")
                 + f"; placement: {plan.estimate['placement']})")]
    if plan.warnings:
        lines += ["", "warnings:"] + [f"  {w}" for w in plan.warnings]
    return "\n".join(lines)


def _is_split(device: Any) -> bool:
    return getattr(device, "indexes", 0) != 0  # a DeviceSet (devices:); a plain index has no indexes


def _devices_text(device: Any) -> str:
    """``device 0``, or a split executor's devices with their shares: ``devices 0:3/4, 1:1/4`` (``all``: on the
    machine that runs it)."""
    if not _is_split(device):
        return f"device {device}"
    if device.indexes is None:
        return "devices all" + ("" if device.split is None else f" split {list(device.split)}")
    from hetflow.executors.split_layout import layout_text

    return f"devices {layout_text(device.shares(len(device.indexes)), device.indexes)}"


def _on(plan: Plan, n: Any, split: Mapping[str, Any]) -> str:
    """Where a node runs: its executor; on a split executor, the devices it divides across (``accel[0:3/4,
    1:1/4]``), or ``accel[0]`` for an op that runs whole on the first device."""
    device = split.get(n.executor)
    if device is None:
        return n.executor
    from hetflow.executors.split_layout import layout, layout_text

    if device.indexes is None:
        return f"{n.executor}[all]"
    shapes = [plan.nodes[i].shape if i in plan.nodes else None for i in plan.stage_inputs.get(n.id, ())]
    if len(device.indexes) > 1 and layout(n.op, shapes, plan.stage_args.get(n.id, {}), n.dtype) is not None:
        return f"{n.executor}[{layout_text(device.shares(len(device.indexes)), device.indexes)}]"
    return f"{n.executor}[{device.indexes[0]}]"


def _phase_text(plan: Plan, pid: str, p: Mapping[str, Any]) -> str:
    """One phase of the text plan: inputs, what it yields and to whom, its fan-out and its estimate."""
    e = plan.emulators.get(p["emulator"], {})
    parts = [f"inputs: {', '.join(p['inputs']) or '-'}"]
    if p["array"]:
        size = "bound" if p.get("size") == "bound" else "exact"
        readers = p.get("consumers") or []
        # a witness table has a row a step; another phase's array (an ``array`` node) says its own size
        rows = f", {size}: {e.get('max_steps')} rows max" if p.get("phase") == "witness" else (
            ", known when the guest has run" if p.get("shape") is None else "")
        parts.append(f"yields array {_shape_text(p.get('shape'), size == 'bound')} {p.get('dtype')} "
                     f"({_bytes_text(p.get('bytes'), size == 'bound')}{rows})"
                     + (f" to {', '.join(readers)}" if readers else ""))
        if "chunks_max" in p:
            parts.append(f"fan-out: at most {p['chunks_max']} tasks, one per chunk "
                         f"(max_steps {e.get('max_steps')} / chunk_steps {e.get('chunk_steps')})")
    else:
        parts.append("yields " + ", ".join(f for f in p.get("outputs", []) if f != "array") + " (data)")
        if p.get("arrays"):  # the int64 tables a stage may read as PHASE.FIELD
            parts.append("arrays " + ", ".join(a if isinstance(a, str) else a.get("name", "?") for a in p["arrays"]))
    if p.get("estimated_s") is not None:
        parts.append(f"at most ~{placing.format_s(p['estimated_s'])} ({e.get('backend')} backend, "
                     f"{p.get('steps_max')} steps max)")
    if p.get("runs"):  # a witness phase on a cluster: where it runs and both estimates (clusterphases.witness_where)
        parts.append(f"runs {p['runs']['why']}")
    return "; ".join(parts)


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_dot(plan: Plan) -> str:
    """The plan as a Graphviz digraph: one cluster per executor, a sub-cluster per partition, bridges as nodes.

    Stage nodes are boxes labelled with op, shape and dtype; a bridge is a
    separate diamond between the clusters, labelled with its bytes and
    kind, so every crossing is visible; same-executor edges join stages
    directly.
    """
    out = ["digraph plan {", f"  label={_dot_id(f'{plan.name}: ' + _summary(plan))};", "  labelloc=t;",
           "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];', '  edge [fontname="Helvetica", fontsize=9];']
    for i, e in enumerate(plan.executors.values()):
        out.append(f"  subgraph cluster_{i} {{")
        out.append(f"    label={_dot_id(f'{e.name} ({e.vendor.value}, device {e.device})')}; style=rounded; color=gray40;")
        for j, p in enumerate(part for part in plan.partitions if part.executor == e.name):
            out.append(f"    subgraph cluster_{i}_{j} {{")
            out.append(f"      label={_dot_id(p.id)}; style=dashed; color=gray60;")
            for n in p.nodes:
                node = plan.nodes[n]
                shape = _shape_text(node.shape, node.bound, "x").strip("[]") if node.shape is not None else "?"
                label = f"{n}\n{node.op} {shape} {node.dtype.value}"
                out.append(f"      {_dot_id('stage:' + n)} [shape=box, label={_dot_id(label)}];")
            out.append("    }")
        out.append("  }")
    for b in plan.bridges:
        label = f"{b.id}\n{_bytes_text(b.bytes, b.bound)}\n{b.kind}"
        out.append(f"  {_dot_id('bridge:' + b.id)} [shape=diamond, style=filled, fillcolor=lightyellow, label={_dot_id(label)}];")
        out.append(f"  {_dot_id('stage:' + b.tensor)} -> {_dot_id('bridge:' + b.id)} [color=orange];")
        for c in b.consumers:
            out.append(f"  {_dot_id('bridge:' + b.id)} -> {_dot_id('stage:' + c)} [color=orange];")
    for i, (name, e) in enumerate(plan.emulators.items()):
        out.append(f"  subgraph cluster_emulator_{i} {{")
        title = f"emulator {name} ({e.get('backend')}, {e.get('isa')})"
        out.append(f"    label={_dot_id(title)}; style=rounded; color=steelblue;")
        for pid, p in plan.phases.items():
            if p["emulator"] == name:
                out.append(f"    {_dot_id('stage:' + pid)} [shape=ellipse, style=filled, fillcolor=lightblue, "
                           f"label={_dot_id(_phase_label(pid, p))}];")
        out.append("  }")
    for pid, p in plan.phases.items():
        for ref in p["inputs"]:
            out.append(f"  {_dot_id('stage:' + ref)} -> {_dot_id('stage:' + pid)};")
    for n, node in plan.nodes.items():
        for ref in dict.fromkeys(plan.stage_inputs[n]):
            if ref in plan.nodes and plan.nodes[ref].executor == node.executor:
                out.append(f"  {_dot_id('stage:' + ref)} -> {_dot_id('stage:' + n)};")
    for name, tensor in plan.outputs.items():
        out.append(f"  {_dot_id('output:' + name)} [shape=note, label={_dot_id(name)}];")
        out.append(f"  {_dot_id('stage:' + tensor)} -> {_dot_id('output:' + name)} [style=dotted];")
    for name, (pid, fieldname) in plan.phase_outputs.items():
        ref = f"{pid}.{fieldname}" if fieldname else pid
        out.append(f"  {_dot_id('output:' + name)} [shape=note, label={_dot_id(f'{name}: {ref}')}];")
        out.append(f"  {_dot_id('stage:' + pid)} -> {_dot_id('output:' + name)} [style=dotted];")
    out.append("}")
    return "\n".join(out) + "\n"


def _phase_label(pid: str, p: Mapping[str, Any]) -> str:
    """A phase node's label: id, phase, its array's shape and bytes (marked when bounded), its fan-out."""
    lines = [pid, f"{p['phase']} phase"]
    if p.get("array"):
        bound = p.get("size") == "bound"
        lines.append(f"{_shape_text(p.get('shape'), bound, 'x')} {p.get('dtype')}, {_bytes_text(p.get('bytes'), bound)}")
    if p.get("chunks_max") is not None:
        lines.append(f"<= {p['chunks_max']} chunk tasks")
    return "\n".join(lines)


def _summary(plan: Plan) -> str:
    t = plan.totals()
    text = (f"{t['partitions']} partitions, {t['bridges']} bridges, "
            f"{'at most ' if t['bytes_bridged_bound'] else ''}{human_bytes(t['bytes_bridged'])} bridged")
    total = plan.estimate.get("total_s")
    return text if total is None else text + f", estimated {placing.format_s(total)}"


def _bytes_text(nbytes: int | None, bound: bool) -> str:
    """
    >>> _bytes_text(2560000, True), _bytes_text(256, False)
    ('at most 2.4 MiB', '256 B')
    """
    return ("at most " if bound and nbytes is not None else "") + human_bytes(nbytes)


def _shape_text(shape: Any, bound: bool = False, sep: str = ", ") -> str:
    """
    >>> _shape_text((10000, 64), True), _shape_text((64,)), _shape_text(None)
    ('[<=10000, 64]', '[64]', '?')
    """
    if shape is None:
        return "?"
    dims = [str(d) for d in shape]
    if bound and dims:
        dims[0] = "<=" + dims[0]
    return "[" + sep.join(dims) + "]"
