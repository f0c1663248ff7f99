"""The contrib ops ort-core's optimizer fuses into run on CUDA, so the fusions are applied for
this provider (FusedConv, FusedGemm, BiasGelu, SkipLayerNormalization, MultiHeadAttention on
the generated models; FusedMatMul, FusedConv with parameters, HardSwish as single nodes), each
against onnxruntime's CPU provider."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.testing import models

PROVIDERS = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]


def _reference(model, feeds):
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name,fused", [
    ("mlp", {"FusedGemm"}), ("cnn", {"FusedConv"}),
    ("transformer", {"BiasGelu", "SkipLayerNormalization", "MultiHeadAttention"}),
])
def test_the_optimizer_fuses_for_cuda(name, fused):
    model = models.MODELS[name]()
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    ops = {p.op_type for p in placement.nodes}
    assert fused <= ops, sorted(ops)
    assert placement.counts() == {"CUDAExecutionProvider": len(placement.nodes)}
    feeds = models.random_inputs(model, batch=2, seed=4)
    np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-3, atol=1e-5)


def _single(node, inputs, output, initializers=(), opsets=(("", 17), ("com.microsoft", 1))):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=10)


@pytest.mark.parametrize("trans_a,trans_b,alpha", [(0, 1, 0.125), (1, 0, 1.0), (1, 1, -2.0)])
def test_fused_matmul(trans_a, trans_b, alpha):
    a_shape = (2, 3, 6, 4) if trans_a else (2, 3, 4, 6)
    b_shape = (2, 3, 5, 6) if trans_b else (2, 3, 6, 5)
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", alpha=alpha,
                            transA=trans_a, transB=trans_b)
    model = _single(node, [("a", a_shape), ("b", b_shape)], "y")
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal(a_shape, np.float32), "b": rng.standard_normal(b_shape, np.float32)}
    session = ort.InferenceSession(model, providers=PROVIDERS)
    assert session.get_placement().nodes[0].provider == "CUDAExecutionProvider"
    np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation,params", [("LeakyRelu", [0.2]), ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4]),
                                               ("Tanh", [])])
def test_fused_conv_activations(activation, params):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "w")
    attrs = {"activation": activation, "pads": [1, 1, 1, 1]}
    if params:
        attrs["activation_params"] = params
    node = helper.make_node("FusedConv", ["x", "w"], ["y"], domain="com.microsoft", **attrs)
    model = _single(node, [("x", (2, 4, 9, 9))], "y", [w])
    feeds = {"x": rng.standard_normal((2, 4, 9, 9), np.float32)}
    session = ort.InferenceSession(model, providers=PROVIDERS)
    assert session.get_placement().nodes[0].provider == "CUDAExecutionProvider"
    np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_hard_swish_rewrite_stays_on_cuda():
    """At ORT_ENABLE_ALL the optimizer rewrites x * clip(x + 3, 0, 6) / 6 into ort_core's HardSwish."""
    nodes = [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
             helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("three", 3), ("zero", 0), ("six", 6))]
    graph = helper.make_graph(nodes, "hardswish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model, options, providers=PROVIDERS)
    placement = session.get_placement()
    assert placement.counts() == {"CUDAExecutionProvider": len(placement.nodes)}, str(placement)
    assert "HardSwish" in {p.op_type for p in placement.nodes}, str(placement)
    x = np.linspace(-5, 5, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
