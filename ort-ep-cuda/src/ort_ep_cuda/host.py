"""Shape computations, run on the host as onnxruntime places them.

Exported graphs compute shapes at run time (Shape -> Gather -> Unsqueeze -> Concat -> Reshape).
Those values are a few int64 numbers: on the GPU each would cost a device->host copy (a stream
synchronisation) where Reshape reads it. onnxruntime's CUDA provider puts such nodes in CPU
memory; here the provider claims them with numpy kernels whose inputs and outputs are host
memory (``Kernel.host_inputs``/``host_outputs``), so every node stays on the provider and the
plan inserts no copy for them.

A value is a *host value* when it is the output of Shape or Size, of a small integer Constant,
or of an integer op in ``HOST_OPS`` whose inputs are host values or small integer initializers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from ort_core import GraphView, Kernel, NodeView

from .ops_tensor import ints

_SMALL = 4096  # elements: larger integer tensors are data, not shapes


def _is_int(graph: GraphView, name: str) -> bool:
    dtype = graph.value(name).dtype
    return dtype is not None and dtype.kind in "iub"


def constant_value(node: NodeView) -> np.ndarray | None:
    a = node.attributes
    for key, dtype in (("value_int", np.int64), ("value_ints", np.int64), ("value_float", np.float32),
                       ("value_floats", np.float32)):
        if key in a:
            return np.array(a[key], dtype=dtype)
    value = a.get("value")
    return None if value is None else np.asarray(value)


def _int_div(a, b):
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def _fold(fn):
    def run(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out

    return run


def _numpy_fn(node: NodeView) -> Callable[..., object] | None:
    a, opset = node.attr, node.opset
    op = node.op_type
    if op == "Shape":
        start, end = int(a("start", 0)), a("end")
        return lambda x: np.array(x.shape[start:end], dtype=np.int64)
    if op == "Size":
        return lambda x: np.array(int(np.prod(x.shape, dtype=np.int64)), dtype=np.int64)
    if op == "Gather":
        axis = int(a("axis", 0))
        return lambda data, idx: np.take(data, idx, axis=axis)
    if op == "Unsqueeze":
        def unsqueeze(x, axes=None):
            axes = ints(a("axes") if opset < 13 else axes)
            return np.expand_dims(x, tuple(sorted(k % (x.ndim + len(axes)) for k in axes)))

        return unsqueeze
    if op == "Squeeze":
        def squeeze(x, axes=None):
            axes = a("axes") if opset < 13 else axes
            return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(k % x.ndim for k in ints(axes)))

        return squeeze
    if op == "Concat":
        axis = int(a("axis"))
        return lambda *xs: np.concatenate(xs, axis=axis)
    if op == "Slice" and opset >= 10:
        def cut(x, s, e, axes=None, steps=None):
            index = [slice(None)] * x.ndim
            axes = range(len(ints(s))) if axes is None else ints(axes)
            steps = [1] * len(ints(s)) if steps is None else ints(steps)
            for b, f, k, st in zip(ints(s), ints(e), axes, steps):
                index[k % x.ndim] = slice(b, max(min(f, 2**62), -(2**62)), st)
            return x[tuple(index)]

        return cut
    if op == "Cast":
        to = onnx.helper.tensor_dtype_to_np_dtype(int(a("to")))
        return lambda x: np.asarray(x).astype(to)
    if op == "Reshape":
        allowzero = bool(a("allowzero", 0))
        return lambda x, shape: x.reshape([x.shape[k] if d == 0 and not allowzero else d for k, d in enumerate(ints(shape))])
    if op == "ConstantOfShape":
        value = a("value")
        fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
        return lambda shape: np.full(tuple(ints(shape)), fill[0], dtype=fill.dtype)
    if op == "Range":
        return lambda s, lim, d: np.arange(s, lim, d, dtype=np.asarray(s).dtype)
    if op == "Expand":
        return lambda x, shape: np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(ints(shape)))))
    if op in ("Max", "Min"):
        return _fold(np.maximum if op == "Max" else np.minimum)
    return {
        "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _int_div, "Equal": np.equal,
        "Less": np.less, "Greater": np.greater, "Where": np.where, "Neg": np.negative, "Abs": np.abs,
        "Not": np.logical_not, "Identity": lambda x: x,
    }.get(op)


HOST_OPS = frozenset({
    "Shape", "Size", "Constant", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Reshape",
    "Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "Where", "Neg", "Abs", "Not", "Identity", "Max",
    "Min", "Range", "Expand", "ConstantOfShape",
})


def host_nodes(graph: GraphView) -> set[int]:
    """Indices of the nodes whose outputs are host values (see the module docstring)."""
    values: set[str] = set()
    nodes: set[int] = set()

    def small_int_initializer(name: str) -> bool:
        try:
            value = graph.value(name)
        except KeyError:
            return False
        data = value.const_value if value.is_initializer else None
        return data is not None and _is_int(graph, name) and data.size <= _SMALL

    for node in graph.nodes:
        if node.domain or node.op_type not in HOST_OPS or node.subgraphs:
            continue
        if node.op_type == "Slice" and node.opset < 10:
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


def host_kernel(node: NodeView, device_dtypes: frozenset[np.dtype]) -> Kernel:
    """The numpy kernel of a host node: inputs and outputs in host memory. Shape and Size read
    only metadata, so their input stays where it lives (on the device unless it is a graph
    input, an initializer, or a dtype the device does not hold): no copy."""
    if node.op_type == "Constant":
        value = constant_value(node)
        return Kernel(run=lambda: value, single_output=True, host_outputs=frozenset({0}),
                      note="shape computation on the host")
    fn = _numpy_fn(node)
    if fn is None:
        raise ValueError(f"{node.op_type} has no host implementation")
    if node.op_type in ("Shape", "Size"):
        value = node.graph.value(node.inputs[0])
        on_host = value.is_graph_input or value.is_initializer or value.dtype not in device_dtypes
        return Kernel(run=fn, single_output=True, host_outputs=frozenset({0}),
                      host_inputs=frozenset({0}) if on_host else frozenset(), note="shape computation on the host")
    n_in, n_out = len(node.inputs), len(node.outputs)
    return Kernel(run=lambda *xs: np.asarray(fn(*xs)), single_output=n_out == 1,
                  host_inputs=frozenset(range(n_in)), host_outputs=frozenset(range(n_out)),
                  note="shape computation on the host")
