"""Emulator phases as declared in a manifest: what each phase takes and yields, and what the plan knows of it.

A stage with ``phase:`` belongs to an emulator (``emulators:`` in the
manifest), never to an executor: it is a node of the planner's graph
whose only placement is its emulator, :func:`target` (``emulator:NAME``),
and :func:`planned` is what the plan knows of it before the guest runs
(its fan-out and the bound on its array). :func:`check_manifest` checks
``emulators:`` and the phase stages for validate; how a run executes the
phases is :mod:`hetflow.engine.run.phases`. The phases and what they
yield (:data:`PHASES`):

``execute``        runs the guest once (``ExecutionOutput``); fields
                   ``steps``, ``exit_code``, ``pub_outs``, ``stdout``,
                   ``chunks``, ``end_reason``, ``counters``; arrays
                   ``registers``, ``min_trace``, ``min_trace_index``.
``mem-plans``      the memory plans (from the fast backend's MO runner, or
                   from the min traces on the reference path); fields
                   ``plans``, ``count``; arrays ``table``, ``rows``.
``rom-histogram``  pc -> times executed (RH runner, or the min traces);
                   fields ``steps``, ``pcs``, ``counts``.
``plan``           state-machine instances packed from the per-chunk
                   counters (``witness.plan_instances``); fields
                   ``instances``, ``count``; array ``instances_table``.
``witness``        every chunk re-executed from its min trace alone into
                   its witness table, one Dask task per chunk; the
                   tables, concatenated in chunk order, are an *array*
                   (an activation); fields ``rows``, ``chunks``.

A ``witness`` phase is an array itself (a stage names it alone). The
other phases yield JSON fields, which an ``outputs:`` entry
``STAGE.FIELD`` (or ``STAGE`` for all of them) persists in the run
record, and some also yield *array fields* (:class:`ArrayField`), int64
tables an executor stage takes as the input ``STAGE.FIELD`` and an
``outputs:`` entry persists as ``.npy``. Each array field a stage reads
is a node of its own in the graph, a phase of kind ``array``
(:data:`ARRAY_PHASE`, id ``STAGE.FIELD``, its one input the phase it
comes from), so it is placed, bridged and lowered as a witness table is:
its ``phase:STAGE.FIELD`` task builds the table from its phase's result
and hands it to the bridge's import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from hetflow.executors.base import Dtype

__all__ = ["PhaseKind", "ArrayField", "ARRAY_PHASE", "array_ref", "check_array_input", "PHASES", "EmulatorDecl",
           "PhaseDecl", "ARRAY_DTYPE", "WITNESS_ROW_BYTES", "EMULATOR_BRIDGE", "target", "planned",
           "execution_order", "article", "resolve_path", "check_manifest", "check_output"]

#: the dtype of every array a phase yields (a witness table, an array field), and the bytes of one witness row:
#: 16 int64 columns
ARRAY_DTYPE = Dtype.int64
WITNESS_ROW_BYTES = 16 * 8
EMULATOR_BRIDGE = "emulator output import"


@dataclass(frozen=True)
class ArrayField:
    """An int64 array a phase yields beside its JSON fields: its ``columns`` in order, and what the plan knows of its
    first axis before the guest runs (``rows``: ``None`` for a vector whose entries are the columns, ``"chunks"`` and
    ``"instances"`` bounded from ``max_steps``, ``"unknown"`` until it runs).

    The column names are declared here, once for the engine (the plan, the record's ``columns``); the builders in
    :mod:`hetflow.executors.emulator` write the same order (``tests/test_phase_outputs.py`` holds them equal).
    """

    name: str
    columns: tuple[str, ...]
    rows: str | None


@dataclass(frozen=True)
class PhaseKind:
    name: str
    inputs: tuple[str, ...]           # the phase each input must be
    array: bool                       # is an activation itself (a stage names it alone)
    fields: tuple[str, ...]           # its JSON fields
    args: tuple[str, ...] = ()
    arrays: tuple[ArrayField, ...] = ()   # its array fields: a stage may take one as an input ``STAGE.FIELD``

    def array_field(self, name: str) -> ArrayField | None:
        return next((a for a in self.arrays if a.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        """Every field an ``outputs:`` entry may name: the JSON fields, then the array fields."""
        return self.fields + tuple(a.name for a in self.arrays)


_X = tuple(f"x{i}" for i in range(32))
_EXECUTE_ARRAYS = (
    ArrayField("registers", (*_X, "pc"), None),
    # a word stream: each chunk's record is these words, then its ``reads`` memory words
    ArrayField("min_trace", ("chunk_id", "steps", "end", "pc", "step", "priv", "reservation", *_X, "mstatus", "mtvec",
                             "mepc", "mcause", "mtval", "mscratch", "mie", "reads"), "unknown"),
    ArrayField("min_trace_index", ("offset", "length"), "chunks"),
)
PHASES: dict[str, PhaseKind] = {
    "execute": PhaseKind("execute", (), False,
                         ("steps", "exit_code", "pub_outs", "stdout", "chunks", "end_reason", "counters"),
                         arrays=_EXECUTE_ARRAYS),
    "mem-plans": PhaseKind("mem-plans", ("execute",), False, ("plans", "count"), ("rows_per_plan",), arrays=(
        ArrayField("table", ("segment_id", "first_row", "count", "first_address", "first_step", "last_address",
                             "last_step", "is_last"), "unknown"),
        # the memory operations the plans cut: the Mem machine's rows (a second MO run makes them)
        ArrayField("rows", ("address", "step", "is_write"), "unknown"))),
    "rom-histogram": PhaseKind("rom-histogram", ("execute",), False, ("steps", "pcs", "counts")),
    "plan": PhaseKind("plan", ("execute",), False, ("instances", "count"), ("sizes",), arrays=(
        ArrayField("instances_table", ("machine", "segment_id", "size", "rows", "first_chunk", "first_skip",
                                       "last_chunk", "last_count", "is_last"), "instances"),)),
    "witness": PhaseKind("witness", ("execute",), True, ("rows", "chunks")),
}

#: the kind of the node that carries one array field (``STAGE.FIELD``) to the stages that read it; never written
#: in a manifest, so not in :data:`PHASES`
ARRAY_PHASE = "array"
_ARRAY_KIND = PhaseKind(ARRAY_PHASE, (), True, ())


def array_ref(ref: str, phases: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(phase, field)`` when ``ref`` reads as ``PHASE.FIELD`` for a phase in ``phases``, else None.

    A stage id may hold dots itself (a block's ``layers.3.attn``): the
    field is what follows the last one.

    >>> array_ref("run.registers", {"run": {}}), array_ref("top", {"run": {}})
    (('run', 'registers'), None)
    """
    head, dot, field = ref.rpartition(".")
    return (head, field) if dot and head in phases else None


def check_array_input(ref: str, stages: Mapping[str, Any]) -> str | None:
    """Why an executor stage cannot take ``ref`` (``PHASE.FIELD``) as an input, or None where it names an array field.

    >>> stages = {"run": {"phase": "execute"}}
    >>> check_array_input("run.registers", stages) is None
    True
    >>> print(check_array_input("run.steps", stages))
    field 'steps' of an execute phase is data, not an array (arrays: registers, min_trace, min_trace_index); name it under outputs: instead
    >>> print(check_array_input("run.regs", stages))
    an execute phase has no field 'regs' (arrays: registers, min_trace, min_trace_index)
    """
    pid, field = ref.rpartition(".")[::2]
    spec = stages.get(pid)
    kind = PHASES.get(spec.get("phase")) if isinstance(spec, dict) and isinstance(spec.get("phase"), str) else None
    if kind is None:
        return None if spec is None else f"{pid!r} is not an emulator phase, so it has no fields"
    arrays = ", ".join(a.name for a in kind.arrays) or "none"
    if kind.array_field(field) is not None:
        return None
    if kind.array:
        return f"{article(kind.name)} phase is an array itself: name {pid!r} alone"
    if field in kind.fields:
        return (f"field {field!r} of {article(kind.name)} phase is data, not an array (arrays: {arrays}); name it "
                f"under outputs: instead")
    return f"{article(kind.name)} phase has no field {field!r} (arrays: {arrays})"


@dataclass(frozen=True)
class EmulatorDecl:
    name: str
    isa: str
    backend: str
    program: str                      # absolute path
    chunk_steps: int
    max_steps: int
    input: str | None                 # absolute path of the input bytes
    origin: Any = None
    fetch: str = "executable"         # where instructions may be fetched from (the emulator's fetch protection)
    timeout: float | None = None      # seconds of wall-clock time the execute phase may run the guest
    accept_exit: tuple[int, ...] = (0,)   # the exit codes an execute phase succeeds with
    backend_reason: str = "chosen in the manifest"   # why ``backend`` (what ``backend: auto`` resolved to)
    memory: str = "protected"         # the emulator's memory mode: "flat" loads and stores anywhere mapped too
    max_output: int = 1 << 24         # the bytes the guest may write (the emulator's DEFAULT_MAX_OUTPUT)

    def to_json(self) -> dict:
        out = {"isa": self.isa, "backend": self.backend, "program": self.program, "chunk_steps": self.chunk_steps,
               "max_steps": self.max_steps, "input": self.input}
        # the defaults add no key, so earlier runs' cache keys still hold
        if self.fetch != "executable":
            out["fetch"] = self.fetch
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if self.accept_exit != (0,):
            out["accept_exit"] = list(self.accept_exit)
        if self.memory != "protected":
            out["memory"] = self.memory
        if self.max_output != 1 << 24:
            out["max_output"] = self.max_output
        return out


@dataclass(frozen=True)
class PhaseDecl:
    id: str
    phase: str
    emulator: str
    inputs: tuple[str, ...]
    args: Mapping[str, Any]
    origin: Any = None

    @property
    def kind(self) -> PhaseKind:
        return PHASES.get(self.phase) or _ARRAY_KIND

    def to_json(self) -> dict:
        return {"phase": self.phase, "emulator": self.emulator, "inputs": list(self.inputs), "args": dict(self.args),
                "array": self.kind.array, "origin": str(self.origin) if self.origin else None}


def target(emulator: str) -> str:
    """The placement target of every phase of ``emulator``: where the plan says the phase runs.

    >>> target("guest")
    'emulator:guest'
    """
    return f"emulator:{emulator}"


def execution_order(phases: Mapping[str, PhaseDecl]) -> list[str]:
    """The phases in an order that runs every input first: the ``execute`` phases, then the rest.

    Every other phase takes exactly one ``execute`` phase, so this is a
    topological order of the phases whatever order they were written in.
    """
    return ([pid for pid, p in phases.items() if not p.inputs] +
            [pid for pid, p in phases.items() if p.inputs])


def planned(p: PhaseDecl, emulator: EmulatorDecl) -> dict[str, Any]:
    """What the plan knows of phase ``p`` before its guest runs.

    The guest's length is known only once ``execute`` has run; the plan
    holds its bound, the emulator's ``max_steps`` (a run that reaches it
    fails). A ``witness`` phase re-executes every chunk, one Dask task
    each: at most ``ceil(max_steps / chunk_steps)`` tasks (``chunks_max``),
    and its table has one row per step, so its array is at most
    ``(max_steps, columns)`` int64. ``size`` says whether
    ``shape`` and ``bytes`` are ``exact`` or an upper ``bound``; a phase
    that yields data has neither.

    >>> e = EmulatorDecl("guest", "rv64ima", "fast", "/g.elf", chunk_steps=1024, max_steps=10_000, input=None)
    >>> w = planned(PhaseDecl("trace", "witness", "guest", ("run",), {}), e)
    >>> w["chunks_max"], w["shape"], w["bytes"], w["size"]
    (10, [10000, 16], 1280000, 'bound')
    >>> planned(PhaseDecl("run", "execute", "guest", (), {}), e)["size"] is None
    True

    An array field's node (:data:`ARRAY_PHASE`) knows its columns, and its
    rows where they are fixed (``registers``: exact), bounded (one
    ``min_trace_index`` row per chunk; ``instances_table``: at most
    ``ceil(max_steps / size)`` instances a machine) or known only once
    the guest has run (``shape`` None, ``size`` ``unknown``):

    >>> [(f, planned(PhaseDecl("run." + f, ARRAY_PHASE, "guest", ("run",), {"field": f, "of": "execute"}), e)["shape"])
    ...  for f in ("registers", "min_trace", "min_trace_index")]
    [('registers', [33]), ('min_trace', None), ('min_trace_index', [10, 2])]
    """
    from hetflow.executors.emulator import WITNESS_COLUMNS

    steps = int(emulator.max_steps)
    out: dict[str, Any] = {"target": target(p.emulator), "backend": emulator.backend,
                           "backend_reason": emulator.backend_reason, "steps_max": steps,
                           "tasks_max": 1, "shape": None, "dtype": None, "bytes": None, "size": None}
    if p.phase == ARRAY_PHASE:
        out.update(_array_plan(PHASES[p.args["of"]].array_field(p.args["field"]), p.args, emulator))
        return out
    if p.kind.arrays:  # what the plan knows of each array field, read by a stage or not
        out["arrays"] = {a.name: _array_plan(a, p.args, emulator) for a in p.kind.arrays}
    if p.kind.array:
        chunks = -(-steps // int(emulator.chunk_steps))
        shape = [steps, len(WITNESS_COLUMNS)]
        out.update(tasks_max=chunks, chunks_max=chunks, rows_max=steps, shape=shape, dtype=Dtype.int64.value,
                   bytes=Dtype.int64.nbytes(shape[0] * shape[1]), size="bound")
    return out


def _array_plan(spec: ArrayField, args: Mapping[str, Any], emulator: EmulatorDecl) -> dict[str, Any]:
    """The shape, bytes and columns of array field ``spec`` before the guest runs (``args``: its phase's)."""
    steps = int(emulator.max_steps)
    rows: int | None = None
    if spec.rows == "chunks":
        rows = -(-steps // int(emulator.chunk_steps))
    elif spec.rows == "instances":   # each machine has at most one row a step
        from hetflow.executors.emulator import DEFAULT_SIZES
        rows = sum(-(-steps // int(size)) for size in (args.get("sizes") or DEFAULT_SIZES).values())
    shape = [len(spec.columns)] if spec.rows is None else None if rows is None else [rows, len(spec.columns)]
    return {"dtype": ARRAY_DTYPE.value, "shape": shape, "columns": list(spec.columns),
            "size": "exact" if spec.rows is None else "unknown" if rows is None else "bound",
            "bytes": None if shape is None else ARRAY_DTYPE.nbytes(int(np.prod(shape))),
            **({"rows_max": rows} if rows is not None else {})}


def article(word: str) -> str:
    """``word`` with its indefinite article: "an execute", "a witness"."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


def resolve_path(base: str, path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(base, path)


# keys of executor stages that mean nothing for a phase (a phase runs once on its emulator, uncached)
EXECUTOR_ONLY = ("op", "dtype", "executor", "vendor", "colocate_with", "retries", "timeout", "cache")


def check_manifest(tree: Mapping[str, Any], doc: Any, base: str, problems: list) -> tuple[dict, dict]:
    """The manifest's ``emulators:`` and phase stages, checked; problems are appended with FILE:LINE:COL."""
    import difflib

    from hetflow.engine.errors import Diagnostic

    emulators: dict[str, EmulatorDecl] = {}
    raw = tree.get("emulators") if isinstance(tree.get("emulators"), dict) else {}
    if raw:  # the emulator's package is 3-8 ms of a manifest without emulators' validation
        from hetflow.executors.emulator import (AUTO, DEFAULT_CHUNK_STEPS, DEFAULT_MAX_OUTPUT, DEFAULT_MAX_STEPS,
                                                ElfError, load_elf, resolve_backend)
        from hetflow.executors.emulator.elf import ISAS
    for name, spec in raw.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("program"), str):
            continue
        here = ("emulators", name)
        program = resolve_path(base, spec["program"])
        try:
            if not os.path.exists(program):
                raise FileNotFoundError(program)
            if not os.path.isfile(program):  # a FIFO would hold the read until something writes to it
                from hetflow.executors.files import not_a_file

                raise OSError(0, not_a_file(program))
            isa = spec.get("isa", "rv64imac")
            # an isa the schema refuses is said there, at its line; the program is read as the default one
            load_elf(program, isa=isa if isa in ISAS else "rv64imac")
        except FileNotFoundError:
            problems.append(Diagnostic(doc.at(here + ("program",)), f"emulator {name!r}: program {spec['program']!r} does not exist ({program})"))
        except OSError as e:
            problems.append(Diagnostic(doc.at(here + ("program",)), f"emulator {name!r}: cannot read program {spec['program']!r}: {e.strerror or e}"))
        except ElfError as e:
            problems.append(Diagnostic(doc.at(here + ("program",)), f"emulator {name!r}: program {spec['program']!r} is not a guest ELF: {e}"))
        if spec.get("memory") == "flat" and spec.get("fetch") == "executable":
            problems.append(Diagnostic(doc.at(here + ("fetch",)), f"emulator {name!r}: memory: flat fetches from any "
                                       f"mapped memory (it implies fetch: any); drop fetch: executable, or drop "
                                       f"memory: flat"))
        data = spec.get("input")
        if isinstance(data, str):
            data = resolve_path(base, data)
            if not os.path.isfile(data) or not os.access(data, os.R_OK):
                problems.append(Diagnostic(doc.at(here + ("input",)), f"emulator {name!r}: input file {spec['input']!r} cannot be read ({data})"))
        # auto resolves here, once, so that the plan, the cache key and the record name the backend that runs
        given = spec.get("backend", AUTO)
        backend, reason = given, "chosen in the manifest"      # an unknown name is the schema's to report
        if given == AUTO:
            backend, why = resolve_backend(AUTO)
            reason = f"auto: {why}"
        emulators[name] = EmulatorDecl(
            name, spec.get("isa", "rv64imac"), backend, program,
            spec.get("chunk_steps", DEFAULT_CHUNK_STEPS), spec.get("max_steps", DEFAULT_MAX_STEPS),
            data if isinstance(data, str) else None, doc.key_at(here),
            # flat memory fetches from anywhere: its fetch is "any" (a fetch: executable beside it is refused above)
            spec.get("fetch", "any" if spec.get("memory") == "flat" else "executable"),
            spec.get("timeout"), tuple(spec.get("accept_exit", (0,))), backend_reason=reason,
            memory=spec.get("memory", "protected"), max_output=spec.get("max_output", DEFAULT_MAX_OUTPUT))

    stages = tree.get("stages") if isinstance(tree.get("stages"), dict) else {}
    phases: dict[str, PhaseDecl] = {}
    pending = [(sid, spec) for sid, spec in stages.items() if isinstance(spec, dict) and spec.get("phase") in PHASES]
    for sid, spec in pending:
        here = ("stages", sid)
        kind = PHASES[spec["phase"]]
        for key in EXECUTOR_ONLY:
            if key in spec and key != "op":
                problems.append(Diagnostic(doc.key_at(here + (key,)), (
                    f"stage {sid!r} is {article(kind.name)} phase, which runs on its emulator: {key!r} is a key of executor stages")))
        inputs = [i for i in spec.get("inputs", []) if isinstance(i, str)] if isinstance(spec.get("inputs"), list) else []
        ok = True
        if len(inputs) != len(kind.inputs):
            n = len(kind.inputs)
            want = (f"{n} input{'s' * (n != 1)} ({', '.join(article(k) + ' phase' for k in kind.inputs)})" if n
                    else "no inputs")
            problems.append(Diagnostic(doc.at(here + ("inputs",)) if "inputs" in spec else doc.key_at(here),
                                       f"phase {kind.name!r} takes {want}, stage {sid!r} gives {len(inputs)} input{'s' if len(inputs) != 1 else ''}"))
            ok = False
        for i, (ref, want) in enumerate(zip(inputs, kind.inputs)):
            other = stages.get(ref)
            got = other.get("phase") if isinstance(other, dict) else None
            if ref in stages and got != want:
                what = f"{article(got)} phase" if got else "an executor stage"
                problems.append(Diagnostic(doc.at(here + ("inputs", i)),
                                           f"phase {kind.name!r} of stage {sid!r} takes {article(want)} phase, but {ref!r} is {what}"))
                ok = False
        args = spec.get("args", {}) if isinstance(spec.get("args"), dict) else {}
        for key in args:
            if key not in kind.args:
                allowed = ", ".join(kind.args) or "none"
                problems.append(Diagnostic(doc.key_at(here + ("args", key)), f"phase {kind.name!r} has no argument {key!r} (arguments: {allowed})"))
                ok = False
        if "rows_per_plan" in args and not (isinstance(args["rows_per_plan"], int) and args["rows_per_plan"] > 0):
            problems.append(Diagnostic(doc.at(here + ("args", "rows_per_plan")), "rows_per_plan must be a positive integer"))
            ok = False
        if "sizes" in args:
            from hetflow.executors.emulator import STATE_MACHINES
            sizes = args["sizes"]
            machines = ", ".join(STATE_MACHINES)
            if not isinstance(sizes, dict):
                problems.append(Diagnostic(doc.at(here + ("args", "sizes")), (
                    f"sizes maps state machines ({machines}) to positive row counts, found {sizes!r}")))
                ok = False
            for k, v in sizes.items() if isinstance(sizes, dict) else ():
                if k not in STATE_MACHINES:
                    close = difflib.get_close_matches(str(k), list(STATE_MACHINES), n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    problems.append(Diagnostic(doc.key_at(here + ("args", "sizes", k)), (
                        f"sizes names no state machine {k!r} (state machines: {machines}){hint}")))
                    ok = False
                elif not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                    problems.append(Diagnostic(doc.at(here + ("args", "sizes", k)), (
                        f"sizes.{k} must be a positive row count (an integer above 0), found {v!r}")))
                    ok = False
        emulator = spec.get("emulator")
        if isinstance(emulator, str) and emulator not in raw:
            close = difflib.get_close_matches(emulator, list(raw), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(Diagnostic(doc.at(here + ("emulator",)), (
                f"stage {sid!r} names emulator {emulator!r}, which is not declared (declared: {', '.join(raw) or 'none'}){hint}")))
            continue
        if emulator is None and kind.name == "execute":
            if len(raw) != 1:
                problems.append(Diagnostic(doc.key_at(here), (
                    f"stage {sid!r} is an execute phase: name its emulator with `emulator:` "
                    + ("(no emulator is declared under `emulators:`)" if not raw else f"(declared: {', '.join(raw)})"))))
                continue
            emulator = next(iter(raw))
        if ok and isinstance(emulator, str) or ok and inputs:
            phases[sid] = PhaseDecl(sid, kind.name, emulator or "", tuple(inputs), dict(args), doc.key_at(here))
    # a phase's emulator is its execute input's
    for sid, p in list(phases.items()):
        if p.inputs and p.inputs[0] in phases:
            source = phases[p.inputs[0]].emulator
            declared = stages[sid].get("emulator")
            if isinstance(declared, str) and declared != source:
                problems.append(Diagnostic(doc.at(("stages", sid, "emulator")), (
                    f"stage {sid!r} names emulator {declared!r}, but its input {p.inputs[0]!r} runs on {source!r}")))
            phases[sid] = PhaseDecl(sid, p.phase, source, p.inputs, p.args, p.origin)
    for sid, p in list(phases.items()):
        if p.emulator not in emulators:
            del phases[sid]
    # every array field an executor stage reads becomes a node of its own, after the phases (a topological order)
    for spec in stages.values():
        refs = spec.get("inputs") if isinstance(spec, dict) and "phase" not in spec else None
        for ref in refs if isinstance(refs, list) else ():
            found = array_ref(ref, phases) if isinstance(ref, str) and ref not in stages else None
            if found is None or ref in phases or phases[found[0]].kind.array_field(found[1]) is None:
                continue  # not an array field: the stage's inputs are checked with the stages
            source = phases[found[0]]
            args = {"field": found[1], "of": source.phase,
                    **({"sizes": dict(source.args["sizes"])} if "sizes" in source.args else {})}
            phases[ref] = PhaseDecl(ref, ARRAY_PHASE, source.emulator, (source.id,), args, source.origin)
    return emulators, phases


def check_output(stage: str, fieldname: str | None, stages: Mapping[str, Any], phases: Mapping[str, PhaseDecl]) -> str | None:
    """Why ``outputs: {NAME: STAGE.FIELD}`` is wrong, or None."""
    spec = stages.get(stage)
    if spec is None:
        use = stage.split(".")[0]
        inside = sorted((s for s in stages if s.startswith(use + ".")), key=lambda s: (s.count("."), s))
        if inside:  # a use of a block: its instances' stages are named USE.STAGE, or USE.INDEX.STAGE
            shown = ", ".join(inside[:4]) + (f" and {len(inside) - 4} more" if len(inside) > 4 else "")
            return f"{stage!r} is not a stage; {use!r} is a use of a block, whose stages are {shown}"
        return f"{stage!r} is not a stage"
    if stage not in phases:
        return f"{stage!r} is not an emulator phase, so it has no fields; name the stage alone"
    kind = phases[stage].kind
    if fieldname is not None and fieldname not in kind.names:
        arrays = f"; arrays: {', '.join(a.name for a in kind.arrays)}" if kind.arrays else ""
        return f"{article(kind.name)} phase has no field {fieldname!r} (fields: {', '.join(kind.fields)}{arrays})"
    return None
