"""Ops ONNX defines by a function body run as that body when the CPU provider has no kernel."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu import registry
from ort_ep_cpu.kernels import functions

F = TensorProto.FLOAT


def _model(node, inputs, outputs, opset=18):
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def without_kernel(monkeypatch):
    """Remove an op's CPU kernels for one test, so that expansion is what runs it."""

    def remove(op_type: str) -> None:
        monkeypatch.delitem(registry._REGISTRY, ("", op_type), raising=False)

    return remove


def _check(model, feeds, op_type):
    session = ort.InferenceSession(model.SerializeToString())
    ours = session.run(None, feeds)
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    placement = session.get_placement().nodes
    top = next(p for p in placement if p.graph == "" and p.op_type == op_type)
    assert top.note == functions.NOTE
    body = [p for p in placement if p.graph == f"{top.name}/{op_type}"]
    assert body and all(p.provider == "CPUExecutionProvider" for p in body)
    return body


def test_function_body_op_is_expanded(without_kernel):
    without_kernel("Celu")
    node = helper.make_node("Celu", ["x"], ["y"], alpha=0.7, name="celu")
    model = _model(node, [helper.make_tensor_value_info("x", F, [3, 4])], [helper.make_tensor_value_info("y", F, [3, 4])])
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    body = _check(model, {"x": x}, "Celu")
    assert "Elu" in {p.op_type for p in body}


def test_context_dependent_function_op_is_expanded(without_kernel):
    without_kernel("NegativeLogLikelihoodLoss")
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["loss"], reduction="mean", name="nll")
    model = _model(
        node,
        [helper.make_tensor_value_info("x", F, [4, 5]), helper.make_tensor_value_info("t", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("loss", F, [])],
    )
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((4, 5), dtype=np.float32), "t": np.array([0, 4, 2, 1], dtype=np.int64)}
    _check(model, feeds, "NegativeLogLikelihoodLoss")


def test_op_without_kernel_or_body_is_declined_with_the_reason(without_kernel):
    without_kernel("Sqrt")  # Sqrt has no function body
    node = helper.make_node("Sqrt", ["x"], ["y"])
    model = _model(node, [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])])
    with pytest.raises(ort.NotImplemented, match="no CPU kernel for Sqrt"):
        ort.InferenceSession(model.SerializeToString())


def test_function_op_with_defaulted_attribute_loads():
    # strict shape inference fails inside MeanVarianceNormalization's body when axes is not
    # given; the model is valid and onnxruntime runs it
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    model = _model(node, [helper.make_tensor_value_info("x", F, [2, 3, 4, 5])],
                   [helper.make_tensor_value_info("y", F, [2, 3, 4, 5])])
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 5), dtype=np.float32)
    (ours,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (theirs,) = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_type_errors_are_still_refused():
    node = helper.make_node("Add", ["a", "b"], ["c"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", F, [2]), helper.make_tensor_value_info("b", TensorProto.DOUBLE, [2])],
        [helper.make_tensor_value_info("c", F, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(ort.InvalidGraph, match="type"):
        ort.InferenceSession(model.SerializeToString())
