"""Shape computations a device provider runs on the host.

Graphs exported from frameworks compute shapes at run time (Shape -> Gather -> Unsqueeze ->
Concat -> Reshape). Those values are a few int64 numbers: on a GPU each would cost a
device->host readback (a queue or stream synchronisation) where Reshape reads it. onnxruntime's
GPU providers keep such nodes in CPU memory. A device provider here claims them with the numpy
kernels of this module, whose inputs and outputs are host memory (``Kernel.host_inputs`` /
``host_outputs``), so every node stays on the provider and the plan inserts no copy for them.

A value is a *host value* when it is the output of Shape or Size, of a small integer Constant,
or of an integer op in ``HOST_OPS`` whose inputs are host values or small integer initializers.

    from ort_core.hostshapes import host_kernel, host_nodes_cached

    if node.index in host_nodes_cached(ep, request.graph):
        return host_kernel(node, device_dtypes)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .types import Kernel

if TYPE_CHECKING:
    from .graph.view import GraphView, NodeView

_INT_MAX = 2**62
_SMALL = 4096  # elements: larger integer tensors are data, not shapes
_NOTE = "shape computation on the host"

HOST_OPS = frozenset({
    "Shape", "Size", "Constant", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast",
    "Reshape", "Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Where", "Neg", "Abs",
    "Not", "Identity", "Max", "Min", "Range", "Expand", "ConstantOfShape",
})


def constant_value(node: NodeView) -> np.ndarray | None:
    """The value of a Constant node from whichever value attribute it has."""
    attrs = node.attributes
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    value = attrs.get("value")
    return None if value is None else np.asarray(value)


def _ints(values: Any) -> list[int]:
    return [int(a) for a in np.asarray(values).ravel()]


def _unsqueeze(x, axes):
    rank = x.ndim + len(axes)
    return np.expand_dims(x, tuple(sorted(a % rank for a in axes)))


def _squeeze(x, axes):
    return np.squeeze(x) if axes is None or len(axes) == 0 else np.squeeze(x, axis=tuple(a % x.ndim for a in axes))


def _slice(x, starts, ends, axes=None, steps=None):
    index = [slice(None)] * x.ndim
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[int(a) % x.ndim] = slice(int(s), max(min(int(e), _INT_MAX), -_INT_MAX), int(st))
    return x[tuple(index)]


def _div(a, b):
    q = np.floor_divide(a, b)  # ONNX integer division truncates toward zero
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def _reshape(x, shape, allowzero):
    target = _ints(shape)
    if not allowzero:
        target = [x.shape[k] if d == 0 else d for k, d in enumerate(target)]
    return x.reshape(target)


def _fold(fn: Callable, xs: Iterable):
    xs = list(xs)
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


_ELEMENTWISE: dict[str, Callable[..., Any]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div, "Equal": np.equal,
    "Less": np.less, "Greater": np.greater, "Where": np.where, "Neg": np.negative, "Abs": np.abs,
    "Not": np.logical_not, "Identity": lambda x: x,
    "Max": lambda *xs: _fold(np.maximum, xs), "Min": lambda *xs: _fold(np.minimum, xs),
    "Range": lambda s, lim, d: np.arange(s, lim, d, dtype=np.asarray(s).dtype),
    "Expand": lambda x, shape: np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_ints(shape))))),
}


def _numpy_fn(node: NodeView) -> Callable[..., Any] | None:
    """The numpy function of an integer shape op, or None if the op is not handled here."""
    op, opset, a = node.op_type, node.opset, node.attr
    if op == "Shape":
        start, end = int(a("start", 0)), a("end")
        return lambda x: np.array(np.shape(x)[start:end], dtype=np.int64)
    if op == "Size":
        return lambda x: np.array(np.size(x), dtype=np.int64)
    if op == "Gather":
        axis = int(a("axis", 0))
        return lambda data, idx: np.take(data, idx, axis=axis)
    if op == "Unsqueeze":
        if opset < 13:
            axes = _ints(a("axes"))
            return lambda x: _unsqueeze(x, axes)
        return lambda x, axes: _unsqueeze(x, _ints(axes))
    if op == "Squeeze":
        if opset < 13:
            axes = a("axes")
            return lambda x: _squeeze(x, None if axes is None else _ints(axes))
        return lambda x, axes=None: _squeeze(x, None if axes is None else _ints(axes))
    if op == "Concat":
        axis = int(a("axis"))
        return lambda *xs: np.concatenate(xs, axis=axis)
    if op == "Slice":
        if opset < 10:
            starts, ends, axes = a("starts"), a("ends"), a("axes")
            return lambda x: _slice(x, starts, ends, axes)
        return lambda x, s, e, ax=None, st=None: _slice(
            x, _ints(s), _ints(e), None if ax is None else _ints(ax), None if st is None else _ints(st))
    if op == "Cast":
        import onnx

        dtype = onnx.helper.tensor_dtype_to_np_dtype(int(a("to")))
        return lambda x: np.asarray(x).astype(dtype)
    if op == "Reshape":
        allowzero = bool(a("allowzero", 0))
        return lambda x, shape: _reshape(x, shape, allowzero)
    if op == "ConstantOfShape":
        value = a("value")
        fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
        return lambda shape: np.full(tuple(_ints(shape)), fill[0], dtype=fill.dtype)
    return _ELEMENTWISE.get(op)


def _is_int(graph: GraphView, name: str) -> bool:
    dtype = graph.value(name).dtype
    return dtype is not None and dtype.kind in "iub"


def host_nodes(graph: GraphView) -> set[int]:
    """Indices of the nodes of ``graph`` whose outputs are host values (see the module docstring)."""
    values: set[str] = set()
    nodes: set[int] = set()

    def small_int_initializer(name: str) -> bool:
        if not graph.defines(name) and graph.outer is None:
            return False
        try:
            value = graph.value(name)
        except KeyError:
            return False
        data = value.const_value if value.is_initializer else None
        return data is not None and _is_int(graph, name) and data.size <= _SMALL

    for node in graph.nodes:
        if node.domain or node.op_type not in HOST_OPS or node.subgraphs:
            continue
        outs = [n for n in node.outputs if n]
        ins = [n for n in node.inputs if n]
        if not outs or not all(_is_int(graph, n) for n in outs):
            continue
        if node.op_type in ("Shape", "Size"):
            seeded = True
        elif node.op_type == "Constant":
            value = constant_value(node)
            seeded = value is not None and value.size <= _SMALL
        else:
            seeded = bool(ins) and all(n in values or small_int_initializer(n) for n in ins)
        if seeded:
            values.update(outs)
            nodes.add(node.index)
    return nodes


def host_nodes_cached(ep: Any, graph: GraphView) -> set[int]:
    """``host_nodes(graph)``, computed once per graph of the session: capability and kernel
    creation both ask. The cache lives in the provider's session state (``ep.state``)."""
    cache = ep.state.setdefault("host_nodes", {})
    key = id(graph)
    if key not in cache:
        cache[key] = (graph, host_nodes(graph))  # the graph is kept so that its id stays unique
    return cache[key][1]


class _Shaped:
    """What np.shape / np.size read of a device tensor: its metadata only, no readback."""

    def __init__(self, x):
        self.shape = tuple(x.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.ndim = len(self.shape)


def host_kernel(node: NodeView, device_dtypes: Iterable[np.dtype]) -> Kernel:
    """The numpy kernel of a host node: inputs and outputs in host memory. Shape and Size read
    only metadata, so their input stays where it lives: on the device, unless it is a graph
    input, an initializer, or a dtype outside ``device_dtypes`` (the dtypes the provider keeps
    on its device), which start or stay in host memory. No copy either way."""
    if node.op_type == "Constant":
        value = constant_value(node)
        return Kernel(run=lambda: value, single_output=True, host_outputs=frozenset({0}), note=_NOTE)
    fn = _numpy_fn(node)
    if fn is None:
        raise ValueError(f"{node.op_type} has no host implementation")
    if node.op_type in ("Shape", "Size"):
        value = node.graph.value(node.inputs[0])
        on_host = value.is_graph_input or value.is_initializer or value.dtype not in frozenset(device_dtypes)
        return Kernel(run=lambda x: fn(_Shaped(x)), single_output=True, host_outputs=frozenset({0}),
                      host_inputs=frozenset({0}) if on_host else frozenset(), note=_NOTE)
    n_in, n_out = len(node.inputs), len(node.outputs)
    return Kernel(run=lambda *xs: np.asarray(fn(*xs)), single_output=n_out == 1,
                  host_inputs=frozenset(range(n_in)), host_outputs=frozenset(range(n_out)), note=_NOTE)
