"""Linear algebra, convolution and pooling (BLAS through numpy matmul)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..registry import kernel


@kernel("MatMul")
def _matmul(node, request):
    return np.matmul


@kernel("Gemm")
def _gemm(node, request):
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))

    def gemm(a, b, c=None):
        y = (a.T if trans_a else a) @ (b.T if trans_b else b)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        if c is not None:
            y += c if beta == 1.0 else c * c.dtype.type(beta)
        return y

    return gemm


def conv_pads(node, spatial: tuple[int, ...], kernel_shape, strides, dilations) -> list[int]:
    """Explicit pads [begin..., end...] from ``pads`` or ``auto_pad``."""
    nd = len(kernel_shape)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", b"NOTSET"):
        return list(node.attr("pads") or [0] * (2 * nd))
    if auto_pad in ("VALID", b"VALID"):
        return [0] * (2 * nd)
    begin, end = [], []
    for i in range(nd):
        out = -(-spatial[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel_shape[i] - 1) * dilations[i] + 1 - spatial[i])
        small, large = total // 2, total - total // 2
        if auto_pad in ("SAME_UPPER", b"SAME_UPPER"):
            begin.append(small)
            end.append(large)
        else:
            begin.append(large)
            end.append(small)
    return begin + end


def _windows(x, kernel_shape, strides, dilations, pads, fill):
    """(N, C, out..., k...) strided view of the padded input."""
    nd = len(kernel_shape)
    if any(pads):
        width = [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)]
        x = np.pad(x, width, constant_values=fill)
    effective = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations)]
    win = sliding_window_view(x, effective, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None))
    index += tuple(slice(None, None, s) for s in strides)
    index += tuple(slice(None, None, d) for d in dilations)
    return win[index]


@kernel("Conv")
def _conv(node, request):
    group = int(node.attr("group", 1))

    def conv(x, w, b=None):
        nd = w.ndim - 2
        kernel_shape = w.shape[2:]
        strides = node.attr("strides") or [1] * nd
        dilations = node.attr("dilations") or [1] * nd
        pads = conv_pads(node, x.shape[2:], kernel_shape, strides, dilations)
        win = _windows(x, kernel_shape, strides, dilations, pads, 0)
        n, c = x.shape[:2]
        out_spatial = win.shape[2 : 2 + nd]
        m = w.shape[0]
        cg, mg = c // group, m // group
        k = int(np.prod(kernel_shape))
        # columns: (group, N*out, Cg*K)
        cols = win.reshape(n, group, cg, *out_spatial, *kernel_shape)
        cols = np.moveaxis(cols, 1, 0).reshape(group, n, cg, -1, k)
        cols = cols.transpose(0, 1, 3, 2, 4).reshape(group, -1, cg * k)
        weights = w.reshape(group, mg, cg * k).transpose(0, 2, 1)
        y = np.matmul(cols, weights)  # (group, N*out, Mg)
        y = y.reshape(group, n, -1, mg).transpose(1, 0, 3, 2).reshape(n, m, *out_spatial)
        if b is not None:
            y += b.reshape((1, -1) + (1,) * nd)
        return np.ascontiguousarray(y)

    return conv


def _pool_params(node, x):
    kernel_shape = list(node.attr("kernel_shape"))
    nd = len(kernel_shape)
    strides = node.attr("strides") or [1] * nd
    dilations = node.attr("dilations") or [1] * nd
    pads = conv_pads(node, x.shape[2:], kernel_shape, strides, dilations)
    if node.attr("ceil_mode", 0):
        # extend the end padding so that a last partial window exists, as ceil() asks
        pads = list(pads)
        for i in range(nd):
            span = x.shape[2 + i] + pads[i] + pads[i + nd] - ((kernel_shape[i] - 1) * dilations[i] + 1)
            out_ceil = -(-span // strides[i]) + 1
            if (out_ceil - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
                out_ceil -= 1
            needed = (out_ceil - 1) * strides[i] + (kernel_shape[i] - 1) * dilations[i] + 1
            pads[i + nd] += max(0, needed - (x.shape[2 + i] + pads[i] + pads[i + nd]))
    return kernel_shape, strides, dilations, pads


@kernel("MaxPool")
def _max_pool(node, request):
    n_out = len(node.outputs)

    def max_pool(x):
        kernel_shape, strides, dilations, pads = _pool_params(node, x)
        low = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        win = _windows(x, kernel_shape, strides, dilations, pads, low)
        nd = len(kernel_shape)
        y = win.max(axis=tuple(range(-nd, 0)))
        return y if n_out == 1 else (y, None)

    return max_pool


@kernel("AveragePool")
def _avg_pool(node, request):
    include_pad = bool(node.attr("count_include_pad", 0))

    def avg_pool(x):
        kernel_shape, strides, dilations, pads = _pool_params(node, x)
        nd = len(kernel_shape)
        axes = tuple(range(-nd, 0))
        total = _windows(x, kernel_shape, strides, dilations, pads, 0).sum(axis=axes)
        explicit = list(node.attr("pads") or [0] * (2 * nd))
        if include_pad:
            # count the explicit padding but not the extra padding ceil_mode added
            ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
            ones = np.pad(ones, [(0, 0), (0, 0)] + [(explicit[i], explicit[i + nd]) for i in range(nd)], constant_values=1)
            extra = [0] * nd + [pads[i + nd] - explicit[i + nd] for i in range(nd)]
            counts = _windows(ones, kernel_shape, strides, dilations, extra, 0).sum(axis=axes)
        else:
            ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
            counts = _windows(ones, kernel_shape, strides, dilations, pads, 0).sum(axis=axes)
        return (total / counts).astype(x.dtype, copy=False)

    return avg_pool
