"""Quantization: QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked; integer, int4,
int2, float8, float4 types), DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger,
QLinearConv."""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import TensorProto
from onnx.numpy_helper import saturate_cast

from ort_core import Kernel, KernelRequest
from ort_core.graph.view import GraphView, NodeView

from ..registry import kernel, lookup
from . import _integer, _jit
from ._util import PreparedFor, const_input, dequantized_constant, fixed_constant, normalize_axis
from .contrib_quant import quantize_dynamic
from .nn import _GeometryCache

_INT_RANGES = {
    TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127),
    TensorProto.UINT16: (0, 65535), TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT4: (0, 15), TensorProto.INT4: (-8, 7),
    TensorProto.UINT2: (0, 3), TensorProto.INT2: (-2, 1),
}
_FLOAT8 = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ}
# types without inf/NaN: ml_dtypes' cast saturates by itself
_SMALL_FLOATS = {TensorProto.FLOAT4E2M1} | {
    getattr(TensorProto, n) for n in ("FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n)
}


def _onnx_type(dtype: np.dtype) -> int:
    return onnx.helper.np_dtype_to_tensor_dtype(dtype)


def broadcast_param(value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point made broadcastable to ``shape``: scalar (per tensor), 1-D along
    ``axis`` (per axis), or blocked (``block_size`` consecutive elements along ``axis`` share one)."""
    if value.ndim == 0:
        return value
    if value.size == 1 and not block_size:
        return value.reshape(())
    if not block_size:
        if value.ndim != 1:
            raise ValueError(f"per-axis scale/zero point must be 1-D, got shape {list(value.shape)}")
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    if value.ndim != len(shape):
        raise ValueError(f"blocked scale/zero point must have rank {len(shape)}, got shape {list(value.shape)}")
    value = np.repeat(value, block_size, axis=axis)
    if value.shape[axis] != shape[axis]:  # the last block may be partial
        value = np.take(value, np.arange(shape[axis]), axis=axis)
    return value


#: integer types the compiled per-tensor loops take (numba has no 4-bit types; DequantizeLinear
#: of int32 needs float64: float32's 24 bits are short)
_PER_TENSOR_LOOP_TYPES = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))


def quantize(x, scale, zero_point, to: int, axis: int, block_size: int, saturate: bool, precision: int = 0):
    """x / scale, rounded half to even, plus the zero point, saturated to ``to``."""
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    loop = _jit.quantize() if (dtype in _PER_TENSOR_LOOP_TYPES and not precision and x.dtype == np.float32 and scale.size == 1
                               and scale.dtype == np.float32 and (zero_point is None or zero_point.size == 1)) else None
    if loop is not None:  # per tensor: one compiled pass (the same operations in the same order)
        lo, hi = _INT_RANGES[to]
        y = np.empty(x.shape, dtype)
        zp = np.float32(0 if zero_point is None else zero_point.reshape(-1)[0])
        loop(np.ascontiguousarray(x).reshape(-1), np.float32(scale.reshape(-1)[0]), zp, np.float32(lo), np.float32(hi),
             y.reshape(-1))
        return y
    scale = broadcast_param(scale, x.shape, axis, block_size)
    if precision:
        p = onnx.helper.tensor_dtype_to_np_dtype(precision)
        q = x.astype(p) / scale.astype(p)
    else:
        q = x / scale
    if to in _INT_RANGES:
        lo, hi = _INT_RANGES[to]
        if q.dtype.type.__module__ == "ml_dtypes" or q.dtype == np.float16:
            q = q.astype(np.float32)  # float16 cannot hold 65535 + rounding margin exactly
        np.rint(q, out=q)  # half to even
        if zero_point is not None:  # zero points are exact in float32 (at most 16 bits)
            q += broadcast_param(zero_point, x.shape, axis, block_size).astype(q.dtype)
        # fmax: NaN (x NaN, or inf / inf) becomes the type's minimum, as onnxruntime gives it
        # (clip kept NaN, whose cast to int8 was 0: a mask of -inf at scale inf in quantized
        # GPT-2 and LLaMA)
        np.fmin(np.fmax(q, lo, out=q), hi, out=q)
        return q.astype(dtype)
    if to in _FLOAT8:  # the zero point of a float8 type is 0 by definition
        return saturate_cast(q, dtype) if saturate else q.astype(dtype)
    if to in _SMALL_FLOATS:
        if zero_point is not None:
            q = q + broadcast_param(zero_point, x.shape, axis, block_size).astype(np.float32)
        return q.astype(dtype)
    raise ValueError(f"QuantizeLinear: {TensorProto.DataType.Name(to)} is not a quantized type")


def dequantize(x, scale, zero_point, axis: int, block_size: int, out_dtype: np.dtype | None = None):
    """(x - zero point) * scale, in the scale's type (or ``out_dtype``)."""
    loop = _jit.dequantize() if (x.dtype in _PER_TENSOR_LOOP_TYPES and scale.size == 1 and scale.dtype == np.float32
                                 and (zero_point is None or zero_point.size == 1)
                                 and out_dtype in (None, np.dtype(np.float32))) else None
    if loop is not None:  # per tensor: one compiled pass (the same operations in the same order)
        y = np.empty(x.shape, np.float32)
        zp = np.float32(0 if zero_point is None else zero_point.reshape(-1)[0])
        loop(np.ascontiguousarray(x).reshape(-1), np.float32(scale.reshape(-1)[0]), zp, y.reshape(-1))
        return y
    loop = _jit.dequantize_axis() if (x.dtype in _PER_TENSOR_LOOP_TYPES and not block_size and scale.ndim == 1
                                      and scale.dtype == np.float32 and x.ndim and scale.size == x.shape[axis]
                                      and (zero_point is None or zero_point.shape == scale.shape)
                                      and out_dtype in (None, np.dtype(np.float32))) else None
    if loop is not None:  # per axis: one compiled pass over (outer, C) or (outer * C, inner) rows
        inner = math.prod(x.shape[axis + 1:])
        rows = x.size // inner
        y = np.empty(x.shape, np.float32)
        zp = np.zeros(scale.size, np.float32) if zero_point is None else zero_point.astype(np.float32)
        x2 = np.ascontiguousarray(x).reshape(rows, inner) if inner > 1 else np.ascontiguousarray(x).reshape(-1, scale.size)
        loop(x2, scale, zp, inner > 1, y.reshape(x2.shape))
        return y
    dx = x.astype(np.float32)
    if zero_point is not None and _onnx_type(x.dtype) not in _FLOAT8:
        dx -= broadcast_param(zero_point, x.shape, axis, block_size).astype(np.float32)
    elif x.dtype == np.int32:
        dx = x.astype(np.float64)  # int32 needs more than float32's 24 bits
    s = broadcast_param(scale, x.shape, axis, block_size)
    if s.dtype == dx.dtype or (s.dtype.itemsize < dx.itemsize and s.dtype.kind == "f"):
        dx *= s  # in place: the product keeps dx's (wider or equal) type
        y = dx
    else:
        y = dx * s
    return y.astype(out_dtype if out_dtype is not None else scale.dtype, copy=False)


def _quant_attrs(node):
    return int(node.attr("axis", 1)), int(node.attr("block_size", 0) or 0)


@kernel("QuantizeLinear", since=10)
def _quantize_linear(node, request):
    axis_attr, block_size = _quant_attrs(node)
    saturate = bool(node.attr("saturate", 1))
    output_dtype = int(node.attr("output_dtype", 0) or 0)
    precision = int(node.attr("precision", 0) or 0)

    def quantize_linear(x, scale, zero_point=None):
        to = output_dtype
        if zero_point is not None:
            zp_type = _onnx_type(zero_point.dtype)
            if to and to != zp_type:
                raise ValueError(
                    f"QuantizeLinear {node.name!r}: output_dtype {TensorProto.DataType.Name(to)} differs "
                    f"from the zero point's type {TensorProto.DataType.Name(zp_type)}"
                )
            to = zp_type
        to = to or TensorProto.UINT8
        axis = normalize_axis(axis_attr, x.ndim) if x.ndim else 0
        return quantize(x, scale, zero_point, to, axis, block_size, saturate, precision)

    return quantize_linear


@kernel("DequantizeLinear", since=10)
def _dequantize_linear(node, request):
    axis_attr, block_size = _quant_attrs(node)
    output_dtype = int(node.attr("output_dtype", 0) or 0)
    out = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(output_dtype)) if output_dtype else None

    # of fixed constants (a QDQ model's weights): computed once, the same read-only array every
    # run, which the kernels reading it know as a constant (``dequantized_constant``)
    fixed = dequantized_constant(request.graph, node.outputs[0])

    def dequantize_linear(x, scale, zero_point=None):
        if fixed is not None:
            return fixed
        axis = normalize_axis(axis_attr, x.ndim) if x.ndim else 0
        return dequantize(x, scale, zero_point, axis, block_size, out)

    return dequantize_linear


# onnxruntime.quantization's com.microsoft QuantizeLinear and DequantizeLinear (16-bit QDQ,
# ``use_qdq_contrib_ops``): the standard ops' semantics (axis, 8- and 16-bit codes), the same
# kernels; they had none ("no CPU kernel for com.microsoft::QuantizeLinear")
kernel("QuantizeLinear", domain="com.microsoft")(_quantize_linear)
kernel("DequantizeLinear", domain="com.microsoft")(_dequantize_linear)


@kernel("DynamicQuantizeLinear", since=11)
def _dynamic_quantize_linear(node, request):
    def dynamic_quantize_linear(x):
        y, scale, zp = quantize_dynamic(x)
        return y, np.array(scale, dtype=x.dtype), np.array(zp, dtype=np.uint8)

    return dynamic_quantize_linear


@kernel("MatMulInteger", since=10)
def _matmul_integer(node, request):
    b_constant, prepared = const_input(node, request, 1), PreparedFor()

    def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
        return _integer.exact_product(prepared, a, a_zero_point, b, b_zero_point, b_constant).astype(np.int32)

    return matmul_integer


def _requantize(acc: np.ndarray, multiplier, y_zero_point, out_dtype: np.dtype) -> np.ndarray:
    """The integer sums ``acc`` in the output's units, as onnxruntime's MLAS requantizes them:
    float32(acc) * the float32 ``multiplier`` rounded to float32, then half to even, plus the
    zero point, clamped. (In float64 the product of a tie, -39.5 in float32, came out -39.49999
    and rounded the other way: 1 LSB off in a quantized YOLO's convolutions, 5% off its boxes.)"""
    y = acc.astype(np.float32) * np.asarray(multiplier, np.float32)
    if out_dtype.kind in "iu":
        if y_zero_point is not None:
            y = np.rint(y) + y_zero_point.astype(np.float64)
        else:
            y = np.rint(y)
        info = np.iinfo(out_dtype)
        return np.clip(y, info.min, info.max).astype(out_dtype)
    if y_zero_point is not None:
        y = y + y_zero_point.astype(np.float32)
    return saturate_cast(y.astype(np.float32), out_dtype)


@kernel("QLinearMatMul", since=10)
def _qlinear_matmul(node, request):
    b_constant, prepared = const_input(node, request, 3), PreparedFor()

    def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
        if _onnx_type(a.dtype) in _FLOAT8:  # opset 21: float8 operands, zero points are 0
            acc = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float64)
        else:
            acc = _integer.exact_product(prepared, a, a_zero_point, b, b_zero_point, b_constant).astype(np.float64)
        a_s = a_scale.astype(np.float32)
        b_s = b_scale.astype(np.float32)
        if a_s.ndim == 1 and a_s.size > 1:
            a_s = a_s.reshape(-1, 1)
        multiplier = a_s * b_s / y_scale.astype(np.float32)  # in float32, as onnxruntime computes it
        out = y_zero_point.dtype if y_zero_point is not None else a.dtype
        return _requantize(acc, multiplier, y_zero_point, out)

    return qlinear_matmul


def _conv_of(node, request):
    """The provider's float Conv kernel, built for this node's attributes (same names)."""
    entry = lookup("", "Conv", 11)
    if entry is None:
        raise NotImplementedError(f"{node.op_type} {node.name!r}: no Conv kernel is registered to build on")
    built = entry.build(node, request)
    return built.run if hasattr(built, "run") else built


def _channel_param(value, ndim: int, axis: int = 1):
    """A per-output-channel scale or zero point broadcast along ``axis`` of a rank-``ndim``
    array (0 for the weights [M, C/g, k...], 1 for the output [N, M, ...]); scalars stay scalars."""
    v = np.asarray(value)
    if v.ndim == 1 and v.size > 1:
        dims = [1] * ndim
        dims[axis] = -1
        return v.reshape(dims)
    return v.reshape(())


def _integer_conv(node, request, w_index: int):
    """``run(x, x_zero_point, w, w_zero_point)``: the exact int32 convolution of the codes minus
    their zero points (ConvInteger's, QLinearConv's accumulator): by oneDNN's 8-bit convolution
    where the weights are the constant initializer (``_integer.ConstantIntegerConvolution``),
    else as the float Conv kernel in float32 where the operands bound every sum below 2^24, or
    float64 (exact either way)."""
    conv = _conv_of(node, request)
    w_constant, prepared = const_input(node, request, w_index), PreparedFor()
    group = int(node.attr("group", 1))
    geometry = _GeometryCache(node)
    attr_kernel = node.attr("kernel_shape")

    def run(x, x_zero_point, w, w_zero_point):
        if w is w_constant and w.dtype in (np.int8, np.uint8) and (w_zero_point is None or np.ndim(w_zero_point) <= 1):
            integer_conv = prepared.get("W", (w, w_zero_point),
                                        lambda: _integer.ConstantIntegerConvolution(w, w_zero_point, group))
            y = integer_conv(x, x_zero_point, geometry.get(x.shape, attr_kernel or w.shape[2:]))
            if y is not None:
                return y
        xs = x.astype(np.int32) - (0 if x_zero_point is None else x_zero_point.astype(np.int32))
        ws, channel_abs = prepared.get("W - zw", (w, w_zero_point), lambda: _minus_zero_point(w, w_zero_point))
        # every partial sum of an output is at most max|X - zx| times its channel's sum of |W -
        # zw|: below 2^24 the float32 convolution (oneDNN's) is exact in any order; else float64
        # (exact: sums far below 2^53)
        peak = int(np.abs(xs).max()) if xs.size else 0
        dtype = np.float32 if peak * channel_abs < _integer.F32_EXACT else np.float64
        return np.rint(conv(xs.astype(dtype), ws.astype(dtype))).astype(np.int32)

    return run


def _minus_zero_point(w: np.ndarray, w_zero_point) -> tuple[np.ndarray, int]:
    """(W - zw as int32, the largest sum of |W - zw| over an output channel's weights): made
    once for constant weights (``PreparedFor``)."""
    ws = w.astype(np.int32)
    if w_zero_point is not None:
        ws = ws - _channel_param(w_zero_point.astype(np.int32), w.ndim, 0)
    return ws, int(np.abs(ws).reshape(ws.shape[0], -1).sum(axis=1).max()) if ws.size else 0


@kernel("ConvInteger", since=10)
def _conv_integer(node, request):
    integer_conv = _integer_conv(node, request, 1)

    def conv_integer(x, w, x_zero_point=None, w_zero_point=None):
        return integer_conv(x, x_zero_point, w, w_zero_point)

    return conv_integer


@kernel("QLinearConv", since=10)
def _qlinear_conv(node, request):
    integer_conv = _integer_conv(node, request, 3)

    def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias=None):
        acc = integer_conv(x, x_zero_point, w, w_zero_point).astype(np.int64)
        if bias is not None:  # int32 sums, as onnxruntime adds the bias before scaling
            acc = acc + bias.astype(np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
        # in float32, as onnxruntime computes it: (x_scale * w_scale) / y_scale
        multiplier = (np.float32(x_scale) * _channel_param(w_scale.astype(np.float32), acc.ndim)) / np.float32(y_scale)
        return _requantize(acc, multiplier, y_zero_point, y_zero_point.dtype)

    return qlinear_conv


#: the integer types of a QuantizeLinear -> DequantizeLinear pair computed as one (those of the
#: per-tensor loops): their range
_PAIR_RANGES = {dtype: _INT_RANGES[_onnx_type(dtype)] for dtype in _PER_TENSOR_LOOP_TYPES}


@dataclasses.dataclass(frozen=True)
class FakeQuant:
    """A QuantizeLinear with one scale and zero point whose only reader is a DequantizeLinear
    (a QDQ model's activations): ``y = (clip(rint(x / scale), lo, hi) + shift) * out_scale``
    with ``lo, hi`` the type's range less the zero point and ``shift`` the Q zero point less
    the DQ one (0 in a QDQ pair), which is DequantizeLinear(QuantizeLinear(x)) computed in
    float32: the same operations as the two kernels, in one pass. ``dq``: the
    DequantizeLinear's node index."""

    scale: np.float32
    lo: np.float32
    hi: np.float32
    shift: np.float32
    out_scale: np.float32
    dq: int

    def __call__(self, x: np.ndarray) -> np.ndarray:
        parts = _jit.split_parts(x.size, x.size)
        loop = _jit.fake_quantize(parts)
        if loop is not None:
            y = np.empty(x.shape, np.float32)
            loop(x.reshape(-1) if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(-1), self.scale, self.lo,
                 self.hi, self.shift, self.out_scale, y.reshape(-1), parts)
            return y
        q = x / self.scale
        np.rint(q, out=q)
        np.fmin(np.fmax(q, self.lo, out=q), self.hi, out=q)  # NaN: the minimum, as ``quantize``
        if self.shift:
            q += self.shift
        q *= self.out_scale
        return q


#: per graph: node index -> ``_scalar_quant``'s answer (the grouping asks of each Q and DQ node
#: several times: 3870 calls, 8 ms of a QDQ transformer's session creation)
_SCALAR_QUANT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _scalar_quant(graph: GraphView, node: NodeView) -> tuple[np.float32, int, np.dtype] | None:
    """(scale, zero point, integer type) of a QuantizeLinear / DequantizeLinear with one float32
    scale and an 8- or 16-bit integer zero point (or none: uint8), else None."""
    if graph.nodes[node.index] is not node:  # (a node of another graph: not kept)
        return _scalar_quant_params(graph, node)
    known = _SCALAR_QUANT.setdefault(graph, {})
    if node.index not in known:
        known[node.index] = _scalar_quant_params(graph, node)
    return known[node.index]


def _scalar_quant_params(graph: GraphView, node: NodeView) -> tuple[np.float32, int, np.dtype] | None:
    if node.domain or len(node.inputs) < 2 or int(node.attr("block_size", 0) or 0) or node.attr("precision", 0):
        return None
    scale = fixed_constant(graph, node.inputs[1])
    if scale is None or scale.dtype != np.float32 or scale.size != 1 or not np.isfinite(scale).all() or scale.reshape(()) <= 0:
        return None
    zero = fixed_constant(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if len(node.inputs) > 2 and node.inputs[2] and (zero is None or zero.size != 1):
        return None
    if int(node.attr("output_dtype", 0) or 0) not in (0, 1 if node.op_type == "DequantizeLinear" else 0):
        return None  # Q: the zero point's type decides, as in every QDQ model; DQ: float32 out
    dtype = zero.dtype if zero is not None else np.dtype(np.uint8)
    if dtype not in _PAIR_RANGES:
        return None
    return np.float32(scale.reshape(())), 0 if zero is None else int(zero.reshape(())), dtype


def fake_quant(node: NodeView, graph: GraphView, claimed: set[int] | None = None) -> FakeQuant | None:
    """The QuantizeLinear ``node`` and its DequantizeLinear as one ``FakeQuant``, else None:
    the Q's output has that DQ (claimed too, where ``claimed`` is given) as its only reader
    and is no graph output."""
    if node.op_type != "QuantizeLinear" or node.domain or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    readers = graph.consumers.get(out, [])
    if len(readers) != 1 or out in graph.outputs or (claimed is not None and readers[0] not in claimed):
        return None
    dq = graph.nodes[readers[0]]
    if dq.op_type != "DequantizeLinear" or dq.domain or dq.inputs[0] != out or len(dq.outputs) != 1:
        return None
    q_params, dq_params = _scalar_quant(graph, node), _scalar_quant(graph, dq)
    if q_params is None or dq_params is None or q_params[2] != dq_params[2]:
        return None
    lo, hi = _PAIR_RANGES[q_params[2]]
    # float32 constants, made once: the compiled loop's arguments as they are passed each run
    return FakeQuant(q_params[0], np.float32(lo - q_params[1]), np.float32(hi - q_params[1]),
                     np.float32(q_params[1] - dq_params[1]), dq_params[0], dq.index)


def pair_codes(node: NodeView, graph: GraphView) -> tuple[np.float32, int, np.dtype] | None:
    """(scale, zero point, type) of a ``fake_quant`` pair of QuantizeLinear ``node`` whose
    DequantizeLinear has the same ones, with 8-bit codes, else None: the pair's output is then
    exactly DequantizeLinear(QuantizeLinear(x)) of those codes, and an 8-bit kernel may take
    the codes in its place (``onednn_group.py``)."""
    if fake_quant(node, graph) is None:
        return None
    params = _scalar_quant(graph, node)
    dq = graph.nodes[graph.consumers[node.outputs[0]][0]]
    if params != _scalar_quant(graph, dq) or params[2] not in (np.dtype(np.uint8), np.dtype(np.int8)):
        return None
    return params


#: ops that only move or select their first input's values: a tensor on a quantization grid
#: stays on it (the quantizer gives the Q/DQ pair after such an op the scale before it)
_GRID_KEEPING = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


def _on_grid(q: NodeView, graph: GraphView, params: tuple) -> bool:
    """Whether QuantizeLinear ``q``'s input is a DequantizeLinear's output with ``params``
    (scale, zero point, type), directly or through ``_GRID_KEEPING`` ops: every value is then
    (code - zero point) * scale, which Q and a DQ with those ``params`` give back bit for bit
    (x / scale is within 2^-15 of the integer code - zero point)."""
    index = graph.producer.get(q.inputs[0])
    node = graph.nodes[index] if index is not None else None
    while node is not None and node.op_type in _GRID_KEEPING and not node.domain:
        index = graph.producer.get(node.inputs[0])
        node = graph.nodes[index] if index is not None else None
    return (node is not None and node.op_type == "DequantizeLinear" and not node.domain
            and _scalar_quant(graph, node) == params)


def fake_quant_pairs(graph: GraphView, claimed: Iterable[int]) -> list[tuple[int, int]]:
    """The (QuantizeLinear, DequantizeLinear) pairs among ``claimed`` that ``fake_quant``
    computes as one: the CPU provider claims each as a fused group. A QDQ transformer is about
    half such nodes (qdq-transformer: 148 of 273), each a few microseconds of call on its own."""
    claimed = set(claimed)
    pairs = []
    for i in sorted(claimed):
        node = graph.nodes[i]
        if node.inputs and node.inputs[0] and fixed_constant(graph, node.inputs[0]) is not None:
            # a constant's pair (a weight quantized at run time: nothing folded it, as at
            # ORT_DISABLE_ALL) stays two nodes: a group reads no constant as an input
            continue
        fq = fake_quant(node, graph, claimed)
        if fq is not None:
            pairs.append((i, fq.dq))
    return pairs


def fake_quant_kernel(request: KernelRequest) -> Kernel | None:
    """The kernel of a group of ``fake_quant_pairs``, else None (another kind of group)."""
    nodes = request.nodes
    if len(nodes) != 2 or nodes[0].op_type != "QuantizeLinear" or nodes[1].op_type != "DequantizeLinear":
        return None
    fq = fake_quant(nodes[0], request.graph)
    x_name = nodes[0].inputs[0]
    if fq is None or fq.dq != nodes[1].index or x_name not in request.inputs:
        return None
    params = _scalar_quant(request.graph, nodes[0])
    if params == _scalar_quant(request.graph, nodes[1]) and _on_grid(nodes[0], request.graph, params):
        # a pair after a Reshape or Transpose of a DequantizeLinear's output with the same
        # parameters (a QDQ transformer's attention heads): its output is its input
        compute, note = (lambda x: x), "QuantizeLinear -> DequantizeLinear of values already on its grid: passed on"
    else:
        compute, note = fq, "QuantizeLinear -> DequantizeLinear in one pass"
    run = compute
    if request.inputs != (x_name,):  # a scale or zero point from a Constant node comes in too
        position = request.inputs.index(x_name)

        def run(*args: np.ndarray) -> np.ndarray:
            return compute(args[position])
    return Kernel(run=run, single_output=True, note=note)


def _dequantized_weights(graph: GraphView, name: str, conv: bool = False
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(codes, scale, zero point) of a DequantizeLinear of fixed 8-bit constants with one scale
    or one per output channel: a QDQ MatMul's weights (K, N), per column (axis 1), or with
    ``conv`` a QDQ Conv's (M, C/g, k...), per output channel (axis 0); else None."""
    index = graph.producer.get(name) if name else None
    node = graph.nodes[index] if index is not None else None
    if node is None or node.op_type != "DequantizeLinear" or node.domain or int(node.attr("block_size", 0) or 0):
        return None
    codes = fixed_constant(graph, node.inputs[0])
    scale = fixed_constant(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    zero = fixed_constant(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if codes is None or codes.dtype not in (np.int8, np.uint8) or scale is None or scale.dtype != np.float32:
        return None
    if (codes.ndim < 3) if conv else (codes.ndim != 2):
        return None
    if len(node.inputs) > 2 and node.inputs[2] and zero is None:
        return None
    channel_axis = 0 if conv else 1
    per_channel = scale.size > 1
    if per_channel and (scale.ndim != 1 or scale.size != codes.shape[channel_axis]
                        or normalize_axis(int(node.attr("axis", 1)), codes.ndim) != channel_axis):
        return None
    if zero is not None and (zero.size != scale.size or zero.dtype != codes.dtype):
        return None
    shape = scale.reshape(-1).shape if per_channel else ()
    return codes, scale.reshape(shape), None if zero is None else zero.reshape(shape)


def _integer_bias(graph: GraphView, name: str, scale: np.ndarray) -> np.ndarray | None:
    """The int32 codes of a QDQ bias, a DequantizeLinear of fixed int32 constants whose scale is
    ``scale`` (the input's times the weights', as the quantizer writes it), else None: they are
    added to the integer accumulator, as onnxruntime's QLinearConv adds them."""
    index = graph.producer.get(name) if name else None
    node = graph.nodes[index] if index is not None else None
    if node is None or node.op_type != "DequantizeLinear" or node.domain or len(node.inputs) < 2:
        return None
    codes = fixed_constant(graph, node.inputs[0])
    bias_scale = fixed_constant(graph, node.inputs[1])
    zero = fixed_constant(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if codes is None or codes.dtype != np.int32 or codes.ndim != 1 or bias_scale is None:
        return None
    if (len(node.inputs) > 2 and node.inputs[2]) and (zero is None or zero.any()):
        return None
    m = codes.size
    if bias_scale.dtype != np.float32 or bias_scale.size not in (1, m) or not np.array_equal(
            np.broadcast_to(bias_scale.reshape(-1), (m,)), np.broadcast_to(scale.reshape(-1), (m,))):
        return None
    return codes


def _input_codes(graph: GraphView, name: str):
    """(scale, zero point, integer type, ``codes(x)``) where ``name`` is the output of a
    DequantizeLinear of per-tensor 8-bit codes (a QDQ product's float input), else None.
    ``codes(x)`` recovers the codes from that float input: it is (q - zero point) * scale rounded
    to float32, and rint(x / scale) gives q - zero point back exactly (an error below
    255 * 2^-23)."""
    index = graph.producer.get(name) if name else None
    dq = graph.nodes[index] if index is not None else None
    params = _scalar_quant(graph, dq) if dq is not None and dq.op_type == "DequantizeLinear" else None
    if params is None or params[2] not in (np.dtype(np.uint8), np.dtype(np.int8)):
        return None
    scale, zero, dtype = params
    to, q_scale, q_zero = _onnx_type(dtype), np.asarray(scale, np.float32), np.asarray(zero, dtype)
    # the compiled loop's arguments, made once (``quantize`` converts them at each call)
    loop_args = (np.float32(scale), np.float32(zero), *(np.float32(v) for v in _INT_RANGES[to]))

    def codes(x: np.ndarray) -> np.ndarray:
        loop = _jit.quantize() if x.dtype == np.float32 else None
        if loop is None:
            return quantize(x, q_scale, q_zero, to, 1, 0, True)
        y = np.empty(x.shape, dtype)
        loop(np.ascontiguousarray(x).reshape(-1), *loop_args, y.reshape(-1))
        return y

    return scale, zero, dtype, codes


def qdq_integer_matmul(node: NodeView, request: KernelRequest):
    """For a QDQ model's MatMul of DequantizeLinear(per-tensor 8-bit codes) and
    DequantizeLinear(constant 8-bit weights): ``run(a) -> y | None``, the product as onnxruntime's
    QDQ fusion computes it (MatMulIntegerToFloat): the codes' exact integer product by oneDNN's
    8-bit matmul (``_integer.ConstantIntegerMatrix``) times a_scale * b_scale, in float32, the
    codes recovered from the float input (``_input_codes``). None (the node's float product
    runs) where the node is not of that form, and ``run`` gives None where none of oneDNN, the
    compiled packed product (any rows) and, without numba, the exact float32 product (from
    ``_integer.F32_MIN_ROWS`` rows) takes it."""
    graph = request.graph
    a_codes = _input_codes(graph, node.inputs[0]) if node.inputs else None
    weights = _dequantized_weights(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    if a_codes is None or weights is None:
        return None
    a_scale, a_zero, a_dtype, codes_of = a_codes
    codes, w_scale, w_zero = weights
    matrix = _integer.ConstantIntegerMatrix(codes, w_zero)
    scale = (a_scale * w_scale).astype(np.float32)  # onnxruntime's: the product of the scales

    def run(a: np.ndarray) -> np.ndarray | None:
        if a.dtype != np.float32 or a.ndim < 2 or a.shape[-1] != matrix.k:
            return None
        rows = a.size // matrix.k
        if not matrix.takes_onednn(rows, a_dtype):  # (before the quantization it would waste)
            return None
        # where oneDNN declines (no VNNI) the exact product is the compiled one (any rows: 1 x
        # 768 x 3072 0.05 ms against the float product's 0.16-0.23 on an AVX2 EPYC), else
        # float32 BLAS from ``_integer.F32_MIN_ROWS`` rows
        few_rows = rows < _integer.F32_MIN_ROWS and _jit.packed_product() is None
        y = matrix.scaled_times(codes_of(a).reshape(rows, matrix.k), a_zero, scale, onednn_only=few_rows)
        return None if y is None else y.reshape(a.shape[:-1] + (matrix.n,))

    return run


def qdq_integer_conv(node: NodeView, request: KernelRequest):
    """For a QDQ model's Conv of DequantizeLinear(per-tensor 8-bit codes) and
    DequantizeLinear(constant 8-bit weights, one scale or one per output channel): ``run(x, b)
    -> y | None``, the convolution as onnxruntime's QLinearConv accumulates it: the codes' exact
    int32 convolution by oneDNN (``_integer.ConstantIntegerConvolution``), plus the bias's int32
    codes where it is a DequantizeLinear at the product's scale, times x_scale * w_scale in
    float32 (another bias is added in float32), the codes recovered from the float input
    (``_input_codes``). None where the node is not of that form; ``run`` gives None where
    oneDNN does not take the convolution (the float kernel then runs)."""
    graph = request.graph
    x_codes = _input_codes(graph, node.inputs[0]) if node.inputs else None
    weights = _dequantized_weights(graph, node.inputs[1], conv=True) if len(node.inputs) > 1 else None
    if x_codes is None or weights is None:
        return None
    x_scale, x_zero, _, codes_of = x_codes
    codes, w_scale, w_zero = weights
    group = int(node.attr("group", 1))
    if codes.shape[0] % group:
        return None
    macs_per_output = codes[0].size
    integer_conv = _integer.ConstantIntegerConvolution(codes, w_zero, group)
    geometry = _GeometryCache(node)
    kernel_shape = tuple(node.attr("kernel_shape") or codes.shape[2:])
    scale = (x_scale * w_scale).astype(np.float32)
    bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
    bias_codes = _integer_bias(graph, bias_name, scale) if bias_name else None
    channel_shape = (1, -1) + (1,) * (codes.ndim - 2)
    bias_by_channel = None if bias_codes is None else bias_codes.reshape(channel_shape)
    scale_by_channel = scale.reshape(channel_shape) if scale.ndim else scale

    def run(x: np.ndarray, b: np.ndarray | None) -> np.ndarray | None:
        if x.dtype != np.float32 or x.ndim != codes.ndim or x.ndim not in (3, 4):
            return None
        g = geometry.get(x.shape, kernel_shape)
        if x.shape[0] * math.prod(g.out) * codes.shape[0] * macs_per_output < _integer.ONEDNN_MIN_MACS:
            return None  # (before the quantization it would waste: the float kernel is faster)
        acc = integer_conv(codes_of(x), x_zero, g)
        if acc is None:
            return None
        if bias_by_channel is not None:
            acc += bias_by_channel
        y = acc.astype(np.float32)
        y *= scale_by_channel
        if b is not None and bias_by_channel is None:
            y += b.reshape(channel_shape)
        return y

    return run
