"""Reductions and normalisations over axes."""

from __future__ import annotations

import math

import numpy as np

from ort_core import CORE_DOMAIN

from ..registry import kernel
from . import _jit
from ._util import as_dtype, as_float32, const_input, ones_vector
from .elementwise import JIT_FLOATS


def _small(dtype: np.dtype) -> bool:
    return dtype.type.__module__ == "ml_dtypes"  # bfloat16 and the other ml_dtypes types


#: a trailing axis shorter than this is summed by adding its slices: numpy's reduction over a
#: short innermost axis pays a loop's setup for each output element (Whisper's power spectrum,
#: (1, 3000, 201, 2) summed over its [re, im] pairs: 7.6 ms, against 0.36 ms by slices)
SHORT_AXIS = 8


#: the ufunc's reduce itself: np.sum's Python wrapper was a third of a small reduction's cost
_add_reduce = np.add.reduce


def _short_last_axis(x: np.ndarray, axis) -> bool:
    return (axis == (x.ndim - 1,) and 1 < x.shape[-1] < SHORT_AXIS and x.size >= 1024
            and x.dtype.kind in "fiu" and x.dtype != np.float16)


def by_slices(ufunc: np.ufunc, x: np.ndarray, keepdims: bool) -> np.ndarray:
    """``ufunc`` (np.add, np.maximum, np.minimum) over x's short last axis, one slice after
    another: the same values as numpy's reduction (its sums over fewer than eight values are
    sequential too; maximum and minimum keep NaN as np.max does)."""
    y = ufunc(x[..., 0], x[..., 1])
    for i in range(2, x.shape[-1]):
        ufunc(y, x[..., i], out=y)
    return y[..., None] if keepdims else y


def _sum(x, axis, keepdims):
    if _short_last_axis(x, axis):
        return by_slices(np.add, x, keepdims)
    return _add_reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _mean(x, axis, keepdims):
    """The sum over the count, as np.mean computes a floating-point mean (the same bits), without
    its Python wrapper (6.8 -> 3.6 us on a (1, 129, 7) input); an integer one is np.mean's
    (float64)."""
    count = x.size if axis is None else math.prod(x.shape[a] for a in axis)
    if count == 0:  # the mean of nothing is 0 for onnxruntime and torch (numpy: NaN and a warning)
        return np.zeros_like(_sum(x, axis, keepdims))
    if x.dtype.kind != "f":
        return np.mean(x, axis=axis, keepdims=keepdims)
    total = _sum(x, axis, keepdims)
    return np.true_divide(total, total.dtype.type(count))


def _max(x, axis, keepdims):
    if _short_last_axis(x, axis):  # (a word segmenter's max over 3 values: 169 -> 12 us)
        return by_slices(np.maximum, x, keepdims)
    low = -np.inf if x.dtype.kind == "f" else (False if x.dtype == np.bool_ else np.iinfo(x.dtype).min)
    return np.max(x, axis=axis, keepdims=keepdims, initial=low)  # empty sets give the identity


def _min(x, axis, keepdims):
    if _short_last_axis(x, axis):
        return by_slices(np.minimum, x, keepdims)
    high = np.inf if x.dtype.kind == "f" else (True if x.dtype == np.bool_ else np.iinfo(x.dtype).max)
    return np.min(x, axis=axis, keepdims=keepdims, initial=high)


def _log_sum_exp(x, axis, keepdims):
    if x.size == 0:
        return np.log(_sum(np.exp(x), axis, keepdims))
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)  # all -inf rows stay -inf, not NaN
    y = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis=axis if axis is not None else tuple(range(x.ndim)))


_REDUCTIONS = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    "ReduceL1": lambda x, axis, keepdims: _sum(np.abs(x), axis, keepdims),
    "ReduceL2": lambda x, axis, keepdims: np.sqrt(_sum(np.square(x.astype(np.float64) if x.dtype.kind in "iu" else x),
                                                       axis, keepdims)),
    "ReduceSumSquare": lambda x, axis, keepdims: _sum(np.square(x), axis, keepdims),
    "ReduceLogSum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
    "ReduceLogSumExp": _log_sum_exp,
}
# first opset where ``axes`` is an input instead of an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce(op_type: str, fn):
    """A Reduce* kernel for both forms: axes as attribute or as the second input."""

    accumulates = op_type not in ("ReduceMax", "ReduceMin")
    # reducing axes that all have length 1 leaves the values as they are (a reshape) for these
    identity_on_ones = op_type in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")

    def build(node, request):
        keepdims = bool(node.attr("keepdims", 1))
        noop = bool(node.attr("noop_with_empty_axes", 0))
        attr_axes = node.attr("axes")
        const_axes = const_input(node, request, 1)
        # the normalised axes per input rank, for attribute or constant axes (set work per run
        # was most of a small reduction's cost)
        normalised: dict[int, tuple[int, ...]] = {}

        def run(x, axes=None):
            kept = axes is None or axes is const_axes
            if axes is None:
                axes = attr_axes
            if axes is None or len(axes) == 0:
                if noop:
                    # no reduction, but each value still takes the reduction's own terms (|x|,
                    # x^2, log x), as onnxruntime and onnx.reference give them: reduced over a
                    # new axis of length 1
                    return x if identity_on_ones else reduce_values(x[..., None], (x.ndim,), False)
                axes = None
            elif kept and x.ndim in normalised:
                axes = normalised[x.ndim]
            else:
                axes = tuple(sorted({int(a) + x.ndim if int(a) < 0 else int(a) for a in np.asarray(axes).ravel()}))
                if kept:
                    normalised[x.ndim] = axes
            if identity_on_ones and axes is not None and all(x.shape[a] == 1 for a in axes if 0 <= a < x.ndim):
                if not all(0 <= a < x.ndim for a in axes):
                    raise ValueError(f"{op_type}: axes {list(axes)} out of range for an input of rank {x.ndim}")
                if keepdims:
                    return x
                return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))
            return reduce_values(x, axes, keepdims)

        def reduce_values(x, axes, keep):
            # bfloat16 & co. have no numpy loops; float16 sums accumulate in float32 (as
            # onnxruntime does) instead of rounding every partial sum to 11 bits
            small = _small(x.dtype) or (x.dtype == np.float16 and accumulates)
            w = as_float32(x) if small else x
            with np.errstate(divide="ignore", invalid="ignore"):
                y = np.asarray(fn(w, axes, keep))
            return as_dtype(y, x.dtype)

        return run

    return build


for _name, _fn in _REDUCTIONS.items():
    kernel(_name, 1)(_reduce(_name, _fn))


def _arg(op_type: str, fn):
    def build(node, request):
        axis = int(node.attr("axis", 0))
        keepdims = bool(node.attr("keepdims", 1))
        last = bool(node.attr("select_last_index", 0))

        def run(x):
            a = axis + x.ndim if axis < 0 else axis
            w = x.astype(np.float32) if _small(x.dtype) else x
            # (numpy's keepdims: np.expand_dims after it cost 1.7 us, twice the search on (1, 30))
            if last:  # the last occurrence: search the reversed axis and map back
                y = (w.shape[a] - 1) - fn(np.flip(w, axis=a), axis=a, keepdims=keepdims)
            else:
                y = fn(w, axis=a, keepdims=keepdims)
            return y.astype(np.int64, copy=False)

        return run

    return build


kernel("ArgMax", 1)(_arg("ArgMax", np.argmax))
kernel("ArgMin", 1)(_arg("ArgMin", np.argmin))


def _coerced(axis: int, fn):
    """Opsets before 13: the input is seen as 2-D [prod(shape[:axis]), prod(shape[axis:])]."""

    def run(x):
        a = axis + x.ndim if axis < 0 else axis
        rows = math.prod(x.shape[:a])
        return fn(x.reshape(rows, -1), 1).reshape(x.shape)

    return run


def _on_axis(axis: int, fn):
    return lambda x: fn(x, axis if axis >= 0 else axis + x.ndim)


def _in_float(fn):
    """``fn(x, axis)`` with float16 and the ml_dtypes floats (bfloat16, ...) computed in float32
    and rounded once at the end, as onnxruntime (whose CPU kernels take float32 and get float16
    through casts) computes them. Softmax step by step in float16, as onnx's reference does it,
    was off onnxruntime's on 4,891 of 8,192 values of a (64, 128) input, in float32 on 2;
    LogSoftmax's log(softmax(x)) in float16 loses digits (and gives -inf where softmax
    underflows)."""

    def run(x, axis):
        if _small(x.dtype) or x.dtype == np.float16:
            return as_dtype(fn(as_float32(x), axis), x.dtype)
        return fn(x, axis)

    return run


def row_sums(x: np.ndarray, ones: np.ndarray) -> np.ndarray:
    """Sums over the last axis of contiguous ``x`` as one GEMV with a ones vector (BLAS; numpy's
    sum reduces each row separately: about 6x slower on (B, N, S, 64)), keeping that axis."""
    return np.matmul(x.reshape(-1, ones.shape[0]), ones).reshape(x.shape[:-1] + (1,))


#: softmax without the row max first is redone with it where a row's exponentials sum below
#: this, or to inf or NaN (where exp overflowed, or underflowed enough to cost precision)
EXP_SUM_TINY = np.float32(1e-30)


#: inputs of fewer elements take the plain softmax (the max subtracted): the fast path's fixed
#: costs (an errstate, the GEMV, the checks of the sums) are about 8 us; the plain one takes 4
#: on (1, 10), and they cross near 2K elements (16x128: 10.0 / 9.1 us; 32x128: 11.5 / 14.5)
SMALL_SOFTMAX = 2048


def _compiled_rows(x: np.ndarray, axis: int, log: bool) -> np.ndarray | None:
    """Softmax (``log``: LogSoftmax) of a float32 input over its last axis by the compiled
    row loop (``_jit.softmax_rows``), else None. One call where numpy makes five, vectorised
    since its exp is (us, compiled / numpy: (1, 10) 0.3 / 6.2; (1, 6, 48, 48) 15 / 58;
    (256, 256) 65 / 161; (8, 12, 128, 128) 1584 / 4206; (1, 40, 6625) 253 / 513)."""
    if x.dtype != np.float32 or not x.size or not x.shape[axis]:
        return None
    if axis != x.ndim - 1 and any(d != 1 for d in x.shape[axis + 1:]):
        return None  # (an axis followed by ones only is the last one: attention weights (1, S, 1))
    n = x.shape[axis]
    parts = _jit.split_parts(x.size, x.size // n, _jit.SPLIT_MIN_TRANSCENDENTAL)
    rows = _jit.softmax_rows(parts)
    if rows is None:
        return None
    # a strided view (a Transpose's output, say: attention scores) is copied first: numpy's
    # five passes over it took 30 us on a BERT's (1, 8, 32, 32), the copy and the loop 13
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    rows(x.reshape(-1, n), y.reshape(-1, n), log, parts)
    return y


@_in_float
def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    y = _compiled_rows(x, axis, log=False)
    if y is not None:
        return y
    if axis == x.ndim - 1 and x.dtype in JIT_FLOATS and x.flags.c_contiguous and x.size >= SMALL_SOFTMAX:
        # exp, row sums as a GEMV, one multiply by their reciprocals: 2 passes instead of 5
        # (1.8x on ocr-rec's (1, 40, 6625) output, 2.8x on (8, 12, 128, 128) scores); the max,
        # a slow reduction, is only subtracted where a row needs it, and then for all
        # (an overflow, in the exponentials or their sums, sends the rows the other way:
        # numpy's warning about it is not the user's business)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            e = np.exp(x)
            sums = row_sums(e, ones_vector(x.shape[-1], x.dtype))
        if sums.min() > EXP_SUM_TINY and sums.max() < np.inf:  # (NaN fails both)
            np.reciprocal(sums, out=sums)
            e *= sums
            return e
    e = x - x.max(axis=axis, keepdims=True)  # the one temporary; the rest is in place
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


@_in_float
def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    y = _compiled_rows(x, axis, log=True)
    if y is not None:
        return y
    shifted = x - x.max(axis=axis, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted


def hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    w = x.astype(np.float32) if _small(x.dtype) else x
    index = np.argmax(w, axis=axis, keepdims=True)  # the first maximum wins
    y = np.zeros(x.shape, dtype=x.dtype)
    np.put_along_axis(y, index, np.ones((), dtype=x.dtype), axis=axis)
    return y


def _empty_passes(run):
    """The kernel ``run(x)``, with an empty ``x`` answered by an empty output of its shape, as
    onnxruntime answers it (numpy's max has no identity to reduce an empty axis with, and the
    2-D view of opsets before 13 cannot be made: a table model's Softmax over no detections)."""
    return lambda x: np.empty(x.shape, x.dtype) if x.size == 0 else run(x)


for _name, _fn in {"Softmax": softmax, "LogSoftmax": log_softmax, "Hardmax": hardmax}.items():
    kernel(_name, 1)(lambda node, request, fn=_fn: _empty_passes(_coerced(int(node.attr("axis", 1)), fn)))
    kernel(_name, 13)(lambda node, request, fn=_fn: _empty_passes(_on_axis(int(node.attr("axis", -1)), fn)))


# "absent" for the compiled row loop's optional arrays (one type per argument: one compilation)
_ABSENT_ROWS = np.empty((0, 0), np.float32)
_ABSENT_VECTOR = np.empty(0, np.float32)


class CompiledLayerNorm:
    """One kernel's LayerNorm (``rms``: RMS normalisation, no mean) over the last axis of
    float32 ``x`` (+ ``skip`` + ``bias``) by the compiled row loop (``_jit.layer_norm_rows``):
    ``__call__`` gives (y, the sum x + skip + bias or None where ``total`` is false), or None
    where it does not apply (numba not installed, another dtype, a broadcast skip,
    non-contiguous arrays): the caller's numpy path runs. The parameters (bias, gamma, beta:
    a model's constants, the same arrays every run) are checked once for the arrays last seen,
    not at every call: the checks and reshapes were 2 of a (1, 128) LayerNorm's 3 us, the
    loop 0.85."""

    def __init__(self, eps: float, rms: bool = False):
        self.eps, self.rms = np.float32(eps), rms
        self.fit: tuple = ()  # (bias, gamma, beta, their length) last seen fit for the loop

    def _parameters_fit(self, h: int, bias: np.ndarray | None, gamma: np.ndarray, beta: np.ndarray | None) -> bool:
        fit = self.fit
        if fit and fit[0] is bias and fit[1] is gamma and fit[2] is beta and fit[3] == h:
            return True
        for v in (bias, gamma, beta):
            if v is not None and (v.shape != (h,) or v.dtype != np.float32 or not v.flags.c_contiguous):
                return False
        self.fit = (bias, gamma, beta, h)
        return True

    def __call__(self, x: np.ndarray, skip: np.ndarray | None, bias: np.ndarray | None, gamma: np.ndarray,
                 beta: np.ndarray | None, total: bool) -> tuple | None:
        if x.dtype != np.float32 or not x.ndim or not x.size or not x.flags.c_contiguous or not _jit.enabled():
            return None
        h = x.shape[-1]
        if skip is not None and (skip.shape != x.shape or skip.dtype != np.float32 or not skip.flags.c_contiguous):
            return None
        if not self._parameters_fit(h, bias, gamma, beta):
            return None
        y = np.empty_like(x)
        out = np.empty_like(x) if total else None
        rows = x.size // h
        parts = _jit.split_parts(x.size, rows)
        flat = x.ndim == 2  # (rows, h) already: no reshapes (a fifth of a small call's cost)
        _jit.layer_norm_rows(parts)(
            x if flat else x.reshape(rows, h), _ABSENT_ROWS if skip is None else skip if flat else skip.reshape(rows, h),
            _ABSENT_VECTOR if bias is None else bias, gamma, _ABSENT_VECTOR if beta is None else beta, self.eps,
            y if flat else y.reshape(rows, h), _ABSENT_ROWS if out is None else out if flat else out.reshape(rows, h),
            self.rms, parts)
        return y, out


def _layer_norm(node, request):
    axis = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))
    n_out = len(node.outputs)
    # stash_type 1 (the default): a float16/bfloat16 input is normalised in float32, its Mean and
    # InvStdDev given in float32, and the output rounded once, as onnxruntime does (step by step
    # in float16, 2,804 of 6,256 outputs were off the correctly rounded value; onnxruntime 1)
    stash_float32 = int(node.attr("stash_type", 1)) == 1
    compiled_layer_norm = CompiledLayerNorm(eps)

    def layer_norm(x, scale, bias=None):
        if n_out == 1 and axis in (-1, x.ndim - 1):
            compiled = compiled_layer_norm(x, None, None, scale, bias, total=False)
            if compiled is not None:
                return compiled[0]
        out_type = x.dtype
        if stash_float32 and x.dtype.itemsize < 4 and x.dtype.kind in "fV":  # float16, bfloat16
            x = as_float32(x)
            scale = as_float32(scale)
            bias = None if bias is None else as_float32(bias)
        a = axis if axis >= 0 else axis + x.ndim
        axes = tuple(range(a, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        centered = x - mean
        var = np.mean(centered * centered, axis=axes, keepdims=True)
        inv_std = (1.0 / np.sqrt(var + eps)).astype(x.dtype, copy=False)
        y = centered * inv_std * scale
        if bias is not None:
            y += bias
        y = as_dtype(y, out_type)
        if n_out == 1:
            return y
        if stash_float32:  # Mean and InvStdDev are of stash_type's float32 (a float64 input's too, as onnxruntime gives them)
            mean, inv_std = mean.astype(np.float32, copy=False), inv_std.astype(np.float32, copy=False)
        return (y, mean, inv_std)[:n_out]

    return layer_norm


kernel("LayerNormalization", since=17)(_layer_norm)
# the same op for models below opset 17, made by ort-core's LayerNorm fusion (level ALL)
kernel("LayerNormalization", domain=CORE_DOMAIN)(_layer_norm)


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
    def global_avg_pool(x):
        if x.dtype == np.float16:  # in float32, rounded once (numpy's float16 mean: 1.5 ms on 1x96x56x56)
            return as_dtype(global_avg_pool(as_float32(x)), x.dtype)
        if x.dtype.kind != "f" or x.dtype.itemsize < 4 or x.ndim < 3 or not x.flags.c_contiguous or not x.size:
            return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)
        # float32/64: the per-channel sums as one matrix-vector product with a vector of ones
        # (BLAS: 5x faster than np.add.reduce's pairwise sum on ocr-det's 96x80x80 maps, 28 vs
        # 151 us, and 2x on small ones), then an in-place divide; squeeze-excite blocks run
        # this many times per model
        n, c = x.shape[:2]
        pixels = x.size // (n * c)
        y = np.matmul(x.reshape(n * c, pixels), ones_vector(pixels, x.dtype))
        np.divide(y, x.dtype.type(pixels), out=y)
        return y.reshape((n, c) + (1,) * (x.ndim - 2))

    return global_avg_pool


@kernel("GlobalMaxPool")
def _global_max_pool(node, request):
    return lambda x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True)

