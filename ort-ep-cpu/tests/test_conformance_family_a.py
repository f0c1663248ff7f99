"""The ONNX backend node cases of the elementwise, math, reduction, cast and quantization ops
(family A), run through ort-core on the CPU provider with onnx's tolerances."""

from __future__ import annotations

import pytest

conformance = pytest.importorskip("ort_core.testing.conformance")

FAMILY_A = {
    # arithmetic, comparison, logic
    "Abs", "Add", "And", "Ceil", "Div", "Equal", "Exp", "Floor", "Greater", "GreaterOrEqual", "IsInf",
    "IsNaN", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Pow",
    "Reciprocal", "Round", "Sign", "Sqrt", "Sub", "Sum", "Where", "Xor", "Clip",
    # trigonometric and hyperbolic
    "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Sin", "Sinh", "Tan", "Tanh",
    # activations
    "Celu", "Elu", "Erf", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu", "Mish", "PRelu", "Relu",
    "Selu", "Shrink", "Sigmoid", "Softplus", "Softsign", "Swish", "ThresholdedRelu",
    # math
    "CumProd", "CumSum", "Det", "Einsum", "Hardmax", "LogSoftmax", "Softmax",
    # reductions
    "ArgMax", "ArgMin", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
    # casts and quantization
    "Cast", "CastLike", "ConvInteger", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
    "QLinearConv", "QLinearMatMul", "QuantizeLinear",
    # training (preview domain)
    "ai.onnx.preview.training::Adagrad", "ai.onnx.preview.training::Adam", "ai.onnx.preview.training::Momentum",
}


def _family_cases() -> list:
    # a case belongs to family A when its model is one node of a family-A op (the "_expanded"
    # variants are function bodies made of other ops and are scored by the whole suite)
    return [c for c in conformance.load_cases(("node",)) if len(c.op_types) == 1 and c.op_types[0] in FAMILY_A]


CASES = _family_cases()


def test_family_cases_were_found():
    # the onnx package generates several hundred; far fewer means the loader broke
    assert len(CASES) > 400, len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    result = conformance.run_case(case, ["CPUExecutionProvider"], timeout=120)
    assert result.status == "passed", result.message
    assert result.nodes == {"CPUExecutionProvider": len(case.model.graph.node)}
