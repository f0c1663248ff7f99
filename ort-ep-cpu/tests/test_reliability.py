"""Regression tests for issue 23 on the CPU provider: each fails without the fix it names.
Cases that hung or ate memory before their fix run in a subprocess with a time limit, so a
regression fails the test instead of stalling the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "t", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _in_subprocess(code: str, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter; a hang fails the test after ``timeout`` seconds."""
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish in {timeout} s:\n{code}")
    assert done.returncode == 0, done.stderr
    return done.stdout


# ------------------------------------------------------------------ 2. Conv with a huge stride
@pytest.mark.parametrize("group", [1, 2])  # 2: depthwise, the compiled loops' path
def test_conv_with_a_stride_of_2_to_the_32_finishes(group):
    out = _in_subprocess(f"""
        import numpy as np, onnxruntime
        from onnx import TensorProto, helper, numpy_helper
        import ort_core
        s = 2 ** 32
        w = numpy_helper.from_array(np.arange(36 // {group}, dtype=np.float32).reshape(2, 2 // {group}, 3, 3), "w")
        node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[s, s], pads=[1, 1, 1, 1], group={group})
        graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2, 4, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        x = np.random.default_rng(0).random((2, 2, 4, 4), dtype=np.float32)
        got = ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {{"x": x}})[0]
        want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {{"x": x}})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        print(got.shape)
    """, timeout=60)
    assert out.strip() == "(2, 2, 1, 1)"


# ------------------------------------------------------------------ 8. bounded per-shape caches
def test_ever_new_input_shapes_keep_a_bounded_number_of_conv_plans(monkeypatch):
    import gc

    from ort_ep_cpu.kernels import _onednn, _util, nn

    monkeypatch.setattr(_onednn, "USE", False)  # numpy's path, whose geometries are per shape

    w = numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["p"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 4, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    so = ort_core.SessionOptions()
    so.graph_optimization_level = ort_core.GraphOptimizationLevel.ORT_DISABLE_ALL  # the plain kernels
    sess = ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for n in range(1, 2 * _util.SHAPE_CACHE_MAX + 10):  # a batch size never seen before, each run
        sess.run(None, {"x": np.ones((n, 2, 4, 4), np.float32)})
    gc.collect()
    # type(), not isinstance(): a dead weakref.proxy among the objects raises on isinstance
    geometries = sum(type(o) is nn._Geometry for o in gc.get_objects())
    # unbounded, every shape's geometry (and its padded buffers and workspaces) stayed: 274
    assert geometries <= 2 * _util.SHAPE_CACHE_MAX, geometries  # Conv's and AveragePool's caches


# ------------------------------------------------------------------ 10. Range with delta 0
def test_range_with_delta_0_is_a_named_error_as_in_onnxruntime():
    t = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [])  # noqa: E731
    model = _model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="r")], [t("a"), t("b"), t("c")],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    feeds = {"a": np.float32(0), "b": np.float32(5), "c": np.float32(0)}
    with pytest.raises(Exception):  # noqa: B017  (onnxruntime's InvalidArgument)
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ort_core.Fail, match="Range node 'r': delta must not be 0"):
        sess.run(None, feeds)  # was "cannot convert float infinity to integer"


# ------------------------------------------------------------------ 11. NotImplemented's first line
def test_not_implemented_names_the_node_and_reason_on_its_first_line():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="alien", domain="no.such.domain")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model.opset_import.append(helper.make_opsetid("no.such.domain", 1))
    with pytest.raises(ort_core.NotImplemented) as info:
        ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    first = str(info.value).splitlines()[0]
    assert "node 'alien' (op Relu, domain no.such.domain" in first and "CPUExecutionProvider:" in first
    assert not first.endswith(":")
