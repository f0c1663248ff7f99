"""I/O binding, OrtValue runs and free-dimension overrides, as onnxruntime's Python API has them
(the runs are the test providers' of conftest)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import chain_expected, chain_model, make_model

X = np.array([[1.0, -2.0, 3.0, 0.5], [0.0, 4.0, -1.0, 2.0]], np.float32)


def test_run_with_ort_values_takes_and_gives_ort_values(host):
    sess = ort.InferenceSession(chain_model())
    (y,) = sess.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(X)})
    assert isinstance(y, ort.OrtValue) and y.shape() == [2, 4] and y.data_type() == "tensor(float)"
    np.testing.assert_allclose(y.numpy(), chain_expected(X))
    # run() takes an OrtValue in the feed too
    np.testing.assert_allclose(sess.run(None, {"x": ort.OrtValue.ortvalue_from_numpy(X)})[0], chain_expected(X))


def test_ortvalue_from_shape_and_type():
    v = ort.OrtValue.ortvalue_from_shape_and_type([3, 2], np.int64)
    assert (v.shape(), v.data_type(), v.device_name()) == ([3, 2], "tensor(int64)", "cpu")
    with pytest.raises(ValueError, match="'cuda'"):
        ort.OrtValue.ortvalue_from_shape_and_type([1], np.float32, "cuda", 0)
    # onnxruntime 1.32's keywords: vendor_id, and memory_info naming the device instead
    host_memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    v = ort.OrtValue.ortvalue_from_shape_and_type([2], np.float32, vendor_id=-1, memory_info=host_memory)
    assert (v.shape(), v.device_name()) == ([2], "cpu")
    v = ort.OrtValue.ortvalue_from_numpy(np.arange(3, dtype=np.float32), "cpu", 0, vendor_id=0)
    np.testing.assert_array_equal(v.numpy(), [0, 1, 2])
    with pytest.raises(ValueError, match="OrtMemoryInfo"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], np.float32, memory_info="Cpu")


def test_io_binding_allocated_outputs_and_reused_inputs(host):
    sess = ort.InferenceSession(chain_model())
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    (y,) = binding.get_outputs()
    np.testing.assert_allclose(y.numpy(), chain_expected(X))
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], chain_expected(X))
    sess.run_with_iobinding(binding)  # the bound input stays bound
    np.testing.assert_allclose(binding.get_outputs()[0].numpy(), chain_expected(X))
    binding.clear_binding_outputs()
    assert binding.get_outputs() == []


def test_io_binding_writes_into_the_callers_buffers(host):
    sess = ort.InferenceSession(chain_model())
    binding = sess.io_binding()
    x = X.copy()
    binding.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    out = ort.OrtValue.ortvalue_from_shape_and_type([2, 4], np.float32)
    binding.bind_ortvalue_output("y", out)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(out.numpy(), chain_expected(X))
    assert np.shares_memory(binding.get_outputs()[0].numpy(), out.numpy())
    # a raw pointer output, and the input changed in place between runs: the binding reads it anew
    buffer = np.zeros((2, 4), np.float32)
    binding.bind_output("y", "cpu", 0, np.float32, [2, 4], buffer.ctypes.data)
    x *= 2
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(buffer, chain_expected(2 * X))


def test_io_binding_errors_name_the_value(host):
    sess = ort.InferenceSession(chain_model())
    binding = sess.io_binding()
    with pytest.raises(ort.InvalidArgument, match="unknown input name 'nope'; the model's inputs are: 'x'"):
        binding.bind_cpu_input("nope", X)
    with pytest.raises(ort.InvalidArgument, match="unknown output name 'z'"):
        binding.bind_output("z")
    with pytest.raises(ort.InvalidArgument, match=r"device 'cuda' \(id 0\): no installed provider has that memory"):
        binding.bind_output("y", "cuda", 0)
    binding.bind_cpu_input("x", X)
    binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_shape_and_type([3, 4], np.float32))
    with pytest.raises(ort.InvalidArgument, match=r"output 'y': the bound buffer is float32 \[3, 4\], the run gave float32 \[2, 4\]"):
        sess.run_with_iobinding(binding)
    binding.clear_binding_inputs()
    with pytest.raises(ort.InvalidArgument, match="missing input"):
        sess.run_with_iobinding(binding)
    other = ort.InferenceSession(chain_model()).io_binding()
    with pytest.raises(ort.InvalidArgument, match="made by this session"):
        sess.run_with_iobinding(other)


def _reshape_by_shape_model() -> object:
    """y = Reshape(x, Shape(x)[0] * 4): the target comes from the batch dimension."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Mul", ["s", "four"], ["n"]),
             helper.make_node("Reshape", ["x", "n"], ["y"])]
    four = helper.make_tensor("four", TensorProto.INT64, [1], [4])
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [four])


def test_free_dimension_override_fixes_the_input_and_folds_its_shape(ort_nodes):
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", 2)
    sess = ort.InferenceSession(_reshape_by_shape_model(), so)
    assert sess.get_inputs()[0].shape == [2, 4]
    # the Shape/Mul computation on the now-known batch is folded: only the Reshape runs
    assert [p.op_type for p in sess.get_placement().nodes] == ["Reshape"]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], X.reshape(-1))
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': wrong dimension 0: expected 2"):
        sess.run(None, {"x": np.zeros((3, 4), np.float32)})
    unfixed = ort.InferenceSession(_reshape_by_shape_model())
    assert unfixed.get_inputs()[0].shape == ["batch", 4]
    assert len(unfixed.get_placement().nodes) == 3
    with pytest.raises(ort.InvalidArgument, match="negative"):
        so.add_free_dimension_override_by_name("batch", -1)


def test_ortvalue_of_a_0_d_array_stays_0_d():
    v = ort.OrtValue.ortvalue_from_numpy(np.array(3.0, np.float32))
    assert v.shape() == [] and v.numpy().shape == ()
    v.update_inplace(np.array(4.0, np.float32))
    assert v.numpy() == 4.0


def test_no_output_bound_is_refused_as_in_onnxruntime(host):
    """onnxruntime: "At least one output should be requested" (a RuntimeError); a run that
    returned nothing hid a forgotten bind_output."""
    sess = ort.InferenceSession(chain_model().SerializeToString(), providers=["CPUExecutionProvider"])
    binding = sess.io_binding()
    binding.bind_cpu_input("x", np.ones((1, 4), np.float32))
    with pytest.raises(RuntimeError, match="At least one output should be requested"):
        sess.run_with_iobinding(binding)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    assert len(binding.get_outputs()) == 1
