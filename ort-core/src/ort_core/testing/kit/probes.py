"""Small models the kit uses to probe a provider (besides the ONNX node cases)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import models


def relu_model() -> onnx.ModelProto:
    """One Relu: the smallest model any provider list can run (used for option checks)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "kit_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def binary_model(op_type: str, elem_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``op_type(a, b)`` with symbolic dims, so incompatible shapes reach the kernel."""
    graph = helper.make_graph(
        [helper.make_node(op_type, ["a", "b"], ["c"], name=f"kit_{op_type.lower()}")],
        f"kit_{op_type.lower()}",
        [
            helper.make_tensor_value_info("a", elem_type, ["n"]),
            helper.make_tensor_value_info("b", elem_type, ["m"]),
        ],
        [helper.make_tensor_value_info("c", elem_type, ["k"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def chain_model() -> onnx.ModelProto:
    """x -> Add(w) -> Relu -> Mul(w) -> Sigmoid -> Sub(x) -> Neg: common elementwise ops only,
    for providers (and fallbacks) that run none of the bigger models."""
    w = numpy_helper.from_array(np.array([0.5, -1.5, 2.0, -0.25], np.float32), "w")
    ops = [("Add", ["x", "w"]), ("Relu", None), ("Mul", [None, "w"]), ("Sigmoid", None), ("Sub", [None, "x"]), ("Neg", None)]
    nodes, previous = [], "x"
    for k, (op, inputs) in enumerate(ops):
        names = [previous] if inputs is None else [previous if n is None else n for n in inputs]
        out = "y" if k == len(ops) - 1 else f"t{k}"
        nodes.append(helper.make_node(op, names, [out], name=f"{op.lower()}_{k}"))
        previous = out
    graph = helper.make_graph(
        nodes, "kit_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def generated_models() -> dict[str, onnx.ModelProto]:
    """The project's MLP / CNN / transformer, small enough for the reference evaluator, and
    the elementwise chain."""
    return {
        "mlp": models.mlp(in_features=32, hidden=48, layers=2, classes=10),
        "cnn": models.cnn(image=16, width=8, blocks=2, classes=10),
        "transformer": models.transformer(vocab=64, seq=8, dim=32, heads=2, layers=1),
        "chain": chain_model(),
    }


def reference_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], str]:
    """Expected outputs from onnxruntime when installed, else onnx's ReferenceEvaluator."""
    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
    if onnxruntime is not None:
        from .. import exact_reference  # exact where this CPU's onnxruntime saturates uint8 x int8

        sess = exact_reference.session(model)
        return sess.run(None, feeds), f"onnxruntime {onnxruntime.__version__}"
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds)), "onnx.reference.ReferenceEvaluator"


# ---------------------------------------------------------------------------- fusion cases
def _small(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "kit_fusion", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _f(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _c(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


_ACTIVATION_NODES = {  # activation -> (attributes, extra constant inputs)
    "Relu": ({}, []), "Tanh": ({}, []), "Sigmoid": ({}, []), "LeakyRelu": ({"alpha": 0.1}, []),
    "HardSigmoid": ({"alpha": 0.3, "beta": 0.4}, []), "Clip": ({}, ["lo", "hi"]),
}


@dataclass(frozen=True)
class FusionCase:
    """A fused op with given attribute values (``label``), and the smallest unfused ``model``
    the optimizer rewrites into it when every fused op but those in ``without`` is allowed."""

    label: str
    domain: str
    op_type: str
    attributes: dict
    model: onnx.ModelProto
    without: tuple[str, ...] = ()


def dynamic_matmul(rng: np.random.Generator, bias: bool = True) -> onnx.ModelProto:
    """A matmul as ``onnxruntime.quantization.quantize_dynamic`` writes it: the float input's
    DynamicQuantizeLinear codes times constant int8 weights (MatMulInteger), Cast to float, Mul
    by the product of the two scales (per-column weight scales), Add of the bias."""
    weights = numpy_helper.from_array(rng.integers(-127, 128, (16, 8)).astype(np.int8), "w")
    w_zero = numpy_helper.from_array(np.zeros(8, np.int8), "w_zero")
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zero"]),
             helper.make_node("MatMulInteger", ["xq", "w", "x_zero", "w_zero"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x_scale", "w_scale"], ["scales"]),
             helper.make_node("Mul", ["accf", "scales"], ["m" if bias else "y"])]
    inits = [weights, w_zero, _c("w_scale", rng.uniform(0.005, 0.02, 8))]
    if bias:
        nodes.append(helper.make_node("Add", ["m", "b"], ["y"]))
        inits.append(_c("b", rng.standard_normal(8) * 0.1))
    return _small(nodes, [_f("x", [2, 4, 16])], [_f("y", [2, 4, 8])], inits)


def rms_norm(rng: np.random.Generator, form: str = "reciprocal") -> onnx.ModelProto:
    """RMSNorm as T5's exporter writes it: gamma * (x * (1 / sqrt(mean(x^2) + eps))) over the
    last axis (``form`` "divide": x / sqrt(..))."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["x2"]), helper.make_node("ReduceMean", ["x2"], ["ms"], axes=[-1]),
             helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"])]
    if form == "divide":
        nodes.append(helper.make_node("Div", ["x", "rms"], ["n"]))
    else:
        nodes += [helper.make_node("Div", ["one", "rms"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["n"])]
    nodes.append(helper.make_node("Mul", ["gamma", "n"], ["y"]))
    return _small(nodes, [_f("x", [2, 4, 16])], [_f("y", [2, 4, 16])],
                  [_c("two", 2.0), _c("eps", 1e-6), _c("one", 1.0), _c("gamma", 1 + 0.1 * rng.standard_normal(16))])


def tanh_gelu(cube: str = "pow") -> onnx.ModelProto:
    """Gelu's tanh approximation as PyTorch exports gelu(approximate="tanh") and GPT-2's
    gelu_new: (x * 0.5) * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), x^3 as Pow(x, 3) or
    (``cube`` "mul") x * (x * x)."""
    if cube == "pow":
        cubing = [helper.make_node("Pow", ["x", "three"], ["x3"])]
    else:
        cubing = [helper.make_node("Mul", ["x", "x"], ["xx"]), helper.make_node("Mul", ["x", "xx"], ["x3"])]
    nodes = [helper.make_node("Mul", ["x", "half"], ["h"]), *cubing,
             helper.make_node("Mul", ["x3", "k"], ["kx3"]), helper.make_node("Add", ["x", "kx3"], ["inner"]),
             helper.make_node("Mul", ["inner", "c"], ["scaled"]), helper.make_node("Tanh", ["scaled"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"]), helper.make_node("Mul", ["h", "t1"], ["y"])]
    consts = [_c("half", 0.5), _c("k", 0.044715), _c("c", np.sqrt(2 / np.pi)), _c("one", 1.0)]
    return _small(nodes, [_f("x", [2, 4, 16])], [_f("y", [2, 4, 16])],
                  consts + ([_c("three", 3.0)] if cube == "pow" else []))


def fusion_cases() -> list[FusionCase]:
    """One case per fused op and attribute value of ``ort_core.optimizer.FUSED_OPS``. Inputs
    are float32 with fixed shapes (the transformer's: int64 ids and mask)."""
    from ...optimizer.fusion import ACTIVATIONS, CORE_DOMAIN, GEMM_ACTIVATIONS, MS_DOMAIN

    rng = np.random.default_rng(7)
    cases = []
    bounds = [_c("lo", -0.5), _c("hi", 0.7)]
    for act in ACTIVATIONS:
        attrs, extra = _ACTIVATION_NODES[act]
        conv = _small([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                       helper.make_node(act, ["c", *extra], ["y"], **attrs)],
                      [_f("x", [1, 3, 8, 8])], [_f("y", [1, 4, 8, 8])],
                      [_c("w", rng.standard_normal((4, 3, 3, 3)) * 0.4), _c("b", rng.standard_normal(4) * 0.1),
                       *(bounds if extra else [])])
        cases.append(FusionCase(f"FusedConv(activation={act})", MS_DOMAIN, "FusedConv", {"activation": act}, conv))
    for act in GEMM_ACTIVATIONS:
        attrs, extra = _ACTIVATION_NODES[act]
        gemm = _small([helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
                       helper.make_node(act, ["g", *extra], ["y"], **attrs)],
                      [_f("x", [4, 16])], [_f("y", [4, 8])],
                      [_c("w", rng.standard_normal((8, 16)) * 0.5), _c("b", rng.standard_normal(8) * 0.1)])
        cases.append(FusionCase(f"FusedGemm(activation={act})", MS_DOMAIN, "FusedGemm", {"activation": act}, gemm))
    cases.append(FusionCase("FusedMatMul", MS_DOMAIN, "FusedMatMul", {}, _small(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["m"]),
         helper.make_node("Mul", ["m", "s"], ["y"])],
        [_f("x", [2, 4, 16])], [_f("y", [2, 4, 8])], [_c("w", rng.standard_normal((8, 16))), _c("s", 0.25)])))
    cases.append(FusionCase("MatMulIntegerToFloat", MS_DOMAIN, "MatMulIntegerToFloat", {}, dynamic_matmul(rng)))
    gelu = [helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y"])]
    gelu_consts = [_c("sqrt2", np.sqrt(2.0)), _c("one", 1.0), _c("half", 0.5)]
    cases.append(FusionCase("Gelu", MS_DOMAIN, "Gelu", {}, _small(
        [helper.make_node("Identity", ["x"], ["h"]), *gelu], [_f("x", [2, 4, 16])], [_f("y", [2, 4, 16])], gelu_consts)))
    cases.append(FusionCase("FastGelu", MS_DOMAIN, "FastGelu", {}, tanh_gelu()))
    cases.append(FusionCase("QuickGelu", MS_DOMAIN, "QuickGelu", {}, _small(  # CLIP's x * sigmoid(1.702 x)
        [helper.make_node("Mul", ["x", "alpha"], ["ax"]), helper.make_node("Sigmoid", ["ax"], ["s"]),
         helper.make_node("Mul", ["x", "s"], ["y"])], [_f("x", [2, 4, 16])], [_f("y", [2, 4, 16])], [_c("alpha", 1.702)])))
    cases.append(FusionCase("BiasGelu", MS_DOMAIN, "BiasGelu", {}, _small(
        [helper.make_node("Add", ["x", "bias"], ["h"]), *gelu], [_f("x", [2, 4, 16])], [_f("y", [2, 4, 16])],
        [*gelu_consts, _c("bias", rng.standard_normal(16) * 0.1)])))
    ln_consts = [_c("gamma", 1 + 0.1 * rng.standard_normal(16)), _c("beta", 0.1 * rng.standard_normal(16))]
    cases.append(FusionCase("SkipLayerNormalization", MS_DOMAIN, "SkipLayerNormalization", {}, _small(
        [helper.make_node("Add", ["x", "skip"], ["s"]),
         helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)],
        [_f("x", [2, 4, 16]), _f("skip", [2, 4, 16])], [_f("y", [2, 4, 16])], ln_consts)))

    def decomposed_ln(opset):
        return _small(
            [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]), helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["d2"]), helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]), helper.make_node("Mul", ["n", "gamma"], ["g"]),
             helper.make_node("Add", ["g", "beta"], ["y"])],
            [_f("x", [2, 4, 16])], [_f("y", [2, 4, 16])], [_c("two", 2.0), _c("eps", 1e-5), *ln_consts], opset)

    cases.append(FusionCase("LayerNormalization", "", "LayerNormalization", {}, decomposed_ln(17)))
    cases.append(FusionCase("SimplifiedLayerNormalization", "", "SimplifiedLayerNormalization", {}, rms_norm(rng)))
    cases.append(FusionCase(f"{CORE_DOMAIN}::LayerNormalization", CORE_DOMAIN, "LayerNormalization", {}, decomposed_ln(13)))

    def hard_swish(opset):
        return _small([helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5),
                       helper.make_node("Mul", ["x", "h"], ["y"])], [_f("x", [2, 3, 4, 4])], [_f("y", [2, 3, 4, 4])], [], opset)

    cases.append(FusionCase("HardSwish", "", "HardSwish", {}, hard_swish(14)))
    cases.append(FusionCase(f"{CORE_DOMAIN}::HardSwish", CORE_DOMAIN, "HardSwish", {}, hard_swish(13)))
    attention = models.transformer(seq=8, dim=32, heads=2, layers=1)  # vocab as random_inputs' ids
    cases.append(FusionCase("Attention", MS_DOMAIN, "Attention", {}, attention))
    cases.append(FusionCase("MultiHeadAttention", MS_DOMAIN, "MultiHeadAttention", {},
                  attention, without=("Attention",)))
    return cases
