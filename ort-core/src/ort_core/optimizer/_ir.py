"""Small helpers over onnx-ir shared by the passes: constants, uses, replacing nodes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from ..graph.load import graphs


def const(value: ir.Value | None) -> np.ndarray | None:
    """The value's data if it is known before running (initializer or Constant output)."""
    if value is None:
        return None
    if value.is_graph_input():  # an overridable initializer may be fed at run time
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None:
        return None
    try:
        return tensor.numpy()
    except Exception:  # external data that cannot be read, exotic types: not a constant to us
        return None


def scalar(value: ir.Value | None) -> float | None:
    """The value as a Python float if it is a one-element constant of rank 0 or 1. One of a
    higher rank is not a scalar to the fusions: it broadcasts what it meets to its rank (a
    MatMul's (2, 3) product times a (1, 1, 1, 1) scale is (1, 1, 2, 3)), which the fused node
    would not."""
    data = const(value)
    if data is None or data.size != 1 or data.ndim > 1 or data.dtype.kind not in "fiu":
        return None
    return float(data.reshape(()))


def only_use(value: ir.Value) -> ir.Node | None:
    """The single node that reads ``value`` (once), or None when it has several readers or is
    a graph output (fusing it away would lose an output)."""
    if value.is_graph_output():
        return None
    uses = list(value.uses())
    if len(uses) != 1:
        return None
    return uses[0][0]


def attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def is_op(node: ir.Node | None, op_type: str, domain: str = "") -> bool:
    return node is not None and node.op_type == op_type and node.domain in (domain, "ai.onnx" if domain == "" else domain)


class Namer:
    """Fresh value names that do not clash with the graph's."""

    def __init__(self, graph: ir.Graph):
        self.taken: set[str] = set()
        for g in graphs(graph):  # the graph and its subgraphs: their inputs, initializers, node outputs
            self.taken.update(v.name for v in g.inputs if v.name)
            self.taken.update(g.initializers)
            for node in g:
                self.taken.update(o.name for o in node.outputs if o.name)
        self.count = 0

    def __call__(self, base: str) -> str:
        while True:
            self.count += 1
            name = f"{base}_{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                return name


def initializer(graph: ir.Graph, namer: Namer, base: str, data: np.ndarray) -> ir.Value:
    """Register ``data`` as a new initializer of ``graph``."""
    name = namer(base)
    data = np.asarray(data)
    if not data.flags.c_contiguous:  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        data = data.copy()
    # ir.Tensor is what ir.tensor makes of an ndarray, without its runtime-protocol checks
    value = ir.Value(name=name, const_value=ir.Tensor(data, name=name),
                     shape=ir.Shape(data.shape), type=ir.TensorType(ir.DataType.from_numpy(data.dtype)))
    graph.register_initializer(value)
    return value


def replace(graph: ir.Graph, old_nodes: Sequence[ir.Node], new_nodes: Sequence[ir.Node],
            old_values: Sequence[ir.Value], new_values: Sequence[ir.Value]) -> None:
    """Put ``new_nodes`` where the last of ``old_nodes`` was; ``new_values`` take over the uses,
    names, types and shapes of ``old_values`` (graph outputs included); remove ``old_nodes``."""
    anchor = old_values[0].producer()  # the chain's last node: its readers come after it
    names = [v.name for v in old_values]
    for old, new in zip(old_values, new_values):
        if new.type is None:
            new.type = old.type
        if new.shape is None:
            new.shape = old.shape
        old.name = None  # free the name for the replacement
    ir.convenience.replace_all_uses_with(list(old_values), list(new_values), replace_graph_outputs=True)
    for name, new in zip(names, new_values):
        if name:
            new.name = name
    graph.insert_after(anchor, list(new_nodes))
    graph.remove(list(old_nodes), safe=True)


def detach(node: ir.Node) -> None:
    """Disconnect a candidate node that will not be inserted from the values it reads."""
    for k in range(len(node.inputs)):
        node.replace_input_with(k, None)
