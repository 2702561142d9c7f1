"""The semantic checks, and the typed :class:`Manifest` they build from a tree the schema accepted.

What a schema cannot say: ops exist (built-in or from the manifest's
``plugins:``), arguments and arity fit the op, inputs and executors
exist, dtypes are ones the op supports, a ``load`` stage's file holds the
array, no cycle, ``colocate_with`` groups agree with their pins, outputs
name stages; emulators and their phases are checked by
:func:`hetflow.engine.manifest.phasedecl.check_manifest`. Every problem becomes one
:class:`~hetflow.engine.errors.Diagnostic` at its ``FILE:LINE:COL``.
"""

from __future__ import annotations

import contextvars
import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

from hetflow.engine.errors import Diagnostic, Origin
from hetflow.engine.manifest.loader import Document, frozen_instance
from hetflow.engine.manifest.resolve import canonical_json, has_undefined
from hetflow.executors import ops as oplib
from hetflow.executors.base import Dtype, Vendor

__all__ = ["ExecutorDecl", "StageDecl", "Manifest", "check_semantics"]

_DTYPES = {name: Dtype(name) for name in Dtype.__members__}


@dataclass(frozen=True)
class ExecutorDecl:
    name: str
    vendors: tuple[Vendor, ...]
    device: int
    origin: Origin
    vendor_origin: Origin
    memory_bytes: int | None = None
    memory_origin: Origin | None = None
    memory_limit: int | None = None


@dataclass(frozen=True)
class StageDecl:
    """One stage, fully concrete. ``args`` has defaults filled in and paths made absolute.

    Its origins (``origin``, ``op_origin``, ...) are looked up in ``doc``
    when asked for, so a stage holds no position it never reports.
    """

    id: str
    op: str
    inputs: tuple[str, ...]
    args: Mapping[str, Any]
    dtype: Dtype
    executor: str | None
    retries: int = 0
    timeout: float | None = None
    cache: bool = True
    vendors: tuple[Vendor, ...] = ()
    colocate_with: str | None = None
    doc: Document | None = field(default=None, repr=False, compare=False)

    def _written(self, key: str) -> bool:
        spec = self.doc.value["stages"][self.id] if self.doc is not None else None
        return isinstance(spec, dict) and key in spec

    def _at(self, key: str | None) -> Origin | None:
        if self.doc is None:
            return None
        here = ("stages", self.id)
        return self.doc.key_at(here) if key is None else self.doc.at(here + (key,))

    @property
    def origin(self) -> Origin | None:
        """The stage's key."""
        doc = self.doc  # asked of every stage by a plan: one call, not two
        return doc.key_at(("stages", self.id)) if doc is not None else None

    @property
    def op_origin(self) -> Origin | None:
        return self._at("op")

    @property
    def inputs_origin(self) -> Origin | None:
        """Its ``inputs:``, or the stage's key when it has none."""
        return self._at("inputs" if self._written("inputs") else None)

    @property
    def executor_origin(self) -> Origin | None:
        return self._at("executor") if self._written("executor") else None

    @property
    def vendor_origin(self) -> Origin | None:
        return self._at("vendor") if self._written("vendor") else None

    @property
    def colocate_origin(self) -> Origin | None:
        return self._at("colocate_with") if self._written("colocate_with") else None


@dataclass(frozen=True)
class Manifest:
    file: str
    name: str
    description: str
    params: Mapping[str, Any]
    executors: Mapping[str, ExecutorDecl]
    stages: Mapping[str, StageDecl]
    outputs: Mapping[str, str]
    output_origins: Mapping[str, Origin]
    resolved: Mapping[str, Any] = field(repr=False)
    digest: str = ""
    emulators: Mapping[str, Any] = field(default_factory=dict)
    phases: Mapping[str, Any] = field(default_factory=dict)
    phase_outputs: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    plugins: tuple[Any, ...] = ()
    """The :class:`hetflow.executors.plugins.Plugin` of every module ``plugins:`` names, and of entry points used."""
    shapes: Any = field(default=None, repr=False, compare=False)
    """The shape pass's :class:`hetflow.engine.manifest.shapes.Table`, set by the validate pass; None on a manifest built otherwise."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogates(value: Any, path: tuple) -> Any:
    """(path, the surrogate) of each key or text in ``value`` holding a lone surrogate."""
    if isinstance(value, str):
        found = None if value.isascii() else _SURROGATE.search(value)
        if found:
            yield path, found.group()
    elif isinstance(value, dict):
        for key, item in value.items():
            found = _SURROGATE.search(key) if isinstance(key, str) and not key.isascii() else None
            if found:
                yield path + (key,), found.group()
            yield from _lone_surrogates(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _lone_surrogates(item, path + (i,))


def _describe_path(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "the document"


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def check_semantics(tree: dict, doc: Document, problems: list[Diagnostic]) -> Manifest | None:
    """Check a resolved tree the schema has seen; append each problem to ``problems``.

    Returns the :class:`Manifest` when this pass found nothing, else ``None``.
    """
    token = _suggestions.set({"left": SUGGESTION_BUDGET, "given": {}, "scopes": {}})
    try:
        return _check_semantics(tree, doc, problems)
    finally:
        _suggestions.reset(token)


def _check_semantics(tree: dict, doc: Document, problems: list[Diagnostic]) -> Manifest | None:
    base = os.path.dirname(os.path.abspath(doc.file)) if doc.file != "<string>" else os.getcwd()
    text = getattr(doc, "text", None)
    if text is None or "\\u" in text or "\\U" in text or any(
            isinstance(v, str) and not v.isascii() for v in _as_dict(tree.get("params")).values()):
        # an escape such as "\ud800" makes half of a UTF-16 pair, which no file name, record or digest can hold
        halves = [Diagnostic(doc.at(path), f"{_describe_path(path)} holds {ch!r}, a lone surrogate (half of a UTF-16 "
                                           "pair, not a character); write the character itself, or its \\U escape")
                  for path, ch in _lone_surrogates(tree, ())]
        if halves:
            problems.extend(halves)
            return None
    # names that read a use of a block but none of its outputs, with why (blocks.expand says)
    unnamed = getattr(doc, "unnamed", None) or {}
    executors: dict[str, ExecutorDecl] = {}
    for name, spec in _as_dict(tree.get("executors")).items():
        if not isinstance(spec, dict) or "vendor" not in spec:
            continue
        raw = spec["vendor"]
        names = raw if isinstance(raw, list) else [raw]
        if not all(n in Vendor.__members__ for n in names):
            continue
        device = spec.get("device", 0)
        limit = spec.get("memory_limit")
        if "devices" in spec:
            device = _device_set(name, spec, doc, problems)
        elif "split" in spec:
            problems.append(Diagnostic(doc.at(("executors", name, "split")), (
                f"executor {name!r} gives split: without devices:; split: shares the work among the devices "
                "listed in devices: (devices: [0, 1]), so list them")))
        if isinstance(limit, list):
            device, limit = _device_limits(name, device, limit, doc, problems)
        memory = _memory_bytes(spec.get("memory"))
        if memory == 0:
            # the schema refuses memory: 0, and a size that comes to no byte ("0B", "0.5B") means the same
            problems.append(Diagnostic(doc.at(("executors", name, "memory")), (
                f"executors.{name}.memory is {spec['memory']!r}, less than 1 byte: an executor that may hold no "
                "activation can run no stage; give its memory, such as '16GiB', or leave memory: out for what it "
                "detects")))
            memory = None
        executors[name] = ExecutorDecl(
            name, tuple(Vendor(n) for n in names), device if isinstance(device, int) else 0,
            doc.key_at(("executors", name)), doc.at(("executors", name, "vendor")),
            memory_bytes=memory, memory_origin=doc.at(("executors", name, "memory")) if memory else None,
            memory_limit=_memory_limit(limit),
        )

    problems.extend(_device_claims(executors, _as_dict(tree.get("executors")), doc))

    raw_stages = _as_dict(tree.get("stages"))
    stages: dict[str, StageDecl] = {}
    from hetflow.engine.manifest import phasedecl as phaselib
    emulators, phase_decls = phaselib.check_manifest(tree, doc, base, problems)
    declared_executors = _as_dict(tree.get("executors"))
    plugins = _load_plugins(tree, doc, base, problems)
    used_plugins: dict[str, Any] = {p.module: p for p in plugins}
    # A manifest may hold 100,000 stages of a few kinds: what an op settles is looked up once per op, what it
    # settles with a dtype and a number of inputs once per kind, and an origin only for a problem found.
    ops: dict[str, Any] = {}
    fits: dict[tuple[str, str], bool] = {}
    path_args: dict[str, list[str]] = {}
    bare_args: dict[tuple[str, int | None], list[tuple[str | None, str]]] = {}
    passed: dict[tuple[str, str, int], dict] = {}  # (op, dtype, inputs) of a stage without args that passed -> its args
    seen: set[str] = set()  # the stages above the one being checked
    pending: list[str] = []  # stages whose dtype depends on a stage written below them
    typed: list[str] = []  # stages whose op checks its inputs' dtypes, checked once every dtype is known
    arrays: dict[str, Dtype] = {}  # phases that yield an array (a witness table), with its dtype
    # the array fields stages read (``run.registers``): nodes of their own, known before any stage
    arrays.update({pid: phaselib.ARRAY_DTYPE for pid, p in phase_decls.items() if p.phase == phaselib.ARRAY_PHASE})
    phase_stages = {sid: s for sid, s in raw_stages.items() if isinstance(s, dict) and "phase" in s}
    seen.update(arrays)
    fp32 = Dtype.fp32
    in_order = True  # every input is written above its stage, so the file order is a topological order
    constrained = False  # some stage says colocate_with: or vendor:
    builtin, registry, dtypes, optional, absent = oplib.BUILTIN, oplib.REGISTRY, _DTYPES, _OPTIONAL_FIELDS, _ABSENT
    for sid, spec in raw_stages.items():
        if not isinstance(spec, dict):
            seen.add(sid)
            continue
        if "phase" in spec:
            kind = phaselib.PHASES.get(spec["phase"]) if isinstance(spec["phase"], str) else None
            if kind is not None and kind.array:
                arrays[sid] = phaselib.ARRAY_DTYPE
            for ref in (spec.get("inputs") if isinstance(spec.get("inputs"), list) else []):
                if isinstance(ref, str) and ref in raw_stages and ref not in seen:
                    in_order = False
            seen.add(sid)
            continue
        op_name = spec.get("op")
        op = ops.get(op_name) if op_name.__class__ is str else None
        if op is None:
            here = ("stages", sid)
            op = registry.get(op_name) if op_name in builtin else None
            if isinstance(op_name, str) and op is None:
                op, hint = _user_op(op_name, plugins, used_plugins, doc.at(here + ("op",)), problems)
                if op is None and hint is not None:
                    if not hint:
                        close = _close(op_name, [*oplib.BUILTIN, *(n for p in plugins for n in p.ops)], n=1)
                        hint = f"; did you mean {close[0]!r}?" if close else ""
                    problems.append(Diagnostic(doc.at(here + ("op",)), f"unknown op {op_name!r} in stage {sid!r}{hint}"))
            if op is not None:
                ops[op_name] = op

        inputs = spec.get("inputs", [])
        inputs = [i for i in inputs if isinstance(i, str)] if isinstance(inputs, list) else []
        for i, ref in enumerate(inputs):
            other = raw_stages.get(ref, absent)
            if other is absent and phaselib.array_ref(ref, phase_stages):
                problem = phaselib.check_array_input(ref, raw_stages)
                if problem:
                    problems.append(Diagnostic(doc.at(("stages", sid, "inputs", i)),
                                               f"stage {sid!r} takes input {ref!r}: {problem}"))
                continue
            if other is absent:
                instance = sid.rsplit(".", 1)[0] + "." if "." in sid else ""
                outside = ref[len(instance):] if instance and ref.startswith(instance) else None
                if outside is not None and outside in raw_stages:
                    # a block's stage that names a stage of the manifest: the block sees its own names alone
                    hint = (f"; {outside!r} is a stage outside the block, which a block's stages cannot name: "
                            "add it to the block's inputs: and give it in each use of the block")
                elif ref in unnamed:
                    # USE.NAME may mean a stage of the use's instance too: the nearest one is offered
                    close = _close(ref, raw_stages, n=1) if unnamed[ref].startswith("which is no output") else []
                    hint = f"; or did you mean stage {close[0]!r}?" if close else ""
                    problems.append(Diagnostic(doc.at(("stages", sid, "inputs", i)),
                                               f"stage {sid!r} takes input {ref!r}, {unnamed[ref]}{hint}"))
                    continue
                else:
                    close = _close(ref, raw_stages, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                problems.append(Diagnostic(doc.at(("stages", sid, "inputs", i)),
                                           f"stage {sid!r} takes input {ref!r}, which is not a stage{hint}"))
                continue
            if ref not in seen:
                in_order = False
            if isinstance(other, dict) and other.get("phase") in phaselib.PHASES and not phaselib.PHASES[other["phase"]].array:
                kinds = ", ".join(k for k, v in phaselib.PHASES.items() if v.array)  # not ``arrays``: the dtypes above
                problems.append(Diagnostic(doc.at(("stages", sid, "inputs", i)), (
                    f"stage {sid!r} takes input {ref!r}, {phaselib.article(other['phase'])} phase, which yields data, not an array; "
                    f"an executor stage can take the output of a {kinds} phase"
                    + _array_fields_hint(ref, other["phase"]))))
        seen.add(sid)

        executor = spec.get("executor")
        if isinstance(executor, str) and executor not in declared_executors:
            declared = ", ".join(declared_executors) or "none"
            close = _close(executor, list(declared_executors), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(Diagnostic(doc.at(("stages", sid, "executor")), f"stage {sid!r} names executor {executor!r}, which is not declared (declared: {declared}){hint}"))

        args = spec.get("args", {})
        args = args if isinstance(args, dict) else {}
        if op is None:
            continue
        if "dtype" in spec:
            dtype_name = spec["dtype"]
        elif op.result is None and all(ref in stages and stages[ref].dtype is fp32 for ref in inputs):
            dtype_name = "fp32"  # most stages: nothing to infer from
        elif all(ref in stages or ref in arrays or ref not in raw_stages for ref in inputs):
            dtype_name = _inferred(op, [stages[ref].dtype if ref in stages else arrays[ref] for ref in inputs
                                        if ref in stages or ref in arrays], args, base).value
        else:
            dtype_name = "fp32"
            pending.append(sid)  # an input written below it: inferred once every stage is known
        dtype = dtypes.get(dtype_name) if not pending or pending[-1] != sid else None
        if dtype is not None and "dtype" not in spec and dtype not in op.dtypes:
            problems.append(_not_inferable(sid, op, dtype, inputs, stages, doc))
            dtype = None
        if op.input_dtypes is not None:
            typed.append(sid)
        full = passed.get((op_name, dtype_name, len(inputs))) if not args else None
        if full is not None:
            full = full.copy()
        else:
            full = _check_op(sid, spec, op, inputs, args, dtype_name, dtype, base, doc, problems, fits, path_args, bare_args, passed)
        fields = {"id": sid, "op": op.name, "inputs": tuple(inputs), "args": full, "dtype": dtype or Dtype.fp32,
                  "executor": executor if isinstance(executor, str) else None, "doc": doc}
        if not optional.isdisjoint(spec):
            # the other fields are left to StageDecl's defaults, which are what a stage without them says
            fields.update(_optional_fields(spec))
            constrained = constrained or "colocate_with" in spec or "vendor" in spec
        stages[sid] = frozen_instance(StageDecl, fields)

    if pending and not problems:
        _infer_pending(pending, stages, raw_stages, base, doc, problems, arrays)
    if typed and (not pending or not problems):  # a pending stage's dtype is known only once inferred
        _check_input_dtypes(typed, stages, doc, problems, arrays)

    if constrained:
        problems.extend(_placement_constraints(stages, executors, raw_stages, doc))

    for cycle in ([] if in_order else _cycles(raw_stages)):
        names = " -> ".join(cycle + [cycle[0]])
        first = cycle[0]
        problems.append(Diagnostic(doc.key_at(("stages", first)), f"cycle between stages: {names}"))

    outputs: dict[str, str] = {}
    output_origins: dict[str, Origin] = {}
    phase_outputs: dict[str, tuple[str, str | None]] = {}
    for out, ref in _as_dict(tree.get("outputs")).items():
        if not isinstance(ref, str):
            continue
        # a name is what it names: a stage first (an instance's id holds dots), then PHASE.FIELD, the field after the last dot
        stage_ref, _, fieldname = (ref, "", "") if ref in raw_stages else ref.rpartition(".") if "." in ref else (ref, "", "")
        if stage_ref in phase_decls or fieldname:
            problem = phaselib.check_output(stage_ref, fieldname or None, raw_stages, phase_decls)
            written = raw_stages.get(stage_ref)
            if problem and problems and stage_ref not in phase_decls and isinstance(written, dict) and "phase" in written:
                pass  # a phase that did not check (its emulator, its keys) is not one: what is wrong was said there
            elif problem:
                problems.append(Diagnostic(doc.at(("outputs", out)), f"output {out!r} names {ref!r}: {problem}"))
            else:
                phase_outputs[out] = (stage_ref, fieldname or None)
            output_origins[out] = doc.at(("outputs", out))
            continue
        if ref not in raw_stages and ref in unnamed:
            problems.append(Diagnostic(doc.at(("outputs", out)), f"output {out!r} names {ref!r}, {unnamed[ref]}"))
        elif ref not in raw_stages:
            close = _close(ref, raw_stages, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(Diagnostic(doc.at(("outputs", out)), f"output {out!r} names {ref!r}, which is not a stage{hint}"))
        outputs[out] = ref
        output_origins[out] = doc.at(("outputs", out))
    # each output is a file OUTPUT.npy, and where names differ only by case (macOS's and Windows' usual file
    # systems) two outputs would be one file, the second written over the first that the record still describes
    first_as: dict[str, str] = {}
    for out in _as_dict(tree.get("outputs")):
        other = first_as.setdefault(str(out).casefold(), out)
        if other != out:
            problems.append(Diagnostic(doc.key_at(("outputs", out)), (
                f"outputs {other!r} and {out!r} differ only by case: their files {other}.npy and {out}.npy are one "
                f"file on a file system that ignores case (macOS's and Windows' by default); rename one")))

    if problems:
        return None
    digest = "sha256:" + hashlib.sha256(canonical_json(tree).encode()).hexdigest()
    return Manifest(
        file=doc.file, name=tree["name"], description=tree.get("description", ""),
        params=dict(tree.get("params", {})), executors=executors, stages=stages,
        outputs=outputs, output_origins=output_origins, resolved=tree, digest=digest,
        emulators=emulators, phases=phase_decls, phase_outputs=phase_outputs,
        plugins=tuple(used_plugins.values()),
    )


def _array_fields_hint(ref: str, phase: str) -> str:
    """``, or one of its array fields: 'run.registers', ...`` for a phase that has some."""
    from hetflow.engine.manifest import phasedecl as phaselib

    fields = [f"{ref}.{a.name}" for a in phaselib.PHASES[phase].arrays]
    return f", or an array field of this one ({', '.join(map(repr, fields))})" if fields else ""


def _inferred(op: Any, inputs: list[Dtype], args: dict, base: str) -> Dtype:
    """The dtype of a stage that names none (:func:`hetflow.executors.opdecl.default_dtype`), paths made absolute."""
    full = op.with_defaults(args)
    for key, spec in op.args.items():
        if spec.kind == "path" and isinstance(full.get(key), str):
            full[key] = os.path.join(base, full[key])
    try:
        return oplib.default_dtype(op, inputs, full)
    except Exception:  # noqa: BLE001 - args the op's checks report; the dtype is then the one a stage names by default
        return Dtype.fp32


def _infer_pending(pending: list[str], stages: dict[str, StageDecl], raw_stages: dict, base: str, doc: Document,
                   problems: list[Diagnostic], arrays: Mapping[str, Dtype] = {}) -> None:
    """Infer the dtypes of ``pending`` stages in dependency order, and check each against its op."""
    import dataclasses
    from graphlib import CycleError, TopologicalSorter

    waiting = set(pending)
    order = TopologicalSorter({sid: [ref for ref in stages[sid].inputs if ref in waiting] for sid in pending})
    try:
        ordered = list(order.static_order())
    except CycleError:  # the cycle is reported with its stages below (``_cycles``); nothing to infer through it
        return
    for sid in ordered:
        stage = stages[sid]
        op = oplib.REGISTRY.get(stage.op)
        if op is None:
            continue
        dtype = _inferred(op, [stages[ref].dtype if ref in stages else arrays[ref] for ref in stage.inputs
                               if ref in stages or ref in arrays], dict(raw_stages[sid].get("args") or {}), base)
        if dtype not in op.dtypes:
            problems.append(_not_inferable(sid, op, dtype, stage.inputs, stages, doc))
            continue
        stages[sid] = dataclasses.replace(stage, dtype=dtype)


def _typed_inputs(inputs: Any, stages: Mapping[str, StageDecl], arrays: Mapping[str, Dtype] = {}) -> str:
    """``'x' (fp32), 'ids' (int64)``: a stage's inputs with their dtypes, for a message."""
    return ", ".join(f"{ref!r} ({stages[ref].dtype.value})" if ref in stages else
                     f"{ref!r} ({arrays[ref].value})" if ref in arrays else repr(ref) for ref in inputs)


def _not_inferable(sid: str, op: Any, dtype: Dtype, inputs: Any, stages: Mapping[str, StageDecl], doc: Document) -> Diagnostic:
    """A stage without ``dtype:`` whose op and inputs make it a dtype its op does not support."""
    supported = ", ".join(d.value for d in Dtype if d in op.dtypes)
    given = f"its inputs {_typed_inputs(inputs, stages)}" if inputs else "its args"
    return Diagnostic(doc.key_at(("stages", sid)), (
        f"stage {sid!r} names no dtype and {given} make it {dtype.value}, which op {op.name!r} does not "
        f"support (supported: {supported}); say dtype: on the stage"))


def _check_input_dtypes(typed: list[str], stages: Mapping[str, StageDecl], doc: Document,
                        problems: list[Diagnostic], arrays: Mapping[str, Dtype] = {}) -> None:
    """Each stage in ``typed`` against its op's rule for its inputs' dtypes (``gather``'s indices are integers).

    The problem is reported at the stage's ``inputs:``, naming every input
    with its dtype.
    """
    for sid in typed:
        stage = stages.get(sid)
        op = oplib.REGISTRY.get(stage.op) if stage is not None else None
        if op is None or not all(ref in stages or ref in arrays for ref in stage.inputs):
            continue  # an input that is neither a stage nor a phase's array was reported
        try:
            problem = op.input_dtypes([stages[ref].dtype if ref in stages else arrays[ref] for ref in stage.inputs],
                                      stage.args)
        except Exception as e:  # noqa: BLE001 - a plugin's check that fails is reported where the stage is, not raised
            problem = f"its check of the inputs' dtypes failed: {type(e).__name__}: {e}"
        if problem:
            problems.append(Diagnostic(stage.inputs_origin, (
                f"stage {sid!r} takes {_typed_inputs(stage.inputs, stages, arrays)}: op {op.name!r}: {problem}")))


#: how many names one check of a manifest compares for its "did you mean"s: difflib takes microseconds a name,
#: and each missing name is compared with every stage, so a block repeated 1,000 times with a typo in it, or a
#: generated manifest of 100,000 stages after a rename, asked minutes of them; past this, problems are said
#: without a suggestion
SUGGESTION_BUDGET = 500_000

# per check: the comparisons left, the answers given (a typo repeated in every instance is looked up once) and,
# per collection of names, its names by the scope they are written in (``l.3`` of ``l.3.h``)
_suggestions: contextvars.ContextVar[dict | None] = contextvars.ContextVar("suggestions", default=None)


def _close(word: str, choices: Collection[str], n: int = 1) -> list[str]:
    """The choices close to ``word``, for a "did you mean" (difflib, imported only for a problem found).

    A word of a block's instance (``l.3.hh``) is first compared with the
    names of its own instance (``l.3.h``), then with all of them; the
    comparisons with all of them stop once this check's
    :data:`SUGGESTION_BUDGET` is spent.

    >>> _close("relux", ["relu", "gelu", "matmul"]), _close("l.3.hh", ["l.2.h", "l.3.h", "l.3.g"])
    (['relu'], ['l.3.h'])
    """
    import difflib

    state = _suggestions.get()
    if state is None:
        state = {"left": SUGGESTION_BUDGET, "given": {}, "scopes": {}}
    if isinstance(choices, dict):
        # the stages of the manifest, one mapping through the check: known by its identity, kept alive meanwhile
        key: tuple = (word, n, id(choices), len(choices))
        state.setdefault("held", {})[id(choices)] = choices
    else:
        key = (word, n, tuple(choices))
    if key in state["given"]:
        return state["given"][key]
    close: list[str] = []
    scope = word.rpartition(".")[0]
    if scope:
        scopes = state["scopes"].get(id(choices))
        if scopes is None or scopes[0] is not choices:
            index: dict[str, list[str]] = {}
            for name in choices:
                index.setdefault(name.rpartition(".")[0], []).append(name)
            scopes = state["scopes"][id(choices)] = (choices, index)
        close = difflib.get_close_matches(word, scopes[1].get(scope, ()), n=n)
    if not close and state["left"] >= len(choices):
        state["left"] -= len(choices)
        close = difflib.get_close_matches(word, choices, n=n)
    elif not close:
        state["left"] = 0
    state["given"][key] = close
    return close


_ABSENT = object()
_OPTIONAL_FIELDS = frozenset({"retries", "timeout", "cache", "vendor", "colocate_with"})


def _optional_fields(spec: dict) -> dict[str, Any]:
    """The fields of a :class:`StageDecl` that a stage may leave to their defaults."""
    return {
        "retries": spec.get("retries", 0), "timeout": spec.get("timeout"),
        "cache": spec.get("cache", True) is not False,
        "vendors": _stage_vendors(spec.get("vendor")) if "vendor" in spec else (),
        "colocate_with": spec["colocate_with"] if isinstance(spec.get("colocate_with"), str) else None,
    }


def _check_op(sid: str, spec: dict, op: Any, inputs: list[str], args: dict, dtype_name: Any, dtype: Dtype | None,
              base: str, doc: Document, problems: list[Diagnostic], fits: dict, path_args: dict, bare_args: dict,
              passed: dict) -> dict:
    """A stage's number of inputs, args and dtype against its op; returns its args with defaults and paths made absolute.

    A stage without args that passes records its args under its op, dtype
    and number of inputs in ``passed``: any other stage of that kind
    passes too, with the same args.
    """
    here = ("stages", sid)
    before = len(problems)
    lo, hi = op.arity
    # inputs: that is not a list of names is the schema's to say (inputs: x): counted, it gave 0 and hid that
    listed = isinstance(spec.get("inputs", []), list) and all(isinstance(i, str) for i in spec.get("inputs", []))
    if listed and not lo <= len(inputs) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        problems.append(Diagnostic(
            doc.at(here + ("inputs",)) if "inputs" in spec else doc.key_at(here),
            f"op {op.name!r} takes {want} input{'s' if hi != 1 else ''}, stage {sid!r} gives {len(inputs)}",
        ))
    arity = len(inputs) if lo <= len(inputs) <= hi else None
    if args:
        arg_problems = oplib.check_args(op, args, arity)
    else:  # most stages: the answer is the op's and the arity's alone
        arg_problems = bare_args.get((op.name, arity))
        if arg_problems is None:
            arg_problems = bare_args[op.name, arity] = oplib.check_args(op, args, arity)
    for arg, message in arg_problems:
        if arg is not None and has_undefined(args.get(arg)):
            continue
        if arg is None:
            where = doc.at(here + ("args",)) if "args" in spec else doc.key_at(here)
        elif arg in op.args:
            where = doc.at(here + ("args", arg))
        else:
            where = doc.key_at(here + ("args", arg))
        problems.append(Diagnostic(where, message))
    fit = fits.get((op.name, dtype_name)) if dtype is not None else True
    if fit is None:
        fit = fits[op.name, dtype_name] = dtype in op.dtypes
    if not fit:
        supported = ", ".join(d.value for d in Dtype if d in op.dtypes)
        problems.append(Diagnostic(
            doc.at(here + ("dtype",)),
            f"op {op.name!r} does not support dtype {dtype.value} (supported: {supported})",
        ))
    full = op.with_defaults(args)
    paths = path_args.get(op.name)
    if paths is None:
        paths = path_args[op.name] = [arg for arg, spec_arg in op.args.items() if spec_arg.kind == "path"]
    for arg in paths:
        if isinstance(full.get(arg), str):
            full[arg] = os.path.join(base, full[arg])
    if op.name == "load" and isinstance(full.get("path"), str) and dtype is not None:
        _check_load(sid, spec, full, dtype, doc, problems)
    elif not args and dtype is not None and len(problems) == before:
        passed[spec.get("op"), dtype_name, len(inputs)] = full.copy()
    return full


def _load_plugins(tree: dict, doc: Document, base: str, problems: list[Diagnostic]) -> list[Any]:
    """Load every module ``plugins:`` names; a failure is a problem at the entry that names it."""
    loaded: list[Any] = []
    specs = tree.get("plugins")
    if not specs:
        return loaded  # the plugin machinery (1-2 ms of start-up) is for manifests that name plugins
    from hetflow.executors import plugins as pluginlib

    for i, spec in enumerate(specs if isinstance(specs, list) else []):
        if not isinstance(spec, str):
            continue
        if "\0" in spec:
            problems.append(Diagnostic(doc.at(("plugins", i)), f"plugin {spec!r}: no such file or module (a path or a "
                                                               "module's name cannot hold a NUL character)"))
            continue
        try:
            plugin = pluginlib.load_plugin(spec, base)
        except pluginlib.PluginError as e:
            problems.append(Diagnostic(doc.at(("plugins", i)), str(e)))
            continue
        for other in loaded:
            for name in sorted(set(other.ops) & set(plugin.ops)):
                problems.append(Diagnostic(doc.at(("plugins", i)), (
                    f"op {name!r} is defined twice: by plugin {other.spec!r} and by plugin {spec!r}")))
        loaded.append(plugin)
    return loaded


def _user_op(name: str, plugins: list[Any], used: dict[str, Any], where: Origin,
             problems: list[Diagnostic]) -> tuple[Any, str | None]:
    """The plugin op ``name`` names for this manifest: (op, None), or (None, hint); (None, None) when reported."""
    from hetflow.executors import plugins as pluginlib

    try:
        op, hint = pluginlib.resolve_op(name, plugins)
    except pluginlib.PluginError as e:
        problems.append(Diagnostic(where, f"op {name!r}: {e}"))
        return None, None
    if op is not None and op.source not in used:
        found = pluginlib.plugin_for(name)
        if found is not None:
            used[found.module] = found
    return op, hint


def _check_load(sid: str, spec: dict, args: dict, dtype: Dtype, doc: Document, problems: list[Diagnostic]) -> None:
    """The file a ``load`` stage reads exists, parses, holds the array, and fits the stage's dtype."""
    here = ("stages", sid, "args")
    try:
        oplib.read_array(args["path"], args.get("key"), header=True)
    except ValueError as e:
        where = here + ("key",) if "key" in (spec.get("args") or {}) and "has no array" in str(e) else here + ("path",)
        problems.append(Diagnostic(doc.at(where), f"stage {sid!r}: {e}"))
        return
    if args.get("cast"):
        return
    try:
        problem = oplib.lossy_load(oplib.read_array(args["path"], args.get("key")), dtype)
    except (ValueError, MemoryError) as e:
        problems.append(Diagnostic(doc.at(here + ("path",)), f"stage {sid!r}: {e}"))
        return
    if problem:
        # a named dtype is a request for that dtype, not for losing values: only cast: true converts anyway
        fix = ("say cast: true in its args to convert anyway" if "dtype" in spec
               else "say dtype: on the stage, or cast: true in its args, to convert anyway")
        problems.append(Diagnostic(doc.at(here + ("path",)), (
            f"stage {sid!r} loads {os.path.basename(args['path'])}"
            + (f" [{args['key']}]" if args.get("key") else "") + f": {problem}; {fix}")))


def _cycles(stages: Mapping[str, Any]) -> list[list[str]]:
    """One cycle per strongly connected component that has one, nodes in manifest order."""
    import networkx as nx

    order = {n: i for i, n in enumerate(stages)}
    edges = [(ref, sid) for sid, spec in stages.items() if isinstance(spec, dict) and isinstance(spec.get("inputs"), list)
             for ref in spec["inputs"] if isinstance(ref, str) and ref in stages]
    graph = nx.DiGraph()
    graph.add_nodes_from(n for n, spec in stages.items() if isinstance(spec, dict))
    graph.add_edges_from(edges)
    found = []
    for component in nx.strongly_connected_components(graph):
        if len(component) == 1:
            (n,) = component
            if not graph.has_edge(n, n):
                continue
        sub = graph.subgraph(component)
        start = min(component, key=order.__getitem__)
        edges = nx.find_cycle(sub, source=start)
        found.append([u for u, _ in edges])
    return sorted(found, key=lambda c: order[c[0]])

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _memory_bytes(value: Any) -> int | None:
    """An executor's ``memory:`` in bytes; the schema has already checked its form.

    >>> _memory_bytes("1.5 KiB"), _memory_bytes(4096), _memory_bytes(None)
    (1536, 4096, None)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?) ?([KMGT]i?B|B)", value) if isinstance(value, str) else None
    if m is None or m.group(2) not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _device_set(name: str, spec: Mapping[str, Any], doc: Document, problems: list[Diagnostic]) -> Any:
    """An executor's ``devices:`` and ``split:`` as a :class:`~hetflow.executors.base.DeviceSet` (the schema
    has checked their forms); ``device:`` beside them, or a ``split:`` of another length, is a problem."""
    from hetflow.executors.base import DeviceSet

    here = ("executors", name)
    if "device" in spec:
        problems.append(Diagnostic(doc.at(here + ("device",)), (
            f"executor {name!r} gives both device: and devices:; device: N is the one-device form of devices: [N], "
            "give one of them")))
    raw = spec["devices"]
    indexes = None if raw == "all" else tuple(raw) if isinstance(raw, list) else (0,)
    split = spec.get("split")
    if isinstance(split, list):
        if indexes is None or len(split) != len(indexes):
            count = "every device the vendor has" if indexes is None else f"{len(indexes)} devices"
            problems.append(Diagnostic(doc.at(here + ("split",)), (
                f"executor {name!r} splits its work into {len(split)} shares for {count}; give one share per "
                "device listed in devices:" if indexes is not None else
                f"executor {name!r} gives split: with devices: all; the number of devices is known only on the "
                "machine, so list the devices (devices: [0, 1]) or leave split: out for even shares")))
            split = None
        else:
            split = _split_shares(name, split, doc, problems)
    else:
        split = None
    return DeviceSet(indexes, split)


def _split_shares(name: str, split: list, doc: Document, problems: list[Diagnostic]) -> tuple[float, ...] | None:
    """The shares of ``split:`` as floats, or None where one is NaN or infinite or they add up past float64:
    the schema's ``exclusiveMinimum: 0`` lets NaN and infinity through, and a share of either (or a total
    of infinity) makes every device's proportion NaN or 0, which cannot cut an axis."""
    here = ("executors", name, "split")
    shares = tuple(float(x) for x in split)
    bad = False
    for i, share in enumerate(shares):
        if math.isnan(share) or share == math.inf:  # -inf and other non-positive shares: the schema's minimum
            problems.append(Diagnostic(doc.at(here + (i,)), (
                f"executor {name!r} gives split[{i}] = {share}; each share is a finite number above 0, a "
                "proportion of the work ([3, 1] gives the first device three quarters)")))
            bad = True
    if not bad and all(share > 0 for share in shares) and sum(shares) == math.inf:
        problems.append(Diagnostic(doc.at(here), (
            f"executor {name!r} gives split shares that add up past float64's range (about 1.8e308); they are "
            "proportions, so give smaller numbers in the same ratio ([3, 1] gives the first device three quarters)")))
        bad = True
    return None if bad else shares


def _device_limits(name: str, device: Any, limits: list, doc: Document, problems: list[Diagnostic]) -> tuple[Any, Any]:
    """A ``memory_limit:`` list, one limit a device: carried by the executor's device set, the executor's own
    limit their sum. It needs ``devices:`` listing as many devices."""
    from hetflow.executors.base import DeviceSet

    count = len(device.indexes) if isinstance(device, DeviceSet) and device.indexes is not None else None
    if count != len(limits):
        where = ("with devices: all" if isinstance(device, DeviceSet) else "without devices:") if count is None else (
            f"for {count} devices")
        problems.append(Diagnostic(doc.at(("executors", name, "memory_limit")), (
            f"executor {name!r} gives {len(limits)} memory limit{'' if len(limits) == 1 else 's'} {where}; a list gives one limit per device listed "
            "in devices: (or give one limit, shared evenly)")))
        return device, None
    each = [_memory_limit(v) for v in limits]
    if any(v is None for v in each):
        return device, None  # the schema reported the value it refused
    return DeviceSet(device.indexes, device.split, each), sum(each)


def _device_claims(executors: Mapping[str, ExecutorDecl], raw: Mapping[str, Any], doc: Document) -> list[Diagnostic]:
    """A device belongs to one executor (the seed's rule): an executor listing ``devices:`` claims them, and
    another executor of a vendor it may run naming one of them (in ``devices:`` or ``device:``) is refused,
    at its line, with the first claim's. Executors that say neither share the host as before."""
    from hetflow.executors.base import DeviceSet

    problems: list[Diagnostic] = []
    claims: dict[tuple[Vendor, int | None], tuple[str, Any]] = {}  # (vendor, index; None: all) -> executor, origin
    for decl in executors.values():
        spec = _as_dict(raw.get(decl.name))
        if not isinstance(decl.device, DeviceSet) and "device" not in spec:
            continue
        listed = isinstance(decl.device, DeviceSet)
        key = "devices" if listed else "device"
        origin = doc.at(("executors", decl.name, key))
        indexes: tuple[int | None, ...] = (decl.device.indexes or (None,)) if listed else (int(decl.device),)
        for vendor in decl.vendors:
            for i, index in enumerate(indexes):
                clash = next(((v, j) for v, j in claims if v is vendor and (j == index or j is None or index is None)), None)
                if clash is not None:
                    owner, owner_origin, owner_listed = claims[clash]
                    if owner != decl.name and (listed or owner_listed):
                        what = f"device {index}" if index is not None else "every device"
                        theirs = f"device {clash[1]}" if clash[1] is not None else "every device"
                        at = doc.at(("executors", decl.name, key, i)) if listed and index is not None else origin
                        problems.append(Diagnostic(at, (
                            f"executor {decl.name!r} claims {vendor.value} {what}, and executor {owner!r} claims "
                            f"{theirs} at {owner_origin}; a device belongs to one executor: give each executor its "
                            "own devices")))
                        break
                here = doc.at(("executors", decl.name, key, i)) if listed and index is not None else origin
                claims.setdefault((vendor, index), (decl.name, here, listed))
    return problems


def _memory_limit(value: Any) -> int | None:
    """An executor's ``memory_limit:`` in bytes (0 is a valid cap, unlike ``memory:``)."""
    return 0 if value == 0 and not isinstance(value, bool) else _memory_bytes(value)


def _stage_vendors(value: Any) -> tuple[Vendor, ...]:
    names = value if isinstance(value, list) else [value] if isinstance(value, str) else []
    return tuple(Vendor(n) for n in names if n in Vendor.__members__)


def _placement_constraints(stages: Mapping[str, StageDecl], executors: Mapping[str, ExecutorDecl],
                           raw_stages: Mapping[str, Any], doc: Document) -> list[Diagnostic]:
    """``colocate_with`` names another stage and its group's pins agree; a pin runs a preferred vendor."""
    from hetflow.engine.adjacency import roots

    problems: list[Diagnostic] = []
    linked: list[tuple[str, str]] = []
    for s in stages.values():
        if s.colocate_with is None:
            continue
        if s.colocate_with == s.id:
            problems.append(Diagnostic(s.colocate_origin, f"stage {s.id!r} is colocated with itself; name another stage"))
        elif s.colocate_with not in raw_stages:
            close = _close(s.colocate_with, raw_stages, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(Diagnostic(s.colocate_origin, f"stage {s.id!r} is colocated with {s.colocate_with!r}, which is not a stage{hint}"))
        elif s.colocate_with in stages:
            linked.append((s.id, s.colocate_with))
    groups: dict[str, list[str]] = {}
    for n, root in roots([n for pair in linked for n in pair], linked).items():
        groups.setdefault(root, []).append(n)
    for members in groups.values():
        pins = sorted({(stages[m].executor, m) for m in members if stages[m].executor}, key=lambda p: list(stages).index(p[1]))
        if len({e for e, _ in pins}) > 1:
            (first, a), (_, b) = pins[0], next(p for p in pins if p[0] != pins[0][0])
            where = stages[b].colocate_origin or stages[b].executor_origin or stages[b].origin
            problems.append(Diagnostic(where, f"stage {b!r} is pinned to {stages[b].executor!r} but colocated (through colocate_with) "
                                              f"with {a!r}, pinned to {first!r}; one group runs on one executor"))
    for s in stages.values():
        if s.executor and s.vendors and s.executor in executors:
            declared = executors[s.executor].vendors
            if not set(declared) & set(s.vendors):
                problems.append(Diagnostic(s.vendor_origin, (
                    f"stage {s.id!r} wants vendor [{', '.join(v.value for v in s.vendors)}] but is pinned to executor "
                    f"{s.executor!r}, which runs [{', '.join(v.value for v in declared)}]")))
    return problems
