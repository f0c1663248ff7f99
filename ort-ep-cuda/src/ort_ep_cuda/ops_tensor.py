"""Data movement: Reshape and its kin (views, no copy), Transpose, Concat, Split, Slice, Gather,
Expand, Tile, Pad, ConstantOfShape. Shapes, axes, starts/ends and pads are host inputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_core import KernelRequest, NodeView

from .registry import ANY, Body, Runtime, op

_INT_MAX = 2**62


def ints(values: Any) -> list[int]:
    return [int(v) for v in np.asarray(values).ravel()]


@op("Reshape", since=5, dtypes=ANY, host_inputs=frozenset({1}))
def _reshape(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    allowzero = bool(node.attr("allowzero", 0))

    def run(x, shape):
        target = ints(shape)
        if not allowzero:
            target = [x.shape[k] if d == 0 else d for k, d in enumerate(target)]
        return x.reshape(target)

    return Body(run, host_inputs=frozenset({1}))


@op("Flatten", dtypes=ANY)
def _flatten(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    axis = int(node.attr("axis", 1))

    def run(x):
        ax = axis + x.ndim if axis < 0 else axis
        return x.reshape(int(np.prod(x.shape[:ax], dtype=np.int64)), int(np.prod(x.shape[ax:], dtype=np.int64)))

    return Body(run)


@op("Squeeze", "Unsqueeze", dtypes=ANY, host_inputs=frozenset({1}))
def _squeeze(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    unsqueeze = node.op_type == "Unsqueeze"
    attr_axes = node.attr("axes")

    def run(x, axes=None):
        axes = attr_axes if node.opset < 13 else axes
        if unsqueeze:
            rank = x.ndim + len(ints(axes))
            return xp.expand_dims(x, tuple(sorted(a % rank for a in ints(axes))))
        if axes is None or len(ints(axes)) == 0:
            return x.reshape([d for d in x.shape if d != 1])
        return xp.squeeze(x, axis=tuple(a % x.ndim for a in ints(axes)))

    return Body(run, host_inputs=frozenset() if node.opset < 13 else frozenset({1}))


def _dropout_check(node: NodeView, rt: Runtime) -> str | None:
    if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
        return "Dropout with a training_mode input has no CUDA kernel (inference only)"
    return None


@op("Identity", "Dropout", dtypes=ANY, host_inputs=frozenset({1, 2}), check=_dropout_check)
def _identity(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    n_out = len([o for o in node.outputs if o])
    if node.op_type == "Dropout" and n_out > 1:  # inference: nothing dropped, the mask is all ones
        return Body(lambda x, *rest: [x, xp.ones(x.shape, dtype=np.bool_)], host_inputs=frozenset({1, 2}), n_outputs=2)
    return Body(lambda x, *rest: x, host_inputs=frozenset({1, 2}))


@op("Transpose", dtypes=ANY)
def _transpose(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    perm = node.attr("perm")
    xp = rt.xp
    # a contiguous result: the next kernel (cuBLAS, cuDNN, a copy to the host) reads it densely
    return Body(lambda x: xp.asarray(xp.transpose(x, None if perm is None else [int(p) for p in perm]), order="C"))


@op("Concat", dtypes=ANY)
def _concat(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    axis = int(node.attr("axis"))
    xp = rt.xp
    return Body(lambda *xs: xp.concatenate(xs, axis=axis % xs[0].ndim))


@op("Split", dtypes=ANY, host_inputs=frozenset({1}))
def _split(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    axis = int(node.attr("axis", 0))
    n_out = len(node.outputs)
    attr_split = node.attr("split")
    num_outputs = node.attr("num_outputs")

    def run(x, split=None):
        ax = axis % x.ndim
        sizes = ints(attr_split) if node.opset < 13 and attr_split is not None else (None if split is None else ints(split))
        if sizes is None:
            length = x.shape[ax]
            parts = int(num_outputs) if num_outputs is not None else n_out
            chunk = -(-length // parts)
            sizes = [min(chunk, max(0, length - k * chunk)) for k in range(parts)]
        bounds = np.cumsum(sizes)[:-1]
        parts = [xp.asarray(p, order="C") for p in xp.split(x, [int(b) for b in bounds], axis=ax)]
        return parts if n_out > 1 else parts[0]

    return Body(run, host_inputs=frozenset() if node.opset < 13 else frozenset({1}), n_outputs=n_out)


@op("Slice", dtypes=ANY, host_inputs=frozenset({1, 2, 3, 4}))
def _slice(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    def cut(x, starts, ends, axes=None, steps=None):
        index = [slice(None)] * x.ndim
        axes = range(len(starts)) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        for s, e, a, st in zip(starts, ends, axes, steps):
            index[int(a) % x.ndim] = slice(int(s), max(min(int(e), _INT_MAX), -_INT_MAX), int(st))
        return x[tuple(index)].copy()

    if node.opset < 10:
        a = node.attr
        return Body(lambda x: cut(x, ints(a("starts")), ints(a("ends")), None if a("axes") is None else ints(a("axes"))))
    return Body(lambda x, s, e, axes=None, steps=None: cut(x, ints(s), ints(e), None if axes is None else ints(axes),
                                                           None if steps is None else ints(steps)),
                host_inputs=frozenset({1, 2, 3, 4}))


@op("Gather", dtypes=ANY)
def _gather(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    axis = int(node.attr("axis", 0))

    def run(data, idx):
        ax = axis % data.ndim
        idx = xp.where(idx < 0, idx + data.shape[ax], idx)  # ONNX counts negative indices from the end
        return xp.take(data, idx, axis=ax)

    return Body(run)


@op("GatherElements", dtypes=ANY)
def _gather_elements(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    axis = int(node.attr("axis", 0))

    def run(data, idx):
        ax = axis % data.ndim
        idx = xp.where(idx < 0, idx + data.shape[ax], idx)
        return xp.take_along_axis(data, idx, axis=ax)

    return Body(run)


@op("Expand", since=8, dtypes=ANY, host_inputs=frozenset({1}))
def _expand(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp

    def run(x, shape):
        target = np.broadcast_shapes(tuple(x.shape), tuple(ints(shape)))
        return xp.asarray(xp.broadcast_to(x, target), order="C")

    return Body(run, host_inputs=frozenset({1}))


@op("Tile", dtypes=ANY, host_inputs=frozenset({1}))
def _tile(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    return Body(lambda x, repeats: xp.tile(x, tuple(ints(repeats))), host_inputs=frozenset({1}))


def _pad_check(node: NodeView, rt: Runtime) -> str | None:
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        return f"Pad mode {mode!r} has no CUDA kernel (constant, reflect, edge)"
    return None


@op("Pad", since=11, dtypes=ANY, host_inputs=frozenset({1, 2, 3}), check=_pad_check)
def _pad(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    mode = node.attr("mode", "constant")

    def run(x, pads, value=None, axes=None):
        pads = ints(pads)
        axes_ = list(range(x.ndim)) if axes is None else [a % x.ndim for a in ints(axes)]
        n = len(axes_)
        width = [[0, 0] for _ in range(x.ndim)]
        for k, a in enumerate(axes_):
            width[a] = [pads[k], pads[n + k]]
        # negative pads crop
        index = tuple(slice(-b if b < 0 else 0, x.shape[k] + e if e < 0 else None) for k, (b, e) in enumerate(width))
        x = x[index]
        width = [[max(b, 0), max(e, 0)] for b, e in width]
        if mode == "constant":
            fill = 0 if value is None or np.asarray(value).size == 0 else np.asarray(value).ravel()[0].item()
            return xp.pad(x, width, mode="constant", constant_values=fill)
        return xp.pad(x, width, mode=mode)

    return Body(run, host_inputs=frozenset({1, 2, 3}))


@op("ConstantOfShape", since=9, dtypes=ANY, host_inputs=frozenset({0}))
def _constant_of_shape(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return Body(lambda shape: xp.full(tuple(ints(shape)), fill[0].item(), dtype=fill.dtype), host_inputs=frozenset({0}))


def _constant_check(node: NodeView, rt: Runtime) -> str | None:
    if not any(k in node.attributes for k in ("value", "value_float", "value_floats", "value_int", "value_ints")):
        return "Constant with a sparse or string value has no CUDA kernel"
    return None


@op("Constant", dtypes=ANY, check=_constant_check)
def _constant(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    from ort_core.hostshapes import constant_value

    value = constant_value(node)
    held: list[Any] = []  # the device copy, made on the first run (on the session's stream)

    def run():
        if not held:
            held.append(rt.xp.asarray(value))
        return held[0]

    return Body(run)


@op("Range", dtypes=ANY, host_inputs=frozenset({0, 1, 2}))
def _range(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp

    def run(start, limit, delta):
        dtype = np.asarray(start).dtype
        count = max(int(np.ceil((np.asarray(limit).item() - np.asarray(start).item()) / np.asarray(delta).item())), 0)
        return (np.asarray(start).item() + xp.arange(count, dtype=dtype) * np.asarray(delta).item()).astype(dtype)

    return Body(run, host_inputs=frozenset({0, 1, 2}))
