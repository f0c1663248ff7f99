"""Parity of the Gelu kernels with onnxruntime on both paths: the numba-compiled loop
(``_jit.gelu_rows``, when numba is installed) and the numpy path (``fused.erf_f32``).

Ops: com.microsoft BiasGelu, Gelu and FastGelu, ONNX Gelu (opset 20, approximate none and
tanh; tanh's form is FastGelu's: tanh by ``_jit._tanh_point``, within 2e-7). Every
case asserts which path ran by counting calls to the compiled loop, as test_conv_paths does for
the depthwise loop. Tolerance on float32: rtol 1e-5, atol 1e-6 (the numpy erf is Abramowitz &
Stegun 7.1.26, |error| <= 1.5e-7, the compiled one its Maclaurin series below 1 and A&S above,
so gelu is off by at most 0.5 * |x| * 1.5e-7 where erf is not yet 1 in float32, |x| < 5.7:
4.3e-7); float64 (scipy's erf) 1e-12 against float64 math.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu import threads
from ort_ep_cpu.kernels import _jit, fused

RTOL, ATOL = 1e-5, 1e-6
MS = "com.microsoft"
PATHS = ["compiled", "numpy"]


def _model(op: str, domain: str, x_shape, bias_shape=None, attrs=None, transpose=None,
           elem=TensorProto.FLOAT) -> bytes:
    """One Gelu-family node; ``transpose`` puts a Transpose before it (a strided view in)."""
    inputs = [helper.make_tensor_value_info("x", elem, list(x_shape))]
    nodes = []
    src = "x"
    if transpose is not None:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=list(transpose)))
        src = "xt"
    names = [src]
    if bias_shape is not None:
        inputs.append(helper.make_tensor_value_info("b", elem, list(bias_shape)))
        names.append("b")
    nodes.append(helper.make_node(op, names, ["y"], domain=domain, **(attrs or {})))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", elem, [None] * len(x_shape))])
    opset = 20 if domain == "" else 17
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 9
    return model.SerializeToString()


@pytest.fixture
def path(request, monkeypatch):
    """Selects the path and counts calls to the compiled loop (``calls``)."""
    calls: list[int] = []
    if request.param == "compiled":
        pytest.importorskip("numba", reason="numba (optional) is not installed: the numpy path runs")
        monkeypatch.setattr(_jit, "USE", True)
    else:
        monkeypatch.setattr(_jit, "USE", False)
    real = _jit.gelu_rows
    monkeypatch.setattr(_jit, "gelu_rows", lambda parts=1: calls.append(parts) or real(parts))
    return request.param, calls


def _compare(data: bytes, feeds: dict[str, np.ndarray], rtol=RTOL, atol=ATOL) -> np.ndarray:
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


def _x(shape, seed=0, scale=3.0):
    return np.asarray(np.random.default_rng(seed).standard_normal(shape) * scale, dtype=np.float32)


@pytest.mark.parametrize("path", PATHS, indirect=True)
@pytest.mark.parametrize("x_shape", [(2, 16, 512), (3, 7), (5,), (1, 1, 1)])
def test_bias_gelu_matches_onnxruntime(path, x_shape):
    """Bias over the last axis of 1-D to 3-D inputs (the transformer's (batch, seq, 4 * dim))."""
    which, calls = path
    h = x_shape[-1]
    data = _model("BiasGelu", MS, x_shape, (h,))
    _compare(data, {"x": _x(x_shape), "b": _x((h,), seed=1)})
    assert len(calls) == (1 if which == "compiled" else 0)


@pytest.mark.parametrize("path", PATHS, indirect=True)
@pytest.mark.parametrize("x_shape", [(2, 16, 512), (4, 9), ()])
def test_ms_gelu_matches_onnxruntime(path, x_shape):
    which, calls = path
    data = _model("Gelu", MS, x_shape)
    _compare(data, {"x": _x(x_shape)})
    assert len(calls) == (1 if which == "compiled" else 0)


@pytest.mark.parametrize("path", PATHS, indirect=True)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_onnx_gelu_matches_onnxruntime(path, approximate):
    """ONNX Gelu-20: "none" shares the com.microsoft Gelu kernel, "tanh" FastGelu's."""
    which, calls = path
    data = _model("Gelu", "", (3, 10, 33), attrs={"approximate": approximate})
    _compare(data, {"x": _x((3, 10, 33))})
    assert len(calls) == (1 if which == "compiled" else 0)


@pytest.mark.parametrize("path", PATHS, indirect=True)
@pytest.mark.parametrize("x_shape, bias", [((1, 48, 1024), True), ((1, 48, 1024), False), ((3, 7), True), ((5,), False),
                                           ((1, 201, 1536), True)])
def test_fast_gelu_matches_onnxruntime(path, x_shape, bias):
    """com.microsoft FastGelu (T5's feed-forward): the tanh form, with and without bias; NaN
    stays NaN, +inf gives +inf. (numpy's tanh and the polynomial's passes took (1, 48, 1024) 225
    us, the compiled pass 45.)"""
    which, calls = path
    h = x_shape[-1]
    x = _x(x_shape)
    x.reshape(-1)[:4] = [np.nan, np.inf, 40.0, -40.0]
    feeds = {"x": x} if not bias else {"x": x, "b": _x((h,), seed=1)}
    got = _compare(_model("FastGelu", MS, x_shape, (h,) if bias else None), feeds)
    assert np.isnan(got.reshape(-1)[0]) and got.reshape(-1)[1] == np.inf
    assert len(calls) == (1 if which == "compiled" else 0)
    if which == "compiled":  # from SPLIT_MIN_TRANSCENDENTAL values the rows split over the session's threads
        assert _jit.SPLIT_MIN_TRANSCENDENTAL <= 48 * 1024  # (T5's feed-forward: 39 -> 23 us on two threads)
        assert calls == [1 if x.size < _jit.SPLIT_MIN_TRANSCENDENTAL else min(2, threads.usable())]


@pytest.mark.parametrize("path", PATHS, indirect=True)
def test_bias_gelu_non_contiguous_input(path):
    """A transposed input (ort-core's Transpose gives a strided view): the compiled path copies
    it contiguous first; the bias follows the transposed last axis."""
    which, calls = path
    data = _model("BiasGelu", MS, (6, 4, 9), (4,), transpose=(0, 2, 1))
    _compare(data, {"x": _x((6, 4, 9)), "b": _x((4,), seed=1)})
    # and the kernel called directly on a strided slice
    x = _x((8, 30))[:, ::3]
    b = _x((10,), seed=2)
    got = fused.gelu(x, b)
    v = x.astype(np.float64) + b
    want = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert len(calls) == (2 if which == "compiled" else 0)


@pytest.mark.parametrize("path", PATHS, indirect=True)
def test_gelu_nan_and_inf_match_onnxruntime(path):
    """NaN stays NaN (it passes the |z| clamp), +inf gives +inf, and -inf what onnxruntime
    gives; large finite values saturate (x, or -0 for very negative x)."""
    which, calls = path
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 40.0, -40.0, 5.0, -5.0,
                        1e-30, 3.0e38, -3.0e38], dtype=np.float32)
    x = np.tile(special, (3, 1))
    b = np.zeros(special.size, dtype=np.float32)
    b[-5:] = [1.0, -1.0, np.nan, 0.5, -0.5]
    got = _compare(_model("BiasGelu", MS, x.shape, b.shape), {"x": x, "b": b})
    assert np.isnan(got[:, 0]).all() and np.isnan(got[:, -3]).all() and (got[:, 1] == np.inf).all()
    _compare(_model("Gelu", MS, x.shape), {"x": x})
    assert len(calls) == (2 if which == "compiled" else 0)


@pytest.mark.parametrize("path", PATHS, indirect=True)
def test_bias_of_another_shape_takes_numpy_broadcasting(path):
    """A bias that is not a vector of x's last axis (here (1, 5), or float64) is added by numpy's
    broadcasting before the numpy gelu: the compiled loop is not called with it."""
    _, calls = path
    x = _x((3, 5))
    v = x.astype(np.float64)
    for b in (_x((1, 5), seed=3), _x((5,), seed=3).astype(np.float64)):
        got = fused.gelu(x, b)
        w = v + b.astype(np.float64)
        want = 0.5 * w * (1 + np.vectorize(math.erf)(w / math.sqrt(2)))
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert calls == []


@pytest.mark.parametrize("path", PATHS, indirect=True)
def test_float64_uses_scipy_erf_on_both_paths(path):
    """float64 keeps scipy's erf (exact): the compiled loop is float32 only, since its erf is
    accurate to float32 and not beyond."""
    _, calls = path
    x = np.random.default_rng(4).standard_normal((4, 6)) * 3
    b = np.random.default_rng(5).standard_normal(6)
    got = fused.gelu(x, b)
    v = x + b
    want = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert calls == []


def test_compiled_and_numpy_paths_agree_on_a_dense_grid(monkeypatch):
    """Both paths over [-12, 12] in 2e6 steps, each against float64 math: the compiled loop's
    erf (A&S with a polynomial exp) must be as accurate as the numpy path's."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    x = np.linspace(-12, 12, 2_000_001, dtype=np.float32)
    v = x.astype(np.float64)
    from scipy.special import erf

    want = 0.5 * v * (1 + erf(v / math.sqrt(2)))
    for use in (True, False):
        monkeypatch.setattr(_jit, "USE", use)
        np.testing.assert_allclose(fused.gelu(x), want, rtol=RTOL, atol=5e-7)


def test_erf_op_compiled_is_float32_accurate_also_near_zero(monkeypatch):
    # the Erf op's compiled loop (scipy's erf took 0.37 ms on (64, 512)): relative error within
    # float32 rounding, also for tiny values, where 1 - poly * exp loses every digit
    if not _jit.enabled():
        pytest.skip("numba is not installed")
    calls = []
    real = _jit.erf
    monkeypatch.setattr(_jit, "erf", lambda in_place=False, parts=1: lambda *a: (calls.append(parts), real(in_place, parts)(*a)))
    x = np.concatenate([np.linspace(-6, 6, 100001), np.geomspace(1e-30, 1e-2, 1000)]).astype(np.float32)
    node = helper.make_node("Erf", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert calls
    truth = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.max(np.abs(y - truth) / np.maximum(np.abs(truth), 1e-38)) < 4e-7


@pytest.mark.parametrize("in_place", [False, True])
def test_erf_splits_large_arrays_over_the_threads_to_the_same_values(in_place, monkeypatch):
    """An Erf of 64K values or more runs its compiled loop in ``split_parts`` blocks on as many
    threads (a QDQ transformer's (8, 64, 512) Erf: 172 -> 88 us on two); each value is the
    serial loop's, to the bit, for an array that does not divide evenly."""
    if not _jit.enabled():
        pytest.skip("numba is not installed")
    from ort_ep_cpu import threads
    from ort_ep_cpu.kernels import elementwise

    monkeypatch.setattr(threads, "split_threads", lambda: 2)
    x = np.random.default_rng(4).standard_normal((3, 65537)).astype(np.float32) * 3
    serial = np.empty_like(x)
    _jit.erf(False, 1)(x.reshape(-1), serial.reshape(-1), 1)
    parts = []
    real = _jit.erf
    monkeypatch.setattr(_jit, "erf", lambda in_place=False, p=1: parts.append(p) or real(in_place, p))
    got = x.copy() if in_place else np.empty_like(x)
    elementwise.erf_into(got if in_place else x, got)
    assert parts == [2]
    np.testing.assert_array_equal(got, serial)
