"""Arrays handed in from Python, bound to a manifest's ``input`` stages.

``run(..., inputs={STAGE: array})`` checks every array's shape and dtype
against its stage's declared ones before anything runs
(:func:`bind_inputs`); the array's portable bytes then travel inside the
stage's arguments in the plan (:func:`with_inputs`), so the cache key of
every partition downstream covers them and a cluster worker needs no
shared files; the record keeps each one's shape, dtype and digest
(:func:`describe_inputs`).

Examples
--------
>>> import numpy as np
>>> from hetflow.engine.manifest import compile_manifest, loads
>>> m = compile_manifest(loads('''
... version: 1
... name: double
... executors: {host: {vendor: cpu}}
... stages:
...   x: {op: input, args: {shape: [2], dtype: fp32}}
...   y: {op: add, inputs: [x, x]}
... outputs: {y: y}
... ''', "double.yaml"))
>>> bound = bind_inputs(m, {"x": np.ones(2, dtype=np.float32)})
>>> describe_inputs(bound)["x"]["shape"]
[2]
>>> bind_inputs(m, {"x": np.ones(3, dtype=np.float32)})
Traceback (most recent call last):
...
hetflow.engine.errors.UsageError: inputs['x']: stage 'x' (double.yaml:6:3) takes an array with shape [2] and dtype fp32 (numpy float32); got shape [3] and numpy dtype float32
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from hetflow.engine import planner
from hetflow.engine.errors import UsageError
from hetflow.engine.manifest import Manifest
from hetflow.executors.base import Dtype, PortableActivation

__all__ = ["bind_inputs", "with_inputs", "describe_inputs"]


def bind_inputs(manifest: Manifest, inputs: Mapping[str, Any] | None) -> dict[str, PortableActivation]:
    """Every ``input`` stage's array, checked against the stage's declared shape and dtype."""
    declared = {s.id: s for s in manifest.stages.values() if s.op == "input"}
    given = dict(inputs or {})
    unknown = sorted(k for k in given if k not in declared)
    if unknown:
        raise UsageError(f"inputs: {manifest.file} has no input stage {unknown[0]!r} "
                         f"(input stages: {', '.join(declared) or 'none'})")
    bound = {}
    for name, stage in declared.items():
        dtype, shape = Dtype(stage.args["dtype"]), tuple(stage.args["shape"])
        want = f"shape {list(shape)} and dtype {dtype.value} (numpy {np.dtype(dtype.numpy).name})"
        if name not in given:
            raise UsageError(f"{stage.origin}: stage {name!r} is an input: its array comes from Python, "
                             f"hetflow.run(..., inputs={{{name!r}: array}}) with {want}")
        value = given[name]
        if not isinstance(value, np.ndarray):
            raise UsageError(f"inputs[{name!r}]: expected a numpy array with {want}, got {type(value).__name__}")
        if value.dtype != np.dtype(dtype.numpy) or value.shape != shape:
            raise UsageError(f"inputs[{name!r}]: stage {name!r} ({stage.origin}) takes an array with {want}; "
                             f"got shape {list(value.shape)} and numpy dtype {value.dtype.name}")
        bound[name] = PortableActivation.from_array(value, dtype)
    return bound


def with_inputs(made: planner.Plan, bound: Mapping[str, PortableActivation]) -> planner.Plan:
    if not bound:
        return made
    args = dict(made.stage_args)
    for name, portable in bound.items():
        args[name] = {**args[name], "data": base64.b64encode(bytes(portable.bytes)).decode("ascii")}
    return dataclasses.replace(made, stage_args=args)


def describe_inputs(bound: Mapping[str, PortableActivation]) -> dict[str, dict]:
    from hetflow.engine.records import digest_portable

    return {name: {"shape": list(p.shape.dims), "dtype": p.dtype.value, "bytes": p.nbytes, "digest": digest_portable(p)}
            for name, p in bound.items()}
