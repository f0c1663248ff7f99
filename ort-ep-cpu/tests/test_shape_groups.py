"""Shape computations as one remembered step (``kernels/shape_group.py``): per root tensor, its
Shape/Size nodes and the pure ops computed from them and constants run once per root shape and
are remembered; nodes that read data (or a second root) stay out, so a run on new values of the
same shape is computed anew. Every run is checked against onnxruntime, across shapes that come
back, and a remembered output handed to the caller cannot change the next runs. ``per_shape``
keeps what it works out for a Reshape target by the target's values: a feed changed in place
between runs, or a view whose owner changed it, is read again."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_ep_cpu.kernels import shape_group


def _model() -> bytes:
    i64 = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather_rows", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Size", ["x"], ["size"], name="size"),
        helper.make_node("Cast", ["size"], ["size_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["x"], ["total"], name="reduce", keepdims=0),
        helper.make_node("Add", ["size_f", "total"], ["mixed"], name="add_data"),  # reads data
        helper.make_node("Gather", ["s", "one"], ["c"], name="gather_cols", axis=0),
        helper.make_node("Mul", ["c", "two"], ["c2"], name="double"),
        helper.make_node("Unsqueeze", ["c2", "axes0"], ["c2v"], name="unsqueeze_cols"),
        helper.make_node("ConstantOfShape", ["c2v"], ["zeros"], name="zeros",
                         value=numpy_helper.from_array(np.array([1.5], np.float32))),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c"])],
        [helper.make_tensor_value_info(n, t, None) for n, t in (
            ("flat", TensorProto.FLOAT), ("mixed", TensorProto.FLOAT), ("target", TensorProto.INT64),
            ("zeros", TensorProto.FLOAT))],
        [i64("zero", 0), i64("one", 1), i64("two", 2), i64("axes0", [0]), i64("minus_one", [-1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def test_the_shape_arithmetic_of_a_root_is_one_group_and_data_readers_stay_out():
    session = ort.InferenceSession(_model(), providers=["CPUExecutionProvider"])
    groups = {p.name: p.group for p in session.get_placement().nodes}
    members = ["shape", "gather_rows", "unsqueeze", "concat", "size", "cast", "gather_cols", "double",
               "unsqueeze_cols", "zeros"]
    assert groups["shape"] is not None and all(groups[m] == groups["shape"] for m in members), groups
    assert all(groups[m] is None for m in ("reshape", "reduce", "add_data")), groups


def test_runs_on_shapes_that_come_back_and_on_new_values_equal_onnxruntime():
    data = _model()
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    # (4, 3000): ConstantOfShape makes 6000 values, more than a group remembers
    for shape in [(2, 3), (4, 5), (2, 3), (4, 3000), (4, 5), (2, 3), (4, 3000)]:
        x = rng.standard_normal(shape).astype(np.float32)  # new values every run
        got = session.run(None, {"x": x})
        for g, e in zip(got, reference.run(None, {"x": x})):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-5)
        got[2][:] = 99  # the caller's copy: the remembered target stays as it was
        got[3][:] = 99


def test_remembered_outputs_are_read_only_arrays_that_own_their_memory():
    array = np.arange(3, dtype=np.int64)
    kept = shape_group._read_only(array)
    assert not kept.flags.writeable and kept.base is None
    assert array.flags.writeable  # the source (an initializer's array, say) is left as it was


def _reshape_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def test_a_fed_shape_changed_between_runs_is_read_again():
    session = ort.InferenceSession(_reshape_model(), providers=["CPUExecutionProvider"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    owner = np.array([3, 2], np.int64)
    view = owner.view()
    view.flags.writeable = False  # read-only, but a view: its owner can still change it
    assert session.run(None, {"x": x, "shape": view})[0].shape == (3, 2)
    owner[:] = [1, 6]
    assert session.run(None, {"x": x, "shape": view})[0].shape == (1, 6)
    fed = np.array([6, 1], np.int64)  # writeable: changed in place between runs
    assert session.run(None, {"x": x, "shape": fed})[0].shape == (6, 1)
    fed[:] = [2, 3]
    assert session.run(None, {"x": x, "shape": fed})[0].shape == (2, 3)


def test_a_member_that_fails_is_named_in_the_error():
    i64 = np.array([2, 2], np.int64)
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Reshape", ["s", "square"], ["y"], name="bad_reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, None])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [numpy_helper.from_array(i64, "square")],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert {p.name: p.group for p in session.get_placement().nodes}["bad_reshape"] is not None
    with pytest.raises(ort.OrtError, match="Reshape node 'bad_reshape' of the shape group"):
        session.run(None, {"x": np.zeros((1, 2, 3), np.float32)})  # 3 values cannot be 2 x 2
