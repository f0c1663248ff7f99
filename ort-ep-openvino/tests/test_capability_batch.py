"""OpenVINO is asked about a graph's nodes in one device query; the answers are those each
node cut out alone gets (the per-node query they replace)."""

from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.graph.load import load_model
from ort_core.testing import models
from ort_ep_openvino import capability


def _view(proto) -> ort.GraphView:
    m = load_model(proto) if not isinstance(proto, ir.Model) else proto
    return ort.GraphView(m.graph, opset_imports=dict(m.opset_imports), ir_version=m.ir_version)


def _mixed_graph():
    """Alike nodes (asked once), one the frontend cannot convert, ops of several kinds."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),  # the same signature as the first
        helper.make_node("Einsum", ["b"], ["c"], equation="ij->ji->k"),  # does not convert
        helper.make_node("Sigmoid", ["x"], ["d"]),
        helper.make_node("Softmax", ["d"], ["e"], axis=-1),
        helper.make_node("TopK", ["e", "k"], ["v", "i"], axis=-1),  # declined before OpenVINO is asked
    ]
    k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("c", "v")]
    graph = helper.make_graph(nodes, "g", [x], outputs, [k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ir.serde.deserialize_model(model)


def _one_by_one(view: ort.GraphView, hints) -> dict[int, str | None]:
    """Each node asked alone (one device query per node model)."""
    return {node.index: capability.decline_reason(view, node, "CPU", hints) for node in view.nodes}


def _compare(view: ort.GraphView, hints, calls: list) -> dict[int, str | None]:
    capability._cache.clear()
    want = _one_by_one(view, hints)
    capability._cache.clear()
    calls.clear()
    got = capability.decline_reasons(view, range(len(view.nodes)), "CPU", hints)
    assert got == want
    return got


def test_batched_answers_are_the_per_node_answers(monkeypatch):
    calls: list[int] = []
    query = capability.query
    monkeypatch.setattr(capability, "query", lambda model, device: calls.append(1) or query(model, device))
    for proto in (_mixed_graph(), models.cnn(image=16, width=8, blocks=1), models.transformer(
            vocab=50, seq=8, dim=16, heads=2, layers=1)):
        view = _view(proto)
        _compare(view, capability.survey(view, range(len(view.nodes)), "CPU").hints, calls)
        assert len(calls) <= 1  # one joint query (none where nothing needed asking)


def test_a_failing_joint_query_falls_back_to_one_query_per_node(monkeypatch):
    """Without shape hints the Softmax's model makes the device query raise: each node is then
    asked alone and keeps its own answer (the Relu of an unknown-shape input is unsupported)."""
    calls: list[int] = []
    query = capability.query
    monkeypatch.setattr(capability, "query", lambda model, device: calls.append(1) or query(model, device))
    got = _compare(_view(_mixed_graph()), None, calls)
    assert len(calls) > 1
    assert got[0] is None and got[3] is None
    assert "Einsum" in got[2] and got[5] == capability.DIVERGENT_OPS["TopK"]
    assert got[4] is not None and got[4].startswith("CPU cannot take Softmax")
