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


def test_the_cycle_check_stops_past_a_group_in_a_sorted_graph():
    """``partition._creates_cycle`` follows no node past the group's last one where the graph is
    sorted (paths only go forward); its answers are the full walk's, on every pair and triple
    of nodes of a layered graph with skips."""
    import itertools

    from ort_core.partition import _creates_cycle

    nodes, last = [], "x"
    for k in range(8):  # v_k = Add(v_{k-1}, v_{k-3}): paths that leave and come back
        skip = f"v{k - 3}" if k >= 3 else "x"
        nodes.append(helper.make_node("Add", [last, skip], [f"v{k}"], name=f"n{k}"))
        last = f"v{k}"
    nodes.append(helper.make_node("Relu", [last], ["y"], name="out"))
    view = _view(nodes)
    assert view.is_sorted and not _view(nodes[::-1]).is_sorted
    unsorted = _view(nodes)
    unsorted.__dict__["is_sorted"] = False  # the full walk
    found = 0
    for size in (2, 3):
        for group in itertools.combinations(range(len(nodes)), size):
            want = _creates_cycle(unsorted, set(group))
            assert _creates_cycle(view, set(group)) == want, group
            found += want
    assert found > 20  # the graph has cycles to find
