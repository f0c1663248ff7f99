"""Elementwise math, comparisons and activations (numpy ufuncs, broadcasting as ONNX does)."""

from __future__ import annotations

import numpy as np
from scipy import special

from ..registry import kernel


def _ufunc(op_type: str, fn, since: int = 1) -> None:
    kernel(op_type, since)(lambda node, request: fn)


for _op, _fn in {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "Equal": np.equal, "Less": np.less, "Greater": np.greater,
    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not,
    "Neg": np.negative, "Abs": np.absolute, "Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log,
    "Tanh": np.tanh, "Reciprocal": np.reciprocal, "Floor": np.floor, "Ceil": np.ceil,
    "Sin": np.sin, "Cos": np.cos, "Sign": np.sign, "IsNaN": np.isnan,
}.items():
    _ufunc(_op, _fn)


@kernel("Div")
def _div(node, request):
    def div(a, b):
        if a.dtype.kind in "iu":
            # ONNX integer division truncates toward zero (C semantics), numpy floors
            q = np.floor_divide(a, b)
            return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(a.dtype)
        return np.divide(a, b)

    return div


@kernel("Pow")
def _pow(node, request):
    def power(a, b):
        if a.dtype.kind in "iu":
            return np.power(a, b.astype(a.dtype)) if b.dtype != a.dtype else np.power(a, b)
        return np.power(a, b.astype(a.dtype, copy=False))

    return power


@kernel("Erf")
def _erf(node, request):
    return lambda x: special.erf(x).astype(x.dtype, copy=False)


@kernel("Sigmoid")
def _sigmoid(node, request):
    return lambda x: special.expit(x).astype(x.dtype, copy=False)


@kernel("Relu")
def _relu(node, request):
    return lambda x: np.maximum(x, x.dtype.type(0))


@kernel("LeakyRelu")
def _leaky_relu(node, request):
    alpha = float(node.attr("alpha", 0.01))
    return lambda x: np.where(x >= 0, x, x * x.dtype.type(alpha))


@kernel("Clip", since=1)
def _clip_v1(node, request):
    lo, hi = node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38)
    return lambda x: np.clip(x, x.dtype.type(lo), x.dtype.type(hi))


@kernel("Clip", since=11)
def _clip(node, request):
    def clip(x, lo=None, hi=None):
        if lo is not None:
            x = np.maximum(x, lo)
        if hi is not None:
            x = np.minimum(x, hi)
        return x

    return clip


def _variadic(fn):
    def run(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out

    return run


kernel("Max")(lambda node, request: _variadic(np.maximum))
kernel("Min")(lambda node, request: _variadic(np.minimum))
kernel("Sum")(lambda node, request: _variadic(np.add))


@kernel("Mean")
def _mean(node, request):
    add = _variadic(np.add)
    return lambda *xs: (add(*xs) / len(xs)).astype(xs[0].dtype, copy=False)


@kernel("Where", since=9)
def _where(node, request):
    return np.where
