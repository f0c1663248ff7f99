"""Tricky semantics of family-A kernels, checked against onnx.reference.ReferenceEvaluator (or
an exact expectation where the reference itself is inexact), on inputs the suite does not use.

Tolerances: exact for integer, boolean, quantized and cast outputs; rtol 1e-5 / atol 1e-6 for
float32; rtol 2**-6 for bfloat16 (two bfloat16 ULPs).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ort_core as ort
from ort_core.testing import exact_reference

RNG = np.random.default_rng(7)


def _model(op: str, inputs: list[np.ndarray | None], out_types: list[int], opset: int, **attrs) -> onnx.ModelProto:
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    node = helper.make_node(op, names, [f"y{k}" for k in range(len(out_types))], **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if x is not None],
        [helper.make_tensor_value_info(f"y{k}", t, None) for k, t in enumerate(out_types)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    # outputs get their shapes from onnx's inference (the checker wants a shape on them)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for out, new in zip(model.graph.output, inferred.graph.output):
        if new.type.tensor_type.HasField("shape"):
            out.type.CopyFrom(new.type)
        else:
            out.type.tensor_type.shape.SetInParent()  # rank unknown: an empty shape message
    return model


def run_both(op, inputs, out_types, opset, reference="onnx", **attrs):
    """Our outputs and the reference's: onnx.reference, or onnxruntime where onnx.reference
    does not implement the opset's semantics (it ignores Softmax's 2-D coercion before 13)."""
    model = _model(op, inputs, out_types, opset, **attrs)
    feeds = {f"x{k}": x for k, x in enumerate(inputs) if x is not None}
    ours = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    if reference == "onnxruntime":
        pytest.importorskip("onnxruntime")
        ref = exact_reference.session(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    elif reference == "onnx":
        ref = ReferenceEvaluator(model).run(None, feeds)
    else:
        ref = []
    return ours, ref


def assert_same(ours, ref, rtol=1e-5, atol=1e-6):
    for a, b in zip(ours, ref):
        b = np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if a.dtype.kind == "V":  # ml_dtypes: compare the values in float32 (or the bits for NaN)
            if a.dtype == ml_dtypes.bfloat16:
                np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=2**-6, atol=atol)
            else:
                np.testing.assert_array_equal(a.astype(np.float32), b.astype(np.float32))
        elif a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(a, b)


F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32


def test_round_is_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4999, -0.0], dtype=np.float32)
    (y,), _ = run_both("Round", [x], [F], 22)
    np.testing.assert_array_equal(y, [-2, -2, -0, 0, 2, 2, 2, -0])


@pytest.mark.parametrize("fmod,dtype", [(0, np.int32), (0, np.int8), (1, np.int32), (1, np.int8), (1, np.float32)])
def test_mod_signs(fmod, dtype):
    a = np.array([-7, -7, 7, 7, 5, -5], dtype=dtype)
    b = np.array([2, -2, 2, -2, -3, 3], dtype=dtype)
    ours, ref = run_both("Mod", [a, b], [helper.np_dtype_to_tensor_dtype(np.dtype(dtype))], 13, fmod=fmod)
    assert_same(ours, ref)
    # C fmod takes the dividend's sign, Python mod the divisor's
    expected = np.fmod(a, b) if fmod else np.mod(a, b)
    np.testing.assert_array_equal(ours[0], expected)


def test_integer_div_truncates_toward_zero():
    a = np.array([-7, 7, -7, 7, 0], dtype=np.int32)
    b = np.array([2, -2, -2, 2, 3], dtype=np.int32)
    (y,), _ = run_both("Div", [a, b], [I32], 14)
    np.testing.assert_array_equal(y, [-3, -3, 3, 3, 0])


def test_pow_integer_base_float_exponent_keeps_base_type():
    a = np.array([2, 3, 4], dtype=np.int64)
    b = np.array([0.5, 2.0, 3.0], dtype=np.float32)
    ours, ref = run_both("Pow", [a, b], [I64], 15)
    assert_same(ours, ref)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E4M3FNUZ])
def test_cast_float8_saturation(saturate, to):
    x = np.array([0.0, 1.0, -3.3, 500.0, -1e6, 70000.0, np.inf, -np.inf, np.nan, 1e-9], dtype=np.float32)
    ours, ref = run_both("Cast", [x], [to], 21, to=to, saturate=saturate)
    a, b = ours[0].astype(np.float32), np.asarray(ref[0]).astype(np.float32)
    assert ours[0].dtype == np.asarray(ref[0]).dtype
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("to", [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.FLOAT4E2M1,
                                TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.BOOL])
def test_cast_small_types_match_reference(to):
    x = np.array([-9.0, -2.0, -1.5, -0.5, 0.0, 0.5, 1.5, 3.0, 7.0, 15.0], dtype=np.float32)
    ours, ref = run_both("Cast", [x], [to], 25, to=to)
    assert_same(ours, ref)


@pytest.mark.parametrize("to", [TensorProto.INT64, TensorProto.INT32, TensorProto.UINT8])
def test_cast_of_nan_and_inf_to_integers_warns_of_nothing(to):
    """NaN, inf and out-of-range floats cast to integers give numpy's (and onnxruntime's x86)
    values and no RuntimeWarning: with warnings as errors (pytest's filterwarnings = error)
    the warning was the run's failure. T5's relative-position buckets cast log(0)."""
    import warnings

    x = np.array([-np.inf, np.nan, 1e30, 2.5], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,), (want,) = run_both("Cast", [x], [to], 21, reference="onnxruntime", to=to)
    np.testing.assert_array_equal(y, want)
    assert y.dtype == want.dtype


def test_cast_strings_both_ways():
    x = np.array(["1.5", "-2", "INF", "-inf", "NaN", "1e-3"], dtype=object)
    (y,), _ = run_both("Cast", [x], [F], 21, to=F)
    np.testing.assert_array_equal(y, np.array([1.5, -2, np.inf, -np.inf, np.nan, 1e-3], dtype=np.float32))
    (s,), _ = run_both("Cast", [np.array([1.5, -2.0], dtype=np.float32)], [TensorProto.STRING], 21,
                       to=TensorProto.STRING)
    assert s.dtype == object and s.tolist() == ["1.5", "-2"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.bool_, np.int64,
                                   np.uint8])
def test_cast_to_string_writes_numbers_as_onnxruntime(dtype):
    """Floats with 8 significant digits (C's %.8g) whatever their width, NaN / INF / -INF,
    bools as 1 / 0: numpy's str() gave "1.0", "nan", "True" and a float64's 17 digits."""
    pytest.importorskip("onnxruntime")
    if dtype == np.bool_:
        x = np.array([True, False])
    elif np.dtype(dtype).kind in "iu":
        x = np.array([0, 1, 7, 200], dtype=dtype)
    else:
        values = [1.0, 0.1, 1e10, 1e-7, 123456789.0, np.nan, np.inf, -np.inf, -0.0, 3.0e38, 2.5, -1.25e-3]
        x = np.array(values, np.float32).astype(dtype)
    (s,), (want,) = run_both("Cast", [x], [TensorProto.STRING], 21, reference="onnxruntime", to=TensorProto.STRING)
    assert s.dtype == object and s.tolist() == want.tolist()


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_ties(op, last, keepdims):
    x = np.array([[1, 3, 3, 0], [0, 0, 2, 2]], dtype=np.float32)
    ours, ref = run_both(op, [x], [I64], 13, axis=1, keepdims=keepdims, select_last_index=last)
    assert_same(ours, ref)


def test_reduce_empty_sets_give_identities():
    x = np.zeros((2, 0, 3), dtype=np.float32)
    axes = np.array([1], dtype=np.int64)
    for op, value in [("ReduceMax", -np.inf), ("ReduceMin", np.inf), ("ReduceSum", 0), ("ReduceProd", 1),
                      ("ReduceLogSumExp", -np.inf), ("ReduceL2", 0), ("ReduceSumSquare", 0)]:
        (y,), _ = run_both(op, [x, axes], [F], 18, keepdims=0)
        np.testing.assert_array_equal(y, np.full((2, 3), value, dtype=np.float32), err_msg=op)


def test_reduce_noop_with_empty_axes():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    (y,), _ = run_both("ReduceSum", [x, np.array([], dtype=np.int64)], [F], 13, noop_with_empty_axes=1)
    np.testing.assert_array_equal(y, x)


def test_reduce_log_sum_exp_does_not_overflow():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf]], dtype=np.float32)
    (y,), _ = run_both("ReduceLogSumExp", [x, np.array([1], dtype=np.int64)], [F], 18, keepdims=0)
    np.testing.assert_allclose(y, [1000 + np.log(2), -1000], rtol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (13, 1), (13, -1)])
def test_softmax_family_opsets(op, opset, axis):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x[0, 0, :2] = 5.0  # a tie for Hardmax: the first index wins
    ours, ref = run_both(op, [x], [F], opset, reference="onnxruntime" if opset < 13 else "onnx", axis=axis)
    assert_same(ours, ref)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum(exclusive, reverse):
    x = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    ours, ref = run_both("CumSum", [x, np.array(1, dtype=np.int64)], [I32], 14, exclusive=exclusive, reverse=reverse)
    assert_same(ours, ref)


def test_blocked_quantize_and_dequantize_int4():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    scale = np.abs(RNG.standard_normal((4, 3))).astype(np.float32) + 0.1
    zp = np.array([[1, -2, 0]] * 4, dtype=ml_dtypes.int4)
    ours, ref = run_both("QuantizeLinear", [x, scale, zp], [TensorProto.INT4], 21, axis=1, block_size=2)
    assert_same(ours, ref)
    ours, ref = run_both("DequantizeLinear", [ours[0], scale, zp], [F], 21, axis=1, block_size=2)
    assert_same(ours, ref)


def test_per_axis_quantize_rounds_half_to_even():
    x = np.array([[0.5, 1.5, 2.5, -0.5], [1.0, 3.0, 5.0, 300.0]], dtype=np.float32)
    scale = np.array([1.0, 2.0], dtype=np.float32)
    zp = np.array([0, 10], dtype=np.uint8)
    (y,), _ = run_both("QuantizeLinear", [x, scale, zp], [TensorProto.UINT8], 19, axis=0)
    np.testing.assert_array_equal(y, [[0, 2, 2, 0], [10, 12, 12, 160]])


def test_qlinear_matmul_matches_reference():
    a = RNG.integers(0, 255, (3, 5)).astype(np.uint8)
    b = RNG.integers(0, 255, (5, 4)).astype(np.uint8)
    args = [a, np.array(0.02, np.float32), np.array(120, np.uint8), b, np.array(0.03, np.float32),
            np.array(130, np.uint8), np.array(0.5, np.float32), np.array(100, np.uint8)]
    ours, ref = run_both("QLinearMatMul", args, [TensorProto.UINT8], 10)
    assert_same(ours, ref)


def test_matmul_integer_per_row_zero_point():
    a = RNG.integers(-128, 127, (3, 5)).astype(np.int8)
    b = RNG.integers(-128, 127, (5, 4)).astype(np.int8)
    a_zp = np.array([1, -3, 7], dtype=np.int8)
    b_zp = np.array([0, 2, -1, 5], dtype=np.int8)
    # onnx.reference takes only scalar zero points here, so the expectation is computed directly
    (y,), _ = run_both("MatMulInteger", [a, b, a_zp, b_zp], [I32], 10, reference=None)
    expected = (a.astype(np.int32) - a_zp[:, None]) @ (b.astype(np.int32) - b_zp)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("op", ["Sigmoid", "Exp", "Tanh", "HardSigmoid", "Softplus", "Elu"])
def test_bfloat16_activations(op):
    x = RNG.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    ours, ref = run_both(op, [x], [TensorProto.BFLOAT16], 22 if op not in ("Sigmoid", "Exp", "Tanh") else 13)
    assert_same(ours, ref)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = RNG.standard_normal((5, 7)).astype(np.float32) * 3
    ours, ref = run_both("Gelu", [x], [F], 20, approximate=approximate)
    assert_same(ours, ref)


def test_legacy_broadcast_with_axis():
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    model = _model("Add", [a, b], [F], 6, broadcast=1, axis=1)
    model.graph.output[0].type.tensor_type.shape.CopyFrom(helper.make_tensor_type_proto(F, a.shape).tensor_type.shape)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x0": a, "x1": b})
    np.testing.assert_allclose(y, a + b[None, :, :, None], rtol=1e-6)


def test_bitshift_out_of_range_is_defined():
    a = np.array([-8, 8, 1], dtype=np.int8)
    b = np.array([9, 9, -1], dtype=np.int8)
    ours, ref = run_both("BitShift", [a, b], [TensorProto.INT8], 28, direction="RIGHT")
    assert_same(ours, ref)


def test_gradient_matches_finite_differences():
    # y = Sigmoid(a @ w + b) with b broadcast over rows: dy/da, dy/dw, dy/db summed over y
    T = "ai.onnx.preview.training"
    a = RNG.standard_normal((3, 4))
    w = RNG.standard_normal((4, 2))
    b = RNG.standard_normal((2,))
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["y"]),
        helper.make_node("Gradient", ["a", "w", "b"], ["da", "dw", "db"], domain=T, xs=["a", "w", "b"], y="y"),
    ]
    D = TensorProto.DOUBLE
    graph = helper.make_graph(
        nodes, "grad",
        [helper.make_tensor_value_info(n, D, v.shape) for n, v in (("a", a), ("w", w), ("b", b))],
        # y is an output too: the optimizer drops nodes nothing reads, and Gradient names y only
        # in an attribute
        [helper.make_tensor_value_info(n, D, v.shape) for n, v in (("da", a), ("dw", w), ("db", b))]
        + [helper.make_tensor_value_info("y", D, (3, 2))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(T, 1)])
    da, dw, db, _ = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "w": w, "b": b})

    def total(a_, w_, b_):
        return float((1 / (1 + np.exp(-(a_ @ w_ + b_)))).sum())

    eps = 1e-6
    for got, k in ((da, 0), (dw, 1), (db, 2)):
        args = [a, w, b]
        numeric = np.zeros_like(args[k])
        for idx in np.ndindex(args[k].shape):
            plus = [x.copy() for x in args]
            minus = [x.copy() for x in args]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            numeric[idx] = (total(*plus) - total(*minus)) / (2 * eps)
        np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-7)


def _run_vs_onnxruntime(op, inputs, attrs, out_type, opset=10):
    pytest.importorskip("onnxruntime")
    names = [f"i{k}" for k in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.graph.output[0].type.tensor_type.shape.SetInParent()
    feeds = dict(zip(names, inputs))
    ours = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    # the reference's operands after the first as constants, which ``exact_reference`` can write
    # as uint8 where this CPU's onnxruntime saturates uint8 x int8
    reference = onnx.ModelProto.FromString(model.SerializeToString())
    del reference.graph.input[1:]
    reference.graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in zip(names[1:], inputs[1:]))
    theirs = exact_reference.session(reference, providers=["CPUExecutionProvider"]).run(None, {names[0]: inputs[0]})[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)  # integer results: exact


@pytest.mark.parametrize("x_type,w_type", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_integer_conv_and_matmul_match_onnxruntime(x_type, w_type):
    xi, wi = np.iinfo(x_type), np.iinfo(w_type)
    x = RNG.integers(xi.min, xi.max, (2, 4, 7, 6)).astype(x_type)
    w = RNG.integers(wi.min, wi.max, (6, 2, 3, 3)).astype(w_type)
    attrs = dict(group=2, pads=[1, 0, 1, 2], strides=[2, 1], dilations=[1, 2])
    x_zp = np.array(3, dtype=x_type)
    _run_vs_onnxruntime("ConvInteger", [x, w, x_zp, np.array(2, dtype=w_type)], attrs, TensorProto.INT32)
    w_scale = (RNG.random(6) * 0.05 + 0.01).astype(np.float32)  # per output channel
    bias = RNG.integers(-1000, 1000, 6).astype(np.int32)
    _run_vs_onnxruntime(
        "QLinearConv",
        [x, np.array(0.02, np.float32), x_zp, w, w_scale, np.zeros(6, w_type), np.array(0.3, np.float32),
         np.array(5, dtype=x_type), bias],
        attrs, helper.np_dtype_to_tensor_dtype(np.dtype(x_type)),
    )
    a = RNG.integers(xi.min, xi.max, (2, 3, 5)).astype(x_type)
    b = RNG.integers(wi.min, wi.max, (5, 4)).astype(w_type)
    _run_vs_onnxruntime("MatMulInteger", [a, b, np.array(1, x_type), np.array(2, w_type)], {}, TensorProto.INT32)
    _run_vs_onnxruntime(
        "QLinearMatMul",
        [a, np.array(0.02, np.float32), np.array(3, x_type), b, np.array(0.03, np.float32), np.array(2, w_type),
         np.array(0.4, np.float32), np.array(4, x_type)],
        {}, helper.np_dtype_to_tensor_dtype(np.dtype(x_type)),
    )


_Q_TYPES = [TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16, TensorProto.UINT4,
            TensorProto.INT4, TensorProto.UINT2, TensorProto.INT2, TensorProto.FLOAT8E4M3FN,
            TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT4E2M1]


@pytest.mark.parametrize("opset,mode", [(o, m) for o in (19, 21, 23, 25) for m in ("tensor", "axis", "block")
                                         if m != "block" or o >= 21])  # blocks arrive in opset 21
@pytest.mark.parametrize("x_type", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_quantize_dequantize_every_type(opset, mode, x_type):
    checked = 0
    for q in _Q_TYPES:
        q_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(q))
        if opset < 21 and q not in (TensorProto.UINT8, TensorProto.INT8) and "float8" not in q_dtype.name:
            continue
        if opset < 25 and q in (TensorProto.UINT2, TensorProto.INT2):
            continue
        if opset < 23 and q == TensorProto.FLOAT4E2M1:
            continue
        x = (RNG.standard_normal((3, 4)) * 5).astype(x_type)
        attrs: dict = {}
        if mode == "tensor":
            scale, zshape = np.array(0.37, np.float32).astype(x_type), ()
        elif mode == "axis":
            scale, zshape = (np.abs(RNG.standard_normal(4)) + 0.1).astype(x_type), (4,)
            attrs["axis"] = 1
        else:
            scale, zshape = (np.abs(RNG.standard_normal((3, 2))) + 0.1).astype(x_type), (3, 2)
            attrs.update(axis=1, block_size=2)
        zp = (np.zeros(zshape, np.float32) if "float" in q_dtype.name else RNG.integers(0, 2, zshape)).astype(q_dtype)
        ours, ref = run_both("QuantizeLinear", [x, scale, zp], [q], opset, **attrs)
        assert_same(ours, ref)
        ours, ref = run_both("DequantizeLinear", [ours[0], scale, zp], [helper.np_dtype_to_tensor_dtype(np.dtype(x_type))],
                             opset, **attrs)
        assert_same(ours, ref)
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("op", ["HardSigmoid", "HardSwish", "Erf"])
def test_rank_0_inputs_give_rank_0_outputs(op):
    """np.ascontiguousarray turns a 0-d array into 1-d: a scalar in must stay a scalar out."""
    ours, ref = run_both(op, [np.array(0.75, np.float32)], [F], 17)
    assert ours[0].shape == ()
    assert_same(ours, ref)


@pytest.mark.parametrize("opset", [13, 19, 21])
def test_dequantize_linear_of_rank_0_constants_is_rank_0(opset):
    """A DequantizeLinear of rank-0 constant codes (a QDQ model's shared scalar: EfficientWord-Net's
    int8 build) is computed once at creation, and stays rank 0 (it was (1,))."""
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(np.array(127, np.int8), "q"), numpy_helper.from_array(np.array(0.015748031, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    graph = helper.make_graph([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "dq", [],
                              [helper.make_tensor_value_info("y", F, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    assert y.shape == () and y.dtype == np.float32
    assert y == np.float32(127) * np.float32(0.015748031)


@pytest.mark.parametrize("q_type", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("shape,axis", [((6, 2, 3, 3), 0), ((2, 5, 3, 4), 1), ((2, 3, 4, 5), 3), ((7, 5), 1), ((7, 5), 0)])
@pytest.mark.parametrize("with_zero_point", [True, False])
def test_per_axis_dequantize_of_constants_is_one_compiled_pass(monkeypatch, q_type, shape, axis, with_zero_point):
    """A per-axis DequantizeLinear of constant codes (a QDQ model's per-channel weights, computed
    at session creation) takes the compiled per-axis loop, along rows (axis before the last
    non-1 dimension) or columns (MatMul weights: axis last), with the values onnxruntime gives."""
    from ort_ep_cpu.kernels import _jit

    if _jit.dequantize_axis() is None:
        pytest.skip("numba is not installed")
    calls = []
    loop = _jit.dequantize_axis()
    monkeypatch.setattr(_jit, "dequantize_axis", lambda: lambda *args: (calls.append(args[3]), loop(*args)))
    info = np.iinfo(q_type)
    codes = RNG.integers(info.min, info.max, shape, endpoint=True).astype(q_type)
    scale = (RNG.random(shape[axis]) * 0.05 + 0.001).astype(np.float32)
    inits = [numpy_helper.from_array(codes, "q"), numpy_helper.from_array(scale, "s")]
    if with_zero_point:
        inits.append(numpy_helper.from_array(RNG.integers(info.min, info.max, shape[axis]).astype(q_type), "z"))
    node = helper.make_node("DequantizeLinear", [t.name for t in inits], ["y"], axis=axis)
    graph = helper.make_graph([node], "dq", [], [helper.make_tensor_value_info("y", F, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    (ours,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {})
    import onnxruntime

    (ref,) = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {})
    np.testing.assert_array_equal(ours, ref)
    assert calls == [math.prod(shape[axis + 1:]) > 1]


@pytest.mark.parametrize("op", ["Sigmoid", "LeakyRelu", "Softplus", "Mish"])
def test_rank_0_float_inputs_of_multi_step_activations(op):
    """numpy answers a 0-d array with a scalar, which the kernels' ``out=`` refused (PLCMOS's
    last Sigmoid: "return arrays must be of ArrayType")."""
    ours, ref = run_both(op, [np.array(0.3, np.float32)], [F], 18, reference="onnxruntime")
    assert ours[0].shape == ()
    assert_same(ours, ref)


def _correctly_rounded_share(got: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean(got != exact.astype(np.float16)))


@pytest.mark.parametrize("case", ["Sigmoid", "LeakyRelu", "MatMul", "Gemm", "Conv"])
def test_float16_is_computed_in_float32_and_rounded_once(case):
    """As onnxruntime does: float16 products and multi-step activations in float32, one
    rounding (and float16 weights' subnormals kept: they are normal numbers in float32). Before,
    1-50% of the values were off the correctly rounded one; onnxruntime's 0-0.2%."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    H = TensorProto.FLOAT16
    if case in ("Sigmoid", "LeakyRelu"):
        x = (rng.standard_normal(8192) * 4).astype(np.float16)
        attrs = {"alpha": 0.1} if case == "LeakyRelu" else {}
        (got,), _ = run_both(case, [x], [H], 17, reference="none", **attrs)
        x64 = x.astype(np.float64)
        exact = 1 / (1 + np.exp(-x64)) if case == "Sigmoid" else np.where(x64 >= 0, x64, 0.1 * x64)
    elif case in ("MatMul", "Gemm"):
        a = rng.standard_normal((64, 256)).astype(np.float16)
        b = (rng.standard_normal((256, 96)) / 16).astype(np.float16)
        (got,), _ = run_both(case, [a, b], [H], 17, reference="none")
        exact = a.astype(np.float64) @ b.astype(np.float64)
    else:
        x = rng.standard_normal((2, 64, 1, 14)).astype(np.float16)
        w = (rng.standard_normal((48, 64, 1, 5)) / np.sqrt(320)).astype(np.float16)  # some subnormal in float16
        graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 2, 0, 2])], "c",
                                  [helper.make_tensor_value_info("x", H, x.shape)],
                                  [helper.make_tensor_value_info("y", H, None)], [numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (0, 0), (2, 2)))
        exact = np.stack([np.einsum("ncw,ocw->no", xp[:, :, 0, t:t + 5], w[:, :, 0].astype(np.float64))
                          for t in range(14)], -1)[:, :, None]
    assert got.dtype == np.float16
    assert _correctly_rounded_share(got, exact) < 0.01, _correctly_rounded_share(got, exact)


@pytest.mark.parametrize("outputs", [1, 3])
def test_float16_layer_normalization_is_computed_in_float32_as_stash_type_says(outputs):
    """stash_type 1 (the default): normalised in float32, Mean and InvStdDev given in float32,
    the output rounded once; step by step in float16, 2,804 of 6,256 outputs were off the
    correctly rounded value (onnxruntime: 1). Found on a torch-exported fp16 model."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 8, 17, 23)) * 2).astype(np.float16)
    scale, bias = np.ones(23, np.float16), np.zeros(23, np.float16)
    H = TensorProto.FLOAT16
    ours, ref = run_both("LayerNormalization", [x, scale, bias], [H, F, F][:outputs], 17, reference="onnxruntime",
                         axis=-1, epsilon=1e-5)
    x64 = x.astype(np.float64)
    exact = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    assert ours[0].dtype == np.float16 and _correctly_rounded_share(ours[0], exact) < 0.001
    assert [a.dtype for a in ours] == [b.dtype for b in ref]
    assert_same(ours[1:], ref[1:])


def test_float64_layer_normalization_gives_mean_and_inv_std_dev_in_stash_type_float32():
    """A float64 LayerNormalization with stash_type 1 (the default): Y in float64, Mean and
    InvStdDev in float32 (the spec's U, what onnxruntime gives and the model's inferred output
    types say); they were float64."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 7))
    D = TensorProto.DOUBLE
    ours, ref = run_both("LayerNormalization", [x, np.ones(7), np.zeros(7)], [D, F, F], 17, reference="onnxruntime",
                         axis=-1, epsilon=1e-5)
    assert [a.dtype for a in ours] == [b.dtype for b in ref] == [np.float64, np.float32, np.float32]
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_softmax_of_large_logits_warns_nothing():
    """Logits whose exponentials overflow float32 take the max-subtracted path; numpy's
    overflow warning from the first try is not shown (lineless_table_rec's LORE processor)."""
    import warnings

    x = np.linspace(-20, 95, 64 * 64, dtype=np.float32).reshape(64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours, ref = run_both("Softmax", [x], [F], 13, reference="onnxruntime", axis=-1)
    assert_same(ours, ref)


def test_compiled_softmax_rows_find_the_max_at_every_position():
    """The row loop's max (eight running maxima, then the rest one by one) finds a row's
    largest value wherever it is, for every row length up to 19: a value 500 above the rest
    gets all the weight (a max that missed it would leave exp(500 - max) clamped, and the row
    wrong); NaN first or later gives numpy's NaN row; every split gives the same values."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from ort_ep_cpu.kernels import _jit

    for n in range(1, 20):
        x = np.zeros((n, n), np.float32)
        x[np.arange(n), np.arange(n)] = 500.0  # row j: the max at position j
        for parts in (1, 2):
            y = np.empty_like(x)
            _jit.softmax_rows(parts)(x, y, False, parts)
            np.testing.assert_array_equal(y, np.eye(n, dtype=np.float32))
        if n > 1:
            for at in (0, n - 1):
                x[0, at] = np.nan
                _jit.softmax_rows(1)(x, y, False, 1)
                assert np.isnan(y[0]).all() and not np.isnan(y[1:]).any()
                x[0, at] = 500.0 if at == 0 else 0.0


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_by_the_compiled_rows(op, monkeypatch):
    """float32 inputs of every size take the compiled row loop (``_jit.softmax_rows``; up to
    8K elements before, when its exp was scalar): onnxruntime's
    values on logits of every range, rows masked with -inf (exactly 0 / -inf out), a fully
    masked row; NaN and +inf rows give the numpy path's NaN."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from ort_ep_cpu import threads
    from ort_ep_cpu.kernels import _jit, reduce

    calls = []
    real = _jit.softmax_rows

    def spy(parts=1):
        calls.append(parts)
        return real(parts)

    monkeypatch.setattr(_jit, "softmax_rows", spy)
    rng = np.random.default_rng(5)
    for shape, spread in [((1, 10), 1.0), ((3, 1), 5.0), ((8, 33), 30.0), ((2, 4, 64), 200.0), ((16, 512), 1e4),
                          ((1, 6, 48, 48), 10.0), ((3, 7000), 30.0), ((1, 6, 120, 120), 30.0)]:
        x = (rng.standard_normal(shape) * spread).astype(np.float32)
        x.reshape(-1, shape[-1])[0, 1::3] = -np.inf  # a masked row
        ours, ref = run_both(op, [x], [F], 13, reference="onnxruntime", axis=-1)
        assert_same(ours, ref, rtol=2e-5, atol=1e-6 if op == "Softmax" else 2e-5)
        masked = ours[0].reshape(-1, shape[-1])[0, 1::3]
        assert np.all(masked == (0.0 if op == "Softmax" else -np.inf))
    assert calls
    # the last one (86K values) split into blocks of rows on the session's threads
    assert calls[-1] == (min(threads.usable(), 2) if _jit.SPLIT_MIN_TRANSCENDENTAL <= 86400 else 1)
    # an axis followed by ones only (attention weights (1, S, 1)) is the last one
    calls.clear()
    x = (rng.standard_normal((2, 40, 1, 1)) * 4).astype(np.float32)
    ours, ref = run_both(op, [x], [F], 13, reference="onnxruntime", axis=1)
    assert_same(ours, ref, rtol=2e-5, atol=2e-5)
    assert calls
    x = rng.standard_normal((5, 6)).astype(np.float32)
    x[0, 2], x[1, 0], x[2, 5], x[3] = np.nan, np.inf, -np.inf, -np.inf  # row 3 fully masked
    fn = reduce.softmax if op == "Softmax" else reduce.log_softmax
    got = fn(x, 1)
    monkeypatch.setattr(_jit, "USE", False)
    with np.errstate(invalid="ignore"):
        want = fn(x, 1)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_float32_sigmoid_by_the_compiled_pass(monkeypatch):
    """float32 Sigmoid is one compiled pass (``_jit.sigmoid``): onnxruntime's values over
    [-120, 120], exactly 0 at -inf and below numpy's overflow point, 1 at +inf, NaN kept, in place
    too (``inplace.py``), by the one-array loop (the two-array loop given y = x fails LLVM's
    overlap check and runs scalar: 6x slower)."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from ort_ep_cpu.kernels import _jit, elementwise

    calls = []
    real = _jit.sigmoid
    monkeypatch.setattr(_jit, "sigmoid", lambda in_place=False: calls.append(in_place) or real(in_place))
    x = np.concatenate([np.linspace(-120, 120, 4001, dtype=np.float32),
                        np.array([np.inf, -np.inf, -100.0, 0.0, -0.0], np.float32)]).reshape(1, -1)
    ours, ref = run_both("Sigmoid", [x], [F], 13, reference="onnxruntime")
    assert calls
    # onnxruntime's MLAS gives 0 from about -17.6 (the exact value is 2.2e-8 there), ours
    # follows the exact value down to float32's range
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-7)
    assert ours[0][0, -5] == 1.0 and ours[0][0, -4] == 0.0 and ours[0][0, -3] == 0.0
    nan = np.array([np.nan, 1.0], np.float32)
    assert np.isnan(elementwise.sigmoid(nan)[0])
    y = x.copy()
    calls.clear()
    assert elementwise.sigmoid(y, out=y) is y
    np.testing.assert_array_equal(y, ours[0])
    assert calls == [True]


_FP_WARNINGS_SCRIPT = """
import numpy as np, onnx.helper as h, ort_core
for op in ("Log", "Sqrt", "Reciprocal", "Exp"):
    g = h.make_graph([h.make_node(op, ["x"], ["y"])], "g", [h.make_tensor_value_info("x", 1, [3])],
                     [h.make_tensor_value_info("y", 1, [3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    s = ort_core.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    print(op, s.run(None, {"x": np.array([0.0, -1.0, 100.0], np.float32)})[0].tolist())
np.log(np.zeros(1))  # the user's own call: numpy's warning stays
"""


def test_floating_point_results_come_without_numpy_warnings_as_in_onnxruntime():
    """Log(0) = -inf, Sqrt(-1) = NaN, Reciprocal(0) = inf, Exp(100) = inf: onnxruntime returns
    them silently; numpy's RuntimeWarnings from the kernels (a T5 encoder's Log of a zero
    position printed one) are filtered for this package's modules only."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FP_WARNINGS_SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Log [-inf, nan, 4.60517" in out.stdout and "Reciprocal [inf, -1.0, 0.0099999" in out.stdout
    assert "Sqrt [0.0, nan, 10.0]" in out.stdout and out.stdout.rstrip().endswith("inf]")  # Exp(100)
    assert out.stderr.count("RuntimeWarning") == 1 and out.stderr.startswith("<string>:"), out.stderr  # the script's own


def _split_row_loops(x: np.ndarray) -> list[np.ndarray]:
    from ort_ep_cpu.kernels import fused, reduce

    return [reduce.softmax(x, -1), fused.gelu(x), reduce.CompiledLayerNorm(1e-5)(x, None, None, x[0], None, False)[0]]


def _largest_differences(x: np.ndarray, want: list[np.ndarray]) -> list[float]:
    # (a few floats back: a child's large result through the queue blocks its exit)
    return [float(np.abs(got - expected).max()) for got, expected in zip(_split_row_loops(x), want)]


def test_split_row_loops_in_a_forked_child():
    """A child forked after the Softmax, Gelu and LayerNorm rows ran split on numba's OpenMP
    pool takes their serial loops (``_jit._after_fork``): the same values, and the child lives
    (entering the parent's pool there ended it)."""
    pytest.importorskip("numba", reason="numba (optional) is not installed")
    from parallel_runs import in_forked_child

    from ort_ep_cpu.kernels import _jit

    x = np.random.default_rng(9).standard_normal((300, 400)).astype(np.float32)
    assert x.size >= _jit.SPLIT_MIN_ELEMENTS
    want = _split_row_loops(x)  # split in the parent: the pool has started
    assert max(in_forked_child(_largest_differences, x, want, timeout=60)) <= 1e-6


@pytest.mark.parametrize("op,fmod", [("Div", None), ("Mod", 0), ("Mod", 1)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_division_by_zero_fails_the_run(op, fmod, dtype):
    """onnxruntime fails the run ("Integer division by zero"); numpy gave 0 and a warning."""
    attrs = {} if fmod is None else {"fmod": fmod}
    a, b = np.array([7, 8], dtype), np.array([0, 2], dtype)
    with pytest.raises(ort.Fail, match="by zero"):
        run_both(op, [a, b], [onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))], 14, reference=None, **attrs)
    (y,), _ = run_both(op, [a, b + 1], [onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))], 14, reference=None,
                       **attrs)
    np.testing.assert_array_equal(y, a // (b + 1) if op == "Div" else a % (b + 1))


def test_gather_index_out_of_range_is_invalid_argument_as_in_onnxruntime():
    """onnxruntime's Gather answers an index out of range with INVALID_ARGUMENT: the error is
    caught by ``except InvalidArgument`` as by ``except Fail`` (every kernel failure's class)."""
    data, indices = np.arange(6, dtype=np.float32).reshape(3, 2), np.array([0, 3], np.int64)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="Gather") as info:
        run_both("Gather", [data, indices], [F], 13, reference=None, axis=0)
    assert isinstance(info.value, ort.Fail)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("indices", [np.array(2, np.int64), np.array([0, -1, 2, 2], np.int64),
                                     np.array([[1, 0], [-3, 3]], np.int64)], ids=["scalar", "vector", "matrix"])
def test_gather_of_a_transposed_view_matches_onnxruntime(axis, indices):
    """Gather reads a strided input (Transpose's view) by indexing, not by np.take, which
    copied all of it first (an unrolled LSTM's per-step Gather: 55 -> 8 us)."""
    pytest.importorskip("onnxruntime")
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Gather", ["t", "i"], ["y"], axis=axis)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4, 5, 6]),
                                           helper.make_tensor_value_info("i", I64, list(indices.shape))],
                              [helper.make_tensor_value_info("y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feeds = {"x": x, "i": indices}
    ours = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    want = exact_reference.session(model.SerializeToString()).run(None, feeds)[0]
    assert ours.shape == want.shape
    np.testing.assert_array_equal(ours, want)


def test_gather_of_a_strided_view_does_not_copy_the_whole_input():
    """np.take copies a non-contiguous input whole before it takes a row: a 4 MB copy for a
    16 KB row each step (traced by tracemalloc, which numpy reports its buffers to)."""
    import tracemalloc

    from ort_ep_cpu.kernels import tensor  # noqa: F401  (registers the kernels)
    from ort_ep_cpu.registry import lookup

    model = _model("Gather", [np.zeros((4, 2), np.float32), np.array(1, np.int64)], [F], 13, axis=0)
    import onnx_ir as ir

    view = ort.GraphView(ir.serde.deserialize_model(model).graph, opset_imports={"": 13})
    gather = lookup("", "Gather", 13).build(view.nodes[0], None)  # the kernel's function
    data = np.ones((4096, 256), np.float32).T  # (256, 4096), strided
    tracemalloc.start()
    try:
        row = gather(data, np.array(7, np.int64))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert row.shape == (4096,) and peak < data.nbytes // 16
