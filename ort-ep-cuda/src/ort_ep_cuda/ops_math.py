"""Elementwise ops and activations, MatMul/Gemm (cuBLAS), Softmax, LayerNormalization and its
skip form, reductions, Cast: CuPy's NumPy-compatible API (each elementwise op is one CuPy
kernel; float16 math that loses precision is done in float32 and rounded once)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from ort_core import KernelRequest, NodeView

from .registry import ANY, BOOL, FLOATS, INTS, Body, Runtime, op

NUMERIC = FLOATS | INTS


def widen(x: Any) -> Any:
    """float16 computed in float32 (as CUDA kernels do), other dtypes as they are."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _float_only(node: NodeView, rt: Runtime) -> str | None:
    for name in node.inputs[:1]:
        dtype = node.graph.value(name).dtype
        if dtype is not None and dtype not in FLOATS:
            return f"{node.op_type} on {dtype} has no CUDA kernel (float types only)"
    return None


# ------------------------------------------------------------------------------ unary
def _unary_table(xp: Any, dev: Any, node: NodeView) -> Any:
    a = node.attr
    alpha = float(a("alpha", {"LeakyRelu": 0.01, "HardSigmoid": 0.2, "Selu": 1.67326319217681884765625,
                              "ThresholdedRelu": 1.0}.get(node.op_type, 1.0)))
    beta = float(a("beta", 0.5))
    gamma = float(a("gamma", 1.05070102214813232421875))
    op_type = node.op_type

    def sigmoid(x):
        return 1 / (1 + xp.exp(-x))

    def softplus(x):  # log(1 + e^x) without overflow
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    def gelu(x):
        if a("approximate", "none") == "tanh":
            return 0.5 * x * (1 + xp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
        return 0.5 * x * (1 + dev.erf(x / math.sqrt(2)))

    table = {
        "Relu": lambda x: xp.maximum(x, 0),
        "Neg": xp.negative, "Abs": xp.abs, "Sign": xp.sign, "Sqrt": xp.sqrt, "Exp": xp.exp, "Log": xp.log,
        "Tanh": xp.tanh, "Sigmoid": sigmoid, "Erf": dev.erf, "Floor": xp.floor, "Ceil": xp.ceil,
        "Round": xp.rint, "Sin": xp.sin, "Cos": xp.cos, "Tan": xp.tan, "Asin": xp.arcsin, "Acos": xp.arccos,
        "Atan": xp.arctan, "Sinh": xp.sinh, "Cosh": xp.cosh, "Asinh": xp.arcsinh, "Acosh": xp.arccosh,
        "Atanh": xp.arctanh, "Reciprocal": lambda x: 1 / x, "Softplus": softplus,
        "Softsign": lambda x: x / (1 + xp.abs(x)), "Not": xp.logical_not, "IsNaN": xp.isnan,
        "LeakyRelu": lambda x: xp.where(x >= 0, x, alpha * x),
        "Elu": lambda x: xp.where(x >= 0, x, alpha * (xp.exp(xp.minimum(x, 0)) - 1)),
        "Celu": lambda x: xp.maximum(x, 0) + xp.minimum(0, alpha * (xp.exp(xp.minimum(x, 0) / alpha) - 1)),
        "Selu": lambda x: gamma * xp.where(x > 0, x, alpha * (xp.exp(xp.minimum(x, 0)) - 1)),
        "HardSigmoid": lambda x: xp.clip(alpha * x + beta, 0, 1),
        "HardSwish": lambda x: x * xp.clip(x / 6 + 0.5, 0, 1),
        "ThresholdedRelu": lambda x: xp.where(x > alpha, x, 0),
        "Mish": lambda x: x * xp.tanh(softplus(x)),
        "Gelu": gelu,
        "Swish": lambda x: x * sigmoid(alpha * x),
    }
    return table[op_type]


UNARY_FLOAT = ("Sqrt", "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan",
               "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Reciprocal", "Softplus",
               "Softsign", "LeakyRelu", "Elu", "Celu", "Selu", "HardSigmoid", "HardSwish", "ThresholdedRelu",
               "Mish")
UNARY_ANY = ("Relu", "Neg", "Abs", "Sign")


@op(*UNARY_FLOAT, dtypes=FLOATS)
@op("IsNaN", dtypes=FLOATS | BOOL)
@op(*UNARY_ANY, dtypes=NUMERIC)
@op("Not", dtypes=BOOL)
@op("Gelu", since=20, dtypes=FLOATS)
@op("Swish", since=24, dtypes=FLOATS)
def _unary(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    fn = _unary_table(rt.xp, rt.dev, node)
    exact = node.op_type in UNARY_ANY or node.op_type in ("Not", "IsNaN", "Floor", "Ceil", "Round")

    def run(x):
        if exact or x.dtype != np.float16:
            y = fn(x)
        else:
            y = fn(x.astype(np.float32))
        return y if node.op_type == "IsNaN" else y.astype(x.dtype, copy=False)

    return Body(run)


# ------------------------------------------------------------------------------ binary
def _int_div(xp: Any, a: Any, b: Any) -> Any:
    q = xp.floor_divide(a, b)  # ONNX integer division truncates toward zero
    fix = (xp.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


@op("Add", "Sub", "Mul", "Div", "Pow", "Mod", dtypes=NUMERIC)
@op("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", dtypes=ANY)
@op("And", "Or", "Xor", dtypes=BOOL)
@op("PRelu", dtypes=FLOATS)
def _binary(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    op_type = node.op_type
    fmod = bool(node.attr("fmod", 0))

    def div(a, b):
        return _int_div(xp, a, b) if a.dtype.kind in "iu" else a / b

    def mod(a, b):
        if fmod:
            return xp.fmod(a, b)
        if a.dtype.kind in "iu":
            return xp.remainder(a, b)  # the divisor's sign, as numpy does
        # floats with fmod=0: the divisor's sign, from fmod (x mod inf is inf for x < 0, as in Python)
        r = xp.fmod(a, b)
        return xp.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)

    def pow_(a, b):
        if a.dtype.kind == "f":
            return xp.power(widen(a), widen(b).astype(widen(a).dtype)).astype(a.dtype)
        return xp.power(a, b.astype(a.dtype))

    table = {
        "Add": xp.add, "Sub": xp.subtract, "Mul": xp.multiply, "Div": div, "Pow": pow_, "Mod": mod,
        "Equal": xp.equal, "Less": xp.less, "Greater": xp.greater, "LessOrEqual": xp.less_equal,
        "GreaterOrEqual": xp.greater_equal, "And": xp.logical_and, "Or": xp.logical_or, "Xor": xp.logical_xor,
        "PRelu": lambda x, s: xp.where(x >= 0, x, x * s),
    }
    fn = table[op_type]
    return Body(fn)


@op("Max", "Min", "Sum", "Mean", dtypes=NUMERIC)
def _variadic(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    fn = {"Max": xp.maximum, "Min": xp.minimum, "Sum": xp.add, "Mean": xp.add}[node.op_type]
    mean = node.op_type == "Mean"

    def run(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        if len(xs) == 1:
            out = out.copy()
        return (out / len(xs)).astype(out.dtype) if mean else out

    return Body(run)


@op("Where", dtypes=ANY)
def _where(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    return Body(rt.xp.where)


@op("Clip", dtypes=NUMERIC, host_inputs=frozenset({1, 2}))
def _clip(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
        return Body(lambda x: _clip_values(xp, x, lo, hi))
    return Body(lambda x, lo=None, hi=None: _clip_values(xp, x, lo, hi), host_inputs=frozenset({1, 2}))


def _clip_values(xp: Any, x: Any, lo: Any, hi: Any) -> Any:
    out = x
    if lo is not None:
        out = xp.maximum(out, np.asarray(lo, dtype=x.dtype).item())
    if hi is not None:
        out = xp.minimum(out, np.asarray(hi, dtype=x.dtype).item())
    return out if out is not x else x.copy()


# ------------------------------------------------------------------------------ Cast
def _cast_check(node: NodeView, rt: Runtime) -> str | None:
    if node.op_type == "Cast":
        to = onnx.helper.tensor_dtype_to_np_dtype(int(node.attr("to")))
        if np.dtype(to) not in ANY and np.dtype(to).name != "bfloat16":
            return f"Cast to {np.dtype(to)} has no CUDA kernel (CuPy has no such dtype)"
    return None


@op("Cast", dtypes=ANY, check=_cast_check)
@op("CastLike", since=15, dtypes=ANY)
def _cast(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    if node.op_type == "CastLike":
        return Body(lambda x, like: x.astype(like.dtype))
    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attr("to"))))
    if to.name == "bfloat16":  # to float32 here; the bfloat16 adapter rounds it once (bfloat16.py)
        to = np.dtype(np.float32)
    return Body(lambda x: x.astype(to))


# ------------------------------------------------------------------------------ products
@op("MatMul", dtypes=NUMERIC)
def _matmul(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    dev = rt.dev
    return Body(lambda a, b: dev.matmul(a, b) if a.dtype.kind == "f" else rt.xp.matmul(a, b))


@op("Gemm", dtypes=FLOATS | INTS)
def _gemm(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    a_ = node.attr
    alpha, beta = float(a_("alpha", 1.0)), float(a_("beta", 1.0))
    trans_a, trans_b = bool(a_("transA", 0)), bool(a_("transB", 0))
    dev = rt.dev

    def run(a, b, c=None):
        if a.ndim == 2 and trans_a:
            a = a.T
        if trans_b:
            b = b.T
        y = dev.matmul(a, b)
        if alpha != 1.0:
            y = (y * alpha).astype(a.dtype, copy=False)
        if c is not None:
            y = y + (c if beta == 1.0 else (c * beta).astype(c.dtype, copy=False))
        return y

    return Body(run)


# ------------------------------------------------------------------------------ Softmax
@op("Softmax", "LogSoftmax", "Hardmax", dtypes=FLOATS)
def _softmax(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    old = node.opset < 13  # axis flattens the input to 2-D before opset 13
    axis = int(node.attr("axis", 1 if old else -1))
    kind = node.op_type

    def along(x, ax):
        x32 = widen(x)
        if kind == "Hardmax":
            idx = xp.argmax(x32, axis=ax, keepdims=True)
            return (xp.arange(x.shape[ax]).reshape([-1 if k == ax % x.ndim else 1 for k in range(x.ndim)]) == idx).astype(x.dtype)
        shifted = x32 - xp.max(x32, axis=ax, keepdims=True)
        e = xp.exp(shifted)
        s = xp.sum(e, axis=ax, keepdims=True)
        y = shifted - xp.log(s) if kind == "LogSoftmax" else e / s
        return y.astype(x.dtype, copy=False)

    def run(x):
        if old:
            ax = axis % max(x.ndim, 1)
            rows = int(np.prod(x.shape[:ax], dtype=np.int64))
            return along(x.reshape(rows, -1), 1).reshape(x.shape)
        return along(x, axis)

    return Body(run)


# ------------------------------------------------------------------------------ normalisation
def _layer_norm(xp: Any, x: Any, scale: Any, bias: Any, axis: int, eps: float) -> tuple[Any, Any, Any]:
    axes = tuple(range(axis % x.ndim, x.ndim))
    x32 = x.astype(np.float32)
    mean = xp.mean(x32, axis=axes, keepdims=True)
    centered = x32 - mean
    inv = 1 / xp.sqrt(xp.mean(centered * centered, axis=axes, keepdims=True) + eps)
    y = centered * inv * scale.astype(np.float32)
    if bias is not None:
        y = y + bias.astype(np.float32)
    return y.astype(x.dtype), mean, inv


@op("LayerNormalization", since=17, dtypes=FLOATS)
@op("LayerNormalization", domain="ort_core", dtypes=FLOATS)  # the optimizer's, below opset 17
def _layernorm(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    axis, eps = int(node.attr("axis", -1)), float(node.attr("epsilon", 1e-5))
    n_out = len(node.outputs)

    def run(x, scale, bias=None):
        y, mean, inv = _layer_norm(xp, x, scale, bias, axis, eps)
        return [y, mean, inv][:n_out] if n_out > 1 else y

    return Body(run, n_outputs=n_out)


@op("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain="com.microsoft", dtypes=FLOATS)
def _skip_layernorm(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    eps = float(node.attr("epsilon", 1e-12))
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    n_out = len(node.outputs)

    def run(x, skip, gamma, beta=None, bias=None):
        if simplified:  # (input, skip, gamma, bias): no beta
            beta, bias = None, beta
        s = x + skip
        if bias is not None:
            s = s + bias
        if simplified:
            s32 = s.astype(np.float32)
            inv = 1 / xp.sqrt(xp.mean(s32 * s32, axis=-1, keepdims=True) + eps)
            y, mean = (s32 * inv * gamma.astype(np.float32)).astype(x.dtype), xp.zeros_like(inv)
        else:
            y, mean, inv = _layer_norm(xp, s, gamma, beta, -1, eps)
        outs = [y, mean, inv, s]
        return outs[:n_out] if n_out > 1 else y

    return Body(run, n_outputs=n_out)


def _batchnorm(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    eps = float(node.attr("epsilon", 1e-5))

    def run(x, scale, b, mean, var):
        shape = (1, -1) + (1,) * (x.ndim - 2)
        inv = (scale.astype(np.float32) / xp.sqrt(var.astype(np.float32) + eps)).reshape(shape)
        y = (x.astype(np.float32) - mean.astype(np.float32).reshape(shape)) * inv + b.astype(np.float32).reshape(shape)
        return y.astype(x.dtype)

    return Body(run)


def _batchnorm_check(node: NodeView, rt: Runtime) -> str | None:
    if len([o for o in node.outputs if o]) > 1 or node.attr("training_mode", 0):
        return "BatchNormalization in training mode has no CUDA kernel (inference only)"
    return None


_batchnorm_entry = op("BatchNormalization", dtypes=FLOATS, check=_batchnorm_check)(_batchnorm)


# ------------------------------------------------------------------------------ reductions
REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum")


def axes_from_input(op_type: str, opset: int) -> bool:
    return opset >= (13 if op_type == "ReduceSum" else 18)


@op(*REDUCE, dtypes=NUMERIC, host_inputs=frozenset({1}))
def _reduce(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    kind = node.op_type
    keepdims = bool(node.attr("keepdims", 1))
    noop = bool(node.attr("noop_with_empty_axes", 0))
    from_input = axes_from_input(kind, node.opset)
    attr_axes = node.attr("axes")

    def reduce(x, axes):
        if axes is None or len(axes) == 0:
            if noop:
                return x.copy()
            axes = tuple(range(x.ndim))
        axes = tuple(sorted({int(a) % max(x.ndim, 1) for a in np.asarray(axes).ravel()}))
        w = widen(x)
        if kind == "ReduceSum":
            y = xp.sum(w, axis=axes, keepdims=keepdims)
        elif kind == "ReduceMean":
            y = xp.mean(w, axis=axes, keepdims=keepdims)
        elif kind == "ReduceMax":
            y = xp.max(w, axis=axes, keepdims=keepdims) if x.size else _empty_extreme(xp, x, axes, keepdims, -1)
        elif kind == "ReduceMin":
            y = xp.min(w, axis=axes, keepdims=keepdims) if x.size else _empty_extreme(xp, x, axes, keepdims, 1)
        elif kind == "ReduceProd":
            y = xp.prod(w, axis=axes, keepdims=keepdims)
        elif kind == "ReduceL1":
            y = xp.sum(xp.abs(w), axis=axes, keepdims=keepdims)
        elif kind == "ReduceL2":
            y = xp.sqrt(xp.sum(w * w, axis=axes, keepdims=keepdims))
        elif kind == "ReduceSumSquare":
            y = xp.sum(w * w, axis=axes, keepdims=keepdims)
        elif kind == "ReduceLogSum":
            y = xp.log(xp.sum(w, axis=axes, keepdims=keepdims))
        else:  # ReduceLogSumExp, shifted by the max so that it cannot overflow
            if x.size == 0:
                y = xp.log(xp.sum(xp.exp(w), axis=axes, keepdims=keepdims))
            else:
                m = xp.max(w, axis=axes, keepdims=True)
                m = xp.where(xp.isfinite(m), m, 0)
                y = xp.log(xp.sum(xp.exp(w - m), axis=axes, keepdims=True)) + m
                if not keepdims:
                    y = xp.squeeze(y, axis=axes)
        return y.astype(x.dtype)

    if from_input:
        return Body(lambda x, axes=None: reduce(x, axes), host_inputs=frozenset({1}))
    return Body(lambda x: reduce(x, attr_axes))


def _empty_extreme(xp: Any, x: Any, axes: tuple[int, ...], keepdims: bool, sign: int) -> Any:
    """Max/Min over no elements: onnxruntime and onnx's reference give -inf/+inf (the identity)."""
    shape = [1 if k in axes else d for k, d in enumerate(x.shape)] if keepdims else \
        [d for k, d in enumerate(x.shape) if k not in axes]
    value = sign * np.inf if x.dtype.kind == "f" else (np.iinfo(x.dtype).max if sign > 0 else np.iinfo(x.dtype).min)
    return xp.full(shape, value, dtype=x.dtype)


@op("ArgMax", "ArgMin", dtypes=NUMERIC)
def _argmax(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    axis = int(node.attr("axis", 0))
    keepdims = bool(node.attr("keepdims", 1))
    last = bool(node.attr("select_last_index", 0))
    fn = xp.argmax if node.op_type == "ArgMax" else xp.argmin

    def run(x):
        ax = axis % x.ndim
        if last:
            idx = x.shape[ax] - 1 - fn(xp.flip(x, axis=ax), axis=ax)
        else:
            idx = fn(x, axis=ax)
        idx = idx.astype(np.int64)
        return xp.expand_dims(idx, ax) if keepdims else idx

    return Body(run)
