"""A node the provider does not take falls back to CPU; the plan copies around it."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import PROVIDERS, needs_adapter

pytestmark = needs_adapter


def _model():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("CumSum", ["r", "axis"], ["c"], name="cumsum"),  # no WebGPU kernel
        helper.make_node("Mul", ["c", "x"], ["m"], name="mul"),
        helper.make_node("Tanh", ["m"], ["y"], name="tanh"),
    ]
    graph = helper.make_graph(
        nodes, "fallback",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor("axis", TensorProto.INT64, [], [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fallback_node_gets_copies_and_correct_results():
    model = _model()
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    by_name = {p.name: p for p in placement.nodes}
    assert by_name["cumsum"].provider == "CPUExecutionProvider"
    assert "no WebGPU kernel for CumSum" in by_name["cumsum"].declined["WebGpuExecutionProvider"]
    assert {by_name[n].provider for n in ("relu", "mul", "tanh")} == {"WebGpuExecutionProvider"}
    copies = {(c.value, c.source, c.target) for c in placement.copies}
    assert copies == {
        ("x", "Cpu", "WebGpu"),  # graph input
        ("r", "WebGpu", "Cpu"),  # into the CPU node
        ("c", "Cpu", "WebGpu"),  # out of it
        ("y", "WebGpu", "Cpu"),  # graph output
    }
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)
    assert "WebGpuExecutionProvider runs 3/4 nodes" in placement.fallback_summary("WebGpuExecutionProvider")


def test_strict_mode_names_the_fallback_node():
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.OrtError, match="cumsum"):
        ort.InferenceSession(_model(), options, providers=["WebGpuExecutionProvider"])
