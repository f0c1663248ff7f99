"""Every lowering builds, converts and saves; the saved package loads back (``load_spec``) with
the expected MIL ops, input/output types and shapes; and its numbers, computed from the saved
package by the test-only MIL evaluator through the provider's kernel, match onnxruntime
(float32: rtol 1e-4, atol 1e-5; float16: rtol 2e-3, atol 2e-3)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from ort_ep_coreml.build import build_model

from conftest import assert_close, node_model, reference, run_built

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def pos(*shape):
    return (R.random(shape) + 0.5).astype(np.float32)


I64_MAX = np.iinfo(np.int64).max

# id -> (model, feeds, MIL ops the saved program must hold)
CASES = {
    "conv_asym_pads_strided_bias": lambda: (node_model("Conv", {"x": f32(1, 3, 9, 8)}, {"W": f32(4, 3, 3, 2), "B": f32(4)},
                                                       pads=[1, 0, 2, 1], strides=[2, 1]), ["conv"]),
    "conv_grouped_dilated": lambda: (node_model("Conv", {"x": f32(1, 4, 8, 7)}, {"W": f32(6, 2, 3, 3)}, group=2,
                                                dilations=[2, 1], pads=[1, 1, 1, 1]), ["conv"]),
    "conv_depthwise_same_upper": lambda: (node_model("Conv", {"x": f32(2, 4, 7, 6)}, {"W": f32(4, 1, 3, 3)}, group=4,
                                                     auto_pad="SAME_UPPER", strides=[2, 2]), ["conv"]),
    "conv_same_lower": lambda: (node_model("Conv", {"x": f32(1, 2, 6, 6)}, {"W": f32(3, 2, 2, 2)},
                                           auto_pad="SAME_LOWER"), ["conv"]),
    "conv_1d": lambda: (node_model("Conv", {"x": f32(1, 2, 10)}, {"W": f32(3, 2, 4)}, pads=[2, 1]), ["conv"]),
    "conv_transpose_strided_asym_pads": lambda: (node_model("ConvTranspose", {"x": f32(1, 4, 5, 4)}, {"W": f32(4, 3, 3, 2), "B": f32(3)},
                                                            strides=[2, 3], pads=[1, 0, 2, 1]), ["conv_transpose"]),
    "conv_transpose_grouped": lambda: (node_model("ConvTranspose", {"x": f32(1, 4, 4, 4)}, {"W": f32(4, 2, 2, 2)},
                                                  group=2, strides=[2, 2]), ["conv_transpose"]),
    "maxpool_pads_strides": lambda: (node_model("MaxPool", {"x": f32(1, 2, 7, 7)}, kernel_shape=[3, 2], strides=[2, 2],
                                                pads=[1, 0, 1, 1]), ["max_pool"]),
    "avgpool_exclude_pad": lambda: (node_model("AveragePool", {"x": f32(1, 2, 6, 5)}, kernel_shape=[3, 3],
                                               pads=[1, 1, 1, 1]), ["avg_pool"]),
    "avgpool_include_pad": lambda: (node_model("AveragePool", {"x": f32(1, 2, 6, 5)}, kernel_shape=[2, 3], strides=[2, 1],
                                               pads=[1, 1, 0, 1], count_include_pad=1), ["avg_pool"]),
    "global_avgpool": lambda: (node_model("GlobalAveragePool", {"x": f32(2, 3, 5, 4)}), ["reduce_mean"]),
    "global_maxpool": lambda: (node_model("GlobalMaxPool", {"x": f32(2, 3, 5, 4)}), ["reduce_max"]),
    "gemm_transB_alpha_beta": lambda: (node_model("Gemm", {"a": f32(3, 5)}, {"b": f32(4, 5), "c": f32(4)}, transB=1,
                                                  alpha=0.5, beta=2.0), ["linear"]),
    "gemm_transA_matrix_c": lambda: (node_model("Gemm", {"a": f32(5, 3)}, {"b": f32(5, 4), "c": f32(3, 4)}, transA=1), ["linear"]),
    "gemm_dynamic_b": lambda: (node_model("Gemm", {"a": f32(3, 5), "b": f32(4, 5)}, transB=1, alpha=1.5), ["matmul"]),
    "matmul_batched_const": lambda: (node_model("MatMul", {"a": f32(2, 3, 5)}, {"b": f32(5, 4)}), []),
    "matmul_two_inputs": lambda: (node_model("MatMul", {"a": f32(2, 1, 3, 5), "b": f32(3, 5, 2)}), ["matmul"]),
    "add_broadcast": lambda: (node_model("Add", {"a": f32(2, 3, 4), "b": f32(3, 1)}), ["add"]),
    "sub": lambda: (node_model("Sub", {"a": f32(2, 3)}, {"b": f32(3)}), ["sub"]),
    "mul": lambda: (node_model("Mul", {"a": f32(2, 3), "b": f32(2, 3)}), ["mul"]),
    "div": lambda: (node_model("Div", {"a": f32(2, 3), "b": pos(2, 3)}), ["real_div"]),
    "pow": lambda: (node_model("Pow", {"a": pos(2, 3)}, {"b": np.array(1.7, np.float32)}), ["pow"]),
    "max_min": lambda: (node_model("Max", {"a": f32(2, 3), "b": f32(1, 3)}), ["maximum"]),
    "int_add": lambda: (node_model("Add", {"a": R.integers(-9, 9, (2, 3)).astype(np.int64), "b": R.integers(-9, 9, (3,)).astype(np.int64)}), ["add"]),
    **{f"unary_{op.lower()}": (lambda op=op, gen=gen, mil=mil: (node_model(op, {"x": gen(2, 3, 4)}), [mil] if mil else []))
       for op, gen, mil in (("Relu", f32, "relu"), ("Sigmoid", f32, "sigmoid"), ("Tanh", f32, "tanh"), ("Exp", f32, "exp"),
                            ("Log", pos, "log"), ("Sqrt", pos, "sqrt"), ("Erf", f32, "erf"), ("Abs", f32, "abs"),
                            ("Neg", f32, "mul"), ("Reciprocal", pos, "real_div"), ("Floor", f32, "floor"),
                            ("Ceil", f32, "ceil"), ("Softplus", f32, "softplus"), ("HardSwish", f32, "sigmoid_hard"))},
    "leaky_relu": lambda: (node_model("LeakyRelu", {"x": f32(2, 5)}, alpha=0.2), ["leaky_relu"]),
    "elu": lambda: (node_model("Elu", {"x": f32(2, 5)}, alpha=0.7), ["elu"]),
    "hard_sigmoid": lambda: (node_model("HardSigmoid", {"x": f32(2, 5)}, alpha=0.3, beta=0.4), ["sigmoid_hard"]),
    "gelu_tanh": lambda: (node_model("Gelu", {"x": f32(2, 5)}, opset=20, approximate="tanh"), ["gelu"]),
    "clip": lambda: (node_model("Clip", {"x": f32(3, 4)}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}), ["clip"]),
    "clip_relu6_like": lambda: (node_model("Clip", {"x": f32(3, 4)}, {"lo": np.array(0.0, np.float32)},
                                           input_order=["x", "lo"]), ["relu"]),
    "softmax_axis1": lambda: (node_model("Softmax", {"x": f32(2, 3, 4)}, axis=1, opset=13), ["softmax"]),
    "layernorm_last": lambda: (node_model("LayerNormalization", {"x": f32(2, 3, 8)}, {"s": f32(8), "b": f32(8)},
                                          epsilon=1e-3), ["layer_norm"]),
    "layernorm_axis1": lambda: (node_model("LayerNormalization", {"x": f32(2, 3, 4)}, {"s": f32(3, 4)}, axis=1), ["layer_norm"]),
    "batchnorm": lambda: (node_model("BatchNormalization", {"x": f32(2, 3, 4, 4)},
                                     {"s": f32(3), "b": f32(3), "m": f32(3), "v": pos(3)}, epsilon=1e-3), ["batch_norm"]),
    "resize_nearest_asymmetric": lambda: (node_model("Resize", {"x": f32(1, 2, 3, 4)},
                                                     {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 3], np.float32)},
                                                     mode="nearest", coordinate_transformation_mode="asymmetric",
                                                     nearest_mode="floor"), ["upsample_nearest_neighbor"]),
    "resize_linear_half_pixel": lambda: (node_model("Resize", {"x": f32(1, 2, 3, 4)},
                                                    {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
                                                    mode="linear"), ["upsample_bilinear"]),
    "resize_sizes_nearest": lambda: (node_model("Resize", {"x": f32(1, 2, 3, 4)},
                                                {"sz": np.array([1, 2, 6, 8], np.int64)}, input_order=["x", "", "", "sz"],
                                                mode="nearest", coordinate_transformation_mode="asymmetric",
                                                nearest_mode="floor"), ["upsample_nearest_neighbor"]),
    "concat_neg_axis": lambda: (node_model("Concat", {"a": f32(2, 3), "b": f32(2, 1), "c": f32(2, 2)}, axis=-1), ["concat"]),
    "reshape_zero_minus_one": lambda: (node_model("Reshape", {"x": f32(2, 3, 4)}, {"s": np.array([0, -1, 2], np.int64)}), ["reshape"]),
    "flatten": lambda: (node_model("Flatten", {"x": f32(2, 3, 4)}, axis=2), ["reshape"]),
    "transpose": lambda: (node_model("Transpose", {"x": f32(2, 3, 4, 5)}, perm=[0, 3, 1, 2]), ["transpose"]),
    "slice_negative_step": lambda: (node_model("Slice", {"x": f32(5, 6, 4)},
                                               {"st": np.array([-1, 1], np.int64), "en": np.array([-I64_MAX, 5], np.int64),
                                                "ax": np.array([1, 0], np.int64), "sp": np.array([-2, 3], np.int64)}),
                                    ["slice_by_index"]),
    "slice_clamped_end": lambda: (node_model("Slice", {"x": f32(4, 6)},
                                             {"st": np.array([2], np.int64), "en": np.array([I64_MAX], np.int64),
                                              "ax": np.array([-1], np.int64)}), ["slice_by_index"]),
    "gather_const_negative": lambda: (node_model("Gather", {"x": f32(5, 4)}, {"i": np.array([[-1, 0], [2, -3]], np.int64)},
                                                 axis=0), ["gather"]),
    "gather_dynamic_indices": lambda: (node_model("Gather", {"i": R.integers(-4, 4, (2, 3)).astype(np.int64)},
                                                  {"x": f32(3, 4)}, input_order=["x", "i"], axis=1), ["gather"]),
    "split_sizes": lambda: (node_model("Split", {"x": f32(2, 7)}, {"s": np.array([3, 4], np.int64)}, outputs=2, axis=1), ["split"]),
    "split_num_outputs": lambda: (node_model("Split", {"x": f32(7, 2)}, outputs=3, opset=18, num_outputs=3), ["split"]),
    "reduce_mean_keep": lambda: (node_model("ReduceMean", {"x": f32(2, 3, 4)}, axes=[1, -1]), ["reduce_mean"]),
    "reduce_sum_axes_input": lambda: (node_model("ReduceSum", {"x": f32(2, 3, 4)}, {"a": np.array([0], np.int64)}, keepdims=0),
                                      ["reduce_sum"]),
    "reduce_max": lambda: (node_model("ReduceMax", {"x": f32(2, 3, 4)}, axes=[2], keepdims=0), ["reduce_max"]),
    "reduce_min_all": lambda: (node_model("ReduceMin", {"x": f32(2, 3)}), ["reduce_min"]),
    "reduce_prod": lambda: (node_model("ReduceProd", {"x": pos(2, 3)}, axes=[0]), ["reduce_prod"]),
    "cast_int64_float": lambda: (node_model("Cast", {"x": R.integers(-5, 5, (2, 3)).astype(np.int64)}, to=TensorProto.FLOAT), ["cast"]),
    "cast_float_float16": lambda: (node_model("Cast", {"x": f32(2, 3)}, to=TensorProto.FLOAT16), ["cast"]),
    "unsqueeze": lambda: (node_model("Unsqueeze", {"x": f32(2, 3)}, {"a": np.array([0, -1], np.int64)}), ["expand_dims"]),
    "squeeze": lambda: (node_model("Squeeze", {"x": f32(2, 1, 3, 1)}, {"a": np.array([1], np.int64)}), ["squeeze"]),
    "where_less": lambda: (node_model("Where", {"c": R.random((2, 3)) > 0.5, "a": f32(2, 3), "b": f32(1, 3)}), ["select"]),
    "equal_int": lambda: (node_model("Equal", {"a": R.integers(0, 3, (2, 3)).astype(np.int64), "b": R.integers(0, 3, (3,)).astype(np.int64)}), ["equal"]),
    "add_float16": lambda: (node_model("Add", {"a": f32(2, 3).astype(np.float16), "b": f32(2, 3).astype(np.float16)}), ["add"]),
    "conv_float16": lambda: (node_model("Conv", {"x": f32(1, 2, 5, 5).astype(np.float16)}, {"W": f32(3, 2, 3, 3).astype(np.float16)},
                                        pads=[1, 1, 1, 1]), ["conv"]),
}


def _spec_checks(evaluator, model, feeds, ops):
    from coremltools.proto import FeatureTypes_pb2 as ft

    for op in ops:
        assert op in evaluator.op_types, (op, evaluator.op_types)
    description = evaluator.spec.description
    wanted = {np.float32: ft.ArrayFeatureType.FLOAT32, np.float16: ft.ArrayFeatureType.FLOAT16,
              np.int64: ft.ArrayFeatureType.INT32, np.int32: ft.ArrayFeatureType.INT32}
    assert len(description.input) == len(feeds)
    for spec_input, value in zip(description.input, feeds.values()):
        if value.dtype == np.bool_:
            continue
        assert spec_input.type.multiArrayType.dataType == wanted[value.dtype.type], spec_input
        assert list(spec_input.type.multiArrayType.shape) == list(value.shape or (1,)), spec_input


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowering_matches_onnxruntime(case, tmp_path):
    model, ops = CASES[case]()
    feeds = _make_feeds(model)
    actual, evaluator = run_built(model, feeds, tmp_path)
    _spec_checks(evaluator, model, feeds, ops)
    expected = reference(model, feeds)
    tol = 2e-3 if any(v.dtype == np.float16 for v in feeds.values()) else None
    if tol:
        assert_close(actual, expected, rtol=tol, atol=tol)
    else:
        assert_close(actual, expected)


def _make_feeds(model) -> dict[str, np.ndarray]:
    """Inputs from the model's declared types and shapes (values kept in safe ranges)."""
    from onnx import helper as h

    rng = np.random.default_rng(1)
    feeds = {}
    for value in model.graph.input:
        t = value.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = h.tensor_dtype_to_np_dtype(t.elem_type)
        if dtype == np.bool_:
            feeds[value.name] = rng.random(shape) > 0.5
        elif dtype.kind == "i":
            feeds[value.name] = rng.integers(-3, 3, shape).astype(dtype)
        else:
            feeds[value.name] = (
                (rng.random(shape) * 2 + 0.25) if _positive(model) else rng.standard_normal(shape)).astype(dtype)
    return feeds


def _positive(model) -> bool:
    return model.graph.node[0].op_type in ("Log", "Sqrt", "Reciprocal", "Pow", "ReduceProd", "Div")


def test_dynamic_batch_becomes_a_ranged_shape(tmp_path):
    model = node_model("Conv", {"x": f32(2, 3, 6, 6)}, {"W": f32(4, 3, 3, 3)}, pads=[1, 1, 1, 1], dims={"x": {0: "N"}})
    report = build_model(model, tmp_path)
    from conftest import MilTestEvaluator

    spec = MilTestEvaluator(report.packages[0]).spec
    ranges = spec.description.input[0].type.multiArrayType.shapeRange.sizeRanges
    assert [(r.lowerBound, r.upperBound) for r in ranges] == [(1, 65536), (3, 3), (6, 6), (6, 6)]
    feeds = {"x": f32(3, 3, 6, 6)}
    actual, _ = run_built(model, feeds, tmp_path / "run")
    assert_close(actual, reference(model, feeds))


def test_computed_reshape_keeps_onnx_zero_semantics(tmp_path):
    """Shape -> Slice -> Concat -> Reshape with a dynamic dim: the shape is computed in the
    program and ONNX's 0 (copy the input's dim) is resolved there."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["s0"]),
        helper.make_node("Concat", ["s0", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0, -1], np.int64), "tail")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": f32(2, 3, 4, 2)}
    actual, evaluator = run_built(model, feeds, tmp_path)
    assert "select" in evaluator.op_types and "shape" in evaluator.op_types
    assert_close(actual, reference(model, feeds))


DECLINED = {
    "maxpool_ceil_mode": (lambda: node_model("MaxPool", {"x": f32(1, 1, 5, 5)}, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
                          "ceil_mode=1"),
    "resize_cubic": (lambda: node_model("Resize", {"x": f32(1, 1, 2, 2)}, {"roi": np.zeros(0, np.float32),
                                                                            "sc": np.array([1, 1, 2, 2], np.float32)}, mode="cubic"),
                     "mode='cubic'"),
    "float64": (lambda: node_model("Relu", {"x": f32(2, 2).astype(np.float64)}), "tensor(double)"),
    "integer_div": (lambda: node_model("Div", {"a": np.ones((2,), np.int64), "b": np.ones((2,), np.int64)}), "integer Div"),
    "cast_float_int": (lambda: node_model("Cast", {"x": f32(2)}, to=TensorProto.INT64), "float to integer"),
    "layernorm_dynamic_scale": (lambda: node_model("LayerNormalization", {"x": f32(2, 4), "s": f32(4)}), "scale"),
    "conv_transpose_output_padding": (lambda: node_model("ConvTranspose", {"x": f32(1, 1, 3, 3)}, {"W": f32(1, 1, 3, 3)},
                                                         strides=[2, 2], output_padding=[1, 1]), "output_padding"),
    "softmax_opset11_axis1": (lambda: node_model("Softmax", {"x": f32(2, 3, 4)}, axis=1, opset=11), "flattens"),
    "topk_not_lowered": (lambda: node_model("TopK", {"x": f32(2, 5)}, {"k": np.array([2], np.int64)}, outputs=2), "TopK is not lowered"),
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_declined_with_reason(case, tmp_path):
    make, reason = DECLINED[case]
    report = build_model(make(), tmp_path)
    assert report.groups == []
    [(_, why)] = report.declined.items()
    assert reason in why, why
