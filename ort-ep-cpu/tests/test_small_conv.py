"""Parity of the compiled small-input convolution (``_jit.small_conv``, taken by
``nn.build_conv`` below ``SMALL_CONV_MACS`` / ``SMALL_DEPTHWISE_MACS``) with onnxruntime, and
its routing: each case asserts the loop ran (or did not). Tolerance: rtol/atol 1e-5 on
float32 (the sums of a pixel in tap order, onnxruntime's in its GEMM's), 1e-12 on float64 (against onnx.reference)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort
from ort_ep_cpu.kernels import _jit

pytestmark = pytest.mark.skipif(not _jit.enabled(), reason="numba is not installed (or ORT_EP_CPU_NUMBA=0)")


@pytest.fixture
def loop_calls(monkeypatch):
    """The number of calls of the compiled small loop, counted."""
    calls = []
    real = _jit.small_conv

    def spy():
        loop = real()
        return None if loop is None else (lambda *args: (calls.append(args[3].shape), loop(*args))[1])

    monkeypatch.setattr(_jit, "small_conv", spy)
    return calls


def _model(x_shape, w_shape, attrs, bias=True, op="Conv", elem=TensorProto.FLOAT, const_w=True):
    rng = np.random.default_rng(0)
    dtype = np.float32 if elem == TensorProto.FLOAT else np.float64
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(w_shape).astype(dtype), "w")] if const_w else []
    inputs = [helper.make_tensor_value_info("x", elem, list(x_shape))]
    if not const_w:
        inputs.append(helper.make_tensor_value_info("w", elem, list(w_shape)))
    if bias:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(w_shape[0]).astype(dtype), "b"))
    domain = "com.microsoft" if op == "FusedConv" else ""
    node = helper.make_node(op, ["x", "w"] + (["b"] if bias else []), ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", elem, None)], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString()


def _compare(data, x_shape, dtype=np.float32, feeds=None, tol=1e-5):
    x = np.random.default_rng(1).standard_normal(x_shape).astype(dtype)
    feeds = {"x": x, **(feeds or {})}
    if dtype == np.float64:  # onnxruntime has no float64 Conv
        want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, feeds)[0]
    else:
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got_session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(2):  # the second run reuses the plan and the transposed weights
        got = got_session.run(None, feeds)[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


SMALL = [
    # silero-vad's: a 258-channel depthwise 1-D convolution of 7 samples, 1x1s of 1-4 samples
    ((1, 258, 7), (258, 1, 5), {"pads": [2, 2], "group": 258}),
    ((1, 16, 4), (32, 16, 1), {}),
    ((1, 32, 1), (64, 32, 1), {}),
    ((1, 16, 7), (16, 16, 1), {"strides": [2]}),
    ((1, 1, 13), (1, 1, 7), {}),
    # 2-D: padding (asymmetric), strides, dilations, groups, batch 2, auto_pad
    ((2, 4, 5, 6), (6, 2, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 1], "group": 2}),
    ((1, 3, 7, 7), (4, 3, 3, 2), {"dilations": [2, 3], "pads": [2, 2, 2, 2]}),
    ((1, 8, 6, 6), (8, 1, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2], "group": 8}),
    ((1, 64, 8, 8), (64, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 64}),  # depthwise, 37K MACs
    ((1, 6, 4, 5), (9, 2, 1, 3), {"pads": [0, 3, 0, 3], "group": 3}),  # pads wider than the kernel
    ((1, 2, 3, 3), (2, 2, 5, 5), {"pads": [2, 2, 2, 2]}),  # a kernel larger than the image
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", SMALL)
@pytest.mark.parametrize("bias", [True, False])
def test_small_conv_matches_onnxruntime(loop_calls, x_shape, w_shape, attrs, bias):
    _compare(_model(x_shape, w_shape, attrs, bias), x_shape)
    assert loop_calls, "the compiled small loop did not run"


@pytest.mark.parametrize("activation, params", [("Relu", []), ("Sigmoid", []), ("LeakyRelu", [0.2])])
def test_fused_conv_activations(loop_calls, activation, params):
    attrs = {"pads": [1, 1], "activation": activation}
    if params:
        attrs["activation_params"] = params
    _compare(_model((1, 12, 9), (8, 12, 3), attrs, op="FusedConv"), (1, 12, 9))
    assert loop_calls


def test_float64(loop_calls):
    _compare(_model((1, 5, 6), (7, 5, 3), {"pads": [1, 1]}, elem=TensorProto.DOUBLE), (1, 5, 6), np.float64, tol=1e-12)
    assert loop_calls


def test_few_output_pixels_take_the_loop_up_to_a_larger_size(loop_calls):
    """Over ``SMALL_CONV_MACS``, convolutions of at most ``SMALL_CONV_PIXELS`` output pixels
    still take the loop (silero-vad's encoder: 129 -> 128 channels, k 3 on 3 samples, 149K
    MACs), batched ones by their MACs an image. (Sums of a few hundred terms of unit
    normals: float32 rounding, in another order than onnxruntime's, reaches 1e-5.)"""
    _compare(_model((1, 129, 3), (128, 129, 3), {"pads": [1, 1]}), (1, 129, 3), tol=1e-4)
    _compare(_model((1, 64, 2, 2), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}), (1, 64, 2, 2), tol=1e-4)
    _compare(_model((4, 64, 4), (64, 64, 3), {"pads": [1, 1]}), (4, 64, 4), tol=1e-4)
    assert set(loop_calls) == {(1, 128, 1, 3), (1, 64, 2, 2), (4, 64, 1, 4)}  # (their outputs, as 4-D)


def test_larger_and_runtime_weights_take_the_other_paths(loop_calls):
    # 64 -> 64 on 16 samples (197K MACs): BLAS is faster there (nn.SMALL_CONV_PIXELS)
    _compare(_model((1, 64, 16), (64, 64, 3), {"pads": [1, 1]}), (1, 64, 16))
    # 128 -> 128 on 6 samples (295K MACs): oneDNN's (nn.SMALL_CONV_PIXEL_MACS)
    _compare(_model((1, 128, 6), (128, 128, 3), {"pads": [1, 1]}), (1, 128, 6))
    # weights fed at run time: the loop's transposed weights are made once, for constants only
    w = np.random.default_rng(2).standard_normal((4, 3, 3)).astype(np.float32)
    _compare(_model((1, 3, 8), (4, 3, 3), {}, const_w=False), (1, 3, 8), feeds={"w": w})
    assert loop_calls == []


def test_new_input_sizes_get_their_own_plan(loop_calls):
    data = _model((1, 4, "n"), (6, 4, 3), {"pads": [1, 1]})
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for n in (5, 9, 5, 1):
        x = np.random.default_rng(n).standard_normal((1, 4, n)).astype(np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], reference.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert [s[-1] for s in loop_calls] == [5, 9, 5, 1]
