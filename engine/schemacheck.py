"""The schema check: the resolved tree against ``schemas/pipeline.base.json``.

First a validator compiled from the schema once (fastjsonschema), which
only says valid or not; when it says not, jsonschema re-checks the same
tree and its errors become the diagnostics, each at the ``FILE:LINE:COL``
of the value or key it is about, so the fast path changes no message.
A value that is an undefined ``${name}`` (already reported by the
resolve pass) raises nothing here.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator

import fastjsonschema

if TYPE_CHECKING:
    import jsonschema

from hetflow.engine.errors import Diagnostic
from hetflow.engine.loader import Document, Path
from hetflow.engine.resolve import has_undefined

__all__ = ["schema", "schema_problems"]


@lru_cache(maxsize=1)
def schema() -> dict:
    """The manifest's JSON Schema, shipped as package data.

    This is the hand-written base, open to any op name: ops, plugin ops
    included, are checked by the semantic pass, whose messages suggest the
    nearest name. ``pipeline.schema.json`` is the editors' copy with the
    op registry folded in (``hetflow schema``).
    """
    text = importlib.resources.files("hetflow.schemas").joinpath("pipeline.base.json").read_text()
    return json.loads(text)


@lru_cache(maxsize=1)
def _fast_validator():
    # The same schema file, compiled to Python once: it only answers "valid or not", in a
    # fraction of jsonschema's time. Every keyword the schema uses means the same in draft 7,
    # which is the newest draft fastjsonschema compiles.
    #
    # Compiled code names each value of a mapping by formatting ``locals()`` of the function that
    # checks the mapping, which for ``stages`` is the whole manifest's: costly per stage. So the
    # manifest is checked with its stages' values left open, and each stage by a validator of its
    # own definition; together they accept exactly what the schema accepts.
    draft = "http://json-schema.org/draft-07/schema#"
    spec = _without_exclusive_required(schema())
    stage_ref = spec["properties"]["stages"]["additionalProperties"]
    spec["properties"]["stages"]["additionalProperties"] = True
    top = fastjsonschema.compile({**spec, "$schema": draft})
    stage = fastjsonschema.compile({"$schema": draft, "$id": spec.get("$id", ""), "$defs": spec["$defs"], **stage_ref})
    name = fastjsonschema.compile({"$schema": draft, "$id": spec.get("$id", ""), "$defs": spec["$defs"],
                                   **spec["properties"]["stages"]["propertyNames"]})

    def validate(tree: Any) -> None:
        top(tree)
        for value in tree["stages"].values():
            stage(value)

    def accepts_stage(sid: Any, value: Any) -> bool:
        try:
            name(sid)
            stage(value)
            return True
        except Exception:
            return False

    validate.accepts_stage = accepts_stage  # type: ignore[attr-defined]
    return validate


def _without_exclusive_required(node: Any) -> Any:
    """The schema with each ``oneOf: [{required: [a]}, {required: [b]}]`` said another way.

    Compiled code tries every ``oneOf`` branch and raises inside the one
    that fails, which for a stage's "op or phase" costs more than the rest
    of the stage. ``anyOf`` the two, and ``b`` forbidding ``a``, accepts
    exactly the same objects and raises nothing on a valid one. jsonschema
    keeps the original, so the diagnostics keep their wording.
    """
    if isinstance(node, list):
        return [_without_exclusive_required(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _without_exclusive_required(v) for k, v in node.items()}
    alts = node.get("oneOf")
    if (isinstance(alts, list) and len(alts) == 2 and all(set(a) == {"required"} and len(a["required"]) == 1 for a in alts)
            and "anyOf" not in node and "dependencies" not in node):
        (a,), (b,) = alts[0]["required"], alts[1]["required"]
        del out["oneOf"]
        out["anyOf"] = [{"required": [a]}, {"required": [b]}]
        out["dependencies"] = {b: {"not": {"required": [a]}}}
    return out


def schema_problems(tree: Any, doc: Document) -> list[Diagnostic]:
    """The schema's complaints about ``tree``, each at the place in ``doc`` it is about."""
    # Happy path first. fastjsonschema is never more lenient than jsonschema on this schema
    # (e.g. it refuses 1.0 as an integer), so "valid" there means valid here; anything it
    # refuses, or cannot even look at (an undefined ${name}), is re-checked precisely below,
    # which alone decides the diagnostics.
    fast = _fast_validator()
    try:
        fast(tree)
        return []
    except Exception:
        pass
    # A stage the compiled check accepts, under a name it accepts, holds no error of its own, and
    # nothing else in the schema looks across stages but ``minProperties``: so the precise pass
    # checks the refused stages only (or one stage, when the problem is elsewhere), which on a large
    # manifest is most of its time.
    stages = tree.get("stages") if isinstance(tree, dict) else None
    if isinstance(stages, dict) and len(stages) > 1:
        refused = {sid: spec for sid, spec in stages.items() if not fast.accepts_stage(sid, spec)}
        tree = {**tree, "stages": refused or dict([next(iter(stages.items()))])}
    import jsonschema  # only a refused manifest pays for its import

    validator = jsonschema.Draft202012Validator(schema())
    problems: list[Diagnostic] = []
    for error in validator.iter_errors(tree):
        if not has_undefined(error.instance):
            problems.extend(_explain(error, doc))
    return problems


def _describe(path: Path) -> str:
    if not path:
        return "the manifest"
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _explain(error: jsonschema.ValidationError, doc: Document) -> Iterator[Diagnostic]:
    path = tuple(error.absolute_path)
    where = _describe(path)
    v = error.validator
    if v == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list(error.schema.get("properties", {}))
        for key in error.instance:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                yield Diagnostic(
                    doc.key_at(path + (key,)),
                    f"unknown key {key!r} in {where} (allowed: {', '.join(allowed)}){hint}",
                )
        return
    if v == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        yield Diagnostic(doc.at(path), f"{where} is missing required key {', '.join(map(repr, missing))}")
        return
    if v == "const":
        yield Diagnostic(doc.at(path), f"{where} must be {error.validator_value!r}, found {error.instance!r}")
        return
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
    if v in ("oneOf", "anyOf") and error.context:
        import jsonschema.exceptions

        best = jsonschema.exceptions.best_match(error.context)
        if best is not None and best.validator in ("enum", "const"):
            yield from _explain(best, doc)
            return
    yield Diagnostic(doc.at(path), f"{where}: {error.message}")
