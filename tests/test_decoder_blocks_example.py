"""``examples/decoder/decoder.yaml`` (one block repeated, ``defaults:``, weights from a safetensors file its script
makes) against a numpy reference written here, apart from hetflow."""

import importlib.util
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.executors import probe
from hetflow.executors.base import Vendor
from hetflow.executors.ops import REGISTRY

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "decoder"
HEADS = 4


def make_weights():
    spec = importlib.util.spec_from_file_location("make_weights", EXAMPLE / "make_weights.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rmsnorm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def attention(q, k, v, heads):
    b, s, width = q.shape
    dim = width // heads
    qh, kh, vh = (t.reshape(b, s, heads, dim).transpose(0, 2, 1, 3) for t in (q, k, v))
    scores = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(dim)
    scores = np.where(np.tri(s, dtype=bool), scores, -np.inf)  # a query sees the keys at and before it
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ vh).transpose(0, 2, 1, 3).reshape(b, s, width)


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def reference(w, layers):
    """The decoder's logits in float64, from the arrays of the weights file."""
    eps = REGISTRY["rmsnorm"].args["eps"].default
    embed = w["embed"].astype(np.float64)
    x = embed[w["tokens"]]
    for i in range(layers):
        wq, wk, wv, wo, wu, wd = (w[f"layers.{i}.{n}"].astype(np.float64) for n in ("wq", "wk", "wv", "wo", "wu", "wd"))
        n = rmsnorm(x, eps)
        r = x + attention(n @ wq, n @ wk, n @ wv, HEADS) @ wo
        x = r + gelu(rmsnorm(r, eps) @ wu) @ wd
    return rmsnorm(x, eps) @ embed.T


@pytest.mark.parametrize("layers", [4, 6])
def test_the_decoder_example_matches_its_numpy_reference(tmp_path, layers):
    shutil.copy(EXAMPLE / "decoder.yaml", tmp_path / "decoder.yaml")
    made = make_weights().main(["--layers", str(layers), "-o", str(tmp_path / "weights.safetensors")])
    from safetensors.numpy import load_file

    w = load_file(made)
    result = hetflow.run(tmp_path / "decoder.yaml", {"layers": layers}, runs_dir=tmp_path / "runs")
    assert result.status == "succeeded", result.failures
    logits = reference(w, layers)
    out = result.outputs
    assert np.array_equal(out["ids"], w["tokens"]) and out["logits"].shape == logits.shape
    np.testing.assert_allclose(out["logits"], logits, rtol=1e-3, atol=1e-3)
    top2 = np.sort(logits, axis=-1)[..., -2:]
    clear = top2[..., 1] - top2[..., 0] > 1e-2  # positions whose argmax float32 rounding cannot flip
    assert np.array_equal(out["next_ids"][clear], np.argmax(logits, axis=-1)[clear])
    nodes = result.record["plan"]["nodes"]
    assert {f"layers.{i}.att" for i in range(layers)} <= set(nodes) and f"layers.{layers}.att" not in nodes
    assert nodes[f"layers.{layers - 1}.att"]["executor"] == "gpu" and nodes["logits"]["executor"] == "host"
    assert result.record["plan"]["executors"]["gpu"]["vendor"] == ("vulkan" if probe(Vendor.vulkan).available else "cpu")


def test_the_shipped_weights_are_what_the_script_makes(tmp_path):
    made = make_weights().main(["-o", str(tmp_path / "weights.safetensors")])
    assert Path(made).read_bytes() == (EXAMPLE / "weights.safetensors").read_bytes()


def test_the_example_is_short():
    lines = (EXAMPLE / "decoder.yaml").read_text().splitlines()
    assert len(lines) <= 60 and sum("use: layer" in line for line in lines) == 1
