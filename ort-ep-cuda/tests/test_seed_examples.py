"""The Python examples of onnxruntime's execution-provider overview (shared/reference), run as
written there with one change: ``import ort_core as ort`` for ``import onnxruntime as ort``. On
the FAKE device without a GPU; on the GPU under scripts/device_check.sh."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest

from ort_core.testing import models

BASIC = """
import ort_core as ort

# Providers are tried in order of priority
session = ort.InferenceSession(
    "model.onnx",
    providers=['CUDAExecutionProvider', 'CPUExecutionProvider']
)
"""

WITH_OPTIONS = """
import ort_core as ort

# With provider options
session = ort.InferenceSession(
    "model.onnx",
    providers=[
        ('CUDAExecutionProvider', {
            'device_id': 0,
            'arena_extend_strategy': 'kNextPowerOfTwo',
            'gpu_mem_limit': 2 * 1024 * 1024 * 1024,
            'cudnn_conv_algo_search': 'EXHAUSTIVE',
            'do_copy_in_default_stream': True,
        }),
        'CPUExecutionProvider'
    ]
)
"""

FALLBACK_CHAIN = """
import ort_core as ort

# TensorRT will handle compatible ops, CUDA handles others
session = ort.InferenceSession(
    "model.onnx",
    providers=[
        'TensorrtExecutionProvider',
        'CUDAExecutionProvider',
        'CPUExecutionProvider'
    ]
)
"""

CHECKING = """
import ort_core as ort

# List all available providers
print(ort.get_available_providers())

# Check which providers are used by a session
session = ort.InferenceSession("model.onnx")
print(session.get_providers())
"""


@pytest.fixture
def model_in_cwd(tmp_path, monkeypatch):
    model = models.cnn(image=32, width=16, blocks=2)
    onnx.save(model, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    return model


def _run_example(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<seed example>", "exec"), namespace)  # noqa: S102 - the example's own text
    return namespace


@pytest.mark.parametrize("source", [BASIC, WITH_OPTIONS, FALLBACK_CHAIN], ids=["basic", "options", "fallback-chain"])
def test_seed_example_runs_on_cuda_and_matches_onnxruntime(model_in_cwd, source):
    session = _run_example(source)["session"]
    assert session.get_providers()[0] == "CUDAExecutionProvider", session.get_providers()
    assert "CPUExecutionProvider" in session.get_providers()
    feeds = models.random_inputs(model_in_cwd, batch=2)
    expected = onnxruntime.InferenceSession("model.onnx", providers=["CPUExecutionProvider"]).run(None, feeds)
    # the examples keep the default use_tf32=1 (as onnxruntime's CUDA provider): products in TF32,
    # 10 mantissa bits, measured within 2e-3 relative on the H200
    for got, want in zip(session.run(None, feeds), expected):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3)


def test_seed_example_checking_providers(model_in_cwd, capsys):
    namespace = _run_example(CHECKING)
    available, used = capsys.readouterr().out.splitlines()
    assert "CUDAExecutionProvider" in available and "CPUExecutionProvider" in available
    # with no providers argument a session takes every available provider in priority order
    assert used == str(namespace["session"].get_providers())
    assert namespace["session"].get_providers()[-1] == "CPUExecutionProvider"
