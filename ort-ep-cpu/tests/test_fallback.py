"""The real CPU provider as the fallback of a device provider written in this test."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from ort_core.testing import models


class HalfDevice:
    """Takes Relu and Add on a 'Half:0' memory whose tensors are wrapped numpy arrays."""

    name = "HalfDeviceExecutionProvider"

    class Tensor:
        def __init__(self, a):
            self.a, self.shape, self.dtype, self.nbytes = a, a.shape, a.dtype, a.nbytes

    @ort.hookimpl
    def ort_register_providers(self):
        return [ort.ProviderSpec(self.name, "0", "tests", "kernel")]

    @ort.hookimpl
    def ort_ep_devices(self, provider):
        if provider == self.name:
            return ort.EpDevices((ort.EpDevice(self.name, "tests", "GPU", "half", memory="Half:0"),))

    @ort.hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        if ep.name != self.name:
            return None
        cap = ort.Capability()
        for i in sorted(candidates):
            if graph.nodes[i].op_type in ("Relu", "Add"):
                cap.claims.append(ort.Claim((i,)))
            else:
                cap.declined[i] = f"{graph.nodes[i].op_type}: not on the half device"
        return cap

    @ort.hookimpl
    def ort_create_data_transfer(self, ep):
        if ep.name == self.name:
            return ort.DataTransfer(to_device=lambda a: self.Tensor(np.array(a)), to_host=lambda t: np.array(t.a))

    @ort.hookimpl
    def ort_create_kernel(self, ep, request):
        if ep.name != self.name:
            return None
        fn = {"Relu": lambda x: np.maximum(x, 0), "Add": np.add}[request.node.op_type]
        return ort.Kernel(run=lambda *xs: self.Tensor(fn(*(x.a for x in xs))), single_output=True)


@pytest.fixture
def half_device():
    plugin = HalfDevice()
    assert ort.register(plugin, "half-device")
    yield plugin
    ort.unregister(plugin)


def test_cnn_split_over_a_device_and_the_cpu_provider(half_device):
    model = models.cnn(image=32)
    feeds = models.random_inputs(model, batch=2)
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = ort.InferenceSession(model, providers=[HalfDevice.name, "CPUExecutionProvider"])
    counts = sess.get_placement().counts()
    assert counts[HalfDevice.name] > 0 and counts["CPUExecutionProvider"] > 0
    assert len(sess.get_placement().copies) > 0
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference, rtol=1e-5, atol=1e-6)


def test_cpu_provider_is_discovered_through_its_entry_point():
    reg = ort.registry().get("CPUExecutionProvider")
    assert reg is not None and reg.package == "ort-ep-cpu"
    assert "CPUExecutionProvider" in ort.get_available_providers()
    (device,) = ort.registry().devices("CPUExecutionProvider").devices
    assert device.device_type == "CPU" and device.memory == ort.HOST_MEMORY
