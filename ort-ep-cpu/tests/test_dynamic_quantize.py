"""DynamicQuantizeLinear (and ``contrib_quant.quantize_dynamic``, which the dynamic-quantization
contrib ops share): the codes by one compiled pass where numba is there, else numpy's five;
both equal onnxruntime's to the code, on noise, on values that land on rounding ties, on an
all-positive and an all-zero input."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.testing import exact_reference


def _model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("zero", TensorProto.UINT8, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    noise = (rng.standard_normal((1, 24, 32, 100)) * 3).astype(np.float32)
    # range [-2.55, 2.55]: scale 0.02, so k + 0.5 steps are ties (rounded half to even)
    ties = np.concatenate([(np.arange(-127, 127, dtype=np.float32) + np.float32(0.5)) * np.float32(0.02),
                           np.array([-2.55, 2.55], np.float32)])
    return {"noise": noise, "ties": ties, "positive": np.abs(noise) + 1, "zeros": np.zeros((3, 5), np.float32),
            "negative": -np.abs(noise) - 0.25, "signed zeros": np.array([-0.0, 0.0, -0.0], np.float32),
            "one value": np.full((2, 3), 1.75, np.float32), "wide": noise * np.float32(1e30)}


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("case", list(_inputs()))
def test_codes_scale_and_zero_point_equal_onnxruntime(monkeypatch, compiled, case):
    used = use_compiled(monkeypatch, compiled, "quantize")
    data, x = _model(), _inputs()[case]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert used or not compiled  # the compiled pass was asked for (numpy: USE off, it answers None)
