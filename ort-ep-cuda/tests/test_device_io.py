"""Device-resident I/O through core (ort-core 0.2's OrtValue on "cuda" and IOBinding): the
provider's allocator and DataTransfer serve it, a loop of runs over device values copies
nothing, outputs stay on the device, and DLPack exchanges the provider's arrays. Skipped with
an ort-core that keeps OrtValues in host memory only."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ort_core as ort
from conftest import ON_GPU, PROVIDERS
from ort_core.testing import models


def _device_ortvalue(x):
    try:
        return ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    except ort.InvalidArgument as exc:
        if "not supported" in str(exc):
            pytest.skip(f"this ort-core has no device OrtValues: {exc}")
        raise


def test_ortvalue_on_cuda_round_trips():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    value = _device_ortvalue(x)
    assert value.device_name() == "cuda"
    assert value.shape() == [3, 4] and value.element_type() == onnx.TensorProto.FLOAT
    np.testing.assert_array_equal(value.numpy(), x)


def test_a_loop_over_device_values_copies_nothing_and_outputs_stay_on_the_device():
    model = models.mlp(in_features=16, hidden=32, layers=2)
    feeds = models.random_inputs(model, batch=4)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    session = ort.InferenceSession(model, providers=PROVIDERS)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", _device_ortvalue(feeds["x"]))
    binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
    for _ in range(3):
        binding.run()
        assert binding.copies() == []  # nothing crossed between host and device
    out = binding.get_outputs()[0]
    assert out.device_name() == "cuda"
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], expected, rtol=1e-5, atol=1e-6)


def test_dlpack_exchange_with_the_providers_arrays():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    value = _device_ortvalue(x)
    if ON_GPU:
        import cupy

        shared = cupy.from_dlpack(value)
        assert shared.data.ptr == value._data.data.ptr  # the same device memory, no copy
        again = ort.OrtValue.from_dlpack(shared)
        assert again.device_name() == "cuda"
        np.testing.assert_array_equal(again.numpy(), x)
    else:  # the FAKE device's arrays are numpy arrays: DLPack of host memory
        np.testing.assert_array_equal(np.from_dlpack(value), x)
