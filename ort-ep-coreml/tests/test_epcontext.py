"""EPContext through core's mechanism, with the test-only MIL evaluator in place of Core ML
(conftest.evaluator_device): a session or ModelCompiler writes a context model whose EPContext
nodes hold the packages; it reloads without building, as does the cross-build's context model;
a damaged blob fails the session naming the partition."""

from __future__ import annotations

import onnx
import pytest

import ort_core as ort
from conftest import COREML, assert_close, reference, session
from ort_core.testing import models


def _options(**entries) -> ort.SessionOptions:
    so = ort.SessionOptions()
    for k, v in entries.items():
        so.add_session_config_entry(k, v)
    return so


@pytest.fixture
def counted_builds(monkeypatch):
    from ort_ep_coreml import build

    calls = []
    real = build.lower
    monkeypatch.setattr(build, "lower", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("embed", ["1", "0"])
def test_session_context_model_reloads_without_building(embed, tmp_path, evaluator_device, counted_builds):
    model = models.cnn(image=16, width=8, blocks=1)
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    sess = session(str(path), sess_options=_options(**{"ep.context_enable": "1", "ep.context_embed_mode": embed}))
    ctx_path = tmp_path / "cnn_ctx.onnx"
    assert sess.get_placement().context_model == str(ctx_path) and len(counted_builds) == 1
    ctx = onnx.load(str(ctx_path))
    [node] = ctx.graph.node
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert node.op_type == "EPContext" and attrs["source"] == COREML.encode() and attrs["embed_mode"] == int(embed)
    assert attrs["ep_sdk_version"].startswith(b"coremltools ")
    again = session(str(ctx_path))
    assert len(counted_builds) == 1  # loaded from the blob
    assert again.get_placement().counts() == {COREML: 1}
    feeds = models.random_inputs(model, batch=2)
    assert_close(again.run(None, feeds), reference(model, feeds), rtol=1e-4, atol=1e-4)


def test_model_compiler_writes_the_context_model(tmp_path, evaluator_device):
    model = models.transformer(seq=8, dim=16, heads=2, layers=1)
    path = tmp_path / "bert.onnx"
    onnx.save(model, str(path))
    so = ort.SessionOptions()
    so.add_provider(COREML, {})
    out = tmp_path / "bert_compiled.onnx"
    ort.ModelCompiler(so, str(path)).compile_to_file(str(out))
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["EPContext"]
    feeds = models.random_inputs(model, batch=2)
    assert_close(session(str(out)).run(None, feeds), reference(model, feeds), rtol=1e-4, atol=1e-4)


def test_cross_built_context_model_runs_in_a_session(tmp_path, evaluator_device, counted_builds):
    """What ``ort-core coreml-build`` writes on Linux is what a Mac session loads."""
    from ort_ep_coreml.build import build_model

    model = models.cnn(image=16, width=8, blocks=1)
    report = build_model(model, tmp_path, dims={"batch": 2})
    builds = len(counted_builds)
    sess = session(str(report.context_model))
    assert len(counted_builds) == builds and sess.get_placement().counts() == {COREML: 1}
    feeds = models.random_inputs(model, batch=2)
    assert_close(sess.run(None, feeds), reference(model, feeds), rtol=1e-4, atol=1e-4)


def test_damaged_blob_fails_naming_the_partition(tmp_path, evaluator_device):
    from ort_ep_coreml.build import build_model

    report = build_model(models.mlp(in_features=8, hidden=16, layers=1), tmp_path, dims={"batch": 1})
    blob = next(tmp_path.glob("*_CoreMLExecutionProvider_0.bin"))
    blob.write_bytes(blob.read_bytes()[:100])
    with pytest.raises(ort.OrtError, match="partition .*not a Core ML context blob"):
        session(str(report.context_model))
    blob.unlink()
    with pytest.raises(ort.OrtError, match=blob.name):
        session(str(report.context_model))
