"""Graph optimizer: each pass fires on the pattern it targets, and the model computes the same
before and after (onnxruntime, with its own optimizations off, runs both; it also knows the
com.microsoft ops the fusions emit). Tolerance: rtol 1e-4, atol 1e-5 (folded weights and
fused ops round differently in float32)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common  # noqa: F401  (ir.passes.common is not imported by onnx_ir itself)
import pytest
from onnx import TensorProto, helper

import ort_core
from conftest import initializer as _init
from conftest import make_model
from conftest import onnxruntime_unoptimized as _ort_run
from conftest import tensor_info as _vi
from fake_providers import HostProvider
from ort_core import Capability, Claim, Kernel, hookimpl, optimizer
from ort_core.optimizer import basic, fusion

RNG = np.random.default_rng(0)


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _apply(model: onnx.ModelProto, *passes) -> onnx.ModelProto:
    m = ir.serde.deserialize_model(model)
    for p in passes:
        p(m)
    ir.passes.common.RemoveUnusedNodesPass()(m)
    return ir.serde.serialize_model(m)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _check(model, optimized, feeds):
    onnx.checker.check_model(optimized)
    for got, want in zip(_ort_run(optimized, feeds), _ort_run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _everything(node) -> bool:
    return True


# --------------------------------------------------------------------------------- basic


def test_dropout_elimination():
    model = make_model(
        [helper.make_node("Dropout", ["x"], ["d"], name="drop"), helper.make_node("Relu", ["d"], ["y"])],
        [_vi("x", [2, 3])], [_vi("y", [2, 3])],
    )
    out = _apply(model, basic.DropoutEliminationPass())
    assert _ops(out) == ["Relu"]
    _check(model, out, {"x": _f32(2, 3)})


def test_dropout_in_training_mode_stays():
    model = make_model(
        [helper.make_node("Dropout", ["x", "r", "t"], ["d"], name="drop", seed=1), helper.make_node("Relu", ["d"], ["y"])],
        [_vi("x", [2, 3])], [_vi("y", [2, 3])],
        [_init("r", np.array(0.5, np.float32)), _init("t", np.array(True))],
    )
    assert "Dropout" in _ops(_apply(model, basic.DropoutEliminationPass()))


def test_constant_folding():
    model = make_model(
        [
            helper.make_node("Mul", ["a", "b"], ["ab"]),
            helper.make_node("Transpose", ["ab"], ["abt"], perm=[1, 0]),
            helper.make_node("MatMul", ["x", "abt"], ["y"]),
        ],
        [_vi("x", [2, 3])], [_vi("y", [2, 4])],
        [_init("a", _f32(4, 3)), _init("b", _f32(4, 3))],
    )
    out = _apply(model, basic.ConstantFoldingPass())
    assert _ops(out) == ["MatMul"]
    _check(model, out, {"x": _f32(2, 3)})


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand", "Tile", "Conv"])
def test_constant_folding_of_big_outputs(op):
    """onnxruntime folds a ConstantOfShape, Expand or Tile of 2M elements (caffe2-era models
    build their weights so): whole-array ops fold up to max_fold_bytes; a Conv, which
    onnx.reference computes in Python loops, stays computed above FOLD_LIMIT elements."""
    n = 2048
    if op == "ConstantOfShape":
        nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"],
                                  value=onnx.numpy_helper.from_array(np.array([1.5], np.float32)))]
        inits = [_init("s", np.array([n, 1024], np.int64))]
    elif op == "Expand":
        nodes = [helper.make_node("Expand", ["v", "s"], ["c"])]
        inits = [_init("v", _f32(1, 1024)), _init("s", np.array([n, 1024], np.int64))]
    elif op == "Tile":
        nodes = [helper.make_node("Tile", ["v", "r"], ["c"])]
        inits = [_init("v", _f32(1, 1024)), _init("r", np.array([n, 1], np.int64))]
    else:  # 1 x 2 x 1024 x 1024 outputs
        nodes = [helper.make_node("Conv", ["v", "w"], ["c4"], pads=[1, 1, 1, 1]),
                 helper.make_node("Reshape", ["c4", "s"], ["c"])]
        inits = [_init("v", _f32(1, 1, 1024, 1024)), _init("w", _f32(2, 1, 3, 3)), _init("s", np.array([n, 1024], np.int64))]
    model = make_model([*nodes, helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x", [n, 1024])], [_vi("y", [n, 1024])],
                       inits)
    out = _apply(onnx.shape_inference.infer_shapes(model), basic.ConstantFoldingPass())
    assert _ops(out) == (["Conv", "Reshape", "Add"] if op == "Conv" else ["Add"])
    if op != "Conv":
        _check(model, out, {"x": _f32(n, 1024)})


def test_constant_folding_leaves_random_and_runtime_inputs():
    model = make_model(
        [
            helper.make_node("RandomNormal", [], ["r"], shape=[2, 3], seed=1.0),
            helper.make_node("Add", ["x", "r"], ["y"]),
        ],
        [_vi("x", [2, 3])], [_vi("y", [2, 3])],
    )
    assert _ops(_apply(model, basic.ConstantFoldingPass())) == ["RandomNormal", "Add"]


def test_constant_folding_keeps_the_dequantize_of_quantized_weights():
    # as onnxruntime: a QDQ model's DequantizeLinear of a constant stays, so that a provider
    # running the QDQ unit in integer still sees the quantized weights (at any opset)
    for opset in (17, 21):
        model = make_model(
            [
                helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
                helper.make_node("MatMul", ["x", "w"], ["y"]),
            ],
            [_vi("x", [2, 3])], [_vi("y", [2, 4])],
            [_init("wq", np.arange(12, dtype=np.uint8).reshape(3, 4)), _init("s", np.array(0.1, np.float32)),
             _init("z", np.array(3, np.uint8))],
            opset=opset,
        )
        out = _apply(model, basic.ConstantFoldingPass())
        assert _ops(out) == ["DequantizeLinear", "MatMul"], opset


def test_shape_folding_then_constant_folding():
    model = make_model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "one"], ["d1"], axis=0),
            helper.make_node("Unsqueeze", ["d1", "zero"], ["d1u"]),
            helper.make_node("Concat", ["minus1", "d1u"], ["shape"], axis=0),
            helper.make_node("Reshape", ["x", "shape"], ["y"]),
        ],
        [_vi("x", ["N", 6])], [_vi("y", [None, 6])],
        [_init("one", np.array(1, np.int64)), _init("zero", np.array([0], np.int64)),
         _init("minus1", np.array([-1], np.int64))],
    )
    out = _apply(model, basic.ShapeInferenceQuietPass(), basic.ShapeFoldingPass(), basic.ConstantFoldingPass())
    assert _ops(out) == ["Reshape"]
    _check(model, out, {"x": _f32(3, 6)})


def test_shape_folding_keeps_dynamic_dimensions():
    model = make_model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["y"], axis=0)],
        [_vi("x", ["N", 6])], [_vi("y", [], TensorProto.INT64)],
        [_init("zero", np.array(0, np.int64))],
    )
    out = _apply(model, basic.ShapeInferenceQuietPass(), basic.ShapeFoldingPass())
    assert _ops(out) == ["Shape", "Gather"]


def _conv_bn_model(with_bias: bool):
    inits = [_init("w", _f32(4, 3, 3, 3)), _init("s", 1 + _f32(4, scale=0.1)), _init("b", _f32(4, scale=0.1)),
             _init("m", _f32(4, scale=0.1)), _init("v", np.abs(1 + _f32(4, scale=0.1)))]
    conv_in = ["x", "w"]
    if with_bias:
        inits.append(_init("cb", _f32(4)))
        conv_in.append("cb")
    return make_model(
        [
            helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], epsilon=1e-3),
        ],
        [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4, 8, 8])], inits,
    )


@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_batchnorm_fold(with_bias):
    model = _conv_bn_model(with_bias)
    out = _apply(model, basic.ConvBatchNormFoldPass())
    assert _ops(out) == ["Conv"]
    assert out.graph.output[0].name == "y"
    _check(model, out, {"x": _f32(1, 3, 8, 8)})


def test_conv_add_fold():
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "cb"], ["c"], name="conv"), helper.make_node("Add", ["c", "k"], ["y"])],
        [_vi("x", [1, 3, 5, 5])], [_vi("y", [1, 4, 3, 3])],
        [_init("w", _f32(4, 3, 3, 3)), _init("cb", _f32(4)), _init("k", _f32(4, 1, 1))],
    )
    out = _apply(model, basic.ConvAddFoldPass())
    assert _ops(out) == ["Conv"]
    _check(model, out, {"x": _f32(1, 3, 5, 5)})


@pytest.mark.parametrize("factor_shape", [(), (4, 1, 1), (1, 4, 1, 1)])
def test_conv_mul_then_add_fold(factor_shape):
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "cb"], ["c"], name="conv"), helper.make_node("Mul", ["k", "c"], ["m"]),
         helper.make_node("Add", ["m", "z"], ["y"])],
        [_vi("x", [1, 3, 5, 5])], [_vi("y", [1, 4, 3, 3])],
        [_init("w", _f32(4, 3, 3, 3)), _init("cb", _f32(4)), _init("k", _f32(*factor_shape)), _init("z", _f32(4, 1, 1))],
    )
    out = _apply(model, basic.ConvMulFoldPass(), basic.ConvAddFoldPass())
    assert _ops(out) == ["Conv"]
    _check(model, out, {"x": _f32(1, 3, 5, 5)})


@pytest.mark.parametrize("conv_first", [True, False])
def test_conv_sub_fold(conv_first):
    """conv - k joins the bias as -k; k - conv is no bias and stays."""
    inputs = ["c", "k"] if conv_first else ["k", "c"]
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "cb"], ["c"], name="conv"), helper.make_node("Sub", inputs, ["y"])],
        [_vi("x", [1, 3, 5, 5])], [_vi("y", [1, 4, 3, 3])],
        [_init("w", _f32(4, 3, 3, 3)), _init("cb", _f32(4)), _init("k", _f32(1, 4, 1, 1))],
    )
    out = _apply(model, basic.ConvAddFoldPass())
    assert _ops(out) == (["Conv"] if conv_first else ["Conv", "Sub"])
    _check(model, out, {"x": _f32(1, 3, 5, 5)})


def test_a_batch_norm_spelled_out_after_the_bias_folds_whole_at_basic():
    """Conv -> Add(bias) -> Sub(mean) -> Mul(scale) -> Add(shift): each fold brings the next op
    to the Conv, and BASIC repeats the folds until none is left."""
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Add", ["c", "bias"], ["b"]),
         helper.make_node("Sub", ["b", "mean"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["m"]),
         helper.make_node("Add", ["m", "shift"], ["y"])],
        [_vi("x", [1, 3, 5, 5])], [_vi("y", [1, 4, 3, 3])],
        [_init("w", _f32(4, 3, 3, 3)), _init("bias", _f32(4, 1, 1)), _init("mean", _f32(4, 1, 1)),
         _init("scale", _f32(4, 1, 1)), _init("shift", _f32(4, 1, 1))],
    )
    out = _apply(model, *optimizer.passes_for_level(1))
    assert _ops(out) == ["Conv"]
    _check(model, out, {"x": _f32(1, 3, 5, 5)})


def test_cast_to_the_type_it_has_is_removed():
    model = make_model(
        [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT), helper.make_node("Relu", ["a"], ["r"]),
         helper.make_node("Cast", ["r"], ["h"], to=TensorProto.FLOAT16), helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)],
        [_vi("x", [2, 3])], [_vi("y", [2, 3])],
    )
    out = _apply(onnx.shape_inference.infer_shapes(model), basic.CastEliminationPass())
    assert _ops(out) == ["Relu", "Cast", "Cast"]  # float16 and back rounds: kept
    _check(model, out, {"x": _f32(2, 3)})


def _nhwc_block(extra=(), residual=False):
    """A converted TensorFlow block: NHWC in, a Transpose to NCHW around the Conv, its bias,
    batch norm and Relu applied in NHWC (constants of shape [C]), a Transpose back to NCHW for
    the next Conv; ``residual``: the block's input added back."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["xt", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 3, 1]),
             helper.make_node("Add", ["ct", "bias"], ["b"]), helper.make_node("Sub", ["b", "mean"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["m"]), helper.make_node("Add", ["m", "shift"], ["a"])]
    last = "a"
    if residual:
        nodes.append(helper.make_node("Add", ["a", "x"], ["r"]))
        last = "r"
    nodes += [helper.make_node("Relu", [last], ["act"]), *extra]
    inits = [_init("w", _f32(4, 4, 3, 3)), _init("bias", _f32(4)), _init("mean", _f32(4)), _init("scale", _f32(4)),
             _init("shift", _f32(1, 1, 1, 4))]
    return nodes, inits


def test_transposes_move_past_elementwise_ops_and_cancel():
    """After the push, the Conv meets its bias and batch norm (folded) and the Relu; the
    Transpose back to NCHW for the next Conv meets the one to NHWC and both go."""
    nodes, inits = _nhwc_block([helper.make_node("Transpose", ["act"], ["nchw"], perm=[0, 3, 1, 2]),
                                helper.make_node("Conv", ["nchw", "w"], ["y"])])
    model = make_model(nodes, [_vi("x", [1, 6, 6, 4])], [_vi("y", [1, 4, 4, 4])], inits)
    out = _apply(model, *optimizer.passes_for_level(1))
    assert _ops(out) == ["Transpose", "Conv", "Relu", "Conv"]
    _check(model, out, {"x": _f32(1, 6, 6, 4)})


def test_transposes_move_past_an_add_of_two_values_transposed_alike():
    """The residual Add of a ResNet block in NHWC: both operands the same Transpose of NCHW
    values: the Add moves before one Transpose."""
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Transpose", ["ra"], ["ta"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["rb"], ["tb"], perm=[0, 2, 3, 1]),
             helper.make_node("Add", ["ta", "tb"], ["s"]), helper.make_node("Sigmoid", ["s"], ["y"])]
    model = make_model(nodes, [_vi("a", [1, 3, 4, 5]), _vi("b", [1, 3, 4, 5])], [_vi("y", [1, 4, 5, 3])])
    out = _apply(onnx.shape_inference.infer_shapes(model), basic.TransposePushPass())  # (as at load)
    assert _ops(out) == ["Relu", "Relu", "Add", "Sigmoid", "Transpose"]
    _check(model, out, {"a": _f32(1, 3, 4, 5), "b": _f32(1, 3, 4, 5)})


def test_transposes_stay_before_an_op_of_another_kind_or_a_value_read_elsewhere():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("Add", ["t", "z"], ["s"]),
             helper.make_node("Transpose", ["x"], ["t2"], perm=[1, 0]), helper.make_node("Relu", ["t2"], ["r"]),
             helper.make_node("Neg", ["t2"], ["n"])]
    model = make_model(nodes, [_vi("x", [2, 3]), _vi("z", [3, 2])], [_vi("s", [3, 2]), _vi("r", [3, 2]), _vi("n", [3, 2])])
    out = _apply(onnx.shape_inference.infer_shapes(model), basic.TransposePushPass())  # z is no constant; t2 has two readers
    assert _ops(out) == _ops(model)


def test_conv_add_fold_leaves_full_tensor_add():
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "k"], ["y"])],
        [_vi("x", [1, 3, 5, 5])], [_vi("y", [1, 4, 3, 3])],
        [_init("w", _f32(4, 3, 3, 3)), _init("k", _f32(4, 3, 3))],
    )
    assert _ops(_apply(model, basic.ConvAddFoldPass())) == ["Conv", "Add"]


def test_matmul_add_to_gemm():
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        [_vi("x", [2, 3])], [_vi("y", [2, 5])],
        [_init("w", _f32(3, 5)), _init("b", _f32(5))],
    )
    out = _apply(model, basic.ShapeInferenceQuietPass(), basic.MatMulAddToGemmPass())
    assert _ops(out) == ["Gemm"]
    _check(model, out, {"x": _f32(2, 3)})


def test_matmul_add_rank3_stays():
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        [_vi("x", [2, 4, 3])], [_vi("y", [2, 4, 5])],
        [_init("w", _f32(3, 5)), _init("b", _f32(5))],
    )
    out = _apply(model, basic.ShapeInferenceQuietPass(), basic.MatMulAddToGemmPass())
    assert _ops(out) == ["MatMul", "Add"]


@pytest.mark.parametrize("opset,last", [(12, "Div"), (13, "Mul"), (10, "Div"), (14, "Div")])
def test_hard_swish_fusion_from_clip(opset, last):
    clip_inputs = ["a"] if opset < 11 else ["a", "lo", "hi"]
    clip_attrs = {"min": 0.0, "max": 6.0} if opset < 11 else {}
    model = make_model(
        [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", clip_inputs, ["c"], **clip_attrs),
         helper.make_node("Mul", ["c", "x"], ["m"]),
         helper.make_node(last, ["m", "six" if last == "Div" else "sixth"], ["y"])],
        [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])],
        [_init("three", np.array(3, np.float32)), _init("lo", np.array(0, np.float32)), _init("hi", np.array(6, np.float32)),
         _init("six", np.array(6, np.float32)), _init("sixth", np.array(1 / 6, np.float32))],
        opset=opset,
    )
    out = _apply(model, fusion.HardSwishFusionPass(_everything))
    assert _ops(out) == ["HardSwish"] and list(out.graph.node[0].input) == ["x"]
    assert out.graph.node[0].domain == ("" if opset >= 14 else ort_core.CORE_DOMAIN)
    if opset >= 14:  # onnxruntime runs the standard op (the CPU provider's tests run the other)
        _check(model, out, {"x": _f32(2, 3, 4, scale=4)})


def test_hard_swish_with_other_bounds_stays():
    model = make_model(
        [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
         helper.make_node("Mul", ["c", "x"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])],
        [_vi("x", [2, 3])], [_vi("y", [2, 3])],
        [_init("three", np.array(3, np.float32)), _init("lo", np.array(0, np.float32)), _init("hi", np.array(5, np.float32)),
         _init("six", np.array(6, np.float32))],
    )
    assert _ops(_apply(model, fusion.HardSwishFusionPass(_everything))) == ["Add", "Clip", "Mul", "Div"]


# --------------------------------------------------------------------------------- fusions


@pytest.mark.parametrize("activation,attrs,extra", [
    ("Relu", {}, []), ("Sigmoid", {}, []), ("Tanh", {}, []), ("LeakyRelu", {"alpha": 0.2}, []),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []), ("Clip", {}, ["lo", "hi"]),
])
def test_conv_activation_fusion(activation, attrs, extra):
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node(activation, ["c", *extra], ["y"], **attrs)],
        [_vi("x", [1, 3, 6, 6])], [_vi("y", [1, 4, 6, 6])],
        [_init("w", _f32(4, 3, 3, 3)), _init("b", _f32(4)), _init("lo", np.array(-0.5, np.float32)),
         _init("hi", np.array(0.7, np.float32))],
    )
    out = _apply(model, fusion.ConvActivationFusionPass(_everything))
    assert _ops(out) == ["FusedConv"]
    assert out.graph.node[0].domain == "com.microsoft"
    _check(model, out, {"x": _f32(1, 3, 6, 6)})


def test_fusion_not_applied_when_unsupported():
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        [_vi("x", [1, 3, 6, 6])], [_vi("y", [1, 4, 4, 4])], [_init("w", _f32(4, 3, 3, 3))],
    )
    assert _ops(_apply(model, fusion.ConvActivationFusionPass(lambda node: False))) == ["Conv", "Relu"]


def test_declined_fused_candidate_is_not_left_reading_the_graph():
    # a candidate the gate declines must not stay a reader of the Conv's inputs: later matches
    # ask whether a value has one use
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        [_vi("x", [1, 3, 6, 6])], [_vi("y", [1, 4, 4, 4])], [_init("w", _f32(4, 3, 3, 3))],
    )
    m = ir.serde.deserialize_model(model)
    fusion.ConvActivationFusionPass(lambda node: False)(m)
    assert [user.op_type for user, _ in m.graph.inputs[0].uses()] == ["Conv"]


def test_conv_activation_not_fused_when_conv_output_is_read_elsewhere():
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Add", ["c", "r"], ["y"])],
        [_vi("x", [1, 3, 6, 6])], [_vi("y", [1, 4, 4, 4])], [_init("w", _f32(4, 3, 3, 3))],
    )
    assert _ops(_apply(model, fusion.ConvActivationFusionPass(_everything))) == ["Conv", "Relu", "Add"]


def test_gemm_activation_fusion():
    model = make_model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node("LeakyRelu", ["g"], ["y"], alpha=0.1)],
        [_vi("x", [2, 3])], [_vi("y", [2, 4])], [_init("w", _f32(4, 3)), _init("b", _f32(4))],
    )
    out = _apply(model, fusion.GemmActivationFusionPass(_everything))
    assert _ops(out) == ["FusedGemm"]
    _check(model, out, {"x": _f32(2, 3)})


def _gelu_nodes(order: str):
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"])]
    if order == "x_first":
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    elif order == "half_inside":
        nodes += [helper.make_node("Mul", ["a", "half"], ["m"]), helper.make_node("Mul", ["x", "m"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "a"], ["y"])]
    return nodes


@pytest.mark.parametrize("order", ["x_first", "half_inside", "half_first"])
def test_gelu_fusion(order):
    model = make_model(
        _gelu_nodes(order), [_vi("x", [2, 16])], [_vi("y", [2, 16])],
        [_init("sqrt2", np.array(np.sqrt(2), np.float32)), _init("one", np.array(1, np.float32)),
         _init("half", np.array(0.5, np.float32))],
    )
    out = _apply(model, fusion.GeluFusionPass(_everything))
    assert _ops(out) == ["Gelu"]
    _check(model, out, {"x": _f32(2, 16, scale=3)})


@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_fast_gelu_fusion(cube):
    from ort_core.testing.kit.probes import tanh_gelu

    model = tanh_gelu(cube)
    out = _apply(model, fusion.FastGeluFusionPass(_everything))
    assert _ops(out) == ["FastGelu"]
    _check(model, out, {"x": _f32(2, 4, 16, scale=3)})


@pytest.mark.parametrize("change", ["other coefficient", "tanh read elsewhere", "square of another value"])
def test_fast_gelu_fusion_needs_its_pattern(change):
    from ort_core.testing.kit.probes import tanh_gelu

    model = tanh_gelu("mul")
    if change == "other coefficient":
        k = next(t for t in model.graph.initializer if t.name == "k")
        k.CopyFrom(onnx.numpy_helper.from_array(np.array(0.05, np.float32), "k"))
    if change == "tanh read elsewhere":
        model.graph.output.append(_vi("t", [2, 4, 16]))
    if change == "square of another value":
        model.graph.input.append(_vi("z", [2, 4, 16]))
        next(n for n in model.graph.node if n.output[0] == "xx").input[:] = ["z", "z"]
    assert "FastGelu" not in _ops(_apply(model, fusion.FastGeluFusionPass(_everything)))


def _swish_model(form: str) -> onnx.ModelProto:
    """x * Sigmoid(x) after an Add (so that x is no graph input), or x * Sigmoid(alpha * x)
    with the constant on either side; the final product either way round."""
    nodes = [helper.make_node("Add", ["x0", "b"], ["x"])]
    inits = [_init("b", np.array(0.25, np.float32))]
    if form.startswith("alpha"):
        pair = ["x", "alpha"] if form == "alpha_after" else ["alpha", "x"]
        nodes += [helper.make_node("Mul", pair, ["ax"]), helper.make_node("Sigmoid", ["ax"], ["s"])]
        inits.append(_init("alpha", np.array(1.702, np.float32)))
    else:
        nodes.append(helper.make_node("Sigmoid", ["x"], ["s"]))
    nodes.append(helper.make_node("Mul", ["s", "x"] if form == "swish_sigmoid_first" else ["x", "s"], ["y"]))
    return make_model(nodes, [_vi("x0", [2, 3, 8])], [_vi("y", [2, 3, 8])], inits)


@pytest.mark.parametrize("form, alpha", [("swish", 1.0), ("swish_sigmoid_first", 1.0), ("alpha_after", 1.702),
                                         ("alpha_before", 1.702)])
def test_quick_gelu_fusion(form, alpha):
    """onnxruntime's QuickGeluFusion: swish (SiLU) with alpha 1, CLIP's x * sigmoid(1.702 x)."""
    model = _swish_model(form)
    out = _apply(model, fusion.QuickGeluFusionPass(_everything))
    assert _ops(out) == ["Add", "QuickGelu"]
    fused = out.graph.node[1]
    assert fused.domain == fusion.MS_DOMAIN and list(fused.input) == ["x"]
    assert helper.get_attribute_value(fused.attribute[0]) == pytest.approx(alpha)
    _check(model, out, {"x0": _f32(2, 3, 8, scale=4)})


@pytest.mark.parametrize("change", ["sigmoid read elsewhere", "product of another value", "vector factor",
                                    "factor of higher rank", "scaled value read elsewhere"])
def test_quick_gelu_fusion_needs_its_pattern(change):
    """No fusion where a value the fused node would drop is read elsewhere (the Sigmoid's, the
    scaled x), where the product is of something else, or where the factor is not one scalar
    that keeps x's shape."""
    model = _swish_model("alpha_after")
    if change == "sigmoid read elsewhere":
        model.graph.output.append(_vi("s", [2, 3, 8]))
    if change == "product of another value":
        model.graph.input.append(_vi("z", [2, 3, 8]))
        model.graph.node[-1].input[:] = ["z", "s"]
    if change in ("vector factor", "factor of higher rank"):
        shape = (8,) if change == "vector factor" else (1, 1, 1, 1)
        values = np.full(shape, 1.702, np.float32)
        values[0] = 1.5 if change == "vector factor" else values[0]
        alpha = next(t for t in model.graph.initializer if t.name == "alpha")
        alpha.CopyFrom(onnx.numpy_helper.from_array(values, "alpha"))
        model.graph.output[0].type.tensor_type.shape.ClearField("dim")
    if change == "scaled value read elsewhere":
        model.graph.output.append(_vi("ax", [2, 3, 8]))
    assert "QuickGelu" not in _ops(_apply(model, fusion.QuickGeluFusionPass(_everything)))


def test_gelu_with_wrong_constant_is_not_fused():
    model = make_model(
        _gelu_nodes("x_first"), [_vi("x", [2, 16])], [_vi("y", [2, 16])],
        [_init("sqrt2", np.array(1.5, np.float32)), _init("one", np.array(1, np.float32)),
         _init("half", np.array(0.5, np.float32))],
    )
    assert "Gelu" not in _ops(_apply(model, fusion.GeluFusionPass(_everything)))


def test_matmul_scale_fusion_with_transpose():
    model = make_model(
        [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "c"], ["y"])],
        [_vi("q", [2, 3, 5, 8]), _vi("k", [2, 3, 7, 8])], [_vi("y", [2, 3, 5, 7])],
        [_init("c", np.array(np.sqrt(8), np.float32))],
    )
    out = _apply(model, fusion.MatMulScaleFusionPass(_everything))
    assert _ops(out) == ["FusedMatMul"]
    _check(model, out, {"q": _f32(2, 3, 5, 8), "k": _f32(2, 3, 7, 8)})


@pytest.mark.parametrize("form", ["bias", "no bias", "scales swapped", "one weight scale"])
def test_matmul_integer_to_float_fusion(form):
    """quantize_dynamic's matmul (DynamicQuantizeLinear codes x int8 weights, Cast, Mul by the
    product of the scales, Add of the bias) -> MatMulIntegerToFloat, the scalar scale as
    a_scale; onnxruntime runs both to the same values."""
    from ort_core.testing.kit.probes import dynamic_matmul

    model = dynamic_matmul(np.random.default_rng(3), bias=form != "no bias")
    scales = next(n for n in model.graph.node if n.output[0] == "scales")
    if form == "scales swapped":
        scales.input[:] = ["w_scale", "x_scale"]
    if form == "one weight scale":
        w_scale = next(t for t in model.graph.initializer if t.name == "w_scale")
        w_scale.CopyFrom(onnx.numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"))
    model = onnx.shape_inference.infer_shapes(model)
    out = _apply(model, fusion.MatMulIntegerToFloatFusionPass(_everything))
    assert _ops(out) == ["DynamicQuantizeLinear", "MatMulIntegerToFloat"]
    fused = out.graph.node[1]
    assert list(fused.input[2:4]) == ["x_scale", "w_scale"]
    assert (len(fused.input) == 7) == (form != "no bias")
    _check(model, out, {"x": _f32(2, 4, 16, scale=3)})


@pytest.mark.parametrize("change", ["cast to double", "product read elsewhere", "no scalar scale"])
def test_matmul_integer_to_float_fusion_needs_its_pattern(change):
    from ort_core.testing.kit.probes import dynamic_matmul

    model = dynamic_matmul(np.random.default_rng(3), bias=False)
    nodes = {n.output[0]: n for n in model.graph.node}
    if change == "cast to double":
        nodes["accf"].attribute[0].i = TensorProto.DOUBLE
        nodes["y"].input[:] = ["accf", "scales_d"]
        model.graph.node.append(helper.make_node("Cast", ["scales"], ["scales_d"], to=TensorProto.DOUBLE))
        model.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    if change == "product read elsewhere":
        model.graph.output.append(_vi("acc", [2, 4, 8]))
        model.graph.output[-1].type.tensor_type.elem_type = TensorProto.INT32
    if change == "no scalar scale":  # both scales per column
        nodes["scales"].input[:] = ["w_scale", "w_scale"]
    model = onnx.shape_inference.infer_shapes(model)
    assert "MatMulIntegerToFloat" not in _ops(_apply(model, fusion.MatMulIntegerToFloatFusionPass(_everything)))


@pytest.mark.parametrize("form", ["reciprocal", "divide"])
def test_rms_norm_fusion(form):
    """T5's and LLaMA's RMSNorm -> onnxruntime's SimplifiedLayerNormalization over the last axis
    (onnxruntime runs both to the same values)."""
    from ort_core.optimizer.norm_fusion import SimplifiedLayerNormFusionPass
    from ort_core.testing.kit.probes import rms_norm

    model = onnx.shape_inference.infer_shapes(rms_norm(np.random.default_rng(4), form))
    out = _apply(model, SimplifiedLayerNormFusionPass(_everything))
    assert _ops(out) == ["SimplifiedLayerNormalization"]
    fused = out.graph.node[0]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in fused.attribute} == pytest.approx(
        {"axis": -1, "epsilon": 1e-6, "stash_type": 1})
    _check(model, out, {"x": _f32(2, 4, 16, scale=3)})


@pytest.mark.parametrize("change", ["mean read elsewhere", "gamma of another length", "not the last axis"])
def test_rms_norm_fusion_needs_its_pattern(change):
    from ort_core.optimizer.norm_fusion import SimplifiedLayerNormFusionPass
    from ort_core.testing.kit.probes import rms_norm

    model = rms_norm(np.random.default_rng(4))
    if change == "mean read elsewhere":
        model.graph.output.append(_vi("ms", [2, 4, 1]))
    if change == "gamma of another length":
        gamma = next(t for t in model.graph.initializer if t.name == "gamma")
        gamma.CopyFrom(onnx.numpy_helper.from_array(np.ones(1, np.float32), "gamma"))
    if change == "not the last axis":
        mean = next(n for n in model.graph.node if n.op_type == "ReduceMean")
        mean.attribute[0].ints[:] = [1]
    model = onnx.shape_inference.infer_shapes(model)
    assert "SimplifiedLayerNormalization" not in _ops(_apply(model, SimplifiedLayerNormFusionPass(_everything)))


def _hard_swish_model(opset: int, alpha: float = 1 / 6, times: str = "x"):
    return make_model(
        [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=alpha, beta=0.5), helper.make_node("Mul", [times, "h"], ["y"])],
        [_vi("x", [2, 3, 4]), _vi("z", [2, 3, 4])], [_vi("y", [2, 3, 4])], opset=opset,
    )


@pytest.mark.parametrize("opset,domain", [(14, ""), (17, ""), (12, ort_core.CORE_DOMAIN)])
def test_hard_swish_fusion(opset, domain):
    model = _hard_swish_model(opset)
    out = _apply(model, fusion.HardSwishFusionPass(_everything))
    assert _ops(out) == ["HardSwish"]
    assert out.graph.node[0].domain == domain and list(out.graph.node[0].input) == ["x"]
    if domain:  # below opset 14 the op is ort-core's own: its domain is imported
        assert {o.domain: o.version for o in out.opset_import}[domain] == 1
    else:
        _check(model, out, {"x": _f32(2, 3, 4, scale=4), "z": _f32(2, 3, 4)})


@pytest.mark.parametrize("alpha,times", [(0.2, "x"), (1 / 6, "z")])
def test_hard_swish_fusion_needs_x_times_its_hard_sigmoid(alpha, times):
    # another slope is no hard-swish; a product with another tensor is no hard-swish either
    out = _apply(_hard_swish_model(17, alpha, times), fusion.HardSwishFusionPass(_everything))
    assert _ops(out) == ["HardSigmoid", "Mul"]


def test_hard_swish_fusion_not_applied_when_unsupported():
    out = _apply(_hard_swish_model(12), fusion.HardSwishFusionPass(lambda node: False))
    assert _ops(out) == ["HardSigmoid", "Mul"]
    assert ort_core.CORE_DOMAIN not in {o.domain for o in out.opset_import}


# --------------------------------------------------------------------------------- levels and gate


def test_levels():
    assert optimizer.passes_for_level(0) == []
    basic_names = [type(p).__name__ for p in optimizer.passes_for_level(1, _everything)]
    assert "ConvFoldsPass" in basic_names and "GeluFusionPass" not in basic_names
    extended = [type(p).__name__ for p in optimizer.passes_for_level(2, _everything)]
    assert "GeluFusionPass" in extended
    assert [type(p).__name__ for p in optimizer.passes_for_level(99, _everything)] == [*extended, "HardSwishFusionPass"]
    assert "GeluFusionPass" not in [type(p).__name__ for p in optimizer.passes_for_level(99, None)]


def _matmul_scale_model():
    return make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Mul", ["m", "c"], ["y"])],
        [_vi("x", [2, 3])], [_vi("y", [2, 4])], [_init("w", _f32(3, 4)), _init("c", np.array(0.5, np.float32))],
    )


def test_gate_refuses_a_fused_op_the_provider_declines(host):
    """The host test provider claims only standard ops: FusedMatMul is refused, and the
    session keeps MatMul + Mul even at ORT_ENABLE_ALL."""
    sess = ort_core.InferenceSession(_matmul_scale_model().SerializeToString(), providers=["CPUExecutionProvider"])
    assert [p.op_type for p in sess.get_placement().nodes] == ["MatMul", "Mul"]


class _FusingHost(HostProvider):
    """Claims com.microsoft FusedMatMul as well (a numpy kernel), like a provider with fused
    kernels, and declares it."""

    fused_ops = (ort_core.FusedOp("FusedMatMul"),)

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        cap = Capability()
        for i in sorted(candidates):
            node = graph.nodes[i]
            if (node.domain, node.op_type) in (("", "MatMul"), ("", "Mul"), ("com.microsoft", "FusedMatMul")):
                self.seen_output_types.extend(graph.value(o).type for o in node.outputs)
                cap.claims.append(Claim((i,)))
            else:
                cap.declined[i] = "not here"
        return cap

    @hookimpl
    def ort_create_kernel(self, ep, request):
        node = request.node
        if node.op_type == "FusedMatMul":
            alpha = node.attr("alpha", 1.0)
            return Kernel(run=lambda a, b: np.matmul(a, b) * np.float32(alpha), single_output=True)
        fn = {"MatMul": np.matmul, "Mul": np.multiply}[node.op_type]
        return Kernel(run=fn, single_output=True)


def test_gate_applies_a_fused_op_the_provider_claims(registry, tmp_path):
    provider = _FusingHost()
    provider.seen_output_types = []
    assert ort_core.register(provider, "fusing")
    model = _matmul_scale_model()
    so = ort_core.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert [p.op_type for p in sess.get_placement().nodes] == ["FusedMatMul"]
    assert set(provider.seen_output_types) == {"tensor(float)"}  # the probe's outputs are typed
    x = _f32(2, 3)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _ort_run(model, {"x": x})[0], rtol=1e-5)
    written = onnx.load(so.optimized_model_filepath)
    assert [n.op_type for n in written.graph.node] == ["FusedMatMul"]
    # the written model is loadable by onnxruntime (contrib op, same attributes)
    np.testing.assert_allclose(_ort_run(written, {"x": x})[0], _ort_run(model, {"x": x})[0], rtol=1e-5)

    so.graph_optimization_level = ort_core.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort_core.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert [p.op_type for p in sess.get_placement().nodes] == ["MatMul", "Mul"]


class _ClaimingHost(_FusingHost):
    """Claims FusedMatMul in the probe but declares no fused op: a claim says a provider takes
    a node, not that it computes it (OpenVINO converts com.microsoft FusedGemm and drops its Tanh)."""

    fused_ops = ()


def test_gate_refuses_a_fused_op_claimed_but_not_declared(registry):
    provider = _ClaimingHost()
    provider.seen_output_types = []
    assert ort_core.register(provider, "claiming")
    sess = ort_core.InferenceSession(_matmul_scale_model().SerializeToString(), providers=["CPUExecutionProvider"])
    assert [p.op_type for p in sess.get_placement().nodes] == ["MatMul", "Mul"]


def _gemm_activation_model(activation: str):
    return make_model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node(activation, ["g"], ["y"])],
        [_vi("x", [2, 3])], [_vi("y", [2, 4])], [_init("w", _f32(4, 3)), _init("b", _f32(4))],
    )


class _GemmHost(HostProvider):
    """Declares FusedGemm with Relu only, and claims every FusedGemm (numpy kernels)."""

    fused_ops = (ort_core.FusedOp("FusedGemm", attributes={"activation": ("Relu",)}),)

    @hookimpl
    def ort_get_capability(self, ep, graph, candidates):
        return Capability(claims=[Claim((i,)) for i in sorted(candidates)])

    @hookimpl
    def ort_create_kernel(self, ep, request):
        node = request.node
        gemm = lambda x, w, b: x @ w.T + b  # noqa: E731
        if node.op_type == "FusedGemm":
            assert node.attr("activation") == "Relu"
            return Kernel(run=lambda x, w, b: np.maximum(gemm(x, w, b), 0), single_output=True)
        return Kernel(run={"Gemm": gemm, "Relu": lambda x: np.maximum(x, 0), "Tanh": np.tanh}[node.op_type],
                      single_output=True)


@pytest.mark.parametrize("activation,fused", [("Relu", True), ("Tanh", False)])
def test_gate_forms_only_declared_attribute_values(registry, activation, fused):
    """The declaration names attribute values: FusedGemm(activation=Tanh) is not formed for a
    provider that declares FusedGemm with Relu only, though it claims it."""
    assert ort_core.register(_GemmHost(), "gemm")
    model = _gemm_activation_model(activation)
    sess = ort_core.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ops = [p.op_type for p in sess.get_placement().nodes]
    assert ops == (["FusedGemm"] if fused else ["Gemm", activation])
    x = _f32(2, 3)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_fused_op_admits():
    op = ort_core.FusedOp("FusedGemm", attributes={"activation": ("Relu", "LeakyRelu")})
    assert op.admits("com.microsoft", "FusedGemm", {"activation": "Relu", "transB": 1})
    assert not op.admits("com.microsoft", "FusedGemm", {"activation": "Tanh"})
    assert not op.admits("com.microsoft", "FusedGemm", {})  # a restricted attribute must be there
    assert not op.admits("", "FusedGemm", {"activation": "Relu"})
    assert str(op) == "com.microsoft::FusedGemm (activation in ['Relu', 'LeakyRelu'])"
    assert hash(op) == hash(ort_core.FusedOp("FusedGemm", attributes={"activation": ("Relu", "LeakyRelu")}))


def test_gemm_is_not_fused_with_clip():
    """onnxruntime's FusedGemm has no Clip activation (it refuses to load the model)."""
    model = make_model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node("Clip", ["g", "lo", "hi"], ["y"])],
        [_vi("x", [2, 3])], [_vi("y", [2, 4])],
        [_init("w", _f32(4, 3)), _init("b", _f32(4)), _init("lo", np.array(-0.5, np.float32)), _init("hi", np.array(0.5, np.float32))],
    )
    assert _ops(_apply(model, fusion.GemmActivationFusionPass(_everything))) == ["Gemm", "Clip"]


def _loop_carrying_weights(overridable: bool = False):
    # paddle2onnx's decoders carry their weights through the Loop unchanged (body output =
    # body input); the carried accumulator `acc` changes every iteration
    w = _f32(4, 4, scale=0.5)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["acc_in", "w_in"], ["prod"]), helper.make_node("Tanh", ["prod"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [1, 4]),
                 _vi("w_in", [4, 4])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [1, 4]), _vi("w_in", [4, 4])])
    loop = helper.make_node("Loop", ["n", "", "x", "w"], ["acc", "w_final"], body=body)
    graph_inputs = [_vi("x", [1, 4])] + ([_vi("w", [4, 4])] if overridable else [])
    return make_model([loop], graph_inputs, [_vi("acc", [1, 4]), _vi("w_final", [4, 4])],
                      [_init("n", np.array(3, np.int64)), _init("w", w)])


def test_loop_carried_constant_is_read_as_the_constant_in_the_body():
    model = _loop_carrying_weights()
    optimized = _apply(model, basic.LoopInvariantCarriedPass())
    body = optimized.graph.node[0].attribute[0].g
    matmul = next(n for n in body.node if n.op_type == "MatMul")
    assert list(matmul.input) == ["acc_in", "w"]  # the outer initializer itself
    assert [o.name for o in body.output][2:] == ["w_in"]  # the carried slot stays
    _check(model, optimized, {"x": _f32(1, 4)})


def _decoder_loops(trips: int, loops: int = 1):
    """``loops`` Loops of ``trips`` iterations over an encoder output ``enc`` (3, 4), each body
    naming its values alike (sibling scopes may): an invariant chain (enc @ w, transposed,
    times a Constant), a step that reads the carried state, one that reads the iteration
    count, a random draw, and an invariant node whose output is a scan output."""
    nodes, outputs = [], []
    for k in range(loops):
        body = helper.make_graph(
            [helper.make_node("MatMul", ["enc", "w"], ["proj"]),
             helper.make_node("Transpose", ["proj"], ["proj_t"]),
             helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])),
             helper.make_node("Mul", ["proj_t", "two"], ["keys"]),
             helper.make_node("MatMul", ["acc_in", "keys"], ["scores"]),
             helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["scores", "proj"], ["mixed"]),
             helper.make_node("Add", ["mixed", "i_f"], ["shifted"]),
             helper.make_node("Tanh", ["shifted"], ["acc_out"]),
             helper.make_node("RandomUniformLike", ["proj"], ["noise"]),
             helper.make_node("Mul", ["noise", "two"], ["noise2"]),
             helper.make_node("Relu", ["proj"], ["relu_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])],
            "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [1, 4])],
            [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [1, 4]), _vi("relu_out", [3, 4]),
             _vi("noise2", [3, 4])])
        nodes.append(helper.make_node("Loop", ["n", "", "x"], [f"acc{k}", f"relus{k}", f"noise{k}"], body=body))
        outputs += [_vi(f"acc{k}", [1, 4]), _vi(f"relus{k}", ["trips", 3, 4]), _vi(f"noise{k}", ["trips", 3, 4])]
    return make_model(nodes, [_vi("x", [1, 4]), _vi("enc", [3, 4])], outputs,
                      [_init("n", np.array(trips, np.int64)), _init("w", _f32(4, 4, scale=0.5))])


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_loop_invariant_nodes_run_once_before_the_loop(trips):
    model = _decoder_loops(trips, loops=2)
    optimized = _apply(model, basic.LiftConstantsPass(), basic.LoopInvariantHoistPass())
    outer = [n.op_type for n in optimized.graph.node]
    assert outer == ["MatMul", "Transpose", "Mul", "Loop"] * 2, outer
    for loop in (n for n in optimized.graph.node if n.op_type == "Loop"):
        body = [n.op_type for n in loop.attribute[0].g.node]
        # left: the steps reading the state or the count, the random draw and what reads it,
        # the invariant Relu whose output is a scan output, the condition
        assert sorted(body) == sorted(["MatMul", "Cast", "MatMul", "Add", "Tanh", "RandomUniformLike", "Mul", "Relu",
                                       "Identity"]), body
    # the hoisted values are named once in the outer scope, and no body names one of them
    # again (the two bodies named theirs alike, which sibling scopes may)
    outer_names = [o for n in optimized.graph.node for o in n.output] + [i.name for i in optimized.graph.initializer]
    assert len(outer_names) == len(set(outer_names)), sorted(outer_names)
    for loop in (n for n in optimized.graph.node if n.op_type == "Loop"):
        body = loop.attribute[0].g
        inner = {o for b in body.node for o in b.output} | {i.name for i in body.initializer}
        assert not inner & set(outer_names), inner & set(outer_names)
    onnx.checker.check_model(optimized)
    feeds = {"x": _f32(1, 4), "enc": _f32(3, 4)}
    got, want = _ort_run(optimized, feeds), _ort_run(model, feeds)
    for k in range(2):  # acc and relus (the noise is a new draw each run)
        for j in (3 * k, 3 * k + 1):
            np.testing.assert_allclose(got[j], want[j], rtol=1e-5, atol=1e-6)


def test_loop_carried_overridable_initializer_is_read_as_the_fed_value():
    # an initializer that is also a graph input may be fed at run time: not a constant, but
    # whatever is fed is the same in every iteration
    model = _loop_carrying_weights(overridable=True)
    optimized = _apply(model, basic.LoopInvariantCarriedPass())
    matmul = next(n for n in optimized.graph.node[0].attribute[0].g.node if n.op_type == "MatMul")
    assert list(matmul.input) == ["acc_in", "w"]
    _check(model, optimized, {"x": _f32(1, 4), "w": _f32(4, 4)})


def _loop_carrying_through(steps: list[tuple], carried_shape=(3, 4)):
    """A Loop carrying ``enc`` (a graph input) through ``steps`` of (op, second input or None,
    attributes) from body input to body output, and accumulating acc @ enc^T @ enc."""
    nodes, value = [], "enc_in"
    inits = []
    for k, (op, second, attrs) in enumerate(steps):
        inputs = [value]
        if second is not None:
            inits.append(_init(f"c{k}", np.asarray(second)))
            inputs.append(f"c{k}")
        value = f"step{k}"
        nodes.append(helper.make_node(op, inputs, [value], **attrs))
    body = helper.make_graph(
        nodes + [helper.make_node("Transpose", ["enc_in"], ["enc_t"]),
                 helper.make_node("MatMul", ["acc_in", "enc_t"], ["scores"]),
                 helper.make_node("MatMul", ["scores", "enc_in"], ["prod"]), helper.make_node("Tanh", ["prod"], ["acc_out"]),
                 helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [1, 4]),
                 _vi("enc_in", list(carried_shape))],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [1, 4]), _vi(value, list(carried_shape))], inits)
    loop = helper.make_node("Loop", ["n", "", "x", "enc"], ["acc", "enc_final"], body=body)
    return make_model([loop], [_vi("x", [1, 4]), _vi("enc", list(carried_shape))],
                      [_vi("acc", [1, 4]), _vi("enc_final", list(carried_shape))], [_init("n", np.array(3, np.int64))])


AXES_0 = np.array([0], np.int64)


@pytest.mark.parametrize("steps,passed_on", [
    ([("Unsqueeze", AXES_0, {}), ("Add", np.zeros(1, np.float32), {}), ("Squeeze", AXES_0, {})], True),
    ([("Identity", None, {}), ("Mul", np.float32(1.0), {}), ("Div", np.ones((1, 1), np.float32), {})], True),
    ([("Sub", np.float32(0.0), {}), ("Unsqueeze", np.array([-1], np.int64), {}), ("Squeeze", np.array([2], np.int64), {})], True),
    ([("Add", np.float32(0.5), {})], False),  # changes the value
    ([("Mul", np.float32(2.0), {})], False),  # not one
])
def test_a_carried_value_passed_on_through_no_op_steps_is_read_as_its_initial_value(steps, passed_on):
    model = _loop_carrying_through(steps)
    optimized = _apply(model, basic.LoopInvariantCarriedPass())
    body = optimized.graph.node[0].attribute[0].g
    transpose = next(n for n in body.node if n.op_type == "Transpose")
    assert list(transpose.input) == (["enc"] if passed_on else ["enc_in"])
    _check(model, optimized, {"x": _f32(1, 4), "enc": _f32(3, 4)})


@pytest.mark.parametrize("scale_shape", [(), (1,), (1, 1, 1, 1)])
def test_a_scale_of_higher_rank_keeps_the_matmul_unfused(scale_shape):
    """MatMul then Mul by a one-element constant: FusedMatMul's alpha where the constant has
    rank 0 or 1; a (1, 1, 1, 1) one broadcasts the (2, 3) product to (1, 1, 2, 3), which the
    fused node would not: it stays (the fused graph gave (2, 3))."""
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Mul", ["m", "s"], ["y"])],
        [_vi("x", [2, 4])], [_vi("y", None)],
        [_init("w", _f32(4, 3)), _init("s", np.full(scale_shape, 0.5, np.float32))],
    )
    out = _apply(model, basic.ShapeInferenceQuietPass(), fusion.MatMulScaleFusionPass(_everything))
    assert _ops(out) == (["MatMul", "Mul"] if len(scale_shape) > 1 else ["FusedMatMul"])
    x = _f32(2, 4)
    want = _ort_run(model, {"x": x})[0]
    assert want.shape == ((1, 1, 2, 3) if len(scale_shape) > 1 else (2, 3))
    if len(scale_shape) > 1:
        np.testing.assert_allclose(_ort_run(out, {"x": x})[0], want, rtol=1e-5)
