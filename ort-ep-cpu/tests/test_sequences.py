"""Sequences and optionals end to end: as session inputs and outputs, and through the ops."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort

F = TensorProto.FLOAT
SEQ_F = helper.make_tensor_sequence_value_info


def _model(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _seq_model():
    # in: a sequence; out: it with x inserted at 1, the element 0 removed, its length, and
    # the concatenation of the result along a new axis
    nodes = [
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("c1", TensorProto.INT64, [], [1])),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("c0", TensorProto.INT64, [], [0])),
        helper.make_node("SequenceInsert", ["seq", "x", "one"], ["s1"]),
        helper.make_node("SequenceErase", ["s1", "zero"], ["s2"]),
        helper.make_node("SequenceLength", ["s2"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["stacked"], axis=0, new_axis=1),
    ]
    return _model(
        nodes,
        [SEQ_F("seq", F, [2]), helper.make_tensor_value_info("x", F, [2])],
        [SEQ_F("s2", F, [2]), helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("stacked", F, [None, 2])],
    )


def test_sequence_inputs_and_outputs_are_lists_of_arrays():
    model = _seq_model()
    seq = [np.array([1, 2], dtype=np.float32), np.array([3, 4], dtype=np.float32)]
    feeds = {"seq": seq, "x": np.array([9, 9], dtype=np.float32)}
    ours = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert isinstance(ours[0], list) and len(ours[0]) == len(theirs[0]) == 2
    for a, b in zip(ours[0], theirs[0]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_array_equal(ours[2], theirs[2])
    assert seq[0].tolist() == [1, 2] and len(seq) == 2  # the caller's list is not mutated


def test_sequence_input_is_checked():
    session = ort.InferenceSession(_seq_model().SerializeToString())
    x = np.zeros(2, dtype=np.float32)
    with pytest.raises(ort.InvalidArgument, match="'seq'.*list of arrays"):
        session.run(None, {"seq": np.zeros(2, dtype=np.float32), "x": x})
    with pytest.raises(ort.InvalidArgument, match=r"seq\[1\].*int64"):
        session.run(None, {"seq": [x, np.zeros(2, dtype=np.int64)], "x": x})


def test_split_to_sequence_and_sequence_map():
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["t"], ["s"], keepdims=0)],
        "body", [helper.make_tensor_value_info("t", F, None)], [helper.make_tensor_value_info("s", F, None)],
    )
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=1),
        helper.make_node("SequenceMap", ["parts"], ["sums"], body=body),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 5]), helper.make_tensor_value_info("sizes", TensorProto.INT64, [3])],
        [SEQ_F("parts", F, None), SEQ_F("sums", F, None)],
    )
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    feeds = {"x": x, "sizes": np.array([1, 3, 1], dtype=np.int64)}
    ours = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for mine, ref in zip(ours, theirs):
        assert len(mine) == len(ref)
        for a, b in zip(mine, ref):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b)


def _optional_model():
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    nodes = [
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("Identity", ["o"], ["o_out"]),
    ]
    return _model(
        nodes,
        [helper.make_value_info("o", opt_type)],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, []), helper.make_value_info("o_out", opt_type)],
    )


def test_optional_input_none_and_value():
    session = ort.InferenceSession(_optional_model().SerializeToString())
    has, out = session.run(None, {"o": None})
    assert not has and out is None
    value = np.array([1.0, 2.0], dtype=np.float32)
    has, out = session.run(None, {"o": value})
    assert has
    np.testing.assert_array_equal(out, value)
    with pytest.raises(ort.InvalidArgument, match="'o'.*float"):
        session.run(None, {"o": np.array([1, 2], dtype=np.int64)})


def test_optional_get_element_of_empty_names_the_node():
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    model = _model(
        [helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")],
        [helper.make_value_info("o", opt_type)],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    session = ort.InferenceSession(model.SerializeToString())
    with pytest.raises(ort.Fail, match="get.*empty"):
        session.run(None, {"o": None})


def test_constant_sequences_are_not_folded_into_tensors():
    # every input of SequenceConstruct is constant: constant folding must leave the list alone
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2]))
    nodes = [
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", F, [2], [1.0, 2.0])),
        helper.make_node("SequenceConstruct", ["c", "c"], ["s"]),
        helper.make_node("Optional", ["s"], ["o"]),
    ]
    model = _model(nodes, [], [helper.make_value_info("o", helper.make_optional_type_proto(seq_type))])
    (out,) = ort.InferenceSession(model.SerializeToString()).run(None, {})
    assert isinstance(out, list) and len(out) == 2
    np.testing.assert_array_equal(out[1], [1.0, 2.0])


def test_non_tensor_outputs_through_ort_values_io_binding_and_node_args():
    """A sequence output through run_with_ort_values and an I/O binding, and a ZipMap's
    seq(map) output's NodeArg and OrtValue, as onnxruntime gives them (both crashed: an
    OrtValue's data_type read the list's dtype, copy_outputs_to_cpu made one array of it)."""
    seq = _model([helper.make_node("SequenceConstruct", ["a", "b"], ["s"])],
                 [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
                  helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                 [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    feeds = {"a": np.zeros(2, np.float32), "b": np.ones(3, np.float32)}
    for module in (onnxruntime, ort):
        session = module.InferenceSession(seq.SerializeToString(), providers=["CPUExecutionProvider"])
        (value,) = session.run_with_ort_values(None, {k: module.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()})
        assert (value.is_tensor(), value.is_tensor_sequence(), value.data_type()) == (False, True, "seq(tensor(float))")
        assert (session.get_outputs()[0].type, session.get_outputs()[0].shape) == ("seq(tensor(float))", [])
        binding = session.io_binding()
        for k, v in feeds.items():
            binding.bind_cpu_input(k, v)
        binding.bind_output("s")
        session.run_with_iobinding(binding)
        (copied,) = binding.copy_outputs_to_cpu()
        assert [c.tolist() for c in copied] == [[0, 0], [1, 1, 1]]
    zipmap = helper.make_model(helper.make_graph(
        [helper.make_node("ZipMap", ["p"], ["z"], domain="ai.onnx.ml", classlabels_int64s=[3, 7])], "g",
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [None, 2])],
        [helper.make_value_info("z", helper.make_sequence_type_proto(
            helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    zipmap.ir_version = 8
    p = {"p": np.array([[0.25, 0.75]], np.float32)}
    for module in (onnxruntime, ort):
        session = module.InferenceSession(zipmap.SerializeToString(), providers=["CPUExecutionProvider"])
        assert (session.get_outputs()[0].type, session.get_outputs()[0].shape) == ("seq(map(int64,tensor(float)))", [])
        (value,) = session.run_with_ort_values(None, {"p": module.OrtValue.ortvalue_from_numpy(p["p"])})
        assert value.data_type() == "seq(map(int64,tensor(float)))" and not value.is_tensor_sequence()


def test_an_optional_input_may_be_left_out():
    # onnxruntime runs it with no value (OptionalHasElement gives False)
    model = _model([helper.make_node("OptionalHasElement", ["x"], ["y"])],
                   [helper.make_value_info("x", helper.make_optional_type_proto(
                       helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))],
                   [helper.make_tensor_value_info("y", TensorProto.BOOL, [])])
    for module in (onnxruntime, ort):
        session = module.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert bool(session.run(None, {})[0]) is False
        assert bool(session.run(None, {"x": np.ones(2, np.float32)})[0]) is True
