"""The CPU kernel for com.microsoft MultiHeadAttention against onnxruntime's own CPU kernel
running the same node, and the generated transformer fused by ort-core's optimizer (into
com.microsoft Attention) against onnxruntime on the original model. Tolerances: float32 rtol 1e-4 / atol 1e-5 on the node,
atol 1e-4 on the transformer (LayerNorm outputs of size ~1); float16 rtol 1e-2 / atol 2e-3
(onnxruntime computes float16 attention with float16 intermediates, this kernel in float32)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.testing import models

RNG = np.random.default_rng(0)
_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
         np.dtype(np.int32): TensorProto.INT32}
B, S, N, H = 2, 5, 3, 4
D = N * H


def _model(inputs: list[str], feeds: dict[str, np.ndarray], outputs=("y",), out_elem=TensorProto.FLOAT, **attrs) -> bytes:
    node = helper.make_node("MultiHeadAttention", inputs, list(outputs), domain="com.microsoft", name="mha", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _ELEM[feeds[n].dtype], list(feeds[n].shape)) for n in inputs if n],
        [helper.make_tensor_value_info(o, out_elem, []) for o in outputs if o],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _ours(data: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _compare(inputs, feeds, rtol=1e-4, atol=1e-5, **attrs):
    dtype = feeds[inputs[0]].dtype
    data = _model(inputs, feeds, out_elem=_ELEM[dtype], **attrs)
    used = {n: feeds[n] for n in inputs if n}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, used)[0]
    sess = _ours(data)
    assert [p.op_type for p in sess.get_placement().nodes] == ["MultiHeadAttention"]
    got = sess.run(None, used)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=rtol, atol=atol)
    return got


def _qkv(seq=S, kv_seq=S, v_hidden=D, scale=1.0, dtype=np.float32):
    return {
        "q": (RNG.standard_normal((B, seq, D)) * scale).astype(dtype),
        "k": (RNG.standard_normal((B, kv_seq, D)) * scale).astype(dtype),
        "v": RNG.standard_normal((B, kv_seq, v_hidden)).astype(dtype),
    }


@pytest.mark.parametrize("attrs", [{}, {"scale": 0.3}], ids=["default-scale", "scale"])
def test_self_attention(attrs):
    _compare(["q", "k", "v"], _qkv(), num_heads=N, **attrs)


def test_cross_attention_with_other_lengths_and_value_size():
    _compare(["q", "k", "v"], _qkv(seq=4, kv_seq=7, v_hidden=2 * D), num_heads=N)


def test_input_projection_bias():
    feeds = _qkv() | {"b": RNG.standard_normal(3 * D).astype(np.float32)}
    _compare(["q", "k", "v", "b"], feeds, num_heads=N)


@pytest.mark.parametrize("shape", [(B, N, S, S), (1, 1, S, S), (B, 1, S, S), (1, N, S, S)])
def test_attention_bias(shape):
    feeds = _qkv() | {"ab": RNG.standard_normal(shape).astype(np.float32)}
    _compare(["q", "k", "v", "", "", "ab"], feeds, num_heads=N)


@pytest.mark.parametrize("form", ["lengths", "2d", "3d"])
def test_key_padding_mask(form):
    if form == "lengths":
        mask = np.array([3, 5], np.int32)
    elif form == "2d":
        mask = np.array([[1, 1, 0, 1, 0], [1, 2, 1, -1, 1]], np.int32)  # > 0 attends (-1 does not)
    else:
        mask = (RNG.random((B, S, S)) > 0.3).astype(np.int32)
        mask[..., 0] = 1
    _compare(["q", "k", "v", "", "m"], _qkv() | {"m": mask}, num_heads=N)


def test_key_padding_mask_with_filter_value_and_attention_bias_and_bias():
    feeds = _qkv() | {
        "b": RNG.standard_normal(3 * D).astype(np.float32),
        "m": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32),
        "ab": RNG.standard_normal((B, 1, S, S)).astype(np.float32),
    }
    _compare(["q", "k", "v", "b", "m", "ab"], feeds, num_heads=N, mask_filter_value=-3.0)


def test_unidirectional():
    _compare(["q", "k", "v", "", "m"], _qkv() | {"m": np.array([4, 5], np.int32)}, num_heads=N, unidirectional=1)


def test_large_scores_take_the_max_subtracting_path():
    """Scores near 300 overflow exp in float32: the kernel redoes the softmax with the row max."""
    feeds = _qkv(scale=6.0)
    got = _compare(["q", "k", "v"], feeds, num_heads=N, scale=1.0)
    assert np.isfinite(got).all()


def test_fully_padded_sequence_matches_onnxruntime():
    """Every key of batch 1 padded: all its scores are near -10000 and exp underflows to 0; the
    max-subtracted softmax gives onnxruntime's uniform weights."""
    _compare(["q", "k", "v", "", "m"], _qkv() | {"m": np.array([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], np.int32)}, num_heads=N)


def test_float16():
    feeds = _qkv(dtype=np.float16) | {"ab": RNG.standard_normal((B, 1, S, S)).astype(np.float16)}
    _compare(["q", "k", "v", "", "", "ab"], feeds, rtol=1e-2, atol=2e-3, num_heads=N)


@pytest.mark.parametrize("layers", [2, 3])
def test_transformer_is_fused_on_every_layer_and_matches_onnxruntime(layers, tmp_path):
    model = models.transformer(layers=layers)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    written = onnx.load(so.optimized_model_filepath)
    # the three projections of each layer go into com.microsoft Attention's merged weights
    ops = [n.op_type for n in written.graph.node]
    assert ops.count("Attention") == layers and "MultiHeadAttention" not in ops
    placed = [p for p in sess.get_placement().nodes if p.op_type == "Attention"]
    assert len(placed) == layers and {p.provider for p in placed} == {"CPUExecutionProvider"}
    reference = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 8):
        feeds = models.random_inputs(model, batch=batch, seed=batch)
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------- forms not supported


@pytest.mark.parametrize("extra,name", [(6, "past_key"), (7, "past_value")])
def test_past_inputs_are_declined_with_the_input_named(extra, name):
    feeds = _qkv() | {"p": RNG.standard_normal((B, N, 2, H)).astype(np.float32)}
    inputs = ["q", "k", "v", "", "", ""] + [""] * (extra - 6) + ["p"]
    with pytest.raises(Exception, match=name):
        _ours(_model(inputs, feeds, num_heads=N))


def test_present_outputs_are_declined_with_the_output_named():
    with pytest.raises(Exception, match="present_key"):
        _ours(_model(["q", "k", "v"], _qkv(), outputs=("y", "present_key"), num_heads=N))


def test_packed_qkv_is_declined_naming_query():
    feeds = {"q": RNG.standard_normal((B, S, N, 3, H)).astype(np.float32)}
    with pytest.raises(Exception, match="key and value are required"):
        _ours(_model(["q"], feeds, num_heads=N))
    feeds |= {"k": RNG.standard_normal((B, S, D)).astype(np.float32), "v": RNG.standard_normal((B, S, D)).astype(np.float32)}
    with pytest.raises(Exception, match="input query as packed QKV"):
        _ours(_model(["q", "k", "v"], feeds, num_heads=N))


def test_key_padding_mask_of_start_and_end_positions_is_an_error_naming_it():
    feeds = _qkv() | {"m": np.zeros(3 * B + 2, np.int32)}
    sess = _ours(_model(["q", "k", "v", "", "m"], feeds, num_heads=N))
    with pytest.raises(ort.Fail, match=r"key_padding_mask of shape \(3 \* batch \+ 2\)"):
        sess.run(None, feeds)


def test_unidirectional_cross_attention_is_an_error_naming_the_attribute():
    feeds = _qkv(seq=4, kv_seq=7)
    sess = _ours(_model(["q", "k", "v"], feeds, num_heads=N, unidirectional=1))
    with pytest.raises(ort.Fail, match="unidirectional=1 needs as many keys as the past.s and the query.s lengths"):
        sess.run(None, feeds)


def test_attention_bias_of_a_wrong_shape_is_an_error_naming_it():
    feeds = _qkv() | {"ab": np.zeros((B, 1, 1, S), np.float32)}
    sess = _ours(_model(["q", "k", "v", "", "", "ab"], feeds, num_heads=N))
    with pytest.raises(ort.Fail, match="attention_bias has shape"):
        sess.run(None, feeds)
