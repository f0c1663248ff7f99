"""LSTM/GRU/RNN keep R transposed per R array between runs: parity with onnxruntime when R is a
constant (made once) and when R is fed at run time and changes (never stale). Tolerance: rtol
1e-5, atol 1e-5 (float32, one recurrence)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort


def _model(op: str, gates: int, hidden: int, inp: int, dirs: int, const_r: bool, rng):
    direction = "bidirectional" if dirs == 2 else "forward"
    w = rng.standard_normal((dirs, gates * hidden, inp)).astype(np.float32) * 0.3
    r = rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.3
    b = rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.1
    inits = [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(b, "B")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, None, inp])]
    if const_r:
        inits.append(onnx.numpy_helper.from_array(r, "R"))
    else:
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, list(r.shape)))
    node = helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden, direction=direction)
    graph = helper.make_graph([node], "g", inputs, [
        helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None] * 4),
        helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [None] * 3),
    ], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model.SerializeToString(), r


@pytest.mark.parametrize("op,gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
@pytest.mark.parametrize("dirs", [1, 2])
@pytest.mark.parametrize("const_r", [True, False])
def test_recurrence_weights_cached_per_array(op, gates, dirs, const_r):
    rng = np.random.default_rng(0)
    data, r = _model(op, gates, hidden=6, inp=5, dirs=dirs, const_r=const_r, rng=rng)
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for run in range(3):
        feeds = {"X": rng.standard_normal((4, 2, 5)).astype(np.float32)}
        if not const_r:  # a different R every run: a cached transpose of the first would be wrong
            feeds["R"] = r + np.float32(run * 0.2)
        for a, b in zip(got.run(None, feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
