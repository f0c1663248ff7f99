"""Kernels for the fused ops ort-core's optimizer produces (onnxruntime's ``com.microsoft``
contrib ops, same inputs and attributes): FusedConv, FusedGemm, Gelu, BiasGelu, FusedMatMul.

They save whole passes over the data: the activation runs in place on the Conv/Gemm output,
the scaling of FusedMatMul rides on the product, and Gelu / BiasGelu on float32 are one
compiled pass when numba is installed (``_jit``), else a float32 erf in a dozen numpy passes
instead of scipy's scalar loop.
"""

from __future__ import annotations

import numpy as np

from .._lazy import special  # scipy.special, imported at first use
from ..registry import kernel
from . import _jit
from ._util import constant_weight
from .nn import build_conv, build_gemm, make_activation, matmul

MS = "com.microsoft"


@kernel("FusedConv", domain=MS)
def _fused_conv(node, request):
    name, params = str(node.attr("activation", "") or ""), list(node.attr("activation_params") or [])
    has_z = len(node.inputs) > 3 and bool(node.inputs[3])
    if not has_z:
        return build_conv(node, request, name, params)
    activation = make_activation(name, params)
    plain = build_conv(node, request)

    def fused_conv_sum(x, w, b=None, z=None):  # Y = activation(conv + Z)
        y = plain(x, w, b)
        if z is not None:
            y += z
        if activation is not None:
            activation(y)
        return y

    return fused_conv_sum


@kernel("FusedGemm", domain=MS)
def _fused_gemm(node, request):
    name = str(node.attr("activation", "") or "")
    params = [float(node.attr("activation_alpha", 0.01 if name == "LeakyRelu" else 0.2))]
    if node.attr("activation_beta") is not None:
        params.append(float(node.attr("activation_beta")))
    elif name == "HardSigmoid":
        params.append(0.5)
    if name == "Clip":
        params = [float(node.attr("activation_alpha", -np.inf)), float(node.attr("activation_beta", np.inf))]
    return build_gemm(node, request, name, params if name in ("LeakyRelu", "HardSigmoid", "Clip") else [])


# Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7 over the reals, below float32's resolution
_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf_f32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """erf of a float32 array in a dozen vectorised passes (scipy's erf is a scalar loop)."""
    a = np.abs(x)
    t = a * np.float32(_P)
    t += np.float32(1)
    np.reciprocal(t, out=t)
    poly = t * np.float32(_A[4])
    for coeff in (_A[3], _A[2], _A[1], _A[0]):
        poly += np.float32(coeff)
        poly *= t
    with np.errstate(over="ignore"):  # x^2 -> inf past 1.8e19: exp(-inf) = 0 is the limit
        np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # poly * exp(-x^2)
    result = out if out is not None else poly
    np.subtract(np.float32(1), poly, out=result)
    np.copysign(result, x, out=result)
    return result


def gelu(x: np.ndarray, bias: np.ndarray | None = None, tanh_form: bool = False) -> np.ndarray:
    """0.5 * v * (1 + erf(v / sqrt(2))) of v = x + bias (BiasGelu: bias broadcast over the
    last axis, or by numpy's rules where it is not a vector of that length); ``tanh_form``: the
    tanh approximation 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))) (FastGelu). float32
    runs as one compiled pass when numba is installed (``_jit.gelu_rows``), else by numpy (erf
    through erf_f32)."""
    if x.ndim == 0:  # numpy's ufuncs return scalars for 0-d arrays: erf_f32's out= needs arrays
        shape = () if bias is None else np.broadcast_shapes((), np.shape(bias))
        return gelu(x.reshape(1), bias, tanh_form).reshape(shape)
    if x.dtype == np.float32 and x.size and _jit.enabled() and _compiled_bias(x, bias):
        h = x.shape[-1]
        xc = np.ascontiguousarray(x).reshape(-1, h)
        y = np.empty(x.shape, dtype=np.float32)
        b = _NO_BIAS if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        parts = _jit.split_parts(x.size, xc.shape[0], _jit.SPLIT_MIN_TRANSCENDENTAL)
        _jit.gelu_rows(parts)(xc, b, y.reshape(-1, h), tanh_form, parts)
        return y
    if bias is not None:
        x = x + bias
    t = x.dtype.type
    if tanh_form:
        inner = t(_SQRT_2_OVER_PI) * (x + t(0.044715) * x * x * x)
        return (t(0.5) * x * (t(1) + np.tanh(inner))).astype(x.dtype, copy=False)
    if x.dtype == np.float32:
        y = erf_f32(x * np.float32(1 / np.sqrt(2)))
    else:
        y = special.erf(x / np.sqrt(2)).astype(x.dtype, copy=False)
    y += 1
    y *= t(0.5)  # halved before the product: 2 * x overflowed near float32's max
    y *= x
    return y


_SQRT_2_OVER_PI = 0.7978845608028654
_NO_BIAS = np.empty(0, dtype=np.float32)


def _compiled_bias(x: np.ndarray, bias: np.ndarray | None) -> bool:
    """Whether the compiled loop takes this bias: none, or a float32 vector of x's last axis."""
    if bias is None:
        return True
    return bias.dtype == np.float32 and bias.shape == (x.shape[-1],)


@kernel("Gelu", domain=MS)
def _gelu(node, request):
    return gelu


@kernel("BiasGelu", domain=MS)
def _bias_gelu(node, request):
    return gelu


def _rows_after_batch(x: np.ndarray) -> np.ndarray:
    """FusedMatMul's transBatch view of x (rank r >= 3): axis 0 moves behind the batch axes
    1 .. r-2, (M, B1, .., K) -> (B1, .., M, K), as onnxruntime reads it (checked against its
    kernel at ranks 3 and 4, with and without transA / transB)."""
    r = x.ndim
    return x.transpose((*range(1, r - 1), 0, r - 1))


@kernel("FusedMatMul", domain=MS)
def _fused_matmul(node, request):
    alpha = float(node.attr("alpha", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))
    trans_batch_a, trans_batch_b = bool(node.attr("transBatchA", 0)), bool(node.attr("transBatchB", 0))

    b_given, b_ready = constant_weight(node, request, 1)

    def fused_matmul(a, b):
        if b is b_given:
            b = b_ready
        if trans_batch_a or trans_batch_b:
            if a.ndim != b.ndim or a.ndim < 3:
                raise ValueError(f"FusedMatMul {node.name!r}: transBatchA / transBatchB need A and B of one rank, 3 "
                                 f"or more; A has shape {list(a.shape)}, B {list(b.shape)}")
            a = _rows_after_batch(a) if trans_batch_a else a
            b = _rows_after_batch(b) if trans_batch_b else b
        if trans_a:
            a = a.T if a.ndim == 2 else np.swapaxes(a, -1, -2)
        if trans_b:
            b = b.T if b.ndim == 2 else np.swapaxes(b, -1, -2)
        y = matmul(a, b)
        if alpha != 1.0:
            if y.ndim == 0:
                return y * y.dtype.type(alpha)
            y *= y.dtype.type(alpha)
        return y

    return fused_matmul
