"""The expansion pass: ``defaults:`` and blocks -> a flat graph of stages, each still knowing where it was written.

It runs between resolve and validate (:func:`hetflow.engine.manifest.validate.compile_manifest`),
so everything after it (the schema and semantic checks, the plan in every
format, the record, ``outputs:``, placement pins, cache keys) sees plain
stages with stable ids and needs no notion of a block:

- a *block* (``blocks:`` of the manifest, or of a library file named as
  ``FILE#NAME``) declares params with their defaults, inputs, stages and
  outputs;
- a *use* is a stage entry with ``use:``; it binds the block's inputs to
  stages of its graph, sets params, may say ``repeat: N`` (instance ``i``'s
  outputs feed instance ``i+1``'s inputs, by name or by ``chain:``) and may
  carry stage keys (``executor:``, ``dtype:``...) for its executor stages;
- an instance's stage ``q`` of use ``attn`` inside instance 3 of use
  ``layers`` is ``layers.3.attn.q``; ``USE.OUTPUT`` names a use's output
  (the last instance's, for a repeat) wherever a stage may be named.

Stage keys come from the stage itself, else from its uses (innermost
first), else from ``defaults:``; emulator phases take none of those keys
and get none. The :class:`Expanded` document maps every expanded path
back to where it was written: a block's stage to its line in the block
(maybe in another file), with one note per use that made the instance; a
key a stage got from a default or a use to where that was written, with a
note naming the stage. Blocks that use themselves, directly or not, are
refused with the cycle named; nesting is limited to :data:`MAX_NESTING`,
and the stages all uses make together to :data:`MAX_STAGES`.

Examples
--------
>>> from hetflow.engine.manifest.loader import loads
>>> doc = loads('''
... version: 1
... name: demo
... defaults: {retries: 2}
... blocks:
...   twice:
...     params: {k: 2}
...     inputs: [x]
...     stages:
...       y: {op: clip, inputs: [x], args: {min: 0, max: "${k}"}}
...     outputs: {y: y}
... executors: {host: {vendor: cpu}}
... stages:
...   a: {op: zeros, args: {shape: [2]}}
...   t: {use: twice, inputs: {x: a}, repeat: 2, chain: {x: y}}
...   b: {op: relu, inputs: [t.y]}
... outputs: {b: b}
... ''', "demo.yaml")
>>> tree, expanded, problems = expand(doc.value, doc)
>>> list(tree["stages"]), tree["stages"]["t.1.y"]["inputs"], tree["stages"]["b"]["inputs"], problems
(['a', 't.0.y', 't.1.y', 'b'], ['t.0.y'], ['t.1.y'], [])
>>> tree["stages"]["b"]["retries"], "retries" in tree["stages"]["t.1.y"]
(2, True)
>>> print(Diagnostic(expanded.at(("stages", "t.1.y", "op")), "a problem with this op"))
demo.yaml:10:15: error: a problem with this op
demo.yaml:15:3: note: in t.1 (block twice)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hetflow.engine.errors import Diagnostic, ManifestError, Noted, Origin
from hetflow.engine.manifest.loader import Document, Path, load
from hetflow.engine.manifest.resolve import UNDEFINED, interpolate, names, override_text, refers, resolve_params

__all__ = ["expand", "Expanded", "MAX_NESTING", "MAX_STAGES", "INHERITED"]

#: how deep uses may nest (a block using a block ...): deeper is refused, as a cycle would be
MAX_NESTING = 16

#: the most stages a manifest's uses may expand to: ten times the largest plans measured (100,000 stages plan
#: in 4 s); nested repeats multiply, and three levels of ``repeat: 1000`` would be 10^9 stages, a machine's memory
MAX_STAGES = 1_000_000

#: the stage keys a stage may get from ``defaults:`` or from a use; what else a stage says is its own alone
INHERITED = ("dtype", "executor", "vendor", "retries", "timeout", "cache")

_LIBRARY_KEYS = ("version", "description", "blocks")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class Expanded(Document):
    """The expanded manifest: plain data whose positions lead back to where each part was written.

    A path under an instance's stage is looked up in the block's document
    (``routes``), a key a stage got from a default or a use where that was
    written (``keyed``); any other path in the manifest itself.
    """

    __slots__ = ("base", "routes", "keyed", "unnamed")

    def __init__(self, base: Document, value: dict, routes: dict, keyed: dict, unnamed: dict | None = None) -> None:
        super().__init__(base.file, value, {}, {}, problems=base.problems)
        self.base = base
        self.routes = routes  # instance stage id -> (document, path of the stage there, notes)
        self.keyed = keyed  # (stage id, key) -> origin of the default or use key it got
        # a name, as expanded, that reads a use but names none of its outputs -> why, in a message's words
        self.unnamed = unnamed or {}

    def _origin(self, path: Path, key: bool) -> Origin:
        path = tuple(path)
        if len(path) >= 2 and path[0] == "stages":
            route = self.routes.get(path[1])
            if len(path) >= 3:
                given = self.keyed.get((path[1], path[2]))
                if given is not None:  # the note is made when asked for: most stages never have a problem
                    stage = self.base.key_at(path[:2]) if route is None else route[0].key_at(route[1])
                    return Noted(given, [(stage, f"as the {path[2]} of stage {path[1]!r}"), *(route[2] if route else ())])
            if route is not None:
                doc, where, notes = route
                found = doc.key_at(where + path[2:]) if key else doc.at(where + path[2:])
                return Noted(found, notes) if notes else found
        return self.base.key_at(path) if key else self.base.at(path)

    def at(self, path: Path) -> Origin:
        return self._origin(path, False)

    def key_at(self, path: Path) -> Origin:
        return self._origin(path, True)


class _Sited:
    """Positions in a block's document, each with the notes of the instance being expanded."""

    def __init__(self, doc: Document, notes: tuple) -> None:
        self.doc, self.notes = doc, notes

    def at(self, path: Path) -> Origin:
        return Noted(self.doc.at(path), self.notes) if self.notes else self.doc.at(path)

    def key_at(self, path: Path) -> Origin:
        return Noted(self.doc.key_at(path), self.notes) if self.notes else self.doc.key_at(path)


@dataclass
class _Block:
    name: str
    doc: Document
    path: Path  # of the block's mapping in its document
    spec: dict
    label: str  # as a use names it: NAME, or FILE#NAME

    @property
    def key(self) -> tuple[str, str]:
        return (self.doc.file, self.name)


@dataclass
class _Scope:
    """One graph being expanded: the manifest's stages, or one instance of a block."""

    at: Any  # at(path) / key_at(path) for positions of what this graph holds
    doc: Document  # the document its stages are written in
    path: Path  # of its stages mapping there
    stages: dict  # its entries as written (a block's: before its params are substituted)
    prefix: str = ""  # the instance id ("" for the manifest)
    values: dict | None = None  # the block's params for this instance; None: already resolved
    bindings: dict = field(default_factory=dict)  # block input -> stage id outside
    inherited: dict = field(default_factory=dict)  # stage key -> (value, origin)
    notes: tuple = ()
    stack: tuple = ()  # the blocks being expanded, outermost first

    def join(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name


class _Expansion:
    """One expansion of a manifest: the stages made so far, where each came from, the libraries read."""

    def __init__(self, doc: Document, problems: list[Diagnostic]) -> None:
        self.doc = doc
        self.problems = problems
        self.stages: dict[str, Any] = {}
        self.routes: dict[str, tuple] = {}
        self.keyed: dict[tuple[str, str], Origin] = {}
        self.libraries: dict[str, Document | None] = {}
        self.checked: dict[tuple[str, str], bool] = {}  # block -> whether its form is right
        self.right_forms: set[tuple] = set()  # (document, path, use as written there) checked and found right
        self.written: dict[str, Origin] = {}  # stage id -> where its stage was written, for a clash
        self.overrides: dict[str, Any] = {}  # -p USE.PARAM / USE.INDEX.PARAM -> value
        self.applied: set[str] = set()  # those that named an instance's param
        self.params_seen: list[str] = []  # USE.PARAM of every use expanded, for the message of one that did not
        self.stopped = False  # past MAX_STAGES: said once, nothing more is expanded
        self.deep: set[Origin] = set()  # where a use nested too deep was said
        self.used: set[tuple[str, str]] = set()  # the blocks some use expanded
        self.outputs_checked: set[tuple[str, str]] = set()  # blocks whose USE.OUTPUT outputs were looked up
        self.unnamed: dict[str, str] = {}  # a name that reads a use but none of its outputs -> why (see Expanded)

    # -- finding blocks ---------------------------------------------------------------------------------

    def block(self, scope: _Scope, ref: Any, where: Origin) -> _Block | None:
        """The block a use names, ``NAME`` or ``FILE#NAME``; None (reported) where there is none."""
        if not isinstance(ref, str):
            return None
        file, hash_, name = ref.rpartition("#")
        if hash_:
            doc = self.library(scope.doc, file, where)
            if doc is None:
                return None
        else:
            doc, name = scope.doc, ref
        blocks = doc.value.get("blocks") if isinstance(doc.value, dict) else None
        spec = blocks.get(name) if isinstance(blocks, dict) else None
        if (spec is not None or isinstance(blocks, dict) and name in blocks) and not isinstance(spec, dict):
            return None  # reported where the block is (a null one too)
        if spec is None:
            from hetflow.engine.manifest.semantics import _close

            known = list(blocks) if isinstance(blocks, dict) else []
            close = _close(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.problems.append(Diagnostic(where, (
                f"no block {name!r} in {doc.file if hash_ or doc is not self.doc else 'blocks:'} "
                f"(blocks: {', '.join(known) or 'none'}){hint}")))
            return None
        return _Block(name, doc, ("blocks", name), spec, ref)

    def library(self, user: Document, file: str, where: Origin) -> Document | None:
        """A library of blocks, ``file`` relative to the file of the use that names it; loaded once."""
        # relative to the user's file as it was named, so messages name the library as the manifest is named
        folder = os.path.dirname(user.file) if user.file != "<string>" else ""
        path = os.path.normpath(os.path.join(folder, file)) if file else user.file
        if path in self.libraries:
            return self.libraries[path]
        self.libraries[path] = None
        if os.path.abspath(path) == os.path.abspath(self.doc.file):
            self.libraries[path] = self.doc
            return self.doc
        if not os.path.exists(path):  # what is there but no file, load() says what it is instead
            self.problems.append(Diagnostic(where, f"block library {file!r} does not exist ({path})"))
            return None
        # the use, then the instances it is in (a library's block using another library)
        used = [(_plain(where), "in the block library used here"), *getattr(where, "notes", ())]
        try:
            doc = load(path)
        except ManifestError as e:
            self.problems.extend(Diagnostic(Noted(d.origin, used) if d.origin else where, d.message)
                                 for d in e.diagnostics)
            return None
        value = doc.value
        if doc.problems:
            self.problems.extend(Diagnostic(Noted(d.origin, used), d.message) if d.origin else d for d in doc.problems)
            return None
        if not isinstance(value, dict) or not isinstance(value.get("blocks"), dict):
            self.problems.append(Diagnostic(Noted(doc.at(()), used), f"{path} is not a block library: a YAML mapping with blocks:"))
            return None
        for key in value:
            if key not in _LIBRARY_KEYS:
                self.problems.append(Diagnostic(Noted(doc.key_at((key,)), used), (
                    f"unknown key {key!r} in a block library (allowed: {', '.join(_LIBRARY_KEYS)})")))
        if "version" in value and (value["version"] != 1 or isinstance(value["version"], bool)):
            self.problems.append(Diagnostic(Noted(doc.at(("version",)), used),
                                            f"a block library's version must be 1, found {value['version']!r}"))
        if "description" in value and not isinstance(value["description"], str):
            self.problems.append(Diagnostic(Noted(doc.at(("description",)), used),
                                            f"a block library's description must be text, found {value['description']!r}"))
        self.problems.extend(Diagnostic(Noted(d.origin, used), d.message) for d in _block_names(value["blocks"], doc))
        self.libraries[path] = doc
        return doc

    def check_block(self, block: _Block) -> bool:
        """The block's own form, once per block: what the expansion relies on before its stages are checked."""
        from hetflow.engine.manifest.schemacheck import part_problems

        if block.key in self.checked:
            return self.checked[block.key]
        spec = block.spec
        found: list[Diagnostic] = []
        written = spec.get("stages")
        if isinstance(written, dict):
            for name in written:
                if not isinstance(name, str) or _NAME.fullmatch(name) is None:
                    found.append(Diagnostic(block.doc.key_at(block.path + ("stages", name)), (
                        f"invalid stage name {name!r} in block {block.name!r}: a letter or '_', then letters, digits, "
                        "'_' or '-' (no '.': an instance's stages are named USE.STAGE)")))
            # its stages are checked as the instances' stages are, once their params are substituted
            # (none valid, but some written: one that is, so that no other message is made of the names)
            written = {k: {"op": "-"} for k in written if isinstance(k, str) and _NAME.fullmatch(k)} or (
                {"_": {"op": "-"}} if written else {})
        found += part_problems({**spec, "stages": written}, "block", block.doc, block.path)
        params = spec.get("params") if isinstance(spec.get("params"), dict) else {}
        if "index" in params:
            found.append(Diagnostic(block.doc.key_at(block.path + ("params", "index")),
                                    f"block {block.name!r} declares param 'index', which is the instance's index"))
        elif any(refers(v) for v in params.values()):
            # a default may name the block's other params; a block reads no other, wherever it is used
            unknown: dict[str, Any] = {}
            for name, value in params.items():
                for other in names(value):
                    if other not in params and other != "index" and other not in unknown:
                        unknown[other] = UNDEFINED  # said here, in a block's words; stands as already said below
                        ref = "${" + other + "}"
                        found.append(Diagnostic(block.doc.at(block.path + ("params", name)), (
                            f"param {name!r} of block {block.name!r} names {ref}, which is none of its params "
                            f"({', '.join(params)}): a block reads its own params alone; give it the manifest's in "
                            f"each use, params: {{{name}: \"{ref}\"}}")))
            resolve_params({**params, "index": 0, **unknown}, block.doc, found, block.path + ("params",))
        inputs = spec.get("inputs") if isinstance(spec.get("inputs"), list) else []
        stages = spec.get("stages") if isinstance(spec.get("stages"), dict) else {}
        for name in inputs:
            if name in stages:
                found.append(Diagnostic(block.doc.key_at(block.path + ("stages", name)),
                                        f"block {block.name!r} has an input and a stage named {name!r}"))
        for out, ref in (spec.get("outputs") if isinstance(spec.get("outputs"), dict) else {}).items():
            if not isinstance(ref, str):
                continue
            head = ref.partition(".")[0]
            if head not in stages:
                what = "an input; an output names a stage" if ref in inputs else "not a stage of the block"
                found.append(Diagnostic(block.doc.at(block.path + ("outputs", out)),
                                        f"output {out!r} of block {block.name!r} names {ref!r}, which is {what}"))
            elif out in stages and out != ref:
                # USE.m would name the output where the instance's own stage m was meant, unsaid
                found.append(Diagnostic(block.doc.key_at(block.path + ("outputs", out)), (
                    f"output {out!r} of block {block.name!r} names {ref!r}, and the block has a stage {out!r}: "
                    f"USE.{out} would name either; rename one")))
        self.problems.extend(found)
        self.checked[block.key] = not found
        return not found

    # -- names ---------------------------------------------------------------------------------------

    def local(self, scope: _Scope, ref: Any) -> Any:
        """What ``ref``, as written in ``scope``, names in the expanded graph.

        A name is looked up by what it is: a block's input, a stage of this
        graph, ``USE.OUTPUT`` (or a use with one output, alone), then
        ``PHASE.FIELD``. Anything else is kept (under the instance's
        prefix), for the semantic check to report where it was written.
        """
        if not isinstance(ref, str):
            return ref
        if ref in scope.bindings:
            return scope.bindings[ref]
        entry = scope.stages.get(ref)
        if entry is not None and not _is_use(entry):
            return scope.join(ref)
        head, dot, tail = ref.partition(".")
        entry = scope.stages.get(head)
        if _is_use(entry):
            found = self.output(scope, head, tail if dot else None, 0)
            if found is not None:
                return found
            wrong = self.names_nothing(scope, ref)
            index, _, name = tail.partition(".")
            if wrong is None and index.isdigit() and name and scope.join(ref) not in self.stages:
                # USE.INDEX.OUTPUT: an instance's stages are named by their ids, its outputs are not names
                found = self.output(scope, head, name, 0, int(index))
                if found is not None:
                    wrong = (f"which is not a stage: {name!r} is an output of use {head!r}, which instance {index} "
                             f"gives as stage {found!r}; name that stage")
            if wrong is not None:  # said by the semantic check, where the name is written
                self.unnamed[scope.join(ref)] = wrong
        return scope.join(ref)

    def output(self, scope: _Scope, use: str, name: str | None, depth: int, index: int | None = None) -> str | None:
        """The stage id of output ``name`` of ``use`` in ``scope`` (its last instance's, or instance ``index``'s of
        a repeated use); None where there is none."""
        spec = self.substituted(scope, scope.stages[use], scope.path + (use,), report=False)
        block = self.quietly(scope, spec.get("use")) if depth < MAX_NESTING else None
        if block is None or not isinstance(block.spec.get("outputs"), dict):
            return None
        outputs = block.spec["outputs"]
        if name is None and len(outputs) == 1:
            name = next(iter(outputs))
        if name not in outputs or not isinstance(outputs[name], str):
            return None
        repeat = spec.get("repeat")
        count = repeat if isinstance(repeat, int) and not isinstance(repeat, bool) and repeat >= 1 else 1
        if index is not None and ("repeat" not in spec or not 0 <= index < count):
            return None
        index = count - 1 if index is None else index
        prefix = scope.join(use) + (f".{index}" if "repeat" in spec else "")
        # with the -p overrides of this instance's params, as its expansion has them (a repeat count among them)
        inner = _Scope(block.doc, block.doc, block.path + ("stages",), _as_dict(block.spec.get("stages")), prefix,
                       self.params(block, spec, index, None, scope.join(use), prefix))
        ref = outputs[name]
        head, dot, tail = ref.partition(".")
        entry = inner.stages.get(head)
        if _is_use(entry):
            return self.output(inner, head, tail if dot else None, depth + 1)
        return inner.join(ref)

    def names_nothing(self, scope: _Scope, ref: Any, expanded: bool = False) -> str | None:
        """Why ``ref``, written in ``scope``, names nothing there (a stage, a block's input, ``USE.OUTPUT``, a
        stage of a use's instance, ``PHASE.FIELD``); None where it names something, or is no name (the schema
        says so), or cannot be told yet. ``expanded``: the uses of ``scope`` have made their stages."""
        if not isinstance(ref, str) or ref in scope.bindings:
            return None
        head, dot, tail = ref.partition(".")
        entry = scope.stages.get(head)
        if entry is None and head not in scope.stages:
            from hetflow.engine.manifest.semantics import _close

            close = _close(ref, [*scope.stages, *scope.bindings], n=1)
            return f"which is not a stage{f'; did you mean {close[0]!r}?' if close else ''}"
        if not _is_use(entry) or self.output(scope, head, tail if dot else None, 0) is not None:
            return None
        block = self.quietly(scope, self.substituted(scope, entry, scope.path + (head,), report=False).get("use"))
        if block is None or not isinstance(block.spec.get("outputs"), dict):
            return None  # a use that names no block is said where it is expanded
        outputs = block.spec["outputs"]
        listed = ", ".join(map(str, outputs)) or "none"
        if not dot:
            if len(outputs) == 1:
                return None  # its one output could not be followed (a use of itself): said where it is expanded
            return f"a use of block {block.name!r}, which has several outputs: name one, {head}.OUTPUT ({listed})"
        if tail.partition(".")[0] in outputs:
            return None
        # USE.STAGE or USE.INDEX.STAGE names a stage of an instance: known once the use has made its stages
        if scope.join(ref) in self.stages or (not expanded and ("." in tail or tail in _as_dict(block.spec.get("stages")))):
            return None
        return f"which is no output of use {head!r} (outputs of block {block.name!r}: {listed})"

    def quietly(self, scope: _Scope, ref: Any) -> _Block | None:
        """The block ``ref`` names, None where it names none. A use that names no block, or a library that does
        not load, is said where the use is expanded, once: a library read here is read again there, and says what
        is wrong with it."""
        before, loaded = len(self.problems), set(self.libraries)
        block = self.block(scope, ref, scope.at.at(scope.path))
        if len(self.problems) > before:
            del self.problems[before:]
            for path in set(self.libraries) - loaded:
                del self.libraries[path]
            return None
        return block

    def check_outputs(self, block: _Block, inner: _Scope) -> None:
        """Each output of ``block`` that names an output of a use of its own (``USE.OUTPUT``) names one: it was
        said only where something read it, as its own name being no stage, or not at all."""
        for out, ref in _as_dict(block.spec.get("outputs")).items():
            if not isinstance(ref, str) or not _is_use(inner.stages.get(ref.partition(".")[0])):
                continue
            wrong = self.names_nothing(inner, ref, expanded=True)
            if wrong:
                self.problems.append(Diagnostic(inner.at.at(block.path + ("outputs", out)),
                                                f"output {out!r} of block {block.name!r} names {ref!r}, {wrong}"))

    # -- params --------------------------------------------------------------------------------------

    def params(self, block: _Block, use: dict, index: int, where: Callable[[Path], Origin] | None,
               use_id: str = "", prefix: str = "") -> dict:
        declared = _as_dict(block.spec.get("params"))
        given = dict(_as_dict(use.get("params")))
        for name in declared:  # -p USE.PARAM, then -p USE.INDEX.PARAM: the instance's own wins
            for key in (f"{use_id}.{name}", f"{prefix}.{name}"):
                if key in self.overrides:
                    value = self.overrides[key]
                    stray = [n for n in names(value) if n not in declared and n != "index"] if refers(value) else []
                    if stray:
                        from hetflow.engine.errors import UsageError

                        # it stood undefined in the tree, an internal error when the tree was hashed
                        raise UsageError(f"{override_text(key, value, f'{key}={value}')}: names ${{{stray[0]}}}, "
                                         f"which is none of the params of block {block.name!r} "
                                         f"({', '.join(declared)}): a block reads its own params alone")
                    given[name] = value
                    self.applied.add(key)
        if where is not None:
            for key in given:
                if key not in declared:
                    from hetflow.engine.manifest.semantics import _close

                    close = _close(key, list(declared), n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    self.problems.append(Diagnostic(where(("params", key)), (
                        f"block {block.name!r} has no param {key!r} (params: {', '.join(declared) or 'none'}){hint}")))
        values = {**declared, **{k: v for k, v in given.items() if k in declared}, "index": index}
        if any(refers(v) for v in values.values()):  # defaults that name other params: check_block said what is wrong
            values = resolve_params(values, block.doc, [], block.path + ("params",))
        return values

    def substituted(self, scope: _Scope, value: Any, path: Path, report: bool = True) -> Any:
        if scope.values is None:
            return value
        problems: list[Diagnostic] = []
        out = interpolate(value, path, scope.values, scope.at, problems)
        if report:
            self.problems.extend(problems)
        return out

    # -- expansion -----------------------------------------------------------------------------------

    def scope(self, scope: _Scope) -> None:
        for sid, written in scope.stages.items():
            if self.stopped:
                return
            here = scope.path + (sid,)
            iid = scope.join(sid)
            if scope.prefix and "." in str(sid):
                self.problems.append(Diagnostic(scope.at.key_at(here), (
                    f"stage {sid!r}: a block's stage is named without '.' (its instances are USE.STAGE)")))
                continue
            spec = self.substituted(scope, written, here)
            if _is_use(spec):
                self.use(scope, sid, spec, here)
                continue
            if iid in self.stages:
                self.clash(iid, scope.at.key_at(here))
                continue
            if scope.prefix:
                self.routes[iid] = (scope.doc, here, scope.notes)
            if isinstance(spec, dict):
                spec = dict(spec)
                if isinstance(spec.get("inputs"), list):
                    spec["inputs"] = [self.local(scope, ref) for ref in spec["inputs"]]
                if "colocate_with" in spec:
                    spec["colocate_with"] = self.local(scope, spec["colocate_with"])
                if "op" in spec:  # an emulator phase takes none of the inherited keys
                    for key, (value, origin) in scope.inherited.items():
                        if key not in spec:
                            spec[key] = value
                            self.keyed[iid, key] = origin
            if len(self.stages) >= MAX_STAGES:
                self.stopped = True
                uses = " -> ".join(n for _, n in scope.stack)
                self.problems.append(Diagnostic(scope.at.key_at(here), (
                    f"the manifest's uses expand to more than {MAX_STAGES:,} stages (the most hetflow expands) by "
                    f"stage {iid!r}{f', in blocks {uses}' if uses else ''}: a repeat nested in a repeat multiplies "
                    "(repeat: 1000 in a block repeated 1000 times is 10^6 stages); repeat fewer")))
                return
            self.stages[iid] = spec
            self.written[iid] = scope.at.key_at(here)

    def clash(self, iid: str, where: Origin) -> None:
        self.problems.append(Diagnostic(where, f"two stages are named {iid!r}: one is written at {self.written[iid]}"))

    def use(self, scope: _Scope, sid: str, spec: dict, here: Path) -> None:
        from hetflow.engine.manifest.schemacheck import part_problems

        # each instance of a repeated or nested block checks the same written use again: one whose form was right
        # is not checked again (a 16-deep nesting of 32,768 stages spent half its 17 s in the checks)
        form = (id(scope.doc), here, json.dumps(spec, sort_keys=True, default=repr))
        if form not in self.right_forms:
            found = part_problems(spec, "use", scope.at, here)
            if found:
                self.problems.extend(found)
                return
            self.right_forms.add(form)
        where = scope.at.at(here + ("use",))
        block = self.block(scope, spec["use"], where)
        if block is None:
            return
        self.used.add(block.key)
        if block.key in scope.stack:
            names = [name for _, name in scope.stack[scope.stack.index(block.key):]] + [block.name]
            self.problems.append(Diagnostic(where, f"block {block.name!r} uses itself: {' -> '.join(names)}"))
            return
        if len(scope.stack) >= MAX_NESTING:
            # every instance of every enclosing repeat comes here: said once, for the first
            if where not in self.deep:
                self.deep.add(where)
                self.problems.append(Diagnostic(where, f"blocks nest deeper than {MAX_NESTING} uses here; "
                                                       f"expand fewer levels ({' -> '.join(n for _, n in scope.stack)})"))
            return
        if not self.check_block(block):
            return
        inputs = block.spec.get("inputs") or []
        outputs = block.spec["outputs"]
        bound = _as_dict(spec.get("inputs"))
        ok = True
        for name in bound:
            if name not in inputs:
                ok = False
                self.problems.append(Diagnostic(scope.at.key_at(here + ("inputs", name)), (
                    f"block {block.name!r} has no input {name!r} (inputs: {', '.join(inputs) or 'none'})")))
        missing = [name for name in inputs if name not in bound]
        if missing:
            ok = False
            self.problems.append(Diagnostic(scope.at.key_at(here), (
                f"use {scope.join(sid)!r} binds no stage to input{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))} "
                f"of block {block.name!r}; say inputs: {{{missing[0]}: STAGE}}")))
        repeat = spec.get("repeat")
        count = repeat or 1
        chain = spec.get("chain")
        if chain is None:
            chain = {name: name for name in inputs if name in outputs}
        else:
            for name, out in chain.items():
                if name not in inputs or out not in outputs:
                    ok = False
                    what = (f"block {block.name!r} has no input {name!r}" if name not in inputs
                            else f"block {block.name!r} has no output {out!r} (outputs: {', '.join(outputs)})")
                    self.problems.append(Diagnostic(scope.at.at(here + ("chain", name)), f"chain {name}: {out}: {what}"))
        if repeat is not None and not chain and "chain" not in spec:  # chain: {} says the instances are independent
            ok = False
            self.problems.append(Diagnostic(scope.at.at(here + ("repeat",)), (
                f"use {scope.join(sid)!r} repeats block {block.name!r}, but no output of an instance feeds the next: "
                f"name an output as an input (inputs: {', '.join(inputs) or 'none'}; outputs: {', '.join(outputs)}) "
                "or say chain: {INPUT: OUTPUT} (chain: {} for independent instances)")))
        for name, ref in bound.items():
            wrong = self.names_nothing(scope, ref) if name in inputs else None
            if wrong:
                ok = False
                self.problems.append(Diagnostic(scope.at.at(here + ("inputs", name)),
                                                f"use {scope.join(sid)!r} binds input {name!r} to {ref!r}, {wrong}"))
        if not ok:
            return
        bindings = {name: self.local(scope, ref) for name, ref in bound.items()}
        self.params_seen.extend(f"{scope.join(sid)}.{p}" for p in _as_dict(block.spec.get("params")))
        inherited = {**scope.inherited, **{k: (spec[k], scope.at.at(here + (k,))) for k in INHERITED if k in spec}}
        use_site = scope.at.key_at(here)
        for index in range(count):
            if self.stopped:
                return
            prefix = scope.join(sid) + (f".{index}" if repeat is not None else "")
            notes = ((_plain(use_site), f"in {prefix} (block {block.label})"),) + scope.notes
            inner = _Scope(_Sited(block.doc, notes), block.doc, block.path + ("stages",), block.spec["stages"], prefix,
                           self.params(block, spec, index, (lambda p: scope.at.key_at(here + p)) if index == 0 else None,
                                       scope.join(sid), prefix),
                           bindings, inherited, notes, scope.stack + (block.key,))
            before = len(self.problems)
            self.scope(inner)
            if block.key not in self.outputs_checked and len(self.problems) == before and not self.stopped:
                self.outputs_checked.add(block.key)
                self.check_outputs(block, inner)
            if index + 1 < count:
                bindings = {**bindings, **{name: self.local(inner, outputs[out]) for name, out in chain.items()}}


def _unused(overrides: Mapping[str, Any], applied: set[str], doc: Document, seen: Sequence[str] = ()) -> None:
    """Refuse a ``-p USE.PARAM`` that set no instance's param, saying which there are."""
    unused = [k for k in overrides if k not in applied]
    if unused:
        from hetflow.engine.errors import UsageError
        from hetflow.engine.manifest.semantics import _close

        close = _close(unused[0], list(seen), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known = ", ".join(dict.fromkeys(seen)) or "none: it uses no block with params"
        raise UsageError(f"{override_text(unused[0], overrides[unused[0]], unused[0])}: no use of a block in "
                         f"{doc.file} has that param (a block's params here: "
                         f"USE.PARAM or USE.INDEX.PARAM: {known}){hint}")


def _too_many(stages: Mapping[str, Any], doc: Document, run: _Expansion) -> Diagnostic | None:
    """The top-level use past which the manifest's uses make more than :data:`MAX_STAGES` stages, counted before
    any is made, from what is written as numbers (a repeat or a block's param that says one, a ``-p`` that sets
    one; what only a substitution says counts once), through the blocks of libraries too: refusing after making
    a million stages took 48 s and 1 GB."""
    sizes: dict[tuple, int] = {}
    overrides = run.overrides

    def numbers(values: Mapping[str, Any]) -> tuple:
        return tuple(sorted((k, v) for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)))

    def written(value: Any, params: Mapping[str, Any]) -> Any:
        if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
            return params.get(value[2:-1], value)
        return value

    def count(block: _Block, given: Mapping[str, Any], depth: int, use_id: str, prefix: str) -> int:
        declared = _as_dict(block.spec.get("params"))
        values = {**declared, **given}
        for name in declared:  # as params() takes them: -p USE.PARAM, then -p USE.INDEX.PARAM
            for key in (f"{use_id}.{name}", f"{prefix}.{name}"):
                if key in overrides:
                    values[name] = overrides[key]
        # an instance with a -p below it is counted as itself; any other as every instance of its form
        own = any(k.startswith(prefix + ".") for k in overrides)
        key = (block.doc.file, block.name, numbers(values))
        if not own and key in sizes:
            return sizes[key]
        sizes[key] = 1  # a block that uses itself is refused elsewhere: it counts once here
        total = sum(size(block.doc, sid, entry, values, depth, prefix)
                    for sid, entry in _as_dict(block.spec.get("stages")).items())
        if not own:
            sizes[key] = total
        return total

    def size(user: Document, sid: Any, entry: Any, params: Mapping[str, Any], depth: int, prefix: str) -> int:
        if not _is_use(entry) or depth >= MAX_NESTING:
            return 1
        block = run.quietly(_Scope(user, user, (), {}), written(entry.get("use"), params))
        if block is None:
            return 1
        repeat = written(entry.get("repeat", 1), params)
        times = repeat if isinstance(repeat, int) and not isinstance(repeat, bool) and repeat > 0 else 1
        given = {k: written(v, params) for k, v in _as_dict(entry.get("params")).items()}
        use_id = f"{prefix}.{sid}" if prefix else str(sid)
        if "repeat" not in entry:
            return count(block, given, depth + 1, use_id, use_id)
        # the instances a -p names by index, each counted as itself; the rest as one of them
        named = {int(i) for k in overrides if k.startswith(use_id + ".")
                 for i in [k[len(use_id) + 1:].partition(".")[0]] if i.isdigit() and int(i) < times}
        plain = next(i for i in range(len(named) + 1) if i not in named)
        total = (times - len(named)) * count(block, given, depth + 1, use_id, f"{use_id}.{plain}") if times > len(named) else 0
        return total + sum(count(block, given, depth + 1, use_id, f"{use_id}.{i}") for i in sorted(named))

    total = 0
    for sid, entry in stages.items():
        total += size(doc, sid, entry, {}, 0, "")
        if total > MAX_STAGES:
            return Diagnostic(doc.key_at(("stages", sid)), (
                f"the manifest's uses expand to more than {MAX_STAGES:,} stages (the most hetflow expands), {total:,} "
                f"by use {sid!r} and those above it: a repeat nested in a repeat multiplies (repeat: 1000 in a block "
                "repeated 1000 times is 10^6 stages); repeat fewer"))
    return None


def _block_names(declared: Mapping[Any, Any], doc: Document) -> list[Diagnostic]:
    """The names of ``blocks:`` that are no name, as the schema has names (editors flagged them, the engine took
    them)."""
    return [Diagnostic(doc.key_at(("blocks", name)), (
        f"invalid block name {name!r}: a letter or '_', then letters, digits, '_' or '-', at most 64 of them"))
        for name in declared if not isinstance(name, str) or _NAME.fullmatch(name) is None or len(name) > 64]


def _unused_cycles(doc: Document, run: _Expansion) -> None:
    """Refuse the blocks that no use expanded and that use themselves, directly or through each other: in the
    manifest's ``blocks:`` and in every block library that they, a library or a use names, across files
    (``a.yaml#p`` using ``b.yaml#q`` using ``a.yaml#p``). A use expanded says so where it is, and a block no use
    reaches yet would say it at its first use. A library a block of ``blocks:`` names is read for it, so one that
    is not there is said, as the rest of that block's form is; one that only a library's block names is read
    quietly."""
    blocks: dict[tuple[str, str], tuple[Document, Any]] = {}
    uses: dict[tuple[str, str], list[tuple[tuple[str, str], Document, Path]]] = {}
    pending = [doc, *(d for d in run.libraries.values() if d is not None)]
    read: set[str] = set()
    while pending:
        here = pending.pop(0)
        if here.file in read:
            continue
        read.add(here.file)
        declared = here.value.get("blocks") if isinstance(here.value, dict) else None
        for name, spec in (declared.items() if isinstance(declared, dict) else ()):
            blocks[here.file, name] = (here, spec)
            stages = spec.get("stages") if isinstance(spec, dict) else None
            for sid, stage in (stages.items() if isinstance(stages, dict) else ()):
                ref = stage.get("use") if isinstance(stage, dict) else None
                if not isinstance(ref, str) or "${" in ref:
                    continue
                where = ("blocks", name, "stages", sid, "use")
                file, hash_, target = ref.rpartition("#")
                into = here
                if hash_ and file:
                    said = len(run.problems)
                    into = run.library(here, file, here.at(where))
                    if here is not doc:  # a library's blocks no use reaches are its author's: walked, not checked
                        del run.problems[said:]
                    if into is None:
                        continue
                    pending.append(into)
                uses.setdefault((here.file, name), []).append(((into.file, target), here, where))
    said: set[tuple[str, str]] = set()
    for start in blocks:
        if start in run.used or start in said:
            continue
        path, seen = [start], {start: 0}
        trail: list[tuple[Document, Path]] = []

        def walk(key: tuple[str, str]) -> list[tuple[str, str]] | None:
            for to, user, where in uses.get(key, ()):
                if to not in blocks:
                    continue
                trail.append((user, where))
                if to in seen:
                    return path[seen[to]:] + [to]
                seen[to] = len(path)
                path.append(to)
                found = walk(to)
                if found:
                    return found
                path.pop()
                del seen[to]
                trail.pop()
            return None

        cycle = walk(start)
        if cycle and not said & set(cycle) and run.used.isdisjoint(cycle):
            said.update(cycle)
            user, where = trail[-1]
            run.problems.append(Diagnostic(user.at(where), (
                f"block {cycle[0][1]!r} uses itself: {' -> '.join(name for _, name in cycle)}")))


def _plain(origin: Origin) -> Origin:
    """The origin without notes of its own (they are already the enclosing instance's notes)."""
    return origin._inner if isinstance(origin, Noted) else origin


def _is_use(entry: Any) -> bool:
    return isinstance(entry, dict) and "use" in entry


def _as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _dotted(stages: Any, doc: Document) -> list[Diagnostic]:
    """A written stage's name holds no '.': the expansion names its instances' stages USE.STAGE, and an output
    or input reads an emulator phase's field as STAGE.FIELD, so ``run.steps`` written as a stage took the place
    of phase ``run``'s step count."""
    if not isinstance(stages, dict) or not any("." in k for k in stages if isinstance(k, str)):
        return []
    return [Diagnostic(doc.key_at(("stages", k)), (
        f"invalid name {k!r} in stages: a stage's name holds letters, digits, '_' or '-', not '.' (USE.STAGE names "
        "a stage of a block's instance, STAGE.FIELD a field of an emulator phase)"))
        for k in stages if isinstance(k, str) and "." in k]


def expand(tree: dict, doc: Document, overrides: Mapping[str, Any] | None = None
           ) -> tuple[dict, Document, list[Diagnostic]]:
    """The resolved ``tree`` with its uses expanded and its defaults applied; the document to find positions in;
    the problems found.

    ``overrides`` set block params from the command line (``-p``), named
    as the instances are: ``USE.PARAM`` sets the param of every instance
    of a use, ``USE.INDEX.PARAM`` of one instance of a repeated use
    (``layers.2.heads``), and nested uses go on the same way
    (``enc.0.attn.heads``); one that names no instance's param is a
    :class:`~hetflow.engine.errors.UsageError`. The instance's own form
    wins over the use's.

    A manifest with neither ``defaults:`` nor a use is returned as it is.
    """
    stages = tree.get("stages")
    defaults = tree.get("defaults")
    overrides = dict(overrides or {})
    # a record's resolved manifest (no text) names its instances' stages so; a written one cannot
    dotted = _dotted(stages, doc) if doc.text is not None else []
    if dotted:
        return tree, doc, dotted
    if not isinstance(stages, dict) or (not isinstance(defaults, dict) and "blocks" not in tree
                                        and not any(_is_use(s) for s in stages.values())):
        _unused(overrides, set(), doc)
        return ({k: v for k, v in tree.items() if k != "blocks"} if "blocks" in tree else tree), doc, []
    problems: list[Diagnostic] = []
    run = _Expansion(doc, problems)
    run.overrides = overrides
    declared = doc.value.get("blocks", {}) if isinstance(doc.value, dict) else {}
    if not isinstance(declared, dict):
        # a block's ${name} is one of its params: outside any block, none is declared
        interpolate(declared, ("blocks",), {}, doc, problems)
        problems.append(Diagnostic(doc.at(("blocks",)), f"blocks must be a mapping of block names to blocks, found {declared!r}"))
        return tree, doc, problems
    problems.extend(_block_names(declared, doc))
    for name, spec in declared.items():  # each block's form, used or not
        if isinstance(spec, dict):
            run.check_block(_Block(name, doc, ("blocks", name), spec, name))
        else:
            run.checked[doc.file, name] = False
            problems.append(Diagnostic(doc.at(("blocks", name)), f"block {name!r} must be a mapping with stages and outputs"))
    if isinstance(defaults, dict):
        from hetflow.engine.manifest.schemacheck import part_problems

        # a default is checked once, where it is written, not again on every stage that gets it
        wrong = part_problems(defaults, "#/properties/defaults", doc, ("defaults",))
        if wrong:
            return tree, doc, problems + wrong
    inherited = {k: (defaults[k], doc.at(("defaults", k))) for k in INHERITED
                 if isinstance(defaults, dict) and k in defaults}
    top = _Scope(doc, doc, ("stages",), stages, inherited=inherited)
    too_many = _too_many(stages, doc, run)
    if too_many is not None:
        return tree, doc, problems + [too_many]
    run.scope(top)
    _unused_cycles(doc, run)
    if not problems:  # a use that could not be expanded leaves its instances' overrides unapplied, not wrong
        _unused(overrides, run.applied, doc, run.params_seen)
    out = {k: v for k, v in tree.items() if k != "blocks"}
    out["stages"] = run.stages
    # names outside any block that name a use's output
    for key in ("outputs",):
        if isinstance(out.get(key), dict):
            out[key] = {name: run.local(top, ref) for name, ref in out[key].items()}
    value = {**out, **{k: doc.value[k] for k in ("matrix", "schedule") if isinstance(doc.value, dict) and k in doc.value}}
    return out, Expanded(doc, value, run.routes, run.keyed, run.unnamed), problems
