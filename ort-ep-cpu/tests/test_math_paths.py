"""HardSigmoid and HardSwish through the compiled one-pass loops (numba, when installed) and
through numpy, against onnxruntime (float32; rtol 1e-6, atol 1e-7: an FMA rounds once) and
onnx.reference (float64); NaN stays NaN; a non-contiguous input (a transposed view) is read
correctly. ort-core's HardSwish fusion (level ALL) on a model below opset 14 runs the same loop
through the ``ort_core`` domain's HardSwish."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper

import ort_core as ort
from ort_ep_cpu import inplace
from ort_ep_cpu.kernels import _jit
from ort_ep_cpu.kernels import elementwise as ew


def _model(elem, shape, op="HardSigmoid", opset=13, **attrs):
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node(op, ["xt"], ["y"], **attrs)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, list(shape))],
                              [helper.make_tensor_value_info("y", elem, [None] * 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.3, "beta": 0.4}])
def test_hard_sigmoid_matches_onnxruntime(compiled, attrs, monkeypatch):
    calls = use_compiled(monkeypatch, compiled, "activation")
    data = _model(TensorProto.FLOAT, (2, 5, 7), **attrs)
    x = np.random.default_rng(0).standard_normal((2, 5, 7)).astype(np.float32) * 4
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)  # NaN positions must match too
    assert calls == ([("hard_sigmoid",)] if compiled else [])


@pytest.mark.parametrize("compiled", [False, True])
def test_hard_sigmoid_float64(compiled, monkeypatch):
    if compiled:
        pytest.importorskip("numba", reason="numba (optional) is not installed")
    from onnx.reference import ReferenceEvaluator

    monkeypatch.setattr(_jit, "USE", compiled)
    data = _model(TensorProto.DOUBLE, (3, 4, 6), alpha=0.25, beta=0.6)
    x = np.random.default_rng(1).standard_normal((3, 4, 6)) * 4
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == np.float64
    want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("compiled", [False, True])
def test_fused_conv_hard_sigmoid_activation(compiled, monkeypatch):
    """FusedConv's in-place HardSigmoid (the compiled pass over the conv output, or numpy's)."""
    calls = use_compiled(monkeypatch, compiled, "activation")
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft", activation="HardSigmoid",
                            activation_params=[0.3, 0.4], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
                              [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert 0 < (got == 1).sum() and 0 < (got == 0).sum()  # both clip bounds reached
    assert calls == ([("hard_sigmoid_in_place",)] if compiled else [])


@pytest.mark.parametrize("compiled", [False, True])
def test_hard_swish_matches_onnxruntime(compiled, monkeypatch):
    calls = use_compiled(monkeypatch, compiled, "activation")
    data = _model(TensorProto.FLOAT, (2, 5, 7), op="HardSwish", opset=14)
    x = np.random.default_rng(3).standard_normal((2, 5, 7)).astype(np.float32) * 4
    x[0, 0, :2] = [np.nan, np.inf]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert calls == ([("hard_swish",)] if compiled else [])  # a transposed view: not in place


@pytest.mark.parametrize("compiled", [False, True])
def test_hard_swish_float64(compiled, monkeypatch):
    use_compiled(monkeypatch, compiled, "activation")
    from onnx.reference import ReferenceEvaluator

    data = _model(TensorProto.DOUBLE, (3, 4, 6), op="HardSwish", opset=14)
    x = np.random.default_rng(4).standard_normal((3, 4, 6)) * 4
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == np.float64
    want = ReferenceEvaluator(onnx.load_from_string(data)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def _conv_hard_swish_model(opset: int) -> bytes:
    """Conv then hard-swish as exporters write it before opset 14: x * Clip(x + 3, 0, 6) / 6."""
    rng = np.random.default_rng(5)
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in (
        ("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)), ("b", rng.standard_normal(4).astype(np.float32)),
        ("three", np.array(3, np.float32)), ("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32)),
        ("six", np.array(6, np.float32)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "three"], ["a"]), helper.make_node("Clip", ["a", "lo", "hi"], ["k"]),
             helper.make_node("Mul", ["c", "k"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("opset,domain", [(12, ort.CORE_DOMAIN), (14, "")])
def test_hard_swish_fused_at_level_all(compiled, opset, domain, monkeypatch, tmp_path):
    calls = use_compiled(monkeypatch, compiled, "activation")
    monkeypatch.setattr(inplace, "INPLACE_MIN_ELEMENTS", 0)  # this small map written in place too
    data = _conv_hard_swish_model(opset)
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    got = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    written = onnx.load(so.optimized_model_filepath)
    assert [(n.domain, n.op_type) for n in written.graph.node] == [("", "Conv"), (domain, "HardSwish")]
    assert calls == ([("hard_swish_in_place",)] if compiled else [])  # into the Conv's fresh output
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert (got == 0).any() and (got > 3).any()  # both sides of the hard-swish's bend reached


def test_hard_swish_not_fused_below_level_all(tmp_path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(_conv_hard_swish_model(12), so, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node] == ["Conv", "Add", "Clip", "Mul", "Div"]


def test_compiled_exp_loops_vectorise_on_avx2():
    """The compiled logistic (and every loop built on ``_jit._exp_value``) runs on 256-bit
    vectors on AVX2: 2^k is made from its bits (``_vector_ir.float32_from_bits``), where a
    table's lookup needed a gather and LLVM kept the loop scalar on an AVX2 EPYC (a Sigmoid of
    77k values 268 -> 46 us). Checked in the machine code: packed float multiply-adds or
    multiplies on ymm registers."""
    import platform

    from ort_core.devices import host_cpu

    pytest.importorskip("numba", reason="numba (optional) is not installed")
    if platform.machine() not in ("x86_64", "AMD64") or "avx2" not in host_cpu().flags:
        pytest.skip("256-bit vectors need an x86 CPU with AVX2")
    from ort_ep_cpu.kernels import _jit

    loop = _jit.sigmoid()
    x = np.linspace(-100, 100, 1001, dtype=np.float32)
    y = np.empty_like(x)
    loop(x, y)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6, atol=1e-30)
    import numba

    options = {k: v for k, v in loop.targetoptions.items() if k != "cache"}
    fresh = numba.njit(**options)(loop.py_func)  # cached machine code cannot be inspected
    fresh(x, y)
    assembly = fresh.inspect_asm(fresh.signatures[0]).splitlines()
    # (ymm on AVX2; zmm where LLVM takes AVX-512's 512-bit vectors)
    packed = [line for line in assembly if ("ymm" in line or "zmm" in line)
              and ("vfmadd" in line and "ps" in line or "vmulps" in line)]
    assert packed, "the logistic loop has no packed float32 arithmetic on ymm or zmm registers"


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("form", ["Tanh", "in place", "FusedGemm"])
def test_tanh_matches_onnxruntime(compiled, form, monkeypatch):
    """float32 Tanh by the compiled pass (``_jit.tanh``: within 2e-7 of tanh, as onnxruntime's
    MLAS tanh is within 2.5e-7; numpy's libm tanh was 3.4x slower) or numpy's, as a node, in
    place (its input read by no other node) and as FusedGemm's activation: onnxruntime's values
    within 5e-7 (1e-6 after a product, whose sums round differently); NaN stays NaN, +-inf give
    +-1, -0.0 stays -0.0."""
    calls = use_compiled(monkeypatch, compiled, "tanh")
    rng = np.random.default_rng(3)
    if form == "FusedGemm":
        w = onnx.numpy_helper.from_array(rng.standard_normal((24, 16)).astype(np.float32) / 4, "w")
        nodes = [helper.make_node("FusedGemm", ["x", "w"], ["y"], domain="com.microsoft", transB=1, activation="Tanh")]
        x_shape, inits, opsets = (100, 16), [w], [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    else:
        first = [helper.make_node("Relu", ["x"], ["r"])] if form == "in place" else []
        nodes = first + [helper.make_node("Tanh", ["r" if first else "x"], ["y"])]
        x_shape, inits, opsets = (3, 700), [], [helper.make_opsetid("", 13)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    data = model.SerializeToString()
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    if form == "Tanh":
        x[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 1e-30, -50.0]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 if form == "FusedGemm" else 5e-7)  # NaN positions too
    if form == "Tanh":
        assert np.signbit(got[0, 3]) and got[0, 4] == np.float32(1e-30)
    if compiled:
        assert calls == ([()] if form == "Tanh" else [(True,)])  # the one-array loop in place


_SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 30.0, -30.0, 100.0, -100.0, 1e-6, -1e-6, -88.0, -104.0]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("op, opset, attrs, loop", [
    ("Elu", 13, {}, ("elu",)), ("Elu", 13, {"alpha": 0.4}, ("elu",)), ("Selu", 13, {}, ("elu",)),
    ("Selu", 13, {"alpha": 1.5, "gamma": 2.0}, ("elu",)), ("Celu", 13, {}, ("celu",)),
    ("Celu", 13, {"alpha": 0.5}, ("celu",)), ("ThresholdedRelu", 13, {"alpha": 0.7}, ("thresholded_relu",)),
    ("Softsign", 13, {}, ("softsign",)), ("Swish", 24, {"alpha": 1.5}, ()), ("Softplus", 13, {}, ("softplus",)),
    ("Mish", 18, {}, ("mish",)), ("LeakyRelu", 13, {"alpha": 0.2}, ("leaky_relu",)),
    ("LeakyRelu", 13, {"alpha": 1.5}, ("leaky_relu",)),
])
def test_exponential_activations_match_onnxruntime(op, opset, attrs, loop, compiled, monkeypatch):
    """Elu, Selu, Celu, ThresholdedRelu, Softsign, Softplus, Mish and LeakyRelu by one compiled
    float32 pass each (``_jit.activation``; numpy's expm1 and np.where made the first four
    13-15x onnxruntime's time, libm's log1p Softplus and Mish 1.5-1.8x, LeakyRelu's two passes
    1.65x), Swish by QuickGelu's, or by
    numpy: against onnxruntime (rtol 1e-6, atol 1e-6: exp's polynomial is within 2 ulp,
    Softplus within 3.3 ulp and Mish 4.5 of float64's, swept over [-100, 100]), NaN,
    infinities, signed zeros and underflow included."""
    calls = use_compiled(monkeypatch, compiled, "activation")
    swish_calls = use_compiled(monkeypatch, compiled, "quick_gelu")
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 50])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 50])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()
    x = (np.random.default_rng(4).standard_normal((3, 4, 50)) * 4).astype(np.float32)
    x[0, 0, :len(_SPECIALS)] = _SPECIALS
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # NaN positions must match too
    if compiled:
        assert (calls == [loop]) if loop else swish_calls


@pytest.mark.parametrize("slope_kind", ["per_channel", "scalar", "full", "infinite"])
def test_prelu_matches_onnxruntime(slope_kind):
    """PRelu as min(x, 0) * slope + max(x, 0) for finite slopes (np.where's branchy mask made it
    1.7x onnxruntime's time), np.where where a slope is infinite (0 * inf would be NaN): equal
    to onnxruntime, NaN, infinities and signed zeros included."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 3, 6, 7)) * 4).astype(np.float32)
    x[0, 0, 0, :len(_SPECIALS)] = _SPECIALS[:7]
    slope = {"per_channel": rng.uniform(0.05, 0.3, (3, 1, 1)), "scalar": np.full((1,), 0.2),
             "full": rng.uniform(-1, 1, (3, 6, 7)), "infinite": np.array([[[0.1]], [[np.inf]], [[0.2]]])}[slope_kind]
    slope = slope.astype(np.float32)
    graph = helper.make_graph([helper.make_node("PRelu", ["x", "s"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))],
                              [onnx.numpy_helper.from_array(slope, "s")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("compiled", [False, True])
def test_exp_matches_onnxruntime(compiled, monkeypatch):
    """float32 Exp by one compiled pass (``_jit.exp``: within 2 ulp of expf, overflow to inf and
    underflow through the subnormals to 0 as expf; numpy's took 1.3 ns a value) or numpy's,
    out of place and in place (the Add's output is read by the Exp alone): against
    onnxruntime, rtol 1e-6."""
    calls = use_compiled(monkeypatch, compiled, "exp")
    nodes = [helper.make_node("Exp", ["x"], ["y"]), helper.make_node("Add", ["x", "one"], ["x1"]),
             helper.make_node("Exp", ["x1"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 500])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4, 500]) for n in ("y", "z")],
                              [onnx.numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    x = (np.random.default_rng(6).standard_normal((3, 4, 500)) * 30).astype(np.float32)
    x[0, 0, :len(_SPECIALS)] = _SPECIALS
    x[0, 1, :6] = [88.72, 88.73, -87.33, -103.9, -150.0, 87.5]
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        # inf, 0 and NaN where onnxruntime has them; subnormals within one step (1.4e-45)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-44)
    if compiled:
        assert () in calls and (True,) in calls  # out of place, and in place into the Add's output


@pytest.mark.parametrize("op", ["Tanh", "Exp"])
def test_small_tanh_and_exp_take_numpy_s_ufunc(op, monkeypatch):
    """Under ``COMPILED_UNARY_MIN_SIZE`` values numpy's ufunc (its call is the cheaper: (1, 16,
    7) Tanh 1.6 -> 0.95 us a node), from it the compiled pass; onnxruntime's values (rtol 1e-6)."""
    calls = use_compiled(monkeypatch, True, op.lower())
    for n, compiled in ((ew.COMPILED_UNARY_MIN_SIZE - 1, False), (ew.COMPILED_UNARY_MIN_SIZE, True)):
        calls.clear()
        graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
        x = (np.random.default_rng(n).standard_normal((1, n)) * 4).astype(np.float32)
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        assert bool(calls) == compiled


@pytest.mark.parametrize("op", ["MultiHeadAttention"])
def test_attention_takes_the_compiled_exp(op, monkeypatch):
    """The exponentials of the attention kernels' softmax run through ``elementwise.exp``
    (``_jit.exp``: 1.5-2.7x numpy's float32 exp on (1, 4, 64, 64) to (8, 12, 128, 128));
    against onnxruntime, rtol 1e-5."""
    calls = use_compiled(monkeypatch, True, "exp")
    rng = np.random.default_rng(11)
    if op == "MultiHeadAttention":
        inputs = ["q", "k", "v"]
        feeds = {n: rng.standard_normal((1, 32, 32)).astype(np.float32) for n in inputs}  # (probabilities of 4K)
        node = helper.make_node(op, inputs, ["y"], domain="com.microsoft", num_heads=4)
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    else:
        inputs = ["x"]
        feeds = {"x": (rng.standard_normal((2, 40, 700)) * 4).astype(np.float32)}
        node = helper.make_node(op, inputs, ["y"])
        opsets = [helper.make_opsetid("", 13)]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
                                            for n, v in feeds.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    data = model.SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert calls, f"{op} did not ask for the compiled exp"


@pytest.mark.parametrize("lo, hi", [(np.nan, 1.0), (-1.0, np.nan), (np.nan, np.nan)])
def test_clip_with_a_nan_bound_ignores_that_bound_as_onnxruntime(lo, hi):
    """Clip(x, NaN, 1) clips x to at most 1 in onnxruntime; numpy's clip made every value NaN
    (found by a helper's edge-case scan)."""
    graph = helper.make_graph(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(lo, np.float32), "lo"), onnx.numpy_helper.from_array(np.array(hi, np.float32), "hi")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    x = np.array([-2.0, -0.5, 0.5, 1.5, np.nan], np.float32)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
@pytest.mark.parametrize("bounds", ["both", "min", "max", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_clip_bounds_on_every_rank_as_onnxruntime(shape, bounds, dtype):
    """Clip-13 with both, one or no bound, a 0-d input among the ranks (the ufuncs the kernel
    calls answer a 0-d input with a scalar, which their out= refuses: the ONNX kit's expanded
    DynamicQuantizeLinear clips a 0-d zero point) and an integer type: onnxruntime's values."""
    names = {"both": ["x", "lo", "hi"], "min": ["x", "lo"], "max": ["x", "", "hi"], "none": ["x"]}[bounds]
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT32
    graph = helper.make_graph(
        [helper.make_node("Clip", names, ["y"])], "g", [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, None)],
        [onnx.numpy_helper.from_array(np.array(-1, dtype), "lo"), onnx.numpy_helper.from_array(np.array(2, dtype), "hi")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    for values in ([-3, 0, 5, 1, -1, 2], [7]):
        x = np.resize(np.array(values, dtype), shape)
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a_shape, b_shape, split", [
    ((8, 64, 512), (8, 64, 512), True),
    ((8, 64, 512), (), True),  # a scalar
    ((131072, 1), (), True),  # a scalar, a's last axis 1 (a layer norm's variance + epsilon): an IndexError
    ((131072, 1), (1,), True),
    ((8, 64, 512), (512,), True),  # a bias along the last axis
    ((1, 1, 512), (8, 64, 512), "commutative"),  # the large one second: Add and Mul only
    ((8, 64, 512), (8, 1, 512), False),  # other broadcasts: numpy's
    ((64, 512), (1, 1, 1), False),  # a one-value b of higher rank widens the output: numpy's
    ((64, 511), (64, 511), False),  # under SPLIT_BINARY_MIN
])
def test_large_float32_arithmetic_splits_over_the_threads_to_numpy_s_values(op, a_shape, b_shape, split,
                                                                               monkeypatch):
    """Add / Sub / Mul / Div of float32 arrays of ``SPLIT_BINARY_MIN`` values or more: the
    compiled loops on two threads (``_jit.binary_split``) for a same-shape, one-value or
    last-axis b, each value numpy's to the bit; other forms numpy's ufunc."""
    calls = use_compiled(monkeypatch, True, "binary_split")
    rng = np.random.default_rng(4)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = (rng.standard_normal(b_shape) + 3).astype(np.float32)
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape)),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    want = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](a, b)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    taken = split is True or (split == "commutative" and op in ("Add", "Mul"))
    assert bool(calls) == taken
