"""Cache keys and the manifest digest stay the same bytes whichever encoder writes them.

A changed key silently drops every entry users have cached, so the keys
of two manifests are pinned here (with ``version="0.0.0"``): one whose
stages orjson writes, one with floats, a 64-bit integer, a data file, a
seed left null. The encoders themselves are checked against the standard
library's canonical form on generated data.
"""

from __future__ import annotations

import hashlib
import json
import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.engine.store import cache
from hetflow.engine.store.cache import Cache, explain, partition_keys
from hetflow.engine.manifest.validate import compile_manifest, loads
from hetflow.engine.plan.planner import plan
from hetflow.engine.manifest.resolve import canonical_json
from hetflow.executors import probe


def stdlib(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


scalars = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70) | st.text()
           | st.floats() | st.sampled_from([1e-05, 1e16, 1e22, -0.0, 5e-324, 0.1, 1e15, 123456789012345678.0]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(values)
def test_a_definition_encodes_as_the_canonical_json(value):
    assert cache._encode(value, cache._plain(value)) == stdlib(value).encode()


@settings(max_examples=400, deadline=None)
@given(values | st.dictionaries(st.text(max_size=4), values, max_size=4))
def test_the_manifest_digest_text_is_the_canonical_json(value):
    assert canonical_json(value) == stdlib(value)


def test_what_orjson_would_write_otherwise_goes_to_the_standard_library():
    assert canonical_json({"a": "x:1.5", "b": [1, 2]}) == '{"a":"x:1.5","b":[1,2]}'
    assert canonical_json({"eps": 1e-05, "big": 2**70, "n": float("nan")}) == \
        '{"big":1180591620717411303424,"eps":1e-05,"n":NaN}'
    assert canonical_json(1e16) == "1e+16" and canonical_json([float("inf")]) == "[Infinity]"
    assert not cache._plain({"value": 0.5}) and not cache._plain({1: "a"}) and cache._plain({"s": ("a", [1])})
    assert cache._encode({"v": 2**64}, True) == b'{"v":18446744073709551616}'


PINNED = """\
version: 1
name: pinned
description: "a café's keys"
params: {eps: 1.0e-5}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [4, 4], seed: 7, std: 0.1}, executor: a}
  n: {op: layernorm, inputs: [x], args: {eps: "${eps}"}, executor: a}
  w: {op: load, args: {path: W.npy}, executor: b}
  m: {op: matmul, inputs: [n, w], executor: b}
  r: {op: relu, inputs: [m], executor: b}
  big: {op: full, args: {shape: [2], value: 1.0e+20}, executor: a}
  ints: {op: full, args: {shape: [2], value: 9223372036854775807}, executor: b}
  more: {op: add, inputs: [ints], args: {value: 3}, executor: b}
  drawn: {op: random.uniform, args: {shape: [2], seed: null}, executor: a}
outputs: {r: r, big: big, more: more, drawn: drawn}
"""

# the bytes np.save writes for np.arange(16, dtype=np.float32).reshape(4, 4), spelled out so that the key
# pinned below does not depend on numpy's header
NPY = (b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }" + b" " * 58 + b"\n"
       + np.arange(16, dtype="<f4").tobytes())


def keys_of(text: str, tmp_path) -> dict:
    m = compile_manifest(loads(text, str(tmp_path / "m.yaml")))
    return partition_keys(plan(m, probe), frozenset(s.id for s in m.stages.values() if not s.cache), version="0.0.0")


def test_keys_are_pinned(tmp_path):
    (tmp_path / "w.npy").write_bytes(NPY)
    keys = {frozenset(k.nodes): k for k in keys_of(PINNED.replace("W.npy", str(tmp_path / "w.npy")), tmp_path).values()}
    assert {tuple(sorted(n)): (k.key or "")[7:19] for n, k in keys.items()} == {
        # layernorm's definition holds its new axis argument (issue 28), and (m, r, w) reads its output
        ("n", "x"): "232b8b986f42", ("m", "r", "w"): "44885b526786", ("big",): "af74f429d372",
        ("ints", "more"): "ae59cbf2b8d3", ("drawn",): ""}
    assert keys[frozenset({"drawn"})].definition == \
        "sha256:ab3720ee9ad75c651a55119c9090e7d564fc9bd5cf381e06883be546d9c557c0"
    assert dict(keys[frozenset({"ints", "more"})].node_digests) == {
        "ints": "sha256:5b974300a24d12d52dbbf1d29640dc0ef26c6cc2f5d912538e0b820f069106b4",
        "more": "sha256:aad8bfb32ed1a45ac6180c3da0f860a2fc4d95421f8afea8ee7ec183d34962d1"}


def blocks(n: int, partitions: int) -> str:
    """bench_overhead's 100,000-stage manifest, smaller: a chain of relu cut into blocks on two executors."""
    block = n // partitions
    lines = ["version: 1", f"name: scale-{n}", "executors:", "  e0: {vendor: cpu}", "  e1: {vendor: cpu}", "stages:",
             "  s0: {op: ones, args: {shape: [8, 8]}, executor: e0}"]
    lines += [f"  s{i}: {{op: relu, inputs: [s{i - 1}]{f', executor: e{(i // block) % 2}' if i % block == 0 else ''}}}"
              for i in range(1, n)]
    return "\n".join(lines + [f"outputs: {{y: s{n - 1}}}"]) + "\n"


def test_keys_of_a_chain_in_blocks_are_pinned(tmp_path):
    keys = keys_of(blocks(400, 4), tmp_path)
    assert hashlib.sha256(json.dumps({p: k.key for p, k in keys.items()}, sort_keys=True).encode()).hexdigest() == \
        "2b799346c3de3445f2310194b3b3f425d6eae60fea6521bd735ef628ba1b728c"
    m = compile_manifest(loads(blocks(400, 4), str(tmp_path / "b.yaml")))
    assert m.digest == "sha256:fc6a1ba5195c8966c59afc0562af062d199a798ef9cf04d9cc2abb3f8d60cb1c"


def test_stage_digests_are_made_when_read_and_travel_as_a_dict(tmp_path):
    keys = keys_of(blocks(40, 2), tmp_path)
    k = keys["p1"]
    assert k.node_digests._digests is None
    loaded = pickle.loads(pickle.dumps(k))
    assert type(loaded.node_digests) is dict and loaded == k and len(k.node_digests) == 20
    assert k.to_json()["node_digests"]["s25"] == cache._sha(cache._canonical(
        {"id": "s25", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["s24"]}))


def test_a_changed_stage_is_named_by_its_digest(tmp_path):
    before = {"cache": {"keys": {pid: k.to_json() for pid, k in keys_of(blocks(40, 2), tmp_path).items()}}}
    changed = keys_of(blocks(40, 2).replace("s25: {op: relu", "s25: {op: sigmoid"), tmp_path)
    reasons = explain(changed, Cache(str(tmp_path / "cache")), before)
    assert reasons == {"p0": {"status": "will run", "reason": "no cache entry (removed, or the earlier run did not finish it)"},
                       "p1": {"status": "will run", "reason": "definition changed: stage 's25'"}}


def test_after_a_run_without_the_cache_the_reason_says_so(tmp_path):
    keys = keys_of(blocks(40, 2), tmp_path)
    store = Cache(str(tmp_path / "cache"))
    without = {"cache": {"read": False, "write": False, "keys": {}}}
    assert {r["reason"] for r in explain(keys, store, without).values()} == {
        "no cache entry; the earlier run did not write to the cache"}
    other = {"cache": {"read": True, "write": True, "keys": {"p0": {"nodes": ["elsewhere"]}}}}
    assert {r["reason"] for r in explain(keys, store, other).values()} == {
        "no cache entry; the earlier run had no partition of these stages"}
