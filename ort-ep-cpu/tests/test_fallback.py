"""The real CPU provider as the fallback of a device provider written in this test."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from device_double import WrappedDevice
from ort_core.testing import models

HALF = "HalfDeviceExecutionProvider"


@pytest.fixture
def half_device():
    plugin = WrappedDevice(HALF, ("Relu", "Add"), "Half:0")
    assert ort.register(plugin, "half-device")
    yield plugin
    ort.unregister(plugin)


def test_cnn_split_over_a_device_and_the_cpu_provider(half_device):
    model = models.cnn(image=32)
    feeds = models.random_inputs(model, batch=2)
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = ort.InferenceSession(model, providers=[HALF, "CPUExecutionProvider"])
    counts = sess.get_placement().counts()
    assert counts[HALF] > 0 and counts["CPUExecutionProvider"] > 0
    assert len(sess.get_placement().copies) > 0
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference, rtol=1e-5, atol=1e-6)


def test_cpu_provider_is_discovered_through_its_entry_point():
    reg = ort.registry().get("CPUExecutionProvider")
    assert reg is not None and reg.package == "ort-ep-cpu"
    assert "CPUExecutionProvider" in ort.get_available_providers()
    (device,) = ort.registry().devices("CPUExecutionProvider").devices
    assert device.device_type == "CPU" and device.memory == ort.HOST_MEMORY
