"""Device-resident I/O on WebGPU: OrtValues in GPU buffers, bound inputs read there, bound
outputs left there; a loop of runs makes no host copy (plan copy steps, the stream's upload and
download counts and the pool's statistics say so), and the numbers match onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest

import ort_core as ort
from conftest import PROVIDERS, needs_adapter
from ort_core.testing import models
from ort_ep_webgpu.runtime import GpuTensor

pytestmark = needs_adapter


def _runtime(session):
    bp = next(b for b in session._providers if b.name == "WebGpuExecutionProvider")
    return bp.ctx.state["runtime"]


@pytest.fixture(scope="module")
def mlp():
    return models.mlp(in_features=32, hidden=64, layers=2)


def test_ortvalue_in_gpu_memory_round_trips():
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    v = ort.OrtValue.ortvalue_from_numpy(x, "webgpu", 0)
    assert isinstance(v._data, GpuTensor) and v.device_name() == "webgpu"
    assert v.shape() == [4, 32] and v.element_type() == onnx.TensorProto.FLOAT
    np.testing.assert_array_equal(v.numpy(), x)
    z = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "webgpu", 0)
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), np.float32))
    with pytest.raises(ort.InvalidArgument, match="no DLPack form"):
        v.__dlpack__()


def test_bound_device_loop_makes_zero_host_copies(mlp):
    session = ort.InferenceSession(mlp, providers=PROVIDERS)
    assert set(session.get_placement().counts()) == {"WebGpuExecutionProvider"}
    feeds = models.random_inputs(mlp, batch=4)
    (name,) = feeds
    expected = onnxruntime.InferenceSession(mlp.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    binding = session.io_binding()
    binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(feeds[name], "webgpu", 0))
    output = session.get_outputs()[0].name
    binding.bind_output(output, "webgpu", 0)
    # warm-up: the device plan is made; the second run's output buffer joins the pool while the
    # first run's output is still held by the binding
    session.run_with_iobinding(binding)
    session.run_with_iobinding(binding)
    stream = _runtime(session).stream
    uploads, downloads = stream.stats.uploads, stream.stats.downloads
    pool_before = _runtime(session).pool.stats()
    for _ in range(10):
        session.run_with_iobinding(binding)
        assert binding.copies() == []
        (y,) = binding.get_outputs()
        assert isinstance(y._data, GpuTensor) and y.device_name() == "webgpu"
    assert (stream.stats.uploads, stream.stats.downloads) == (uploads, downloads)
    pool_after = _runtime(session).pool.stats()
    # the same pooled buffers serve every run: nothing new reserved, nothing left in use
    assert pool_after.reserved_bytes == pool_before.reserved_bytes
    assert pool_after.in_use_bytes == pool_before.in_use_bytes
    assert pool_after.peak_bytes == pool_before.peak_bytes
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], expected, rtol=1e-4, atol=1e-5)
    assert stream.stats.downloads == downloads + 1


def test_host_binding_copies_each_run(mlp):
    session = ort.InferenceSession(mlp, providers=PROVIDERS)
    feeds = models.random_inputs(mlp, batch=4)
    (name,) = feeds
    binding = session.io_binding()
    binding.bind_cpu_input(name, feeds[name])
    binding.bind_output(session.get_outputs()[0].name)
    session.run_with_iobinding(binding)
    stream = _runtime(session).stream
    uploads, downloads = stream.stats.uploads, stream.stats.downloads
    session.run_with_iobinding(binding)
    assert [(c.source, c.target) for c in binding.copies()] == [("Cpu", "WebGpu"), ("WebGpu", "Cpu")]
    assert (stream.stats.uploads - uploads, stream.stats.downloads - downloads) == (1, 1)


def test_device_output_feeds_the_next_run():
    """A chain of runs on the device: each run's output OrtValue is bound as the next input."""
    square = models.mlp(in_features=16, hidden=16, layers=1, classes=16)
    session = ort.InferenceSession(square, providers=PROVIDERS)
    reference = onnxruntime.InferenceSession(square.SerializeToString(), providers=["CPUExecutionProvider"])
    name, output = session.get_inputs()[0].name, session.get_outputs()[0].name
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    value, want = ort.OrtValue.ortvalue_from_numpy(x, "webgpu", 0), x
    binding = session.io_binding()
    binding.bind_output(output, "webgpu", 0)
    for _ in range(3):
        binding.bind_ortvalue_input(name, value)
        session.run_with_iobinding(binding)
        assert binding.copies() == []
        (value,) = binding.get_outputs()
        want = reference.run(None, {name: want})[0]
    np.testing.assert_allclose(value.numpy(), want, rtol=1e-4, atol=1e-5)


def test_onnxruntime_device_api_names_webgpu_memory(mlp):
    """get_input_memory_infos/get_input_epdevices name WebGPU memory; run_with_ortvaluevector's
    fetch_devices leave the output there; copy_tensors and update_inplace write device values."""
    session = ort.InferenceSession(mlp, providers=PROVIDERS)
    (info,) = session.get_input_memory_infos()
    assert info.name == "WebGpu" and info.device_type == ort.OrtMemoryInfoDeviceType.GPU
    assert info.allocator_type == ort.OrtAllocatorType.ORT_DEVICE_ALLOCATOR
    assert [d.ep_name for d in session.get_input_epdevices()] == ["WebGpuExecutionProvider"]
    feeds = models.random_inputs(mlp, batch=4)
    (name,) = feeds
    expected = session.run(None, feeds)[0]
    fetches = ort.OrtValueVector()
    out = session.get_outputs()[0].name
    session.run_with_ortvaluevector(None, [name], [ort.OrtValue.ortvalue_from_numpy(feeds[name])], [out], fetches,
                                    [ort.OrtDevice.make("webgpu", 0)])
    assert isinstance(fetches[0]._data, GpuTensor)
    np.testing.assert_allclose(fetches[0].numpy(), expected, rtol=1e-5, atol=1e-5)
    dst = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "webgpu", 0)
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(src)], [dst])
    np.testing.assert_array_equal(dst.numpy(), src)
    dst.update_inplace(src * 2)
    assert isinstance(dst._data, GpuTensor)
    np.testing.assert_array_equal(dst.numpy(), src * 2)
