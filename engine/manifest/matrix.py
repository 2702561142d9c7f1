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
:class:`~hetflow.engine.manifest.validate.Document` with the point's values as
overrides, so an error inside a point points at the original manifest.

Examples
--------
>>> from hetflow.engine.manifest.validate import loads
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

import functools
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from hetflow.engine.errors import Diagnostic, ManifestError, Origin, UsageError, argument
from hetflow.engine.manifest.loader import SafeLoader, not_json
from hetflow.engine.manifest.resolve import check_overrides, override_text
from hetflow.engine.manifest.validate import Document, Manifest, compile_manifest

__all__ = ["Point", "expand", "has_matrix", "point_name", "select", "check_points", "blame_overrides",
           "DEFAULT_MAX_POINTS"]

DEFAULT_MAX_POINTS = 256
# the most points validate and plan expand: each is compiled and checked, a few milliseconds apiece
CHECK_MAX_POINTS = 1 << 16
# the most combinations of the axes enumerated to apply a matrix's exclude entries
_MAX_COMBINATIONS = 10_000_000


@dataclass(frozen=True)
class Point:
    name: str
    values: Mapping[str, Any]


def has_matrix(doc: Document) -> bool:
    return isinstance(doc.value, dict) and isinstance(doc.value.get("matrix"), dict)


def _text(value: Any) -> str:
    """A value as a point's name shows it: a string bare unless it would read as another value (``"1"``, ``"true"``)
    or holds what the name's syntax uses; anything else as JSON. Two values that differ never show alike: ``1``,
    ``1.0``, ``true`` and ``"1"`` are four points.

    >>> [_text(v) for v in ("gelu", "1", "a,b", "", 1, 1.0, True, [1, 2])]
    ['gelu', '"1"', '"a,b"', '""', '1', '1.0', 'true', '[1, 2]']
    """
    if isinstance(value, str):
        return json.dumps(value) if _read_otherwise(value) else value
    return json.dumps(value)


@functools.lru_cache(maxsize=4096)
def _read_otherwise(text: str) -> bool:
    """Whether ``text``, written bare as a point's value (``--point k=TEXT``), is not that string."""
    if not text or text != text.strip() or any(c in text for c in ",=[]{}\"'"):
        return True
    import yaml

    try:
        return yaml.load(text, Loader=SafeLoader) != text
    except yaml.YAMLError:
        return True


def _same(a: Any, b: Any) -> bool:
    """Whether two matrix values are the same value: ``1`` is not ``true``, ``1.0`` or ``"1"``."""
    return _text(a) == _text(b)


def _leaves(value: Any, path: tuple) -> Any:
    """(path, value) of every value under ``value`` that is neither a list nor a mapping."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def point_name(name: str, values: Mapping[str, Any]) -> str:
    """
    >>> point_name("mlp", {"hidden": 1024, "act": "gelu", "fast": True})
    'mlp[hidden=1024,act=gelu,fast=true]'
    """
    return f"{name}[" + ",".join(f"{k}={_text(v)}" for k, v in values.items()) + "]"


def expand(doc: Document, overrides: Mapping[str, Any] | None = None, max_points: int = DEFAULT_MAX_POINTS,
           remedy: str | None = None) -> list[Point]:
    """The points of the document's matrix; raises :class:`ManifestError` or :class:`UsageError`.

    An override of a matrix key fixes that key to the one given value.
    A matrix of more than ``max_points`` points is a :class:`UsageError`
    (ending in ``remedy``) as soon as its combinations show it: a typo
    that makes a billion of them is said at once, not built in memory.
    """
    if max_points < 1:
        raise UsageError(f"{argument('max_points')} must be at least 1")
    if remedy is None:
        option = argument("max_points")
        remedy = f"raise it with {option}N" if option.endswith("=") else f"raise it with {option} N"
    tree = doc.value
    matrix = tree.get("matrix") if isinstance(tree, dict) else None
    if not isinstance(matrix, dict):
        return []
    params = tree.get("params") if isinstance(tree.get("params"), dict) else {}
    name = tree.get("name") if isinstance(tree.get("name"), str) else "pipeline"
    overrides = dict(overrides or {})
    problems: list[Diagnostic] = []
    # a -p that fixes a matrix key is the -p's, not the matrix's: a list for a single value is said as -p's
    check_overrides(doc, {k: v for k, v in overrides.items() if k in matrix and k in params})

    for where, value in _leaves(matrix, ("matrix",)):
        odd = not_json(value)
        if odd is not None:
            raise ManifestError([Diagnostic(doc.at(where), f"{'.'.join(map(str, where))} is {odd}")])
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

    excludes = extra_lists.get("exclude", [])
    total = math.prod(len(v) for v in axes.values()) if axes else 0

    def too_many(at_least: int) -> UsageError:
        return UsageError(f"{_where(doc)}: the matrix expands to more than {at_least - 1} points (its axes make {total:,} "
                          f"combinations), more than the cap of {max_points}; {remedy}")

    if total > max_points and (not excludes or total > _MAX_COMBINATIONS):
        if not excludes and not extra_lists.get("include") and all(
                len({_text(v) for v in values}) == len(values) for values in axes.values()):
            # every combination is a point of its own: the count is known without making them
            raise UsageError(f"{_where(doc)}: the matrix expands to {total:,} points, more than the cap of {max_points}; "
                             f"{remedy}")
        raise too_many(max_points + 1)
    combos: list[dict[str, Any]] = []
    # include entries only add points or keys, so the distinct names so far are at least the points to come
    names: set[str] = set()
    for values in itertools.product(*axes.values()) if axes else ():
        combo = dict(zip(axes, values))
        if any(all(k in combo and _same(combo[k], v) for k, v in entry.items()) for entry in excludes):
            continue
        combos.append(combo)
        names.add(point_name(name, combo))
        if len(names) > max_points:
            raise too_many(len(names))
    originals = [dict(c) for c in combos]
    for entry in extra_lists.get("include", []):
        entry = {k: overrides.get(k, v) for k, v in entry.items()}
        fitted = False
        for combo, original in zip(combos, originals):
            if all(_same(original[k], v) for k, v in entry.items() if k in original):
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
    if not points:
        raise _no_point(doc, overrides, total, bool(excludes))
    if len(points) > max_points:
        raise UsageError(f"{_where(doc)}: the matrix expands to {len(points)} points, more than the cap of {max_points}; "
                         f"{remedy}")
    return points


def _no_point(doc: Document, overrides: Mapping[str, Any], combinations: int, excluded: bool) -> ManifestError:
    """The error of a ``matrix:`` that makes no point: what the schema says of it (a key whose values are no list,
    or an empty one) where it says anything, else why there is none, at the ``matrix:`` key.

    With no point, no point is compiled, and so nothing else would say it: ``validate`` said ``ok`` and
    ``run`` failed with an internal error.
    """
    try:
        compile_manifest(doc, dict(overrides))
    except ManifestError as e:
        return e
    if combinations and excluded:
        why = f"exclude drops every one of its {combinations:,} combinations"
    else:
        why = "it gives no declared param a list of values, and has no include entry"
    return ManifestError([Diagnostic(doc.key_at(("matrix",)), f"the matrix makes no point: {why}")])


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
    hetflow.engine.errors.UsageError: point='a=1' matches 2 points (m[a=1,b=x], m[a=1,b=y]); give more keys
    >>> select(pts, "other[a=2]")
    Traceback (most recent call last):
    ...
    hetflow.engine.errors.UsageError: point='other[a=2]' names a point of 'other', not of this manifest 'm' (points: m[a=1,b=x], m[a=1,b=y], m[a=2,b=y])
    """
    from hetflow.engine.manifest.loader import dates_as_text, loads

    for p in points:
        if wanted in (p.name, p.name[p.name.index("[") + 1 : -1]):
            return p
    names = ", ".join(p.name for p in points[:10]) + (" ..." if len(points) > 10 else "")
    body = wanted[wanted.index("[") + 1 : -1] if wanted.endswith("]") and "[" in wanted else wanted
    named = wanted[: wanted.index("[")] if body is not wanted else ""
    own = points[0].name[: points[0].name.index("[")] if points else ""
    if named and named != own:  # the pairs alone would pick a point of this manifest under another's name
        raise UsageError(f"{argument('point', wanted)} names a point of {named!r}, not of this manifest "
                         f"{own!r} (points: {names})")
    pairs: dict[str, Any] = {}
    for part in _split_pairs(body):
        key, sep, text = part.partition("=")
        if not sep or not key.strip():
            pairs = {}
            break
        try:
            # within the manifest's limits: an alias that names itself is refused here, not walked without end
            pairs[key.strip()] = dates_as_text(loads(text, "--point").value) if text.strip() else ""
        except ManifestError:
            pairs[key.strip()] = text.strip()

    def same(a: Any, b: Any) -> bool:
        return a == b or _text(a) == _text(b)

    if pairs:
        keys = {k for p in points for k in p.values}
        unknown = sorted(set(pairs) - keys)
        if unknown:
            raise UsageError(f"{argument('point', wanted)}: {unknown[0]!r} is not a matrix key (keys: {', '.join(sorted(keys))})")
        found = [p for p in points if all(k in p.values and same(p.values[k], v) for k, v in pairs.items())]
        if len(found) == 1:
            return found[0]
        if found:
            shown = ", ".join(p.name for p in found[:10]) + (" ..." if len(found) > 10 else "")
            raise UsageError(f"{argument('point', wanted)} matches {len(found)} points ({shown}); give more keys")
    raise UsageError(f"no matrix point {wanted!r} (points: {names})")


SHOWN_POINTS = 3
"""A problem at several points names this many of them, then how many more."""


def check_points(doc: Document, overrides: Mapping[str, Any], points: list[Point],
                 check: Callable[[Manifest], list[Diagnostic]] | None = None) -> tuple[list[Manifest], list[Diagnostic]]:
    """Compile every point of ``points`` (and ``check`` each manifest): (a manifest per point, the warnings).

    Every problem is reported once. One found at every point of the
    matrix is reported as it is; one found at some points only names them
    and the matrix line it comes from: the value that the failing points
    share and no other point has (``features=512``), else the
    ``matrix:`` key. Where that value is of another kind than its param's
    default (``"128"`` or ``128.0`` for a default of ``32``), the problem
    is the value's, reported at its line in the matrix, naming where it
    broke. A value that is a list or map where its param is one value (or
    the other way round) is a problem at its line and its points are not
    compiled.

    Raises
    ------
    ManifestError
        every problem of every point.
    """
    params = doc.value.get("params") if isinstance(doc.value.get("params"), dict) else {}
    problems = _structure_problems(doc, params, points)
    broken = {k for d, k in problems}
    found: dict[tuple, list[int]] = {}
    manifests: list[Manifest] = []
    for i, point in enumerate(points):
        if any((k, _text(v)) in broken for k, v in point.values.items()):
            continue
        try:
            manifest = compile_manifest(doc, {**overrides, **point.values})
            said = check(manifest) if check is not None else []
        except ManifestError as e:
            said = e.diagnostics
            manifest = None
        if manifest is not None:
            manifests.append(manifest)
        for d in said:
            found.setdefault((d.origin, d.message, d.severity), []).append(i)
    errors = [d for d, _ in problems]
    warnings = []
    wrong_kind: dict[tuple, list[str]] = {}  # one matrix value of the wrong kind breaks each stage that uses it
    for (origin, message, severity), where in found.items():
        d = _at_points(doc, params, points, where, Diagnostic(origin, message, severity))
        if not isinstance(d, Diagnostic):
            wrong_kind.setdefault(d[:3], []).append(d[3])
        else:
            (errors if severity == "error" else warnings).append(d)
    for (at, value, counted), broke in wrong_kind.items():
        errors.append(Diagnostic(at, f"{value}; {'; '.join(broke)} [{counted}]"))
    if errors:
        raise ManifestError(errors + [w for w in warnings])
    return manifests, warnings


def blame_overrides(doc: Document, overrides: Mapping[str, Any], attempt: Callable[[Mapping[str, Any]], Any]) -> Any:
    """``attempt(overrides)``, where a ``-p`` value of another kind than its param's default breaks a check: the
    problem is then that ``-p``'s (a :class:`UsageError`, naming where it broke), as a matrix value's is its line's.

    A value is blamed only for what ``attempt`` no longer finds with the
    param at its default: ``-p n=true`` for ``n: 4`` that a shape reads,
    not ``-p lr=1`` for ``lr: 0.5``, which breaks nothing.
    """
    try:
        return attempt(overrides)
    except ManifestError as e:
        params = doc.value.get("params") if isinstance(doc.value, dict) else None
        params = params if isinstance(params, dict) else {}
        odd = [k for k, v in overrides.items()
               if params.get(k) is not None and _kind(params[k]) != _kind(v)]
        errors = [d for d in e.diagnostics if d.severity == "error"]
        for key in odd:
            try:
                attempt({k: v for k, v in overrides.items() if k != key})
                left: set = set()
            except ManifestError as without:
                left = {(d.origin, d.message) for d in without.diagnostics}
            except UsageError:
                continue
            broke = [d for d in errors if (d.origin, d.message) not in left]
            if broke:
                value, default = overrides[key], params[key]
                raise UsageError(
                    f"{override_text(key, value)}: param {key!r} is {_kind(value)} here, where its default "
                    f"{json.dumps(default)} at {doc.at(('params', key))} is {_kind(default)}; at {broke[0].origin}: "
                    f"{broke[0].message}") from None
        raise


def _kind(value: Any) -> str:
    """
    >>> _kind(1), _kind(1.0), _kind("1"), _kind(True), _kind([1]), _kind(None)
    ('an integer', 'a float', 'a string', 'a boolean', 'a list', 'null')
    """
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a map"
    return "null"


def _value_origin(doc: Document, key: str, value: Any) -> Origin | None:
    """Where the matrix says ``key: value``: in its list, else in an ``include:`` entry."""
    matrix = doc.value.get("matrix") or {}
    values = matrix.get(key)
    for j, v in enumerate(values if isinstance(values, list) else []):
        if v == value and type(v) is type(value):
            return doc.at(("matrix", key, j))
    for j, entry in enumerate(matrix.get("include") if isinstance(matrix.get("include"), list) else []):
        if isinstance(entry, dict) and key in entry and entry[key] == value and type(entry[key]) is type(value):
            return doc.at(("matrix", "include", j, key))
    return None


def _structure_problems(doc: Document, params: Mapping[str, Any], points: list[Point]) -> list[tuple[Diagnostic, tuple]]:
    """Values that are a list or a map where their param is one value, or the other way round."""
    out: list[tuple[Diagnostic, tuple]] = []
    seen: set[tuple] = set()
    for point in points:
        for key, value in point.values.items():
            default = params.get(key)
            if default is None or (key, _text(value)) in seen:
                continue
            seen.add((key, _text(value)))
            if isinstance(default, (list, dict)) != isinstance(value, (list, dict)) or (
                    isinstance(default, (list, dict)) and type(default) is not type(value)):
                out.append((Diagnostic(_value_origin(doc, key, value) or doc.key_at(("matrix", key)), (
                    f"matrix value {json.dumps(value)} of param {key!r} is {_kind(value)}, where its default "
                    f"{json.dumps(default)} (at {doc.at(('params', key))}) is {_kind(default)}")), (key, _text(value))))
    return out


def _culprit(points: list[Point], where: list[int]) -> tuple[str, Any] | None:
    """The key and value the points ``where`` share and no other point has, in matrix order."""
    failing = [points[i].values for i in where]
    others = [p.values for i, p in enumerate(points) if i not in set(where)]
    for key, value in failing[0].items():
        if all(key in v and v[key] == value and type(v[key]) is type(value) for v in failing) and not any(
                key in v and v[key] == value and type(v[key]) is type(value) for v in others):
            return key, value
    return None


def _at_points(doc: Document, params: Mapping[str, Any], points: list[Point], where: list[int],
               d: Diagnostic) -> Diagnostic | tuple:
    """``d``, found at the points ``where``, as it is reported: plain when at every point, else naming them.

    A problem that a matrix value of another kind than its param's
    default causes is that value's: a tuple (its origin, what is wrong
    with it, its points, where it broke), which the caller merges with
    the other places the same value broke.
    """
    if len(where) == len(points) and len(points) > 1:
        return d
    names = [points[i].name for i in where[:SHOWN_POINTS]]
    more = len(where) - len(names)
    listed = ", ".join(names) + (f" and {more} more" if more else "")
    culprit = _culprit(points, where) if len(where) < len(points) else None
    at = _value_origin(doc, *culprit) if culprit else None
    if culprit is None or at is None:
        counted = f"point {listed}" if len(where) == 1 else f"{len(where)} of {len(points)} points: {listed}"
        return Diagnostic(d.origin, f"{d.message} [{counted}; matrix at {doc.key_at(('matrix',))}]", d.severity)
    key, value = culprit
    counted = f"point {listed}" if len(where) == 1 else f"{len(where)} of {len(points)} points: {listed}"
    default = params.get(key)
    if default is not None and _kind(default) != _kind(value) and d.severity == "error":
        # the value's problem, at its line: (where, what is wrong with it, its points, where it broke and how)
        return (at, f"matrix value {json.dumps(value)} of param {key!r} is {_kind(value)}, where its default "
                    f"{json.dumps(default)} is {_kind(default)}", counted, f"at {d.origin}: {d.message}")
    return Diagnostic(d.origin, f"{d.message} [{counted}, where {key}={_text(value)}: matrix at {at}]", d.severity)


def _where(doc: Document) -> str:
    """FILE:LINE:COL of the manifest's ``matrix:`` key, where its points are counted from."""
    try:
        return str(doc.key_at(("matrix",)))
    except (KeyError, TypeError, ValueError):
        return doc.file
