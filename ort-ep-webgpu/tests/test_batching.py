"""Dispatches of a run are batched into few submissions; pipelines compile once."""

from __future__ import annotations

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
