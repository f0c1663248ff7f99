"""Activations and math ops: Relu family, Gelu, Mish, Selu, Elu, Celu, HardSigmoid, HardSwish,
Softplus, Softsign, ThresholdedRelu, PRelu, Shrink, Swish, Einsum, Det, CumSum, CumProd, and
onnxruntime's CDist (com.microsoft)."""

from __future__ import annotations

import functools
import math

import numpy as np

from ort_core import CORE_DOMAIN

from .._lazy import special  # scipy.special, imported at first use
from ..registry import kernel
from . import _jit
from ._util import normalize_axis, zero
from .elementwise import (
    JIT_FLOATS,
    binary,
    compiled_pass,
    compiled_quick_gelu,
    hard_sigmoid_into,
    hard_swish_into,
    is_small_float,
    unary,
)
from .fused import gelu as fused_gelu

# float16 inputs of multi-step activations are computed in float32: one rounding at the end
_HALF = (np.float16,)
_FLOAT32 = np.dtype(np.float32)


def _float_attr(node, name: str, default: float) -> float:
    return float(node.attr(name, default))


def _compiled_activation(name: str, x: np.ndarray, alpha: float, beta: float = 1.0) -> np.ndarray | None:
    """The float32-only ``_jit.activation`` loop ``name`` over ``x`` into a new array by
    ``compiled_pass``, or None (another dtype or layout, or numba absent: the caller's numpy
    formula)."""
    if x.dtype != _FLOAT32 or not _jit.enabled():
        return None
    y = np.empty(x.shape, _FLOAT32)
    return y if compiled_pass(name, x, y, alpha, beta) else None


@kernel("Relu")
def _relu(node, request):
    return unary(lambda x: np.maximum(x, zero(x.dtype)))


@kernel("LeakyRelu")
def _leaky_relu(node, request):
    alpha = _float_attr(node, "alpha", 0.01)

    def leaky_relu(x):
        compiled = _compiled_activation("leaky_relu", x, alpha)  # one pass where numpy makes two
        if compiled is not None:
            return compiled
        y = x * x.dtype.type(alpha)
        if 0.0 <= alpha <= 1.0:  # max(x, alpha*x) is x for x >= 0 and alpha*x below: one pass, no mask
            return np.maximum(x, y, out=y)
        return np.where(x >= 0, x, y)

    return unary(leaky_relu, _HALF)


@kernel("PRelu")
def _prelu(node, request):
    def prelu(x, slope):
        if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
            # a per-channel slope [C] of [N, C, ...] (opset < 7 style, as exporters still emit)
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
        if x.dtype.kind == "f" and slope.dtype == x.dtype and np.broadcast_shapes(x.shape, slope.shape) == x.shape \
                and np.isfinite(slope).all():
            # min(x, 0) * slope + max(x, 0): four vectorised passes, where np.where on a mixed
            # mask is branchy (a (1, 32, 80, 80) map 929 against 555 us for onnxruntime); equal
            # to it for finite slopes (an infinite one would make 0 * inf a NaN)
            y = np.minimum(x, x.dtype.type(0))
            y *= slope
            y += np.maximum(x, x.dtype.type(0))
            return y
        return np.where(x < 0, x * slope, x)

    return binary(prelu)


@kernel("Elu")
def _elu(node, request):
    alpha = _float_attr(node, "alpha", 1.0)

    def elu(x):
        y = _compiled_activation("elu", x, alpha)
        if y is not None:
            return y
        return np.where(x > 0, x, x.dtype.type(alpha) * np.expm1(np.minimum(x, 0)))

    return unary(elu, _HALF)


@kernel("Selu")
def _selu(node, request):
    alpha = _float_attr(node, "alpha", 1.67326319217681884765625)
    gamma = _float_attr(node, "gamma", 1.05070102214813232421875)

    def selu(x):
        y = _compiled_activation("elu", x, alpha, gamma)
        if y is not None:
            return y
        t = x.dtype.type
        return t(gamma) * np.where(x > 0, x, t(alpha) * np.expm1(np.minimum(x, 0)))

    return unary(selu, _HALF)


@kernel("Celu", since=12)
def _celu(node, request):
    alpha = _float_attr(node, "alpha", 1.0)

    def celu(x):
        y = _compiled_activation("celu", x, alpha)
        if y is not None:
            return y
        t = x.dtype.type
        return np.maximum(x, 0) + np.minimum(0, t(alpha) * np.expm1(x / t(alpha)))

    return unary(celu, _HALF)


@kernel("HardSigmoid")
def _hard_sigmoid(node, request):
    alpha = _float_attr(node, "alpha", 0.2)
    beta = _float_attr(node, "beta", 0.5)

    def hard_sigmoid(x):
        if x.dtype in JIT_FLOATS:
            x = np.asarray(x, order="C")  # the compiled pass takes contiguous arrays
        return hard_sigmoid_into(x, np.empty_like(x), alpha, beta)

    return unary(hard_sigmoid, _HALF)


def _hard_swish(node, request):
    def hard_swish(x):
        if x.dtype in JIT_FLOATS:
            x = np.asarray(x, order="C")  # the compiled pass takes contiguous arrays
        return hard_swish_into(x, np.empty_like(x))

    return unary(hard_swish, _HALF)


kernel("HardSwish", since=14)(_hard_swish)
# the same op for models below opset 14, made by ort-core's HardSwish fusion (level ALL)
kernel("HardSwish", domain=CORE_DOMAIN)(_hard_swish)


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|) (about 10x faster than
    numpy's logaddexp)."""
    y = np.abs(x)
    np.negative(y, out=y)
    np.exp(y, out=y)
    np.log1p(y, out=y)
    y += np.maximum(x, x.dtype.type(0))
    return y


@kernel("Softplus")
def _softplus(node, request):
    def softplus_kernel(x):
        y = _compiled_activation("softplus", x, 0.0)
        return y if y is not None else softplus(x)

    return unary(softplus_kernel, _HALF)


@kernel("Softsign")
def _softsign(node, request):
    def softsign(x):
        y = _compiled_activation("softsign", x, 0.0)
        return y if y is not None else x / (x.dtype.type(1) + np.abs(x))

    return unary(softsign, _HALF)


@kernel("Mish", since=18)
def _mish(node, request):
    def mish(x):
        y = _compiled_activation("mish", x, 0.0)
        return y if y is not None else x * np.tanh(softplus(x))

    return unary(mish, _HALF)


@kernel("ThresholdedRelu", since=10)
def _thresholded_relu(node, request):
    alpha = _float_attr(node, "alpha", 1.0)

    def thresholded_relu(x):
        y = _compiled_activation("thresholded_relu", x, alpha)
        return y if y is not None else np.where(x > x.dtype.type(alpha), x, x.dtype.type(0))

    return unary(thresholded_relu)


@kernel("Shrink", since=9)
def _shrink(node, request):
    bias = _float_attr(node, "bias", 0.0)
    lambd = _float_attr(node, "lambd", 0.5)

    def shrink(x):
        # in float64 for integer inputs (the spec allows them), cast back by ``unary``
        w = x.astype(np.float64) if x.dtype.kind in "iu" else x
        t = w.dtype.type
        return np.where(w < -lambd, w + t(bias), np.where(w > lambd, w - t(bias), t(0)))

    return unary(shrink, _HALF)


@kernel("Swish", since=24)
def _swish(node, request):
    """x * sigmoid(alpha x): for contiguous float32, com.microsoft QuickGelu's compiled pass (the
    same function; scipy's expit and a multiply took 6.7x onnxruntime's time on a (1, 32, 80, 80)
    map)."""
    alpha = _float_attr(node, "alpha", 1.0)

    def swish(x):
        y = compiled_quick_gelu(x, alpha)
        return y if y is not None else x * special.expit(x * x.dtype.type(alpha))

    return unary(swish, _HALF)


@kernel("Gelu", since=20)
def _gelu(node, request):
    approximate = node.attr("approximate", "none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu {node.name!r}: approximate {approximate!r} is not 'none' or 'tanh'")

    def gelu(x):
        if approximate == "tanh" or x.dtype == np.float32:  # com.microsoft's kernels: one compiled pass
            return fused_gelu(x, tanh_form=approximate == "tanh")
        t = x.dtype.type
        return t(0.5) * x * (t(1) + special.erf(x * t(1 / np.sqrt(2))))

    return unary(gelu, _HALF)


@kernel("Einsum", since=12)
def _einsum(node, request):
    equation = node.attr("equation")
    if isinstance(equation, bytes):
        equation = equation.decode()
    equation = equation.replace(" ", "")

    def einsum(*xs):
        small = is_small_float(xs[0].dtype)
        ws = [x.astype(np.float32) for x in xs] if small else xs
        plan = _pair_contraction(equation, tuple(w.shape for w in ws)) if len(ws) == 2 else None
        if plan is not None:
            y = plan(*ws)
        else:
            y = np.einsum(equation, *ws, optimize=small or len(ws) > 2)
        return np.asarray(y).astype(xs[0].dtype, copy=False)

    return einsum


@functools.lru_cache(maxsize=256)
def _pair_contraction(equation: str, shapes: tuple[tuple[int, ...], ...]):
    """A two-operand einsum with an explicit output as one matrix product: each operand summed
    over the labels only it has (and the output lacks), transposed to (batch, kept, contracted),
    reshaped to 3-D, multiplied (BLAS) and put back in the output's order. numpy's own einsum
    loops in C without BLAS (TF-exported attention, "abcd,cde->abe": 69 us against 8 us), and
    its optimize=True path costs ~15 us of planning a call. None where the equation has an
    ellipsis, a label repeated in one operand or in the output, or a label whose sizes differ
    between the operands (broadcasting): numpy's einsum handles those."""
    if "..." in equation or "->" not in equation:
        return None
    ins, out = equation.split("->")
    terms = ins.split(",")
    if len(terms) != 2 or any(len(t) != len(s) for t, s in zip(terms, shapes)):
        return None
    la, lb = terms
    if len(set(la)) != len(la) or len(set(lb)) != len(lb) or len(set(out)) != len(out):
        return None
    size = dict(zip(la, shapes[0]))
    for c, n in zip(lb, shapes[1]):
        if size.setdefault(c, n) != n:
            return None
    if any(c not in size for c in out):
        return None
    a_sum = tuple(k for k, c in enumerate(la) if c not in lb and c not in out)
    b_sum = tuple(k for k, c in enumerate(lb) if c not in la and c not in out)
    la2 = [c for c in la if c in lb or c in out]
    lb2 = [c for c in lb if c in la or c in out]
    batch = [c for c in out if c in la2 and c in lb2]
    contract = [c for c in la2 if c in lb2 and c not in out]
    a_keep = [c for c in la2 if c not in lb2]
    b_keep = [c for c in lb2 if c not in la2]
    a_order = tuple(la2.index(c) for c in batch + a_keep + contract)
    b_order = tuple(lb2.index(c) for c in batch + contract + b_keep)
    nb, m, k, n = (math.prod(size[c] for c in g) for g in (batch, a_keep, contract, b_keep))
    product_labels = batch + a_keep + b_keep
    product_shape = tuple(size[c] for c in product_labels)
    out_order = tuple(product_labels.index(c) for c in out)
    reorder = out_order != tuple(range(len(out)))

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a_sum:
            a = a.sum(axis=a_sum)
        if b_sum:
            b = b.sum(axis=b_sum)
        a = a.transpose(a_order).reshape(nb, m, k)
        b = b.transpose(b_order).reshape(nb, k, n)
        y = a[0] @ b[0] if nb == 1 else np.matmul(a, b)
        y = y.reshape(product_shape)
        return np.ascontiguousarray(y.transpose(out_order)) if reorder else y

    return run


@kernel("Det", since=11)
def _det(node, request):
    def det(x):
        if x.dtype in (np.float32, np.float64):
            return np.asarray(np.linalg.det(x))
        return np.asarray(np.linalg.det(x.astype(np.float32))).astype(x.dtype)  # float16, bfloat16

    return det


def _cumulative(node, fn, identity: int):
    exclusive = bool(node.attr("exclusive", 0))
    reverse = bool(node.attr("reverse", 0))

    def run(x, axis):
        small = is_small_float(x.dtype)
        w = x.astype(np.float32) if small else x
        a = normalize_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim)
        if reverse:
            w = np.flip(w, axis=a)
        y = fn(w, axis=a, dtype=w.dtype)
        if exclusive:
            # shift by one along the axis, the first element becomes the identity
            pad = np.full(y.shape[:a] + (1,) + y.shape[a + 1 :], identity, dtype=y.dtype)
            y = np.concatenate([pad, np.take(y, np.arange(y.shape[a] - 1), axis=a)], axis=a)
        if reverse:
            y = np.flip(y, axis=a)
        y = np.asarray(y, order="C")
        return y.astype(x.dtype) if small else y

    return run


@kernel("CumSum", since=11)
def _cumsum(node, request):
    return _cumulative(node, np.cumsum, 0)


@kernel("CumProd", since=26)
def _cumprod(node, request):
    return _cumulative(node, np.cumprod, 1)


_CDIST_METRICS = ("sqeuclidean", "euclidean")


@kernel("CDist", domain="com.microsoft")
def _cdist(node, request):
    """onnxruntime's CDist: the (squared) Euclidean distance of every row of A (M, K) to every
    row of B (N, K), computed as onnxruntime does it (-2 A B^T, then A's squared norms added,
    then B's; the absolute value, as the GEMM may leave a tiny negative), so that rankings
    of near-ties (skl2onnx's nearest-neighbour models take TopK of them) come out the same."""
    metric = node.attr("metric", "sqeuclidean")
    metric = metric.decode() if isinstance(metric, bytes) else str(metric)
    if metric not in _CDIST_METRICS:
        raise ValueError(f"CDist {node.name!r}: metric {metric!r} is not one of {', '.join(_CDIST_METRICS)}")

    def cdist(a, b):
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
            raise ValueError(f"CDist {node.name!r}: A and B must be (M, K) and (N, K), got {list(a.shape)} and "
                             f"{list(b.shape)}")
        y = (a @ b.T) * a.dtype.type(-2)
        y += np.einsum("ij,ij->i", a, a)[:, None]
        y += np.einsum("ij,ij->i", b, b)[None, :]
        np.abs(y, out=y)
        return np.sqrt(y, out=y) if metric == "euclidean" else y

    return cdist
