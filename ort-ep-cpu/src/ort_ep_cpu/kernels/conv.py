"""ConvTranspose, Col2Im: one GEMM to columns, then overlapping adds per kernel offset; a
ConvTranspose with constant float32 weights by oneDNN's deconvolution where it is installed."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..registry import kernel, lookup
from . import _jit, _onednn
from ._util import const_input, zeros_vector
from .elementwise import JIT_FLOATS


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


#: transposed convolutions of fewer multiply-adds keep numpy's path (oneDNN's call costs more)
ONEDNN_MIN_MACS = 1 << 14
#: ... and those with fewer output channels: oneDNN's kernels vectorise over them (ocr-det's
#: 24 -> 1 channel 2x2 upsample on 160 x 160: 496 us by oneDNN, 199 by the GEMM and one
#: interleaving pass; its 24 -> 24 on 80 x 80: 410 against 598)
ONEDNN_MIN_OUTPUT_CHANNELS = 8


@kernel("ConvTranspose")
def _conv_transpose(node, request):
    group = int(node.attr("group", 1))
    auto_pad = _auto_pad(node)
    w_given = const_input(node, request, 1)
    b_given = const_input(node, request, 2) if len(node.inputs) > 2 and node.inputs[2] else None
    onednn: dict[tuple, _onednn.Deconvolution | None] = {}  # input shape -> its primitive, None: numpy's path
    packed = _onednn.PackedConstants()  # the weights in oneDNN's layout, for every input shape

    def by_onednn(x, w, b, kernel_shape, strides, dilations, begin, out_spatial) -> np.ndarray | None:
        """The transposed convolution by oneDNN (float32, constant weights and bias), or None.
        numpy's path (a GEMM, then one strided add per kernel offset) was 3-5x onnxruntime's
        time (64 -> 32 channels, 4x4 at stride 2 on 64x64: 4.4 ms, onnxruntime 1.3)."""
        if not (_onednn.USE and w is w_given and b is b_given and x.dtype == w.dtype == np.float32
                and (b is None or b.dtype == np.float32) and 3 <= x.ndim <= 5):
            return None
        full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(x.shape[2:], strides, kernel_shape, dilations)]
        end = [f - bg - o for f, bg, o in zip(full, begin, out_spatial)]
        y_shape = (x.shape[0], w.shape[1] * group, *out_spatial)

        x_shape = x.shape  # (``make`` is kept with the plan: not this run's array)

        def make(lib):
            if (w.size * math.prod(x_shape[2:]) * x_shape[0] < ONEDNN_MIN_MACS or min(out_spatial) <= 0
                    or y_shape[1] < ONEDNN_MIN_OUTPUT_CHANNELS):
                return None
            return _onednn.Deconvolution(lib, x_shape, np.ascontiguousarray(w), b, group, strides, dilations,
                                         list(begin) + end, y_shape, packed=packed)

        plan = _onednn.plan_for(onednn, x.shape, make)
        if plan is None:
            return None
        y = np.empty(y_shape, dtype=np.float32)
        plan.run(np.ascontiguousarray(x), y)
        return y

    def conv_transpose(x, w, b=None):
        nd = x.ndim - 2
        n, c = x.shape[:2]
        in_spatial = x.shape[2:]
        kernel_shape = [int(v) for v in (node.attr("kernel_shape") or w.shape[2:])]
        strides = [int(v) for v in (node.attr("strides") or [1] * nd)]
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
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # the spec's split: SAME_UPPER puts the smaller half first (onnx's reference agrees)
            total = [f - o for f, o in zip(full, out_spatial)]
            begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
        elif output_shape is not None:
            # explicit output_shape without SAME: a larger output is zero-filled at the end (as
            # onnx's reference and onnxruntime do); a smaller one crops the larger half of the
            # excess from the start, as the spec's formula and onnxruntime do
            excess = [max(0, f - o) for f, o in zip(full, out_spatial)]
            begin = [t - t // 2 for t in excess]
        y = by_onednn(x, w, b, kernel_shape, strides, dilations, begin, out_spatial)
        if y is not None:
            return y
        m = w.shape[1] * group
        cg, mg = c // group, m // group
        k = int(np.prod(kernel_shape))
        # (G, Mg*K, Cg) @ (N, G, Cg, L) -> (N, G, Mg*K, L)
        wt = np.ascontiguousarray(w.reshape(group, cg, mg * k).transpose(0, 2, 1))
        xg = x.reshape(n, group, cg, math.prod(in_spatial))  # (not -1: a batch of 0 has no inferable size)
        cols = np.empty((n, group, mg * k, xg.shape[-1]), dtype=np.result_type(x, w))
        for i in range(n):  # 2-D GEMMs: numpy's broadcast stacked matmul skips BLAS
            for g in range(group):
                np.matmul(wt[g], xg[i, g], out=cols[i, g])
        cols = cols.reshape(n, m, *kernel_shape, *in_spatial)
        tiled = [i * kk for i, kk in zip(in_spatial, kernel_shape)]
        if strides == kernel_shape and all(d == 1 for d in dilations) and begin == [0] * nd and out_spatial == tiled:
            # stride == kernel, no padding: the kernel footprints tile the output without
            # overlapping, so the fold is a transpose (the common 2x "deconvolution" upsample):
            # one copy per kernel offset into the output seen as (N, M, i1, k1, i2, k2, ...),
            # with the bias added on the way (one transposing copy had an inner loop of k
            # values and a second pass for the bias: 3x slower on ocr-det's 2x2)
            if nd == 2 and cols.dtype in JIT_FLOATS and _jit.enabled():
                # one compiled pass writing each output row once (numpy's copies below have an
                # inner step of kw values: 2x slower on ocr-det's 2x2)
                y = np.empty((n, m, *out_spatial), dtype=cols.dtype)
                bias = zeros_vector(m, y.dtype) if b is None else np.ascontiguousarray(b, dtype=y.dtype)
                _jit.interleave()(cols, bias, y)
                return y
            y = np.empty((n, m) + tuple(v for d in range(nd) for v in (in_spatial[d], kernel_shape[d])),
                         dtype=cols.dtype)
            bias = None if b is None else b.reshape((1, -1) + (1,) * nd).astype(y.dtype, copy=False)
            for ks in itertools.product(*(range(kk) for kk in kernel_shape)):
                dst = y[(slice(None), slice(None)) + tuple(v for kk in ks for v in (slice(None), kk))]
                src = cols[(slice(None), slice(None)) + ks]
                if bias is None:
                    dst[...] = src
                else:
                    np.add(src, bias, out=dst)
            return y.reshape(n, m, *out_spatial)
        else:
            y = _fold(cols, kernel_shape, strides, dilations, in_spatial, begin, out_spatial)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * nd).astype(y.dtype, copy=False)
        return np.ascontiguousarray(y)

    return conv_transpose


@kernel("Col2Im", since=18)
def _col2im(node, request):
    def col2im(x, image_shape, block_shape):
        image = [int(v) for v in image_shape]
        block = [int(v) for v in block_shape]
        nd = len(image)
        strides = list(node.attr("strides") or [1] * nd)
        dilations = list(node.attr("dilations") or [1] * nd)
        pads = list(node.attr("pads") or [0] * (2 * nd))
        blocks = [
            (i + pads[d] + pads[d + nd] - ((k - 1) * dl + 1)) // s + 1
            for d, (i, k, dl, s) in enumerate(zip(image, block, dilations, strides))
        ]
        n = x.shape[0]
        c = x.shape[1] // int(np.prod(block))
        cols = x.reshape(n, c, *block, *blocks)
        return np.ascontiguousarray(_fold(cols, block, strides, dilations, blocks, pads[:nd], image))

    return col2im


# --- pooling beyond nn.py's Max/AveragePool -----------------------------------------------------


def max_pool_indices(x, win, kernel_shape, strides, dilations, pads, storage_order: int) -> np.ndarray:
    """Flat input index (int64) of each MaxPool output, row-major or, with storage_order=1,
    column-major over the spatial dims, as the Indices output of MaxPool defines it."""
    nd = len(kernel_shape)
    flat = win.reshape(win.shape[: 2 + nd] + (int(np.prod(kernel_shape)),))
    best = np.argmax(flat, axis=-1)
    offsets = np.unravel_index(best, kernel_shape)
    spatial = x.shape[2:]
    coords = []
    for d in range(nd):
        out_pos = np.arange(win.shape[2 + d]).reshape((-1,) + (1,) * (nd - 1 - d))
        coords.append(out_pos * strides[d] + offsets[d] * dilations[d] - pads[d])
    if storage_order == 1:
        inner = np.ravel_multi_index(tuple(reversed(coords)), tuple(reversed(spatial)), mode="clip")
    else:
        inner = np.ravel_multi_index(tuple(coords), tuple(spatial), mode="clip")
    n, c = x.shape[:2]
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * int(np.prod(spatial))
    return (base.reshape((n, c) + (1,) * nd) + inner).astype(np.int64)


def pool_geometry(node, spatial: tuple[int, ...]):
    """kernel_shape, strides, dilations and [begin..., end...] pads of a pooling node, the end
    pads grown so that ceil_mode's last partial windows exist."""
    kernel_shape = [int(k) for k in node.attr("kernel_shape")]
    nd = len(kernel_shape)
    strides = list(node.attr("strides") or [1] * nd)
    dilations = list(node.attr("dilations") or [1] * nd)
    auto_pad = _auto_pad(node)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    pads = list(node.attr("pads") or [0] * (2 * nd)) if auto_pad == "NOTSET" else [0] * (2 * nd)
    for d in range(nd):
        span = (kernel_shape[d] - 1) * dilations[d] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-spatial[d] // strides[d])
            total = max(0, (out - 1) * strides[d] + span - spatial[d])
            small = total // 2
            pads[d], pads[d + nd] = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
            continue
        room = spatial[d] + pads[d] + pads[d + nd] - span
        out = (-(-room // strides[d]) if ceil_mode else room // strides[d]) + 1
        if ceil_mode and (out - 1) * strides[d] >= spatial[d] + pads[d]:
            out -= 1  # a last window starting in the end padding is dropped
        pads[d + nd] += max(0, (out - 1) * strides[d] + span - (spatial[d] + pads[d] + pads[d + nd]))
    return kernel_shape, strides, dilations, pads


def pool_windows(x: np.ndarray, kernel_shape, strides, dilations, pads, fill) -> np.ndarray:
    """(N, C, *out, *kernel) strided view of x padded with ``fill``."""
    nd = len(kernel_shape)
    if any(pads):
        x = np.pad(x, [(0, 0), (0, 0)] + [(pads[d], pads[d + nd]) for d in range(nd)], constant_values=fill)
    span = [(k - 1) * dl + 1 for k, dl in zip(kernel_shape, dilations)]
    if any(x.shape[2 + d] < span[d] for d in range(nd)):
        # the kernel does not fit even once: an empty output along that axis (as the spec's
        # floor((in + pads - span) / stride) + 1 <= 0 says)
        outs = [max(0, (x.shape[2 + d] - span[d]) // strides[d] + 1) for d in range(nd)]
        return np.empty(x.shape[:2] + tuple(outs) + tuple(kernel_shape), dtype=x.dtype)
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
    return win[index + tuple(slice(None, None, dl) for dl in dilations)]


def _max_pool_with_indices(node, request, previous):
    if len(node.outputs) < 2 or not node.outputs[1]:
        return previous(node, request)
    storage_order = int(node.attr("storage_order", 0))

    def max_pool(x):
        kernel_shape, strides, dilations, pads = pool_geometry(node, x.shape[2:])
        low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min  # "V": bfloat16 and friends
        win = pool_windows(x, kernel_shape, strides, dilations, pads, low)
        y = win.max(axis=tuple(range(-len(kernel_shape), 0)))
        return y, max_pool_indices(x, win, kernel_shape, strides, dilations, pads, storage_order)

    return max_pool


# nn.py's MaxPool (tuned for speed) computes the values only; a node that asks for Indices is built
# here, any other goes to the builder registered before this module
_PREVIOUS_MAX_POOL = {s: lookup("", "MaxPool", s) for s in (1, 8, 10, 11, 12, 22)}
for _since, _previous in _PREVIOUS_MAX_POOL.items():
    if _previous is not None:
        kernel("MaxPool", since=_since)(functools.partial(_max_pool_with_indices, previous=_previous.build))


def _lp_pool_builder(node, request):
    p = float(node.attr("p", 2))

    def lp_pool(x):
        kernel_shape, strides, dilations, pads = pool_geometry(node, x.shape[2:])
        nd = len(kernel_shape)
        win = pool_windows(np.abs(x) ** p if p != 1 else np.abs(x), kernel_shape, strides, dilations, pads, 0)
        return (win.sum(axis=tuple(range(-nd, 0))) ** (1.0 / p)).astype(x.dtype, copy=False)

    return lp_pool


for _since in (1, 2, 11, 18):
    kernel("LpPool", since=_since)(_lp_pool_builder)


@kernel("GlobalLpPool", since=1)
def _global_lp_pool(node, request):
    p = float(node.attr("p", 2))

    def global_lp_pool(x):
        axes = tuple(range(2, x.ndim))
        return (np.sum(np.abs(x) ** p, axis=axes, keepdims=True) ** (1.0 / p)).astype(x.dtype, copy=False)

    return global_lp_pool


@kernel("MaxUnpool", since=9)
def _max_unpool(node, request):
    kernel_shape = list(node.attr("kernel_shape"))
    nd = len(kernel_shape)
    strides = list(node.attr("strides") or [1] * nd)
    pads = list(node.attr("pads") or [0] * (2 * nd))

    def max_unpool(x, indices, output_shape=None):
        spatial = [
            (i - 1) * s + k - pads[d] - pads[d + nd] for d, (i, s, k) in enumerate(zip(x.shape[2:], strides, kernel_shape))
        ]
        inferred = tuple(x.shape[:2]) + tuple(spatial)
        y = np.zeros(int(np.prod(inferred)), dtype=x.dtype)
        y[indices.reshape(-1).astype(np.int64)] = x.reshape(-1)
        y = y.reshape(inferred)
        if output_shape is None:
            return y
        # indices address the inferred shape; a larger output_shape pads it at the end
        out = np.zeros(tuple(int(v) for v in output_shape), dtype=x.dtype)
        out[tuple(slice(0, n) for n in inferred)] = y
        return out

    return max_unpool


@kernel("DeformConv", since=19)
def _deform_conv(node, request):
    group = int(node.attr("group", 1))
    offset_group = int(node.attr("offset_group", 1))

    def deform_conv(x, w, offset, b=None, mask=None):
        if x.ndim != 4:
            raise ValueError(f"DeformConv {node.name!r}: only 2-D images (rank-4 X) are supported, got rank {x.ndim}")
        n, c, ih, iw = x.shape
        kh, kw = [int(k) for k in (node.attr("kernel_shape") or w.shape[2:])]
        sh, sw = list(node.attr("strides") or [1, 1])
        dh, dw = list(node.attr("dilations") or [1, 1])
        pads = list(node.attr("pads") or [0, 0, 0, 0])
        oh, ow = offset.shape[2:]
        k = kh * kw
        off = offset.reshape(n, offset_group, kh, kw, 2, oh, ow).astype(np.float64)
        msk = None if mask is None else mask.reshape(n, offset_group, kh, kw, oh, ow)
        flat = x.reshape(n, offset_group, c // offset_group, ih * iw)
        base_h = (np.arange(oh) * sh - pads[0])[:, None]
        base_w = (np.arange(ow) * sw - pads[1])[None, :]
        cols = np.empty((n, offset_group, c // offset_group, k, oh * ow), dtype=x.dtype)
        for a in range(kh):  # one vectorised bilinear gather per kernel tap
            for bb in range(kw):
                hh = base_h + a * dh + off[:, :, a, bb, 0]  # (N, G, oh, ow)
                ww = base_w + bb * dw + off[:, :, a, bb, 1]
                h0, w0 = np.floor(hh), np.floor(ww)
                acc = np.zeros((n, offset_group, c // offset_group, oh * ow), dtype=np.float64)
                for dy in (0, 1):
                    for dx in (0, 1):
                        yy, xx = h0 + dy, w0 + dx
                        wt = (1 - np.abs(hh - yy)) * (1 - np.abs(ww - xx))
                        inside = (yy >= 0) & (yy < ih) & (xx >= 0) & (xx < iw)  # zero padding
                        wt = np.where(inside, wt, 0.0)
                        lin = (np.clip(yy, 0, ih - 1) * iw + np.clip(xx, 0, iw - 1)).astype(np.int64)
                        vals = np.take_along_axis(flat, lin.reshape(n, offset_group, 1, -1), axis=3)
                        acc += vals * wt.reshape(n, offset_group, 1, -1)
                if msk is not None:
                    acc *= msk[:, :, a, bb].reshape(n, offset_group, 1, -1)
                cols[:, :, :, a * kw + bb] = acc
        m = w.shape[0]
        cg, mg = c // group, m // group
        cols = cols.reshape(n, group, cg * k, oh * ow)
        y = np.matmul(w.reshape(group, mg, cg * k), cols).reshape(n, m, oh, ow)
        if b is not None:
            y = y + b.reshape(1, -1, 1, 1)
        return y.astype(x.dtype, copy=False)

    return deform_conv


@kernel("CausalConvWithState", since=27)
def _causal_conv_with_state(node, request):
    activation = node.attr("activation", "none")
    activation = activation.decode() if isinstance(activation, bytes) else str(activation)
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"CausalConvWithState {node.name!r}: attribute activation={activation!r}; valid values: none, silu, swish")
    n_out = len(node.outputs)

    def causal_conv(x, w, b=None, past_state=None):
        n, c, length = x.shape
        k = w.shape[2]
        past = np.zeros((n, c, k - 1), dtype=x.dtype) if past_state is None else past_state
        padded = np.concatenate([past, x], axis=2)
        # depthwise: one multiply-add per tap over the whole (N, C, L) block
        acc = np.zeros((n, c, length), dtype=np.float32 if x.dtype.itemsize < 4 else x.dtype)
        for t in range(k):
            acc += padded[:, :, t : t + length] * w[:, 0, t].reshape(1, c, 1).astype(acc.dtype)
        if b is not None:
            acc += b.reshape(1, c, 1)
        y = acc.astype(x.dtype)
        if activation != "none":
            yf = y.astype(np.float32)
            y = (yf / (1.0 + np.exp(-yf))).astype(x.dtype)
        state = padded[:, :, padded.shape[2] - (k - 1) :]
        return y if n_out == 1 else (y, state)

    return causal_conv
