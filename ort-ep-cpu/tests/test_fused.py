"""The fused kernels (com.microsoft ops the optimizer emits) against onnxruntime's own
implementation of the same contrib ops, the generated models at every optimization level, and
intra_op_num_threads. Tolerances: rtol 1e-4 / atol 1e-5 on single ops, 1e-3 / 1e-4 on models."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.testing import models

RNG = np.random.default_rng(0)
LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ms_model(node, inputs, inits=()):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _session(data, level="disable", threads=0):
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = threads
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _same_as_onnxruntime(data, feeds, rtol=1e-4, atol=1e-5):
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = _session(data).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("activation,params", [
    ("Relu", []), ("Sigmoid", []), ("Tanh", []), ("LeakyRelu", [0.2]), ("Clip", [-0.5, 0.6]),
    ("HardSigmoid", [0.3, 0.4]),
])
def test_fused_conv(activation, params):
    attrs = {"activation": activation, "pads": [1, 1, 1, 1], "strides": [2, 2]}
    if params:
        attrs["activation_params"] = params
    node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft", **attrs)
    data = _ms_model(node, [("x", [2, 3, 9, 9])], [("w", _f32(4, 3, 3, 3)), ("b", _f32(4))])
    _same_as_onnxruntime(data, {"x": _f32(2, 3, 9, 9)})


@pytest.mark.parametrize("activation", ["Relu", "LeakyRelu", "Sigmoid"])
def test_fused_gemm(activation):
    attrs = {"activation": activation, "transB": 1, "alpha": 0.5}
    if activation == "LeakyRelu":
        attrs["activation_alpha"] = 0.1
    node = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain="com.microsoft", **attrs)
    data = _ms_model(node, [("a", [3, 5])], [("b", _f32(4, 5)), ("c", _f32(4))])
    _same_as_onnxruntime(data, {"a": _f32(3, 5)})


def test_gelu_and_bias_gelu():
    x = (_f32(4, 1000) * 4).astype(np.float32)
    x[0, :5] = [0.0, -0.0, 10.0, -10.0, 1e-8]
    _same_as_onnxruntime(_ms_model(helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft"), [("x", [4, 1000])]), {"x": x})
    node = helper.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft")
    _same_as_onnxruntime(_ms_model(node, [("x", [4, 1000])], [("b", _f32(1000))]), {"x": x})


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_fused_matmul(trans_a, trans_b):
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", alpha=0.25,
                            transA=trans_a, transB=trans_b)
    a_shape = [2, 3, 6, 5] if trans_a else [2, 3, 5, 6]
    b_shape = [2, 3, 7, 6] if trans_b else [2, 3, 6, 7]
    data = _ms_model(node, [("a", a_shape), ("b", b_shape)])
    _same_as_onnxruntime(data, {"a": _f32(*a_shape), "b": _f32(*b_shape)})


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("batch_a,batch_b", [(1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("rank", [3, 4])
def test_fused_matmul_trans_batch(trans_a, trans_b, batch_a, batch_b, rank):
    """transBatchA / transBatchB (they were refused): the operand's first axis moves behind its
    batch axes, (M, B1, .., K) -> (B1, .., M, K), as onnxruntime's kernel reads it."""
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", alpha=0.5, transA=trans_a,
                            transB=trans_b, transBatchA=batch_a, transBatchB=batch_b)
    batch = [2, 3][:rank - 2]

    def shape(rows, cols, trans, trans_batch):
        last_two = [cols, rows] if trans else [rows, cols]
        return [last_two[0], *batch, last_two[1]] if trans_batch else [*batch, *last_two]

    a_shape, b_shape = shape(5, 6, trans_a, batch_a), shape(6, 7, trans_b, batch_b)
    data = _ms_model(node, [("a", a_shape), ("b", b_shape)])
    _same_as_onnxruntime(data, {"a": _f32(*a_shape), "b": _f32(*b_shape)})


def test_fused_matmul_trans_batch_of_unequal_ranks_is_named():
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", transBatchA=1)
    data = _ms_model(node, [("a", [5, 2, 6]), ("b", [6, 7])])
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    with pytest.raises(ort.OrtError, match="transBatchA / transBatchB need A and B of one rank"):
        session.run(None, {"a": _f32(5, 2, 6), "b": _f32(6, 7)})


@pytest.mark.parametrize("name,fused_ops", [
    ("mlp", {"FusedGemm"}), ("cnn", {"FusedConv"}), ("transformer", {"BiasGelu", "SkipLayerNormalization"}),
])
@pytest.mark.parametrize("level", list(LEVELS))
def test_generated_models_at_every_level(name, fused_ops, level):
    model = models.MODELS[name]()
    data = model.SerializeToString()
    feeds = models.random_inputs(model, batch=2)
    sess = _session(data, level)
    placed = {p.op_type for p in sess.get_placement().nodes}
    if level in ("extended", "all"):
        assert fused_ops <= placed, placed
    else:
        assert not fused_ops & placed
    if level != "disable" and name == "cnn":
        assert "BatchNormalization" not in placed  # folded into the Conv weights
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, w in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-4)


def test_optimized_model_file_runs_in_onnxruntime(tmp_path):
    model = models.cnn()
    feeds = models.random_inputs(model, batch=1)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "cnn.opt.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    written = onnx.load(so.optimized_model_filepath)
    assert "FusedConv" in {n.op_type for n in written.graph.node}
    got = onnxruntime.InferenceSession(so.optimized_model_filepath, providers=["CPUExecutionProvider"]).run(None, feeds)
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-4)


def test_intra_op_num_threads_sets_blas_threads_for_the_session():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return {i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}

    import gc

    # an earlier test's session that only the collector frees (a reference cycle) restores
    # the counts when it is finalised: collected first, or it could be inside ``before`` and
    # gone after (seen once under xdist)
    gc.collect()
    before = blas_threads()
    sess = _session(models.mlp().SerializeToString(), threads=1)
    assert blas_threads() == {1}
    del sess
    gc.collect()
    assert blas_threads() == before


def test_a_session_ending_inside_the_thread_setting_does_not_deadlock(monkeypatch):
    """The garbage collector can finalise a dead session (its end restores the thread counts)
    while a new session's start holds the thread-setting lock on the same thread: seen as the
    CPU suite hanging in threads.limit. The finaliser's restore is simulated inside limit."""
    import threading

    from ort_ep_cpu import threads

    threads.limit(1)  # the session that the collector will finalise
    finalised = []

    def libraries_after_a_collection(refresh=False):
        threads.restore()
        finalised.append(True)
        return []

    monkeypatch.setattr(threads, "blas_libraries", libraries_after_a_collection)
    worker = threading.Thread(target=threads.limit, args=(1,), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive() and finalised == [True]
    threads.restore()  # the new session's end
    assert threads.count() == 0


def test_memory_stats_come_from_the_first_run_of_each_shape():
    model = models.mlp()
    sess = _session(model.SerializeToString(), "all")
    sess.run(None, models.random_inputs(model, batch=1))
    small = sess.get_memory_stats()["Cpu"]["peak_bytes"]
    assert small > 0
    sess.run(None, models.random_inputs(model, batch=64))
    big = sess.get_memory_stats()["Cpu"]["peak_bytes"]
    assert big > small  # a new shape signature is tracked
    sess.run(None, models.random_inputs(model, batch=1))
    assert sess.get_memory_stats()["Cpu"]["peak_bytes"] == big


def test_error_in_a_step_names_the_node():
    model = models.mlp()
    sess = _session(model.SerializeToString(), "all")
    feeds = models.random_inputs(model, batch=2)
    sess.run(None, feeds)  # the first run is instrumented; the second takes the generated path
    with pytest.raises(ort.Fail, match="Name:"):
        sess._plan.run([np.ones((2, 3), np.float32)], track_memory=False)
