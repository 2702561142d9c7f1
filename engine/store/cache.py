"""The content-addressed partition cache.

Every partition gets a **cache key**, a sha256 over the canonical JSON of

* ``definition``: its executor vendor and its nodes (op, args, dtype,
  inputs), with a ``load`` path replaced by the sha256 of the file's
  bytes, so moving a project keeps its cache and editing a data file
  invalidates it;
* ``inputs``: for each tensor it reads, the key of the partition that
  produced it (so a key changes whenever anything upstream changes);
* ``version``: the versions of hetflow and of the libraries its
  partition computes with (:func:`computing_versions`: numpy and
  ml_dtypes; cupy or wgpu on a GPU), and in a source checkout, whose
  version stays while its code changes, the digest of the executors'
  code;
* for every user's op a node runs, ``code``: the op's identity (the
  sha256 of its plugin's file or distribution plus its kernel sources),
  so editing an op re-runs exactly the partitions that use it, and
  :func:`explain` says so ("code changed: op 'lab.scale_shift' (ops.py)").

A partition whose key matches a complete entry is not executed: its
outputs are imported from the stored portable activations. A partition is
*uncacheable* (always runs, never stored) when one of its stages says
``cache: false``, runs a nondeterministic op (a random op with ``seed:
null``), reads a file that does not exist, reads an emulator phase's
array (a witness table, made anew by each run's guest) or reads from an
uncacheable partition; :attr:`PartitionKey.reason` says which, and the
plan's forecast gives the same reason (:func:`uncached_stages`).

An entry is a folder ``ROOT/KEY[:2]/KEY/`` holding ``entry.json`` (key,
definition, and for every output its shape, dtype, byte count and sha256)
and one ``TENSOR.bin`` of portable bytes per output. It is written into a
temporary folder beside it and renamed into place, so an entry either
exists whole or not at all while the machine runs; a read checks every
checksum and treats a mismatch as a miss, so an entry a power cut left
torn (it is written without fsyncs) is computed again and replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from hetflow.engine.plan.plandata import Partition, Plan
from hetflow.engine.store.records import folder_mode
from hetflow.executors import ops as oplib
from hetflow.executors.codeid import file_sha
from hetflow.executors.files import file_digest
from hetflow.executors.base import Dtype, PortableActivation, TensorShape

__all__ = ["CACHE_FORMAT", "PartitionKey", "Cache", "CacheUse", "partition_keys", "hetflow_version", "computing_versions",
           "file_digest", "explain", "abandon_writes"]

CACHE_FORMAT = 1


def hetflow_version() -> str:
    from hetflow._version import __version__

    return __version__


@lru_cache(maxsize=None)
def computing_versions(vendor: str) -> str:
    """hetflow's version and those of the libraries a partition on ``vendor`` computes with, as one string of a
    cache key: numpy and ml_dtypes (its bf16 and fp8 rounding) everywhere, cupy on ``cuda`` and ``rocm``, wgpu
    on ``vulkan``. Where hetflow runs from a source checkout (an editable install: its version says nothing of
    its code), the digest of its executors' code too. Read once per process and vendor."""
    import numpy as np

    parts = [f"hetflow {hetflow_version()}", f"numpy {np.__version__}", f"ml_dtypes {_installed('ml_dtypes')}"]
    if vendor in ("cuda", "rocm"):
        parts.append(f"cupy {_installed('cupy', 'cupy_cuda12x', 'cupy_cuda11x', 'cupy_rocm_6_0')}")
    elif vendor == "vulkan":
        parts.append(f"wgpu {_installed('wgpu')}")
    import hetflow.executors as code

    folder = os.path.dirname(os.path.abspath(code.__file__))
    if not {"site-packages", "dist-packages"} & set(folder.split(os.sep)):
        from hetflow.executors.codeid import combine, python_files

        sources = python_files(folder)
        sources.update((os.path.join(here, name), file_sha(os.path.join(here, name)) or "")
                       for here, _, names in os.walk(folder) for name in names if name.endswith(".wgsl"))
        parts.append(f"source {combine(sources)[:19]}")
    return "; ".join(parts)


def _installed(module: str, *dists: str) -> str | None:
    """The version of the distribution that installed ``module`` (named ``module`` or one of ``dists``), read from
    its ``.dist-info`` folder's name beside it, without importing it: importlib.metadata alone costs 20 ms of a
    process's start here, and ml_dtypes' import half a second (issue 30). None when it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    if spec is not None and not where and spec.origin:
        where = [spec.origin]
    for place in where:
        site = os.path.dirname(os.path.abspath(place))
        try:
            names = os.listdir(site)
        except OSError:
            continue
        for dist in (module, *dists):
            prefix = dist.replace("-", "_").lower() + "-"
            found = [n for n in names if n.endswith(".dist-info") and n.lower().startswith(prefix)]
            if found:
                return found[0][len(prefix):-len(".dist-info")]
    if spec is None:
        return None
    from importlib import metadata  # a module installed otherwise (an egg, a system package)

    for dist in (module, *dists):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def versions_changed(before: str | None, now: str) -> str:
    """The parts of :func:`computing_versions` that differ, in words.

    >>> versions_changed("hetflow 0.1.0; numpy 2.4.6; ml_dtypes 0.6.0", "hetflow 0.1.0; numpy 2.5.0; ml_dtypes 0.6.0")
    'numpy 2.4.6 -> 2.5.0'
    >>> versions_changed("0.1.0", "hetflow 0.1.0; numpy 2.4.6")
    '0.1.0 -> hetflow 0.1.0; numpy 2.4.6'
    """
    def named(text: str | None) -> dict[str, str]:
        return dict(part.split(" ", 1) for part in (text or "").split("; ") if " " in part)

    old, new = named(before), named(now)
    if not old:
        return f"{before} -> {now}"
    return ", ".join(f"{name} {old.get(name, '(none)')} -> {new.get(name, '(none)')}"
                     for name in dict.fromkeys([*new, *old]) if old.get(name) != new.get(name))


# ``json.dumps`` with these options builds a new encoder on every call; a partition's key encodes every
# one of its stages, so the one C encoder is made once (the values are acyclic manifest data)
_ENCODE = (json.encoder.c_make_encoder(None, json.JSONEncoder().default, json.encoder.encode_basestring, None, ":", ",",
                                       True, False, True) if json.encoder.c_make_encoder is not None else None)


def _canonical(value: Any) -> bytes:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` as UTF-8.

    >>> _canonical({"b": [1.5, None], "a": "é"}).decode()
    '{"a":"é","b":[1.5,null]}'
    """
    if _ENCODE is None:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return "".join(_ENCODE(value, 0)).encode()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class PartitionKey:
    partition: str
    nodes: tuple[str, ...]
    key: str | None
    definition: str | None
    inputs: Mapping[str, str | None] = field(default_factory=dict)
    version: str = ""
    reason: str = ""
    node_digests: Mapping[str, str] = field(default_factory=dict)
    code: Mapping[str, str | None] = field(default_factory=dict)
    """The identity of every user's op the partition runs (op name -> digest)."""
    expected: Mapping[str, tuple[tuple[int, ...] | None, str]] = field(default_factory=dict, compare=False)
    """Each output tensor's shape (None where the plan knows only a bound) and dtype, as the plan has them: an
    entry whose own say differs is not this partition's outputs, whatever its checksums."""
    blas: bool = False
    """Whether its results follow the host's BLAS threads: a product on the CPU (whose sums BLAS splits among its
    threads), a user's op (which may call BLAS), or an input from such a partition."""

    @property
    def cacheable(self) -> bool:
        return self.key is not None

    def to_json(self) -> dict:
        return {"key": self.key, "definition": self.definition, "inputs": dict(self.inputs),
                "version": self.version, "nodes": list(self.nodes), "reason": self.reason or None,
                "node_digests": dict(self.node_digests), "code": dict(self.code), "blas": self.blas}


def _definition(plan: Plan, part: Partition, uncacheable: list[str], kinds: dict[str, tuple]) -> tuple[dict, bool, dict]:
    """The partition's ``definition`` (see the module's docstring), whether it is :func:`_plain`, and the
    identity of each user's op it runs; ``kinds`` memoizes, per op, the op and the names of its path and
    seed arguments, or ``()`` for an op whose stages are written as they are."""
    stages, stage_args, stage_inputs = plan.nodes, plan.stage_args, plan.stage_inputs
    # every stage as the plan has it, in one pass; then the few whose ops read files, draw from a seed or
    # are users' are amended
    nodes = [{"id": n, "op": (node := stages[n]).op, "args": stage_args[n], "dtype": node.dtype._value_,
              "inputs": stage_inputs[n]}  # a tuple of inputs encodes as the list it stands for
             for n in part.nodes]
    amend: dict[str, tuple] = {}
    for name in {entry["op"] for entry in nodes}:
        known = kinds.get(name)
        if known is None:
            op = oplib.REGISTRY[name]
            paths = [a for a, spec in op.args.items() if spec.kind == "path"]
            seeds = [a for a, spec in op.args.items() if spec.kind == "seed"]
            known = kinds[name] = (op, paths, seeds) if paths or seeds or op.invoke is not None else ()
        if known:
            amend[name] = known
    code: dict[str, str | None] = {}
    for entry in nodes if amend else ():
        known = amend.get(entry["op"])
        if not known:
            continue
        op, paths, seeds = known
        n, given = entry["id"], entry["args"]
        if paths:
            entry["args"] = args = dict(given)  # only a path is rewritten (to its digest); the rest is read
            for name in paths:
                if isinstance(args.get(name), str):
                    digest = file_digest(args[name])
                    if digest is None:
                        uncacheable.append(f"stage {n!r} reads {args[name]!r}, which cannot be read")
                    args[name] = {"file_sha256": digest}
        # what oplib.is_deterministic says: a seed left null draws a new stream every run
        if seeds and any(given.get(a) is None for a in seeds):
            uncacheable.append(f"stage {n!r} is nondeterministic (seed: null)")
        if op.invoke is not None:
            if op.identity is None:
                uncacheable.append(f"stage {n!r} runs op {entry['op']!r}, whose code has no identity (its source "
                                   "cannot be read, or its module changed on disk since this process imported it)")
            entry["code"] = code[entry["op"]] = op.identity
    plain = all(_plain(entry["args"]) for entry in nodes if entry["args"])
    return ({"vendor": plan.executors[part.executor].vendor.value, "nodes": nodes,
             "inputs": part.inputs, "outputs": part.outputs}, plain, code)


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only strings, integers, booleans, None, and lists, tuples and dicts with
    string keys of them: data orjson writes as :func:`_canonical` does, byte for byte (orjson spells a
    float's exponent its own way, writes a non-finite float as null and writes types the standard library
    refuses).

    >>> _plain({"shape": [8, 8], "key": "w", "cast": False}), _plain({"value": 0.5}), _plain({1: "a"})
    (True, False, False)
    """
    cls = value.__class__
    if cls is str or cls is int or cls is bool or value is None:
        return True
    if cls is dict:
        return all(k.__class__ is str and _plain(v) for k, v in value.items())
    if cls is list or cls is tuple:
        return all(_plain(v) for v in value)
    return False


def _encode(value: Any, plain: bool) -> bytes:
    """:func:`_canonical` of ``value``, written by orjson when ``value`` is :func:`_plain`.

    >>> _encode({"b": [1, None], "a": "é"}, True) == _canonical({"b": [1, None], "a": "é"})
    True
    """
    if plain:
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # an integer beyond 64 bits
            pass
    return _canonical(value)


class _NodeDigests(Mapping):
    """Each stage of a definition by the digest of its canonical JSON, computed when first read:
    ``hetflow plan`` reads them only to name the stage whose definition changed."""

    __slots__ = ("_nodes", "_plain", "_digests")

    def __init__(self, nodes: list[dict], plain: bool) -> None:
        self._nodes, self._plain, self._digests = nodes, plain, None

    def _computed(self) -> dict[str, str]:
        if self._digests is None:
            self._digests = {n["id"]: _sha(_encode(n, self._plain)) for n in self._nodes}
            self._nodes = []
        return self._digests

    def __getitem__(self, node: str) -> str:
        return self._computed()[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())

    def __repr__(self) -> str:
        return repr(self._computed())

    def __reduce__(self):
        return (dict, (self._computed(),))


def uncached_stages(manifest: Any) -> dict[str, str]:
    """The stages no partition holding them may cache, each with why: the run and the plan's forecast both
    take their keys from this."""
    phases = getattr(manifest, "phases", {})
    out: dict[str, str] = {}
    for s in manifest.stages.values():
        if not s.cache:
            out[s.id] = f"stage {s.id!r} has cache: false"
        elif phases:
            read = next((ref for ref in s.inputs if ref in phases), None)
            if read is not None:
                out[s.id] = (f"stage {s.id!r} reads {read!r}, an emulator phase's array, which the guest's run "
                             "makes anew each run")
    return out


#: the built-in ops whose results on the CPU follow the BLAS threads that compute them (a product's sums, split)
_BLAS_OPS = frozenset({"matmul", "attention"})


def partition_keys(plan: Plan, no_cache_stages: Mapping[str, str] | frozenset[str] = frozenset(),
                   version: str | None = None) -> dict[str, PartitionKey]:
    """The cache key of every partition, in execution order; ``no_cache_stages`` (:func:`uncached_stages`,
    or bare ids, which read as ``cache: false``) leave the partitions holding them without one."""
    stages = plan.nodes
    keys: dict[str, PartitionKey] = {}
    kinds: dict[str, tuple] = {}
    said = no_cache_stages if isinstance(no_cache_stages, Mapping) else {}
    for part in _dependency_order(plan.partitions, stages):
        why: list[str] = ([said.get(n) or f"stage {n!r} has cache: false" for n in part.nodes if n in no_cache_stages]
                          if no_cache_stages else [])
        definition, plain, code = _definition(plan, part, why, kinds)
        inputs: dict[str, str | None] = {}
        for tensor in part.inputs:
            upstream = keys[stages[tensor].partition]
            inputs[tensor] = upstream.key
            if upstream.key is None:
                why.append(f"input {tensor!r} comes from uncacheable partition {upstream.partition}")
        def_digest = _sha(_encode(definition, plain))
        versions = version or computing_versions(definition["vendor"])
        key = None if why else _sha(_canonical({"format": CACHE_FORMAT, "definition": def_digest,
                                                 "inputs": inputs, "version": versions}))
        expected = {t: (None if stages[t].bound or stages[t].shape is None else tuple(stages[t].shape),
                        stages[t].dtype.value) for t in part.outputs}
        blas = (definition["vendor"] == "cpu" and (bool(code) or any(n["op"] in _BLAS_OPS for n in definition["nodes"]))
                or any(keys[stages[t].partition].blas for t in part.inputs))
        keys[part.id] = PartitionKey(part.id, part.nodes, key, def_digest, inputs, versions, "; ".join(why),
                                     _NodeDigests(definition["nodes"], plain), code, expected, blas)
    return {p.id: keys[p.id] for p in plan.partitions}


def _dependency_order(partitions: tuple[Partition, ...], stages: Mapping[str, Any]) -> list[Partition]:
    """The partitions, each after those whose outputs it reads (``stages``: the plan's nodes, which name
    their partition)."""
    by_id = {p.id: p for p in partitions}
    done: set[str] = set()
    order: list[Partition] = []
    for root in partitions:
        stack = [(root.id, False)]
        while stack:
            pid, expanded = stack.pop()
            if pid in done:
                continue
            if expanded:
                done.add(pid)
                order.append(by_id[pid])
                continue
            stack.append((pid, True))
            stack.extend((stages[t].partition, False) for t in by_id[pid].inputs if stages[t].partition not in done)
    return order


def _elsewhere(entry: Any) -> str:
    """Why an entry whose ``entry.json`` names another key is not this key's: it was moved or copied here."""
    named = entry.get("key") if isinstance(entry, dict) else None
    return (f"its entry.json names key {str(named)[:26]}, not this folder's: another partition's entry, moved or "
            "copied here" if named else "its entry.json names no key")


class Cache:
    """The entries under one root folder; safe to share between threads and processes."""

    def __init__(self, root: str) -> None:
        # absolute here, where the run began: a cluster's workers, whose working folder is their own, read and
        # write the entries where the record says they are
        self.root = os.path.abspath(root)
        # key -> what was wrong with its entry when this object read it: the entry a store of the key replaces
        self.damaged: dict[str, str] = {}
        # key -> why its entry could not be read by this user (another user's, kept from others): not replaced
        self.unreadable: dict[str, str] = {}
        # key -> the numeric notes (node -> NaN, inf met) of the entry load() last read, for the restore to take
        self.numeric: dict[str, Any] = {}
        # key -> the BLAS threads its entry was computed with, where load() was asked for others
        self.other_threads: dict[str, int | None] = {}

    def _folder(self, key: str) -> str:
        hexkey = key.split(":")[-1]
        return os.path.join(self.root, hexkey[:2], hexkey)

    def has(self, key: str) -> bool:
        return os.path.isfile(os.path.join(self._folder(key), "entry.json"))

    def flaw(self, key: str, expected: Mapping[str, tuple] | None = None) -> str | None:
        """What is wrong with the complete entry of ``key`` that can be seen without reading its outputs: its
        ``entry.json`` not an entry's, or not naming the outputs ``expected`` (:attr:`PartitionKey.expected`), a
        file of it missing or not of the size it names; None when nothing is.

        What ``plan`` asks before it calls a partition cached: reading and
        hashing every output, as :meth:`load` does, would make a plan of a
        large cached run read all of it. Bytes changed in place are found by
        the run, which computes the partition again and replaces the entry.
        """
        folder = self._folder(key)
        try:
            with open(os.path.join(folder, "entry.json"), "rb") as f:
                entry = json.loads(f.read())
            if entry.get("key") != key:
                return _elsewhere(entry)
            if expected is not None:
                wrong = disagrees(entry["outputs"], expected)
                if wrong is not None:
                    return wrong
            for tensor, meta in entry["outputs"].items():
                name = meta["file"]
                try:
                    size = os.stat(os.path.join(folder, name)).st_size
                except FileNotFoundError:
                    return f"its file {name} ({tensor}) is missing"
                if "bytes" in meta and size != meta["bytes"]:
                    return f"its file {name} ({tensor}) holds {size} bytes, not the {meta['bytes']} its entry names"
        except FileNotFoundError:
            return "its entry.json is gone"
        except (IsADirectoryError, NotADirectoryError):
            return "its entry.json is a folder, or its folder a file"
        except OSError as e:
            return f"{_UNREADABLE} ({e.strerror or e})"  # the run cannot read it either, and says so
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return f"its entry.json is not an entry's JSON: {type(e).__name__}: {e}"
        return None

    def load(self, key: str, blas: int | None = None) -> dict[str, PortableActivation] | None:
        """The stored outputs of ``key``, or None when absent or damaged; or, given ``blas``, when computed with
        another number of BLAS threads (noted in :attr:`other_threads`).

        A damaged entry (its ``entry.json`` there but not readable as one,
        a file of it missing, or bytes other than its digest names: a disk
        error, a hand that edited it) is noted in :attr:`damaged`, so the
        outputs computed in its place replace it (:meth:`store`).
        """
        folder = self._folder(key)
        try:
            with open(os.path.join(folder, "entry.json"), encoding="utf-8") as f:
                entry = json.load(f)
        except FileNotFoundError:
            return None
        except UnicodeDecodeError as e:
            self.damaged[key] = f"its entry.json is not an entry's JSON: {e.reason}"
            return None
        except (IsADirectoryError, NotADirectoryError):
            # a folder where entry.json belongs, or a file where the entry's folder does: nothing reads as an entry
            # there, and nothing could be stored in its place until it goes
            self.damaged[key] = "its entry.json is a folder, or its folder a file"
            return None
        except OSError as e:
            self.unreadable[key] = f"{_UNREADABLE} ({e.strerror or e})"  # not this process's to replace
            return None
        except ValueError as e:
            self.damaged[key] = f"its entry.json is not an entry's JSON: {e}"
            return None
        try:
            if entry.get("key") != key:
                self.damaged[key] = _elsewhere(entry)
                return None
            if blas is not None and entry.get("blas_threads") != blas:
                self.other_threads[key] = entry.get("blas_threads")
                return None
            try:
                # read now, before its outputs: a runs gc meanwhile keeps it for the running run that took it, as
                # it keeps an entry written since that run began (its record names its keys only once it ends);
                # one that moved the entry aside first finds it read, and puts it back
                os.utime(os.path.join(folder, "entry.json"))
            except FileNotFoundError:
                return None  # a runs gc is removing it: absent
            except OSError:
                pass  # a cache this user may read and not write
            outputs = {}
            for tensor, meta in entry["outputs"].items():
                with open(os.path.join(folder, meta["file"]), "rb") as f:
                    data = f.read()
                if _sha(data) != meta["sha256"]:
                    self.damaged[key] = (f"its file {meta['file']} ({tensor}) does not hold the bytes its entry names "
                                         f"({_sha(data)[:19]}, not {str(meta['sha256'])[:19]})")
                    return None
                outputs[tensor] = PortableActivation(TensorShape(tuple(meta["shape"])), Dtype(meta["dtype"]), data)
            if isinstance(entry.get("numeric"), dict):  # what the run that computed it met (NaN, inf), by node
                self.numeric[key] = entry["numeric"]
            return outputs
        except FileNotFoundError as e:
            if not os.path.exists(os.path.join(folder, "entry.json")):
                return None  # a runs gc removed it as it was read (its entry.json goes first): absent, not damaged
            self.damaged[key] = f"its file {os.path.basename(e.filename or '?')} is missing"
            return None
        except OSError as e:
            self.unreadable[key] = f"{_UNREADABLE} ({e.strerror or e})"
            return None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self.damaged[key] = f"its entry.json does not describe its outputs: {type(e).__name__}: {e}"
            return None

    def store(self, key: str, definition: Mapping[str, Any], outputs: Mapping[str, PortableActivation],
              numeric: Mapping[str, Any] | None = None, blas_threads: int | None = None) -> bool:
        """Write an entry atomically; False when one already exists, unless :meth:`load` found it damaged or
        computed with other BLAS threads than ``blas_threads``: then it is moved aside and removed as this one
        takes its place."""
        final = self._folder(key)
        replacing = key in self.damaged or (blas_threads is not None and key in self.other_threads)
        if self.has(key) and not replacing:
            return False
        parent = os.path.dirname(final)
        os.makedirs(parent, exist_ok=True)
        import shutil
        import tempfile  # with shutil, for the commands that store: plan and validate only read

        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=parent)
        _WRITING.add(tmp)
        try:
            os.chmod(tmp, folder_mode())  # mkdtemp's 0700 would keep the entry from everyone else sharing the cache
            # No fsync: an entry is checked against its checksums whenever it is read, so one that a power cut
            # left torn (an entry.json whose files never reached the disk) is damaged, computed again and
            # replaced, as a bit flipped on the disk would be. Two fsyncs an entry were most of a cached run's
            # time: 20.2 s against 5.2 s uncached for 8,000 partitions (9.0 s without them; bench/README.md).
            meta = {}
            for i, (tensor, portable) in enumerate(outputs.items()):
                name = f"{i}.bin"
                _write_file(os.path.join(tmp, name), portable.bytes)
                meta[tensor] = {"file": name, "shape": list(portable.shape.dims), "dtype": portable.dtype.value,
                                "bytes": len(portable.bytes), "sha256": _sha(portable.bytes)}
            entry = {"format": CACHE_FORMAT, "key": key, "created": time.time(), "definition": dict(definition),
                     "outputs": meta, **({"numeric": dict(numeric)} if numeric else {}),
                     **({"blas_threads": blas_threads} if blas_threads is not None else {})}
            _write_file(os.path.join(tmp, "entry.json"), json.dumps(entry).encode())
            if replacing:
                _move_aside(final)
            for attempt in (1, 2):
                try:
                    os.rename(tmp, final)
                    self.damaged.pop(key, None)
                    self.other_threads.pop(key, None)
                    return True
                except OSError:
                    if self.has(key):  # another writer renamed a complete entry into place first
                        shutil.rmtree(tmp, ignore_errors=True)
                        return False
                    if attempt == 2 or not _incomplete(final):
                        raise
                    # what a removal stopped half way left (its entry.json goes first): no entry, and in the way of
                    # every later store of this key until it goes
                    _move_aside(final)
            return False
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            _WRITING.discard(tmp)

    def keys(self) -> Iterator[str]:
        if not os.path.isdir(self.root):
            return
        for shard in sorted(os.listdir(self.root)):
            folder = os.path.join(self.root, shard)
            if len(shard) != 2 or not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                if name.startswith("."):
                    continue
                try:
                    complete = stat.S_ISREG(os.stat(os.path.join(folder, name, "entry.json")).st_mode)
                except PermissionError:
                    # a folder this user may not look into (another's, or its permission taken): listed, so that
                    # a removal says why it could not, rather than passing over it
                    complete = True
                except OSError:
                    complete = False
                if complete:
                    yield "sha256:" + name

    #: what :meth:`remove` says of an entry a run read or wrote since the instant it was given: kept
    IN_USE = "read or written by a run meanwhile"

    def remove(self, key: str, unless_used_since: float | None = None) -> str | None:
        """Delete the entry of ``key``; None when it is gone, else why not (see
        :func:`hetflow.engine.store.records.remove_tree`), or :attr:`IN_USE` where a run read or wrote it at
        ``unless_used_since`` (a :meth:`now`) or later: it stays.

        The entry is first renamed out of its key's place, at once, and only
        then asked when it was last read: a run that reads it from then on
        finds no entry (and computes its partition, and stores it), and one
        that read it before has touched its ``entry.json`` first
        (:meth:`load`), so the entry goes back. Its ``entry.json`` goes
        before the rest, so that an entry only partly removed is no entry;
        the next ``gc`` removes the rest (:meth:`clean_temporaries`).
        """
        import secrets

        from hetflow.engine.store.records import remove_tree

        folder = self._folder(key)
        aside = os.path.join(os.path.dirname(folder), f"{_ASIDE[0]}{secrets.token_hex(6)}")
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"{folder}: {e.strerror or e}"
        try:
            used = os.stat(os.path.join(aside, "entry.json")).st_mtime
        except FileNotFoundError:
            used = None  # what a removal stopped half way left: no entry
        except OSError as e:
            return _put_back(aside, folder, f"{os.path.join(folder, 'entry.json')}: {e.strerror or e}")
        if used is not None and unless_used_since is not None and used >= unless_used_since:
            return _put_back(aside, folder, self.IN_USE)
        try:
            os.unlink(os.path.join(aside, "entry.json"))
        except FileNotFoundError:
            pass
        except OSError as e:
            return _put_back(aside, folder, f"{os.path.join(folder, 'entry.json')}: {e.strerror or e}")
        return remove_tree(aside)

    def now(self) -> float:
        """The instant an entry read or written from now on is stamped at or after, in the file system's own
        clock (coarser than :func:`time.time`, and a network file system's is the server's): a temporary file's
        time, where this user may write here; else a moment before :func:`time.time`."""
        import tempfile

        try:
            fd, path = tempfile.mkstemp(prefix=".tmp-now-", dir=self.root)
        except OSError:
            return time.time() - 1.0
        try:
            return os.fstat(fd).st_mtime
        finally:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass

    def written_at(self, key: str) -> float:
        """When the entry of ``key`` was written or last read by a run (epoch seconds; infinity when it cannot be
        told)."""
        return _mtime(os.path.join(self._folder(key), "entry.json"))

    def clean_temporaries(self, older_than_s: float = 3600.0) -> int:
        """Remove folders left by writers that died before renaming, and entries a removal left half way (their
        ``entry.json`` gone, which only a removal does: an entry is renamed into place whole); returns how many.

        A temporary folder changed in the last ``older_than_s`` seconds may
        be a live run's entry being written, and stays. An entry a removal
        moved aside (:meth:`remove`, :func:`_move_aside`) and a process killed
        then left goes once it has been aside a minute (its rename is its
        ``ctime``): only a removal under way puts one back, within moments.
        """
        removed = 0
        if not os.path.isdir(self.root):
            return 0
        import shutil

        now = time.time()
        before = now - older_than_s
        for shard in os.listdir(self.root):
            folder = os.path.join(self.root, shard)
            if not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                if name.startswith(_ASIDE) and _ctime(path) < now - _ASIDE_S:
                    shutil.rmtree(path, ignore_errors=True)
                    removed += 1
                elif name.startswith(".tmp-") and _mtime(path) < before:
                    shutil.rmtree(path, ignore_errors=True)
                    removed += 1
                elif not name.startswith(".") and _incomplete(path):
                    removed += _move_aside(path, unless_complete=True)
        return removed


_UNREADABLE = "its files cannot be read by this user"


def _write_file(path: str, data: bytes | memoryview) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        view, done = memoryview(data).cast("B"), 0
        while done < len(view):  # a disk short of space takes part of a write, then refuses the rest
            done += os.write(fd, view[done:])
    finally:
        os.close(fd)


_WRITING: set[str] = set()
"""The temporary folders of the entries this process is writing now."""


def abandon_writes() -> None:
    """Remove the temporary folders of the entries this process is still writing; for a process about to end at
    once (a cancelled run's partitions are not waited for), whose writers would leave them half written until a
    ``runs gc`` an hour later. A writer that goes on meanwhile finds its folder gone and stops."""
    import shutil

    for tmp in list(_WRITING):
        for _ in range(3):  # a file the writer made while the folder was being emptied leaves it standing
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.lexists(tmp):
                break


def _put_back(aside: str, folder: str, why: str) -> str:
    """Rename an entry :meth:`Cache.remove` moved ``aside`` back to its ``folder``, where a store has not put
    another in its place meanwhile (then only the one aside goes); returns ``why``."""
    try:
        os.rename(aside, folder)
    except OSError:
        import shutil

        shutil.rmtree(aside, ignore_errors=True)
    return why


def _move_aside(folder: str, unless_complete: bool = False) -> bool:
    """Rename a damaged entry's ``folder`` out of its key's way (atomic, so a reader finds the entry whole, damaged
    as it was, or absent), then remove it; gone already (another run replaced it first) is fine. With
    ``unless_complete``, a complete entry (a store renamed one into place since the folder was seen without its
    ``entry.json``) goes back. Returns whether it was removed."""
    import secrets
    import shutil

    aside = os.path.join(os.path.dirname(folder), f"{_ASIDE[1]}{secrets.token_hex(6)}")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:
        return False
    except OSError:
        if unless_complete:  # a clean-up: what it cannot move it leaves
            return False
        raise
    if unless_complete and os.path.exists(os.path.join(aside, "entry.json")):
        _put_back(aside, folder, "")
        return False
    if os.path.isdir(aside) and not os.path.islink(aside):
        shutil.rmtree(aside, ignore_errors=True)
    else:
        try:
            os.unlink(aside)
        except OSError:
            pass
    return True


def _incomplete(folder: str) -> bool:
    """Whether ``folder`` is an entry's folder without its ``entry.json``: what a removal stopped half way left.
    One this user may not look into is not known to be."""
    if not os.path.isdir(folder):
        return False
    try:
        os.lstat(os.path.join(folder, "entry.json"))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


# the names of entries moved out of their key's place to be removed, and how long one may stay there
_ASIDE = (".tmp-removed-", ".tmp-damaged-")
_ASIDE_S = 60.0


def _ctime(path: str) -> float:
    try:
        return os.stat(path).st_ctime
    except OSError:
        return float("inf")


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return float("inf")


class CacheUse:
    """How one run uses the cache: the keys of its partitions, and what it hit and stored."""

    def __init__(self, cache: Cache, keys: Mapping[str, PartitionKey], read: bool = True, write: bool = True) -> None:
        self.cache = cache
        self.keys = dict(keys)
        self.read = read
        self.write = write
        self.hits: list[str] = []
        self.stored: list[str] = []
        # membership per partition in O(1): a 10,000-partition run asks once per partition
        self.hit_set: set[str] = set()
        self.stored_set: set[str] = set()
        # partition -> why its entry could not be written (a full disk, a cache folder not writable)
        self.store_errors: dict[str, str] = {}
        # partition -> what was wrong with its entry, which this run found damaged and computed again
        self.damaged: dict[str, str] = {}
        # partition -> why this user could not read its entry, computed again and left as it was
        self.unreadable: dict[str, str] = {}
        #: the BLAS threads of the run's partitions, once the run knows them: a partition whose results follow them
        #: (PartitionKey.blas) takes an entry computed with as many alone, so that the run's outputs are what it
        #: computes itself, and what verify, pinned to them, computes again
        self.blas: int | None = None
        # partition -> why its entry was not taken: computed with other BLAS threads (computed again, replaced)
        self.other_threads: dict[str, str] = {}
        self._lock = threading.Lock()

    def restorable(self, pid: str) -> bool:
        """Whether partition ``pid`` has a complete entry this run may read (without reading it)."""
        info = self.keys.get(pid)
        return info is not None and info.cacheable and self.read and self.cache.has(info.key)

    def restore(self, pid: str, executor: Any, outputs: tuple[str, ...]) -> list | None:
        """The partition's output handles imported from its complete entry; None when it has none."""
        info = self.keys[pid]
        if not info.cacheable:
            return None
        entry = self.cache.load(info.key, self.blas if info.blas else None)
        if entry is None and info.key in self.cache.other_threads:
            made = self.cache.other_threads[info.key]
            with self._lock:
                self.other_threads[pid] = (f"its entry was computed with {made if made is not None else 'unknown'} "
                                           f"BLAS threads, this run's have {self.blas}")
            return None
        wrong = disagrees({t: {"shape": list(a.shape.dims), "dtype": a.dtype.value} for t, a in entry.items()},
                          info.expected or dict.fromkeys(outputs, (None, None))) if entry is not None else None
        if wrong is not None:
            # its checksums hold, but it is not what this partition makes: computed again, and replaced
            self.cache.damaged[info.key] = wrong
        if entry is None or wrong is not None:
            why = self.cache.damaged.get(info.key)
            if why is not None:
                with self._lock:
                    self.damaged[pid] = why
            elif info.key in self.cache.unreadable:
                with self._lock:
                    self.unreadable[pid] = self.cache.unreadable[info.key]
            return None
        restored: list = []
        try:
            for tensor in outputs:
                restored.append(executor.import_activation(entry[tensor]))
        except BaseException:
            for h in restored:
                executor.release_activation(h)
            raise
        notes = self.cache.numeric.pop(info.key, None)
        if notes:
            from hetflow.executors.cpu import add_numeric

            add_numeric(notes)
        with self._lock:
            self.hits.append(pid)
            self.hit_set.add(pid)
        return restored

    def compute(self, pid: str, executor: Any, subplan: Any, handles: list, outputs: tuple[str, ...]) -> list:
        """The partition's output handles: imported from a complete entry, or executed (and stored)."""
        info = self.keys[pid]
        if info.cacheable and self.read:
            restored = self.restore(pid, executor, outputs)
            if restored is not None:
                return restored
        result = executor.execute(subplan, handles)
        if info.cacheable and self.write and pid not in self.unreadable:  # another user's entry is left as it is
            from hetflow.executors.cpu import peek_numeric

            vendor = getattr(getattr(executor, "vendor", None), "value", None)
            here = computing_versions(vendor) if isinstance(vendor, str) else info.version
            if here != info.version:
                # a cluster's worker with other libraries than the client that made the key: its results are not
                # the ones the key names, and would be served to runs with the client's
                with self._lock:
                    self.store_errors[pid] = (f"computed with other libraries than its key names "
                                              f"({versions_changed(info.version, here)}), so not stored under it")
                return result

            changed = _code_changed(info.code) if info.code else None
            if changed is not None:
                # an op that imports a helper in its body read the helper's bytes of now, not those its key names
                with self._lock:
                    self.store_errors[pid] = (f"its op's code changed on disk while the run ran ({changed}): what it "
                                              "computed may not be what its key names, so not stored under it")
                return result
            try:
                portables = {t: executor.export_activation(h) for t, h in zip(outputs, result, strict=True)}
            except BaseException:
                for h in result:
                    executor.release_activation(h)
                raise
            try:
                stored = self.cache.store(info.key, info.to_json(), portables, peek_numeric(),
                                          self.blas if info.blas else None)
            except OSError as e:
                # the cache saves later runs work; a disk that cannot take an entry costs this run nothing but
                # the entry (its temporary folder is gone already), and the record says which and why
                with self._lock:
                    self.store_errors[pid] = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
                return result
            if stored:
                with self._lock:
                    self.stored.append(pid)
                    self.stored_set.add(pid)
        return result

    def to_json(self) -> dict:
        return {"dir": os.path.abspath(self.cache.root), "read": self.read, "write": self.write,
                "keys": {pid: k.to_json() for pid, k in self.keys.items()},
                "hits": sorted(self.hits, key=lambda p: int(p[1:]) if p[1:].isdigit() else 0),
                "stored": sorted(self.stored, key=lambda p: int(p[1:]) if p[1:].isdigit() else 0)}


def _code_changed(code: Mapping[str, str | None]) -> str | None:
    """The first file of the plugins of the ops ``code`` names (op -> identity) whose bytes are not those the
    plugin was loaded with, now that a partition ran them; None when none changed, or none can be read here (a
    worker of another host)."""
    from hetflow.executors.plugins import plugin_for

    for name in code:
        plugin = plugin_for(name)
        for path, digest in (plugin.files.items() if plugin is not None else ()):
            now = file_sha(path)
            if now is not None and now != digest:
                return path
    return None


def disagrees(stored: Mapping[str, Any], expected: Mapping[str, tuple]) -> str | None:
    """What an entry's outputs (tensor -> its ``shape`` and ``dtype``) say that the plan does not: another set of
    tensors, or a tensor of another shape or dtype; None when they agree. A shape the plan knows only as a bound
    is not compared.

    >>> disagrees({"y": {"shape": [2, 8], "dtype": "fp32"}}, {"y": ((4, 4), "fp32")})
    'its y is [2, 8] fp32, where the plan makes [4, 4] fp32'
    >>> disagrees({"y": {"shape": [4], "dtype": "fp32"}}, {"y": (None, "fp32"), "z": ((1,), "fp32")})
    "it holds the outputs ['y'], not the partition's ['y', 'z']"
    """
    if set(stored) != set(expected):
        return f"it holds the outputs {sorted(stored)}, not the partition's {sorted(expected)}"
    for tensor, (shape, dtype) in expected.items():
        meta = stored[tensor]
        if (dtype is not None and meta.get("dtype") != dtype) or (shape is not None and
                                                                   list(meta.get("shape") or ()) != list(shape)):
            return (f"its {tensor} is {meta.get('shape')} {meta.get('dtype')}, where the plan makes "
                    f"{list(shape) if shape is not None else 'a bounded shape'} {dtype}")
    return None


def _code_label(op: str) -> str:
    """Where op ``op``'s code lives: its plugin's file name, or its distribution and version."""
    from hetflow.executors import plugins  # users' ops only

    found = plugins.plugin_for(op)
    return found.label if found is not None else oplib.REGISTRY[op].source if op in oplib.REGISTRY else "?"


def explain(keys: Mapping[str, PartitionKey], cache: Cache, previous: Mapping[str, Any] | None) -> dict[str, dict]:
    """For every partition: ``cached`` or ``will run``, and why (Snakemake's ``--reason``).

    ``previous`` is the record of the latest earlier run of the same
    manifest (and matrix point); a partition is matched to the one there
    that ran the same stages, and the first part of the key that differs
    is the reason.
    """
    before: dict[frozenset, dict] = {}
    for info in ((previous or {}).get("cache") or {}).get("keys", {}).values():
        if isinstance(info, dict):
            before[frozenset(info.get("nodes", []))] = info
    stale = {pid for pid, k in keys.items() if not (k.cacheable and cache.has(k.key))}
    producer: dict[str, str] = {}  # stage -> its partition, made when an input is the reason
    out: dict[str, dict] = {}
    for pid, k in keys.items():
        if not k.cacheable:
            out[pid] = {"status": "will run", "reason": f"not cacheable: {k.reason}"}
            continue
        if pid not in stale:
            flaw = cache.flaw(k.key, k.expected or None)
            if flaw is None:
                out[pid] = {"status": "cached", "reason": f"entry {k.key[:19]} is complete"}
            elif flaw.startswith(_UNREADABLE):
                out[pid] = {"status": "will run", "reason": f"entry {k.key[:19]}: {flaw}; the run computes the "
                                                            "partition again and leaves the entry as it is"}
            else:
                out[pid] = {"status": "will run", "reason": f"entry {k.key[:19]} is damaged: {flaw}; the run computes "
                                                            f"the partition again and replaces it"}
            continue
        old = before.get(frozenset(k.nodes))
        if previous is None:
            reason = "no cache entry; no earlier run of this manifest"
        elif old is None and not ((previous.get("cache") or {}).get("write") or before):
            reason = "no cache entry; the earlier run did not write to the cache"
        elif old is None:
            reason = "no cache entry; the earlier run had no partition of these stages"
        elif old.get("version") != k.version:
            reason = f"versions changed: {versions_changed(old.get('version'), k.version)}"
        elif any((old.get("code") or {}).get(name) != digest for name, digest in k.code.items()):
            changed = [name for name, digest in k.code.items() if (old.get("code") or {}).get(name) != digest]
            reason = "code changed: " + ", ".join(f"op {name!r} ({_code_label(name)})" for name in changed)
        elif old.get("definition") != k.definition:
            changed = [n for n, d in k.node_digests.items() if (old.get("node_digests") or {}).get(n) != d]
            reason = "definition changed: " + (", ".join(f"stage {n!r}" for n in changed) if changed else "stages differ")
        elif dict(old.get("inputs") or {}) != dict(k.inputs):
            moved = [t for t, key in k.inputs.items() if (old.get("inputs") or {}).get(t) != key]
            producer = producer or {n: p for p, other in keys.items() for n in other.nodes}
            reason = "input changed: " + ", ".join(f"{t!r} (from {producer.get(t, '?')})" for t in moved)
        else:
            reason = "no cache entry (removed, or the earlier run did not finish it)"
        out[pid] = {"status": "will run", "reason": reason}
    return out
