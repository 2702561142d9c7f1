"""Matrix sweeps: one manifest, one run per point.

``matrix:`` maps declared params to lists of values. :func:`expand` makes
the points the way GitHub Actions expands a job matrix:

1. the cartesian product of the lists, in the order the keys are written
   (the last key varies fastest);
2. ``exclude:`` drops every combination that matches all key/value pairs
   of one of its entries;
3. each ``include:`` entry is added to every combination whose original
   matrix values it does not overwrite (values an earlier include added
   may be overwritten); an entry that fits no combination becomes a new
   combination of its own.

A point is named stably from its values: ``name[hidden=1024,seed=7]``,
keys in matrix order, then keys that ``include`` added. Expanding never
loses positions: every point is compiled from the same
:class:`~hetflow.engine.manifest.Document` with the point's values as
overrides, so an error inside a point points at the original manifest.

Examples
--------
>>> from hetflow.engine.manifest import loads
>>> doc = loads('''
... version: 1
... name: sweep
... params: {a: 1, b: x, c: 0}
... matrix:
...   a: [1, 2]
...   b: [x, y]
...   exclude: [{a: 2, b: y}]
...   include: [{a: 1, c: 5}, {a: 3, b: z}]
... ''', "s.yaml")
>>> [p.name for p in expand(doc)]
['sweep[a=1,b=x,c=5]', 'sweep[a=1,b=y,c=5]', 'sweep[a=2,b=x]', 'sweep[a=3,b=z]']
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, Mapping

from hetflow.engine.errors import Diagnostic, ManifestError, UsageError
from hetflow.engine.manifest import Document

__all__ = ["Point", "expand", "has_matrix", "point_name", "select", "DEFAULT_MAX_POINTS"]

DEFAULT_MAX_POINTS = 256


@dataclass(frozen=True)
class Point:
    name: str
    values: Mapping[str, Any]


def has_matrix(doc: Document) -> bool:
    return isinstance(doc.value, dict) and isinstance(doc.value.get("matrix"), dict)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


def point_name(name: str, values: Mapping[str, Any]) -> str:
    """
    >>> point_name("mlp", {"hidden": 1024, "act": "gelu", "fast": True})
    'mlp[hidden=1024,act=gelu,fast=true]'
    """
    return f"{name}[" + ",".join(f"{k}={_text(v)}" for k, v in values.items()) + "]"


def expand(doc: Document, overrides: Mapping[str, Any] | None = None, max_points: int = DEFAULT_MAX_POINTS) -> list[Point]:
    """The points of the document's matrix; raises :class:`ManifestError` or :class:`UsageError`.

    An override of a matrix key fixes that key to the one given value.
    """
    tree = doc.value
    matrix = tree.get("matrix") if isinstance(tree, dict) else None
    if not isinstance(matrix, dict):
        return []
    params = tree.get("params") if isinstance(tree.get("params"), dict) else {}
    name = tree.get("name") if isinstance(tree.get("name"), str) else "pipeline"
    overrides = dict(overrides or {})
    problems: list[Diagnostic] = []

    axes: dict[str, list[Any]] = {}
    for key, values in matrix.items():
        if key in ("include", "exclude"):
            continue
        if key not in params:
            problems.append(Diagnostic(doc.key_at(("matrix", key)), f"matrix key {key!r} is not a declared param (declared: {', '.join(params) or 'none'})"))
            continue
        if not isinstance(values, list) or not values:
            continue
        axes[key] = [overrides[key]] if key in overrides else values
    extra_lists: dict[str, list] = {}
    for section in ("include", "exclude"):
        entries = matrix.get(section, [])
        if not isinstance(entries, list):
            continue
        extra_lists[section] = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                continue
            for key in entry:
                if key not in params:
                    problems.append(Diagnostic(doc.key_at(("matrix", section, i, key)), f"matrix {section} key {key!r} is not a declared param (declared: {', '.join(params) or 'none'})"))
            extra_lists[section].append(entry)
    if problems:
        raise ManifestError(problems)

    combos: list[dict[str, Any]] = [dict(zip(axes, values)) for values in itertools.product(*axes.values())] if axes else []
    for entry in extra_lists.get("exclude", []):
        combos = [c for c in combos if not all(k in c and c[k] == v for k, v in entry.items())]
    originals = [dict(c) for c in combos]
    for entry in extra_lists.get("include", []):
        entry = {k: overrides.get(k, v) for k, v in entry.items()}
        fitted = False
        for combo, original in zip(combos, originals):
            if all(original.get(k, v) == v for k, v in entry.items() if k in original):
                combo.update(entry)
                fitted = True
        if not fitted:
            combos.append(dict(entry))
            originals.append(dict(entry))

    seen: dict[str, Point] = {}
    for combo in combos:
        point = Point(point_name(name, combo), combo)
        seen.setdefault(point.name, point)
    points = list(seen.values())
    if len(points) > max_points:
        raise UsageError(
            f"{doc.file}: the matrix expands to {len(points)} points, more than the cap of {max_points}; "
            "raise it with --max-points N"
        )
    return points


def _split_pairs(text: str) -> list[str]:
    """``a=1,b=[1, 2]`` -> ``['a=1', 'b=[1, 2]']``: commas inside brackets or braces stay."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def select(points: list[Point], wanted: str) -> Point:
    """The point ``wanted`` names: its full name, the part in brackets, or ``key=value`` pairs in any order
    that match exactly one point (a partial point).

    >>> pts = [Point("m[a=1,b=x]", {"a": 1, "b": "x"}), Point("m[a=1,b=y]", {"a": 1, "b": "y"}),
    ...        Point("m[a=2,b=y]", {"a": 2, "b": "y"})]
    >>> select(pts, "b=x,a=1").name, select(pts, "m[b=x,a=1]").name, select(pts, "a=2").name
    ('m[a=1,b=x]', 'm[a=1,b=x]', 'm[a=2,b=y]')
    >>> select(pts, "a=1")
    Traceback (most recent call last):
    ...
    hetflow.engine.errors.UsageError: --point a=1 matches 2 points (m[a=1,b=x], m[a=1,b=y]); give more keys
    """
    import yaml

    from hetflow.engine.loader import SafeLoader

    for p in points:
        if wanted in (p.name, p.name[p.name.index("[") + 1 : -1]):
            return p
    body = wanted[wanted.index("[") + 1 : -1] if wanted.endswith("]") and "[" in wanted else wanted
    pairs: dict[str, Any] = {}
    for part in _split_pairs(body):
        key, sep, text = part.partition("=")
        if not sep or not key.strip():
            pairs = {}
            break
        try:
            pairs[key.strip()] = yaml.load(text, Loader=SafeLoader) if text.strip() else ""
        except yaml.YAMLError:
            pairs[key.strip()] = text.strip()

    def same(a: Any, b: Any) -> bool:
        return a == b or _text(a) == _text(b)

    names = ", ".join(p.name for p in points[:10]) + (" ..." if len(points) > 10 else "")
    if pairs:
        keys = {k for p in points for k in p.values}
        unknown = sorted(set(pairs) - keys)
        if unknown:
            raise UsageError(f"--point {wanted}: {unknown[0]!r} is not a matrix key (keys: {', '.join(sorted(keys))})")
        found = [p for p in points if all(k in p.values and same(p.values[k], v) for k, v in pairs.items())]
        if len(found) == 1:
            return found[0]
        if found:
            shown = ", ".join(p.name for p in found[:10]) + (" ..." if len(found) > 10 else "")
            raise UsageError(f"--point {wanted} matches {len(found)} points ({shown}); give more keys")
    raise UsageError(f"no matrix point {wanted!r} (points: {names})")
