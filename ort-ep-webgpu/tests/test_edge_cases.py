"""Empty tensors and batch dimensions that need no dispatch (and must not divide by zero)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import needs_adapter

pytestmark = needs_adapter


def _run(node, feeds, out_shape):
    graph = helper.make_graph(
        [node], "edge",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model, providers=["WebGpuExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize(
    "node,feeds,expected",
    [
        (helper.make_node("MatMul", ["a", "b"], ["y"]),
         {"a": np.zeros((0, 4), np.float32), "b": np.ones((4, 3), np.float32)}, np.zeros((0, 3), np.float32)),
        (helper.make_node("MatMul", ["a", "b"], ["y"]),  # K = 0: a sum of nothing
         {"a": np.ones((2, 0), np.float32), "b": np.ones((0, 3), np.float32)}, np.zeros((2, 3), np.float32)),
        (helper.make_node("Softmax", ["a"], ["y"]), {"a": np.zeros((0, 4), np.float32)}, np.zeros((0, 4), np.float32)),
        (helper.make_node("Relu", ["a"], ["y"]), {"a": np.zeros((0, 4), np.float32)}, np.zeros((0, 4), np.float32)),
        (helper.make_node("Transpose", ["a"], ["y"]), {"a": np.zeros((0, 4), np.float32)}, np.zeros((4, 0), np.float32)),
    ],
    ids=["matmul-m0", "matmul-k0", "softmax", "relu", "transpose"],
)
def test_empty_tensors(node, feeds, expected):
    got = _run(node, feeds, list(expected.shape))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
