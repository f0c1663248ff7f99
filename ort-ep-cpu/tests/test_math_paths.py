"""HardSigmoid through the compiled one-pass loop (numba, when installed) and through numpy,
against onnxruntime (float32; rtol 1e-6, atol 1e-7: an FMA rounds once) and onnx.reference
(float64); NaN stays NaN; a non-contiguous input (a transposed view) is read correctly."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu.kernels import _jit


def _model(elem, shape, **attrs):
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("HardSigmoid", ["xt"], ["y"], **attrs)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, list(shape))],
                              [helper.make_tensor_value_info("y", elem, [None] * 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.3, "beta": 0.4}])
def test_hard_sigmoid_matches_onnxruntime(compiled, attrs, monkeypatch):
    calls = use_compiled(monkeypatch, compiled, "hard_sigmoid")
    data = _model(TensorProto.FLOAT, (2, 5, 7), **attrs)
    x = np.random.default_rng(0).standard_normal((2, 5, 7)).astype(np.float32) * 4
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)  # NaN positions must match too
    assert bool(calls) == compiled


@pytest.mark.parametrize("compiled", [False, True])
def test_hard_sigmoid_float64(compiled, monkeypatch):
    if compiled:
        pytest.importorskip("numba", reason="numba (optional) is not installed")
    from onnx.reference import ReferenceEvaluator

    monkeypatch.setattr(_jit, "USE", compiled)
    data = _model(TensorProto.DOUBLE, (3, 4, 6), alpha=0.25, beta=0.6)
    x = np.random.default_rng(1).standard_normal((3, 4, 6)) * 4
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == np.float64
    want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("compiled", [False, True])
def test_fused_conv_hard_sigmoid_activation(compiled, monkeypatch):
    """FusedConv's in-place HardSigmoid (the compiled pass over the conv output, or numpy's)."""
    if compiled:
        pytest.importorskip("numba", reason="numba (optional) is not installed")
    monkeypatch.setattr(_jit, "USE", compiled)
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft", activation="HardSigmoid",
                            activation_params=[0.3, 0.4], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
                              [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert 0 < (got == 1).sum() and 0 < (got == 0).sum()  # both clip bounds reached
