from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core
from fake_providers import FakeDeviceProvider, HostProvider, OnnxruntimeNodeProvider
from ort_core import plugins


@pytest.fixture
def registry(monkeypatch):
    """A registry that loads no entry points: each test registers the plugins it needs."""
    fresh = plugins.PluginRegistry(load_entry_points=False)
    monkeypatch.setattr(plugins, "_REGISTRY", fresh)
    return fresh


@pytest.fixture
def host(registry):
    provider = HostProvider()
    assert ort_core.register(provider, "host")
    return provider


@pytest.fixture
def fake(registry):
    provider = FakeDeviceProvider()
    assert ort_core.register(provider, "fake")
    return provider


@pytest.fixture
def ort_nodes(registry):
    """A provider named CPUExecutionProvider that runs every node with onnxruntime."""
    provider = OnnxruntimeNodeProvider()
    assert ort_core.register(provider, "onnxruntime-nodes")
    return provider


def initializer(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def tensor_info(name: str, shape, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def onnxruntime_unoptimized(model: onnx.ModelProto, feeds) -> list:
    """The model's outputs from onnxruntime's CPU provider with its own optimizer off: the
    reference that optimized graphs are compared with."""
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def make_model(nodes, inputs, outputs, initializers=(), opset=17, **kwargs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)
    model.ir_version = 8
    return model


def chain_model() -> onnx.ModelProto:
    """x -> Add(w) -> Relu -> Mul(w) -> Relu -> Sub(x) -> y, all float32 [N, 4]."""
    w = numpy_helper.from_array(np.array([1.0, -2.0, 3.0, -4.0], np.float32), "w")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r1"], name="relu1"),
        helper.make_node("Mul", ["r1", "w"], ["m"], name="mul"),
        helper.make_node("Relu", ["m"], ["r2"], name="relu2"),
        helper.make_node("Sub", ["r2", "x"], ["y"], name="sub"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [w],
        producer_name="tests",
    )


def chain_expected(x: np.ndarray) -> np.ndarray:
    w = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    return np.maximum(np.maximum(x + w, 0) * w, 0) - x


# the onnxruntime module or ort_core (over onnxruntime-backed nodes): a test taking ``ort`` runs
# against both, to compare the API's behaviour
@pytest.fixture(params=["onnxruntime", "ort_core"])
def ort(request):
    if request.param == "onnxruntime":
        import onnxruntime

        return onnxruntime
    request.getfixturevalue("ort_nodes")
    import ort_core

    return ort_core
