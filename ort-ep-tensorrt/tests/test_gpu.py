"""Real engines on a real GPU: skipped here (no GPU, no TensorRT), run by scripts/device_check.sh.

The generated MLP, CNN and BERT encoder through [TensorRT, CUDA, CPU] against onnxruntime's CPU
provider; no copies between TensorRT and CUDA nodes; the engine cache reused by a second
session; the EPContext round trip; trt_fp16_enable within float16 tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core
from ort_core import registry
from ort_core.testing import models

_devices = registry().devices("TensorrtExecutionProvider")
pytestmark = pytest.mark.skipif(not _devices.devices, reason=f"TensorRT is not usable here: {_devices.unavailable_reason}")

PROVIDERS = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
MODELS = {
    "mlp": lambda: models.mlp(),
    "cnn": lambda: models.cnn(),
    "bert": lambda: models.transformer(),
}


def _reference(model, feeds):
    import onnxruntime

    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_match_onnxruntime(name, tmp_path):
    model = MODELS[name]()
    feeds = models.random_inputs(model, batch=2)
    session = ort_core.InferenceSession(model.SerializeToString(), providers=[
        ("TensorrtExecutionProvider", {"trt_engine_cache_enable": "1", "trt_engine_cache_path": str(tmp_path)}),
        "CUDAExecutionProvider", "CPUExecutionProvider"])
    for got, want in zip(session.run(None, feeds), _reference(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    placement = session.get_placement()
    assert placement.counts().get("TensorrtExecutionProvider", 0) > 0, str(placement)
    # TensorRT and CUDA share "Cuda" memory: no copy between them
    assert not [c for c in placement.copies if {c.source, c.target} == {"Cuda"}]


def test_engine_cache_reused_by_a_second_session(tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, "ort_core")
    model = models.cnn().SerializeToString()
    options = {"trt_engine_cache_enable": "1", "trt_engine_cache_path": str(tmp_path)}
    ort_core.InferenceSession(model, providers=[("TensorrtExecutionProvider", options), "CPUExecutionProvider"])
    assert list(tmp_path.glob("*.engine"))
    caplog.clear()
    ort_core.InferenceSession(model, providers=[("TensorrtExecutionProvider", options), "CPUExecutionProvider"])
    assert "engine loaded from the cache" in caplog.text


def test_epcontext_round_trip(tmp_path):
    model = models.mlp()
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    options = ort_core.SessionOptions()
    options.add_session_config_entry("ep.context_enable", "1")
    feeds = models.random_inputs(model, batch=2)
    first = ort_core.InferenceSession(str(path), options, providers=PROVIDERS).run(None, feeds)
    again = ort_core.InferenceSession(str(tmp_path / "mlp_ctx.onnx"), providers=PROVIDERS).run(None, feeds)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_fp16_within_float16_tolerance():
    model = models.cnn()
    feeds = models.random_inputs(model, batch=2)
    session = ort_core.InferenceSession(model.SerializeToString(), providers=[
        ("TensorrtExecutionProvider", {"trt_fp16_enable": "1"}), "CPUExecutionProvider"])
    for got, want in zip(session.run(None, feeds), _reference(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * float(np.abs(want).max()))
