"""The generated MLP, CNN and BERT-like encoder through [QNN, CPU] against onnxruntime CPU."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import CPU, QNN, needs_qnn, reference, rel_error, session
from ort_core.testing import models

pytestmark = needs_qnn

# float32 on the HTP simulator: MLP and CNN agree to float32 rounding; the encoder's
# LayerNormalization is computed less exactly by HTP (~1e-3 relative, measured)
FP32 = {"mlp": 1e-5, "cnn": 1e-5, "transformer": 5e-3}
# enable_htp_fp16_precision: float16 arithmetic (10-bit mantissa), accumulated over the layers
FP16 = {"mlp": 2e-2, "cnn": 2e-2, "transformer": 5e-2}

_sessions: dict = {}


def _session(name: str, batch: int, fp16: bool):
    # sessions are shared between tests: each finalizes QNN graphs, which is slow on the simulator
    key = (name, batch, fp16)
    if key not in _sessions:
        options = {"enable_htp_fp16_precision": "1"} if fp16 else {}
        _sessions[key] = session(getattr(models, name)(), options, batch=batch)
    return _sessions[key]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_every_node_of_mlp_and_cnn_runs_on_qnn_in_one_graph(name):
    placement = _session(name, 2, False).get_placement()
    assert placement.counts() == {QNN: len(placement.nodes)}
    assert {p.group for p in placement.nodes} == {0}


def test_encoder_placement_names_why_each_cpu_node_is_not_on_qnn():
    placement = _session("transformer", 2, False).get_placement()
    off = [p for p in placement.nodes if p.provider != QNN]
    assert {p.op_type for p in off} == {"Gather", "Unsqueeze", "Cast", "Erf"}
    for p in off:
        reason = p.declined[QNN]
        assert p.name in reason
        expected = {"Gather": "fails graphFinalize", "Erf": "no QNN lowering"}.get(p.op_type, "int64")
        assert expected in reason, reason
    assert placement.counts()[QNN] >= len(placement.nodes) - 5


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_generated_models_match_onnxruntime(name, fp16):
    model = getattr(models, name)()
    feeds = models.random_inputs(model, batch=2, seed=3)
    sess = _session(name, 2, fp16)
    placement = sess.get_placement()
    assert placement.counts()[QNN] == len(placement.nodes) - (5 if name == "transformer" else 0)
    actual = sess.run(None, feeds)
    expected = reference(model, feeds)
    assert [a.shape for a in actual] == [e.shape for e in expected]
    err = rel_error(actual, expected)
    assert err <= (FP16 if fp16 else FP32)[name], err
    if fp16 and name != "transformer":
        # float16 really is in use: the results differ from float32's
        assert rel_error(_session(name, 2, False).run(None, feeds), actual) > 1e-5


def test_symbolic_batch_builds_a_graph_per_input_shape():
    model = models.mlp()
    sess = session(model)  # batch left symbolic
    placement = sess.get_placement()
    assert placement.counts() == {QNN: len(placement.nodes)}
    for batch in (1, 3, 1):
        feeds = models.random_inputs(model, batch=batch, seed=batch)
        assert rel_error(sess.run(None, feeds), reference(model, feeds)) <= 1e-5
    from ort_ep_qnn.kernel import PerShapeKernel

    (kernel,) = [k for k in _kernels(sess) if isinstance(k, PerShapeKernel)]
    assert kernel.builds == 2  # batch 1 and 3; the second batch-1 run reuses the first graph


def test_cpu_fallback_for_a_declined_node_in_the_middle():
    from ort_core.testing.plugins import OpVeto

    model = models.cnn()
    feeds = models.random_inputs(model, batch=1, seed=0)
    with OpVeto(QNN, ops=["MaxPool"], reason="vetoed for the test").installed():
        sess = session(model, batch=1)
    placement = sess.get_placement()
    assert {p.provider for p in placement.nodes if p.op_type == "MaxPool"} == {CPU}
    assert rel_error(sess.run(None, feeds), reference(model, feeds)) <= 1e-5


def _kernels(sess):
    from conftest import qnn_state

    return qnn_state(sess)["kernels"]


def test_outputs_are_float32_numpy_arrays():
    model = models.mlp()
    out = _session("mlp", 2, False).run(None, models.random_inputs(model, batch=2))[0]
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
