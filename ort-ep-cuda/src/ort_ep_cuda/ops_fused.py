"""onnxruntime's contrib ops that ort-core's optimizer fuses into (``com.microsoft`` FusedConv,
FusedGemm, FusedMatMul, Gelu, BiasGelu; ``ort_core`` HardSwish): with kernels here the
optimizer applies those fusions for this provider, as onnxruntime's CUDA provider has them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ort_core import CORE_DOMAIN, KernelRequest, NodeView

from .ops_math import widen
from .ops_nn import CONV_DTYPES, _conv_check, _geometry
from .registry import FLOATS, Body, Runtime, op

MS = "com.microsoft"
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid")


def activation(xp: Any, name: str, params: Sequence[float]) -> Any:
    """The function of a fused activation with its parameters (as the optimizer writes them)."""
    if name == "Relu":
        return lambda y: xp.maximum(y, 0)
    if name == "Tanh":
        return xp.tanh
    if name == "Sigmoid":
        return lambda y: 1 / (1 + xp.exp(-y))
    if name == "LeakyRelu":
        alpha = params[0] if params else 0.01
        return lambda y: xp.where(y >= 0, y, y * alpha)
    if name == "Clip":
        lo, hi = (list(params) + [-np.inf, np.inf])[:2] if params else (-np.inf, np.inf)
        return lambda y: xp.clip(y, lo, hi)
    alpha, beta = (list(params) + [0.2, 0.5])[:2] if params else (0.2, 0.5)  # HardSigmoid
    return lambda y: xp.clip(alpha * y + beta, 0, 1)


def _activation_check(node: NodeView, rt: Runtime) -> str | None:
    name = node.attr("activation")
    if name is not None and name not in ACTIVATIONS:
        return f"{node.op_type} with activation {name!r} has no CUDA kernel ({', '.join(ACTIVATIONS)})"
    if node.op_type == "FusedConv":
        return _conv_check(node, rt)
    return None


def _apply(xp: Any, fn: Any, y: Any) -> Any:
    return fn(widen(y)).astype(y.dtype, copy=False)


@op("FusedConv", domain=MS, dtypes=CONV_DTYPES, check=_activation_check)
def _fused_conv(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    dev, xp = rt.dev, rt.xp
    group = int(node.attr("group", 1))
    name = node.attr("activation")
    act = None if name is None else activation(xp, name, [float(p) for p in node.attr("activation_params", [])])

    def run(x, w, b=None, z=None):
        pads, strides, dilations = _geometry(node, x.shape, w.shape[2:])
        y = dev.conv(x, w, pads, strides, dilations, group)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * (y.ndim - 2))
        if z is not None:
            y = y + z
        return y if act is None else _apply(xp, act, y)

    return Body(run)


@op("FusedGemm", domain=MS, dtypes=FLOATS, check=_activation_check)
def _fused_gemm(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    from .ops_math import _gemm

    gemm = _gemm(node, request, rt).fn
    xp = rt.xp
    name = node.attr("activation")
    params = [float(node.attr(k)) for k in ("activation_alpha", "activation_beta") if node.attr(k) is not None]
    act = None if name is None else activation(xp, name, params)
    return Body(lambda a, b, c=None: gemm(a, b, c) if act is None else _apply(xp, act, gemm(a, b, c)))


def _fused_matmul_check(node: NodeView, rt: Runtime) -> str | None:
    if node.attr("transBatchA", 0) or node.attr("transBatchB", 0):
        return "FusedMatMul with transBatchA/transBatchB has no CUDA kernel"
    return None


@op("FusedMatMul", domain=MS, dtypes=FLOATS, check=_fused_matmul_check)
def _fused_matmul(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    dev, xp = rt.dev, rt.xp
    alpha = float(node.attr("alpha", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))

    def run(a, b):
        y = dev.matmul(xp.swapaxes(a, -1, -2) if trans_a else a, xp.swapaxes(b, -1, -2) if trans_b else b)
        return y if alpha == 1.0 else (y * alpha).astype(y.dtype, copy=False)

    return Body(run)


@op("Gelu", "BiasGelu", domain=MS, dtypes=FLOATS)
def _ms_gelu(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    dev = rt.dev

    def run(x, bias=None):
        if bias is not None:
            x = x + bias
        w = widen(x)
        return (0.5 * w * (1 + dev.erf(w / math.sqrt(2)))).astype(x.dtype, copy=False)

    return Body(run)


@op("HardSwish", domain=CORE_DOMAIN, dtypes=FLOATS)
def _core_hard_swish(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    return Body(lambda x: _apply(xp, lambda y: y * xp.clip(y / 6 + 0.5, 0, 1), x))
