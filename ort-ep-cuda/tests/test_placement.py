"""Copy planning: the plan copies graph inputs to the device once, outputs back once, around a
node that falls back to the CPU provider, initializers once at session creation, and nothing for
shape computations (they run on the host, claimed by this provider). Data transfer is bit-exact."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import PROVIDERS, fake_only, runtime
from ort_core.testing import models


def _dynamic_reshape_model():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["flat"], name="reshape"),
        helper.make_node("Tanh", ["flat"], ["y"], name="tanh"),
    ]
    graph = helper.make_graph(
        nodes, "dynamic_reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 12])],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
         helper.make_tensor("zero_axes", TensorProto.INT64, [1], [0]),
         helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_shape_computations_run_on_the_host_without_copies():
    model = _dynamic_reshape_model()
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    assert {p.provider for p in placement.nodes} == {"CUDAExecutionProvider"}
    by_name = {p.name: p for p in placement.nodes}
    for name in ("shape", "gather", "unsqueeze", "concat"):
        assert "shape computation on the host" in by_name[name].note, by_name[name]
    assert sorted((c.value, c.source, c.target) for c in placement.copies) == [("x", "Cpu", "Cuda"), ("y", "Cuda", "Cpu")]
    x = np.random.default_rng(0).standard_normal((5, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], np.tanh(np.maximum(x, 0)).reshape(5, 12), rtol=1e-6)


def _fallback_model():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("CumSum", ["r", "axis"], ["c"], name="cumsum"),  # no CUDA kernel
        helper.make_node("Mul", ["c", "w"], ["m"], name="mul"),
        helper.make_node("Tanh", ["m"], ["y"], name="tanh"),
    ]
    graph = helper.make_graph(
        nodes, "fallback",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor("axis", TensorProto.INT64, [], [1]),
         helper.make_tensor("w", TensorProto.FLOAT, [5], [0.5, -1.0, 2.0, 0.25, 3.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_fallback_node_gets_copies_and_correct_results():
    model = _fallback_model()
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    by_name = {p.name: p for p in placement.nodes}
    assert by_name["cumsum"].provider == "CPUExecutionProvider"
    assert "no CUDA kernel for CumSum" in by_name["cumsum"].declined["CUDAExecutionProvider"]
    assert {by_name[n].provider for n in ("relu", "mul", "tanh")} == {"CUDAExecutionProvider"}
    copies = {(c.value, c.source, c.target) for c in placement.copies}
    assert copies == {("x", "Cpu", "Cuda"), ("r", "Cuda", "Cpu"), ("c", "Cpu", "Cuda"), ("y", "Cuda", "Cpu")}
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)


@fake_only
def test_initializers_are_copied_once_at_creation():
    model = models.mlp(in_features=8, hidden=8, layers=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    dev = runtime(session).dev
    created = dev.uploads
    assert created >= 6  # the weights and biases, at session creation
    feeds = models.random_inputs(model)
    for _ in range(3):
        session.run(None, feeds)
    assert dev.uploads - created == 3 and dev.downloads == 3  # one input up, one output down per run


def test_strict_mode_names_the_fallback_node():
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(ort.OrtError, match="cumsum"):
        ort.InferenceSession(_fallback_model(), options, providers=["CUDAExecutionProvider"])


def test_bfloat16_is_computed_in_float32_and_rounded_once():
    """bfloat16 nodes run on CUDA: inputs widened exactly, float32 math, outputs rounded to
    nearest-even once; data movement (Transpose) is bit-exact."""
    bf16 = TensorProto.BFLOAT16
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"], name="matmul"),
             helper.make_node("Softmax", ["m"], ["s"], name="softmax", axis=-1),
             helper.make_node("Transpose", ["a"], ["t"], name="transpose"),
             helper.make_node("Cast", ["s"], ["f"], name="cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "bf16",
                              [helper.make_tensor_value_info("a", bf16, [4, 8]), helper.make_tensor_value_info("b", bf16, [8, 3])],
                              [helper.make_tensor_value_info("s", bf16, [4, 3]), helper.make_tensor_value_info("t", bf16, [8, 4]),
                               helper.make_tensor_value_info("f", TensorProto.FLOAT, [4, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    assert {p.provider for p in session.get_placement().nodes} == {"CUDAExecutionProvider"}
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((8, 3)).astype(ml_dtypes.bfloat16)
    s, t, f = session.run(None, {"a": a, "b": b})
    m = (a.astype(np.float32) @ b.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    e = np.exp(m - m.max(axis=-1, keepdims=True))
    expected = (e / e.sum(axis=-1, keepdims=True)).astype(ml_dtypes.bfloat16)
    assert s.dtype == ml_dtypes.bfloat16 and t.dtype == ml_dtypes.bfloat16 and f.dtype == np.float32
    np.testing.assert_allclose(s.astype(np.float32), expected.astype(np.float32), rtol=1e-2, atol=1e-3)
    assert t.tobytes() == np.ascontiguousarray(a.T).tobytes()
    np.testing.assert_array_equal(f, s.astype(np.float32))


def test_rounding_to_bfloat16_is_nearest_even_with_nan_and_inf():
    from ort_ep_cuda.bfloat16 import narrow, widen

    x = np.array([1.0, 1.00390625, 1.01171875, -2.5e-39, 3.4e38, np.inf, -np.inf, np.nan, -0.0, 65504.0, 1e-45],
                 np.float32)
    got = narrow(np, x)
    assert got.bits.tobytes() == x.astype(ml_dtypes.bfloat16).view(np.uint16).tobytes()
    back = widen(np, got)
    np.testing.assert_array_equal(back, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def _transfer():
    session = ort.InferenceSession(models.mlp(in_features=4, hidden=4, layers=1), providers=PROVIDERS)
    bound = next(b for b in session._providers if b.name == "CUDAExecutionProvider")
    return session, bound.data_transfer


@pytest.mark.parametrize("array", [
    np.array([[1.5, -0.0, np.inf], [np.nan, 3e-39, -7.25]], np.float32),
    np.arange(7, dtype=np.float16) / np.float16(3),
    np.array([-(2**63), -(2**31) - 1, 0, 2**31, 2**63 - 1], np.int64),
    np.array([1.0 / 3, -np.inf, 5e-324], np.float64),
    np.arange(5, dtype=np.int8), np.array([True, False, True]), np.zeros((0, 3), np.float32),
    np.array(2.5, np.float32), np.arange(12, dtype=np.float32).reshape(3, 4).T,
    np.array([1.5, -np.inf, np.nan, 3e38], np.float32).astype(ml_dtypes.bfloat16),
], ids=["float32", "float16", "int64", "float64", "int8", "bool", "empty", "scalar", "transposed", "bfloat16"])
def test_data_transfer_round_trip_is_bit_exact(array):
    _session, transfer = _transfer()
    device = transfer.to_device(array)
    assert device.shape == array.shape and device.dtype == array.dtype and device.nbytes == array.nbytes
    back = transfer.to_host(device)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == np.ascontiguousarray(array).tobytes()


def test_a_dtype_the_gpu_cannot_hold_is_a_clear_error():
    _session, transfer = _transfer()
    with pytest.raises(TypeError, match="float8_e4m3fn tensor cannot be held on the GPU"):
        transfer.to_device(np.zeros(3, ml_dtypes.float8_e4m3fn))


def test_split_into_one_output():
    node = helper.make_node("Split", ["x"], ["y"], axis=0, num_outputs=1)
    graph = helper.make_graph([node], "split1", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    assert session.get_placement().nodes[0].provider == "CUDAExecutionProvider"
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x)
