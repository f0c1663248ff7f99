"""Regression tests for issue 23 on the WebGPU provider (each fails without its fix)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core
from conftest import needs_adapter

pytestmark = needs_adapter


def _session(nodes, inputs, initializers=()):
    graph = helper.make_graph(nodes, "t", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort_core.InferenceSession(model.SerializeToString(), providers=["WebGpuExecutionProvider"])


def test_pad_cropping_past_the_input_is_a_named_error():
    pads = numpy_helper.from_array(np.array([0, -384], np.int64), "pads")
    sess = _session([helper.make_node("Pad", ["x", "pads"], ["y"], name="crop")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], [pads])
    with pytest.raises(ort_core.Fail, match=r"Pad node 'crop': pads \[0, -384\].*negative output shape"):
        sess.run(None, {"x": np.ones(4, np.float32)})  # was "Python integer -384 out of bounds for uint32"


def test_conv_on_an_empty_spatial_input_is_refused_as_onnxruntime_does():
    w = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    sess = _session([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 0, 4])], [w])
    with pytest.raises(ort_core.Fail, match="Conv 'conv'.*empty spatial dimension"):
        sess.run(None, {"x": np.zeros((1, 1, 0, 4), np.float32)})  # was an empty output
