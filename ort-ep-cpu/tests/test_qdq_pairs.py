"""A QDQ model's QuantizeLinear -> DequantizeLinear pairs outside oneDNN's groups are claimed as
one fused group each (``quant.fake_quant_pairs``) and computed in one pass (``quant.FakeQuant``,
compiled or numpy). The pass does the two kernels' operations in their order, so its results
must equal onnx.reference's QuantizeLinear then DequantizeLinear exactly, ties and saturation
included."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_loops import use_compiled
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort
from ort_core.testing import exact_reference

#: (integer type, Q zero point, DQ zero point, DQ scale factor): a QDQ model's pair (same
#: parameters both sides) and pairs whose DQ differs (a shift, another scale)
PAIRS = [
    (TensorProto.UINT8, 128, 128, 1.0),
    (TensorProto.INT8, -3, -3, 1.0),
    (TensorProto.UINT16, 30000, 30000, 1.0),
    (TensorProto.INT16, 0, 0, 1.0),
    (TensorProto.UINT8, 10, 7, 0.5),
]


def _pair_model(to: int, q_zero: int, dq_zero: int, dq_factor: float, scale: float) -> bytes:
    """x -> Abs -> QuantizeLinear -> DequantizeLinear -> y (the Abs keeps the pair's input an
    inner value, as in a model)."""
    dtype = helper.tensor_dtype_to_np_dtype(to)
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(np.array(q_zero, dtype), "zq"),
             numpy_helper.from_array(np.array(scale * dq_factor, np.float32), "sd"),
             numpy_helper.from_array(np.array(dq_zero, dtype), "zd")]
    nodes = [helper.make_node("Neg", ["x"], ["n"], name="neg"),
             helper.make_node("QuantizeLinear", ["n", "s", "zq"], ["q"], name="quantize"),
             helper.make_node("DequantizeLinear", ["q", "sd", "zd"], ["y"], name="dequantize")]
    graph = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("to,q_zero,dq_zero,dq_factor", PAIRS)
def test_a_pair_is_one_fused_step_equal_to_the_two_ops(monkeypatch, compiled, to, q_zero, dq_zero, dq_factor):
    used = use_compiled(monkeypatch, compiled, "fake_quantize")
    scale = 0.0125
    data = _pair_model(to, q_zero, dq_zero, dq_factor, scale)
    rng = np.random.default_rng(to)
    lo, hi = np.iinfo(helper.tensor_dtype_to_np_dtype(to)).min, np.iinfo(helper.tensor_dtype_to_np_dtype(to)).max
    # ties (k + 0.5 steps: half to even), the ends of the range and beyond it, and noise
    ties = (np.arange(-40, 40, dtype=np.float32) + np.float32(0.5)) * np.float32(scale)
    ends = np.array([(lo - q_zero) * scale, (hi - q_zero) * scale, (lo - q_zero - 9) * scale,
                     (hi - q_zero + 9) * scale, 0.0, -0.0], np.float32)
    noise = (rng.standard_normal(4000) * (hi - lo) * scale / 4).astype(np.float32)
    x = -np.concatenate([ties, ends, noise])
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    groups = {p.name: p.group for p in session.get_placement().nodes}
    assert groups["quantize"] is not None and groups["quantize"] == groups["dequantize"], groups
    assert groups["neg"] is None
    got = session.run(None, {"x": x})[0]
    want = ReferenceEvaluator(data).run(None, {"x": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert used or not compiled  # the compiled loop was asked for (numpy: USE off, it answers None)


@pytest.mark.parametrize("to,q_zero,dq_zero,dq_factor", PAIRS[:2])
def test_a_large_pair_splits_over_the_threads_to_the_same_values(monkeypatch, to, q_zero, dq_zero, dq_factor):
    """A pair over 64K values or more runs its compiled pass in ``split_parts`` blocks on as
    many threads; the values stay onnx.reference's exactly (ties, saturation), for a length that
    does not divide evenly."""
    from ort_ep_cpu import threads
    from ort_ep_cpu.kernels import _jit

    if not _jit.enabled():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(threads, "split_threads", lambda: 2)
    parts = []
    real = _jit.fake_quantize
    monkeypatch.setattr(_jit, "fake_quantize", lambda p=1: parts.append(p) or real(p))
    scale = 0.0125
    data = _pair_model(to, q_zero, dq_zero, dq_factor, scale)
    x = (np.random.default_rng(9).standard_normal(3 * 65537) * 300 * scale).astype(np.float32)
    x[::7] = np.round(x[::7] / scale) * scale + np.float32(scale / 2)  # ties
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ReferenceEvaluator(data).run(None, {"x": x})[0])
    assert parts == [2]


def test_a_pair_whose_quantized_value_is_read_elsewhere_stays_two_nodes():
    """The Q's output is a graph output too: the pair cannot hide it."""
    data = _pair_model(TensorProto.UINT8, 128, 128, 1.0, 0.02)
    from onnx import load_from_string

    model = load_from_string(data)
    model.graph.output.append(helper.make_tensor_value_info("q", TensorProto.UINT8, [None]))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert all(p.group is None for p in session.get_placement().nodes)
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    y, q = session.run(None, {"x": x})
    want_y, want_q = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(y, want_y)


def _regrid_model(to: int, second_scale: float, second_zero: int, between: str) -> bytes:
    """x -> Neg -> Q/DQ (scale 0.0125, zero point 3) -> ``between`` -> Q/DQ (``second_scale``,
    ``second_zero``) -> y: a QDQ transformer's pair after its attention heads' Reshape or
    Transpose, which has the first pair's parameters."""
    dtype = helper.tensor_dtype_to_np_dtype(to)
    inits = [numpy_helper.from_array(np.array(0.0125, np.float32), "s1"),
             numpy_helper.from_array(np.array(3, dtype), "z1"),
             numpy_helper.from_array(np.array(second_scale, np.float32), "s2"),
             numpy_helper.from_array(np.array(second_zero, dtype), "z2"),
             numpy_helper.from_array(np.array([4, 6], np.int64), "shape")]
    move = {"Transpose": helper.make_node("Transpose", ["d1"], ["m"], name="move", perm=[1, 0]),
            "Reshape": helper.make_node("Reshape", ["d1", "shape"], ["m"], name="move"),
            "none": helper.make_node("Identity", ["d1"], ["m"], name="move")}[between]
    nodes = [helper.make_node("Neg", ["x"], ["n"]),
             helper.make_node("QuantizeLinear", ["n", "s1", "z1"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
             move,
             helper.make_node("QuantizeLinear", ["m", "s2", "z2"], ["q2"], name="second_quantize"),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "regrid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize("between", ["Transpose", "Reshape", "none"])
@pytest.mark.parametrize("to", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("second", [(0.0125, 3), (0.025, 3), (0.0125, 4)], ids=["same", "other-scale", "other-zero"])
def test_a_pair_on_values_already_on_its_grid_passes_them_on(to, between, second):
    """A pair whose input is a DequantizeLinear's output with the pair's scale and zero point
    (through a Reshape or Transpose) gives its input back: passed on without a pass, equal to
    onnx.reference's two ops bit for bit; with another scale or zero point it is computed."""
    data = _regrid_model(to, *second, between)
    x = (np.random.default_rng(1).standard_normal((6, 4)) * 2).astype(np.float32)
    x[0, :2] = [0.00625 * 3, -1e6]  # a tie and a saturated value
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    notes = {p.name: p.note for p in session.get_placement().nodes}
    passed = "already on its grid" in notes["second_quantize"]
    assert passed == (second == (0.0125, 3)), notes
    got = session.run(None, {"x": x})[0]
    want = ReferenceEvaluator(data).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


NON_FINITE = np.array([np.nan, np.inf, -np.inf, 1.0, -3.4e38, 0.0], np.float32)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("to,zero", [(TensorProto.INT8, 3), (TensorProto.UINT8, 128), (TensorProto.INT16, 0)])
@pytest.mark.parametrize("scale", [1.0, float("inf")])
def test_quantizing_nan_gives_the_type_minimum_as_onnxruntime(monkeypatch, compiled, to, zero, scale):
    """NaN (x NaN, or +-inf / inf) quantizes to the type's minimum, as onnxruntime's does (it was
    0 for int8/int16: a causal mask of -inf given scale inf by quantize_static made quantized
    GPT-2 and LLaMA disagree with onnxruntime on most argmaxes); alone and in a Q -> DQ pair."""

    use_compiled(monkeypatch, compiled, "quantize")
    dtype = helper.tensor_dtype_to_np_dtype(to)
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"), numpy_helper.from_array(np.array(zero, dtype), "z")]
    alone = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", to, [None])], inits)
    pair = _pair_model(to, zero, zero, 1.0, scale)
    for data in (helper.make_model(alone, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString(), pair):
        want = exact_reference.session(data, providers=["CPUExecutionProvider"]).run(None, {"x": NON_FINITE})[0]
        got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": NON_FINITE})[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_each_quantize_nodes_parameters_are_read_once_per_session(monkeypatch):
    """The grouping asks for a Q / DQ node's scalar parameters several times per node (the
    pairs, oneDNN's group classification, the kernels): they are read from the graph once per
    node (``quant._scalar_quant``; a QDQ transformer's 273 nodes were read 3870 times, 8 ms of
    its session creation)."""
    from ort_ep_cpu.kernels import quant

    reads = []
    real = quant._scalar_quant_params
    monkeypatch.setattr(quant, "_scalar_quant_params", lambda graph, node: (reads.append(node.index), real(graph, node))[1])
    session = ort.InferenceSession(_pair_model(TensorProto.UINT8, 128, 128, 1.0, 0.0125), providers=["CPUExecutionProvider"])
    assert len({p.group for p in session.get_placement().nodes if p.name != "neg"}) == 1  # the pair, fused
    assert sorted(reads) == [1, 2]


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL"])
def test_a_pair_on_a_constant_weight_runs_at_every_level(level):
    """A float weight quantized at run time (QuantizeLinear of an initializer, then its
    DequantizeLinear, as quantize_static writes some weights): with nothing folded
    (ORT_DISABLE_ALL) the pair was claimed as a group reading the weight as an input, which a
    group never gets: the run failed with KeyError naming the weight (a QDQ PP-OCR classifier)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.02, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["w", "s", "z"], ["wq"]),
             helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
             helper.make_node("MatMul", ["x", "wd"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    x = rng.standard_normal((3, 6)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    got = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = ReferenceEvaluator(data).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
