"""Activations and math ops: Relu family, Gelu, Mish, Selu, Elu, Celu, HardSigmoid, HardSwish,
Softplus, Softsign, ThresholdedRelu, PRelu, Shrink, Swish, Einsum, Det, CumSum, CumProd."""

from __future__ import annotations

import numpy as np

from ort_core import CORE_DOMAIN

from .._lazy import special  # scipy.special, imported at first use
from ..registry import kernel
from ._util import normalize_axis
from .elementwise import JIT_FLOATS, binary, hard_sigmoid_into, hard_swish_into, is_small_float, unary
from .fused import gelu as fused_gelu

# float16 inputs of multi-step activations are computed in float32: one rounding at the end
_HALF = (np.float16,)


def _float_attr(node, name: str, default: float) -> float:
    return float(node.attr(name, default))


@kernel("Relu")
def _relu(node, request):
    return unary(lambda x: np.maximum(x, x.dtype.type(0)))


@kernel("LeakyRelu")
def _leaky_relu(node, request):
    alpha = _float_attr(node, "alpha", 0.01)

    def leaky_relu(x):
        y = x * x.dtype.type(alpha)
        if 0.0 <= alpha <= 1.0:  # max(x, alpha*x) is x for x >= 0 and alpha*x below: one pass, no mask
            return np.maximum(x, y, out=y)
        return np.where(x >= 0, x, y)

    return unary(leaky_relu)


@kernel("PRelu")
def _prelu(node, request):
    def prelu(x, slope):
        if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
            # a per-channel slope [C] of [N, C, ...] (opset < 7 style, as exporters still emit)
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
        return np.where(x < 0, x * slope, x)

    return binary(prelu)


@kernel("Elu")
def _elu(node, request):
    alpha = _float_attr(node, "alpha", 1.0)
    return unary(lambda x: np.where(x > 0, x, x.dtype.type(alpha) * np.expm1(np.minimum(x, 0))), _HALF)


@kernel("Selu")
def _selu(node, request):
    alpha = _float_attr(node, "alpha", 1.67326319217681884765625)
    gamma = _float_attr(node, "gamma", 1.05070102214813232421875)

    def selu(x):
        t = x.dtype.type
        return t(gamma) * np.where(x > 0, x, t(alpha) * np.expm1(np.minimum(x, 0)))

    return unary(selu, _HALF)


@kernel("Celu", since=12)
def _celu(node, request):
    alpha = _float_attr(node, "alpha", 1.0)

    def celu(x):
        t = x.dtype.type
        return np.maximum(x, 0) + np.minimum(0, t(alpha) * np.expm1(x / t(alpha)))

    return unary(celu, _HALF)


@kernel("HardSigmoid")
def _hard_sigmoid(node, request):
    alpha = _float_attr(node, "alpha", 0.2)
    beta = _float_attr(node, "beta", 0.5)

    def hard_sigmoid(x):
        if x.dtype in JIT_FLOATS:
            x = np.ascontiguousarray(x)  # the compiled pass takes contiguous arrays
        return hard_sigmoid_into(x, np.empty_like(x), alpha, beta)

    return unary(hard_sigmoid, _HALF)


def _hard_swish(node, request):
    def hard_swish(x):
        if x.dtype in JIT_FLOATS:
            x = np.ascontiguousarray(x)  # the compiled pass takes contiguous arrays
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
    return unary(softplus, _HALF)


@kernel("Softsign")
def _softsign(node, request):
    return unary(lambda x: x / (x.dtype.type(1) + np.abs(x)), _HALF)


@kernel("Mish", since=18)
def _mish(node, request):
    return unary(lambda x: x * np.tanh(softplus(x)), _HALF)


@kernel("ThresholdedRelu", since=10)
def _thresholded_relu(node, request):
    alpha = _float_attr(node, "alpha", 1.0)
    return unary(lambda x: np.where(x > x.dtype.type(alpha), x, x.dtype.type(0)))


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
    alpha = _float_attr(node, "alpha", 1.0)
    return unary(lambda x: x * special.expit(x * x.dtype.type(alpha)), _HALF)


@kernel("Gelu", since=20)
def _gelu(node, request):
    approximate = node.attr("approximate", "none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu {node.name!r}: approximate {approximate!r} is not 'none' or 'tanh'")

    def gelu(x):
        t = x.dtype.type
        if approximate == "tanh":
            inner = t(np.sqrt(2 / np.pi)) * (x + t(0.044715) * x * x * x)
            return t(0.5) * x * (t(1) + np.tanh(inner))
        if x.dtype == np.float32:  # com.microsoft Gelu's kernel: one compiled pass with numba
            return fused_gelu(x)
        return t(0.5) * x * (t(1) + special.erf(x * t(1 / np.sqrt(2))))

    return unary(gelu, _HALF)


@kernel("Einsum", since=12)
def _einsum(node, request):
    equation = node.attr("equation")
    if isinstance(equation, bytes):
        equation = equation.decode()
    equation = equation.replace(" ", "")

    def einsum(*xs):
        if is_small_float(xs[0].dtype):
            return np.einsum(equation, *(x.astype(np.float32) for x in xs), optimize=True).astype(xs[0].dtype)
        return np.asarray(np.einsum(equation, *xs, optimize=len(xs) > 2)).astype(xs[0].dtype, copy=False)

    return einsum


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
        y = np.ascontiguousarray(y)
        return y.astype(x.dtype) if small else y

    return run


@kernel("CumSum", since=11)
def _cumsum(node, request):
    return _cumulative(node, np.cumsum, 0)


@kernel("CumProd", since=26)
def _cumprod(node, request):
    return _cumulative(node, np.cumprod, 1)
