"""Dispatches of a run are batched into few submissions; pipelines compile once."""

from __future__ import annotations

import numpy as np

import ort_core as ort
from conftest import PROVIDERS, needs_adapter
from ort_core.testing import models

pytestmark = needs_adapter


def _runtime(session):
    return next(b for b in session._providers if b.name == "WebGpuExecutionProvider").ctx.state["runtime"]


def test_one_submission_per_run_for_a_single_output_model():
    model = models.cnn(image=16, width=8, blocks=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    feeds = models.random_inputs(model)
    session.run(None, feeds)
    stats = _runtime(session).stream.stats
    before = (stats.submits, stats.dispatches, stats.downloads)
    session.run(None, feeds)
    submits, dispatches, downloads = (stats.submits - before[0], stats.dispatches - before[1], stats.downloads - before[2])
    assert dispatches >= 10  # every compute node recorded a dispatch
    assert downloads == 1  # the one output
    assert submits == 1  # all of them in one command buffer, submitted for the readback


def test_pipelines_are_compiled_once_and_shared_by_sessions():
    model = models.mlp(in_features=24, hidden=40, layers=2)
    feeds = models.random_inputs(model, batch=3)
    first = ort.InferenceSession(model, providers=PROVIDERS)
    first.run(None, feeds)
    gpu = _runtime(first).gpu
    compiled = gpu.compiled
    first.run(None, feeds)
    second = ort.InferenceSession(model, providers=PROVIDERS)
    second.run(None, feeds)
    assert _runtime(second).gpu is gpu
    assert gpu.compiled == compiled


def test_max_batch_forces_intermediate_submissions():
    model = models.mlp(in_features=8, hidden=8, layers=3)
    session = ort.InferenceSession(model, providers=[("WebGpuExecutionProvider", {"max_batch": "2"})])
    feeds = models.random_inputs(model)
    session.run(None, feeds)
    stats = _runtime(session).stream.stats
    before = stats.submits
    session.run(None, feeds)
    assert stats.submits - before >= 3


def test_elementwise_pipelines_are_reused_across_sizes():
    """Elementwise shaders are keyed by shape class (rank and broadcast pattern), not sizes."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Add", ["x", "b"], ["s"]),  # broadcast over the batch
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Mul", ["r", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "sizes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model, providers=PROVIDERS)
    rng = np.random.default_rng(0)
    b = rng.standard_normal(5).astype(np.float32)
    gpu = _runtime(session).gpu
    for n in (2, 7, 300):
        x = rng.standard_normal((n, 5)).astype(np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x, "b": b})[0], np.maximum(x + b, 0) * x, rtol=1e-6)
        if n == 2:
            compiled = gpu.compiled
    assert gpu.compiled == compiled
