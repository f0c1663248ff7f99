"""The parallel mode (``threads.py``): with more than one intra-op thread and numba's omp/tbb
pool, the compiled loops and float32 GEMMs are split over numba's threads and OpenBLAS runs
single-threaded; the session's end puts OpenBLAS's thread count back.

Every case forces splitting (``PARALLEL_MIN_WORK`` = 0), checks that the split loop ran (a spy
on ``_jit.Parallel``), and compares with onnxruntime: rtol 1e-4, atol 1e-4 on float32 (sums in
another order). Skipped where the mode is unavailable (numba not installed, or its threading
layer is workqueue): the serial paths then run, as the other tests check.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_ep_cpu import threads
from ort_ep_cpu.kernels import _jit


@pytest.fixture
def parallel(monkeypatch):
    """The loops object with every method spied on; splitting forced for all sizes."""
    loops = _jit.parallel()
    if loops is None:
        pytest.skip("no parallel mode here (numba missing, or its threading layer is not omp/tbb)")
    monkeypatch.setattr(threads, "PARALLEL_MIN_WORK", 0)
    calls: list[str] = []
    for name in ("depthwise_rows", "depthwise_flat", "hard_sigmoid", "gelu_rows", "sgemm"):
        real = getattr(loops, name)
        monkeypatch.setattr(loops, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    return calls


def _session(model: onnx.ModelProto, threads_: int = 2) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads_
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _model(nodes, x_shape, inits, domain_opsets=(), out_rank=None):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * (out_rank or len(x_shape)))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *domain_opsets])
    model.ir_version = 8
    return model


def _check(model, x, calls, expected):
    got = _session(model).run(None, {"x": x})[0]
    want = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert expected <= set(calls), f"split loops run: {sorted(set(calls))}, expected {sorted(expected)}"


RNG = np.random.default_rng(11)


@pytest.mark.parametrize("x_shape,kernel,attrs,loop", [
    ((1, 7, 6, 20), 5, {"pads": [2, 2, 2, 2]}, "depthwise_flat"),
    ((2, 5, 40, 41), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "depthwise_rows"),
    ((1, 3, 30, 70), 3, {"pads": [1, 0, 1, 2], "strides": [1, 2], "dilations": [2, 1]}, "depthwise_rows"),
])
def test_split_depthwise(parallel, x_shape, kernel, attrs, loop):
    c = x_shape[1]
    w = RNG.standard_normal((c, 1, kernel, kernel)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, **attrs)], x_shape, {"w": w, "b": b})
    _check(model, RNG.standard_normal(x_shape).astype(np.float32), parallel, {loop})


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 20, 30, 30), (8, 20, 3, 3), {"pads": [1, 1, 1, 1]}),  # wide path, one band
    ((2, 16, 9, 45), (24, 16, 1, 1), {}),  # 1x1, batch 2, with a bias: accumulates onto it
])
def test_split_conv_gemms(parallel, monkeypatch, x_shape, w_shape, attrs):
    w = RNG.standard_normal(w_shape).astype(np.float32)
    b = RNG.standard_normal(w_shape[0]).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], x_shape, {"w": w, "b": b})
    monkeypatch.setattr("ort_ep_cpu.kernels.nn.BIAS_FIRST_MIN", 1)
    _check(model, RNG.standard_normal(x_shape).astype(np.float32), parallel, {"sgemm"})


def test_split_conv_taps(parallel, monkeypatch):
    monkeypatch.setattr("ort_ep_cpu.kernels.nn.TAPS_MIN_COLUMNS_BYTES", 0)
    w = RNG.standard_normal((6, 16, 3, 3)).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], (1, 16, 21, 37), {"w": w})
    _check(model, RNG.standard_normal((1, 16, 21, 37)).astype(np.float32), parallel, {"sgemm"})


@pytest.mark.parametrize("m,k,n", [(5, 33, 17), (64, 48, 1000), (3, 7, 31)])
def test_split_gemm_and_matmul(parallel, m, k, n):
    """Column blocks of 16 over two threads: widths below, at and above one block each."""
    w = RNG.standard_normal((n, k)).astype(np.float32)
    c = RNG.standard_normal(n).astype(np.float32)
    gemm = _model([helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)], (m, k), {"w": w, "c": c})
    _check(gemm, RNG.standard_normal((m, k)).astype(np.float32), parallel, {"sgemm"} if n >= 32 else set())
    parallel.clear()
    matmul = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], (2, m, k), {"w": np.ascontiguousarray(w.T)})
    _check(matmul, RNG.standard_normal((2, m, k)).astype(np.float32), parallel, {"sgemm"} if n >= 32 else set())


def test_split_elementwise_loops(parallel):
    model = _model([helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.2, beta=0.5)], (3, 1001), {})
    _check(model, RNG.standard_normal((3, 1001)).astype(np.float32) * 4, parallel, {"hard_sigmoid"})
    parallel.clear()
    bias = RNG.standard_normal(64).astype(np.float32)
    ms = helper.make_opsetid("com.microsoft", 1)
    model = _model([helper.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft")], (5, 64), {"b": bias}, [ms])
    _check(model, RNG.standard_normal((5, 64)).astype(np.float32), parallel, {"gelu_rows"})


def test_blas_runs_one_thread_in_parallel_mode_and_is_restored(parallel):
    controllers = threads._blas()
    if not controllers:
        pytest.skip("threadpoolctl finds no BLAS library")
    before = [c.get_num_threads() for c in controllers]
    w = RNG.standard_normal((40, 64)).astype(np.float32)
    session = _session(_model([helper.make_node("MatMul", ["x", "w"], ["y"])], (8, 40), {"w": w}))
    session.run(None, {"x": RNG.standard_normal((8, 40)).astype(np.float32)})
    assert "sgemm" in parallel
    assert [c.get_num_threads() for c in controllers] == [1] * len(controllers)
    del session  # the session's end restores the counts
    import gc

    gc.collect()
    assert [c.get_num_threads() for c in controllers] == before


def test_one_thread_does_not_split(parallel):
    w = RNG.standard_normal((40, 64)).astype(np.float32)
    session = _session(_model([helper.make_node("MatMul", ["x", "w"], ["y"])], (8, 40), {"w": w}), threads_=1)
    session.run(None, {"x": RNG.standard_normal((8, 40)).astype(np.float32)})
    assert not parallel
