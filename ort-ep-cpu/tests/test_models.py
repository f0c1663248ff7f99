"""Parity with onnxruntime on the generated MLP, CNN and transformer encoder.

Tolerance: rtol 1e-4, atol 1e-5 (float32; both sides use BLAS with different summation orders).
"""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from ort_core.testing import models

onnxruntime = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("name", sorted(models.MODELS))
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_generated_model_matches_onnxruntime(name, batch, level):
    model = models.MODELS[name]()
    feeds = models.random_inputs(model, batch=batch, seed=batch)
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert set(sess.get_placement().counts()) == {"CPUExecutionProvider"}
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = sess.run(None, feeds)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
