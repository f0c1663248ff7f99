"""Small models the kit uses to probe a provider (besides the ONNX node cases)."""

from __future__ import annotations

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
        sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds), f"onnxruntime {onnxruntime.__version__}"
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds)), "onnx.reference.ReferenceEvaluator"
