"""ConvTranspose, Col2Im: one GEMM to columns, then overlapping adds per kernel offset."""

from __future__ import annotations

import itertools

import numpy as np

from ..registry import kernel


def _auto_pad(node) -> str:
    value = node.attr("auto_pad", "NOTSET")
    value = value.decode() if isinstance(value, bytes) else str(value)
    valid = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
    if value not in valid:
        raise ValueError(f"{node.op_type} {node.name!r}: attribute auto_pad={value!r}; valid values: {list(valid)}")
    return value


def _fold(cols: np.ndarray, kernel_shape, strides, dilations, in_spatial, begin, out_spatial) -> np.ndarray:
    """Sum column blocks (B, C, *kernel, *in_spatial) into (B, C, *out_spatial).

    Input position i with kernel offset k lands at ``i*stride + k*dilation - begin``; positions
    outside the output are dropped and outputs nobody writes stay 0 (output_padding)."""
    nd = len(kernel_shape)
    full = [(n - 1) * s + (k - 1) * d + 1 for n, s, k, d in zip(in_spatial, strides, kernel_shape, dilations)]
    shift = [max(0, -b) for b in begin]
    size = [sh + max(f, b + o) for sh, f, b, o in zip(shift, full, begin, out_spatial)]
    buf = np.zeros(cols.shape[:2] + tuple(size), dtype=cols.dtype)
    for ks in itertools.product(*(range(k) for k in kernel_shape)):
        index = tuple(
            slice(sh + k * d, sh + k * d + (n - 1) * s + 1, s)
            for sh, k, d, n, s in zip(shift, ks, dilations, in_spatial, strides)
        )
        buf[(slice(None), slice(None)) + index] += cols[(slice(None), slice(None)) + ks]
    crop = tuple(slice(sh + b, sh + b + o) for sh, b, o in zip(shift, begin, out_spatial))
    return buf[(slice(None), slice(None)) + crop] if nd else buf


@kernel("ConvTranspose")
def _conv_transpose(node, request):
    group = int(node.attr("group", 1))
    auto_pad = _auto_pad(node)

    def conv_transpose(x, w, b=None):
        nd = x.ndim - 2
        n, c = x.shape[:2]
        in_spatial = x.shape[2:]
        kernel_shape = list(node.attr("kernel_shape") or w.shape[2:])
        strides = list(node.attr("strides") or [1] * nd)
        dilations = list(node.attr("dilations") or [1] * nd)
        out_pad = list(node.attr("output_padding") or [0] * nd)
        output_shape = node.attr("output_shape")
        full = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, in_spatial, out_pad, kernel_shape, dilations)]
        if output_shape is not None:
            out_spatial = [int(v) for v in list(output_shape)[-nd:]]
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out_spatial = [i * s for i, s in zip(in_spatial, strides)]
        else:
            pads = list(node.attr("pads") or [0] * (2 * nd))
            if auto_pad == "VALID":
                pads = [0] * (2 * nd)
            out_spatial = [f - pads[i] - pads[i + nd] for i, f in enumerate(full)]
            begin = pads[:nd]
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            total = [f - o for f, o in zip(full, out_spatial)]
            if auto_pad == "SAME_UPPER":
                begin = [t // 2 for t in total]
            else:
                begin = [t - t // 2 for t in total]
        m = w.shape[1] * group
        cg, mg = c // group, m // group
        k = int(np.prod(kernel_shape))
        # (G, Mg*K, Cg) @ (N, G, Cg, L) -> (N, G, Mg*K, L)
        wt = w.reshape(group, cg, mg * k).transpose(0, 2, 1)
        cols = np.matmul(wt, x.reshape(n, group, cg, -1))
        cols = cols.reshape(n, m, *kernel_shape, *in_spatial)
        y = _fold(cols, kernel_shape, strides, dilations, in_spatial, begin, out_spatial)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * nd).astype(y.dtype, copy=False)
        return np.ascontiguousarray(y)

    return conv_transpose
