"""The decoder pipeline (``pipelines/decoder.yaml``) against a numpy reference written here, apart from hetflow.

int64 token ids and ``gather`` on the host, a bool causal mask made from integer ranges crossing to the
accelerator, grouped-query attention (4 query heads, 2 key/value heads, heads packed in the last axis),
RMSNorm and an exact-GELU MLP on the first available of Vulkan or the CPU, and the logits and their
int64 argmax back on the host.
"""

import math
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.executors import probe
from hetflow.executors.base import Vendor
from hetflow.executors.ops import REGISTRY

REPO = Path(__file__).resolve().parent.parent
DECODER = REPO / "pipelines" / "decoder.yaml"
P = {"batch": 2, "seq": 16, "vocab": 256, "model": 64, "q_heads": 4, "kv_heads": 2, "kv_width": 32, "hidden": 128,
     "seed": 11}


def normal(shape, seed, std):
    """``random.normal``'s definition: numpy's default_rng(seed) standard normal draws in float32, scaled."""
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * np.float32(std)


def rmsnorm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def attention(q, k, v, mask, q_heads, kv_heads):
    b, s, width = q.shape
    dim = width // q_heads
    qh = q.reshape(b, s, q_heads, dim).transpose(0, 2, 1, 3)
    kh = np.repeat(k.reshape(b, s, kv_heads, dim).transpose(0, 2, 1, 3), q_heads // kv_heads, axis=1)
    vh = np.repeat(v.reshape(b, s, kv_heads, dim).transpose(0, 2, 1, 3), q_heads // kv_heads, axis=1)
    scores = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(dim)
    scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ vh).transpose(0, 2, 1, 3).reshape(b, s, width)


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def reference():
    """(ids, logits) of the decoder, computed in float64 from the same draws."""
    eps = REGISTRY["rmsnorm"].args["eps"].default
    draw = np.random.default_rng(P["seed"]).random((P["batch"], P["seq"]), dtype=np.float32) * np.float32(P["vocab"])
    ids = np.trunc(draw).astype(np.int64)
    embed = normal((P["vocab"], P["model"]), 1, 0.5).astype(np.float64)
    x = embed[ids]
    pos = np.arange(P["seq"])
    mask = pos[None, :] <= pos[:, None]
    for layer in (1, 2):
        s = 10 * layer
        wq, wk, wv, wo = (normal(shape, s + i, 0.125).astype(np.float64) for i, shape in
                          enumerate([(P["model"], P["model"]), (P["model"], P["kv_width"]),
                                     (P["model"], P["kv_width"]), (P["model"], P["model"])], start=1))
        wu = normal((P["model"], P["hidden"]), s + 5, 0.125).astype(np.float64)
        wd = normal((P["hidden"], P["model"]), s + 6, 0.09).astype(np.float64)
        n = rmsnorm(x, eps)
        r = x + attention(n @ wq, n @ wk, n @ wv, mask, P["q_heads"], P["kv_heads"]) @ wo
        x = r + gelu(rmsnorm(r, eps) @ wu) @ wd
    return ids, rmsnorm(x, eps) @ embed.T


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    return hetflow.run(DECODER, runs_dir=tmp_path_factory.mktemp("runs"))


def test_the_decoder_matches_its_numpy_reference(decoded):
    assert decoded.status == "succeeded", decoded.failures
    ids, logits = reference()
    out = decoded.outputs
    assert out["ids"].dtype == np.int64 and np.array_equal(out["ids"], ids)
    assert out["logits"].dtype == np.float32 and out["logits"].shape == (P["batch"], P["seq"], P["vocab"])
    np.testing.assert_allclose(out["logits"], logits, rtol=1e-3, atol=1e-3)
    assert out["next_ids"].dtype == np.int64 and out["next_ids"].shape == (P["batch"], P["seq"])
    top2 = np.sort(logits, axis=-1)[..., -2:]
    clear = top2[..., 1] - top2[..., 0] > 1e-2  # positions whose argmax float32 rounding cannot flip
    assert clear.mean() > 0.9
    assert np.array_equal(out["next_ids"][clear], np.argmax(logits, axis=-1)[clear])


def test_the_layers_run_on_vulkan_where_there_is_one_and_the_mask_crosses_as_bool(decoded):
    plan = decoded.record["plan"]
    nodes = plan["nodes"]
    assert (nodes["ids"]["dtype"], nodes["mask"]["dtype"], nodes["tokens"]["dtype"]) == ("int64", "bool", "int64")
    assert [b["destination"] for b in plan["bridges"] if b["tensor"] == "mask"] == ["gpu"]
    assert [b for b in plan["bridges"] if b["tensor"] == "ids"] == []  # int64 ids stay on the host, where gather reads them
    assert nodes["att1"]["executor"] == nodes["att2"]["executor"] == "gpu"
    vulkan = probe(Vendor.vulkan).available
    assert plan["executors"]["gpu"]["vendor"] == ("vulkan" if vulkan else "cpu")
