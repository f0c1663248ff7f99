"""What only a real GPU can check: CuPy arrays are the device tensors, every CuPy allocation of a
kernel goes through the session's arena, cuDNN's algorithm search options, TF32, the streams,
and DLPack exchange with CuPy and torch. Run by scripts/device_check.sh
(ORT_EP_CUDA_TESTS_ON_GPU=1); skipped elsewhere."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import gpu_only, runtime
from ort_core.testing import models

pytestmark = gpu_only


def _reference(model, feeds):
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _conv_model(dtype=TensorProto.FLOAT, group=1, kernel=3, stride=1, pads=(1, 1, 1, 1), transpose=False):
    rng = np.random.default_rng(0)
    np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    cin, cout = 8, 16
    w_shape = (cin, cout // group, kernel, kernel) if transpose else (cout, cin // group, kernel, kernel)
    w = helper.make_tensor("w", dtype, w_shape, rng.standard_normal(w_shape).astype(np_dtype).ravel().tolist())
    b = helper.make_tensor("b", dtype, [cout], rng.standard_normal(cout).astype(np_dtype).tolist())
    node = helper.make_node("ConvTranspose" if transpose else "Conv", ["x", "w", "b"], ["y"], group=group,
                            kernel_shape=[kernel, kernel], strides=[stride, stride], pads=list(pads))
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", dtype, [2, cin, 17, 19])],
                              [helper.make_tensor_value_info("y", dtype, None)], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_device_tensors_are_cupy_arrays_and_allocations_go_through_the_arena():
    import cupy

    model = models.mlp(in_features=64, hidden=128, layers=2)
    session = ort.InferenceSession(model, providers=["CUDAExecutionProvider"])
    bound = next(b for b in session._providers if b.name == "CUDAExecutionProvider")
    assert isinstance(bound.data_transfer.to_device(np.ones(3, np.float32)), cupy.ndarray)
    arena = runtime(session).dev.arena
    before = arena.stats().num_allocs
    session.run(None, models.random_inputs(model, batch=8))
    stats = arena.stats()
    assert stats.num_allocs > before and stats.reserved_bytes >= stats.in_use_bytes


def test_gpu_mem_limit_on_the_gpu_and_the_session_stays_usable():
    model = models.mlp(in_features=64, hidden=256, layers=2)
    session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"gpu_mem_limit": str(2 << 20)})])
    with pytest.raises(ort.OrtError, match="gpu_mem_limit=2097152"):
        session.run(None, models.random_inputs(model, batch=4096))
    feeds = models.random_inputs(model, batch=2)
    np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("options", [
    {"cudnn_conv_algo_search": "EXHAUSTIVE"}, {"cudnn_conv_algo_search": "HEURISTIC"},
    {"cudnn_conv_algo_search": "DEFAULT"}, {"prefer_nhwc": "1"}, {"cudnn_conv_use_max_workspace": "0"},
    {"do_copy_in_default_stream": "0"},
], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("shape", ["plain", "grouped", "strided", "transpose"])
def test_convolutions_under_each_option_match_onnxruntime(options, shape):
    kwargs = {"plain": {}, "grouped": {"group": 4}, "strided": {"stride": 2, "pads": (0, 1, 1, 0)},
              "transpose": {"transpose": True, "stride": 2}}[shape]
    model = _conv_model(**kwargs)
    x = np.random.default_rng(1).standard_normal((2, 8, 17, 19)).astype(np.float32)
    session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {**options, "use_tf32": "0"})])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _reference(model, {"x": x})[0], rtol=1e-3, atol=1e-4)


def test_float16_convolution():
    model = _conv_model(TensorProto.FLOAT16)
    x = np.random.default_rng(1).standard_normal((2, 8, 17, 19)).astype(np.float16)
    session = ort.InferenceSession(model, providers=["CUDAExecutionProvider"])
    expected = _reference(_conv_model(TensorProto.FLOAT), {"x": x.astype(np.float32)})[0]
    np.testing.assert_allclose(session.run(None, {"x": x})[0].astype(np.float32), expected, rtol=2e-2, atol=5e-2)


def test_tf32_products_stay_close():
    model = models.mlp(in_features=256, hidden=512, layers=2)
    feeds = models.random_inputs(model, batch=64)
    got = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"use_tf32": "1"})]).run(None, feeds)[0]
    np.testing.assert_allclose(got, _reference(model, feeds)[0], rtol=2e-2, atol=2e-3)


def test_arena_shrinkage_returns_device_memory():
    model = models.mlp(in_features=256, hidden=1024, layers=2)
    session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})])
    arena = runtime(session).dev.arena
    session.run(None, models.random_inputs(model, batch=2048))
    grown = arena.stats().reserved_bytes
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:0")
    session.run(None, models.random_inputs(model, batch=1), options)
    assert arena.stats().reserved_bytes < grown


def test_device_tensors_exchange_through_dlpack_without_a_copy():
    import cupy

    session = ort.InferenceSession(models.mlp(in_features=4, hidden=4, layers=1), providers=["CUDAExecutionProvider"])
    bound = next(b for b in session._providers if b.name == "CUDAExecutionProvider")
    device = bound.data_transfer.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    shared = cupy.from_dlpack(device)
    assert shared.data.ptr == device.data.ptr
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(device)
    assert t.data_ptr() == device.data.ptr and t.is_cuda
    back = cupy.from_dlpack(t)
    np.testing.assert_array_equal(bound.data_transfer.to_host(back), np.arange(6, dtype=np.float32).reshape(2, 3))
