"""Capability: backendValidateOpConfig is asked about every node; reasons name the node, the
QNN op and QNN's answer; a group graphFinalize refuses is split at the op QNN names."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import CPU, QNN, F, needs_qnn, one_node_model, reference, session
from ort_ep_qnn import _qnn as Q
from ort_ep_qnn import lowering
from ort_ep_qnn.runtime import Backend, OpSpec, TensorSpec

pytestmark = needs_qnn
f32 = np.dtype(np.float32)


def test_validate_refuses_a_wrong_output_shape_that_add_node_would_accept():
    backend = Backend(Q.load(Q.find_library("")))
    try:
        x, y = TensorSpec("x", f32, (2, 3), "in"), TensorSpec("y", f32, (2, 3), "in")
        good = OpSpec("add", "ElementWiseAdd", [x, y], [TensorSpec("o", f32, (2, 3), "out")])
        bad = OpSpec("add", "ElementWiseAdd", [x, y], [TensorSpec("o", f32, (5, 3), "out")])
        assert backend.validate(good) == (0, "", "")
        code, message, detail = backend.validate(bad)
        assert code == 3110 and "VALIDATION_FAILURE" in message
        assert "incorrect dimension" in detail
    finally:
        backend.close()


def test_declined_node_reason_names_node_qnn_op_and_qnn_error():
    # a rank-0 graph input: QNN wants NULL dimensions and refuses it in ElementWiseAdd
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ())
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ())
    node = helper.make_node("Add", ["x", "x"], ["y"], name="scalar_add")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    sess = session(model)
    (p,) = sess.get_placement().nodes
    feeds = {"x": np.array(1.5, np.float32)}
    if p.provider == QNN:  # the backend took it: then it must be right
        np.testing.assert_array_equal(sess.run(None, feeds)[0], reference(model, feeds)[0])
    else:
        reason = p.declined[QNN]
        assert "scalar_add" in reason and "ElementWiseAdd" in reason and "error" in reason


def test_int64_is_declined_before_asking_qnn():
    model, feeds = one_node_model("Relu", [("x", (2, 3), TensorProto.INT64)], [("y", (2, 3), TensorProto.INT64)])
    (p,) = session(model).get_placement().nodes
    assert p.provider == CPU and "int64 tensor 'x': the HTP backend has no int64" in p.declined[QNN]


def test_unknown_op_reason():
    model, _ = one_node_model("Erf", [("x", (2, 3), F)], [("y", (2, 3), F)])
    (p,) = session(model).get_placement().nodes
    assert p.declined[QNN] == "Erf Erf_0: Erf: no QNN lowering"


def _sub_mul_model():
    nodes = [helper.make_node("Sub", ["a", "b"], ["d"], name="sub"), helper.make_node("Mul", ["d", "a"], ["m"], name="mul"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, (2, 64)) for n in ("a", "b", "y")]
    return helper.make_model(helper.make_graph(nodes, "g", vi[:2], vi[2:]), opset_imports=[helper.make_opsetid("", 17)])


def _feeds():
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal((2, 64)).astype(np.float32) for k in ("a", "b")}


def test_sub_feeding_mul_runs_on_qnn_as_add_of_the_negation():
    model = _sub_mul_model()
    sess = session(model)
    assert sess.get_placement().counts() == {QNN: 3}
    feeds = _feeds()
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0], rtol=1e-6, atol=1e-7)


def test_a_group_graph_finalize_refuses_is_split_at_the_op_qnn_names(monkeypatch):
    # QNN's own ElementWiseSubtract feeding a Mul fails graphFinalize on the simulator (error
    # 1002, "could not create op"): with that lowering, the Sub node is declined naming the
    # finalize error, and Mul and Relu still run on QNN
    def raw_sub(L, node):
        L.op("ElementWiseSubtract", [L.tensor(n) for n in node.inputs], [L.tensor(node.outputs[0])])

    monkeypatch.setitem(lowering.LOWERINGS, "Sub", raw_sub)
    model = _sub_mul_model()
    sess = session(model)
    by_name = {p.name: p for p in sess.get_placement().nodes}
    assert by_name["sub"].provider == CPU
    assert "graphFinalize" in by_name["sub"].declined[QNN] and "1002" in by_name["sub"].declined[QNN]
    assert by_name["mul"].provider == QNN and by_name["relu"].provider == QNN
    feeds = _feeds()
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op,attrs,reason", [
    ("Resize", {"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize"}, "not lowered"),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}, "dilations"),
])
def test_attribute_forms_not_lowered_are_declined_with_the_reason(op, attrs, reason):
    if op == "Resize":
        model, _ = one_node_model(op, [("x", (1, 2, 4, 4), F), ("", None, 0), ("s", np.array([1, 1, 2, 2], np.float32), F)],
                                  [("y", (1, 2, 8, 8), F)], **attrs)
    else:
        model, _ = one_node_model(op, [("x", (1, 2, 8, 8), F)], [("y", (1, 2, 6, 6), F)], **attrs)
    (p,) = session(model).get_placement().nodes
    assert p.provider == CPU and reason in p.declined[QNN]


def test_graph_outputs_also_read_inside_the_group():
    nodes = [helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Sigmoid", ["y1"], ["y2"]),
             helper.make_node("Add", ["y1", "y2"], ["y3"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, (2, 16)) for n in ("y1", "y3", "y2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 16))], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = session(model)
    assert sess.get_placement().counts() == {QNN: 3}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)}
    for a, e in zip(sess.run(None, feeds), reference(model, feeds)):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


def _shape_chain_model():
    # tf2onnx's LSTM initial state: zeros of [1, hidden] built from the input's shape
    # (Shape -> Cast int32 -> Slice -> Concat with the hidden size -> Cast int64 -> Expand)
    ints = lambda name, v, t=np.int64: helper.make_tensor(name, TensorProto.INT32 if t == np.int32 else  # noqa: E731
                                                          TensorProto.INT64, [len(v)], v)
    nodes = [helper.make_node("Shape", ["x"], ["s64"]), helper.make_node("Cast", ["s64"], ["s"], to=TensorProto.INT32),
             helper.make_node("Slice", ["s", "zero", "one", "zero"], ["batch"]),
             helper.make_node("Concat", ["batch", "hidden"], ["dims32"], axis=0),
             helper.make_node("Cast", ["dims32"], ["dims"], to=TensorProto.INT64),
             helper.make_node("Expand", ["fill", "dims"], ["zeros"]),
             helper.make_node("ReduceSum", ["x", "axis1"], ["pooled"], keepdims=0),
             helper.make_node("Add", ["pooled", "zeros"], ["y"])]
    inits = [ints("zero", [0]), ints("one", [1]), ints("hidden", [8], np.int32), ints("axis1", [1]),
             helper.make_tensor("fill", F, [1], [0.5])]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", F, ["batch", 4, 8])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_shape_computations_are_left_to_the_cpu():
    # On the simulator an int32 StridedSlice -> Concat returned [1, 4] here instead of [1, 8]
    # (onnxruntime's QNN EP too): the g2p LSTM, openWakeWord and magika models failed in their
    # Expand/Reshape. Shape arithmetic stays on the CPU, as onnxruntime places it.
    model = _shape_chain_model()
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 8)).astype(np.float32)}
    sess = session(model)
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0], rtol=1e-5, atol=1e-6)
    placement = {p.op_type: (p.provider, p.declined) for p in sess.get_placement().nodes}
    assert placement["ReduceSum"][0] == QNN
    for op in ("Slice", "Concat"):
        provider, reasons = placement[op]
        assert provider == CPU and "shape computation, left to the CPU" in reasons[QNN]


def test_the_refusal_cause_is_the_line_before_the_first_error_at_any_log_level():
    # at QNN's error level the cause comes first; at a verbose level setup and <V>/<I> lines
    # come first (a session left at verbose made the reason "validate OpConfig with ...")
    from ort_ep_qnn.runtime import _cause

    cause = "Out[0] has incorrect dimension at index 0. Expected 2 but got 5."
    failed = "<E> validateNativeOps master op validator add:qti.aisw:ElementWiseAdd failed 3110"
    assert _cause([cause, cause, "Op specific validation failed.", failed, cause]) == cause
    verbose = ["validate OpConfig with QnnGraphTransformerAdapter", "<V> RouterX86 tryLoadPrepare",
               "c_interface.cc:156:Creating environment", "<I> QnnBackend_validateOpConfig started",
               cause, "Op specific validation failed.", failed]
    assert _cause(verbose) == cause
    assert _cause([failed]) == failed and _cause([]) == ""
