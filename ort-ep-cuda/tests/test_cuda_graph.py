"""enable_cuda_graph=1: warm-up, capture, replay with onnxruntime's rules (I/O bound on the
device as the same buffers, static shapes, every node on CUDA, no control flow). Without a GPU
the FAKE device records the kernel calls as its "graph" and replays them into the captured
buffers; on a GPU, CuPy's stream capture. Needs ort-core's device OrtValues (0.2)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from conftest import ON_GPU, runtime
from ort_core.testing import models

GRAPH = [("CUDAExecutionProvider", {"enable_cuda_graph": "1", "use_tf32": "0"})]


def _device_value(x):
    try:
        return ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    except ort.InvalidArgument as exc:
        if "not supported" in str(exc):
            pytest.skip(f"this ort-core has no device OrtValues: {exc}")
        raise


def _write(value, x):
    """New data into a bound device buffer, through DLPack (the buffer stays where it is)."""
    if ON_GPU:
        import cupy

        cupy.from_dlpack(value)[...] = cupy.asarray(x)
    else:
        value._data[...] = x  # the FAKE device's array is a numpy array


def test_capture_then_replay_with_new_data_in_the_bound_buffers():
    model = models.cnn(image=16, width=8, blocks=2)
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session = ort.InferenceSession(model, providers=GRAPH)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    bound = _device_value(x)
    binding = session.io_binding()
    binding.bind_ortvalue_input(session.get_inputs()[0].name, bound)
    binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
    dev = runtime(session).dev
    for k in range(5):
        x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
        _write(bound, x)
        binding.run()
        expected = reference.run(None, {session.get_inputs()[0].name: x})[0]
        np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], expected, rtol=1e-3, atol=1e-5)
        assert binding.copies() == []
        if not ON_GPU and k >= 1:  # run 2 was captured (and launched once), each later run launches it
            assert dev.graph_launches == k
            if k == 1:
                launched = dev.launches
            assert dev.launches == launched  # replays run no kernel body
    if not ON_GPU:
        assert len(dev.graph) >= 8  # the captured kernel calls


def test_a_new_input_buffer_after_capture_is_an_error_naming_the_rule():
    model = models.mlp(in_features=8, hidden=8, layers=1)
    session = ort.InferenceSession(model, providers=GRAPH)
    x = models.random_inputs(model)["x"]
    binding = session.io_binding()
    binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
    for run in (1, 2, 3):  # warm-up, capture, replay
        binding.bind_cpu_input("x", x)  # copied to a new device buffer by each run
        if run == 3:
            with pytest.raises(ort.OrtError, match="not the device buffer the graph was captured with"):
                binding.run()
        else:
            binding.run()


def test_an_output_copied_to_the_host_in_the_captured_run_is_an_error_naming_the_rule():
    model = models.mlp(in_features=8, hidden=8, layers=1)
    session = ort.InferenceSession(model, providers=GRAPH)
    feeds = models.random_inputs(model)
    session.run(None, feeds)  # warm-up
    with pytest.raises(ort.OrtError, match=r"a copy to the host inside the captured run .*bind_output"):
        session.run(None, feeds)  # captured: the output would be read before anything ran


def _cumsum_model():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("CumSum", ["r", "axis"], ["y"], name="cumsum")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
                              [helper.make_tensor("axis", TensorProto.INT64, [], [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_a_node_off_cuda_is_an_error_naming_it():
    session = ort.InferenceSession(_cumsum_model(), providers=GRAPH + ["CPUExecutionProvider"])
    with pytest.raises(ort.OrtError) as info:
        session.run(None, {"x": np.ones((3, 5), np.float32)})
    assert "enable_cuda_graph=1" in str(info.value)
    assert "node 'cumsum' (CumSum) is not on CUDA: no CUDA kernel for CumSum" in str(info.value)


def test_a_changed_input_shape_after_capture_is_an_error():
    model = models.mlp(in_features=8, hidden=8, layers=1)
    session = ort.InferenceSession(model, providers=GRAPH)
    _device_value(np.ones(1, np.float32))  # (skips without device OrtValues)
    binding = session.io_binding()
    binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
    for batch in (2, 2, 3):
        binding.bind_ortvalue_input("x", _device_value(np.ones((batch, 8), np.float32)))
        if batch == 3:
            with pytest.raises(ort.OrtError, match=r"has shape \(3, 8\), the graph was captured with \(2, 8\)"):
                binding.run()
        else:
            binding.run()
