"""``ort_core.testing.exact_reference``: onnxruntime's answers for integer models equal the exact
integer arithmetic on every CPU, those whose onnxruntime saturates uint8 x int8 included."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_core.testing import exact_reference

onnxruntime = pytest.importorskip("onnxruntime")
MS = "com.microsoft"


def _model(nodes, inputs, inits, outputs, opsets=(("", 17),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def _saturating_operands(k: int = 64):
    """uint8 x int8 operands whose pairs overflow int16 (255 * 127 * 2 > 32767)."""
    rng = np.random.default_rng(0)
    a = rng.integers(200, 256, (3, k)).astype(np.uint8)
    b = rng.integers(100, 128, (k, 5)).astype(np.int8)
    b[:, 0] = -128
    return a, b


def test_matmul_integer_is_exact():
    a, b = _saturating_operands()
    model = _model([helper.make_node("MatMulInteger", ["a", "b", "", "zb"], ["y"])],
                   [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
                   [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(-3, np.int8), "zb")],
                   [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    got = exact_reference.session(model).run(None, {"a": a})[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ (b.astype(np.int64) + 3))


def test_qdq_weights_without_a_zero_point_and_shared_are_exact():
    """A DequantizeLinear weight with no zero point (int8's is 0: 128 as uint8), read by two
    nodes; the float answer is the exact integer product times the scales."""
    a, b = _saturating_operands()
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "sb"], ["bf"], axis=1),
             helper.make_node("MatMul", ["af", "bf"], ["y"]),
             helper.make_node("Identity", ["b"], ["b_out"])]
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(0.5, np.float32), "sa"),
             numpy_helper.from_array(np.array(0, np.uint8), "za"),
             numpy_helper.from_array(np.full(5, 0.25, np.float32), "sb")]
    model = _model(nodes, [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)], inits,
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("b_out", TensorProto.INT8, None)])
    rewritten = exact_reference.with_uint8_weights(model)
    assert any(t.data_type == TensorProto.UINT8 and t.name.startswith("b") for t in rewritten.graph.initializer)
    y, b_out = exact_reference.session(model).run(None, {"a": a})
    np.testing.assert_array_equal(y, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32) * np.float32(0.125))
    np.testing.assert_array_equal(b_out, b)  # the int8 original stays for its other reader


def test_int8_activations_are_left_alone():
    """onnxruntime has no int8 x uint8 MatMulIntegerToFloat: an int8 A keeps its int8 B."""
    a, b = _saturating_operands()
    model = _model([helper.make_node("MatMulIntegerToFloat", ["a", "b", "sa", "sb"], ["y"], domain=MS)],
                   [helper.make_tensor_value_info("a", TensorProto.INT8, a.shape)],
                   [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(1.0, np.float32), "sa"),
                    numpy_helper.from_array(np.array(1.0, np.float32), "sb")],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opsets=(("", 17), (MS, 1)))
    assert exact_reference.with_uint8_weights(model).graph.node[0].input[1] == "b"
    a8 = (a.astype(np.int16) - 128).astype(np.int8)
    got = exact_reference.session(model).run(None, {"a": a8})[0]
    np.testing.assert_array_equal(got, (a8.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


def test_dynamic_quantize_lstm_gets_a_zero_point_per_direction():
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (2, 4, 12)).astype(np.int8)
    r = rng.integers(-128, 128, (2, 3, 12)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r"),
             numpy_helper.from_array(np.full(2, 0.01, np.float32), "ws"),
             numpy_helper.from_array(np.full(2, 0.01, np.float32), "rs"),
             numpy_helper.from_array(np.zeros(2, np.int8), "wz"), numpy_helper.from_array(np.zeros(2, np.int8), "rz")]
    # (all twelve inputs: onnxruntime's schema requires both zero points)
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"], ["y"],
                            domain=MS, hidden_size=3, direction="bidirectional")
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 4])], inits,
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opsets=(("", 17), (MS, 1)))
    rewritten = exact_reference.with_uint8_weights(model)
    zero_points = {t.name: numpy_helper.to_array(t) for t in rewritten.graph.initializer}
    node = rewritten.graph.node[0]
    for zp in (node.input[9], node.input[11]):
        np.testing.assert_array_equal(zero_points[zp], np.full(2, 128, np.uint8))
    x = rng.standard_normal((2, 1, 4)).astype(np.float32)
    # the same integers: onnxruntime gives the same answer for both forms where it is exact
    if not exact_reference.onnxruntime_saturates_u8s8():
        want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_array_equal(exact_reference.session(rewritten).run(None, {"x": x})[0], want[0])
    else:
        assert exact_reference.session(model).run(None, {"x": x})[0].shape == (2, 2, 1, 3)


def test_weights_inside_a_branch_are_written_too():
    """A MatMulInteger inside an If branch, its int8 weight an outer initializer."""
    a, b = _saturating_operands()
    branch = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y_branch"])], "branch", [],
                               [helper.make_tensor_value_info("y_branch", TensorProto.INT32, None)])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    model = _model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape),
                            helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                   [numpy_helper.from_array(b, "b")], [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    inner = exact_reference.with_uint8_weights(model).graph.node[0].attribute[0].g.node[0]
    assert inner.input[1] != "b" and inner.input[3]  # the uint8 twin and its zero point 128
    got = exact_reference.session(model).run(None, {"a": a, "cond": np.array(True)})[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
