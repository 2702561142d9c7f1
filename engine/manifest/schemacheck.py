"""The schema check: the resolved tree against ``schemas/pipeline.base.json``.

First jsonschema-rs (the Rust implementation, built from the same
schema once), which only says valid or not; when it says not, jsonschema
re-checks the same tree and its errors become the diagnostics, each at
the ``FILE:LINE:COL`` of the value or key it is about, so the fast path
changes no message.
A value that is an undefined ``${name}`` (already reported by the
resolve pass) raises nothing here.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import jsonschema

from hetflow.engine.errors import Diagnostic
from hetflow.engine.manifest.loader import Document, Path, not_json
from hetflow.engine.manifest.resolve import has_undefined

__all__ = ["schema", "schema_problems", "part_problems"]


@lru_cache(maxsize=1)
def schema() -> dict:
    """The manifest's JSON Schema, shipped as package data.

    This is the hand-written base, open to any op name: ops, plugin ops
    included, are checked by the semantic pass, whose messages suggest the
    nearest name. ``pipeline.schema.json`` is the editors' copy with the
    op registry folded in (``hetflow schema``).
    """
    # read beside the package's modules: importlib.resources would load pathlib, zipfile and tempfile,
    # 5 ms of every command that checks a manifest, for a file that is always a plain file of the package
    folder = importlib.util.find_spec("hetflow.schemas").submodule_search_locations[0]
    with open(os.path.join(folder, "pipeline.base.json"), encoding="utf-8") as f:
        return json.load(f)


class _Fast:
    """The schema, and the parts of it that check one stage and a stage's name, in jsonschema-rs.

    It answers valid or not, and only ``True`` counts: a value it cannot
    take (a date, bytes, an undefined ``${name}``) is refused, and so goes
    to the precise check. Both implement draft 2020-12 of the same schema;
    where they differ at the edges, jsonschema-rs is the stricter (its
    ``$`` does not match before a final newline, NaN is not a number), so
    its "valid" is jsonschema's.
    """

    def __init__(self, spec: dict) -> None:
        import jsonschema_rs

        spec = _whole_numbers(spec)
        stages = spec["properties"]["stages"]
        defs = {k: spec[k] for k in ("$schema", "$id", "$defs") if k in spec}
        kw = {"keywords": {_WHOLE: _WholeNumber}}
        self._whole = jsonschema_rs.validator_for(spec, **kw)
        self._stage = jsonschema_rs.validator_for({**defs, **stages["additionalProperties"]}, **kw)
        self._name = jsonschema_rs.validator_for({**defs, **stages["propertyNames"]}, **kw)

    @staticmethod
    def _valid(validator: Any, value: Any) -> bool:
        try:
            return validator.is_valid(value)
        except ValueError:  # a Python value with no JSON form
            return False

    def accepts(self, tree: Any) -> bool:
        return self._valid(self._whole, tree)

    def accepts_stage(self, sid: Any, value: Any) -> bool:
        return self._valid(self._name, sid) and self._valid(self._stage, value)


#: the keyword :func:`_whole_numbers` adds beside ``"type": "integer"`` for jsonschema-rs
_WHOLE = "hetflowInteger"


class _WholeNumber:
    """jsonschema-rs's check of :data:`_WHOLE`: an integer is written as one, ``2``, not ``2.0`` or ``1e3``.

    JSON Schema takes a float with no fraction for an integer (JSON has one
    number type), and YAML reads ``2.0`` and ``1e3`` as floats: ``repeat:
    2.0`` then crashed the expansion, and ``device: 2.0`` became device 0.
    """

    def __init__(self, parent_schema: dict, value: Any, schema_path: Any) -> None:
        self._on = bool(value)

    def validate(self, instance: Any) -> None:
        if self._on and isinstance(instance, float):
            raise ValueError(f"{instance!r} is not of type 'integer'")


def _whole_numbers(node: Any) -> Any:
    """``node`` (a schema) with :data:`_WHOLE` beside each type that is an integer and not a number."""
    if isinstance(node, list):
        return [_whole_numbers(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _whole_numbers(v) for k, v in node.items()}
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "integer" in kinds and "number" not in kinds:
        out[_WHOLE] = True
    return out


def _is_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


@lru_cache(maxsize=1)
def _fast_validator() -> _Fast:
    return _Fast(schema())


def schema_problems(tree: Any, doc: Document) -> list[Diagnostic]:
    """The schema's complaints about ``tree``, each at the place in ``doc`` it is about."""
    # Happy path first: "valid" there means valid here; anything it refuses, or cannot even look at
    # (an undefined ${name}), is re-checked precisely below, which alone decides the diagnostics.
    fast = _fast_validator()
    if fast.accepts(tree):
        return []
    # A stage the fast check accepts, under a name it accepts, holds no error of its own, and
    # nothing else in the schema looks across stages but ``minProperties``: so the precise pass
    # checks the refused stages only (or one stage, when the problem is elsewhere), which on a large
    # manifest is most of its time.
    stages = tree.get("stages") if isinstance(tree, dict) else None
    if isinstance(stages, dict) and len(stages) > 1:
        refused = {sid: spec for sid, spec in stages.items() if not fast.accepts_stage(sid, spec)}
        tree = {**tree, "stages": refused or dict([next(iter(stages.items()))])}
    import jsonschema  # only a refused manifest pays for its import

    validator = _precise()(schema())
    problems: list[Diagnostic] = []
    for error in validator.iter_errors(tree):
        if not has_undefined(error.instance):
            problems.extend(_explain(error, doc))
    return _once(problems)


@lru_cache(maxsize=1)
def _name_patterns() -> frozenset[str]:
    """The patterns of the schema's names (``$defs/identifier``, ``$defs/stage_name``)."""
    defs = schema()["$defs"]
    return frozenset(defs[d]["pattern"] for d in ("identifier", "stage_name") if "pattern" in defs.get(d, {}))


def _once(problems: list[Diagnostic]) -> list[Diagnostic]:
    """``problems`` without repeats: jsonschema says a missing key once per key, and each says them all."""
    seen: set[tuple[str, str]] = set()
    out = []
    for d in problems:
        key = (str(d.origin), d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


@lru_cache(maxsize=1)
def _precise() -> Any:
    """Draft 2020-12's validator whose numeric bounds also refuse NaN: a comparison with NaN is false, so
    ``exclusiveMinimum: 0`` let ``timeout: .nan`` through, and the run then failed at once (``timed out
    after nan s``); whose integers are written as integers (``2``, not ``2.0``); and whose patterns end
    where the text does, as jsonschema-rs's and ECMA-262's do."""
    import math

    import jsonschema

    def bounded(name: str) -> Callable:
        check = jsonschema.Draft202012Validator.VALIDATORS[name]

        def refuse_nan(validator: Any, bound: Any, instance: Any, schema: Any) -> Iterator[Any]:
            if isinstance(instance, float) and math.isnan(instance):
                yield jsonschema.ValidationError(f"{instance!r} is not a number ({name} {bound})")
                return
            yield from check(validator, bound, instance, schema)

        return refuse_nan

    def pattern(validator: Any, regex: str, instance: Any, schema: Any) -> Iterator[Any]:
        if isinstance(instance, str) and re.search(_ecma(regex), instance) is None:
            yield jsonschema.ValidationError(f"{instance!r} does not match {regex!r}")

    # an integer is written as one: 2.0 is a float here, as jsonschema-rs's check says (_WholeNumber)
    types = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer)
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {
        **{name: bounded(name) for name in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")},
        "pattern": pattern}, type_checker=types)


@lru_cache(maxsize=64)
def _ecma(regex: str) -> str:
    """A schema's pattern as Python's ``re`` reads ECMA-262's: a final ``$`` is the end of the text, where Python's
    also matches before a final newline (``name: "a\\n"`` passed, and made a run folder whose name held it).

    >>> bool(re.search(_ecma("^[a-z]+$"), "ab\\n")), bool(re.search(_ecma("^[a-z]+$"), "ab"))
    (False, True)
    """
    if regex.endswith("$") and not regex.endswith("\\$"):
        return regex[:-1] + r"\Z"
    return regex


def part_problems(value: Any, definition: str, doc: Any, path: Path) -> list[Diagnostic]:
    """The schema's complaints about ``value``, checked against ``$defs/DEFINITION`` (or a ``#/...`` pointer into
    the schema), as if it stood at ``path``.

    For the parts of a manifest the expansion reads before the whole is
    checked (a use of a block): ``doc`` is anything with ``at`` and
    ``key_at``, so a use inside a block is reported where the block is.
    """
    spec = schema()
    import jsonschema

    node: Any = spec
    for part in (definition[2:] if definition.startswith("#/") else f"$defs/{definition}").split("/"):
        node = node[part]
    # the part's own keywords at the root, beside the definitions its references name
    validator = _precise()({**node, "$schema": spec["$schema"], "$defs": spec["$defs"]})
    problems: list[Diagnostic] = []
    for error in validator.iter_errors(value):
        error.path.extendleft(reversed(path))
        problems.extend(_explain(error, doc))
    return _once(problems)


def _describe(path: Path) -> str:
    if not path:
        return "the manifest"
    out = ""
    for part in path:
        if isinstance(part, str) and (not part.isprintable() or any(c.isspace() for c in part)):
            # a key with a line break or a control character in it would break the message's one line
            out += f"[{part!r}]"
        else:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


#: what other pipeline tools (Airflow, Snakemake, DVC, GitHub Actions, ONNX, Hydra) call a key hetflow names its own
#: way, asked before spelling: ``ops:`` is closest to ``outputs`` by its letters, and means ``plugins``
_OTHER_NAMES = {
    "plugins": ("ops", "custom_ops", "operators", "imports", "modules", "extensions", "libraries"),
    "params": ("parameters", "vars", "variables", "config"),
    "stages": ("steps", "nodes", "tasks", "jobs", "layers", "pipeline"),
    "executors": ("devices", "backends", "targets", "resources", "providers"),
    "outputs": ("results", "outs", "returns"),
    "schedule": ("cron", "schedules", "trigger", "triggers"),
    "matrix": ("sweep", "grid", "sweeps", "strategy"),
    "blocks": ("templates", "macros", "subgraphs"),
    "executor": ("device", "backend", "target", "on", "runs_on", "runs-on"),
    "inputs": ("deps", "needs", "depends_on", "depends-on", "from", "input"),
    "args": ("params", "kwargs", "attrs", "attributes", "with", "arguments", "options"),
    "op": ("type", "operator", "kind", "uses", "call"),
}
_ALIAS = {other: key for key, others in _OTHER_NAMES.items() for other in others}


def _suggest(key: str, allowed: list[str]) -> str | None:
    meant = _ALIAS.get(key.lower())
    if meant in allowed:
        return meant
    close = difflib.get_close_matches(key, allowed, n=1)
    return close[0] if close else None


#: the schema's other patterns in words: a regular expression tells an author nothing of what to write
_PATTERN_WORDS = {
    "^[A-Za-z0-9][A-Za-z0-9._-]*$": "must start with a letter or digit and hold only letters, digits, '.', '_' or '-' "
                                     "(it names the runs' ids and folders)",
    "^[^\\s]": "must not start with a space",
}


def _explain(error: jsonschema.ValidationError, doc: Document) -> Iterator[Diagnostic]:
    path = tuple(error.absolute_path)
    where = _describe(path)
    v = error.validator
    if "propertyNames" in list(error.relative_schema_path)[:-1] and isinstance(error.instance, str):
        # a key's name: jsonschema reports it as the name's own pattern or length, at the mapping that holds it
        bad = error.instance
        why = (f"a name is at most {error.validator_value} characters, this one has {len(bad)}" if v == "maxLength"
               else "a name starts with a letter or '_' and holds letters, digits, '_' or '-'")
        yield Diagnostic(doc.key_at(path + (bad,)), f"invalid name {bad!r} in {where}: {why}")
        return
    if v == "pattern" and error.validator_value in _name_patterns() and isinstance(error.instance, str):
        yield Diagnostic(doc.at(path), f"{where} must be a name, found {error.instance!r}: a name starts with a "
                                       "letter or '_' and holds letters, digits, '_' or '-'")
        return
    if v == "pattern" and error.validator_value in _PATTERN_WORDS and isinstance(error.instance, str):
        yield Diagnostic(doc.at(path), f"{where} {_PATTERN_WORDS[error.validator_value]}, found {error.instance!r}")
        return
    odd = not_json(error.instance)
    if odd is not None:
        yield Diagnostic(doc.at(path), f"{where} is {odd}")
        return
    if v == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list(error.schema.get("properties", {}))
        for key in error.instance:
            if key not in allowed:
                meant = _suggest(key, allowed)
                hint = f"; did you mean {meant!r}?" if meant else ""
                yield Diagnostic(
                    doc.key_at(path + (key,)),
                    f"unknown key {key!r} in {where} (allowed: {', '.join(allowed)}){hint}",
                )
        return
    if v == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        yield Diagnostic(doc.at(path), f"{where} is missing required key{'s' * (len(missing) > 1)} "
                                       f"{', '.join(map(repr, missing))}")
        return
    if v == "const":
        yield Diagnostic(doc.at(path), f"{where} must be {error.validator_value!r}, found {error.instance!r}")
        return
    if v == "type" and "const" in error.schema and (isinstance(error.instance, bool) or error.schema["const"] != error.instance):
        return  # the const's own error says it once (version: '1' must be 1); 1.0, equal to 1, has only this one
    if v == "enum":
        options = ", ".join(map(str, error.validator_value))
        yield Diagnostic(doc.at(path), f"{where} must be one of {options}; found {error.instance!r}")
        return
    if v == "propertyNames":
        bad = error.instance
        yield Diagnostic(
            doc.key_at(path + (bad,)),
            f"invalid name {bad!r} in {where}: "
            "a name starts with a letter or '_' and holds letters, digits, '_' or '-'",
        )
        return
    if v == "oneOf" and all(set(alt) == {"required"} for alt in error.validator_value) and isinstance(error.instance, dict):
        keys = [alt["required"][0] for alt in error.validator_value]
        found = [k for k in keys if k in error.instance]
        yield Diagnostic(doc.key_at(path + (found[1],)) if len(found) > 1 else doc.at(path),
                         f"{where} needs exactly one of {' or '.join(map(repr, keys))}, "
                         + (f"found {' and '.join(map(repr, found))}" if found else "found neither"))
        return
    if v == "oneOf" and all(set(alt) == {"required"} for alt in error.validator_value) and \
            error.schema.get("type") == "object":
        return  # not a mapping at all: its own "type" says so, once
    if v in ("oneOf", "anyOf") and isinstance(error.instance, float) and error.instance.is_integer() and any(
            e.validator == "type" and e.validator_value == "integer" and len(e.relative_path) == 0
            for e in error.context):
        # bytes as an integer or a string with a unit: 1e9 is neither, and is meant as the integer
        yield Diagnostic(doc.at(path), f"{where} must be an integer, found {error.instance!r}")
        return
    if v in ("oneOf", "anyOf") and isinstance(error.instance, str) and any(
            e.validator == "pattern" and "[KMGT]i?B" in str(e.validator_value) for e in error.context):
        # a size: jsonschema's "not valid under any of the given schemas" said nothing of why '16gib' is not one
        yield Diagnostic(doc.at(path), f"{where} must be bytes as an integer, or a size with its unit as written "
                                       "here: '16GiB', '512MB', '2.5TB' (B, KB, MB, GB, TB in powers of 1000; KiB, "
                                       f"MiB, GiB, TiB in powers of 1024), found {error.instance!r}")
        return
    if v in ("oneOf", "anyOf") and error.context:
        import jsonschema.exceptions

        # the alternatives of the value's own kind say what is wrong with it (a list of vendors that repeats
        # one, a device index below 0 inside a list), not those of another kind that it could never be (one
        # vendor's name, 'all'); a value of no alternative's kind is told the kinds there are
        alternatives: dict[int, list] = {}
        for e in error.context:
            alternatives.setdefault(e.relative_schema_path[0], []).append(e)
        fitting = [e for errs in alternatives.values() if not any(_other_kind(e, error.instance) for e in errs)
                   for e in errs]
        if fitting:
            yield from _explain(jsonschema.exceptions.best_match(fitting), doc)
            return
        kinds = [w for i, errs in sorted(alternatives.items())
                 for w in _kind_words(error.validator_value[i], errs, error.instance)]
        yield Diagnostic(doc.at(path), f"{where} must be {_either(kinds)}, found {_shown(error.instance)}")
        return
    worded = _in_manifest_terms(error)
    yield Diagnostic(doc.at(path), f"{where} {worded}" if worded else f"{where}: {error.message}")


def _other_kind(error: jsonschema.ValidationError, instance: Any) -> bool:
    """Whether ``error`` says ``instance`` is not of its alternative's kind at all (another type, or not a value
    of a const or enum whose values are of another type), rather than what is wrong with a value of that kind."""
    if len(error.relative_path) != 0:
        return False
    if error.validator == "type":
        return True
    if error.validator in ("const", "enum"):
        values = [error.validator_value] if error.validator == "const" else list(error.validator_value)
        return not any(type(x) is type(instance) for x in values)
    return False


def _kind_words(alternative: dict, errors: list, instance: Any) -> list[str]:
    """What one alternative of a ``oneOf``/``anyOf`` takes, in a manifest's words: one phrase per kind."""
    top = next(e for e in errors if _other_kind(e, instance))
    if top.validator == "const":
        return [repr(top.validator_value)]
    if top.validator == "enum":
        return ["one of " + ", ".join(map(str, top.validator_value))]
    if "[KMGT]i?B" in str(alternative.get("pattern", "")):
        return ["a size with its unit ('16GiB', '512MB')"]
    if alternative.get("type") == "array" and isinstance(alternative.get("items"), dict) \
            and isinstance(alternative["items"].get("type"), str):
        return [f"a list of {_TYPE_WORDS.get(alternative['items']['type'], alternative['items']['type']).split(' ', 1)[-1]}s"]
    return _type_words(top.validator_value, several=True)


def _type_words(kinds: str | list[str], several: bool = False) -> list[str]:
    """JSON Schema type names in a manifest's words, one phrase each (``a boolean`` where it stands among
    others, ``true or false`` alone)."""
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "number" in kinds and "integer" in kinds:
        kinds = [k for k in kinds if k != "integer"]
    several = several or len(kinds) > 2
    return ["a boolean" if k == "boolean" and several else _TYPE_WORDS.get(k, k) for k in kinds]


def _either(words: list[str]) -> str:
    """``a, b or c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _shown(value: Any) -> str:
    said = repr(value)
    return said if len(said) <= 200 else said[:197] + "..."


#: JSON Schema's type names as a YAML manifest's author says them
_TYPE_WORDS = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "null"}


def _in_manifest_terms(error: jsonschema.ValidationError) -> str | None:
    """jsonschema's message for a type, bound or length check in a manifest's words (a list, a mapping; at
    least, at most), or None where it has none.

    >>> from jsonschema import Draft202012Validator
    >>> [_in_manifest_terms(e) for e in Draft202012Validator({"type": ["number", "null"], "minimum": 0}).iter_errors("x")]
    ["must be a number or null, found 'x'"]
    """
    v, want, found = error.validator, error.validator_value, error.instance
    if v == "type":
        return f"must be {_either(_type_words(want))}, found {_shown(found)}"
    bounds = {"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "more than",
              "exclusiveMaximum": "less than"}
    if v in bounds:
        return f"must be {bounds[v]} {want}, found {found!r}"
    if v in ("minItems", "maxItems"):
        return f"must have {'at least' if v == 'minItems' else 'at most'} {want} item{'s' * (want != 1)}, found {len(found)}"
    if v in ("minProperties", "maxProperties"):
        return f"must have {'at least' if v == 'minProperties' else 'at most'} {want} key{'s' * (want != 1)}, found {len(found)}"
    if v == "minLength" and want == 1:
        return "must not be empty"
    if v == "uniqueItems":
        return f"must not repeat an item, found {found!r}"
    return None
