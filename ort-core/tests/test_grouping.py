"""ort_core.grouping.fusable_groups: supported nodes split into groups that fuse without a cycle."""

from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper

from ort_core import GraphView
from ort_core.grouping import fusable_groups


def _view(nodes) -> GraphView:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return GraphView(model.graph, opset_imports=dict(model.opset_imports), ir_version=model.ir_version)


def test_a_group_that_would_leave_and_come_back_is_split():
    # a -> b -> c and a -> c: with b unsupported, {a, c} fused would be a cycle through b
    view = _view([
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["a"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["y"], name="c"),
    ])
    assert fusable_groups(view, {0, 2}) == [(0,), (2,)]
    assert fusable_groups(view, {0, 1, 2}) == [(0, 1, 2)]


def test_unconnected_supported_nodes_are_separate_groups():
    view = _view([
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["a"], ["b"], name="b"),
        helper.make_node("Relu", ["b"], ["c"], name="c"),
        helper.make_node("Neg", ["c"], ["y"], name="d"),
    ])
    assert fusable_groups(view, {0, 2, 3}) == [(0,), (2, 3)]
