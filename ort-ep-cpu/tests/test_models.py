"""Parity with onnxruntime on the generated MLP, CNN and transformer encoder.

Tolerance: rtol 1e-4, atol 1e-5 (float32; both sides use BLAS with different summation orders).
"""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from ort_core.testing import models

onnxruntime = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("name", sorted(models.MODELS))
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_generated_model_matches_onnxruntime(name, batch, level):
    model = models.MODELS[name]()
    feeds = models.random_inputs(model, batch=batch, seed=batch)
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert set(sess.get_placement().counts()) == {"CPUExecutionProvider"}
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = sess.run(None, feeds)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_an_untyped_output_of_a_contrib_op_runs_as_in_onnxruntime():
    """A graph output with no type that onnx's inference cannot type (a com.microsoft op's:
    onnxruntime types it from its own schemas) loads and takes its kernel's type; it was an
    InvalidGraph ("has no type, and type inference does not give one")."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("QLinearSigmoid", ["q", "s", "z", "s", "z"], ["y"], domain="com.microsoft"),
         helper.make_node("Identity", ["y"], ["out"])], "g",
        [helper.make_tensor_value_info("q", TensorProto.UINT8, [4])],
        [helper.make_tensor_value_info("out", TensorProto.UINT8, [4]), helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(128, np.uint8), "z")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
                             ).SerializeToString()
    q = {"q": np.array([0, 100, 128, 255], np.uint8)}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, q)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, q)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
