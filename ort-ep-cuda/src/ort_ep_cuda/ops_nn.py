"""Convolutions (cuDNN, through ``dev.conv``/``dev.conv_transpose``), pooling and Resize.

Padding for ``auto_pad``, output sizes and Resize's source coordinates are computed on the host
from the input shape (once per shape); the device sees only the data."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ort_core import KernelRequest, NodeView

from .registry import FLOATS, Body, Runtime, op

CONV_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float16))


def same_pads(in_sizes, kernel, strides, dilations, mode: str) -> list[int]:
    """auto_pad SAME_UPPER/SAME_LOWER: output = ceil(input / stride), the extra pad at the end
    (UPPER) or at the beginning (LOWER)."""
    begin, end = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else big)
        end.append(big if mode == "SAME_UPPER" else small)
    return begin + end


def _geometry(node: NodeView, x_shape, kernel) -> tuple[list[int], list[int], list[int]]:
    n = len(x_shape) - 2
    strides = [int(s) for s in node.attr("strides", [1] * n)]
    dilations = [int(d) for d in node.attr("dilations", [1] * n)]
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(x_shape[2:], kernel, strides, dilations, auto_pad)
    elif auto_pad == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = [int(p) for p in node.attr("pads", [0] * (2 * n))]
    return pads, strides, dilations


def _conv_check(node: NodeView, rt: Runtime) -> str | None:
    if not rt.cudnn:
        return f"{node.op_type} needs cuDNN: {rt.cudnn_reason or 'cudnn-frontend is not available'}"
    rank = node.graph.value(node.inputs[0]).shape
    if rank is not None and not 3 <= len(rank) <= 5:
        return f"{node.op_type} on a rank-{len(rank)} input has no CUDA kernel (1-D, 2-D and 3-D images)"
    if node.op_type == "ConvTranspose":
        if node.attr("output_shape") is not None:
            return "ConvTranspose with output_shape has no CUDA kernel (give pads)"
        if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return f"ConvTranspose with auto_pad={node.attr('auto_pad')} has no CUDA kernel"
        strides = node.attr("strides")
        pads_out = node.attr("output_padding")
        if pads_out is not None and strides is not None and any(int(p) >= int(s) for p, s in zip(pads_out, strides)):
            return "ConvTranspose output_padding must be smaller than the stride"
    return None


@op("Conv", dtypes=CONV_DTYPES, check=_conv_check)
def _conv(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    dev = rt.dev
    group = int(node.attr("group", 1))

    def run(x, w, b=None):
        pads, strides, dilations = _geometry(node, x.shape, w.shape[2:])
        y = dev.conv(x, w, pads, strides, dilations, group)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * (y.ndim - 2))
        return y

    return Body(run)


@op("ConvTranspose", dtypes=CONV_DTYPES, check=_conv_check)
def _conv_transpose(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    dev = rt.dev
    group = int(node.attr("group", 1))

    def run(x, w, b=None):
        n = x.ndim - 2
        pads, strides, dilations = _geometry(node, x.shape, w.shape[2:])
        extra = [int(p) for p in node.attr("output_padding", [0] * n)]
        spatial = tuple(
            strides[k] * (x.shape[2 + k] - 1) + extra[k] + (w.shape[2 + k] - 1) * dilations[k] + 1 - pads[k] - pads[n + k]
            for k in range(n)
        )
        out_shape = (x.shape[0], w.shape[1] * group, *spatial)
        y = dev.conv_transpose(x, w, pads, strides, dilations, group, out_shape)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * n)
        return y

    return Body(run)


# ------------------------------------------------------------------------------ pooling
def _pool_check(node: NodeView, rt: Runtime) -> str | None:
    if len([o for o in node.outputs if o]) > 1:
        return "MaxPool with the Indices output has no CUDA kernel"
    if node.attr("storage_order", 0):
        return "MaxPool storage_order=1 has no CUDA kernel"
    return None


def windows(xp: Any, x: Any, kernel, strides, dilations, out_sizes) -> Any:
    """A view (N, C, *out, *kernel) of the windows of a padded ``x``: no copy."""
    x = xp.asarray(x, order="C")
    n = len(kernel)
    item = x.strides
    shape = (*x.shape[:2], *out_sizes, *kernel)
    strides = (*item[:2], *(item[2 + k] * strides[k] for k in range(n)), *(item[2 + k] * dilations[k] for k in range(n)))
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


@op("MaxPool", "AveragePool", dtypes=FLOATS | frozenset({np.dtype(np.int8), np.dtype(np.uint8)}), check=_pool_check)
def _pool(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    kernel = [int(k) for k in node.attr("kernel_shape")]
    ceil_mode = bool(node.attr("ceil_mode", 0))
    is_max = node.op_type == "MaxPool"
    include_pad = bool(node.attr("count_include_pad", 0))
    divisors: dict[tuple, Any] = {}  # AveragePool's divisors on the device, per input shape

    def run(x):
        n = x.ndim - 2
        pads, strides, dilations = _geometry(node, x.shape, kernel)
        out_sizes, extra = [], []
        for k in range(n):
            span = x.shape[2 + k] + pads[k] + pads[n + k] - dilations[k] * (kernel[k] - 1) - 1
            out = (-(-span // strides[k]) if ceil_mode else span // strides[k]) + 1
            if ceil_mode and (out - 1) * strides[k] >= x.shape[2 + k] + pads[k]:
                out -= 1  # the last window must start inside the input or its left padding
            out_sizes.append(out)
            needed = (out - 1) * strides[k] + dilations[k] * (kernel[k] - 1) + 1
            extra.append(max(0, needed - (x.shape[2 + k] + pads[k] + pads[n + k])))
        width = [(0, 0), (0, 0)] + [(pads[k], pads[n + k] + extra[k]) for k in range(n)]
        axes = tuple(range(2 + n, 2 + 2 * n))
        if is_max:
            low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
            padded = xp.pad(x, width, mode="constant", constant_values=low)
            return xp.max(windows(xp, padded, kernel, strides, dilations, out_sizes), axis=axes)
        x32 = x.astype(np.float32)
        sums = xp.sum(windows(xp, xp.pad(x32, width), kernel, strides, dilations, out_sizes), axis=axes)
        key = tuple(x.shape[2:])
        counts = divisors.get(key)
        if counts is None:
            # the divisor: input cells in each window, plus the explicit pads with
            # count_include_pad (never the extension ceil_mode adds); made once per shape
            ones = np.ones(x.shape[2:], np.float32)
            if include_pad:
                ones = np.pad(ones, [(pads[k], pads[n + k]) for k in range(n)], constant_values=1)
                ones = np.pad(ones, [(0, extra[k]) for k in range(n)])
            else:
                ones = np.pad(ones, [(pads[k], pads[n + k] + extra[k]) for k in range(n)])
            counts = divisors[key] = xp.asarray(_host_window_sums(ones, kernel, strides, dilations, out_sizes))
        return (sums / counts).astype(x.dtype)

    return Body(run)


def _host_window_sums(ones: np.ndarray, kernel, strides, dilations, out_sizes) -> np.ndarray:
    view = windows(np, ones[None, None], kernel, strides, dilations, out_sizes)
    return np.maximum(view.sum(axis=tuple(range(2 + len(kernel), 2 + 2 * len(kernel))))[0, 0], 1)


@op("GlobalAveragePool", "GlobalMaxPool", dtypes=FLOATS)
def _global_pool(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    is_max = node.op_type == "GlobalMaxPool"

    def run(x):
        axes = tuple(range(2, x.ndim))
        if is_max:
            return xp.max(x, axis=axes, keepdims=True)
        return xp.mean(x.astype(np.float32), axis=axes, keepdims=True).astype(x.dtype)

    return Body(run)


# ------------------------------------------------------------------------------ Resize
RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                      "half_pixel_symmetric")


def _resize_check(node: NodeView, rt: Runtime) -> str | None:
    a = node.attr
    mode = a("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"Resize mode {mode!r} has no CUDA kernel (nearest, linear)"
    ctm = a("coordinate_transformation_mode", "half_pixel")
    if ctm not in RESIZE_COORDINATES:
        return f"Resize coordinate_transformation_mode {ctm!r} has no CUDA kernel"
    if a("antialias", 0):
        return "Resize with antialias=1 has no CUDA kernel"
    if a("axes") is not None or a("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "Resize with axes or keep_aspect_ratio_policy has no CUDA kernel"
    return None


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float) -> np.ndarray:
    """Where each output position samples the input (ONNX Resize's coordinate transformations)."""
    x = np.arange(out_size, dtype=np.float64)
    resized = in_size * scale  # onnx's length_resized: unrounded when scales are given
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if resized > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * (in_size - 1) / (resized - 1) if resized > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    # half_pixel_symmetric
    adjustment = out_size / (scale * in_size)
    center = in_size / 2
    return center * (1 - adjustment) + (x + 0.5) / scale - 0.5


def nearest_index(coords: np.ndarray, nearest_mode: str, in_size: int) -> np.ndarray:
    if nearest_mode == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    elif nearest_mode == "floor":
        idx = np.floor(coords)
    elif nearest_mode == "ceil":
        idx = np.ceil(coords)
    else:  # round_prefer_floor
        idx = np.ceil(coords - 0.5)
    return np.clip(idx, 0, in_size - 1).astype(np.int64)


@op("Resize", since=11, dtypes=FLOATS | frozenset({np.dtype(np.int8), np.dtype(np.uint8)}),
    host_inputs=frozenset({1, 2, 3}), check=_resize_check)
def _resize(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    a = node.attr
    mode = a("mode", "nearest")
    ctm = a("coordinate_transformation_mode", "half_pixel")
    nearest_mode = a("nearest_mode", "round_prefer_floor")
    cache: dict[tuple, list] = {}

    def plan(shape, scales, sizes) -> list:
        """Per resized axis: (axis, indices, weights) on the device, made once per shape."""
        steps = []
        for axis, in_size in enumerate(shape):
            if sizes is not None:
                out_size = int(sizes[axis])
                scale = out_size / in_size if in_size else 1.0
            else:
                scale = float(scales[axis])
                out_size = int(math.floor(in_size * scale))
            if out_size == in_size and scale == 1.0:
                continue
            coords = source_coordinates(ctm, out_size, in_size, scale)
            if mode == "nearest":
                steps.append((axis, xp.asarray(nearest_index(coords, nearest_mode, in_size)), None, None))
            else:
                coords = np.clip(coords, 0, in_size - 1)
                lo = np.floor(coords).astype(np.int64)
                hi = np.minimum(lo + 1, in_size - 1)
                frac = (coords - lo).astype(np.float32)
                shape_w = [1] * len(shape)
                shape_w[axis] = out_size
                steps.append((axis, xp.asarray(lo), xp.asarray(hi), xp.asarray(frac.reshape(shape_w))))
        return steps

    def run(x, roi=None, scales=None, sizes=None):
        if sizes is not None and np.asarray(sizes).size == 0:
            sizes = None
        key = (x.shape, None if scales is None else tuple(np.asarray(scales).ravel().tolist()),
               None if sizes is None else tuple(int(s) for s in np.asarray(sizes).ravel()))
        steps = cache.get(key)
        if steps is None:
            steps = cache[key] = plan(x.shape, None if scales is None else np.asarray(scales).ravel(),
                                      None if sizes is None else np.asarray(sizes).ravel())
        y = x
        for axis, lo, hi, frac in steps:
            if hi is None:
                y = xp.take(y, lo, axis=axis)
            else:
                y32 = y.astype(np.float32)
                y = xp.take(y32, lo, axis=axis) * (1 - frac) + xp.take(y32, hi, axis=axis) * frac
        if not steps:
            return x.copy()
        if mode == "linear" and x.dtype.kind in "iu":
            return xp.rint(y).astype(x.dtype)
        return y.astype(x.dtype, copy=False)

    return Body(run, host_inputs=frozenset({1, 2, 3}))
