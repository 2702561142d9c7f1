"""The shape pass: every stage's output shape and size from its op's shape rule, before anything runs.

The validate pass (:func:`hetflow.engine.manifest.validate.validate`) runs it on
every manifest and keeps the answer on the :class:`~hetflow.engine.manifest.semantics.Manifest`
(``shapes``); the graph pass (:func:`hetflow.engine.plan.plangraph.build_graph`)
reads that table instead of asking the rules again, so ``validate`` and
``plan`` give one answer and one message for a shape that does not fit.

:func:`infer` walks the stages in an order that has every input first.
A stage's shape is its op's rule applied to its inputs' shapes and its
args; stages alike in op, dtype and input shapes, with no args, share one
answer (rules are pure). A witness table's rows are bounded, not known:
its shape is the bound, and a stage that reads a bounded tensor is
bounded too unless its rule gives the same shape for one row
(``small``).

A rule that refuses its inputs is one problem at the stage's ``inputs:``.
When the input it refuses came from a user's op, the problem is the
user's op's, reported at that op's own stage with what its rule gave:
the stage that failed is where the mistake showed, not where it was made.

Examples
--------
>>> from hetflow.engine.manifest.validate import compile_manifest, loads
>>> m = compile_manifest(loads('''
... version: 1
... name: s
... executors: {a: {vendor: cpu}}
... stages:
...   x: {op: ones, args: {shape: [2, 3]}}
...   y: {op: transpose, inputs: [x]}
... ''', "s.yaml"))
>>> m.shapes.shape["y"], m.shapes.nbytes["y"]
((3, 2), 24)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from hetflow.engine.errors import Diagnostic
from hetflow.executors import ops as oplib

__all__ = ["Table", "infer", "user_rule_problem"]


@dataclass(frozen=True)
class Table:
    """The shape pass's answer: per node its ``shape`` (None: known only when it runs) and ``nbytes``;
    ``small`` holds, for each bounded node, its shape at one row of its bounded input."""

    shape: dict[str, Any] = field(default_factory=dict)
    nbytes: dict[str, int | None] = field(default_factory=dict)
    small: dict[str, Any] = field(default_factory=dict)
    problems: list[Diagnostic] = field(default_factory=list)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def infer(stages: Mapping[str, Any], order: Iterable[str], phases: Mapping[str, Mapping[str, Any]]) -> Table:
    """Shapes and sizes of ``stages`` walked in ``order`` (ids that are not stages are skipped).

    ``phases`` is what the plan knows of each emulator phase
    (:func:`hetflow.engine.manifest.phasedecl.planned`): its shape, bytes and whether
    they are a bound.
    """
    table = Table()
    shapes, sizes_of, small, problems = table.shape, table.nbytes, table.small, table.problems
    for pid, info in phases.items():
        shape = None if info["shape"] is None else tuple(info["shape"])
        shapes[pid] = shape
        sizes_of[pid] = info["bytes"]
        if info["size"] == "bound":
            small[pid] = (1,) + shape[1:]
    registry = oplib.REGISTRY
    # shape rules are pure: stages alike in op, dtype and input shapes, with no args, share one shape and size
    alike: dict[tuple, tuple[Any, int | None]] = {}
    sizes: dict[tuple, int] = {}  # bytes of a (shape, dtype), counted once
    for sid in order:
        stage = stages.get(sid)
        if stage is None:
            continue
        ins = stage.inputs
        if stage.args:
            key = None
        elif len(ins) == 1:
            key = (stage.op, stage.dtype._value_, shapes[ins[0]])
        else:
            key = (stage.op, stage.dtype._value_, *[shapes[ref] for ref in ins])
        known = alike.get(key) if key is not None else None
        if known is not None:
            shape, nbytes = known
        else:
            try:
                shape = registry[stage.op].shape([shapes[ref] for ref in ins], stage.args)
            except oplib.ShapeError as e:
                problems.append(user_rule_problem(stage, stages, shapes, e)
                                or Diagnostic(stage.inputs_origin if stage.inputs else stage.op_origin, f"stage {sid!r}: {e}"))
                shape = nbytes = None
            else:
                if shape is None:
                    nbytes = None
                elif shape.__class__ is not tuple:  # a user's shape rule may answer a list
                    nbytes = stage.dtype.nbytes(_count(shape))
                else:
                    size_key = (shape, stage.dtype._value_)  # an Enum hashes through a Python-level method
                    nbytes = sizes.get(size_key)
                    if nbytes is None:
                        nbytes = sizes[size_key] = stage.dtype.nbytes(_count(shape))
                if key is not None:
                    alike[key] = (shape, nbytes)
        shapes[sid] = shape
        sizes_of[sid] = nbytes
        if small and shape is not None and any(ref in small for ref in ins):
            try:
                at_one = registry[stage.op].shape([small.get(ref, shapes[ref]) for ref in ins], stage.args)
            except oplib.ShapeError:
                at_one = None
            if at_one != shape:
                small[sid] = at_one
    return table


def _default_rule(op: Any) -> bool:
    """Whether a user's op declared no ``shape=`` and so runs on the default rule (its first input's shape).

    :func:`hetflow.executors.userops.op` marks that rule ``is_default``.
    """
    return getattr(op.shape_rule, "is_default", False)


def _shape_text(shape: Any) -> str:
    return "unknown until it runs" if shape is None else f"[{', '.join(str(d) for d in shape)}]"


def user_rule_problem(stage: Any, stages: Mapping[str, Any], shapes: Mapping[str, Any],
                      error: Exception) -> Diagnostic | None:
    """The problem of a stage whose built-in shape rule refused an input made by a user's op; None otherwise.

    An op without ``shape=`` has the default rule, a guess: the problem
    is reported at that op's own stage, naming what the guess gave. An op
    with its own rule is taken at its word: the problem stays at the
    stage that refused, naming the rule and what it gave.
    """
    consumer = oplib.REGISTRY.get(stage.op)
    if consumer is None or consumer.invoke is not None:
        return None  # a user's rule that refused is its own problem, reported as it said it
    for ref in stage.inputs:
        producer = stages.get(ref)
        op = oplib.REGISTRY.get(producer.op) if producer is not None else None
        if op is None or op.invoke is None:
            continue
        gave = _shape_text(shapes.get(ref))
        here = stage.inputs_origin if stage.inputs else stage.op_origin
        if _default_rule(op):
            return Diagnostic(producer.op_origin or producer.origin, (
                f"op {op.name!r} has no shape rule; the default rule (its first input's shape) gave {gave} for "
                f"stage {ref!r}, and stage {stage.id!r} ({here}) cannot take it: {error}; give the op a shape= "
                f"that says what its function returns"))
        return Diagnostic(here, (
            f"stage {stage.id!r}: {error} (input {ref!r} is {gave}, from the shape rule of op {op.name!r} at "
            f"{op.defined_at or op.source})"))
    return None
