"""A GPT-2-style decoder written node by node with ``onnx.helper``, as exporters write one.

:func:`gpt2` builds it: token and position embeddings (Gather), pre-norm
layers of attention written out (MatMul, Split, Reshape, Transpose, a
scaled MatMul, a causal mask through Where, Softmax) and an MLP with GELU,
residual Adds, a final LayerNormalization and logits tied to the token
embedding (a MatMul with its Transpose). Node names follow PyTorch's
exporter (``/h.0/attn/MatMul``) so that the importer's id rule is
exercised. The layers differ on purpose, so one model covers both forms
exporters emit: even layers use LayerNormalization and GELU's Erf form,
odd ones LayerNormalization decomposed (ReduceMean, Sub, Pow, Sqrt, Div)
and GELU's tanh form (Pow 3, Tanh).

``layer_only=True`` gives one layer on hidden states (input ``x`` of
shape ``[batch, seq, d_model]``), the shape the benchmark times.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["gpt2"]


def gpt2(layers: int = 2, d_model: int = 64, heads: int = 4, seq: int = 16, batch: int = 1, vocab: int = 256,
         seed: int = 0, layer_only: bool = False, opset: int = 18):
    """The model (``onnx.ModelProto``) with random weights; ``seed`` fixes them."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    dh = d_model // heads

    def weight(name: str, shape, scale: float = 0.02, offset: float = 0.0) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale + offset).astype(np.float32), name))
        return name

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, name: str, inputs, n_out: int = 1, **attrs):
        outs = [f"{name}_output_{k}" for k in range(n_out)]
        nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def layernorm(x: str, prefix: str, decomposed: bool) -> str:
        g, b = weight(f"{prefix}.weight", [d_model], 0.1, 1.0), weight(f"{prefix}.bias", [d_model], 0.1)
        if not decomposed:
            return node("LayerNormalization", f"/{prefix}/LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)
        axes = const(f"{prefix}.axes", np.array([-1], np.int64))
        mean = node("ReduceMean", f"/{prefix}/ReduceMean", [x, axes])
        centered = node("Sub", f"/{prefix}/Sub", [x, mean])
        square = node("Pow", f"/{prefix}/Pow", [centered, const(f"{prefix}.two", np.float32(2.0))])
        var = node("ReduceMean", f"/{prefix}/ReduceMean_1", [square, axes])
        std = node("Sqrt", f"/{prefix}/Sqrt", [node("Add", f"/{prefix}/Add", [var, const(f"{prefix}.eps",
                                                                                         np.float32(1e-5))])])
        normed = node("Div", f"/{prefix}/Div", [centered, std])
        return node("Add", f"/{prefix}/Add_1", [node("Mul", f"/{prefix}/Mul", [normed, g]), b])

    def gelu(x: str, prefix: str, tanh_form: bool) -> str:
        if tanh_form:
            cube = node("Pow", f"/{prefix}/Pow", [x, const(f"{prefix}.three", np.float32(3.0))])
            inner = node("Add", f"/{prefix}/Add", [x, node("Mul", f"/{prefix}/Mul", [cube, const(
                f"{prefix}.c", np.float32(0.044715))])])
            t = node("Tanh", f"/{prefix}/Tanh", [node("Mul", f"/{prefix}/Mul_1", [inner, const(
                f"{prefix}.k", np.float32(math.sqrt(2.0 / math.pi)))])])
            one_plus = node("Add", f"/{prefix}/Add_1", [t, const(f"{prefix}.one", np.float32(1.0))])
        else:
            e = node("Erf", f"/{prefix}/Erf", [node("Div", f"/{prefix}/Div", [x, const(
                f"{prefix}.sqrt2", np.float32(math.sqrt(2.0)))])])
            one_plus = node("Add", f"/{prefix}/Add", [e, const(f"{prefix}.one", np.float32(1.0))])
        half = node("Mul", f"/{prefix}/Mul_2", [x, const(f"{prefix}.half", np.float32(0.5))])
        return node("Mul", f"/{prefix}/Mul_3", [half, one_plus])

    def linear(x: str, prefix: str, n_in: int, n_out: int) -> str:
        w, b = weight(f"{prefix}.weight", [n_in, n_out]), weight(f"{prefix}.bias", [n_out])
        return node("Add", f"/{prefix}/Add", [node("MatMul", f"/{prefix}/MatMul", [x, w]), b])

    def layer(x: str, i: int) -> str:
        odd = i % 2 == 1
        p = f"h.{i}"
        h = layernorm(x, f"{p}/ln_1", odd)
        qkv = linear(h, f"{p}/attn/c_attn", d_model, 3 * d_model)
        q, k, v = node("Split", f"/{p}/attn/Split", [qkv, const(f"{p}.split", np.array([d_model] * 3, np.int64))],
                       n_out=3, axis=-1)
        shape = const(f"{p}.heads_shape", np.array([batch, seq, heads, dh], np.int64))
        q = node("Transpose", f"/{p}/attn/Transpose", [node("Reshape", f"/{p}/attn/Reshape", [q, shape])],
                 perm=[0, 2, 1, 3])
        k = node("Transpose", f"/{p}/attn/Transpose_1", [node("Reshape", f"/{p}/attn/Reshape_1", [k, shape])],
                 perm=[0, 2, 3, 1])
        v = node("Transpose", f"/{p}/attn/Transpose_2", [node("Reshape", f"/{p}/attn/Reshape_2", [v, shape])],
                 perm=[0, 2, 1, 3])
        scores = node("Div", f"/{p}/attn/Div", [node("MatMul", f"/{p}/attn/MatMul", [q, k]),
                                                const(f"{p}.scale", np.float32(math.sqrt(dh)))])
        causal = np.tril(np.ones((seq, seq), bool)).reshape(1, 1, seq, seq)
        masked = node("Where", f"/{p}/attn/Where", [const(f"{p}.causal", causal), scores,
                                                    const(f"{p}.masked_bias", np.float32(-10000.0))])
        probs = node("Softmax", f"/{p}/attn/Softmax", [masked], axis=-1)
        ctx = node("Transpose", f"/{p}/attn/Transpose_3", [node("MatMul", f"/{p}/attn/MatMul_1", [probs, v])],
                   perm=[0, 2, 1, 3])
        ctx = node("Reshape", f"/{p}/attn/Reshape_3", [ctx, const(f"{p}.model_shape",
                                                                   np.array([batch, seq, d_model], np.int64))])
        x = node("Add", f"/{p}/Add", [x, linear(ctx, f"{p}/attn/c_proj", d_model, d_model)])
        h = layernorm(x, f"{p}/ln_2", odd)
        h = gelu(linear(h, f"{p}/mlp/c_fc", d_model, 4 * d_model), f"{p}/mlp/act", odd)
        return node("Add", f"/{p}/Add_1", [x, linear(h, f"{p}/mlp/c_proj", 4 * d_model, d_model)])

    if layer_only:
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d_model])]
        x = layer("x", 0)
        outputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, seq, d_model])]
    else:
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])]
        wte = weight("wte.weight", [vocab, d_model])
        tokens = node("Gather", "/wte/Gather", [wte, "input_ids"], axis=0)
        positions = node("Gather", "/wpe/Gather", [weight("wpe.weight", [seq, d_model], 0.01),
                                                   const("position_ids", np.arange(seq, dtype=np.int64))], axis=0)
        x = node("Add", "/Add", [tokens, positions])
        for i in range(layers):
            x = layer(x, i)
        x = layernorm(x, "ln_f", False)
        node("MatMul", "/lm_head/MatMul", [x, node("Transpose", "/lm_head/Transpose", [wte], perm=[1, 0])])
        nodes[-1].output[0] = "logits"      # the graph output's name, as exporters give it
        outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, vocab])]
    graph = helper.make_graph(nodes, "gpt2", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="hetflow-tests")
    model.ir_version = 9
    return model
