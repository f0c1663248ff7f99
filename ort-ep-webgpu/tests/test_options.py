"""Options, device discovery and the float16 kernels."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort
from conftest import PROVIDERS, needs_adapter
from ort_core.testing import models
from ort_ep_webgpu.runtime import list_adapters

pytestmark = needs_adapter


def test_devices_report_adapter_name_backend_and_hardware():
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "WebGpuExecutionProvider"]
    records, _ = list_adapters()
    assert len(devices) == len(records) > 0
    for d, r in zip(devices, records):
        assert d.name == r.name and d.memory == "WebGpu" and d.device_id == r.index
        assert d.metadata["backend"] == r.backend
        assert d.hardware == (r.adapter_type != "CPU")
    assert "WebGpuExecutionProvider" in ort.get_available_providers()


def test_unknown_option_lists_valid_keys():
    with pytest.raises(ort.InvalidArgument, match="valid keys: adapter, fp16, gemm_kernel, max_batch, memory_limit_mb"):
        ort.InferenceSession(models.mlp(), providers=[("WebGpuExecutionProvider", {"precision": "fp16"})])


@pytest.mark.parametrize("key,value", [("power_preference", "fastest"), ("fp16", "maybe"), ("memory_limit_mb", "-1"), ("gemm_kernel", "fast")])
def test_bad_option_values(key, value):
    with pytest.raises(ort.InvalidArgument, match=key):
        ort.InferenceSession(models.mlp(), providers=[("WebGpuExecutionProvider", {key: value})])


def test_require_hardware_refuses_software_adapters():
    records, _ = list_adapters()
    if any(r.hardware for r in records):
        pytest.skip("this machine has a hardware adapter")
    with pytest.raises(ort.EPFail, match="software adapter"):
        ort.InferenceSession(models.mlp(), providers=[("WebGpuExecutionProvider", {"require_hardware": "1"})],
                             enable_fallback=0)


def test_adapter_selection_by_index_and_name():
    records, _ = list_adapters()
    last = records[-1]
    session = ort.InferenceSession(models.mlp(in_features=8, hidden=8, layers=1),
                                   providers=[("WebGpuExecutionProvider", {"adapter": str(last.index)})])
    bp = next(b for b in session._providers if b.name == "WebGpuExecutionProvider")
    assert bp.ctx.device.device_id == last.index
    assert bp.ctx.state["runtime"].gpu.record.index == last.index
    feeds = models.random_inputs(models.mlp(in_features=8, hidden=8, layers=1))
    assert session.run(None, feeds)[0].shape == (1, 10)
    with pytest.raises(ort.EPFail, match="no adapter matches 'no-such-gpu'"):
        ort.InferenceSession(models.mlp(), providers=[("WebGpuExecutionProvider", {"adapter": "no-such-gpu"})],
                             enable_fallback=0)
    with pytest.raises(ort.EPFail, match="adapter index 99 out of range"):
        ort.InferenceSession(models.mlp(), providers=[("WebGpuExecutionProvider", {"adapter": "99"})],
                             enable_fallback=0)


def _fp16_model():
    dim = 16
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((dim, dim)) / 4).astype(np.float16)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "g", "beta"], ["n"], axis=-1),
        helper.make_node("Softmax", ["n"], ["y"], axis=-1),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.full(dim, 0.1, np.float16), "b"),
        numpy_helper.from_array(np.ones(dim, np.float16), "g"),
        numpy_helper.from_array(np.zeros(dim, np.float16), "beta"),
    ]
    graph = helper.make_graph(
        nodes, "fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, dim])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_float16_kernels_when_the_adapter_has_shader_f16():
    records, _ = list_adapters()
    if "shader-f16" not in records[0].features:
        pytest.skip("adapter without shader-f16")
    model = _fp16_model()
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float16)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    assert set(session.get_placement().counts()) == {"WebGpuExecutionProvider"}
    got = session.run(None, {"x": x})[0]
    assert got.dtype == np.float16
    # reference in float32 from the same float16 data; the provider computes in f32 and rounds
    # each node's output to float16, so allow float16 rounding of a few steps
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=2e-2, atol=2e-3)


def test_fp16_option_off_declines_float16_nodes_with_reason():
    session = ort.InferenceSession(_fp16_model(), providers=[("WebGpuExecutionProvider", {"fp16": "0"}), "CPUExecutionProvider"])
    placement = session.get_placement()
    assert set(placement.counts()) == {"CPUExecutionProvider"}
    assert all("float16" in p.declined["WebGpuExecutionProvider"] for p in placement.nodes)
