"""ONNX elementwise ops as numexpr expression templates, and fusing a tree of them into one.

A group is a tree of claimed nodes in which every inner value has exactly one reader (the next
node of the group) and is no graph output. Such a tree is one expression with no repeated
sub-expression, and its only output is the root's, so fusing it can never create a cycle.
"""

from __future__ import annotations

from typing import Any

import numexpr
import numpy as np

from ort_core import GraphView, Kernel, KernelRequest, NodeView

# op type -> (first opset with these semantics, template over the operands {0}, {1})
OPS: dict[str, tuple[int, str]] = {
    "Add": (7, "({0} + {1})"),
    "Sub": (7, "({0} - {1})"),
    "Mul": (7, "({0} * {1})"),
    "Div": (7, "({0} / {1})"),
    "Neg": (6, "(-{0})"),
    "Abs": (6, "abs({0})"),
    "Relu": (6, "where({0} < 0, 0, {0})"),  # keeps NaN, as max(x, 0) does in ONNX
    "Sigmoid": (6, "(1 / (1 + exp(-{0})))"),
    "Tanh": (6, "tanh({0})"),
    "Exp": (6, "exp({0})"),
    "Log": (6, "log({0})"),
    "Sqrt": (6, "sqrt({0})"),
    "Sin": (7, "sin({0})"),
    "Cos": (7, "cos({0})"),
}
DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def decline_reason(graph: GraphView, node: NodeView) -> str | None:
    """Why this provider does not take ``node``, or None when it does."""
    if node.domain:
        return f"{node.qualified_op}: only default-domain elementwise ops"
    entry = OPS.get(node.op_type)
    if entry is None:
        return f"{node.op_type} is not an elementwise op numexpr runs here"
    if node.opset < entry[0]:
        return f"{node.op_type} at opset {node.opset}: only opset {entry[0]} and later"
    dtypes = set()
    for name in (*node.inputs, *node.outputs):
        dtype = graph.value(name).dtype if name else None
        if dtype is None:
            return f"{node.op_type}: type of {name!r} unknown"
        dtypes.add(dtype)
    if not dtypes <= DTYPES:
        return f"{node.op_type}: {', '.join(sorted(map(str, dtypes - DTYPES)))} not supported (float32, float64 only)"
    return None


def build_kernel(request: KernelRequest) -> Kernel:
    """One numexpr expression for the claimed tree (or single node)."""
    if len(request.outputs) != 1:
        raise ValueError(f"{request.nodes[0].name}: a group must have one output, has {len(request.outputs)}")
    variables = {name: f"v{k}" for k, name in enumerate(request.inputs)}
    constants: dict[str, Any] = {}
    expr: dict[str, str] = {}

    def operand(name: str) -> str:
        if name in expr:
            return expr[name]
        if name in variables:
            return variables[name]
        value = request.value(name).const_value  # an initializer read inside a fused group
        if value is None:
            raise ValueError(f"{name!r} is neither a kernel input nor a constant")
        key = f"c{len(constants)}"
        constants[key] = value
        variables[name] = key
        return key

    for node in sorted(request.nodes, key=lambda n: n.index):
        template = OPS[node.op_type][1]
        expr[node.outputs[0]] = template.format(*(operand(n) for n in node.inputs))
    text = expr[request.outputs[0]]
    names = [variables[n] for n in request.inputs]
    dtype = request.value(request.outputs[0]).dtype
    numexpr.validate(text, local_dict={**{n: np.zeros(1, dtype) for n in names}, **constants})  # fail now, not per run

    def run(*args: Any) -> np.ndarray:
        local = dict(zip(names, args))
        local.update(constants)
        return numexpr.evaluate(text, local_dict=local, global_dict={})

    return Kernel(run=run, single_output=True, note=f"numexpr: {text}" if len(request.nodes) > 1 else "")
