"""Fusion: elementwise trees become one numexpr expression; results match onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort

PROVIDER = "NumExprExecutionProvider"


def _model() -> bytes:
    # sigmoid(x * w + b) - relu(x), then a Softmax numexpr cannot run, then Tanh
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["xw"], name="mul"),
        helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
        helper.make_node("Sigmoid", ["xwb"], ["s"], name="sigmoid"),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Sub", ["s", "r"], ["d"], name="sub"),
        helper.make_node("Softmax", ["d"], ["p"], name="softmax", axis=-1),
        helper.make_node("Tanh", ["p"], ["y"], name="tanh"),
    ]
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.5, -1.0, 2.0, 0.25])
    graph = helper.make_graph(
        nodes, "fusion",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((5, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}


def test_tree_is_fused_and_correct() -> None:
    sess = ort.InferenceSession(_model(), providers=[PROVIDER])
    placed = {p.name: p for p in sess.get_placement().nodes}
    fused = {"mul", "add", "sigmoid", "relu", "sub"}
    assert {placed[n].group for n in fused} == {0}  # one group, one expression
    assert placed["softmax"].provider == "CPUExecutionProvider"
    assert "Softmax is not an elementwise op" in placed["softmax"].declined[PROVIDER]
    assert placed["tanh"].provider == PROVIDER and placed["tanh"].group is None
    expected = onnxruntime.InferenceSession(_model(), providers=["CPUExecutionProvider"]).run(None, _feeds())
    np.testing.assert_allclose(sess.run(None, _feeds())[0], expected[0], rtol=1e-5, atol=1e-6)


def test_max_group_one_disables_fusion() -> None:
    sess = ort.InferenceSession(_model(), providers=[(PROVIDER, {"max_group": "1"})])
    assert all(p.group is None for p in sess.get_placement().nodes)
    expected = onnxruntime.InferenceSession(_model(), providers=["CPUExecutionProvider"]).run(None, _feeds())
    np.testing.assert_allclose(sess.run(None, _feeds())[0], expected[0], rtol=1e-5, atol=1e-6)


def test_bad_option_names_the_key() -> None:
    with pytest.raises(ort.InvalidArgument, match="max_group"):
        ort.InferenceSession(_model(), providers=[(PROVIDER, {"max_group": "0"})])
