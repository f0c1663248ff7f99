"""If runs its branches on WebGPU: the branch values stay in GPU memory."""

from __future__ import annotations

import numpy as np
import onnxruntime
from onnx import TensorProto, helper

import ort_core as ort
from conftest import PROVIDERS, needs_adapter

pytestmark = needs_adapter


def _model():
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["h", "h"], ["t_out"])], "then", [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2, 3])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["h"], ["e_out"])], "else", [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2, 3])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("If", ["cond"], ["b"], name="if", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Add", ["b", "x"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_if_branches_run_on_webgpu_without_copies():
    model = _model()
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    assert {p.provider for p in placement.nodes} == {"WebGpuExecutionProvider"}
    assert {p.graph for p in placement.nodes} == {"", "if/then_branch", "if/else_branch"}
    # x goes to the device once; the branches read h there and return their output there
    assert sorted((c.value, c.source, c.target) for c in placement.copies) == [
        ("x", "Cpu", "WebGpu"), ("y", "WebGpu", "Cpu"),
    ]
    reference = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        np.testing.assert_allclose(session.run(None, feeds)[0], reference.run(None, feeds)[0], rtol=1e-6, atol=1e-6)
