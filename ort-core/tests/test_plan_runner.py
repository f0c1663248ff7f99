"""The generated run function of a plan: same results as the instrumented loop, errors that
name the node, memory tracked once per input-shape signature, multi-output kernels."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core
from conftest import chain_model, make_model
from ort_core import Capability, Claim, EpDevice, EpDevices, Kernel, ProviderSpec, hookimpl


def _session(model, **options):
    so = ort_core.SessionOptions()
    for k, v in options.items():
        setattr(so, k, v)
    return ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _expected(x):
    w = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    return np.maximum(np.maximum(x + w, 0) * w, 0) - x


def test_generated_and_instrumented_runs_agree(host):
    sess = _session(chain_model())
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    plan = sess._plan
    feeds = [x]
    fast = plan.run(feeds, track_memory=False)
    slow = plan.run(feeds, track_memory=True)
    np.testing.assert_array_equal(fast[0], slow[0])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _expected(x), rtol=1e-6)


def test_memory_is_tracked_once_per_shape_signature(host):
    sess = _session(chain_model())
    plan = sess._plan
    calls = []
    original = plan._run_instrumented

    def counting(values, profile):
        calls.append(1)
        return original(values, profile)

    plan._run_instrumented = counting
    small = np.ones((2, 4), np.float32)
    big = np.ones((50, 4), np.float32)
    sess.run(None, {"x": small})
    sess.run(None, {"x": small})
    assert len(calls) == 1
    peak_small = sess.get_memory_stats()["Cpu"]["peak_bytes"]
    sess.run(None, {"x": big})
    sess.run(None, {"x": big})
    assert len(calls) == 2
    assert sess.get_memory_stats()["Cpu"]["peak_bytes"] > peak_small


def test_profiling_still_records_every_run(host, tmp_path):
    sess = _session(chain_model(), enable_profiling=True, profile_file_prefix=str(tmp_path / "p_"))
    x = np.ones((2, 4), np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    import json

    events = json.load(open(sess.end_profiling()))
    assert sum(1 for e in events if e["cat"] == "Session" and e["name"] == "model_run") == 3
    assert {e["name"] for e in events if e["cat"] == "Session"} == {"model_run", "model_loading_array",
                                                                   "session_initialization"}
    assert sum(1 for e in events if e["cat"] == "Node") == 15


class _Failing:
    """A provider whose Relu kernel raises on negative-only inputs."""

    name = "CPUExecutionProvider"

    @hookimpl
    def ort_register_providers(self):
        return [ProviderSpec(self.name, "0.0.1", "tests", "kernel")]

    @hookimpl
    def ort_ep_devices(self, provider):
        return EpDevices((EpDevice(self.name, "tests", "CPU", "host"),)) if provider == self.name else None

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        return Capability(claims=[Claim((i,)) for i in sorted(candidates)])

    @hookimpl
    def ort_create_kernel(self, ep, request):
        op = request.node.op_type
        if op == "TopK2":
            return Kernel(run=lambda x: (np.sort(x, axis=-1)[..., ::-1][..., :2], np.argsort(-x, axis=-1)[..., :2]))
        if op == "LoneArray2":  # a multi-output kernel that returns one array (a kernel bug)
            return Kernel(run=lambda x: x * 2)
        if op == "Relu":
            def relu(x):
                if (x < 0).all():
                    raise ValueError("all inputs negative")
                return np.maximum(x, 0)
            return Kernel(run=relu, single_output=True)
        return Kernel(run=np.negative, single_output=True)


def test_error_in_generated_run_names_the_node(registry):
    assert ort_core.register(_Failing(), "failing")
    model = make_model(
        [helper.make_node("Neg", ["x"], ["n"], name="neg"), helper.make_node("Relu", ["n"], ["y"], name="the_relu")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
    )
    sess = _session(model, graph_optimization_level=ort_core.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess.run(None, {"x": np.array([1.0, -1.0], np.float32)})  # first run: instrumented
    sess.run(None, {"x": np.array([1.0, -1.0], np.float32)})  # generated
    with pytest.raises(ort_core.Fail, match="Name:'the_relu'.*all inputs negative"):
        sess.run(None, {"x": np.array([1.0, 2.0], np.float32)})


def test_multi_output_kernel_in_generated_run(registry):
    assert ort_core.register(_Failing(), "failing")
    node = helper.make_node("TopK2", ["x"], ["values", "indices"], domain="tests", name="top")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, [2, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("tests", 1)])
    model.ir_version = 8
    sess = ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([[1, 5, 3, 2, 4], [9, 7, 8, 6, 5]], np.float32)
    for _ in range(2):  # instrumented, then generated
        values, indices = sess.run(None, {"x": x})
        np.testing.assert_array_equal(values, [[5, 4], [9, 8]])
        np.testing.assert_array_equal(indices, [[1, 4], [0, 2]])


def test_multi_output_kernel_returning_a_lone_array_is_a_named_error(registry):
    # indexing the array would give its rows as the outputs, silently
    assert ort_core.register(_Failing(), "failing")
    node = helper.make_node("LoneArray2", ["x"], ["a", "b"], domain="tests", name="lone")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, None), helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("tests", 1)])
    model.ir_version = 8
    sess = ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):  # instrumented, then generated
        with pytest.raises(ort_core.Fail, match="Name:'lone'.*returned a ndarray for the node's 2 outputs"):
            sess.run(None, {"x": np.ones((2, 5), np.float32)})


def test_subgraph_runner_run_values_orders_inputs_then_outer_values():
    """``SubgraphRunner.run_values`` (formal inputs, then outer values in ``outer_names``
    order) defaults to the mapping call, so runners that only define ``__call__`` keep working."""
    calls = []

    class Runner(ort_core.SubgraphRunner):
        input_names = ("i0", "i1")
        output_names = ("o",)
        outer_names = ("b", "a")

        def __call__(self, inputs, outer):
            calls.append((list(inputs), dict(outer)))
            return ["out"]

    assert Runner().run_values([1, 2, "B", "A"]) == ["out"]
    assert calls == [([1, 2], {"b": "B", "a": "A"})]
