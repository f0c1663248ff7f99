"""Softmax over the last axis as exp, row sums by one GEMV and a multiply (the row max skipped),
redone with the max subtracted where a row's exponentials overflow, underflow or are NaN: the
numpy-only path (the compiled row loop, which takes float32 where numba is installed, is
switched off here: test_family_a_semantics checks it); inputs under ``reduce.SMALL_SOFTMAX``
take the plain path (max subtracted, no GEMV); against
onnxruntime (float32: rtol 1e-5, atol 1e-7) and onnx.reference (float64: rtol 1e-12)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort
from ort_ep_cpu.kernels import _jit, reduce


def _model(elem, shape, axis, opset=13):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, list(shape))],
                              [helper.make_tensor_value_info("y", elem, list(shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def gemv_sums(monkeypatch):
    """How many times the row-sum GEMV ran (on the numpy-only path)."""
    monkeypatch.setattr(_jit, "USE", False)
    calls = []
    real = reduce.row_sums
    monkeypatch.setattr(reduce, "row_sums", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("shape,axis,opset", [((2, 40, 300), -1, 13), ((3, 3000), 1, 11), ((40, 5, 60), 1, 11)])
def test_softmax_matches_onnxruntime(shape, axis, opset, gemv_sums):
    data = _model(TensorProto.FLOAT, shape, axis, opset)
    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert gemv_sums  # the last axis (opset 13), or the rows opset 11 flattens to: the fast path


def test_softmax_over_an_inner_axis_takes_the_max_path(gemv_sums):
    data = _model(TensorProto.FLOAT, (20, 5, 60), 1)
    x = np.random.default_rng(1).standard_normal((20, 5, 60)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert not gemv_sums


@pytest.mark.parametrize("row", [[100.0, 99.0, 0.0], [-200.0, -201.0, -230.0], [np.nan, 0.0, 1.0], [-np.inf] * 3],
                         ids=["overflow", "underflow", "nan", "all-minus-inf"])
def test_rows_that_need_the_max_are_redone_with_it(row, gemv_sums):
    data = _model(TensorProto.FLOAT, (3000, 3), -1)
    x = np.tile(np.array([[0.5, -1.0, 2.0]], np.float32), (3000, 1))
    x[500] = row
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with np.errstate(invalid="ignore"):
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)  # NaN where onnxruntime has NaN
    assert gemv_sums  # tried first, then redone


def test_softmax_float64_matches_the_reference():
    data = _model(TensorProto.DOUBLE, (4, 50), -1)
    x = np.random.default_rng(2).standard_normal((4, 50)) * 10
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("row", [[100.0, 99.0, 0.0], [-200.0, -201.0, -230.0], [np.nan, 0.0, 1.0], [-np.inf] * 3],
                         ids=["overflow", "underflow", "nan", "all-minus-inf"])
@pytest.mark.parametrize("opset", [11, 13])
def test_small_inputs_take_the_plain_path(row, opset, gemv_sums):
    data = _model(TensorProto.FLOAT, (2, 3), -1, opset)
    x = np.array([[0.5, -1.0, 2.0], row], np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with np.errstate(invalid="ignore"):
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert not gemv_sums
