"""The CPU kernel for com.microsoft Attention (the packed-projection form ort-core's optimizer
fuses a BERT layer into) against onnxruntime's own CPU kernel running the same node.
Tolerances: float32 rtol 1e-4 / atol 1e-5; float16 rtol 1e-2 / atol 2e-3 (onnxruntime computes
float16 attention with float16 intermediates, this kernel in float32)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

RNG = np.random.default_rng(1)
_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
         np.dtype(np.int32): TensorProto.INT32}
B, S, N, H = 2, 5, 3, 4
D = N * H
IN = 10  # input hidden size


def _model(inputs: list[str], feeds: dict[str, np.ndarray], constants=(), outputs=("y",), **attrs) -> bytes:
    """One Attention node; the inputs named in ``constants`` are initializers, the rest graph inputs."""
    node = helper.make_node("Attention", inputs, list(outputs), domain="com.microsoft", name="attn", **attrs)
    elem = _ELEM[feeds[inputs[0]].dtype]
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _ELEM[feeds[n].dtype], list(feeds[n].shape))
         for n in inputs if n and n not in constants],
        [helper.make_tensor_value_info(o, elem, []) for o in outputs if o],
        [numpy_helper.from_array(feeds[n], n) for n in constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _ours(data: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _compare(inputs, feeds, constants=("w", "b"), rtol=1e-4, atol=1e-5, **attrs):
    data = _model(inputs, feeds, constants=[c for c in constants if c in inputs], **attrs)
    fed = {n: feeds[n] for n in inputs if n and n not in constants}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, fed)[0]
    sess = _ours(data)
    assert [(p.op_type, p.provider) for p in sess.get_placement().nodes] == [("Attention", "CPUExecutionProvider")]
    got = sess.run(None, fed)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=rtol, atol=atol)
    return got


def _feeds(v_hidden=D, dtype=np.float32, seq=S):
    return {
        "x": RNG.standard_normal((B, seq, IN)).astype(dtype),
        "w": (RNG.standard_normal((IN, 2 * D + v_hidden)) / np.sqrt(IN)).astype(dtype),
        "b": (0.1 * RNG.standard_normal(2 * D + v_hidden)).astype(dtype),
    }


@pytest.mark.parametrize("constants", [("w", "b"), ("w",), ()], ids=["constant", "fed-bias", "fed"])
def test_self_attention(constants):
    _compare(["x", "w", "b"], _feeds(), constants=constants, num_heads=N)


def test_without_bias_and_with_scale():
    _compare(["x", "w"], _feeds(), num_heads=N, scale=0.3)


def test_value_hidden_size_of_its_own():
    _compare(["x", "w", "b"], _feeds(v_hidden=2 * D), num_heads=N, qkv_hidden_sizes=[D, D, 2 * D])


@pytest.mark.parametrize("form", ["lengths", "ends-starts", "2d", "3d"])
def test_mask_index(form):
    if form == "lengths":
        mask = np.array([3, 5], np.int32)
    elif form == "ends-starts":  # (2 * batch): each row's end (exclusive), then its start (inclusive)
        mask = np.array([5, 4, 0, 2], np.int32)
    elif form == "2d":
        mask = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 0]], np.int32)
    else:
        mask = (RNG.random((B, S, S)) > 0.3).astype(np.int32)
        mask[..., 0] = 1
    _compare(["x", "w", "b", "m"], _feeds() | {"m": mask}, num_heads=N, mask_filter_value=-3.0)


@pytest.mark.parametrize("shape", [(B, N, S, S), (1, 1, S, S)])
def test_attention_bias_with_mask_index(shape):
    feeds = _feeds() | {"m": np.array([4, 5], np.int32), "ab": RNG.standard_normal(shape).astype(np.float32)}
    _compare(["x", "w", "b", "m", "", "ab"], feeds, num_heads=N)


def test_unidirectional():
    _compare(["x", "w", "b"], _feeds(), num_heads=N, unidirectional=1)


def test_float16():
    _compare(["x", "w", "b"], _feeds(dtype=np.float16), rtol=1e-2, atol=2e-3, num_heads=N)


@pytest.mark.parametrize("route", ["oneDNN", "compiled"])
def test_the_constant_weights_take_one_product_with_the_bias_in_it(monkeypatch, route):
    """Constant weights and bias are one product whose bias is added inside it: oneDNN's, or
    the compiled float32 product (B and the bias packed once) where numba is there; a weights
    array fed at run time takes numpy's product (same values)."""
    from ort_ep_cpu.kernels import _jit, _onednn, nn
    feeds = _feeds()
    data = _model(["x", "w", "b"], feeds, constants=["w", "b"], num_heads=N)
    made, runs = [], []
    if route == "oneDNN":
        if not _onednn.available():
            pytest.skip("oneDNN is not installed")
        monkeypatch.setattr(nn, "ONEDNN_MIN_GEMM_MACS", 0)  # this product is small
        monkeypatch.setattr(_jit, "float_product", lambda parts=1: None)
        make, run = _onednn.MatMul.__init__, _onednn.MatMul.run
        monkeypatch.setattr(_onednn.MatMul, "__init__", lambda self, lib, m, b, bias, *a: made.append(bias) or make(self, lib, m, b, bias, *a))
        monkeypatch.setattr(_onednn.MatMul, "run", lambda self, *a: runs.append(self) or run(self, *a))
    else:
        if _jit.float_product() is None:
            pytest.skip("numba is not installed")
        monkeypatch.setattr(nn, "COMPILED_PRODUCT_MIN_MACS", 0)  # this product is small
        pack, product = nn.pack_float_panels, _jit.float_product
        monkeypatch.setattr(nn, "pack_float_panels", lambda b, bias: made.append(bias) or pack(b, bias))
        monkeypatch.setattr(_jit, "float_product", lambda parts=1: runs.append(parts) or product(parts))
    got = _ours(data).run(None, {"x": feeds["x"]})[0]
    assert len(made) == len(runs) == 1 and made[0] is not None and made[0].shape == (3 * D,)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": feeds["x"]})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seq,past_length", [(1, 3), (2, 3), (4, 0), (1, 1)])
@pytest.mark.parametrize("unidirectional", [1, 0])
@pytest.mark.parametrize("mask", [False, True])
def test_past_and_present(seq, past_length, unidirectional, mask):
    """GPT-2's cache as onnxruntime's converter writes it (it was declined): input past (2, B, N,
    P, H) before this step's keys and values, output present (2, B, N, P + S, H), the causal mask
    offset by P (query i at position P + i sees keys j <= P + i), mask_index (B, P + S)."""
    feeds = _feeds(seq=seq) | {"p": RNG.standard_normal((2, B, N, past_length, H)).astype(np.float32)}
    inputs = ["x", "w", "b", "", "p"]
    if mask:
        m = np.ones((B, past_length + seq), np.int32)
        m[1, 0] = 0  # the second row's first key is padding
        feeds["m"], inputs[3] = m, "m"
    # (onnxruntime wants the present output wherever past is given)
    data = _model(inputs, feeds, constants=["w", "b"], outputs=("y", "present"), num_heads=N,
                  unidirectional=unidirectional)
    fed = {n: feeds[n] for n in inputs if n and n not in ("w", "b")}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, fed)
    got = _ours(data).run(None, fed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------- forms not supported


def test_past_sequence_length_is_declined_with_the_input_named():
    feeds = _feeds() | {"p": np.array(2, np.int32)}
    with pytest.raises(Exception, match="input past_sequence_length is not supported"):
        _ours(_model(["x", "w", "b", "", "", "", "p"], feeds, constants=["w", "b"], num_heads=N))


def test_rotary_is_declined_by_name():
    with pytest.raises(Exception, match="do_rotary=1"):
        _ours(_model(["x", "w", "b"], _feeds(), constants=["w", "b"], num_heads=N, do_rotary=1))


def test_a_mask_index_of_another_form_is_an_error_naming_it():
    feeds = _feeds() | {"m": np.array([5, 5, 0, 0, 1, 1, 2, 2], np.int32)}  # (3 * batch + 2)
    sess = _ours(_model(["x", "w", "b", "m"], feeds, constants=["w", "b"], num_heads=N))
    with pytest.raises(ort.Fail, match=r"mask_index of shape \(3 \* batch \+ 2\) is not supported"):
        sess.run(None, {"x": feeds["x"], "m": feeds["m"]})


def test_weights_of_a_wrong_shape_are_an_error_naming_them():
    feeds = _feeds()
    feeds["w"] = feeds["w"][:, :-1]
    sess = _ours(_model(["x", "w"], feeds, constants=[], num_heads=N))
    with pytest.raises(ort.Fail, match=r"input weights has shape \(10, 35\); expected \(10, 3 \* hidden_size\)"):
        sess.run(None, {"x": feeds["x"], "w": feeds["w"]})
