"""Sessions with the provider, its packages run by the test-only MIL evaluator (see
conftest.evaluator_device): the generated CNN and BERT encoder match onnxruntime, the cache
keeps packages between sessions, and kernel I/O checks name the input."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from conftest import COREML, assert_close, coreml_state, reference, session
from ort_core.testing import models


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_generated_models_match_onnxruntime(name, evaluator_device):
    model = getattr(models, name)()
    sess = session(model)
    counts = sess.get_placement().counts()
    assert set(counts) == {COREML}, counts  # every node (after core's optimizer) runs on Core ML
    for batch in (1, 3):  # the batch dim is a ranged shape in the package
        feeds = models.random_inputs(model, batch=batch)
        assert_close(sess.run(None, feeds), reference(model, feeds), rtol=1e-4, atol=1e-4)


def test_declined_nodes_fall_back_with_their_reason(evaluator_device):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("TopK", ["a", "k"], ["v", "i"], name="topk", axis=-1),
             helper.make_node("Sigmoid", ["v"], ["y"], name="sigmoid")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                              [helper.make_tensor(name="k", data_type=TensorProto.INT64, dims=[1], vals=[3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = session(model)
    placement = sess.get_placement()
    text = str(placement)
    assert "TopK is not lowered to Core ML" in text, text
    assert placement.counts() == {COREML: 2, "CPUExecutionProvider": 1}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)}
    assert_close(sess.run(None, feeds), reference(model, feeds))


def test_cache_directory_reuses_packages(tmp_path, evaluator_device, monkeypatch):
    from ort_ep_coreml import build

    model = models.cnn(image=16, width=8, blocks=1)
    options = {"ModelCacheDirectory": str(tmp_path / "cache")}
    lowered = []
    real = build.lower
    monkeypatch.setattr(build, "lower", lambda *a, **k: lowered.append(1) or real(*a, **k))
    first = session(model, options)
    assert len(lowered) == 1
    entries = list((tmp_path / "cache").iterdir())
    assert len(entries) == 1 and (entries[0] / "model.mlpackage" / "Manifest.json").is_file()
    second = session(model, options)
    assert len(lowered) == 1  # the second session built nothing
    feeds = models.random_inputs(model, batch=2)
    assert_close(second.run(None, feeds), first.run(None, feeds))
    # another build option is another key
    session(model, {**options, "AllowLowPrecisionAccumulationOnGPU": "1"})
    assert len(lowered) == 2 and len(list((tmp_path / "cache").iterdir())) == 2
    # a different group (other weights) is another key too
    session(models.cnn(image=16, width=8, blocks=1, seed=1), options)
    assert len(lowered) == 3


def test_require_static_input_shapes_declines_dynamic_inputs(evaluator_device):
    model = models.mlp(in_features=8, hidden=16, layers=1)
    sess = session(model, {"RequireStaticInputShapes": "1"})
    text = str(sess.get_placement())
    assert "RequireStaticInputShapes=1" in text and sess.get_placement().counts()[COREML] == 0, text


def test_wrong_input_dtype_is_an_ort_error(evaluator_device):
    model = models.mlp(in_features=8, hidden=16, layers=1)
    sess = session(model)
    with pytest.raises(ort.OrtError, match="x"):
        sess.run(None, {"x": np.zeros((2, 8), np.float64)})


def test_int64_inputs_beyond_int32_are_refused(evaluator_device):
    model = models.transformer(seq=8, dim=16, heads=2, layers=1)
    sess = session(model)
    feeds = models.random_inputs(model, batch=1)
    feeds["input_ids"] = feeds["input_ids"].copy()
    feeds["input_ids"][0, 0] = 2**40
    with pytest.raises(ort.OrtError, match="outside int32"):
        sess.run(None, feeds)


def test_session_state_is_released(evaluator_device):
    model = models.mlp(in_features=8, hidden=16, layers=1)
    sess = session(model)
    state = coreml_state(sess)
    work = state["work"].name
    import os

    assert os.path.isdir(work)
    from ort_ep_coreml import plugin

    plugin.ort_session_end(next(bp for bp in sess._providers if bp.name == COREML).ctx)
    assert not os.path.isdir(work)


def test_concurrent_runs_equal_serial_runs(evaluator_device):
    from concurrent.futures import ThreadPoolExecutor

    model = models.cnn(image=16, width=8, blocks=1)
    sess = session(model)
    feeds = [models.random_inputs(model, batch=2, seed=k) for k in range(4)]
    serial = [sess.run(None, f)[0] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda f: sess.run(None, f)[0], feeds * 2))
    for k, out in enumerate(parallel):
        np.testing.assert_array_equal(out, serial[k % 4])
