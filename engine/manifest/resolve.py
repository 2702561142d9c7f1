"""The resolve pass: params, ``-p`` overrides and ``${name}`` references -> a concrete tree.

A manifest's params are its declared defaults overridden by ``-p
key=value`` (or by a matrix point, which arrives as overrides).
``"${name}"`` alone becomes the param's typed value; ``${name}`` inside a
longer string becomes its text; a param's own value may name other
params, which are resolved first. Paths are kept, so every value still
points at where it was written. An undefined name is reported once, at
its place, and stands as :data:`UNDEFINED` so that no later check reports
it again. The resolved tree's :func:`canonical_json` hashes to the
manifest digest.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Mapping

import orjson

from hetflow.engine.errors import Diagnostic, ManifestError, Origin, UsageError
from hetflow.engine.manifest.loader import Document, Path, dates_as_text, dialect_problem, loads

__all__ = ["UNDEFINED", "resolve", "interpolate", "resolve_params", "refers", "names", "parse_overrides", "check_overrides",
           "canonical_json", "has_undefined"]

_REF = re.compile(r"\$\{([^}]*)\}")


class _Undefined:
    """Stands for an undefined ``${name}``, already reported, so no later check reports it again."""

    def __repr__(self) -> str:
        return "<undefined>"

UNDEFINED = _Undefined()


def has_undefined(value: Any) -> bool:
    if value is UNDEFINED:
        return True
    if isinstance(value, dict):
        return any(has_undefined(v) for v in value.values())
    if isinstance(value, list):
        return any(has_undefined(v) for v in value)
    return False


# In orjson's compact text a float is a number token holding "." or "e", and a non-finite float is null;
# a match inside a string only sends the value to the standard library.
_FLOAT_OR_NULL = re.compile(rb"[:,\[](?:null|-?[0-9]+[.eE])")


def canonical_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``.

    orjson writes it, in less than half the time, when the text holds no
    float and no null: orjson spells a float's exponent its own way and
    writes a non-finite float as null, and it refuses what it cannot
    write as the standard library does (an integer beyond 64 bits, a
    date). Any other value, and a lone scalar, is written by the standard
    library.

    >>> canonical_json({"b": [1, "é"], "a": None, "c": 1e-05})
    '{"a":null,"b":[1,"é"],"c":1e-05}'
    """
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
                            | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS)
    except orjson.JSONEncodeError:
        text = b""
    if text[:1] in (b"{", b"[") and _FLOAT_OR_NULL.search(text) is None:
        return text.decode()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def override_text(key: str, value: Any, text: str | None = None) -> str:
    """How a message names the override of param ``key`` by ``value``: ``-p KEY=VALUE`` while a command of the CLI
    runs (``text``, else the value as JSON), ``params={'KEY': value}`` to a caller of the Python API, who gave no
    ``-p``.

    >>> override_text("n", True), override_text("n", 3, text="n")
    ("params={'n': True}", "params={'n': 3}")
    """
    from hetflow.engine.errors import _on_the_command_line

    if _on_the_command_line():
        return f"-p {text if text is not None else f'{key}={json.dumps(value)}'}"
    return f"params={{{key!r}: {value!r}}}"


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["k=v", ...]`` from ``-p`` into a dict; each value is read as YAML: a scalar, or a flow list or map.

    >>> parse_overrides(["hidden=8192", "name=run a", "on=true", "shape=[8, 8]", "opt={lr: 0.1}", "t=a: b"])
    {'hidden': 8192, 'name': 'run a', 'on': True, 'shape': [8, 8], 'opt': {'lr': 0.1}, 't': 'a: b'}
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"-p expects KEY=VALUE, got {pair!r}")
        flow = text.strip().startswith(("[", "{"))
        value: Any = ""
        if text.strip():
            try:
                # read as a manifest is, within its limits: an alias naming itself, an alias bomb or deep
                # nesting is refused here as it is in a file, not met later by every walk of the value
                doc = loads(text, "-p")
            except ManifestError as e:
                if flow:
                    raise UsageError(_flow_problem(pair, text, e.diagnostics[0])) from None
                value = text
            else:
                value = dates_as_text(doc.value)
                if flow and doc.problems and isinstance(value, (dict, list)):
                    # a key twice, a key that is not a string, a YAML 1.1 scalar: refused as in a manifest
                    raise UsageError(_flow_problem(pair, text, doc.problems[0]))
        if (isinstance(value, (dict, list)) and not flow) or isinstance(value, (bytes, bytearray)):
            value = text
        # as in a manifest: what YAML 1.1 and 1.2 read differently (yes, 017, 1:30) is said, not guessed
        hint = dialect_problem(text.strip(), value)
        if hint is not None:
            raise UsageError(f"-p {pair}: {hint}")
        out[key] = value
    return out


def _flow_problem(pair: str, text: str, problem: Diagnostic) -> str:
    """What is wrong with the flow list or map ``text`` of the ``-p`` ``pair``, at its column in ``pair``.

    >>> _flow_problem("n={a: 1, a: 2}", "{a: 1, a: 2}", Diagnostic(Origin("-p", 1, 8), "duplicate key 'a'"))
    "-p n={a: 1, a: 2}: the value is not a valid flow map at column 10: duplicate key 'a'"
    """
    origin = problem.origin
    where = f" at column {len(pair) - len(text) + origin.col}" if origin is not None and origin.line == 1 else ""
    kind = "list" if text.strip()[0] == "[" else "map"
    message = problem.message.replace("the document has", "it has", 1)
    if message.startswith(("YAML syntax: ", "YAML: ")):
        message = message.split(": ", 1)[1]
        return f"-p {pair}: the value is not a valid YAML flow {kind}{where}: {message}"
    return f"-p {pair}: the value is not a valid flow {kind}{where}: {message}"


def _interpolate(value: Any, path: Path, params: Mapping[str, Any], doc: Document, problems: list[Diagnostic]) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, path + (k,), params, doc, problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, path + (i,), params, doc, problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def lookup(name: str) -> Any:
        if name in params:
            return params[name]
        close = difflib.get_close_matches(name, list(params), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        declared = ", ".join(sorted(params)) or "none"
        problems.append(Diagnostic(doc.at(path), f"undefined param ${{{name}}} (declared params: {declared}){hint}"))
        return UNDEFINED

    whole = _REF.fullmatch(value)
    if whole:
        return lookup(whole.group(1))
    parts = [lookup(m.group(1)) for m in _REF.finditer(value)]
    if any(p is UNDEFINED for p in parts):
        return UNDEFINED
    texts = [str(p) for p in parts]
    grown = len(value) + sum(map(len, texts))
    if grown > MAX_TEXT:
        problems.append(Diagnostic(doc.at(path), f"this text would be {grown:,} characters once its ${{...}} are "
                                                 f"replaced, more than the {MAX_TEXT:,} a manifest's text may be "
                                                 "(params that each repeat another grow as its power)"))
        return UNDEFINED
    told = iter(texts)
    return _REF.sub(lambda m: next(told), value)


#: ``${name}`` references in ``value`` (at ``path`` of ``doc``) replaced from ``params``, each undefined one a
#: problem at its place: the expansion resolves a block's stages with it, per instance, with the block's params
interpolate = _interpolate


#: the longest text a ``${...}`` may make
MAX_TEXT = 1 << 20


class _UndefinedName(Exception):
    """A ``${name}`` that names no param: :func:`_interpolate` walks again to say where."""


def _substitute(value: Any, params: Mapping[str, Any]) -> Any:
    """What :func:`_interpolate` returns for ``value`` when every name is defined; raises :class:`_UndefinedName`.

    A mapping or list that holds no ``${...}`` is returned as it is, and
    nothing keeps a path: a manifest of 100,000 stages with one reference
    makes one new mapping per level above it, not a copy of every value.
    """
    if isinstance(value, str):
        if "${" not in value:
            return value
        whole = _REF.fullmatch(value)
        names = [whole.group(1)] if whole else [m.group(1) for m in _REF.finditer(value)]
        if any(name not in params for name in names):
            raise _UndefinedName
        if whole:
            return params[names[0]]
        texts = [str(params[name]) for name in names]
        if len(value) + sum(map(len, texts)) > MAX_TEXT:
            raise _UndefinedName  # :func:`_interpolate` says where, as it says an undefined name
        told = iter(texts)
        return _REF.sub(lambda m: next(told), value)
    if isinstance(value, dict):
        out = None
        for k, v in value.items():
            if v.__class__ is str and "${" not in v:
                continue
            new = _substitute(v, params)
            if new is not v:
                if out is None:
                    out = dict(value)
                out[k] = new
        return value if out is None else out
    if isinstance(value, list):
        out = None
        for i, v in enumerate(value):
            if v.__class__ is str and "${" not in v:
                continue
            new = _substitute(v, params)
            if new is not v:
                if out is None:
                    out = list(value)
                out[i] = new
        return value if out is None else out
    return value


def refers(value: Any) -> bool:
    """Whether ``value`` holds a ``${...}`` anywhere."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(refers(v) for v in value.values())
    if isinstance(value, list):
        return any(refers(v) for v in value)
    return False


def names(value: Any) -> list[str]:
    """The names of every ``${...}`` in ``value``, in order."""
    if isinstance(value, str):
        return _REF.findall(value)
    if isinstance(value, dict):
        return [n for v in value.values() for n in names(v)]
    if isinstance(value, list):
        return [n for v in value for n in names(v)]
    return []


def resolve_params(values: Mapping[str, Any], doc: Document, problems: list[Diagnostic],
                   base: Path = ("params",)) -> dict[str, Any]:
    """Params whose values name other params (``b: "${a}"``), resolved in the order they depend on one another,
    as everywhere else: ``-p a=8`` moves ``b`` too. A param that names itself, through others or not, is a
    problem at its place (under ``base``: a manifest's ``params``, a block's), and stands as :data:`UNDEFINED`,
    as do the params that name it."""
    from graphlib import CycleError, TopologicalSorter

    needs = {k: {n for n in names(v) if n in values} for k, v in values.items()}
    out: dict[str, Any] = {}
    order = TopologicalSorter(needs)
    try:
        ranked = list(order.static_order())
    except CycleError as e:
        cycle = e.args[1]  # [a, b, ..., a]
        first = cycle[0]
        problems.append(Diagnostic(doc.at(base + (first,)),
                                   f"param {first!r} refers to itself through ${{...}}: "
                                   + " -> ".join(f"{n!r}" for n in reversed(cycle))
                                   + "; a param's value may name other params, none of which names it back"))
        bad = set(cycle)
        grown = True
        while grown:  # every param that names one of the cycle's, however far down, cannot be resolved either
            more = {k for k, n in needs.items() if k not in bad and n & bad}
            grown = bool(more)
            bad |= more
        rest = {k: n for k, n in needs.items() if k not in bad}
        ranked = [*TopologicalSorter(rest).static_order()]
        out.update({k: UNDEFINED for k in bad})
    for name in ranked:
        out[name] = _interpolate(values[name], base + (name,), {**values, **out}, doc, problems)
    return {k: out[k] for k in values}


def check_overrides(doc: Document, overrides: Mapping[str, Any]) -> None:
    """Raise :class:`UsageError` where an override names no declared param of ``doc``, or is a list or map where
    the param is a single value (or the other way round)."""
    params = doc.value.get("params", {}) if isinstance(doc.value, dict) else {}
    params = params if isinstance(params, dict) else {}
    unknown = [k for k in overrides if k not in params]
    if unknown:
        declared = ", ".join(sorted(params)) or "none"
        raise UsageError(f"{override_text(unknown[0], overrides[unknown[0]], unknown[0])}: {doc.file} declares no "
                         f"param {unknown[0]!r} (declared: {declared})")
    for key, value in overrides.items():
        default = params[key]
        kinds = {type(x) for x in (default, value) if isinstance(x, (list, dict))}
        if default is not None and (isinstance(default, (list, dict)) != isinstance(value, (list, dict)) or len(kinds) > 1):
            want = {list: f"a list, such as {override_text(key, [8, 8], repr(f'{key}=[8, 8]'))}",
                    dict: f"a map, such as {override_text(key, {'a': 1}, repr(f'{key}={{a: 1}}'))}"}.get(
                type(default), "a single value, not a list or map")
            raise UsageError(f"{override_text(key, value)}: param {key!r} is {want} (its default at "
                             f"{doc.at(('params', key))} is {json.dumps(default)})")
        if isinstance(value, list) and any(isinstance(x, (list, dict)) for x in value):
            # said here, by the -p that gave it: the schema would say it at the default, which is not wrong
            raise UsageError(f"{override_text(key, value)}: a param's list holds single values, such as "
                             f"{override_text(key, [8, 8], repr(f'{key}=[8, 8]'))}, not lists or maps (its default at "
                             f"{doc.at(('params', key))} is "
                             f"{json.dumps(default)})")


def resolve(doc: Document, overrides: Mapping[str, Any] | None = None) -> tuple[dict, list[Diagnostic]]:
    """The document's tree with its params and ``${name}`` references resolved, and the problems found.

    A matrix point arrives as overrides; the resolved tree of a point is
    concrete and has no ``matrix``. A ``schedule`` says when to run, not
    what: it stays out of the resolved tree and its digest.

    Raises
    ------
    UsageError
        an override names no declared param, or is a list or map where the
        param is a single value (or the other way round).

    Examples
    --------
    >>> from hetflow.engine.manifest.loader import loads
    >>> doc = loads("version: 1\\nname: r\\nparams: {n: 4}\\nstages:\\n  x: {op: zeros, args: {shape: ['${n}']}}\\n")
    >>> tree, problems = resolve(doc, {"n": 8})
    >>> tree["stages"]["x"]["args"]["shape"], tree["params"], problems
    ([8], {'n': 8}, [])
    """
    overrides = dict(overrides or {})
    tree = doc.value
    params = tree.get("params", {})
    check_overrides(doc, overrides)
    values = {**params, **overrides}

    problems: list[Diagnostic] = []
    chained = any(refers(v) for v in values.values())
    if chained:
        values = resolve_params(values, doc, problems)
    # a block's ${name} reads the block's params, given per use: the expansion resolves it, per instance
    literal = ("params", "version", "name", "blocks")
    if doc.text is not None and "${" not in doc.text:
        resolved = {k: v for k, v in tree.items() if k not in ("matrix", "schedule")}
    else:
        try:
            resolved = {k: (v if k in literal else _substitute(v, values))
                        for k, v in tree.items() if k not in ("matrix", "schedule")}
        except _UndefinedName:
            resolved = {k: (v if k in literal else _interpolate(v, (k,), values, doc, problems))
                        for k, v in tree.items() if k not in ("matrix", "schedule")}
    if "params" in resolved:
        resolved["params"] = values
    if chained or _may_blow_up(values, doc):
        _refuse_blown_up(resolved, params, doc, problems)
    return resolved, problems


def _may_blow_up(values: Mapping[str, Any], doc: Document) -> bool:
    """Whether the ``${...}`` of ``doc`` could put its params' lists and maps in more than ``MAX_VALUES`` places
    in all: their values, times the references in the text. A manifest whose params are numbers and short lists
    is never walked again for it."""
    from hetflow.engine.manifest.loader import MAX_VALUES

    held = sum(_count(v) for v in values.values() if isinstance(v, (list, dict)))
    return bool(held) and held * (doc.text.count("${") if doc.text is not None else 1) > MAX_VALUES


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_count(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    return 1


def _refuse_blown_up(resolved: dict, params: Mapping[str, Any], doc: Document, problems: list[Diagnostic]) -> None:
    """A problem where the resolved tree holds more values than a document may (``MAX_VALUES``), once the lists
    and maps that ``${...}`` put in more than one place are counted at each: params that each name another
    several times grow as its power, and the digest and the checks would walk every copy.

    Each list and map is counted once (by identity), so this costs what the tree holds, not what it means;
    the size is said at the first top-level key that takes the tree past the limit, and every part of the tree
    that ``${...}`` made is dropped (the params as written kept), so that no later check walks it.
    """
    from hetflow.engine.manifest.loader import MAX_VALUES

    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if isinstance(value, (dict, list)):
            got = sizes.get(id(value))
            if got is None:
                items = value.values() if isinstance(value, dict) else value
                got = sizes[id(value)] = min(1 + sum(size(v) for v in items), MAX_VALUES + 1)
            return got
        return 1

    total = 0
    for key, value in resolved.items():
        total += size(value)
        if total > MAX_VALUES:
            problems.append(Diagnostic(doc.at((key,)), f"{key} holds more than {MAX_VALUES:,} values once its "
                                                       "${...} are replaced: a list or map that ${...} puts in "
                                                       "several places counts in each, and params that name "
                                                       "another several times grow as its power"))
            for k in resolved:
                if k not in ("version", "name"):
                    resolved[k] = dict(params) if k == "params" else UNDEFINED
            return
