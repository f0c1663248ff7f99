"""onnxruntime's SimplifiedLayerNormalization, which it registers in the ONNX domain: the
model loads (ort-core registers the schema) and the CPU kernel matches onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort


def _model(shape, axis, outputs=1, dtype=TensorProto.FLOAT):
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    scale = numpy_helper.from_array(np.random.default_rng(1).standard_normal(shape[axis:]).astype(np_dtype), "scale")
    outs = ["y", "inv"][:outputs]
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], outs, axis=axis, epsilon=1e-6)
    graph = helper.make_graph(
        [node], "rms", [helper.make_tensor_value_info("x", dtype, shape)],
        [helper.make_tensor_value_info("y", dtype, shape)]
        + ([helper.make_tensor_value_info("inv", TensorProto.FLOAT, None)] if outputs > 1 else []),
        [scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape, axis, outputs", [((2, 5, 16), -1, 1), ((2, 5, 16), 1, 1), ((3, 8), -1, 2)])
def test_matches_onnxruntime(shape, axis, outputs):
    onnxruntime = pytest.importorskip("onnxruntime")
    model = _model(shape, axis if axis >= 0 else len(shape) + axis, outputs)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 3
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.get_placement().counts() == {"CPUExecutionProvider": 1}
    for got, want in zip(session.run(None, {"x": x}), expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("outputs", [1, 2])
def test_float64_is_computed_in_float64(outputs):
    """A float64 input is normalised in float64, as onnxruntime does (also the optimizer's
    fusion of a float64 RMS norm written out): float32's rounding was 5.6e-7 off."""
    onnxruntime = pytest.importorskip("onnxruntime")
    model = _model((2, 5, 16), 2, outputs, TensorProto.DOUBLE)
    x = np.random.default_rng(0).standard_normal((2, 5, 16)) * 3
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert got[0].dtype == np.float64
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    if outputs > 1:
        assert got[1].dtype == want[1].dtype
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_the_model_passes_the_onnx_checker_once_core_is_loaded():
    import ort_core.graph.load  # noqa: F401  (registers the schema)

    onnx.checker.check_model(_model((2, 4), 1))
