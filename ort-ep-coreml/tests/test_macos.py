"""Core ML itself: MLModel(...).predict of the packages. macOS only (elsewhere these skip)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import COREML, assert_close, macos_only, reference, session
from ort_core.testing import models

pytestmark = macos_only


@pytest.mark.parametrize("units", ["CPUOnly", "ALL"])
@pytest.mark.parametrize("name", ["cnn", "transformer", "mlp"])
def test_generated_models_match_onnxruntime(name, units):
    model = getattr(models, name)()
    sess = session(model, {"MLComputeUnits": units})
    assert set(sess.get_placement().counts()) == {COREML}
    for batch in (1, 2):
        feeds = models.random_inputs(model, batch=batch)
        # CPUOnly computes in float32; ALL may use the GPU/Neural Engine in float16
        tol = 1e-4 if units == "CPUOnly" else 3e-2
        assert_close(sess.run(None, feeds), reference(model, feeds), rtol=tol, atol=tol)


def test_float16_io():
    from conftest import node_model

    model = node_model("Conv", {"x": np.zeros((1, 2, 5, 5), np.float16)},
                       {"W": np.random.default_rng(0).standard_normal((3, 2, 3, 3)).astype(np.float16)}, pads=[1, 1, 1, 1])
    sess = session(model, {"MLComputeUnits": "CPUOnly"})
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float16)}
    assert_close(sess.run(None, feeds), reference(model, feeds), rtol=2e-2, atol=2e-2)


def test_built_on_any_os_runs_here(tmp_path):
    """What the cross-build writes (here built on the Mac) loads as an EPContext model."""
    import ort_core as ort
    from ort_ep_coreml.build import build_model

    model = models.cnn()
    report = build_model(model, tmp_path, dims={"batch": 1})
    sess = ort.InferenceSession(str(report.context_model), providers=[COREML, "CPUExecutionProvider"])
    feeds = models.random_inputs(model, batch=1)
    assert_close(sess.run(None, feeds), reference(model, feeds), rtol=1e-3, atol=1e-3)
