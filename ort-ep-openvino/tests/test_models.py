"""Parity with onnxruntime on the generated and the real models; placement."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import CPU, OV, assert_parity, real_model, reference, session, text_image
from ort_core.testing import models


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_openvino_takes_every_node_of_mlp_and_cnn(name):
    model = getattr(models, name)()
    sess = session(model)
    placement = sess.get_placement()
    assert placement.counts() == {OV: len(placement.nodes)}
    assert {p.group for p in placement.nodes} == {0}  # one fused group, one compiled model
    assert len(ov_kernels(sess)) == 1


def ov_kernels(sess):
    from conftest import ov_state

    return ov_state(sess)["kernels"]


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("batch", [1, 3])
def test_parity_generated_models(name, batch):
    model = getattr(models, name)()
    feeds = models.random_inputs(model, batch=batch, seed=batch)
    sess = session(model)
    assert_parity(sess.run(None, feeds), reference(model.SerializeToString(), feeds))


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"])
def test_bert_pooler_matches_onnxruntime_at_every_level(level):
    """Issue 16, defect 1: at the default level the pooler (first token -> Gemm -> Tanh) came
    out of OpenVINO off by up to 0.92, since the optimizer formed com.microsoft FusedGemm with
    activation=Tanh for it (OpenVINO claims it and drops the Tanh). The graph OpenVINO gets now
    has no fused op at all: it declares none."""
    import ort_core as ort

    model = models.transformer(seq=16, dim=64, heads=2, layers=2, pooler=True)
    feeds = models.random_inputs(model, batch=2)
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    sess = session(model, sess_options=so)
    assert not [p.op_type for p in sess.get_placement().nodes if p.domain]  # no vendor-domain node
    assert_parity(sess.run(None, feeds), reference(model.SerializeToString(), feeds))


def test_fused_gemm_with_tanh_in_a_model_is_declined():
    """A model that already holds com.microsoft FusedGemm(Tanh) (onnxruntime's optimizer writes
    them): OpenVINO would drop the Tanh, so the node goes to the CPU provider with the reason."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("FusedGemm", ["x", "w", "b"], ["y"], domain="com.microsoft", transB=1, activation="Tanh")],
        "fused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
        [numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    sess = session(model)
    (node,) = sess.get_placement().nodes
    assert node.provider == CPU and "ignores activation 'Tanh'" in node.declined[OV]
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32) * 2}
    assert_parity(sess.run(None, feeds), reference(model.SerializeToString(), feeds))


def test_transformer_placement_all_openvino():
    placement = session(models.transformer()).get_placement()
    assert placement.counts() == {OV: len(placement.nodes)}


@pytest.mark.parametrize("batch", [1, 2])
def test_parity_ocr_det(batch):
    path = real_model("ocr-det")
    feeds = {"x": text_image(batch)}
    sess = session(path)
    assert sess.get_placement().counts()[OV] == len(sess.get_placement().nodes)
    assert_parity(sess.run(None, feeds), reference(path, feeds))


def test_parity_ocr_rec():
    path = real_model("ocr-rec")
    rng = np.random.default_rng(0)
    feeds = {"x": rng.random((2, 3, 48, 320), dtype=np.float32)}
    sess = session(path)
    assert sess.get_placement().counts().get(OV, 0) > 0
    assert_parity(sess.run(None, feeds), reference(path, feeds))


@pytest.mark.parametrize("rate,samples", [(16000, 512), (8000, 256)])
def test_parity_silero_vad(rate, samples):
    path = real_model("silero-vad")
    # the model's If branches hold the network in fragments of 1-21 nodes; OpenVINO gets them
    # with min_subgraph_size 1 (the default leaves them to the CPU provider: test_runtime.py)
    sess = session(path, {"min_subgraph_size": "1"})
    assert sess.get_placement().counts(None).get(OV, 0) > 0
    rng = np.random.default_rng(rate)
    state = np.zeros((2, 1, 128), np.float32)
    for _ in range(3):  # a few chunks, carrying the state as an application does
        feeds = {"input": (rng.standard_normal((1, samples)) * 0.1).astype(np.float32),
                 "state": state, "sr": np.array(rate, np.int64)}
        expected = reference(path, feeds)
        actual = sess.run(None, feeds)
        assert_parity(actual, expected)
        state = expected[1]


def test_fallback_nodes_run_on_cpu_with_reason():
    """A string-typed node is declined with a reason and runs on the CPU provider."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu"),
         helper.make_node("Identity", ["s"], ["t"], name="strings")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("t", TensorProto.STRING, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = session(model, {"min_subgraph_size": "1"})  # a one-node fragment (not the whole model)
    by_name = {p.name: p for p in sess.get_placement().nodes}
    assert by_name["relu"].provider == OV
    assert by_name["strings"].provider == CPU
    assert "tensor(string)" in by_name["strings"].declined[OV]
    y, t = sess.run(None, {"x": np.array([-1, 2], np.float32), "s": np.array(["a", "b"], dtype=object)})
    assert y.tolist() == [0, 2] and t.tolist() == ["a", "b"]
