"""Arrays bound to a manifest's ``input`` stages: handed in from Python, or read from files.

An ``input`` stage takes its array from ``run(..., inputs={STAGE: array})``
or from a file: ``inputs={STAGE: "ids.npz:ids"}`` in Python, ``--input
STAGE=PATH`` on the command line, where ``PATH`` is a ``.npy`` file, or a
``.npz`` or ``.safetensors`` file with ``:KEY`` naming the array (an
archive holding one array needs no key). :func:`bind_inputs` checks every
one against its stage before anything runs: an array's shape and numpy
dtype must be the stage's exactly; a file is read and checked as a
``load`` stage's is (the shape, numbers only, and values that survive
conversion to the stage's dtype). The array's portable bytes then travel
inside the stage's arguments in the plan (:func:`with_inputs`), so the
cache key of every partition downstream covers them, ``plan`` forecasts
the cache as the run will use it, and a cluster worker needs no shared
files. The record keeps each one's shape, dtype and digest, and for a file
its absolute path, key and the sha256 of its bytes
(:func:`describe_inputs`); :func:`recorded_inputs` takes them back for
``verify`` and ``--resume``, which rerun a run with the same files and
refuse one whose arrays came from memory or whose files changed.

Examples
--------
>>> import os, tempfile, numpy as np
>>> from hetflow.engine.manifest.validate import compile_manifest, loads
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

A file's values are converted to the stage's dtype when none is lost:

>>> folder = tempfile.mkdtemp()
>>> np.savez(os.path.join(folder, "x.npz"), x=np.array([1, 2]), big=np.array([1e40, 0.0]))
>>> entry = describe_inputs(bind_inputs(m, {"x": os.path.join(folder, "x.npz:x")}))["x"]
>>> entry["dtype"], entry["key"], entry["file_digest"][:7]
('fp32', 'x', 'sha256:')
>>> bind_inputs(m, parse_input_flags(["x=" + os.path.join(folder, "x.npz:big")]), given_as="--input")
Traceback (most recent call last):
...
hetflow.engine.errors.UsageError: --input x=...x.npz:big: float64 values up to 1e+40 are beyond the range of fp32 (largest 3.40282e+38); stage 'x' (double.yaml:6:3) takes dtype fp32: convert the file's values yourself, or declare a dtype that holds them
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hetflow.engine.plan import planner
from hetflow.engine.errors import UsageError
from hetflow.engine.manifest.validate import Manifest
from hetflow.executors.base import Dtype, PortableActivation

__all__ = ["InputFile", "Bound", "CliInputs", "parse_input_flags", "parse_source", "bind_inputs", "with_inputs",
           "describe_inputs", "recorded_inputs", "unbound_partitions"]

#: the archive types whose file name may end in ``:KEY``, the array's name inside
_ARCHIVES = (".npz", ".safetensors")

#: the --input syntax, as messages and the CLI's help give it
FILE_FORMS = "a .npy file, or a .npz or .safetensors file with :KEY"


@dataclasses.dataclass(frozen=True)
class InputFile:
    """An input's file: its absolute ``path``, and ``key``, the array's name in an archive (or None)."""

    path: str
    key: str | None = None

    def __str__(self) -> str:
        return self.path + (f":{self.key}" if self.key is not None else "")


@dataclasses.dataclass(frozen=True)
class Bound:
    """An input stage's array as it enters the run: its portable bytes, and the file it came from (None: from memory)."""

    portable: PortableActivation
    source: InputFile | None = None


def parse_source(spec: str | os.PathLike) -> InputFile:
    """The file and key ``spec`` names: ``PATH`` or ``PATH:KEY``, relative paths against the working folder.

    A ``:KEY`` is recognised only after a ``.npz`` or ``.safetensors``
    name, so a colon elsewhere in a path is part of it.

    >>> parse_source("/data/ids.npz:train").key, parse_source("/data/a:b.npy").path
    ('train', '/data/a:b.npy')
    """
    text = os.fspath(spec)
    if "\0" in text:
        raise UsageError(f"{text!r} cannot be a file's name: it holds a NUL character")
    head, colon, key = text.rpartition(":")
    if colon and head.lower().endswith(_ARCHIVES) and "/" not in key and os.sep not in key:
        return InputFile(os.path.abspath(head), key or None)
    return InputFile(os.path.abspath(text))


class CliInputs(dict):
    """``{stage: path}`` from ``--input`` flags: messages about them name the flag, ``--input STAGE=PATH``."""


def parse_input_flags(pairs: Sequence[str]) -> CliInputs:
    """``--input STAGE=PATH`` flags as ``{stage: path}``; a malformed or repeated one is a :class:`UsageError`.

    >>> parse_input_flags(["ids=ids.npy", "mask=m.npz:mask"])
    {'ids': 'ids.npy', 'mask': 'm.npz:mask'}
    >>> parse_input_flags(["ids.npy"])
    Traceback (most recent call last):
    ...
    hetflow.engine.errors.UsageError: --input expects STAGE=PATH (a .npy file, or a .npz or .safetensors file with :KEY), got 'ids.npy'
    """
    given = CliInputs()
    for pair in pairs:
        stage, sep, path = pair.partition("=")
        stage = stage.strip()
        if not sep or not stage or not path:
            raise UsageError(f"--input expects STAGE=PATH ({FILE_FORMS}), got {pair!r}")
        if stage in given:
            raise UsageError(f"--input {stage}= is given twice ({given[stage]} and {path}); give each input stage once")
        given[stage] = path
    return given


def _label(given_as: str, name: str, value: Any) -> str:
    """How a message names the value handed in: ``inputs['x']`` from Python, ``--input x=PATH`` from the CLI."""
    if given_as == "--input" and isinstance(value, (str, os.PathLike)):
        return f"--input {name}={os.fspath(value)}"
    return f"{given_as.lstrip('-')}[{name!r}]"


def _remedy(given_as: str, name: str) -> str:
    """How a message asks for the array of input stage ``name`` again: ``--input`` from the CLI, ``inputs=``
    from Python."""
    if given_as == "--input":
        return f"--input {name}=PATH ({FILE_FORMS})"
    return f"{given_as}={{{name!r}: array}} (or the path of a file: {FILE_FORMS})"


def bind_inputs(manifest: Manifest, inputs: Mapping[str, Any] | None, *, given_as: str = "inputs") -> dict[str, Bound]:
    """Every ``input`` stage's array, checked against the stage's declared shape and dtype.

    ``inputs`` maps a stage to a numpy array or to a file (a path, as a
    ``str`` or ``os.PathLike``, :func:`parse_source`'s form). ``given_as``
    is how messages name them: ``"inputs"`` (Python) or ``"--input"``.

    Raises
    ------
    UsageError
        a stage that is not an input stage, an input stage without an
        array, an array or file of another shape or dtype, a file that is
        missing, unreadable, not numbers, or whose values the stage's
        dtype would not keep.
    """
    declared = {s.id: s for s in manifest.stages.values() if s.op == "input"}
    given = dict(inputs or {})
    names = ", ".join(declared) or "none"
    for name in given:
        if name in declared:
            continue
        where = _label(given_as, name, given[name]) if given_as == "--input" else given_as
        stage = manifest.stages.get(name)
        if stage is not None:
            raise UsageError(f"{where}: stage {name!r} ({stage.origin}) runs op {stage.op!r}, not input: "
                             f"only an input stage takes an array (input stages: {names})")
        raise UsageError(f"{where}: {manifest.file} has no input stage {name!r} (input stages: {names})")
    bound = {}
    for name, stage in declared.items():
        dtype, shape = Dtype(stage.args["dtype"]), tuple(stage.args["shape"])
        want = f"shape {list(shape)} and dtype {dtype.value} (numpy {np.dtype(dtype.numpy).name})"
        if name not in given:
            if given_as == "--input":
                raise UsageError(f"{stage.origin}: stage {name!r} is an input: give its array with --input "
                                 f"{name}=PATH ({FILE_FORMS}) holding {want}")
            raise UsageError(f"{stage.origin}: stage {name!r} is an input: its array comes from Python, "
                             f"hetflow.run(..., inputs={{{name!r}: array}}) with {want}")
        value, label = given[name], _label(given_as, name, given[name])
        if isinstance(value, (str, os.PathLike)):
            bound[name] = _from_file(parse_source(value), label, name, stage, dtype, shape)
            continue
        if not isinstance(value, np.ndarray):
            raise UsageError(f"{label}: expected a numpy array with {want}, got {type(value).__name__} "
                             f"(or the path of a file: {FILE_FORMS})")
        if isinstance(value, np.ma.MaskedArray):
            # a stage computes on every value: the masked ones' would be used as if the mask were not there
            raise UsageError(f"{label}: a masked array; a stage takes every value of its input, so give the values "
                             "to use in the masked places (array.filled(value)) or the mask as an input of its own")
        if value.dtype != np.dtype(dtype.numpy) and value.dtype.newbyteorder("=") == np.dtype(dtype.numpy):
            value = value.astype(value.dtype.newbyteorder("="))  # the same values in the other byte order: exact
        if value.dtype != np.dtype(dtype.numpy) or value.shape != shape:
            raise UsageError(f"{label}: stage {name!r} ({stage.origin}) takes an array with {want}; "
                             f"got shape {list(value.shape)} and numpy dtype {value.dtype.name}")
        bound[name] = Bound(PortableActivation.from_array(value, dtype))
    return bound


def _from_file(source: InputFile, label: str, name: str, stage: Any, dtype: Dtype, shape: tuple) -> Bound:
    """The array a file holds for the input stage ``name``, read and checked as a ``load`` stage's file is."""
    from hetflow.executors.builtin.loading import lossy_load, raw_as, read_array
    from hetflow.executors.opdecl import to_dtype

    if not os.path.isfile(source.path):
        from hetflow.executors.files import not_a_file

        raise UsageError(f"{label}: {source.path}: {not_a_file(source.path)}")
    try:
        found_shape, found_dtype = read_array(source.path, source.key, header=True, raw=True)
    except ValueError as e:
        raise UsageError(f"{label}: {_reworded(str(e))}") from None
    if tuple(found_shape) != shape:
        raise UsageError(f"{label}: stage {name!r} ({stage.origin}) takes shape {list(shape)}; the file's array has "
                         f"shape {list(found_shape)} ({np.dtype(found_dtype).name})")
    try:
        array = np.asarray(read_array(source.path, source.key, raw=True))
    except (ValueError, MemoryError) as e:
        raise UsageError(f"{label}: {_reworded(str(e))}") from None
    # a bf16, fp8 or int4 output of a run, as hetflow writes them: the values of the stage's dtype
    array, problem = raw_as(array, dtype)
    if problem:
        raise UsageError(f"{label}: {os.path.basename(source.path)}: {problem}; stage {name!r} ({stage.origin}) "
                         f"takes dtype {dtype.value}")
    problem = lossy_load(array, dtype)
    if problem:
        raise UsageError(f"{label}: {problem}; stage {name!r} ({stage.origin}) takes dtype {dtype.value}: "
                         "convert the file's values yourself, or declare a dtype that holds them")
    return Bound(PortableActivation.from_array(to_dtype(np, array, dtype), dtype), source)


#: ``read_array`` speaks of a ``load`` stage's args; an input's file is named by its path and ``:KEY``
_LOAD_WORDS = (("say which with 'key'", "say which as PATH:KEY"), ("; load reads numbers", "; an input takes numbers"),
               (": load reads .npy, .npz, .safetensors files, not", ": an input is read from a .npy, .npz or "
                                                                  ".safetensors file, not"))


def _reworded(message: str) -> str:
    """A file-reading message of the ``load`` op in an input's terms.

    >>> _reworded("d.npz holds 2 arrays: say which with 'key' (one of: x, y)")
    'd.npz holds 2 arrays: say which as PATH:KEY (one of: x, y)'
    """
    for theirs, ours in _LOAD_WORDS:
        message = message.replace(theirs, ours)
    return message


def with_inputs(made: planner.Plan, bound: Mapping[str, Bound]) -> planner.Plan:
    """``made`` with each bound array's portable bytes in its stage's arguments, where the cache key and the
    executor see them."""
    if not bound:
        return made
    args = dict(made.stage_args)
    for name, b in bound.items():
        args[name] = {**args[name], "data": base64.b64encode(bytes(b.portable.bytes)).decode("ascii")}
    return dataclasses.replace(made, stage_args=args)


def describe_inputs(bound: Mapping[str, Bound]) -> dict[str, dict]:
    """The record's ``inputs``: per stage the array's shape, dtype, bytes and digest; for a file also its
    absolute ``path``, ``key`` and ``file_digest`` (the sha256 of its bytes)."""
    from hetflow.engine.store.cache import file_digest
    from hetflow.engine.store.records import digest_portable

    out = {}
    for name, b in bound.items():
        p = b.portable
        entry = {"shape": list(p.shape.dims), "dtype": p.dtype.value, "bytes": p.nbytes, "digest": digest_portable(p)}
        if b.source is not None:
            entry.update(path=b.source.path, key=b.source.key, file_digest=file_digest(b.source.path))
        out[name] = entry
    return out


def recorded_inputs(record: Mapping[str, Any], manifest: Manifest, given: Mapping[str, Any] | None, *,
                    verb: str, given_as: str = "--input") -> dict[str, Bound]:
    """The arrays to rerun the run of ``record`` with: the files it read, or those ``given`` (``--input``).

    Each file it read must still hold the bytes it had (its sha256); an
    array that came from memory must be given again, and any array given
    must be the one the run had (the digest of its portable bytes). ``verb``
    (``verify``, ``--resume``) names the command in messages, ``given_as``
    (``--input`` or ``inputs``, as for :func:`bind_inputs`) what ``given`` is.

    Raises
    ------
    UsageError
        an input that came from memory and is not given, a file that
        changed or is gone, or a given array other than the run's.
    """
    from hetflow.engine.store.cache import file_digest

    run_id = record.get("run_id")
    entries = record.get("inputs") or {}
    given = dict(given or {})
    stages = [s.id for s in manifest.stages.values() if s.op == "input"]
    unknown = [name for name in given if name not in stages]
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], stages, n=1)
        raise UsageError(f"{verb}: {given_as} names stage {unknown[0]!r}, which is no input stage of run {run_id} "
                         f"(its input stages: {', '.join(stages) or 'none'})"
                         + (f"; did you mean {near[0]!r}?" if near else ""))
    specs: dict[str, Any] = {}
    for stage in (s for s in manifest.stages.values() if s.op == "input"):
        name, entry = stage.id, entries.get(stage.id) or {}
        if name in given:
            specs[name] = given[name]
            continue
        if not entry.get("path"):
            raise UsageError(
                f"{verb}: run {run_id} took the array of input stage {name!r} from memory (hetflow.run(inputs=)); "
                f"its record keeps the array's digest ({str(entry.get('digest'))[:19]}), not the array, so it cannot "
                f"be rerun as it was: give the same array with {_remedy(given_as, name)}")
        now = file_digest(entry["path"])
        if now != entry.get("file_digest"):
            state = "is gone" if now is None else "changed since the run"
            source = entry["path"] + (f":{entry['key']}" if entry.get("key") else "")
            raise UsageError(
                f"{verb}: input stage {name!r} of run {run_id} read {source}, which {state} "
                f"({str(entry.get('file_digest'))[:19]} then, {(now or 'unreadable')[:19]} now); "
                f"{verb} reruns a run with the inputs it had: restore the file, or give one holding the same array "
                f"with {_remedy(given_as, name)}")
        specs[name] = entry["path"] + (f":{entry['key']}" if entry.get("key") else "")
    bound = bind_inputs(manifest, specs, given_as=given_as)
    for name, b in bound.items():
        if name not in given or name not in entries:
            continue
        from hetflow.engine.store.records import digest_portable

        was, now = entries[name].get("digest"), digest_portable(b.portable)
        if now != was:
            raise UsageError(f"{verb}: {_label(given_as, name, given[name])} holds other values than run {run_id} had for "
                             f"input stage {name!r} ({str(was)[:19]} then, {now[:19]} now)")
    return bound


def unbound_partitions(made: planner.Plan) -> dict[str, str]:
    """The partitions whose values depend on an ``input`` stage that has no array yet, each with the first
    such stage: what ``plan`` without the inputs cannot forecast the cache of."""
    missing = [n for n, node in made.nodes.items() if node.op == "input" and "data" not in made.stage_args[n]]
    if not missing:
        return {}
    by_id = {p.id: p for p in made.partitions}
    readers: dict[str, list[str]] = {}
    for p in made.partitions:
        for tensor in p.inputs:
            readers.setdefault(made.nodes[tensor].partition, []).append(p.id)
    found: dict[str, str] = {}
    queue = collections.deque((made.nodes[n].partition, n) for n in missing)
    while queue:
        pid, stage = queue.popleft()
        if pid in found:
            continue
        found[pid] = stage
        queue.extend((r, stage) for r in readers.get(pid, ()) if r not in found)
    return {p: found[p] for p in by_id if p in found}
