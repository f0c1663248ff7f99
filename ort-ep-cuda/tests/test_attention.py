"""Attention kernels: the optimizer's com.microsoft Attention on the generated transformer,
com.microsoft MultiHeadAttention with masks, and ONNX Attention in float16 through the fused
(cuDNN SDPA) path; all against onnxruntime's CPU provider."""

from __future__ import annotations

import numpy as np
import onnxruntime
from onnx import TensorProto, helper

import ort_core as ort
from conftest import ON_GPU, runtime
from ort_core.testing import models

PROVIDERS = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]


def _reference(model, feeds):
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_fused_transformer_attention_runs_on_cuda():
    model = models.transformer(seq=16, dim=32, heads=2, layers=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    fused = [p for p in placement.nodes if p.op_type in ("Attention", "MultiHeadAttention")]
    assert fused and {p.provider for p in fused} == {"CUDAExecutionProvider"}, str(placement)
    assert placement.counts() == {"CUDAExecutionProvider": len(placement.nodes)}, str(placement)
    for batch in (1, 3):
        feeds = models.random_inputs(model, batch=batch, seed=batch)
        np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-3, atol=1e-5)


def test_multi_head_attention_with_padding_mask_and_bias():
    b, s, kv, heads, hidden = 2, 5, 7, 4, 32
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias", "mask", "attn_bias"], ["y"],
                            domain="com.microsoft", num_heads=heads)
    f = TensorProto.FLOAT
    graph = helper.make_graph([node], "mha", [
        helper.make_tensor_value_info("q", f, [b, s, hidden]), helper.make_tensor_value_info("k", f, [b, kv, hidden]),
        helper.make_tensor_value_info("v", f, [b, kv, hidden]), helper.make_tensor_value_info("bias", f, [3 * hidden]),
        helper.make_tensor_value_info("mask", TensorProto.INT32, [b, kv]),
        helper.make_tensor_value_info("attn_bias", f, [1, heads, s, kv]),
    ], [helper.make_tensor_value_info("y", f, [b, s, hidden])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=10)
    rng = np.random.default_rng(0)
    mask = np.ones((b, kv), np.int32)
    mask[1, 4:] = 0
    feeds = {"q": rng.standard_normal((b, s, hidden), np.float32), "k": rng.standard_normal((b, kv, hidden), np.float32),
             "v": rng.standard_normal((b, kv, hidden), np.float32), "bias": rng.standard_normal(3 * hidden, np.float32),
             "mask": mask, "attn_bias": rng.standard_normal((1, heads, s, kv), np.float32)}
    session = ort.InferenceSession(model, providers=PROVIDERS)
    assert session.get_placement().nodes[0].provider == "CUDAExecutionProvider"
    np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-3, atol=1e-5)


def test_float16_attention_takes_the_fused_path():
    b, heads, s, d = 2, 4, 9, 16
    h16 = TensorProto.FLOAT16
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)
    graph = helper.make_graph([node], "sdpa", [helper.make_tensor_value_info(n, h16, [b, heads, s, d]) for n in "qkv"],
                              [helper.make_tensor_value_info("y", h16, [b, heads, s, d])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=11)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((b, heads, s, d)).astype(np.float16) for n in "qkv"}
    session = ort.InferenceSession(model, providers=PROVIDERS)
    got = session.run(None, feeds)[0]
    # the float32 model on onnxruntime as the reference
    graph32 = helper.make_graph([node], "sdpa32", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, heads, s, d]) for n in "qkv"],
                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, heads, s, d])])
    model32 = helper.make_model(graph32, opset_imports=[helper.make_opsetid("", 23)], ir_version=11)
    expected = _reference(model32, {n: v.astype(np.float32) for n, v in feeds.items()})[0]
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2e-2, atol=2e-3)
    if not ON_GPU:
        assert runtime(session).dev.sdpa_calls == 1
