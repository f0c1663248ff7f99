"""Each lowering against onnxruntime CPU: one-node models, every node on QNN (float32)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from conftest import QNN, F, needs_qnn, one_node_model, reference, session

pytestmark = needs_qnn
rng = np.random.default_rng(1)


def w(*shape):
    return rng.standard_normal(shape).astype(np.float32)


I64 = TensorProto.INT64
X4 = ("x", (1, 8, 10, 10), F)

# name -> (op, inputs, outputs, attributes, (rtol, atol))
CASES = {
    "conv_padded": ("Conv", [X4, ("w", w(6, 8, 3, 3), F), ("b", w(6), F)], [("y", (1, 6, 10, 10), F)], {"pads": [1, 1, 1, 1]}),
    "conv_strided": ("Conv", [X4, ("w", w(6, 8, 3, 3), F)], [("y", (1, 6, 4, 4), F)], {"strides": [2, 2]}),
    "conv_grouped": ("Conv", [X4, ("w", w(4, 4, 3, 3), F)], [("y", (1, 4, 8, 8), F)], {"group": 2}),
    "conv_depthwise": ("Conv", [X4, ("w", w(8, 1, 3, 3), F), ("b", w(8), F)], [("y", (1, 8, 10, 10), F)],
                       {"group": 8, "pads": [1, 1, 1, 1]}),
    "conv_same_upper": ("Conv", [X4, ("w", w(4, 8, 3, 3), F)], [("y", (1, 4, 5, 5), F)],
                        {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "conv_dilated": ("Conv", [X4, ("w", w(4, 8, 3, 3), F)], [("y", (1, 4, 6, 6), F)], {"dilations": [2, 2]}),
    "maxpool": ("MaxPool", [X4], [("y", (1, 8, 5, 5), F)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "maxpool_padded": ("MaxPool", [X4], [("y", (1, 8, 5, 5), F)], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "averagepool": ("AveragePool", [X4], [("y", (1, 8, 4, 4), F)], {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "globalaveragepool": ("GlobalAveragePool", [X4], [("y", (1, 8, 1, 1), F)], {}),
    "gemm": ("Gemm", [("a", (4, 16), F), ("b", w(8, 16), F), ("c", w(8), F)], [("y", (4, 8), F)], {"transB": 1}),
    "gemm_alpha_beta": ("Gemm", [("a", (4, 16), F), ("b", w(16, 8), F), ("c", w(8), F)], [("y", (4, 8), F)],
                        {"alpha": 0.5, "beta": 2.0}),
    "matmul": ("MatMul", [("a", (2, 3, 4, 16), F), ("b", (2, 3, 16, 8), F)], [("y", (2, 3, 4, 8), F)], {}),
    "matmul_const": ("MatMul", [("a", (5, 16), F), ("b", w(16, 8), F)], [("y", (5, 8), F)], {}),
    "add_broadcast": ("Add", [("a", (2, 3, 4), F), ("b", w(4), F)], [("y", (2, 3, 4), F)], {}),
    "sub": ("Sub", [("a", (2, 3, 4), F), ("b", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "mul": ("Mul", [("a", (2, 3, 4), F), ("b", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "div": ("Div", [("a", (2, 3, 4), F), ("b", np.full((2, 3, 4), 1.5, np.float32), F)], [("y", (2, 3, 4), F)], {}),
    "max": ("Max", [("a", (2, 3, 4), F), ("b", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "min": ("Min", [("a", (2, 3, 4), F), ("b", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "relu": ("Relu", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "sigmoid": ("Sigmoid", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "tanh": ("Tanh", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "exp": ("Exp", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "neg": ("Neg", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "abs": ("Abs", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),
    "clip": ("Clip", [("x", (2, 3, 4), F), ("lo", np.array(-0.5, np.float32), F), ("hi", np.array(0.7, np.float32), F)],
             [("y", (2, 3, 4), F)], {}),
    "leakyrelu": ("LeakyRelu", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {"alpha": 0.1}),
    "hardswish": ("HardSwish", [("x", (2, 3, 4), F)], [("y", (2, 3, 4), F)], {}),


    "softmax": ("Softmax", [("x", (2, 3, 16), F)], [("y", (2, 3, 16), F)], {}),
    "softmax_axis1": ("Softmax", [("x", (2, 3, 16), F)], [("y", (2, 3, 16), F)], {"axis": 1}),
    "layernorm": ("LayerNormalization", [("x", (2, 6, 32), F), ("g", w(32), F), ("b", w(32), F)], [("y", (2, 6, 32), F)],
                  {"epsilon": 1e-5}),
    "batchnorm": ("BatchNormalization", [X4, ("s", w(8), F), ("b", w(8), F), ("m", w(8), F),
                                         ("v", np.abs(w(8)) + 0.5, F)], [("y", (1, 8, 10, 10), F)], {}),
    "concat": ("Concat", [("a", (2, 3, 4), F), ("b", (2, 5, 4), F)], [("y", (2, 8, 4), F)], {"axis": 1}),
    "reshape": ("Reshape", [("x", (2, 3, 4), F), ("s", np.array([4, 6], np.int64), I64)], [("y", (4, 6), F)], {}),
    "flatten": ("Flatten", [("x", (2, 3, 4), F)], [("y", (2, 12), F)], {}),
    "transpose": ("Transpose", [("x", (2, 3, 4), F)], [("y", (4, 2, 3), F)], {"perm": [2, 0, 1]}),
    "slice": ("Slice", [("x", (6, 8), F), ("st", np.array([1, 0], np.int64), I64), ("en", np.array([5, 8], np.int64), I64),
                        ("ax", np.array([0, 1], np.int64), I64), ("sp", np.array([2, 3], np.int64), I64)],
              [("y", (2, 3), F)], {}),
    "slice_negative": ("Slice", [("x", (6, 8), F), ("st", np.array([-3], np.int64), I64), ("en", np.array([100], np.int64), I64),
                                 ("ax", np.array([1], np.int64), I64)], [("y", (6, 3), F)], {}),

    "split": ("Split", [("x", (2, 6), F), ("s", np.array([2, 4], np.int64), I64)], [("y0", (2, 2), F), ("y1", (2, 4), F)],
              {"axis": 1}),
    "reducemean": ("ReduceMean", [("x", (2, 3, 4), F), ("a", np.array([1], np.int64), I64)], [("y", (2, 1, 4), F)], {}),
    "reducesum": ("ReduceSum", [("x", (2, 3, 4), F), ("a", np.array([-1], np.int64), I64)], [("y", (2, 3), F)],
                  {"keepdims": 0}),
    "reducemax": ("ReduceMax", [("x", (2, 3, 4), F)], [("y", (2, 1, 1), F)], {"axes": [1, 2]}),
    "cast_to_int32": ("Cast", [("x", (2, 3), F)], [("y", (2, 3), TensorProto.INT32)], {"to": TensorProto.INT32}),
    "resize_nearest": ("Resize", [X4, ("", None, 0), ("sc", np.array([1, 1, 2, 2], np.float32), F)],
                       [("y", (1, 8, 20, 20), F)], {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                                    "nearest_mode": "floor"}),
    "resize_linear": ("Resize", [X4, ("", None, 0), ("sc", np.array([1, 1, 2, 2], np.float32), F)],
                      [("y", (1, 8, 20, 20), F)], {"mode": "linear"}),
}
# opset 20 for Gelu
OPSETS = {"reducemean": 18}
# float32 on HTP is full float32 except where noted (measured on the simulator)
TOLERANCES = {"layernorm": (1e-2, 5e-3)}


@pytest.mark.parametrize("case", sorted(c for c in CASES if not c.startswith("__")))
def test_op_matches_onnxruntime(case):
    op, inputs, outputs, attrs = CASES[case]
    model, feeds = one_node_model(op, inputs, outputs, opset=OPSETS.get(case, 17), **attrs)
    sess = session(model)
    placement = sess.get_placement()
    assert placement.counts() == {QNN: 1}, placement.nodes[0].declined
    rtol, atol = TOLERANCES.get(case, (1e-4, 1e-5))
    actual = sess.run(None, feeds)
    expected = reference(model, feeds)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op,attrs", [("Gather", {"axis": 0}), ("Elu", {}), ("Gelu", {})])
def test_ops_the_simulator_cannot_finalize_are_declined_with_the_reason(op, attrs):
    if op == "Gather":
        model, feeds = one_node_model(op, [("x", (5, 4), F), ("i", np.array([1, 0], np.int64), I64)], [("y", (2, 4), F)], **attrs)
    else:
        model, feeds = one_node_model(op, [("x", (2, 3), F)], [("y", (2, 3), F)], opset=20, **attrs)
    sess = session(model)
    node = sess.get_placement().nodes[0]
    assert node.provider == "CPUExecutionProvider"
    assert "fails graphFinalize" in node.declined[QNN] and op in node.declined[QNN]
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0], rtol=1e-6)
