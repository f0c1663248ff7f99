"""onnxruntime's com.microsoft transformer fusions against onnxruntime's own kernels, one node
at a time over the input forms its optimizer and LLM exporters emit. Tolerance: relative 1e-5 of
the output's range (float32 reductions and tanh/exp in another order)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import helper, numpy_helper

import ort_core as ort

MS = "com.microsoft"
F = np.float32


def _model(op, inputs, consts, feeds, outs, **attrs):
    node = helper.make_node(op, inputs, [n for n, _ in outs], domain=MS, **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    out_infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(t)), None) for n, t in outs if n]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()]
    graph = helper.make_graph([node], op, ins, out_infos, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]).SerializeToString()


def _check(model, feeds, rel=1e-5):
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=0, atol=rel * max(float(np.abs(w).max()), 1e-30))


@pytest.mark.parametrize("bias", [False, True])
def test_fast_gelu(bias):
    rng = np.random.default_rng(0)
    x = (3 * rng.standard_normal((2, 7, 32))).astype(F)
    consts = {"b": rng.standard_normal(32).astype(F)} if bias else {}
    _check(_model("FastGelu", ["x", "b"] if bias else ["x"], consts, {"x": x}, [("y", F)]), {"x": x})


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("alpha", [1.702, 1.0])
def test_quick_gelu(alpha, compiled, monkeypatch):
    """x * logistic(alpha x) with MLAS's rational logistic, compiled or by numpy: onnxruntime's
    float32 output bit for bit, NaN, infinities, signed zeros and saturated values included."""
    calls = use_compiled(monkeypatch, compiled, "quick_gelu")
    x = (3 * np.random.default_rng(1).standard_normal((4, 33))).astype(F)
    x[0, :9] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 30, -30, 100, -100]
    model = _model("QuickGelu", ["x"], {}, {"x": x}, [("y", F)], alpha=alpha)
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert bool(calls) or not compiled


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("outputs", [1, 4, "mean", "all"])
def test_skip_simplified_layer_normalization(bias, outputs, compiled, monkeypatch):
    """By the compiled LayerNorm rows without their mean (``rms``), or numpy's passes. The
    second output, a mean RMS normalisation has not, is onnxruntime's zeros (it was refused)."""
    calls = use_compiled(monkeypatch, compiled, "layer_norm_rows")
    rng = np.random.default_rng(2)
    x, skip = rng.standard_normal((2, 5, 64)).astype(F), rng.standard_normal((2, 5, 64)).astype(F)
    consts = {"g": rng.uniform(0.5, 1.5, 64).astype(F)}
    inputs = ["x", "s", "g"]
    if bias:
        consts["b"] = rng.standard_normal(64).astype(F)
        inputs.append("b")
    outs = {1: [("y", F)], 4: [("y", F), ("", F), ("", F), ("sum", F)], "mean": [("y", F), ("mean", F)],
            "all": [("y", F), ("mean", F), ("inv", F), ("sum", F)]}[outputs]
    _check(_model("SkipSimplifiedLayerNormalization", inputs, consts, {"x": x, "s": skip}, outs, epsilon=1e-6),
           {"x": x, "s": skip})
    assert bool(calls) == (compiled and outputs != "all")


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("axis, outputs", [(-1, ["y"]), (-1, ["y", ""]), (-1, ["y", "inv"]), (1, ["y"])])
def test_simplified_layer_normalization(axis, outputs, compiled, monkeypatch):
    """onnxruntime's RMS norm in the ONNX domain (T5, LLM exports): over the last axis with no
    1 / RMS output by the compiled rows (``rms``), else numpy's passes; onnxruntime's values."""
    calls = use_compiled(monkeypatch, compiled, "layer_norm_rows")
    rng = np.random.default_rng(4)
    x = (3 * rng.standard_normal((2, 6, 48))).astype(F)
    scale = numpy_helper.from_array(rng.uniform(0.5, 1.5, (6, 48) if axis == 1 else 48).astype(F), "g")
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], outputs, axis=axis, epsilon=1e-6)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                              [helper.make_tensor_value_info(n, 1, None) for n in outputs if n], [scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    _check(model, {"x": x})
    assert bool(calls) == (compiled and axis == -1 and outputs[1:] != ["inv"])


@pytest.mark.parametrize("form", ["plain", "segments-mask", "position-ids", "three-outputs"])
def test_embed_layer_normalization(form):
    rng = np.random.default_rng(3)
    batch, seq, hidden, vocab = 2, 7, 32, 50
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    consts = {"word": rng.standard_normal((vocab, hidden)).astype(F), "pos": rng.standard_normal((16, hidden)).astype(F),
              "gamma": rng.uniform(0.5, 1.5, hidden).astype(F), "beta": rng.standard_normal(hidden).astype(F)}
    feeds = {"ids": ids}
    inputs = ["ids", "", "word", "pos", "", "gamma", "beta"]
    outs = [("y", F), ("mask_index", np.int32)]
    if form in ("segments-mask", "three-outputs"):
        consts["seg"] = rng.standard_normal((2, hidden)).astype(F)
        feeds["segs"] = rng.integers(0, 2, (batch, seq)).astype(np.int32)
        feeds["mask"] = (np.arange(seq)[None, :] < np.array([[7], [4]])).astype(np.int32)
        inputs[1], inputs[4] = "segs", "seg"
        inputs.append("mask")
    if form == "position-ids":
        feeds["pids"] = np.tile(np.arange(3, 3 + seq), (batch, 1)).astype(np.int32)
        inputs += ["", "pids"]
    if form == "three-outputs":
        outs.append(("sum", F))
    _check(_model("EmbedLayerNormalization", inputs, consts, feeds, outs, epsilon=1e-12), feeds)


@pytest.mark.parametrize("layout", ["BSD", "BNSH"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["ids", "offset"])
@pytest.mark.parametrize("partial", [False, True])
def test_rotary_embedding(layout, interleaved, positions, partial):
    rng = np.random.default_rng(4)
    batch, seq, heads, head = 2, 5, 3, 16
    rot = 8 if partial else head
    x = rng.standard_normal((batch, seq, heads * head) if layout == "BSD" else (batch, heads, seq, head)).astype(F)
    angles = np.arange(32)[:, None] * (1.0 / 10000 ** (np.arange(0, rot, 2) / rot))[None, :]
    consts = {"cos": np.cos(angles).astype(F), "sin": np.sin(angles).astype(F)}
    pids = rng.integers(0, 32 - seq, (batch, seq)).astype(np.int64) if positions == "ids" else np.array([4], np.int64)
    feeds = {"x": x, "pids": pids}
    attrs = {"interleaved": interleaved}
    if layout == "BSD" or partial:
        attrs["num_heads"] = heads
    if partial:
        attrs["rotary_embedding_dim"] = rot
    _check(_model("RotaryEmbedding", ["x", "pids", "cos", "sin"], consts, feeds, [("y", F)], **attrs), feeds)


def _gqa_case(rng, stage, packed, rotary, window, softcap, batch=2, heads=4, kv_heads=2, head=16, past_len=5):
    seq = 6 if stage == "prompt" else 1
    total = seq if stage == "prompt" else past_len + 1
    q = rng.standard_normal((batch, seq, heads * head)).astype(F)
    k = rng.standard_normal((batch, seq, kv_heads * head)).astype(F)
    v = rng.standard_normal((batch, seq, kv_heads * head)).astype(F)
    feeds = {"seqlens": np.full(batch, total - 1, np.int32), "total": np.array(total, np.int32)}
    if packed:
        feeds["q"] = np.concatenate([q, k, v], axis=2)
        inputs = ["q", "", ""]
    else:
        feeds.update(q=q, k=k, v=v)
        inputs = ["q", "k", "v"]
    if stage == "decode":
        feeds["pk"] = rng.standard_normal((batch, kv_heads, past_len, head)).astype(F)
        feeds["pv"] = rng.standard_normal((batch, kv_heads, past_len, head)).astype(F)
        inputs += ["pk", "pv"]
    else:
        inputs += ["", ""]
    inputs += ["seqlens", "total"]
    consts = {}
    if rotary:
        angles = np.arange(32)[:, None] * (1.0 / 10000 ** (np.arange(0, head, 2) / head))[None, :]
        consts = {"cos": np.cos(angles).astype(F), "sin": np.sin(angles).astype(F)}
        inputs += ["cos", "sin"]
    attrs = dict(num_heads=heads, kv_num_heads=kv_heads, do_rotary=int(rotary), local_window_size=window)
    if softcap:
        attrs["softcap"] = softcap
    outs = [("y", F), ("present_key", F), ("present_value", F)]
    return _model("GroupQueryAttention", inputs, consts, feeds, outs, **attrs), feeds


@pytest.mark.parametrize("stage", ["prompt", "decode"])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("window,softcap", [(-1, 0.0), (3, 0.0), (-1, 5.0)])
def test_group_query_attention(stage, packed, rotary, window, softcap):
    rng = np.random.default_rng(5)
    model, feeds = _gqa_case(rng, stage, packed, rotary, window, softcap)
    _check(model, feeds)


def test_group_query_attention_rows_that_see_no_key_are_zero():
    """A right-padded prompt with local_window_size: a padded query row whose window holds only
    padding sees no key; onnxruntime gives 0 there (the softmax of all -inf was NaN)."""
    batch, seq, width = 2, 6, 8
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((batch, seq, width)).astype(F) for _ in range(3))
    feeds = {"q": q, "k": k, "v": v, "sl": np.array([5, 1], np.int32), "tot": np.array(seq, np.int32)}
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tot"], ["y", "pk", "pv"],
                            domain=MS, num_heads=1, kv_num_heads=1, local_window_size=2)
    inputs = [helper.make_tensor_value_info(n, 1, [batch, seq, width]) for n in "qkv"]
    inputs += [helper.make_tensor_value_info("sl", 6, [batch]), helper.make_tensor_value_info("tot", 6, [])]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, 1, None) for o in ("y", "pk", "pv")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert not np.isnan(got[0]).any()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
