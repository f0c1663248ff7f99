"""Parity of the "wide output" convolution path (``nn._conv_wide``) and of the compiled
depthwise loop (``_jit``, when numba is installed) with onnxruntime.

Every case runs three times: whole images in one column buffer, with ``BAND_BYTES`` forced
tiny (bands of one output row, chunks of one group), and as per-tap GEMMs accumulating through
``_blas`` (one group), and each asserts which plan it exercised
(phase count, taps per phase and their step, the no-copy direct case), so that a wrong phase
split or band offset cannot pass unnoticed. Tolerance: rtol 1e-4, atol 1e-4 on float32
(sums in a different order than onnxruntime's), 1e-10 on float64 against onnx.reference.

oneDNN is switched off here (these are the numpy paths); ``test_onednn_paths.py`` has its own.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper
from parallel_runs import runs_agree

import ort_core as ort
from ort_ep_cpu.kernels import _blas, _jit, _onednn, nn


@pytest.fixture(autouse=True)
def numpy_paths(monkeypatch):
    monkeypatch.setattr(_onednn, "USE", False)
    # the compiled small-input loop has its own tests (test_small_conv.py)
    monkeypatch.setattr(nn, "SMALL_CONV_MACS", 0)
    monkeypatch.setattr(nn, "SMALL_DEPTHWISE_MACS", 0)
    monkeypatch.setattr(nn, "SMALL_CONV_PIXEL_MACS", 0)


def _model(x_shape, w_shape, attrs, bias: bool, const_w: bool = True, elem=TensorProto.FLOAT, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.float32 if elem == TensorProto.FLOAT else np.float64
    w = rng.standard_normal(w_shape).astype(dtype)
    inputs = ["x", "w"] + (["b"] if bias else [])
    inits = [onnx.numpy_helper.from_array(w, "w")] if const_w else []
    graph_inputs = [helper.make_tensor_value_info("x", elem, list(x_shape))]
    if not const_w:
        graph_inputs.append(helper.make_tensor_value_info("w", elem, list(w_shape)))
    if bias:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(w_shape[0]).astype(dtype), "b"))
    graph = helper.make_graph(
        [helper.make_node("Conv", inputs, ["y"], **attrs)], "g", graph_inputs,
        [helper.make_tensor_value_info("y", elem, [None] * len(x_shape))], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString(), w


def _pair(data):
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return ref, got


# (x shape, w shape, attrs, expected plan: per phase, its taps as (rows, row step, columns,
# column step); "im2col" where there are more than MAX_PHASES phases and the plain path runs)
CASES = [
    # stride 1 without padding
    ((2, 5, 9, 11), (7, 5, 3, 3), {}, [(3, 1, 3, 1)]),
    # stride 1, padding, odd sizes, batch 3
    ((3, 5, 9, 11), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}, [(3, 1, 3, 1)]),
    # asymmetric padding and a non-square kernel
    ((1, 4, 10, 7), (6, 4, 3, 2), {"pads": [2, 0, 1, 1]}, [(3, 1, 2, 1)]),
    # stride 2: four phases, 2x2 / 2x1 / 1x2 / 1x1 taps
    ((2, 6, 11, 10), (8, 6, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]},
     [(2, 1, 2, 1), (2, 1, 1, 1), (1, 1, 2, 1), (1, 1, 1, 1)]),
    # strides (2, 1) and (1, 2): phases along one axis only
    ((1, 6, 12, 9), (4, 6, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 1]}, [(3, 1, 5, 1), (2, 1, 5, 1)]),
    ((1, 6, 9, 12), (4, 6, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}, [(3, 1, 2, 1), (3, 1, 1, 1)]),
    # stride 3 with a 2-wide kernel: the third phase has no taps and is not built
    ((1, 3, 13, 14), (4, 3, 2, 2), {"strides": [3, 3]}, [(1, 1, 1, 1)] * 4),
    # dilation 2 at stride 1: taps two apart inside the one phase
    ((1, 4, 12, 12), (6, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, [(3, 2, 3, 2)]),
    # dilation 3 with stride 2: taps 0, 2, 4 fall in phase 0 three rows apart, 1, 3 in phase 1
    ((1, 2, 19, 17), (3, 2, 5, 1), {"dilations": [3, 1], "strides": [2, 1], "pads": [1, 0, 2, 0]},
     [(3, 3, 1, 1), (2, 3, 1, 1)]),
    # the same along columns (phase 1's first tap sits one column into the phase), batch 2
    ((2, 2, 9, 23), (3, 2, 2, 5), {"dilations": [1, 3], "strides": [1, 2], "pads": [0, 2, 1, 1]},
     [(2, 1, 3, 3), (2, 1, 2, 3)]),
    # auto_pad SAME_UPPER with stride 2 (asymmetric padding from the shape)
    ((1, 4, 7, 8), (6, 4, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
     [(2, 1, 2, 1), (2, 1, 1, 1), (1, 1, 2, 1), (1, 1, 1, 1)]),
    # depthwise 5x5, stride 1 and (2, 1)
    ((2, 12, 6, 20), (12, 1, 5, 5), {"group": 12, "pads": [2, 2, 2, 2]}, [(5, 1, 5, 1)]),
    ((1, 12, 12, 20), (12, 1, 5, 5), {"group": 12, "pads": [2, 2, 2, 2], "strides": [2, 1]},
     [(3, 1, 5, 1), (2, 1, 5, 1)]),
    # depthwise with channel multiplier 2, grouped with 2 channels and 3 outputs per group
    ((2, 8, 9, 9), (16, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, [(3, 1, 3, 1)]),
    ((2, 8, 9, 9), (12, 2, 3, 3), {"group": 4, "pads": [0, 1, 1, 0], "strides": [2, 2]},
     [(2, 1, 2, 1), (2, 1, 1, 1), (1, 1, 2, 1), (1, 1, 1, 1)]),
    # 1-D as a one-row 2-D convolution: padded, strided, dilated, grouped
    ((2, 4, 21), (6, 4, 5), {"pads": [2, 1], "strides": [2]}, [(1, 1, 3, 1), (1, 1, 2, 1)]),
    ((1, 6, 30), (6, 2, 3), {"group": 3, "dilations": [2], "pads": [2, 2]}, [(1, 1, 3, 2)]),
    ((1, 480, 40), (60, 480, 3), {"pads": [1, 1]}, [(1, 1, 3, 1)]),
    # more phases than MAX_PHASES (stride 3 with a 3-wide kernel: 9; a strided 1-D "STFT"
    # convolution: 8): the plain im2col path
    ((2, 3, 13, 14), (4, 3, 3, 3), {"strides": [3, 3], "pads": [1, 1, 1, 1]}, "im2col"),
    ((1, 1, 72), (6, 1, 16), {"strides": [8]}, "im2col"),
]


def _taps_spy(monkeypatch, force: bool) -> list[int]:
    """Spy on ``nn._conv_taps`` (the returned list grows by one per call); ``force``: take the
    per-tap path for every one-group size (skipped where numpy's BLAS has no CBLAS GEMM)."""
    if force:
        if _blas.gemm(np.float32) is None:
            pytest.skip("numpy's BLAS exports no CBLAS GEMM here: the column path runs")
        monkeypatch.setattr(nn, "TAPS_MIN_COLUMNS_BYTES", 0)
        monkeypatch.setattr(nn, "TAPS_MIN_CHANNELS", 1)
    runs: list[int] = []
    real = nn._conv_taps
    monkeypatch.setattr(nn, "_conv_taps", lambda *a: runs.append(1) or real(*a))
    return runs


def _plan_summary(plan):
    return [(na, da, nb, db) for _, _, _, _, (_, na, da), (_, nb, db) in plan.phases]


@pytest.mark.parametrize("x_shape,w_shape,attrs,expected", CASES)
@pytest.mark.parametrize("mode", ["whole", "banded", "taps"])
def test_wide_conv_matches_onnxruntime(x_shape, w_shape, attrs, expected, mode, monkeypatch):
    """``mode``: whole images in one column buffer; bands of one output row (one group); or,
    for one group, the per-tap GEMMs of ``_conv_taps`` (forced on for every size)."""
    monkeypatch.setattr(_jit, "USE", False)  # depthwise cases: the numpy path, not numba's loop
    monkeypatch.setattr(nn, "SMALL_COLS", 0)  # small cases too: the wide path, not the gather
    if mode == "banded":
        monkeypatch.setattr(nn, "BAND_BYTES", 1)  # one output row / one group per band
    taps_runs = _taps_spy(monkeypatch, force=mode == "taps")
    data, w = _model(x_shape, w_shape, attrs, bias=True)
    ref, got = _pair(data)
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    wide_path = expected != "im2col"
    assert bool(taps_runs) == (mode == "taps" and attrs.get("group", 1) == 1 and wide_path)

    # the plan the kernel used for this geometry is the one the case is about
    nd = len(w_shape) - 2
    strides = attrs.get("strides", [1] * nd)
    dilations = attrs.get("dilations", [1] * nd)
    node = type("N", (), {"attr": lambda self, k, d=None: attrs.get(k, d)})()
    pads = nn.conv_pads(node, x_shape[2:], w_shape[2:], strides, dilations)
    g = nn._Geometry(x_shape[2:], w_shape[2:], strides, dilations, pads)
    y = nn.conv(x, w, None, attrs.get("group", 1), g, w_shape[2:])
    plan = (g.as_2d() if nd == 1 else g).wide
    assert plan is not None
    if expected == "im2col":
        assert len(plan.phases) > nn.MAX_PHASES
        assert not plan.pool  # no workspace was made: the wide path did not run
    else:
        assert _plan_summary(plan) == expected
        assert plan.pool  # its workspace went back to the pool
    want = onnxruntime.InferenceSession(_model(x_shape, w_shape, attrs, bias=False)[0],
                                        providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


GATHER_CASES = [c[:3] for c in CASES if c[0][0] == 1 and c[2].get("group", 1) == 1] + [
    # silero-vad's shapes: a strided 1-D "STFT" convolution and kernel-3 ones on 1-3 frames
    ((1, 1, 576), (258, 1, 256), {"strides": [128]}),
    ((1, 129, 3), (128, 129, 3), {"pads": [1, 1]}),
    ((1, 64, 2), (64, 64, 3), {"pads": [1, 1], "strides": [2]}),
    ((1, 64, 1), (128, 64, 3), {"pads": [1, 1]}),
    ((1, 3, 5, 4, 6), (2, 3, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "strides": [2, 1, 2]}),  # 3-D
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", GATHER_CASES)
@pytest.mark.parametrize("narrow", [True, False], ids=["narrow", "blas"])
def test_small_conv_gather_matches_onnxruntime(x_shape, w_shape, attrs, narrow, monkeypatch):
    """One image, one group, small column matrix: columns gathered by a precomputed index
    (padding reads an appended zero). Asserts that path ran: the index exists, no wide plan;
    with 1-4 output pixels and numba, the compiled row products with the bias (the transposed
    index)."""
    monkeypatch.setattr(nn, "SMALL_COLS", 1 << 20)
    if not narrow:
        monkeypatch.setattr(nn, "NARROW_MAX_PIXELS", 0)
    data, w = _model(x_shape, w_shape, attrs, bias=True)
    ref, got = _pair(data)
    rng = np.random.default_rng(6)
    for _ in range(2):  # the second run reuses the index
        x = rng.standard_normal(x_shape).astype(np.float32)
        np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    nd = len(w_shape) - 2
    node = type("N", (), {"attr": lambda self, k, d=None: attrs.get(k, d)})()
    strides, dilations = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    g = nn._Geometry(x_shape[2:], w_shape[2:], strides, dilations,
                     nn.conv_pads(node, x_shape[2:], w_shape[2:], strides, dilations))
    nn.conv(x, w, None, 1, g, w_shape[2:])
    if not g.pointwise:
        assert g.gather is not None and g.wide is None
        narrow_ran = narrow and _jit.enabled() and g.gather.shape[1] <= nn.NARROW_MAX_PIXELS
        assert (g.gather_t is not None) == narrow_ran


@pytest.mark.parametrize("small_cols", [0, 1 << 20])  # the wide path, the small-conv gather
def test_repeated_runs_reuse_buffers_with_zero_borders(small_cols, monkeypatch):
    """The padded phase buffers are reused between runs; only their interior is rewritten, so
    a second input (here all-negative after a large positive one) must not see the first."""
    monkeypatch.setattr(nn, "SMALL_COLS", small_cols)
    data, _ = _model((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, bias=False)
    ref, got = _pair(data)
    for x in (np.full((1, 3, 8, 8), 1e3, np.float32), -np.ones((1, 3, 8, 8), np.float32),
              np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)):
        np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("small_cols", [0, 1 << 20])  # the wide path, the small-conv gather
def test_weights_fed_at_run_time_are_not_cached_stale(small_cols, monkeypatch):
    """The reordered weight matrix is kept per weight array; new weights give new results."""
    monkeypatch.setattr(nn, "SMALL_COLS", small_cols)
    data, _ = _model((1, 4, 9, 9), (5, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, bias=True, const_w=False)
    ref, got = _pair(data)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    for _ in range(3):
        w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
        feeds = {"x": x, "w": w}
        np.testing.assert_allclose(got.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_float64():
    """float64 stays float64 (onnxruntime has no double Conv: onnx.reference is the reference)."""
    from onnx.reference import ReferenceEvaluator

    data, _ = _model((2, 3, 7, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}, bias=True,
                     elem=TensorProto.DOUBLE)
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(4).standard_normal((2, 3, 7, 9))
    y = got.run(None, {"x": x})[0]
    assert y.dtype == np.float64
    want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("taps", [False, True])
def test_concurrent_runs_get_their_own_buffers(taps, monkeypatch):
    """Runs from several threads at once (the session allows it) each take a separate padded
    buffer from the pool; each result matches its own input. ``taps``: the per-tap GEMM path
    (its workspace holds raw addresses of its buffers), forced for this small case."""
    taps_runs = _taps_spy(monkeypatch, force=taps)
    data, _ = _model((1, 8, 30, 30), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}, bias=True)
    ref, got = _pair(data)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1, 8, 30, 30)).astype(np.float32) for _ in range(8)]
    wants = [ref.run(None, {"x": x})[0] for x in xs]
    runs_agree(lambda x: got.run(None, {"x": x})[0], xs, wants, rtol=1e-4, atol=1e-4)
    assert bool(taps_runs) == taps


DEPTHWISE_CASES = [
    # (x shape, w shape, attrs): what the compiled loop takes (group == C == M)
    ((2, 12, 6, 20), (12, 1, 5, 5), {"group": 12, "pads": [2, 2, 2, 2]}),
    ((1, 12, 12, 20), (12, 1, 5, 5), {"group": 12, "pads": [2, 2, 2, 2], "strides": [2, 1]}),
    ((1, 6, 11, 13), (6, 1, 3, 3), {"group": 6, "pads": [0, 1, 2, 0], "dilations": [2, 3]}),
    ((3, 5, 7, 9), (5, 1, 3, 2), {"group": 5}),  # no padding: the input itself, batch 3
    ((1, 6, 14, 17), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # column stride 2
    ((2, 4, 9, 16), (4, 1, 3, 5), {"group": 4, "pads": [1, 2, 1, 2], "strides": [1, 3], "dilations": [1, 2]}),
    ((1, 7, 31), (7, 1, 5), {"group": 7, "pads": [3, 1], "dilations": [2]}),  # 1-D (column stride 1)
    ((1, 5, 30), (5, 1, 3), {"group": 5, "pads": [1, 2], "strides": [2]}),  # 1-D, column stride 2
    ((1, 3, 5, 23), (3, 1, 3, 4), {"group": 3, "pads": [0, 3, 1, 0], "strides": [2, 4]}),  # 4 phases, uneven
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", DEPTHWISE_CASES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("loop", ["flat", "rows"])
def test_compiled_depthwise_matches_onnxruntime(x_shape, w_shape, attrs, bias, loop, monkeypatch):
    """Both compiled loops: stride 1 takes the flat-plane loop when its accumulator fits
    DEPTHWISE_FLAT_BYTES (forced off for "rows"); strided cases always take the row loop."""
    pytest.importorskip("numba", reason="numba (optional) is not installed: the numpy path runs")
    monkeypatch.setattr(_jit, "USE", True)
    if loop == "rows":
        monkeypatch.setattr(nn, "DEPTHWISE_FLAT_BYTES", 0)
    used = []
    for name in ("depthwise_flat", "depthwise_rows"):
        real = getattr(_jit, name)
        monkeypatch.setattr(_jit, name, lambda real=real, name=name: used.append(name) or real())
    data, w = _model(x_shape, w_shape, attrs, bias=bias)
    ref, got = _pair(data)
    rng = np.random.default_rng(6)
    for _ in range(2):  # the second run reuses the padded buffer
        x = rng.standard_normal(x_shape).astype(np.float32)
        np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    strided = any(v != 1 for v in attrs.get("strides", [1]))
    assert set(used) == {"depthwise_rows" if loop == "rows" or strided else "depthwise_flat"}
    # it was the compiled loop that ran: the wide path made no plan for this geometry
    nd = len(w_shape) - 2
    node = type("N", (), {"attr": lambda self, k, d=None: attrs.get(k, d)})()
    strides, dilations = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    g = nn._Geometry(x_shape[2:], w_shape[2:], strides, dilations,
                     nn.conv_pads(node, x_shape[2:], w_shape[2:], strides, dilations))
    nn.conv(x, w, None, attrs["group"], g, w_shape[2:])
    assert (g.as_2d() if nd == 1 else g).wide is None


def test_compiled_depthwise_float64_and_numpy_fallback(monkeypatch):
    """float64 compiles its own specialisation; with the switch off the numpy path gives the same."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from onnx.reference import ReferenceEvaluator

    data, _ = _model((2, 4, 9, 10), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 1]},
                     bias=True, elem=TensorProto.DOUBLE)
    x = np.random.default_rng(7).standard_normal((2, 4, 9, 10))
    want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
    for use in (True, False):
        monkeypatch.setattr(_jit, "USE", use)
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("x_shape,w_shape", [
    ((1, 6, 1, 1), (9, 6, 1, 1)),  # squeeze-excite: a 1x1 image, batch 1
    ((1, 8, 5, 7), (3, 8, 1, 1)),
    ((3, 5, 4, 2), (7, 5, 1, 1)),  # batch 3: one stacked GEMM
    ((2, 5, 11), (4, 5, 1)),  # 1-D
    ((1, 4, 2, 3, 5), (6, 4, 1, 1, 1)),  # 3-D
])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("use_blas", [False, True])
def test_pointwise_conv_matches_onnxruntime(x_shape, w_shape, bias, use_blas, monkeypatch):
    """With a bias and ``_blas``, the bias is written first and the GEMM accumulates onto it
    (one CBLAS call per image); otherwise np.matmul and an add."""
    monkeypatch.setattr(_blas, "USE", use_blas)
    monkeypatch.setattr(nn, "BIAS_FIRST_MIN", 1)  # the small cases too
    calls = []
    real_gemm = _blas.gemm
    monkeypatch.setattr(_blas, "gemm", lambda dtype: (lambda f: f and (lambda *a: calls.append(1) or f(*a)))(real_gemm(dtype)))
    data, w = _model(x_shape, w_shape, {}, bias=bias)
    ref, got = _pair(data)
    x = np.random.default_rng(8).standard_normal(x_shape).astype(np.float32)
    np.testing.assert_allclose(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    if real_gemm(np.float32) is not None:
        assert len(calls) == (x_shape[0] if bias and use_blas else 0)
    nd = len(w_shape) - 2
    assert nn._Geometry(x_shape[2:], w_shape[2:], [1] * nd, [1] * nd, [0] * (2 * nd)).pointwise
    assert not nn._Geometry(x_shape[2:], w_shape[2:], [2] * nd, [1] * nd, [0] * (2 * nd)).pointwise


@pytest.mark.parametrize("x_shape", [(1, 7, 1, 1), (2, 5, 3, 4), (3, 4, 9), (1, 2, 3, 4, 5), (1, 96, 80, 80)])
def test_global_average_pool_matches_onnxruntime(x_shape):
    """GlobalAveragePool's float32 path (a GEMV with ones + divide) against onnxruntime, 1-D to
    3-D and one of ocr-det's large maps."""
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(x_shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    ref, got = _pair(data)
    x = np.random.default_rng(9).standard_normal(x_shape).astype(np.float32) + 3
    y = got.run(None, {"x": x})[0]
    assert y.shape == x_shape[:2] + (1,) * (len(x_shape) - 2)
    # onnxruntime's float32 sum drifts by up to 4.5e-6 (relative) over 6400 pixels; ours stays
    # within 1e-6 of the float64 mean
    np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    exact = x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True)
    np.testing.assert_allclose(y, exact, rtol=1e-6, atol=1e-7)


MAXPOOL_CASES = [
    ((2, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 4, 64, 64), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # cnn's stem
    ((2, 3, 10, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    ((1, 2, 11, 13), {"kernel_shape": [3, 3], "dilations": [2, 3], "pads": [2, 0, 1, 2]}),
    ((1, 1, 5, 4), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),  # taps out of range at both ends
]


@pytest.mark.parametrize("x_shape,attrs", MAXPOOL_CASES)
def test_max_pool_matches_onnxruntime(x_shape, attrs):
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    ref, got = _pair(model.SerializeToString())
    x = np.random.default_rng(10).standard_normal(x_shape).astype(np.float32)
    np.testing.assert_array_equal(got.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 24, 8, 8), (24, 6, 2, 2), {"strides": [2, 2]}),  # ocr-det's 2x "deconvolution"
    ((2, 4, 5, 3), (4, 3, 2, 3), {"strides": [2, 3]}),  # non-square, batch 2
    ((1, 6, 4, 4), (6, 2, 2, 2), {"strides": [2, 2], "group": 3}),
    ((2, 3, 7), (3, 5, 3), {"strides": [3]}),  # 1-D
    ((1, 2, 3, 2, 4), (2, 2, 2, 2, 2), {"strides": [2, 2, 2]}),  # 3-D
])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_conv_transpose_tiled_matches_onnxruntime(x_shape, w_shape, attrs, bias, compiled, monkeypatch):
    """ConvTranspose with stride == kernel and no padding: one copy per kernel offset (+ bias),
    or for 2-D with numba the compiled interleave."""
    used = use_compiled(monkeypatch, compiled, "interleave")
    rng = np.random.default_rng(11)
    w = rng.standard_normal(w_shape).astype(np.float32)
    m = w_shape[1] * attrs.get("group", 1)
    inits = [onnx.numpy_helper.from_array(w, "w")]
    if bias:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"],
                            kernel_shape=list(w_shape[2:]), **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(x_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    ref, got = _pair(model.SerializeToString())
    x = rng.standard_normal(x_shape).astype(np.float32)
    y = got.run(None, {"x": x})[0]
    assert y.flags.c_contiguous
    np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert bool(used) == (compiled and len(x_shape) == 4)


def test_convolutions_share_the_thread_scratch_and_survive_its_growth(monkeypatch):
    """Column/GEMM buffers are views of one per-thread scratch: a small convolution, then one
    whose buffers need a larger scratch, then the small one again (its workspace is remade on
    the new scratch): every result matches onnxruntime, both plans end on the same scratch."""
    monkeypatch.setattr(nn, "_scratch", threading.local())  # a fresh scratch for this thread
    monkeypatch.setattr(nn, "SMALL_COLS", 0)  # the wide path even for the small case
    cases = {"small": ((1, 3, 6, 6), (4, 3, 3, 3)), "big": ((1, 16, 40, 40), (8, 16, 3, 3))}
    rng = np.random.default_rng(12)
    geometries, sizes = {}, []
    for name in ("small", "big", "small"):
        x_shape, w_shape = cases[name]
        data, w = _model(x_shape, w_shape, {"pads": [1, 1, 1, 1]}, bias=False, seed=len(name))
        x = rng.standard_normal(x_shape).astype(np.float32)
        g = geometries.setdefault(name, nn._Geometry(x_shape[2:], w_shape[2:], (1, 1), (1, 1), (1, 1, 1, 1)))
        y = nn.conv(x, w, None, 1, g, w_shape[2:], prepared={})
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
        sizes.append(nn._scratch.buffer.nbytes)
    assert sizes[0] < sizes[1] == sizes[2]  # grew once, for the big one
    scratch_of = {id(ws[3]) for g in geometries.values() for pool in g.wide.pool.values() for ws in pool}
    assert scratch_of == {id(nn._scratch.buffer)}


@pytest.mark.parametrize("size", [1, 300, 5000])
def test_sigmoid_activation_small_and_large(size):
    """The fused Sigmoid activation: scipy's expit (one call) up to SMALL_SIGMOID elements, four
    numpy passes past it; both in place and equal to 1 / (1 + exp(-x)) within 1 ulp-ish
    (rtol 1e-6), 0 and 1 at the extremes without warnings."""
    x = np.random.default_rng(7).standard_normal(size).astype(np.float32) * 10
    x[0] = -200.0
    want = 1 / (1 + np.exp(-x.astype(np.float64)))
    y = x.copy()
    with np.errstate(all="raise") if size <= nn.SMALL_SIGMOID else np.errstate(over="ignore"):
        nn.make_activation("Sigmoid", [])(y)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-30)
    assert y[0] == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blas_gemm_accumulates_on_strided_operands(dtype):
    """``_blas.gemm``: C = A @ B + beta * C with B's rows further apart than its columns (a
    window of a wider array, as the per-tap convolution reads its planes) and C a window too."""
    gemm = _blas.gemm(np.dtype(dtype))
    if gemm is None:
        pytest.skip("numpy's BLAS exports no CBLAS GEMM here")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7)).astype(dtype)
    wide_b = rng.standard_normal((7, 20)).astype(dtype)
    wide_c = rng.standard_normal((5, 16)).astype(dtype)
    b, c = wide_b[:, 3:14], wide_c[:, 2:13]  # (7, 11) and (5, 11) windows
    before, outside = c.copy(), (wide_c[:, :2].copy(), wide_c[:, 13:].copy())
    item = np.dtype(dtype).itemsize
    gemm(5, 11, 7, a.ctypes.data, 7, wide_b.ctypes.data + 3 * item, 20, 1.0, wide_c.ctypes.data + 2 * item, 16)
    np.testing.assert_allclose(c, a @ b + before, rtol=1e-5 if dtype == np.float32 else 1e-12)
    gemm(5, 11, 7, a.ctypes.data, 7, wide_b.ctypes.data + 3 * item, 20, 0.0, wide_c.ctypes.data + 2 * item, 16)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert np.array_equal(wide_c[:, :2], outside[0]) and np.array_equal(wide_c[:, 13:], outside[1])


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_large_conv_takes_the_tap_gemms_by_default(elem, monkeypatch):
    """A convolution whose column matrix exceeds TAPS_MIN_COLUMNS_BYTES takes ``_conv_taps``
    at the default thresholds (batch 2, stride 2, bias); with ``_blas`` off the column path
    gives the same. float64 against onnx.reference (1e-10), float32 against onnxruntime."""
    if _blas.gemm(np.float32) is None:
        pytest.skip("numpy's BLAS exports no CBLAS GEMM here")
    from onnx.reference import ReferenceEvaluator

    x_shape, w_shape = (2, 32, 130, 126), (16, 32, 3, 3)
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 2]}
    taps_runs = _taps_spy(monkeypatch, force=False)
    data, _ = _model(x_shape, w_shape, attrs, bias=True, elem=elem)
    dtype = np.float32 if elem == TensorProto.FLOAT else np.float64
    x = np.random.default_rng(4).standard_normal(x_shape).astype(dtype)
    if elem == TensorProto.FLOAT:
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        tol = 1e-4
    else:
        want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
        tol = 1e-10
    for use in (True, False):
        monkeypatch.setattr(_blas, "USE", use)
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        assert bool(taps_runs) == use
        taps_runs.clear()


@pytest.mark.parametrize("x_shape,w_shape,group,says", [
    ((1, 64, 4, 4), (32, 16, 3, 3), 2, "input X has 64 channels (shape [1, 64, 4, 4]), W [32, 16, 3, 3] with group 2 "
                                       "expects W's dimension 1 x group = 32"),
    ((1, 64, 4, 4), (32, 32, 3, 3), 1, "expects W's dimension 1 x group = 32"),
    ((1, 64, 4), (32, 64, 3, 3), 1, "input X has shape [1, 64, 4] and W [32, 64, 3, 3]: both need the same rank"),
    ((1, 6, 5, 5), (5, 3, 3, 3), 2, "W has 5 output channels (shape [5, 3, 3, 3]), not a multiple of group 2"),
])
def test_conv_input_mismatched_with_its_weights_is_a_clear_error(x_shape, w_shape, group, says):
    """onnxruntime refuses these at run time by name; the numpy paths had failed with numpy's
    'cannot reshape' or an IndexError."""
    w = np.ones(w_shape, np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], group=group, name="the_conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    with pytest.raises(ort.Fail) as error:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": np.ones(x_shape, np.float32)})
    assert says in str(error.value) and "the_conv" in str(error.value)


def test_window_offsets_are_made_at_first_use():
    """A geometry's per-offset slices are made when a kernel reads them: a pool in a oneDNN
    group asks its geometry only for shapes, and a 40 x 60 window is 2400 offsets (a PP-OCRv6
    detector's first run: 336 -> 55 ms). Made, they are the strided slices of each offset."""
    from ort_ep_cpu.kernels.nn import _Geometry

    big = _Geometry((40, 60), (40, 60), (1, 1), (1, 1), (0, 0, 0, 0))
    assert big.out == (1, 1) and big._offsets is None
    g = _Geometry((5, 6), (2, 3), (2, 1), (1, 2), (1, 0, 0, 1))
    assert g._offsets is None
    x = np.arange(2 * 3 * 6 * 7, dtype=np.float32).reshape(2, 3, 6, 7)  # the padded input
    offsets = g.offsets
    assert len(offsets) == 6 and g.offsets is offsets
    for (i, j), where in zip(((i, j) for i in range(2) for j in range(3)), offsets):
        window = x[where]
        assert window.shape == (2, 3) + g.out
        np.testing.assert_array_equal(window, x[:, :, i:i + 2 * g.out[0] - 1:2, 2 * j:2 * j + g.out[1]])
