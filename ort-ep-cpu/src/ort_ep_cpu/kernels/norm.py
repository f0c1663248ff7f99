"""Normalisation ops and Dropout: BatchNormalization (incl. training outputs), Instance/Group/RMS/Lp
normalisation, MeanVarianceNormalization, LRN, and onnxruntime's com.microsoft
SkipLayerNormalization (which ort-core's optimizer fuses residual Add + LayerNormalization into).

BatchNormalization and Dropout here supersede the inference-only versions registered earlier
(this module is imported later, and equal ``since`` registrations resolve to the last one).
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import kernel
from ._util import normalize_axis
from .reduce import CompiledLayerNorm


def _stat_dtype(x: np.ndarray):
    # half-precision inputs accumulate in float32, like onnxruntime's CPU kernels
    return np.float32 if x.dtype.itemsize < 4 else x.dtype


def _bn_builder(node, request):
    eps = float(node.attr("epsilon", 1e-5))
    momentum = float(node.attr("momentum", 0.9))
    n_out = len(node.outputs)
    if node.opset >= 14:
        training = bool(node.attr("training_mode", 0))
    else:
        training = n_out > 1 and not node.attr("is_test", 0)

    def batch_norm(x, scale, bias, mean, var):
        per_element = scale.ndim > 1  # BatchNormalization < 9 with spatial=0: (C, D1, ...) statistics
        shape = (1,) + scale.shape if per_element else (1, -1) + (1,) * (x.ndim - 2)
        if training:
            axes = (0,) if per_element else (0,) + tuple(range(2, x.ndim))
            xs = x.astype(_stat_dtype(x), copy=False)
            use_mean, use_var = xs.mean(axis=axes), xs.var(axis=axes)
        else:
            use_mean, use_var = mean, var
        factor = (scale / np.sqrt(use_var + eps)).astype(x.dtype, copy=False)
        shift = (bias - use_mean * factor).astype(x.dtype, copy=False)
        y = x * factor.reshape(shape)
        y += shift.reshape(shape)  # in place: one output buffer, no temporary
        if n_out == 1:
            return y
        if not training:
            return (y,) + (None,) * (n_out - 1)
        running_mean = (mean * momentum + use_mean * (1 - momentum)).astype(mean.dtype, copy=False)
        running_var = (var * momentum + use_var * (1 - momentum)).astype(var.dtype, copy=False)
        if node.opset >= 14:
            outs = (y, running_mean, running_var)
        else:  # opset < 14: running stats, then the batch's mean and variance
            outs = (y, running_mean, running_var, use_mean.astype(x.dtype), use_var.astype(x.dtype))
        return outs[:n_out]

    return batch_norm


for _since in (1, 6, 7, 9, 14, 15):
    kernel("BatchNormalization", since=_since)(_bn_builder)


@kernel("InstanceNormalization", since=1)
def _instance_norm(node, request):
    eps = float(node.attr("epsilon", 1e-5))

    def instance_norm(x, scale, bias):
        n, c = x.shape[:2]
        xs = x.astype(_stat_dtype(x), copy=False).reshape(n, c, math.prod(x.shape[2:]))  # (-1: not for a batch of 0)
        mean = xs.mean(axis=2, keepdims=True)
        var = xs.var(axis=2, keepdims=True)
        # fold normalisation and affine into one multiply-add per element
        a = scale.reshape(1, c, 1) / np.sqrt(var + eps)
        y = xs * a.astype(xs.dtype)
        y += (bias.reshape(1, c, 1) - mean * a).astype(xs.dtype)
        return y.reshape(x.shape).astype(x.dtype, copy=False)

    return instance_norm


def _group_norm_builder(node, request):
    eps = float(node.attr("epsilon", 1e-5))
    groups = int(node.attr("num_groups"))
    per_group_affine = node.opset < 21  # opset 18's scale/bias are per group, opset 21's per channel

    def group_norm(x, scale, bias):
        n, c = x.shape[:2]
        xs = x.astype(_stat_dtype(x), copy=False).reshape(n, groups, c // groups * math.prod(x.shape[2:]))
        mean = xs.mean(axis=2)  # (N, G)
        inv = 1.0 / np.sqrt(xs.var(axis=2) + eps)
        if per_group_affine:
            scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
        # per (N, C): y = x * a + b, the group statistics and the channel affine folded together
        a = np.repeat(inv, c // groups, axis=1) * scale.reshape(1, c)
        b = bias.reshape(1, c) - np.repeat(mean, c // groups, axis=1) * a
        xc = xs.reshape(n, c, -1)
        y = xc * a[:, :, None].astype(xc.dtype)
        y += b[:, :, None].astype(xc.dtype)
        return y.reshape(x.shape).astype(x.dtype, copy=False)

    return group_norm


kernel("GroupNormalization", since=18)(_group_norm_builder)
kernel("GroupNormalization", since=21)(_group_norm_builder)


@kernel("RMSNormalization", since=23)
def _rms_norm(node, request):
    axis = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))

    def rms_norm(x, scale):
        a = normalize_axis(axis, x.ndim)
        xs = x.astype(np.float32 if x.dtype.itemsize < 4 else x.dtype, copy=False)
        ms = np.mean(xs * xs, axis=tuple(range(a, x.ndim)), keepdims=True)
        return (xs / np.sqrt(ms + eps) * scale).astype(x.dtype, copy=False)

    return rms_norm


@kernel("LpNormalization", since=1)
def _lp_norm(node, request):
    axis = int(node.attr("axis", -1))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise ValueError(f"LpNormalization {node.name!r}: attribute p={p}; valid values: [1, 2]")

    def lp_norm(x):
        norm = np.abs(x).sum(axis=axis, keepdims=True) if p == 1 else np.sqrt((x * x).sum(axis=axis, keepdims=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(norm == 0, 0, x / norm).astype(x.dtype, copy=False)

    return lp_norm


@kernel("MeanVarianceNormalization", since=9)
def _mvn(node, request):
    axes = tuple(int(a) for a in (node.attr("axes") or [0, 2, 3]))

    def mvn(x):
        mean = x.mean(axis=axes, keepdims=True)
        var = (x * x).mean(axis=axes, keepdims=True) - mean * mean
        return ((x - mean) / (np.sqrt(var) + x.dtype.type(1e-9))).astype(x.dtype, copy=False)

    return mvn


@kernel("LRN", since=1)
def _lrn(node, request):
    alpha = float(node.attr("alpha", 1e-4))
    beta = float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    size = int(node.attr("size"))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2

    def lrn(x):
        # windowed sum over channels via a cumulative sum along C
        sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (before + 1, after)] + [(0, 0)] * (x.ndim - 2))
        csum = np.cumsum(sq, axis=1)
        c = x.shape[1]
        window = csum[:, size : size + c] - csum[:, :c]
        return (x / (bias + (alpha / size) * window) ** beta).astype(x.dtype)

    return lrn


def _dropout_builder(node, request):
    n_out = len(node.outputs)
    seed = node.attr("seed")
    attr_ratio = float(node.attr("ratio", 0.5))
    legacy_training = node.opset < 7 and not node.attr("is_test", 0)
    # with a seed, numpy's legacy Mersenne Twister gives the masks onnx's reference cases use
    rng = np.random.default_rng() if seed is None else np.random.RandomState(int(seed))

    def dropout(x, ratio=None, training_mode=None):
        r = attr_ratio if ratio is None or node.opset < 12 else float(np.asarray(ratio).reshape(-1)[0])
        training = bool(np.asarray(training_mode).reshape(-1)[0]) if training_mode is not None else legacy_training
        if not training or r == 0:
            y, mask = x, np.ones(x.shape, dtype=bool)
        else:
            mask = (rng.random(x.shape) if seed is None else rng.uniform(0, 1.0, x.shape)) >= r
            y = (x * mask / x.dtype.type(1 - r)).astype(x.dtype, copy=False)
        if n_out == 1:
            return y
        if node.opset < 10:
            mask = mask.astype(x.dtype)
        return y, mask

    return dropout


for _since in (1, 6, 7, 10, 12, 13, 22):
    kernel("Dropout", since=_since)(_dropout_builder)


# --------------------------------------------------------------------------------------------
# com.microsoft SkipLayerNormalization (ort-core's optimizer fuses residual Add + LayerNorm
# into it): output = LayerNorm(input + skip + bias) * gamma + beta over the last axis; outputs
# (output, mean, inv_std_var, input_skip_bias_sum), the middle two float32 as in onnxruntime.

_MS = "com.microsoft"
_SLN_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _check_skip_layer_norm(node) -> str | None:
    where = f"SkipLayerNormalization {node.name!r}"
    if len(node.inputs) < 3 or not all(node.inputs[:3]):
        return f"{where}: inputs input, skip and gamma are required"
    dtype = node.graph.value(node.inputs[0]).dtype
    if dtype not in _SLN_DTYPES:
        return f"{where}: input type {dtype}; the CPU kernel takes float16, float32, float64"
    return None


def _row_sum_of_squares(c: np.ndarray) -> np.ndarray:
    """sum(c * c) over the last axis with no full-size temporary."""
    if hasattr(np, "vecdot"):  # numpy >= 2
        return np.vecdot(c, c)
    return np.einsum("...i,...i->...", c, c)


@kernel("SkipLayerNormalization", since=1, domain=_MS, check=_check_skip_layer_norm)
def _skip_layer_norm(node, request):
    eps = float(node.attr("epsilon", 1e-12))  # onnxruntime's default for this op
    wanted = [bool(o) for o in node.outputs] + [False] * (4 - len(node.outputs))
    n_out = len(node.outputs)
    name = node.name
    mean_weights: dict[tuple[int, np.dtype], np.ndarray] = {}  # 1/hidden: row means as one BLAS GEMV
    compiled_layer_norm = CompiledLayerNorm(eps)

    def skip_layer_norm(x, skip, gamma, beta=None, bias=None):
        hidden = x.shape[-1]
        for label, v in (("gamma", gamma), ("beta", beta), ("bias", bias)):
            if v is not None and v.shape != (hidden,):
                raise ValueError(f"SkipLayerNormalization {name!r}: input {label} has shape {v.shape}; "
                                 f"expected ({hidden},), the last axis of input {x.shape}")
        if skip.shape[-1:] != (hidden,):
            raise ValueError(f"SkipLayerNormalization {name!r}: input skip has shape {skip.shape}; its last "
                             f"axis must be {hidden}, the last axis of input {x.shape}")
        if not wanted[1] and not wanted[2]:  # the compiled rows give no mean or inv_std
            compiled = compiled_layer_norm(x, skip, bias, gamma, beta, total=wanted[3])
            if compiled is not None:
                y, total = compiled
                return y if n_out == 1 else (y, None, None, total)[:n_out]
        work = np.dtype(_stat_dtype(x))  # half precision sums and normalises in float32
        s = np.add(x, skip, dtype=work)  # the one full-size buffer made, besides the sum output
        if bias is not None:
            s += bias
        key = (hidden, work)
        if key not in mean_weights:
            mean_weights[key] = np.full(hidden, 1.0 / hidden, work)
        inv_h = mean_weights[key]
        mean = np.matmul(s, inv_h)[..., None]  # gemv: a fraction of np.add.reduce's time
        if wanted[3]:  # the sum is an output: centre into a new buffer (as costly as a copy)
            total = s if s.dtype == x.dtype else s.astype(x.dtype)
            c = s - mean
        else:
            c = s
            c -= mean
        var = _row_sum_of_squares(c)[..., None]  # (the per-row arrays are small: few calls matter)
        var *= inv_h[0]
        var += eps
        inv_std = np.sqrt(var, out=var)
        np.reciprocal(inv_std, out=inv_std)
        c *= inv_std
        c *= gamma
        if beta is not None:
            c += beta
        y = c if c.dtype == x.dtype else c.astype(x.dtype)
        if n_out == 1:
            return y
        stat = np.float64 if x.dtype == np.float64 else np.float32
        outs = (y, mean.astype(stat, copy=False) if wanted[1] else None,
                inv_std.astype(stat, copy=False) if wanted[2] else None, total if wanted[3] else None)
        return outs[:n_out]

    return skip_layer_norm
