"""Manifest passes: load, resolve, validate.

:func:`load` parses YAML with PyYAML's safe composer and keeps, for every
value, where it was written (:mod:`hetflow.engine.manifest.loader`): a
:class:`Document` is the plain data tree (dicts, lists, scalars) plus
``marks``, a table from a value's *path* (the tuple of keys and indexes
leading to it) to its :class:`Origin`, and ``key_marks`` for the keys of
mappings. Later passes never look at YAML again; they look up a path.

:func:`compile_manifest` then runs, on that document:

1. :func:`~hetflow.engine.manifest.resolve.resolve` (:mod:`hetflow.engine.manifest.resolve`):
   the declared param defaults, overridden by ``-p key=value``;
   ``"${name}"`` alone becomes the param's typed value, ``${name}`` inside
   a longer string becomes its text; paths are kept, so every value still
   points at where it was written;
2. :func:`validate`: the schema check (:mod:`hetflow.engine.manifest.schemacheck`:
   the resolved tree against ``schemas/pipeline.base.json``), the
   ``schedule:`` check, then the semantic checks
   (:mod:`hetflow.engine.manifest.semantics`: ops exist, arguments and arity fit the
   op, inputs and executors exist, dtypes are ones the op supports, no
   cycle, outputs name stages);

and returns a :class:`Manifest` whose ``digest`` hashes its canonical
JSON. Params are resolved before the schema sees the tree, because the
schema checks the typed values a ``${name}`` stands for. Every problem
found becomes one :class:`Diagnostic`; all of them are raised together as
one :class:`ManifestError`.

Examples
--------
>>> doc = loads("version: 1\\nname: demo\\n", "demo.yaml")
>>> doc.value["name"], str(doc.at(("name",)))
('demo', 'demo.yaml:2:7')
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from hetflow.engine.manifest import phasedecl as phaselib
from hetflow.engine.manifest import shapes
from hetflow.engine.errors import Diagnostic, ManifestError
from hetflow.engine.manifest.loader import (  # noqa: F401 - re-exported: the loader was part of this module
    MAX_DEPTH,
    MAX_VALUES,
    Document,
    Path,
    gc_paused,
    load,
    loads,
)
from hetflow.engine.manifest.resolve import canonical_json, parse_overrides, resolve
from hetflow.engine.manifest.schemacheck import schema, schema_problems
from hetflow.engine.manifest.semantics import ExecutorDecl, Manifest, StageDecl, check_semantics

__all__ = [
    "Document",
    "StageDecl",
    "ExecutorDecl",
    "Manifest",
    "load",
    "loads",
    "schema",
    "parse_overrides",
    "compile_manifest",
    "validate",
    "stage_order",
    "canonical_json",
]


def compile_manifest(doc: Document, overrides: Mapping[str, Any] | None = None) -> Manifest:
    """Resolve and validate a document into a :class:`Manifest`; raises :class:`ManifestError`."""
    with gc_paused():
        return _compile(doc, overrides)


def _compile(doc: Document, overrides: Mapping[str, Any] | None) -> Manifest:
    tree = doc.value
    if doc.problems:  # keys that are not strings or are written twice, an empty file: YAML takes them, a manifest not
        raise ManifestError(list(doc.problems))
    if not isinstance(tree, dict):
        raise ManifestError([Diagnostic(doc.at(()), "a manifest is a YAML mapping of keys such as version, name, stages")])
    if not isinstance(tree.get("params", {}), dict):
        raise ManifestError(schema_problems(tree, doc))
    # -p USE.PARAM (or USE.INDEX.PARAM) sets a param of a block's instances, which the expansion makes
    overrides = dict(overrides or {})
    instances = {k: overrides.pop(k) for k in [k for k in overrides if "." in k]}
    resolved, problems = resolve(doc, overrides)
    return validate(resolved, doc, problems, instances)


def validate(resolved: dict, doc: Document, problems: list[Diagnostic] | None = None,
             instance_params: Mapping[str, Any] | None = None) -> Manifest:
    """The validate pass: the schema check, the ``schedule:`` check and the semantic checks of a resolved tree.

    ``problems`` are those found before (by the resolve pass); they are
    raised with the rest. ``instance_params`` are ``-p`` overrides of a
    block's params, ``USE.PARAM`` or ``USE.INDEX.PARAM`` (the instance
    ids' form): :func:`hetflow.engine.manifest.blocks.expand` applies them.

    Raises
    ------
    ManifestError
        every problem found, each at its ``FILE:LINE:COL``.
    """
    from hetflow.engine.manifest.blocks import expand

    problems = list(problems or [])
    resolved, doc, expanding = expand(resolved, doc, instance_params)
    if expanding:  # what a broken use would leave (stages missing, names unbound) says nothing more
        raise ManifestError(problems + expanding)
    tree = doc.value
    problems.extend(schema_problems({**resolved, **{k: tree[k] for k in ("matrix", "schedule") if k in tree}}, doc))
    if "schedule" in tree:
        from hetflow.engine.manifest import cron

        problems.extend(cron.check(tree["schedule"], doc, tree.get("params", {})))
        problems.extend(cron.unfed_inputs(tree, doc))
    manifest = None
    try:
        manifest = check_semantics(resolved, doc, problems)
    except (KeyError, TypeError, AttributeError):
        if not problems:
            raise
    if problems or manifest is None:
        raise ManifestError(problems)
    table = shapes.infer(manifest.stages, stage_order(manifest), {
        pid: phaselib.planned(p, manifest.emulators[p.emulator]) for pid, p in manifest.phases.items()})
    if table.problems:
        raise ManifestError(table.problems)
    return dataclasses.replace(manifest, shapes=table)


def stage_order(manifest: Manifest) -> list[str]:
    """The phases, then the stages, in an order that has every input first: the order written, where it does.

    Where a stage is written above an input of its own, the earliest-written
    stage whose inputs are done comes next (the order
    :func:`hetflow.engine.plan.plangraph.execution_order` gives the graph).
    """
    phases = phaselib.execution_order(manifest.phases)
    seen = set(phases)
    for sid, stage in manifest.stages.items():
        if not seen.issuperset(stage.inputs):
            break
        seen.add(sid)
    else:
        return [*phases, *manifest.stages]
    import networkx as nx

    written = {n: i for i, n in enumerate([*phases, *manifest.stages])}
    graph = nx.DiGraph()
    graph.add_nodes_from(written)
    graph.add_edges_from((ref, sid) for sid, s in manifest.stages.items() for ref in s.inputs if ref in written)
    graph.add_edges_from((ref, pid) for pid, p in manifest.phases.items() for ref in p.inputs if ref in written)
    return list(nx.lexicographical_topological_sort(graph, key=written.__getitem__))
