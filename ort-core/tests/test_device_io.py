"""Device-resident I/O: OrtValues on a provider's device memory, bound inputs read there and
bound outputs left there, with no host copy in a loop of runs. The device is the test
provider's "Fake:0" memory, found by its memory name as any provider's would be."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import initializer, make_model
from fake_providers import FakeTensor

FAKE = "FakeDeviceExecutionProvider"
W = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
X = np.array([[1.0, -2.0, 0.5, 3.0], [-1.0, 2.0, -0.5, 0.25]], np.float32)


def add_relu():
    """x -> Add(w) -> Relu -> y: both nodes on the fake device."""
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["y"], name="relu")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [initializer("w", W)])


def expected(x):
    return np.maximum(x + W, 0)


def test_ortvalue_on_a_device(host, fake):
    v = ort.OrtValue.ortvalue_from_numpy(X, "fake", 0)
    assert isinstance(v._data, FakeTensor) and v.device_name() == "fake"
    assert v.shape() == [2, 4] and v.data_type() == "tensor(float)"
    np.testing.assert_array_equal(v.numpy(), X)
    z = ort.OrtValue.ortvalue_from_shape_and_type([3], np.int64, "fake", 0)
    np.testing.assert_array_equal(z.numpy(), np.zeros(3, np.int64))
    with pytest.raises(ort.InvalidArgument, match="no installed provider has that memory.*Fake:0"):
        ort.OrtValue.ortvalue_from_numpy(X, "cuda", 0)


def test_bound_device_loop_makes_no_host_copy(host, fake):
    sess = ort.InferenceSession(add_relu(), providers=[FAKE])
    binding = sess.io_binding()
    x = ort.OrtValue.ortvalue_from_numpy(X, "fake", 0)
    binding.bind_ortvalue_input("x", x)
    binding.bind_output("y", "fake", 0)
    sess.run_with_iobinding(binding)  # first run: the device plan is made (w copied once)
    uploads, downloads = fake.to_device_calls, fake.to_host_calls
    allocator = sess.get_memory_stats()["Fake:0"]
    for _ in range(5):
        sess.run_with_iobinding(binding)
        assert binding.copies() == []
        (y,) = binding.get_outputs()
        assert isinstance(y._data, FakeTensor) and y.device_name() == "fake"
    assert (fake.to_device_calls, fake.to_host_calls) == (uploads, downloads)
    assert sess.get_memory_stats()["Fake:0"] == allocator  # nothing allocated or freed through the copies
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], expected(X))
    assert fake.to_host_calls == downloads + 1


def test_host_binding_copies_in_and_out(host, fake):
    sess = ort.InferenceSession(add_relu(), providers=[FAKE])
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    assert [(c.value, c.source, c.target) for c in binding.copies()] == [("x", "Cpu", "Fake:0"), ("y", "Fake:0", "Cpu")]
    np.testing.assert_allclose(binding.get_outputs()[0].numpy(), expected(X))


def test_run_reads_device_inputs_in_place_and_mixes_with_host_nodes(host, fake):
    from conftest import chain_expected, chain_model  # Add, Relu on the device; Mul, Sub on the host

    sess = ort.InferenceSession(chain_model(), providers=[FAKE])
    x = ort.OrtValue.ortvalue_from_numpy(X, "fake", 0)
    before = fake.to_device_calls
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], chain_expected(X), rtol=1e-6)
    # x is read on the device by Add; Sub reads it on the host: one download, no upload of x
    plan = sess._plan_for({"x": x})
    assert ("x", "Fake:0", "Cpu") in [(c.value, c.source, c.target) for c in plan.copies]
    assert not [c for c in plan.copies if c.value == "x" and c.target == "Fake:0"]
    assert fake.to_device_calls - before >= 0


def test_bound_device_ortvalue_output_is_pointed_at_the_result(host, fake):
    sess = ort.InferenceSession(add_relu(), providers=[FAKE])
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(X, "fake", 0))
    out = ort.OrtValue.ortvalue_from_shape_and_type([2, 4], np.float32, "fake", 0)
    binding.bind_ortvalue_output("y", out)
    sess.run_with_iobinding(binding)
    assert binding.get_outputs()[0] is out
    np.testing.assert_allclose(out.numpy(), expected(X))


def test_device_input_is_checked_without_a_copy(host, fake):
    sess = ort.InferenceSession(add_relu(), providers=[FAKE])
    bad = ort.OrtValue.ortvalue_from_numpy(X.astype(np.float64), "fake", 0)
    before = fake.to_host_calls
    with pytest.raises(ort.InvalidArgument, match="input 'x': unexpected data type: expected tensor\\(float\\), given float64 on fake"):
        sess.run(None, {"x": bad})
    wide = ort.OrtValue.ortvalue_from_numpy(np.zeros((2, 5), np.float32), "fake", 0)
    with pytest.raises(ort.InvalidArgument, match="wrong dimension 1: expected 4"):
        sess.run(None, {"x": wide})
    assert fake.to_host_calls == before
    with pytest.raises(ort.InvalidArgument, match="bind_ortvalue_input"):
        sess.io_binding().bind_input("x", "fake", 0, np.float32, [2, 4], 1234)
