"""Reductions and normalisations over axes."""

from __future__ import annotations

import numpy as np

from ..registry import kernel


def _reduce(fn):
    """Build a Reduce* kernel for both forms: axes as attribute (< opset 18) or as input."""

    def build(node, request):
        keepdims = bool(node.attr("keepdims", 1))
        noop = bool(node.attr("noop_with_empty_axes", 0))
        attr_axes = node.attr("axes")

        def run(x, axes=None):
            if axes is None:
                axes = attr_axes
            if axes is None or len(axes) == 0:
                if noop:
                    return x
                axes = None
            else:
                axes = tuple(int(a) for a in np.asarray(axes).ravel())
            return np.asarray(fn(x, axis=axes, keepdims=keepdims)).astype(x.dtype, copy=False)

        return run

    return build


for _name, _fn in {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max,
                   "ReduceMin": np.min, "ReduceProd": np.prod}.items():
    kernel(_name, 1)(_reduce(_fn))


@kernel("Softmax", since=1)
def _softmax_v1(node, request):
    axis = int(node.attr("axis", 1))

    def softmax(x):
        a = axis if axis >= 0 else axis + x.ndim
        flat = x.reshape(int(np.prod(x.shape[:a])), -1)
        e = np.exp(flat - flat.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)

    return softmax


@kernel("Softmax", since=13)
def _softmax(node, request):
    axis = int(node.attr("axis", -1))

    def softmax(x):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return e

    return softmax


@kernel("LayerNormalization", since=17)
def _layer_norm(node, request):
    axis = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    n_out = len(node.outputs)

    def layer_norm(x, scale, bias=None):
        a = axis if axis >= 0 else axis + x.ndim
        axes = tuple(range(a, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        centered = x - mean
        var = np.mean(centered * centered, axis=axes, keepdims=True)
        inv_std = (1.0 / np.sqrt(var + eps)).astype(x.dtype, copy=False)
        y = centered * inv_std * scale
        if bias is not None:
            y += bias
        if n_out == 1:
            return y
        return (y, mean, inv_std)[:n_out]

    return layer_norm


@kernel("BatchNormalization", since=1)
def _batch_norm(node, request):
    eps = float(node.attr("epsilon", 1e-5))
    n_out = len(node.outputs)

    def batch_norm(x, scale, bias, mean, var):
        shape = (1, -1) + (1,) * (x.ndim - 2)
        factor = (scale / np.sqrt(var + eps)).astype(x.dtype, copy=False)
        y = x * factor.reshape(shape) + (bias - mean * factor).astype(x.dtype, copy=False).reshape(shape)
        return y if n_out == 1 else (y,) + (None,) * (n_out - 1)

    return batch_norm


@kernel("GlobalAveragePool")
def _global_avg_pool(node, request):
    return lambda x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel("GlobalMaxPool")
def _global_max_pool(node, request):
    return lambda x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True)

