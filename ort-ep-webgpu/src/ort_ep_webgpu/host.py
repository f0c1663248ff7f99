"""Shape computations the WebGPU provider runs on the host.

Graphs exported from frameworks compute shapes at run time (Shape -> Gather -> Unsqueeze ->
Concat -> Reshape). Those values are a few int64 numbers: putting them on the GPU would cost a
readback (a queue stall) for every Reshape. As onnxruntime's WebGPU provider does, such nodes
are claimed by the provider but run on numpy with inputs and outputs in host memory
(``Kernel.host_inputs``/``host_outputs``), so the plan inserts no copies for them.

A value is "host" when it is the output of Shape/Size, of an integer Constant, or of an
integer-valued op in ``HOST_OPS`` whose inputs are all host values or integer initializers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from ort_core import GraphView, Kernel, NodeView

from .runtime import DEVICE_TYPES

_INT_MAX = 2**62
_SMALL = 4096  # elements: larger integer constants are data, not shapes


def _int_kind(graph: GraphView, name: str) -> bool:
    dtype = graph.value(name).dtype
    return dtype is not None and dtype.kind in "iub"


def _axes(values) -> list[int]:
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
    target = [int(d) for d in shape]
    if not allowzero:
        target = [x.shape[k] if d == 0 else d for k, d in enumerate(target)]
    return x.reshape(target)


def constant_value(node: NodeView) -> np.ndarray | None:
    """The value of a Constant node from whichever value attribute it has."""
    attrs = node.attributes
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    value = attrs.get("value")
    return None if value is None else np.asarray(value)


def _builder(node: NodeView) -> Callable[..., object] | None:
    """numpy function of an integer shape op, or None if the op is not handled here."""
    op, opset = node.op_type, node.opset
    a = node.attr
    if op == "Shape":
        start, end = int(a("start", 0)), a("end")
        return lambda x: np.array(np.shape(x)[start:end], dtype=np.int64)
    if op == "Size":
        return lambda x: np.array(np.size(x), dtype=np.int64)
    if op == "Constant":
        return None  # handled by the caller from the node's value
    if op == "Gather":
        axis = int(a("axis", 0))
        return lambda data, idx: np.take(data, idx, axis=axis)
    if op == "Unsqueeze":
        if opset < 13:
            axes = _axes(a("axes"))
            return lambda x: _unsqueeze(x, axes)
        return lambda x, axes: _unsqueeze(x, _axes(axes))
    if op == "Squeeze":
        if opset < 13:
            axes = a("axes")
            return lambda x: _squeeze(x, None if axes is None else _axes(axes))
        return lambda x, axes=None: _squeeze(x, None if axes is None else _axes(axes))
    if op == "Concat":
        axis = int(a("axis"))
        return lambda *xs: np.concatenate(xs, axis=axis)
    if op == "Slice":
        if opset < 10:
            starts, ends, axes = a("starts"), a("ends"), a("axes")
            return lambda x: _slice(x, starts, ends, axes)
        return lambda x, s, e, ax=None, st=None: _slice(x, _axes(s), _axes(e), None if ax is None else _axes(ax), None if st is None else _axes(st))
    if op == "Cast":
        dtype = onnx.helper.tensor_dtype_to_np_dtype(int(a("to")))
        return lambda x: np.asarray(x).astype(dtype)
    if op == "Reshape":
        allowzero = bool(a("allowzero", 0))
        return lambda x, shape: _reshape(x, shape, allowzero)
    if op == "ConstantOfShape":
        value = a("value")
        fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
        return lambda shape: np.full(tuple(_axes(shape)), fill[0], dtype=fill.dtype)
    simple = {
        "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div, "Equal": np.equal,
        "Less": np.less, "Greater": np.greater, "Where": np.where, "Neg": np.negative, "Abs": np.abs,
        "Not": np.logical_not, "Identity": lambda x: x, "Max": np.maximum, "Min": np.minimum,
        "Range": lambda s, lim, d: np.arange(s, lim, d, dtype=np.asarray(s).dtype),
        "Expand": lambda x, shape: np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_axes(shape))))),
    }
    fn = simple.get(op)
    if fn is None:
        return None
    if op in ("Max", "Min"):
        return lambda *xs: _fold(fn, xs)
    return fn


def _fold(fn, xs):
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


HOST_OPS = frozenset({
    "Shape", "Size", "Constant", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast",
    "Reshape", "Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Where", "Neg", "Abs",
    "Not", "Identity", "Max", "Min", "Range", "Expand", "ConstantOfShape",
})


def host_nodes(graph: GraphView) -> set[int]:
    """Indices of the nodes whose outputs are host values (see the module docstring)."""
    host_values: set[str] = set()
    nodes: set[int] = set()

    def const_int(name: str) -> bool:
        if not graph.defines(name) and graph.outer is None:
            return False
        try:
            value = graph.value(name)
        except KeyError:
            return False
        return value.is_initializer and _int_kind(graph, name) and value.const_value is not None and value.const_value.size <= _SMALL

    for node in graph.nodes:
        if node.domain or node.op_type not in HOST_OPS or node.subgraphs:
            continue
        outs = [n for n in node.outputs if n]
        ins = [n for n in node.inputs if n]
        if not outs or not all(_int_kind(graph, n) for n in outs):
            continue
        if node.op_type in ("Shape", "Size"):
            seeded = True
        elif node.op_type == "Constant":
            value = constant_value(node)
            seeded = value is not None and value.size <= _SMALL
        else:
            seeded = bool(ins) and all(n in host_values or const_int(n) for n in ins)
        if seeded:
            host_values.update(outs)
            nodes.add(node.index)
    return nodes


def host_kernel(node: NodeView) -> Kernel:
    """The numpy kernel of a host node: every input and output in host memory."""
    n_in, n_out = len(node.inputs), len(node.outputs)
    if node.op_type == "Constant":
        value = constant_value(node)
        fn: Callable[..., object] = lambda: value  # noqa: E731
    else:
        built = _builder(node)
        if built is None:
            raise ValueError(f"{node.op_type} has no host implementation")
        fn = built

    if node.op_type == "Shape" or node.op_type == "Size":
        # Shape reads only metadata: take the input where it lives. Graph inputs and
        # initializers start in host memory, and dtypes no kernel computes on are there too;
        # other values are read on the device (no copy: only the shape is looked at).
        value = node.graph.value(node.inputs[0])
        on_host = value.is_graph_input or value.is_initializer or value.dtype not in DEVICE_TYPES

        def run(x):
            return fn(_Shaped(x))

        return Kernel(run=run, single_output=True, host_outputs=frozenset({0}),
                      host_inputs=frozenset({0}) if on_host else frozenset(),
                      note="shape computation on the host")
    return Kernel(
        run=lambda *xs: np.asarray(fn(*xs)),
        single_output=n_out == 1,
        host_inputs=frozenset(range(n_in)),
        host_outputs=frozenset(range(n_out)),
        note="shape computation on the host",
    )


class _Shaped:
    """Duck type for np.shape/np.size over a device tensor (metadata only, no readback)."""

    __array_priority__ = 0

    def __init__(self, x):
        self.shape = tuple(x.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.ndim = len(self.shape)
