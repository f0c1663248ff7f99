"""Parity with onnxruntime on the generated MLP, CNN and transformer, every node on WebGPU.

Tolerances: float32 kernels accumulate in f32 in a different order than onnxruntime's MLAS, and
Erf uses a polynomial (abs. error < 1.5e-7), so rtol=1e-3, atol=1e-5 (measured max abs error on
lavapipe: mlp 9e-8, cnn 5e-7, transformer 2e-6).
"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ort_core as ort
from conftest import PROVIDERS, needs_adapter
from ort_core.testing import models

pytestmark = needs_adapter


def _reference(model, feeds):
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_model_parity_all_nodes_on_webgpu(name):
    model = models.MODELS[name]()
    feeds = models.random_inputs(model, batch=2, seed=1)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    assert placement.counts() == {"WebGpuExecutionProvider": len(placement.nodes)}, str(placement)
    # copies only where values cross the graph's edges
    edges = {i.name for i in model.graph.input} | {o.name for o in model.graph.output}
    assert {c.value for c in placement.copies} <= edges, placement.copies
    assert {(c.source, c.target) for c in placement.copies} <= {("Cpu", "WebGpu"), ("WebGpu", "Cpu")}
    expected = _reference(model, feeds)
    for _ in range(2):  # the second run reuses pooled buffers and cached pipelines
        got = session.run(None, feeds)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert isinstance(g, np.ndarray) and g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)


def test_transformer_shape_chain_runs_on_host_without_copies():
    model = models.transformer(seq=16, dim=32, heads=2, layers=1)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    host = [p for p in placement.nodes if "on the host" in p.note]
    assert {p.op_type for p in host} == {"Shape", "Gather", "Unsqueeze", "Concat"}
    assert all(p.provider == "WebGpuExecutionProvider" for p in host)
    assert [c.value for c in placement.copies if c.source == "WebGpu"] == ["last_hidden_state"]
    # a different batch size: new shapes, same session
    for batch in (1, 3):
        feeds = models.random_inputs(model, batch=batch, seed=batch)
        np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", ["transformer", "cnn"])
def test_new_batch_size_compiles_no_pipeline(name):
    """Every op of these models has shaders keyed by shape class, the batch size only in uniforms."""
    model = models.transformer(seq=16, dim=32, heads=2, layers=1) if name == "transformer" else models.cnn(image=16, width=8, blocks=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    gpu = next(b for b in session._providers if b.name == "WebGpuExecutionProvider").ctx.state["runtime"].gpu
    session.run(None, models.random_inputs(model, batch=1))
    compiled = gpu.compiled
    for batch in (2, 5):
        feeds = models.random_inputs(model, batch=batch, seed=batch)
        np.testing.assert_allclose(session.run(None, feeds)[0], _reference(model, feeds)[0], rtol=1e-3, atol=1e-5)
    assert gpu.compiled == compiled


def test_hard_swish_rewrite_stays_on_webgpu():
    """The optimizer rewrites x * clip(x + 3, 0, 6) / 6 (as PaddleOCR exports hard-swish) into
    HardSigmoid + Mul; the new values must stay typed so the provider takes both."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Add", ["x", "three"], ["a"]),
        helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node("Div", ["m", "six"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("three", 3), ("zero", 0), ("six", 6))]
    graph = helper.make_graph(
        nodes, "hardswish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model, providers=PROVIDERS)
    placement = session.get_placement()
    assert placement.counts() == {"WebGpuExecutionProvider": len(placement.nodes)}, str(placement)
    x = np.linspace(-5, 5, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gemm_kernel", ["tiled", "registers"])
@pytest.mark.parametrize("name,batch", [("mlp", 40), ("transformer", 2), ("cnn", 1)])
def test_both_gemm_kernels(name, batch, gemm_kernel):
    """Both MatMul/Gemm kernels for products of 32 rows or more (Conv always uses the tiles)."""
    model = models.MODELS[name]()
    feeds = models.random_inputs(model, batch=batch, seed=3)
    session = ort.InferenceSession(model, providers=[("WebGpuExecutionProvider", {"gemm_kernel": gemm_kernel})])
    for g, e in zip(session.run(None, feeds), _reference(model, feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
