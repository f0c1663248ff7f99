"""Parity of the fast convolution and pooling kernels with onnxruntime (single-node models).

Covers the paths the kernels choose between: 1x1 without copy, im2col (padded, strided,
dilated, auto_pad, 1-D and 3-D), depthwise and general grouped convolution, pooling with
padding, ceil_mode and count_include_pad. Tolerance: rtol 1e-4, atol 1e-4 (float32 sums in a
different order).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort


def _single_node(op_type: str, shapes: dict[str, list[int]], out_rank: int, initial: dict | None = None, **attrs):
    names = list(shapes)
    node = helper.make_node(op_type, names, ["y"], **attrs)
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in (initial or {}).items()]
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items() if n not in (initial or {})],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * out_rank)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _compare(data: bytes, feeds: dict[str, np.ndarray]) -> None:
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


CONV_CASES = [
    # (x shape, w shape, attrs)
    ((2, 8, 9, 9), (16, 8, 1, 1), {}),
    ((2, 8, 9, 9), (16, 8, 1, 1), {"strides": [2, 2]}),
    ((2, 8, 9, 9), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 3, 10, 11), (4, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 3]}),
    ((1, 4, 12, 12), (6, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 4, 7, 8), (6, 4, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 4, 7, 8), (6, 4, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((2, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    ((2, 8, 9, 9), (8, 1, 5, 5), {"group": 8, "pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((2, 8, 9, 9), (16, 2, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ((2, 8, 9, 9), (16, 1, 3, 3), {"group": 8}),  # channel multiplier 2
    ((2, 4, 20), (6, 4, 5), {"pads": [2, 2], "strides": [2]}),
    ((1, 2, 5, 6, 7), (3, 2, 3, 3, 3), {"pads": [1] * 6}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(x_shape, w_shape, attrs, bias):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    shapes = {"x": list(x_shape), "w": list(w_shape)}
    initial = {"w": w}
    if bias:
        shapes["b"] = [w_shape[0]]
        initial["b"] = rng.standard_normal(w_shape[0]).astype(np.float32)
    _compare(_single_node("Conv", shapes, len(x_shape), initial, **attrs), {"x": x})


@pytest.mark.parametrize("x_shape,w_shape,attrs", [c for c in CONV_CASES if len(c[0]) == 4])
def test_conv_in_bands(x_shape, w_shape, attrs, monkeypatch):
    """The banded wide-output path on every 2-D case, forced with tiny band sizes: bands of one
    output row (or one group), and of a few rows, the last one shorter."""
    from ort_ep_cpu.kernels import nn

    monkeypatch.setattr(nn, "BAND_BYTES", 1)
    test_conv(x_shape, w_shape, attrs, True)
    monkeypatch.setattr(nn, "BAND_BYTES", 3 * 4 * 9 * 3 * 9)
    test_conv(x_shape, w_shape, attrs, False)


POOL_CASES = [
    ((2, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 3, 10, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    ((1, 2, 12), {"kernel_shape": [3], "pads": [1, 1]}),
]


@pytest.mark.parametrize("x_shape,attrs", POOL_CASES)
def test_max_pool(x_shape, attrs):
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    _compare(_single_node("MaxPool", {"x": list(x_shape)}, len(x_shape), **attrs), {"x": x})


@pytest.mark.parametrize("x_shape,attrs", POOL_CASES)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(x_shape, attrs, include_pad):
    x = np.random.default_rng(2).standard_normal(x_shape).astype(np.float32)
    data = _single_node("AveragePool", {"x": list(x_shape)}, len(x_shape), count_include_pad=include_pad, **attrs)
    _compare(data, {"x": x})


def test_conv_second_shape_uses_its_own_geometry():
    """The geometry cache is keyed by input shape: a second shape must not reuse the first's."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    data = _single_node("Conv", {"x": [1, 3, None, None], "w": [4, 3, 3, 3]}, 4, {"w": w}, pads=[1, 1, 1, 1])
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for shape in [(1, 3, 8, 8), (1, 3, 5, 11), (1, 3, 8, 8)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_gemm_with_overridable_weights():
    """Gemm pre-transposes a constant B once; a B fed at run time (an overridable initializer
    given in the feed) must be used instead of the pre-transposed default."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    other = rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w.T, rtol=1e-5)
    np.testing.assert_allclose(sess.run(None, {"x": x, "w": other})[0], x @ other.T, rtol=1e-5)
