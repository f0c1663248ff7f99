"""Dynamic shapes, the per-shape LRU, concurrent runs, devices, grouping without cycles."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import CPU, OV, assert_parity, ov_state, reference, session
from ort_core.grouping import fusable_groups
from ort_core.testing import models


@pytest.fixture(scope="module")
def cnn():
    return models.cnn(image=32, width=8, blocks=2)


def test_symbolic_batch_static_models_then_the_dynamic_one(cnn):
    sess = session(cnn, {"shape_cache_size": "2"})
    (kernel,) = ov_state(sess)["kernels"]
    assert kernel.compilations == 1  # the dynamic-shape model, at session creation
    for batch in (1, 4, 2, 7, 1):
        feeds = models.random_inputs(cnn, batch=batch, seed=batch)
        assert_parity(sess.run(None, feeds), reference(cnn.SerializeToString(), feeds))
    # static models for the first two shapes (1, 4); 2 and 7 run on the dynamic model
    assert kernel.compilations == 3
    assert [s[0][0] for s in kernel.cached_shapes] == [4, 1]


def test_static_shapes_lru_is_bounded(cnn):
    sess = session(cnn, {"disable_dynamic_shapes": "true", "shape_cache_size": "2"})
    (kernel,) = ov_state(sess)["kernels"]
    assert kernel.compilations == 0  # nothing compiled until a shape is seen
    for batch in (1, 2, 1, 3, 1):
        feeds = models.random_inputs(cnn, batch=batch, seed=batch)
        assert_parity(sess.run(None, feeds), reference(cnn.SerializeToString(), feeds))
    # 1, 2 compiled; 1 hit; 3 compiled (evicts 2); 1 hit (most recently used before 3)
    assert kernel.compilations == 3
    assert [s[0][0] for s in kernel.cached_shapes] == [3, 1]


def test_concurrent_runs_are_correct(cnn):
    sess = session(cnn)
    inputs = [models.random_inputs(cnn, batch=1 + k % 3, seed=k) for k in range(16)]
    expected = [sess.run(None, feeds)[0] for feeds in inputs]
    errors: list[str] = []

    def worker(offset: int) -> None:
        for k in range(len(inputs)):
            j = (k + offset) % len(inputs)
            got = sess.run(None, inputs[j])[0]
            if not np.array_equal(got, expected[j]):
                errors.append(f"thread {offset}, input {j}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_devices_have_full_names():
    import openvino as ov

    core = ov.Core()
    devices = ort.registry().devices(OV).devices
    assert [d.metadata["ov_device"] for d in devices] == list(core.available_devices)
    for d in devices:
        assert d.name == core.get_property(d.metadata["ov_device"], "FULL_DEVICE_NAME")
        assert d.memory == "Cpu"  # data stays in host memory: no copies inserted
    assert ort.get_available_providers()[:1] == [OV]


def _chain_with_side_path():
    """x -> Relu(a) -> Sigmoid(b) -> Add(a, b) -> Neg: with Sigmoid declined, fusing
    {Relu, Add, Neg} would create a cycle through Sigmoid."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Sigmoid", ["a"], ["b"], name="sigmoid"),
        helper.make_node("Add", ["a", "b"], ["c"], name="add"),
        helper.make_node("Neg", ["c"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_groups_split_to_avoid_cycles():
    import onnx_ir as ir

    model = ir.serde.deserialize_model(_chain_with_side_path())
    view = ort.GraphView(model.graph, opset_imports=dict(model.opset_imports))
    assert fusable_groups(view, {0, 1, 2, 3}) == [(0, 1, 2, 3)]
    assert fusable_groups(view, {0, 2, 3}) == [(0,), (2, 3)]
    assert fusable_groups(view, {1, 2}) == [(1, 2)]


class _VetoSigmoid:
    """A cross-cutting plugin (as hookspecs.py describes) that vetoes Sigmoid for OpenVINO."""

    @ort.hookimpl(wrapper=True)
    def ort_get_capability(self, ep, graph, candidates):
        capability = yield
        if ep.name == OV and capability is not None:
            vetoed = {i for i in candidates if graph.nodes[i].op_type == "Sigmoid"}
            if vetoed:
                claimed = [i for c in capability.claims for i in c.nodes if i not in vetoed]
                capability.claims = [ort.Claim(g, fuse=True) for g in fusable_groups(graph, set(claimed))]
                capability.declined.update({i: "vetoed by test" for i in vetoed})
        return capability


def test_session_with_declined_middle_node_has_no_cycle():
    model = _chain_with_side_path()
    veto = _VetoSigmoid()
    assert ort.register(veto, "veto-sigmoid")
    try:
        sess = session(model)
    finally:
        ort.unregister(veto)
    placement = {p.name: p for p in sess.get_placement().nodes}
    assert placement["sigmoid"].provider == CPU
    assert all(placement[n].provider == OV for n in ("relu", "add", "neg"))
    assert not any("cycle" in r for p in placement.values() for r in p.declined.values())
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    assert_parity(sess.run(None, {"x": x}), reference(model.SerializeToString(), {"x": x}), rel=1e-6)


def test_capability_asks_openvino_not_a_list():
    """A node OpenVINO's frontend cannot convert is declined with OpenVINO's own message."""
    node = helper.make_node("Einsum", ["x"], ["y"], name="bad_einsum", equation="ij->ji->k")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    import onnx_ir as ir

    from ort_ep_openvino.capability import decline_reason

    m = ir.serde.deserialize_model(model)
    view = ort.GraphView(m.graph, opset_imports=dict(m.opset_imports))
    reason = decline_reason(view, view.nodes[0], "CPU")
    assert reason is not None and "OpenVINO" in reason and "Einsum" in reason


def test_read_only_and_strided_inputs(cnn):
    """Inputs are wrapped in place; what OpenVINO cannot wrap (a read-only or strided buffer) is
    copied first, with the same result."""
    sess = session(cnn)
    x = models.random_inputs(cnn, batch=2, seed=3)["x"]
    expected = reference(cnn.SerializeToString(), {"x": x})
    read_only = x.copy()
    read_only.flags.writeable = False
    assert_parity(sess.run(None, {"x": read_only}), expected)
    strided = np.empty((2, 3, 32, 64), np.float32)
    strided[..., ::2] = x
    assert_parity(sess.run(None, {"x": strided[..., ::2]}), expected)


def test_outputs_do_not_alias_the_request_buffers(cnn):
    """The request reuses its output buffers; a result must survive the next run."""
    sess = session(cnn)
    first_feeds = models.random_inputs(cnn, batch=2, seed=1)
    first = sess.run(None, first_feeds)[0]
    kept = first.copy()
    sess.run(None, models.random_inputs(cnn, batch=2, seed=2))
    np.testing.assert_array_equal(first, kept)


def test_input_of_another_dtype_is_cast():
    """The compiled model's parameter dtype rules: another dtype is cast, as OpenVINO's own
    data dispatcher would."""
    import openvino as ov

    from ort_ep_openvino.kernel import _Compiled

    param = ov.opset13.parameter([2, 3], ov.Type.f32, name="x")
    model = ov.Model([ov.opset13.relu(param)], [param])
    compiled = _Compiled(ov.Core().compile_model(model, "CPU"))
    x = np.array([[-1.5, 2.0, 3.25], [4.0, -5.0, 6.5]])  # float64
    (y,) = compiled.infer([x])
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.maximum(x, 0).astype(np.float32))


def _fragments():
    """Relu -> Neg -> TopK (OpenVINO's diverges: declined) -> Abs: two fragments, of 2 and 1 nodes."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Neg", ["a"], ["b"], name="neg"),
        helper.make_node("TopK", ["b", "k"], ["v", "i"], name="topk", axis=1),
        helper.make_node("Abs", ["v"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("k", TensorProto.INT64, [1], [3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_small_fragments_are_left_to_the_cpu_provider_by_default():
    from ort_ep_openvino.options import MIN_SUBGRAPH_SIZE

    model = _fragments()
    placement = {p.name: p for p in session(model).get_placement().nodes}
    assert {p.provider for p in placement.values()} == {CPU}
    assert placement["neg"].declined[OV] == f"group too small: 2 node(s) < min_subgraph_size {MIN_SUBGRAPH_SIZE}"
    assert placement["abs"].declined[OV] == f"group too small: 1 node(s) < min_subgraph_size {MIN_SUBGRAPH_SIZE}"
    assert "indices of equal values" in placement["topk"].declined[OV]


def test_min_subgraph_size_1_takes_every_fragment():
    model = _fragments()
    sess = session(model, {"min_subgraph_size": "1"})
    placement = {p.name: p for p in sess.get_placement().nodes}
    assert [placement[n].provider for n in ("relu", "neg", "topk", "abs")] == [OV, OV, CPU, OV]
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    assert_parity(sess.run(None, {"x": x}), reference(model.SerializeToString(), {"x": x}), rel=1e-6)


def test_a_small_model_taken_whole_is_no_fragment():
    model = _chain_with_side_path()  # 4 nodes, all supported
    assert {p.provider for p in session(model).get_placement().nodes} == {OV}


def test_read_only_inputs_copied_for_openvino_stay_alive_through_the_run():
    """Read-only inputs (OpenVINO cannot wrap them) are copied (inputs of another dtype are
    cast): each such array must live until the run ends, or a later copy takes its freed memory
    and two inputs read one buffer (an attention model's Concat of its batch and sequence sizes
    read [4, 4] for [2, 4], and its Reshape failed downstream)."""
    n = 6
    names = [f"x{k}" for k in range(n)]
    graph = helper.make_graph(
        [helper.make_node("Concat", names, ["y"], axis=0)], "g",
        [helper.make_tensor_value_info(name, TensorProto.INT64, [1]) for name in names],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [n])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    sess = session(data, {"min_subgraph_size": 1})
    assert sess.get_placement().counts().get(OV) == 1
    feeds = {}
    for k, name in enumerate(names):
        feeds[name] = np.array([10 * (k + 1)], np.int64)
        feeds[name].flags.writeable = False
    for _ in range(3):
        got = sess.run(None, feeds)[0]
        np.testing.assert_array_equal(got, np.array([10 * (k + 1) for k in range(n)]))
