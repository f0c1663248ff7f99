"""Compiled loops for the few kernels numpy cannot express without a K-fold copy (numba).

A depthwise convolution does K multiply-adds per output value and has no GEMM in it: numpy
either copies K shifted images into a column buffer for a batched GEMV, or makes 2K passes of
multiply/add over the output; both are memory-bound (about 2 ms for ocr-rec's 240-channel 5x5
layer on this machine). A compiled loop reads each padded row from L1, four taps a pass
over an accumulator row, and vectorises over the output row (ocr-rec's 240-channel 12x80 5x5
layer: 398 us). numba is a default dependency where it installs: without it, or with
``ORT_EP_CPU_NUMBA=0`` in the environment, the numpy path runs. Functions compile on first use
per dtype (``cache=True`` keeps the machine code on disk for the next process).

Elementwise chains compile too where numpy needs many passes: HardSigmoid (three), HardSwish
(four) and Gelu / BiasGelu (about fifteen, most of them erf's: one pass here, 5-7x); so do the
rows of LayerNormalization / SkipLayerNormalization (about ten numpy calls: 22 -> 4 us on a
transformer's (64, 128)).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Callable

import numpy as np

from .. import threads

_lock = threading.Lock()
_depthwise: Callable | None = None
_depthwise_flat: Callable | None = None
_activations: dict[str, Callable] = {}
_hard_sigmoid_value: Callable | None = None  # the compiled _hard_sigmoid_value_py (set by _load)
_gelu_rows: Callable | None = None
_gelu_rows_split: Callable | None = None
_gelu_block: Callable | None = None  # the compiled _gelu_block_py (set by _load)
_layer_norm_rows: Callable | None = None
_layer_norm_rows_split: Callable | None = None
_layer_norm_block: Callable | None = None  # the compiled _layer_norm_block_py (set by _load)
_taps_into: Callable | None = None  # the compiled _taps_into_py (set by _load)
_interleave: Callable | None = None
_lstm_scan: Callable | None = None
_quantized_lstm_step: Callable | None = None
_quantized_lstm_scan: Callable | None = None
_lstm_cell_row: Callable | None = None
_lstm_cell_row_mlas: Callable | None = None  # (and the MLAS activations and their helpers, set by _load)
_lstm_cells: Callable | None = None
_lstm_step: Callable | None = None
_gru_scan: Callable | None = None
_rnn_scan: Callable | None = None
_lstm_panel_scan: Callable | None = None
_recurrent_product: Callable | None = None  # compiled helpers of the scans (set by _load)
_sigmoid_value: Callable | None = None
_exp_value: Callable | None = None
_tanh_value: Callable | None = None
_erf_value: Callable | None = None
_erf: Callable | None = None
_erf_in_place: Callable | None = None
_erf_split: Callable | None = None
_binary_flat: Callable | None = None  # the compiled _binary_flat_py (set by _load)
_binary_rows: Callable | None = None  # the compiled _binary_rows_py (set by _load)
_binary_flat_split: Callable | None = None  # the compiled _binary_flat_split_py (set by _load)
_binary_rows_split: Callable | None = None  # the compiled _binary_rows_split_py (set by _load)
_fake_quantize_split: Callable | None = None
_erf_in_place_split: Callable | None = None
_quantize: Callable | None = None
_dequantize: Callable | None = None
_dequantize_axis: Callable | None = None
_fake_quantize: Callable | None = None
_fake_quantize_value: Callable | None = None  # the scalar pair, a global of the loops below (set by _load)
_qdq_hard_swish: Callable | None = None
_packed_product: Callable | None = None
_quantized_lstm_quad_scan: Callable | None = None
_quantized_lstm_buffers: Callable | None = None  # the scans' inline helpers
_quantized_lstm_after_product: Callable | None = None
_float32_from_bits: Callable | None = None  # ``_vector_ir``'s, a global of ``_exp_value`` (set by _load)
_forked = False  # a process forked after numba's OpenMP pool started (``_after_fork``)
_packed_product_split: Callable | None = None  # the packed product on several threads
_packed_share: Callable | None = None  # a share of its panels, the loop both run (set by _load)
_minus_zero_points: Callable | None = None  # both products' first pass (set by _load)
_codes_product: Callable | None = None  # the product of constant rows and packed columns (set by _load)
_codes_product_split: Callable | None = None  # ... on several threads
_codes_share: Callable | None = None  # a share of its panels, the loop both run (set by _load)
_pack_code_pair: Callable | None = None  # ``_vector_ir``'s, a global of the share (set by _load)
_prange: Callable = range  # numba.prange once numba is loaded: the shares of a parallel loop
# the register blocks of _packed_share_py, of 1-4 rows (``_vector_ir.madd_block``, set by _load)
_madd_rows1 = _madd_rows2 = _madd_rows3 = _madd_rows4 = None
# the float32 product (``float_product``): its register blocks of 1-6 rows (``_vector_ir.fma_block``)
_fma_rows1 = _fma_rows2 = _fma_rows3 = _fma_rows4 = _fma_rows5 = _fma_rows6 = None
_float_share: Callable | None = None
_float_product: Callable | None = None
_float_product_split: Callable | None = None
_panel_rows: Callable | None = None  # the blocks over a panel's rows, a global of both shares (set by _load)
# the byte product (``quad_product``): its register blocks of 1-4 rows (``_vector_ir.quad_block``),
# the share of panels both loops run, and the loops; None where the CPU has no AVX2 (set by _load)
_quad_rows1 = _quad_rows2 = _quad_rows3 = _quad_rows4 = None
_quad_share: Callable | None = None
_quad_product: Callable | None = None
_quad_product_split: Callable | None = None
_small_conv: Callable | None = None
_bilinear: Callable | None = None
_conv_combine: Callable | None = None
_half_to_float: Callable | None = None
_float_to_half: Callable | None = None
_pairwise_coupling: Callable | None = None
_roi_align: Callable | None = None
_grid_taps: Callable | None = None
_grid_linear: Callable | None = None
_scatter_rows: Callable | None = None
_grid_axis: Callable | None = None  # the compiled _grid_axis_py and _plane_taps_py (set by _load)
_plane_taps: Callable | None = None
_top_k_rows: Callable | None = None
_softmax_rows: Callable | None = None
_softmax_rows_split: Callable | None = None
_softmax_block: Callable | None = None  # the compiled _softmax_block_py (set by _load)
_row_max: Callable | None = None  # the compiled _row_max_py, a global of _softmax_block_py (set by _load)
_rows_times_kn: Callable | None = None
_rows_times_nk: Callable | None = None
_rows_times_nk_share: Callable | None = None  # the compiled _rows_times_nk_share_py (set by _load)
_nk_four_rows = _nk_three_rows = _nk_two_rows = _nk_one_row = None  # its row blocks, globals of it (set by _load)
_kn_four_rows_add = _kn_three_rows_add = _kn_two_rows_add = None  # _rows_times_kn_add_py's (set by _load)
_rows_times_kn_part: Callable | None = None  # the compiled _rows_times_kn_part_py (set by _load)
_rows_times_kn_add: Callable | None = None  # the compiled _rows_times_kn_add_py (set by _load)
_rows_times_kn_split: Callable | None = None
_rows_times_nk_split: Callable | None = None
_normalize_rows: Callable | None = None
_nan_max: Callable | None = None
_linear_finish: Callable | None = None
_scale_rows: Callable | None = None
_sigmoid: Callable | None = None
_sigmoid_in_place: Callable | None = None
_tanh: Callable | None = None
_tanh_in_place: Callable | None = None
_quick_gelu: Callable | None = None
_exp: Callable | None = None
_exp_in_place: Callable | None = None
_exp_point: Callable | None = None  # the compiled _exp_point_py, a global of both (set by _load)
_logistic_point: Callable | None = None  # the compiled _logistic_point_py and _tanh_point_py (set by _load)
_tanh_point: Callable | None = None
_log1p_unit: Callable | None = None  # the compiled _log1p_unit_py, a global of the next (set by _load)
_softplus_value: Callable | None = None  # ... of the softplus and mish loops (set by _load)
_tried = False

#: compiled kernels are wanted (tests switch this off to run the numpy paths)
USE = os.environ.get("ORT_EP_CPU_NUMBA", "1") != "0"


def enabled() -> bool:
    """Whether compiled kernels are used: wanted, and numba importable."""
    return _load()


def info() -> dict:
    """Whether the compiled loops are used here, numba's version, or why not (``ort-core
    providers`` shows it). Does not import numba (about 0.4 s): a session that reaches no
    compiled loop never pays for it."""
    from importlib import metadata, util

    if not USE:
        return {"library": "numba", "used": False, "reason": "switched off (ORT_EP_CPU_NUMBA=0)"}
    if _tried and _depthwise is None or not _tried and util.find_spec("numba") is None:
        return {"library": "numba", "used": False, "reason": "numba is not installed: pip install numba"}
    return {"library": "numba", "used": True, "version": metadata.version("numba")}


def depthwise_rows() -> Callable | None:
    """The compiled depthwise kernel, or None where numba is not installed."""
    return _depthwise if _load() else None


def depthwise_flat() -> Callable | None:
    """The compiled stride-1 depthwise kernel on the flat padded plane, or None."""
    return _depthwise_flat if _load() else None


def activation(name: str) -> Callable | None:
    """The compiled one-pass activation loop ``name`` over flat arrays, or None:

    - ``hard_sigmoid`` ``(x, y, alpha, beta)``: y = clip(alpha * x + beta, 0, 1)
    - ``hard_swish`` ``(x, y, alpha, beta)``: y = x * clip(alpha * x + beta, 0, 1)
    - ``hard_sigmoid_in_place``, ``hard_swish_in_place`` ``(x, alpha, beta)``: the same into x.
    - float32 only, ``(x, y, alpha, beta)``: ``elu`` y = beta * (x if x > 0 else alpha * (e^x -
      1)) (Elu with beta 1, Selu with its gamma: onnxruntime's formula, e^x - 1 rather than
      expm1), ``celu`` max(0, x) + min(0, alpha * (e^(x / alpha) - 1)), ``thresholded_relu`` x
      if x > alpha else 0, ``softsign`` x / (1 + |x|), ``softplus`` log(1 + e^x) (as max(x, 0) +
      log(1 + e^-|x|), the logarithm by ``_log1p_unit``), ``mish`` x * tanh(softplus(x)) (beta,
      and alpha where unnamed, unread), ``leaky_relu`` x if x >= 0 else alpha * x.
      NaN stays NaN (but ThresholdedRelu's 0, as its comparison is false). numpy's expm1 and
      np.where made Elu, Selu and Celu 13x and ThresholdedRelu 15x onnxruntime's time on a
      (1, 32, 80, 80) map (3.0 ms and 0.75 against 0.23 and 0.05).

    The two-array loops need y and x apart: LLVM vectorises them behind a run-time overlap
    check, and with y = x the check fails and the loop runs scalar (5x slower: 162 against
    33 us on a 240x12x80 map); the in-place loops read and write one array."""
    return _activations.get(name) if _load() else None


def gelu_rows(parts: int = 1) -> Callable | None:
    """The compiled float32 ``gelu(x + bias)`` loop ``(x, bias, y, tanh_form, parts)`` over
    C-contiguous (rows, h) arrays (``bias`` of length h, or empty for none), or None: erf's
    Gelu, or where ``tanh_form`` its tanh approximation 0.5 v (1 + tanh(sqrt(2 / pi) (v +
    0.044715 v^3))) (FastGelu, Gelu's approximate="tanh"; by ``_tanh_point``: numpy's libm tanh
    and the polynomial's passes took (1, 48, 1024) 225 us, here 45). For ``parts`` > 1 (see
    ``split_parts``), the one that splits the rows into ``parts`` blocks on as many threads."""
    if not _load():
        return None
    return _gelu_rows if parts <= 1 or _forked else _split(_gelu_rows_split)


def layer_norm_rows(parts: int = 1) -> Callable | None:
    """The compiled float32 loop ``(x, skip, bias, gamma, beta, eps, y, total, rms, parts)`` over
    C-contiguous (rows, h) arrays, or None: s = x + skip + bias, y = (s - mean) / sqrt(var +
    eps) * gamma + beta per row (mean and variance of s over the row), and ``total`` = s where
    it is not empty. ``skip`` and ``total`` are (rows, h) or empty, ``bias`` and ``beta`` (h,)
    or empty (then absent). ``rms``: no mean (0), so y = s / sqrt(mean(s^2) + eps) * gamma +
    beta, onnxruntime's SimplifiedLayerNormalization (T5's RMS norm: (1, 48, 512) 59 us by
    numpy's passes). For ``parts`` > 1 (see ``split_parts``), the one that splits the rows into
    ``parts`` blocks on as many threads."""
    if not _load():
        return None
    return _layer_norm_rows if parts <= 1 or _forked else _split(_layer_norm_rows_split)


def interleave() -> Callable | None:
    """The compiled loop ``(src, bias, y)``: y[n, c, i*kh + a, j*kw + b] = src[n, c, a, b, i, j]
    + bias[c] for src (N, C, kh, kw, H, W) (any strides; a stride of 0 repeats) and C-contiguous
    y (N, C, H*kh, W*kw); or None. Resize's integer nearest upsampling and ConvTranspose with
    stride == kernel write their output this way: numpy can only do it with one copy per
    (a, b) into a view whose inner step is kw values (2x slower on ocr-det's maps)."""
    return _interleave if _load() else None


def erf(in_place: bool = False, parts: int = 1) -> Callable | None:
    """The compiled float32 erf loop ``(x, y, parts)`` over flat arrays (absolute error under
    1.5e-7, as the Gelu loop's), or ``(x, parts)`` into x where ``in_place``, or None. With y =
    x the two-array loop fails LLVM's run-time overlap check and runs scalar (3x slower: 72
    against 24 us on a transformer's (64, 512) GELU input), as ``activation``'s do. For
    ``parts`` > 1 (``split_parts``), the one that splits the array into ``parts`` blocks on as
    many threads (a QDQ transformer's (8, 64, 512) Erf: 176 us on one)."""
    if not _load():
        return None
    if parts <= 1 or _forked:
        return _erf_in_place if in_place else _erf
    return _split(_erf_in_place_split if in_place else _erf_split)


def binary_split(rows: bool) -> Callable | None:
    """The compiled float32 Add / Sub / Mul / Div (``op`` 0-3, as numpy computes each value)
    split into ``parts`` blocks on as many threads, or None: ``rows`` false, ``(a, b, y, op,
    parts)`` over flat a and y with b of a's size or one value; ``rows`` true, the same over
    the rows of a and y (R, m) with b (m,) added to each (a bias). numpy runs these on one
    thread, and a broadcast bias at 49 us on (8, 64, 512) where the rows loop on two threads
    took 16. y must not be a or b (the loops would run scalar behind LLVM's overlap check)."""
    if not _load() or _forked:
        return None
    return _split(_binary_rows_split if rows else _binary_flat_split)


def quantize() -> Callable | None:
    """The compiled loop ``(x, scale, zero_point, lo, hi, y)``: QuantizeLinear with one scale
    and zero point (float32 scalars) over flat float32 x into flat integer y, or None."""
    return _quantize if _load() else None


def dequantize() -> Callable | None:
    """The compiled loop ``(x, scale, zero_point, y)``: DequantizeLinear with one scale and
    zero point (float32 scalars) over flat integer x into flat float32 y, or None."""
    return _dequantize if _load() else None


def dequantize_axis() -> Callable | None:
    """The compiled loop ``(x, scale, zero_point, by_row, y)``: DequantizeLinear per axis, y =
    (float32(x) - zero_point[c]) * scale[c] over C-contiguous 2-D integer x (R, L) into float32
    y, with float32 scale and zero point (C,) for row r's c = r % C where ``by_row``, else for
    column c (the axis last: a MatMul weight's N), or None. One pass where numpy's took three
    (convert, subtract, multiply): a QDQ model's per-channel weights are dequantized at session
    creation."""
    return _dequantize_axis if _load() else None


def fake_quantize(parts: int = 1) -> Callable | None:
    """The compiled loop ``(x, scale, lo, hi, shift, out_scale, y, parts)``: y = (clip(rint(x /
    scale), lo, hi) + shift) * out_scale over flat float32 arrays (``quant.FakeQuant``: a
    QuantizeLinear and its DequantizeLinear in one pass), or None. For ``parts`` > 1
    (``split_parts``), the one that splits the array into ``parts`` blocks on as many threads (a
    QDQ transformer's (8, 64, 512) pairs: 40 us each on one)."""
    if not _load():
        return None
    return _fake_quantize if parts <= 1 or _forked else _split(_fake_quantize_split)


def qdq_hard_swish() -> Callable | None:
    """The compiled loop ``(x, add, pair1, pair2, divisor, divide_first, last, pair3, y)`` over
    flat float32 arrays, or None: a QDQ model's hard swish spelled out, each step's Q/DQ pair in
    float32 (``FakeQuant``'s arithmetic, each pair a (scale, lo, hi, shift, out_scale) float32
    tuple): a = pair1(x + add), then b = pair2(x * a), y = b / divisor, or where
    ``divide_first`` b = pair2(a / divisor), y = x * b; then y = pair3(y) where ``last``. One
    pass where the steps took five or six (``onednn_group._HardSwishChain``)."""
    return _qdq_hard_swish if _load() else None


def packed_product(parts: int = 1) -> Callable | None:
    """The compiled exact product ``(a, za, bp, z, parts)``: z = (a - za) @ B for 8-bit codes
    ``a`` (M, K), C-contiguous, with int32 zero points ``za`` (M,), one per row, ``bp`` B - zb
    packed by ``_integer.pack_panels`` (int8 where it fits, else int16), int32 ``z`` (M, N)
    written, or None. Sixteen multiply-adds per VPMADDWD (``_vector_ir``), the sums exact in
    int32 below K = 33025. For ``parts`` > 1, the one that splits B's panels into ``parts``
    shares on as many threads (numba's OpenMP or TBB pool: 2.5-9 us to enter, measured at
    several sizes, where Python threads took 25; even one share pays it, so one share takes
    the serial loop: a 1 x 128 x 128 product 6.7 -> 1.1 us). On an AVX2 EPYC, us one / two shares:
    1 x 768 x 3072 73 / 40; 48 x 512 x 1024 387 / 176 (float32 BLAS, one thread: 633), where
    the CPU has no VNNI for oneDNN's 8-bit kernels."""
    if not _load():
        return None
    return _packed_product if parts <= 1 or _forked else _split(_packed_product_split)


def quad_product(parts: int = 1) -> Callable | None:
    """The compiled exact byte product ``(a, zu, bq, column_sums, starts, outliers, z, parts)``:
    z = a @ Bs - zu * colsum(Bs) for uint8 codes ``a`` (M, 4Q), C-contiguous (zeros past K),
    int32 ``zu`` (M,) and int8 Bs = B - zb packed by ``_integer.pack_quads`` (``bq``, its
    ``column_sums``, and the pairs of Bs moved out of ``bq`` because VPMADDUBSW's int16 sum
    could saturate on them: ``outliers`` (count, 4) int32 rows (k, column, Bs[k], Bs[k + 1]),
    those of panel q at ``starts[q]:starts[q + 1]``, added back exactly after the panel's
    block); int32 ``z`` (M, N) written. Or None where the CPU has no AVX2 (numba compiles for
    the host). VPMADDUBSW + VPMADDWD: 32 multiply-adds per two instructions with A's codes as
    bytes (``packed_product`` widens B to int16 and takes half as many codes per broadcast).
    For ``parts`` > 1 the panels are split into that many shares on the thread pool."""
    if not _load() or _quad_product is None:
        return None
    return _quad_product if parts <= 1 or _forked else _split(_quad_product_split)


def codes_product(parts: int = 1) -> Callable | None:
    """The compiled exact product ``(a16, cols, zx, bp, z, parts)``: z = A @ (cols - zx) for
    constant int16 rows ``a16`` (M, 2P: 8-bit codes minus their zero points, a zero past an
    odd K), 8-bit codes ``cols`` (K, N) C-contiguous (an image's im2col columns: K = channels x
    kernel taps, N = output pixels) with one int32 zero point ``zx``, and int32 ``z`` (M, N)
    written: a convolution's output channels in NCHW order, with no transpose either way.
    ``bp`` (ceil(N/16) panels, P, 32) int16 is scratch: each 16-pixel panel of the columns is
    packed there (the codes minus zx, pairs of K interleaved as ``packed_product``'s B) just
    before the register blocks meet it, so it is read from L1. For ``parts`` > 1 the panels are
    split into that many shares on the thread pool (see ``packed_product``)."""
    if not _load():
        return None
    return _codes_product if parts <= 1 or _forked else _split(_codes_product_split)


def float_product(parts: int = 1) -> Callable | None:
    """The compiled float32 product ``(a, bp, bias, z, parts)``: z = a @ B + bias for ``a`` (M,
    K) C-contiguous, B packed by ``nn.pack_float_panels`` (``bp`` (panels, K, 16) and ``bias``
    (16 panels,), zeros past N), ``z`` (M, N) C-contiguous written; or None. Register blocks of
    six rows by a panel's sixteen columns (``_vector_ir.fma_block``), the rows in blocks held
    in L2 while the panels meet them. For ``parts`` > 1, the one that splits the panels into
    ``parts`` shares on as many threads. On the AVX2 EPYC, us, one thread / two, against
    oneDNN's f32 GEMM (gemm:jit) at two: 64 x 128 x 512 88 / 47 / 74; 50 x 512 x 2048 1127 /
    568 / 1214; 128 x 768 x 3072 6910 / 3429 / 6740; 8 x 128 x 128 3.9 / - / 7.9."""
    if not _load():
        return None
    return _float_product if parts <= 1 or _forked else _split(_float_product_split)


def integer_to_float() -> Callable | None:
    """The compiled loop ``(acc, a, za, column_sums, offset, scale, y)``: y = float32((A - za)
    @ (B - zb)) * scale from oneDNN's bare int32 product ``acc`` = A @ Bs of the codes ``a``
    (M, K) and ``_integer.ConstantIntegerMatrix``'s terms (int32 ``za``, ``column_sums`` (N,),
    ``offset``: the row sums of ``a`` are taken only where it is not 0); ``scale`` (N,) or (1,)
    float32, y (M, N) float32, or None. A QDQ MatMul's product and scaling in one pass instead
    of four numpy passes (64 x 128 x 128: about 35 us of them)."""
    return _integer_to_float if _load() else None


def conv_combine() -> Callable | None:
    """The compiled loop ``(out, unit, zx, offset, y)`` of ``_integer.ConstantIntegerConvolution``:
    y[n, g, m, p] = (out - zx * unit)[n, g, m, p] + offset[g, m] * (out - zx * unit)[n, g, M, p]
    over int32 ``out`` (N, G, M + 1, P), ``unit`` (G, M + 1, P), ``offset`` (G, M) and ``y``
    (N, G, M, P), ``zx`` an int32 (the last channel of each group holds the sums of the
    input's codes), or None. One pass instead of numpy's five (192 x 800 outputs: 48 -> 14 us);
    int32 arithmetic wraps as numpy's does."""
    return _conv_combine if _load() else None


def small_conv() -> Callable | None:
    """The compiled 2-D convolution of a small input, ``(x, wt, b, y, sh, sw, dh, dw, ph, pw,
    group, relu)``, or None: x (N, C, H, W), ``wt`` the weights as (C/group, KH, KW, M), b
    (M,), y (N, M, OH, OW) written, strides/dilations/top-left pads given, ``relu`` applied
    to the sums. Per output pixel the M sums are a vector (channels last), so it vectorises
    where the image is too small for the row loops: silero-vad's 1-D convolutions of 1-7
    samples took 4-17 us each through the numpy paths' Python, 1-3 here."""
    return _small_conv if _load() else None


def bilinear() -> Callable | None:
    """onnxruntime's bilinear Resize loop, ``(x, y1, y2, x1, x2, dy1, dy2, dx1, dx2, y)``, or
    None: x (B, H, W) float32, y (B, OH, OW) float32 written; per output pixel (i, j) the four
    corners' values times the products dx * dy of the axes' weights (index 1 takes weight 2),
    summed left to right, each product rounded (compiled without "contract"), so that the
    bits are onnxruntime's. numpy's form of the same arithmetic (``image._exact_linear``)
    makes eight passes over the output: 2.5x slower on a 2x upsample of 64 x 80 x 80."""
    return _bilinear if _load() else None


def half_to_float() -> Callable | None:
    """The compiled loop ``(h, y)``: float16 to float32, exactly as numpy converts (every one of
    the 65,536 values), over the flat uint16 view ``h`` of the float16 array into the flat
    uint32 view ``y`` of the float32 one, or None. numpy converts one element at a time
    (401,408 values: 540 us, the loop 26); a float16 model pays it at every node, as its
    kernels compute in float32."""
    return _half_to_float if _load() else None


def float_to_half() -> Callable | None:
    """The compiled loop ``(x, h)``: float32 to float16 rounded to nearest even, overflow to
    inf, as numpy converts (NaN stays NaN, its payload not kept), over the flat uint32 view
    ``x`` into the flat uint16 view ``h``, or None (401,408 values: numpy 1.2 ms, the loop
    40 us)."""
    return _float_to_half if _load() else None


def pairwise_coupling() -> Callable | None:
    """The compiled loop ``(r, p)``: libsvm's pairwise coupling of SVMClassifier's pairwise
    probabilities r (N, K, K) float32 into class probabilities p (N, K) float32, row by row in
    onnxruntime's float32 order (``svm._coupling`` is the numpy form), or None. numpy's form
    makes a dozen calls per class per iteration: 300 us for 8 rows of 3 classes, against
    onnxruntime's 10 for the whole model."""
    return _pairwise_coupling if _load() else None


def roi_align() -> Callable | None:
    """The compiled RoiAlign ``(xt, rois, batch, scale, offset, half_pixel, ratio, is_max, y)``,
    or None: ``xt`` the float32 input channels last (N, H, W, C), ``rois`` (R, 4) float32 as
    given (x1, y1, x2, y2), ``batch`` (R,) int64, ``y`` (R, out_h, out_w, C) float32 written.
    onnxruntime's float32 steps (``RoiAlignForward``): per bin, its samples' bilinear corners,
    each product rounded, summed in its order (avg: divided by the count; max: the largest
    weighted corner). Vectorised over the channels. numpy's form gathered every sample's four
    corners as float64 arrays: 34 ms a call on a Faster R-CNN's 150 regions of 256 channels."""
    return _roi_align if _load() else None


def grid_taps() -> Callable | None:
    """The compiled loop ``(x, lin, w, y)`` of GridSample's interpolation, or None: y[n, c, p]
    = sum over taps t of w[n, p, t] * x[n, c, lin[n, p, t]], each product rounded and added in
    tap order (as numpy's path adds them), for x (N, C, S), lin (N, P, T) int64, w (N, P, T)
    and y (N, C, P) of x's dtype. Channel by channel, so each gather reads one plane; numpy's
    path moved the image channels last and gathered (P, C) blocks per tap (a 32-channel 64x64
    bilinear sample: 0.69 ms, onnxruntime 0.12)."""
    return _grid_taps if _load() else None


def grid_linear() -> Callable | None:
    """The compiled 2-D bilinear GridSample ``(x, grid, height, width, align, border, y)`` with
    zeros or border padding, or None: x (N, C, H * W), grid (N, P, 2) as given, y (N, C, P) of
    x's dtype.
    The numpy path's arithmetic step for step (float64 coordinates and weights, each weight
    rounded to x's dtype, the four taps added in order), so the same values; no (N, P, 4)
    temporaries (a 32-channel 64x64 sample: 0.69 ms by numpy, onnxruntime 0.12)."""
    return _grid_linear if _load() else None


def top_k_rows() -> Callable | None:
    """The compiled TopK of each row ``(x, k, largest, values, indices)``, or None: x (R, N)
    C-contiguous, values (R, k) of its dtype and indices (R, k) int64 written, best first. The
    spec's order and onnxruntime's: ties by the lower index, NaN above +inf when largest, last
    when smallest. One pass keeping the k best in order (for small k: O(N k)), where numpy's
    selection took about ten calls (a nearest-neighbour model's (8, 150) k = 5: 35 us)."""
    return _top_k_rows if _load() else None


def softmax_rows(parts: int = 1) -> Callable | None:
    """The compiled float32 Softmax / LogSoftmax of each row ``(x, y, log, parts)``, or None: x
    and y (R, N) C-contiguous, y written. Each row's max subtracted, exp by ``_exp_value``
    (within 2 ulp of expf; 0 below -87, so a masked -inf gives 0 as numpy's exp does), the sum,
    then one multiply by its reciprocal (log: minus its log). A row whose max is not finite
    (NaN, +inf, all -inf) gets numpy's IEEE result: NaN. One call where numpy makes five (max,
    subtract, exp, sum, divide): (1, 10) 6 us -> under 1; (1, 6, 48, 48) 58 -> 15 us. For
    ``parts`` > 1 (see ``split_parts``), the one that splits the rows into ``parts`` blocks on
    as many threads."""
    if not _load():
        return None
    return _softmax_rows if parts <= 1 or _forked else _split(_softmax_rows_split)


_watched: dict[Callable, Callable] = {}  # split loop -> the same, watched (``_split``)


def _split(loop: Callable) -> Callable:
    """``loop``, a compiled loop that splits its work over the OpenMP pool, as the kernels get
    it: with its runs watched for late threads (``threads.watched``: a busy core sends the split
    loops to one thread for a while, ``threads.split_threads``)."""
    run = _watched.get(loop)
    if run is None:
        run = _watched[loop] = threads.watched(loop)
    return run


#: row loops over at least this many elements split over the session's threads
#: (``split_parts``): numba's pool costs 2.5-9 us to enter, a pass over 64K float32 values
#: 30-60 us (Softmax, Gelu)
SPLIT_MIN_ELEMENTS = 1 << 16
#: ... and the loops computing an exp, tanh or erf of each value (Softmax, Gelu, Erf: about
#: 0.7 ns a value on one thread) from this many. Measured on an AVX-512 Xeon, us, one thread /
#: two: Gelu (tanh form) 8 x 1024 6.9 / 5.9, 16 x 1024 12.5 / 8.7, 48 x 1024 39.3 / 22.5;
#: Softmax 384 x 48 15.6 / 10.7; Erf 16K 11.9 / 8.4. (A layer norm, 0.3 ns a value, split at
#: 16K took as long: it keeps ``SPLIT_MIN_ELEMENTS``.)
SPLIT_MIN_TRANSCENDENTAL = 1 << 14


def split_parts(elements: int, rows: int, min_elements: int = SPLIT_MIN_ELEMENTS) -> int:
    """The shares a splittable row loop takes for ``elements`` values in ``rows`` rows: the
    session's threads from ``min_elements`` (at most one a row; see ``threads.split_threads``),
    else 1."""
    if elements < min_elements:
        return 1
    return max(1, min(threads.split_threads(), rows))


def row_products(parts: int = 1) -> tuple[Callable, Callable] | None:
    """The compiled float32 products of a few rows by small constant weights, ``(a, w, bias,
    y, parts)`` -> y = a @ W + bias, or None: (kn, nk) for W given as ``w`` (K, N) and as ``w`` (N, K)
    (a Gemm's transB layout, read as it is stored); a (M, K), y (M, N), all C-contiguous;
    ``bias`` (N,) or empty. For a few rows, where numpy's GEMV call and the bias add were
    most of the cost (us, numpy / compiled, one row: 512 -> 10 2.2 / 0.5, 128 -> 128 2.0 / 0.9,
    256 -> 256 3.7 / 1.8). nk reads each weight once for up to four rows. For ``parts`` > 1,
    the ones that split the work into ``parts`` shares on as many threads (numba's pool, as
    ``packed_product``): nk by blocks of W's rows, kn by blocks of K (partial sums added after;
    a block of W's columns is strided, and two threads reading halves of each row were slower
    than one reading it whole). Such products are bound by reading W: two threads read it at
    twice the rate (one row, us, one / two shares: 512 x 512 25 / 15, 256 -> 768 16 / 12, nk;
    1024 x 1024 89 / 48, kn)."""
    if not _load():
        return None
    if parts <= 1 or _forked:
        return _rows_times_kn, _rows_times_nk
    return _split(_rows_times_kn_split), _split(_rows_times_nk_split)


def normalize_rows() -> Callable | None:
    """The compiled ai.onnx.ml Normalizer of float32 rows ``(x, norm, y)``, or None: x and y
    (R, C) C-contiguous; ``norm`` 0 MAX (the row's max; NaN if the row has one), 1 L1, 2 L2;
    a row whose norm is 0 is copied as it is. One call where numpy made seven (3.5 us on a
    one-row pipeline)."""
    return _normalize_rows if _load() else None


def linear_finish() -> Callable | None:
    """The compiled ai.onnx.ml LinearClassifier finish ``(scores, intercepts, softmax, best,
    out)``, or None: per row of the float64 ``scores`` (changed in place) the intercepts added,
    the first maximum's index into ``best`` (``ml.first_max``'s), then into the
    float32 ``out`` the softmax over the row (``softmax`` 1) or the scores themselves (0). One
    call where numpy made eight (most of a one-row run)."""
    return _linear_finish if _load() else None


def scale_rows() -> Callable | None:
    """The compiled ai.onnx.ml Scaler ``(x, offset, scale, y)``, or None: y = (x - offset) *
    scale for float32 x and y (R, C) C-contiguous, offset and scale of C values or one."""
    return _scale_rows if _load() else None


def scatter_rows() -> Callable | None:
    """The compiled row scatter with a reduction ``(out, indices, updates, reduction)`` ->
    whether it applied, or None: over (R, C) C-contiguous ``out`` and (N, C) ``indices`` and
    ``updates`` (of out's dtype), where each row of ``indices`` holds one index (a graph
    network's Expand of edge or graph ids), in range (negative from the end):
    out[indices[i, 0]] reduced with updates[i] for i in order, ``reduction`` 0 add, 1 mul,
    2 max, 3 min (NaN wins, as numpy's ufuncs). Else False, and ``out`` untouched. The same
    operations in the same order as the spec's loop (and onnxruntime's): a graph network's
    scatter-add of 120 x 384 floats 758 us by numpy's ufunc.at over an index grid, 417 over
    rows, here 6.5; (15, 512) of max by ufunc.at 475 us."""
    return _scatter_rows if _load() else None


def sigmoid(in_place: bool = False) -> Callable | None:
    """The compiled float32 logistic ``(x, y)`` over flat arrays, or ``(x,)`` into x where
    ``in_place``, or None: one pass by ``_exp_value`` where numpy makes four (negate, exp, add,
    reciprocal): (3, 256) 3.1 -> 0.9 us, (1, 64, 80, 80) 264 -> 194 us. (With y = x the
    two-array loop fails LLVM's run-time overlap check and runs scalar: 65k values 43 -> 253
    us, as ``erf``'s.)"""
    if not _load():
        return None
    return _sigmoid_in_place if in_place else _sigmoid


def exp(in_place: bool = False) -> Callable | None:
    """The compiled float32 exp ``(x, y)`` over flat arrays, or ``(x,)`` into x where
    ``in_place``, or None: ``_exp_value`` (within 2 ulp of expf) over [-87, 88], and past it
    the square of e^(x / 2), which overflows to inf and underflows through the subnormals to 0
    as expf does; NaN stays NaN. numpy's float32 exp took 1.3 ns a value here (267 us on a
    (1, 32, 80, 80) map, onnxruntime's 53)."""
    if not _load():
        return None
    return _exp_in_place if in_place else _exp


def quick_gelu() -> Callable | None:
    """The compiled float32 QuickGelu ``(x, alpha, y)`` over flat arrays, y = x * logistic(alpha
    * x) by MLAS's rational logistic, as onnxruntime's kernel computes it (equal to its output
    bit for bit, NaN, infinities and -0.0 included: measured), or None. One pass: 77K values
    37 us, where numpy's four took 165 and the unfused Sigmoid and Mul 46 + 10."""
    return _quick_gelu if _load() else None


def tanh(in_place: bool = False) -> Callable | None:
    """The compiled float32 tanh ``(x, y)`` over flat arrays, or ``(x,)`` into x where
    ``in_place``, or None: one vectorised pass by ``_tanh_value`` (within 2e-7 of tanh, as
    onnxruntime's MLAS tanh is within 2.5e-7) where numpy's tanh is libm's, one value at a
    time: 65k values 187 -> 52 us. NaN stays NaN, -0.0 stays -0.0."""
    if not _load():
        return None
    return _tanh_in_place if in_place else _tanh


def lstm_scan() -> Callable | None:
    """The compiled float32 LSTM recurrence of one direction with the default activations
    (sigmoid, tanh, tanh) and no clip, ``(xw, rt, rb, p, lens, h, c, ys)``, or None: per time
    step t, z = xw[t] + h @ rt + rb (gate order i, o, f, c; ``p`` the (3n,) peepholes or
    empty), then c and h in place; ys[t] = h, or 0 once t >= lens[b] (a finished sequence keeps
    its state). C-contiguous xw (seq, batch, 4n), rt (n, 4n), h and c (batch, n), ys (seq,
    batch, n). One call per direction instead of about ten numpy calls per time step (a
    16-step bidirectional LSTM of hidden 64: about 0.3 ms of numpy calls)."""
    return _lstm_scan if _load() else None


def lstm_cells() -> Callable | None:
    """The compiled float32 LSTM cell over a batch, default activations, ``(z, p, c, h, y)``, or
    None: per row b, the gates z[b] (4n,) in order i, o, f, c (``p`` the (3n,) peepholes or
    empty) update c[b] in place and write the new h into h[b] and y[b]. A single time step's
    gate arithmetic (silero-vad's LSTM: a dozen numpy calls, about 6 us) in one call."""
    return _lstm_cells if _load() else None


def lstm_step() -> Callable | None:
    """The compiled float32 single LSTM time step, default activations, ``(x, h, wr, bias, p,
    c, h_out, y)``, or None: z = [x, h] @ wr + bias per row (x (B, I), h (B, H), wr the (I + H,
    4H) [W; R] transposed, the gates in order i, o, f, c), then ``lstm_cells``' update of c in
    place into h_out and y (B, H). One call where the step took three (the product, the cells)
    and a concatenation and a copy between (silero-vad's step, in the model: 1.1 + 2.1 + 10.1 +
    7.7 us for those four calls and the weights' lookup; the whole step 13 us alone)."""
    return _lstm_step if _load() else None


def lstm_panel_scan() -> Callable | None:
    """``lstm_scan`` with each step's product h @ R + rb by ``float_product``'s register blocks,
    ``(xw, rp, rbp, p, lens, h, c, ys)``: R and rb packed by ``nn.pack_float_panels``
    (``rp``, ``rbp``), the rest as ``lstm_scan``; or None. The blocks hold a panel's sums in
    registers over K where ``lstm_scan``'s product loads and stores them every four rows of R."""
    return _lstm_panel_scan if _load() else None


def quantized_lstm_scan() -> Callable | None:
    """DynamicQuantizeLSTM's whole recurrence of one direction where its products are
    ``packed_product``'s, ``(xw, bp, r_scale, bias, p, lens, reverse, h, c, y, q, h_scale,
    h_zero_point, parts)``, or None: per step, the exact product of the quantized h ``q`` (its
    scale and zero point given for the first step) and R packed as ``bp`` on ``parts``
    threads, then ``quantized_lstm_step`` (``r_scale`` R's scale) with xw[t] (seq, batch, 4n)
    and y[t] (seq, batch, n) at t = step, or walking each row's own length backwards where
    ``reverse``; h and c in place. One call for the sequence: the Python between the steps
    (two calls and the product's arrays, about 20 us a step) was a third of a step at hidden
    512 on an AVX2 EPYC."""
    return _split(_quantized_lstm_scan) if _load() and not _forked else None  # (it may call the split product)


def quantized_lstm_quad_scan() -> Callable | None:
    """``quantized_lstm_scan`` with ``quad_product``'s byte product, ``(xw, bq, column_sums,
    starts, outliers, r_scale, bias, p, lens, reverse, h, c, y, q, h_scale, h_zero_point,
    parts)`` (R packed by ``_integer.pack_quads``, hidden a multiple of 4), or None where the
    CPU has no AVX2. At hidden 768, one step's 1 x 768 x 3072 product: 31 us against the
    packed product's 50 (two threads, int8 weights of the speaker-verification LSTM's spread)."""
    return _split(_quantized_lstm_quad_scan) if _load() and not _forked else None


def quantized_lstm_step() -> Callable | None:
    """One time step of DynamicQuantizeLSTM's recurrence (one direction, the default
    activations, no clip), ``(acc, zq, column_sums, offset, scale, xt, rb, p, lens, step, h, c,
    y, q)``, or None: the gates z = xt + acc * scale + rb (``acc`` the int32 (batch, 4n) product
    of the quantized h, ``q`` with zero point ``zq``, and R; where ``column_sums`` is not empty,
    ``acc`` is oneDNN's bare A @ Bs and the loop adds the zero-point terms of
    ``_integer.ConstantIntegerMatrix``, int32 ``zq``, ``column_sums`` and ``offset``: 12 us of
    numpy a step at hidden 768; ``scale`` h's scale times R's; gate order i, o, f, c; ``p`` the
    (3n,) peepholes or empty), then c and h in place for the rows with step < lens[b] (the
    others keep theirs);
    y = h, or 0 on those rows. Then h quantized as onnxruntime does for the next step's product
    (``contrib_quant.quantize_dynamic``: uint8 over the whole h) into ``q``; returns its (scale,
    zero point). One call a step instead of about twenty numpy calls (hidden 768: 75 -> 5 us)."""
    return _quantized_lstm_step if _load() else None


def gru_scan() -> Callable | None:
    """The compiled float32 GRU recurrence of one direction with the default activations
    (sigmoid, tanh) and no clip, ``(xw, rt, rb, lbr, lens, h, ys)``, or None: gate order z, r,
    h; ``lbr`` is linear_before_reset; the rest as ``lstm_scan``."""
    return _gru_scan if _load() else None


def rnn_scan() -> Callable | None:
    """The compiled float32 RNN recurrence of one direction without clip, ``(xw, rt, rb,
    activation, lens, h, ys)``, or None: h_t = f(xw_t + h_{t-1} @ rt + rb) with ``activation``
    0 Tanh, 1 Relu, 2 Sigmoid (``RNN_ACTIVATIONS``); the rest as ``lstm_scan``."""
    return _rnn_scan if _load() else None


#: the activations ``rnn_scan`` computes, by their lower-case ONNX name: its code for each
RNN_ACTIVATIONS = {"tanh": 0, "relu": 1, "sigmoid": 2}


def _load() -> bool:
    """Compile the loops (once per process, at first use); whether they are used: ``USE`` and
    numba importable. Every accessor asks it, so ``ORT_EP_CPU_NUMBA=0`` (or a test setting
    ``USE``) switches every compiled loop off."""
    if not USE:
        return False
    _load_once()
    return _depthwise is not None


def _after_fork() -> None:
    """In a forked child: GNU OpenMP's threads do not survive fork(), and numba ends a child
    that enters its OpenMP pool ("fork() called from a process already using GNU OpenMP",
    measured: the child terminated). The packed product runs its serial loop from now on, and
    DynamicQuantizeLSTM takes its Python step loop (the compiled scan may call the split one)."""
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_after_fork)


def _parallel_loop(numba, loop: Callable, serial: Callable, cached: bool, options: dict, probe: tuple) -> Callable:
    """A split ``loop`` compiled with its ``_prange`` shares on numba's thread pool where that
    pool may be entered from several threads at once (OpenMP's or TBB's, the pools numba
    prefers: the OpenMP one is the process's libgomp pool, which oneDNN uses too), else
    ``serial``: numba's own "workqueue" pool ends the process when two threads enter it
    (sessions run from several threads would). Which pool numba loads is known only after a
    parallel loop has run: the loop runs once on the small arguments ``probe`` first."""
    parallel = numba.njit(cache=cached, parallel=True, **options)(loop)
    parallel(*probe)
    return parallel if numba.threading_layer() != "workqueue" else serial


def _load_once() -> None:
    global _depthwise, _depthwise_flat, _hard_sigmoid_value, _gelu_rows, _gelu_value, _taps_into, _interleave, _tried
    global _layer_norm_rows, _lstm_scan, _lstm_panel_scan, _gru_scan, _rnn_scan, _recurrent_product, _sigmoid_value, _exp_value, _tanh_value
    global _erf_value, _erf, _quantize, _dequantize, _dequantize_axis, _fake_quantize, _packed_product
    global _fake_quantize_value, _qdq_hard_swish
    global _madd_rows1, _madd_rows2, _madd_rows3, _madd_rows4, _prange, _packed_share, _packed_product_split
    global _fma_rows1, _fma_rows2, _fma_rows3, _fma_rows4, _fma_rows5, _fma_rows6, _float_share, _float_product
    global _float_product_split
    global _minus_zero_points, _panel_rows, _codes_product, _codes_product_split, _codes_share, _pack_code_pair
    global _quad_rows1, _quad_rows2, _quad_rows3, _quad_rows4, _quad_share, _quad_product, _quad_product_split
    global _quantized_lstm_quad_scan, _quantized_lstm_buffers, _quantized_lstm_after_product
    global _quantized_lstm_step, _quantized_lstm_scan, _erf_in_place, _erf_split, _erf_in_place_split, _fake_quantize_split, _lstm_cell_row, _integer_to_float, _small_conv, _conv_combine
    global _float32_from_bits, _lstm_cell_row_mlas, _mlas_logistic_value, _mlas_tanh_value, _fma, _rational
    global _lstm_cells, _lstm_step, _half_to_float, _float_to_half, _pairwise_coupling, _roi_align, _grid_taps
    global _grid_linear, _grid_axis, _plane_taps, _top_k_rows, _softmax_rows
    global _rows_times_kn, _rows_times_nk, _normalize_rows, _scale_rows, _sigmoid, _tanh, _bilinear
    global _sigmoid_in_place, _tanh_in_place, _logistic_point, _tanh_point, _gelu_tanh_value, _quick_gelu
    global _exp, _exp_in_place, _exp_point, _log1p_unit, _softplus_value
    global _nk_four_rows, _nk_three_rows, _nk_two_rows, _nk_one_row, _kn_four_rows_add, _kn_three_rows_add, _kn_two_rows_add
    global _rows_times_nk_share, _rows_times_kn_part, _rows_times_kn_split, _rows_times_nk_split, _rows_times_kn_add
    global _nan_max, _linear_finish, _scatter_rows
    global _binary_flat, _binary_rows, _binary_flat_split, _binary_rows_split
    global _softmax_rows_split, _softmax_block, _row_max, _gelu_rows_split, _gelu_block, _layer_norm_rows_split, _layer_norm_block
    if _tried:
        return
    with _lock:
        if not _tried:
            try:
                import numba
            except ImportError:  # optional dependency
                _depthwise = _depthwise_flat = _gelu_rows = _interleave = _layer_norm_rows = None
                _lstm_scan = _lstm_panel_scan = _gru_scan = _rnn_scan = _erf = _quantize = _dequantize = _dequantize_axis = _fake_quantize = None
                _fake_quantize_value = _qdq_hard_swish = None
                _packed_product = None
                _packed_product_split = _packed_share = None
                _float_share = _float_product = _float_product_split = None
                _codes_product = _codes_product_split = _codes_share = None
                _quantized_lstm_step = _quantized_lstm_scan = _quantized_lstm_quad_scan = _erf_in_place = _erf_split = _erf_in_place_split = _fake_quantize_split = _integer_to_float = _small_conv = _conv_combine = None
                _lstm_cells = _half_to_float = _float_to_half = _pairwise_coupling = _roi_align = _grid_taps = _grid_linear = _top_k_rows = None
                _lstm_step = None
                _softmax_rows = _rows_times_kn = _rows_times_nk = _normalize_rows = _scale_rows = _sigmoid = _tanh = None
                _sigmoid_in_place = _tanh_in_place = _quick_gelu = _exp = _exp_in_place = None
                _rows_times_nk_share = _rows_times_kn_part = _rows_times_kn_split = _rows_times_nk_split = None
                _rows_times_kn_add = None
                _bilinear = _nan_max = _linear_finish = _scatter_rows = None
                _binary_flat = _binary_rows = _binary_flat_split = _binary_rows_split = None
                _softmax_rows_split = _softmax_block = _row_max = _gelu_rows_split = _gelu_block = None
                _layer_norm_rows_split = _layer_norm_block = None
            else:
                # "contract": multiply-adds as FMA instructions (rounding differs from numpy's by
                # an ulp; no reassociation)
                options = {"nogil": True, "boundscheck": False, "fastmath": {"contract"}}
                # the scalar hard sigmoid is a global of its two loops, so it is compiled first
                _hard_sigmoid_value = numba.njit(inline="always", **options)(_hard_sigmoid_value_py)
                try:
                    cached = True
                    numba.njit(cache=True, **options)(_hard_sigmoid_py)
                except RuntimeError:  # no writable cache location: compile in each process
                    cached = False
                # the tap loop is a global of the depthwise loops, so it is compiled first
                _taps_into = numba.njit(inline="always", **options)(_taps_into_py)
                _depthwise = numba.njit(cache=cached, **options)(_depthwise_py)
                _depthwise_flat = numba.njit(cache=cached, **options)(_depthwise_flat_py)
                for name, loop in (("hard_sigmoid", _hard_sigmoid_py), ("hard_swish", _hard_swish_py),
                                   ("hard_sigmoid_in_place", _hard_sigmoid_in_place_py),
                                   ("hard_swish_in_place", _hard_swish_in_place_py)):
                    _activations[name] = numba.njit(cache=cached, **options)(loop)
                _interleave = numba.njit(cache=cached, **options)(_interleave_py)
                # error_model "numpy": a float division by zero gives inf instead of raising
                # (the check's branch kept LLVM from vectorising the loop: 8x slower)
                elementwise = {**options, "error_model": "numpy"}
                # the scalar erf and gelu are globals of the loops, so they are compiled first
                _erf_value = numba.njit(inline="always", **elementwise)(_erf_value_py)
                _gelu_value = numba.njit(inline="always", **elementwise)(_gelu_value_py)
                _erf = numba.njit(cache=cached, **elementwise)(_erf_py)
                _erf_in_place = numba.njit(cache=cached, **elementwise)(_erf_in_place_py)
                _quantize = numba.njit(cache=cached, **elementwise)(_quantize_py)
                _dequantize = numba.njit(cache=cached, **elementwise)(_dequantize_py)
                _dequantize_axis = numba.njit(cache=cached, **elementwise)(_dequantize_axis_py)
                _fake_quantize_value = numba.njit(inline="always", **elementwise)(_fake_quantize_value_py)
                _fake_quantize = numba.njit(cache=cached, **elementwise)(_fake_quantize_py)
                _qdq_hard_swish = numba.njit(cache=cached, **elementwise)(_qdq_hard_swish_py)
                # the register blocks are globals of the product's loop: made first
                from . import _vector_ir
                _madd_rows1, _madd_rows2, _madd_rows3, _madd_rows4 = (_vector_ir.madd_block(rows) for rows in (1, 2, 3, 4))
                _prange = numba.prange
                _minus_zero_points = numba.njit(cache=cached, **elementwise)(_minus_zero_points_py)
                _panel_rows = numba.njit(inline="always", **elementwise)(_panel_rows_py)
                _packed_share = numba.njit(cache=cached, **elementwise)(_packed_share_py)
                _packed_product = numba.njit(cache=cached, **elementwise)(_packed_product_py)
                probe = (np.zeros((1, 2), np.uint8), np.zeros(1, np.int32), np.zeros((1, 1, 2 * PRODUCT_PANEL), np.int8),
                         np.zeros((1, PRODUCT_PANEL), np.int32), 2)
                _packed_product_split = _parallel_loop(numba, _packed_product_split_py, _packed_product, cached,
                                                       elementwise, probe)
                _fma_rows1, _fma_rows2, _fma_rows3, _fma_rows4, _fma_rows5, _fma_rows6 = (
                    _vector_ir.fma_block(rows) for rows in (1, 2, 3, 4, 5, 6))
                _float_share = numba.njit(cache=cached, **options)(_float_share_py)
                _float_product = numba.njit(cache=cached, **options)(_float_product_py)
                probe = (np.zeros((1, 1), np.float32), np.zeros((1, 1, PRODUCT_PANEL), np.float32),
                         np.zeros(PRODUCT_PANEL, np.float32), np.zeros((1, 1), np.float32), 2)
                _float_product_split = _parallel_loop(numba, _float_product_split_py, _float_product, cached, options,
                                                      probe)
                _pack_code_pair = _vector_ir.pack_code_pair
                _codes_share = numba.njit(cache=cached, **elementwise)(_codes_share_py)
                _codes_product = numba.njit(cache=cached, **elementwise)(_codes_product_py)
                probe = (np.zeros((1, 2), np.int16), np.zeros((2, 1), np.uint8), np.int32(0),
                         np.zeros((1, 1, 2 * PRODUCT_PANEL), np.int16), np.zeros((1, 1), np.int32), 2)
                _codes_product_split = _parallel_loop(numba, _codes_product_split_py, _codes_product, cached,
                                                      elementwise, probe)
                if has_avx2():  # the byte product's blocks are x86 AVX2 instructions
                    vnni = has_avx512_vnni()  # one VPDPBUSD for VPMADDUBSW + VPMADDWD + VPADDD
                    _quad_rows1, _quad_rows2, _quad_rows3, _quad_rows4 = (_vector_ir.quad_block(rows, vnni)
                                                                          for rows in (1, 2, 3, 4))
                    _quad_share = numba.njit(cache=cached, **elementwise)(_quad_share_py)
                    _quad_product = numba.njit(cache=cached, **elementwise)(_quad_product_py)
                    probe = (np.zeros((1, 4), np.uint8), np.zeros(1, np.int32), np.zeros((1, 1, 4 * PRODUCT_PANEL), np.int8),
                             np.zeros(PRODUCT_PANEL, np.int32), np.zeros(2, np.int64), np.zeros((0, 4), np.int32),
                             np.zeros((1, 1), np.int32), 2)
                    _quad_product_split = _parallel_loop(numba, _quad_product_split_py, _quad_product, cached,
                                                         elementwise, probe)
                _integer_to_float = numba.njit(cache=cached, **elementwise)(_integer_to_float_py)
                _conv_combine = numba.njit(cache=cached, **elementwise)(_conv_combine_py)
                # "reassoc": a row's sums as vector partial sums (one lane at a time, the loop
                # stays scalar: 20 against 4 us on (64, 128)); the order differs from numpy's
                # pairwise sums by float32 rounding
                reductions = {**elementwise, "fastmath": {"contract", "reassoc"}}
                _layer_norm_block = numba.njit(cache=cached, **reductions)(_layer_norm_block_py)
                _layer_norm_rows = numba.njit(cache=cached, **reductions)(_layer_norm_rows_py)
                rows, vector = np.zeros((2, 2), np.float32), np.zeros(2, np.float32)
                _layer_norm_rows_split = _parallel_loop(
                    numba, _layer_norm_rows_split_py, _layer_norm_rows, cached, reductions,
                    (rows, np.zeros((0, 0), np.float32), np.zeros(0, np.float32), vector, np.zeros(0, np.float32),
                     np.float32(1e-5), np.zeros((2, 2), np.float32), np.zeros((0, 0), np.float32), False, 2))
                _small_conv = numba.njit(cache=cached, **elementwise)(_small_conv_py)
                # the product and the scalar functions are globals of the scans: compiled first
                _recurrent_product = numba.njit(inline="always", **elementwise)(_recurrent_product_py)
                _float32_from_bits = _vector_ir.float32_from_bits
                _exp_value = numba.njit(inline="always", **elementwise)(_exp_value_py)
                _sigmoid_value = numba.njit(inline="always", **elementwise)(_sigmoid_value_py)
                _tanh_value = numba.njit(inline="always", **elementwise)(_tanh_value_py)
                _lstm_cell_row = numba.njit(inline="always", **elementwise)(_lstm_cell_row_py(_sigmoid_value, _tanh_value))
                _lstm_scan = numba.njit(cache=cached, **elementwise)(_lstm_scan_py)
                _lstm_panel_scan = numba.njit(cache=cached, **elementwise)(_lstm_panel_scan_py)
                _lstm_cells = numba.njit(cache=cached, **elementwise)(_lstm_cells_py)
                # onnxruntime's DynamicQuantizeLSTM: MLAS's activations, and no "contract" (its
                # gates and cell are separate multiplies and adds); globals of the step, first
                exact = {"nogil": True, "boundscheck": False, "error_model": "numpy"}
                # float32 a * b + c rounded once (LLVM's fma: the FMA instruction, which
                # vectorises; the float64 emulation it replaced kept the cell scalar, 2x slower)
                _fma = _vector_ir.fused_multiply_add
                _rational = numba.njit(inline="always", **exact)(_rational_py)
                _mlas_logistic_value = numba.njit(inline="always", **exact)(_mlas_logistic_value_py)
                _mlas_tanh_value = numba.njit(inline="always", **exact)(_mlas_tanh_value_py)
                _lstm_cell_row_mlas = numba.njit(inline="always", **exact)(_lstm_cell_row_py(_mlas_logistic_value, _mlas_tanh_value))
                _quantized_lstm_step = numba.njit(cache=cached, **exact)(_quantized_lstm_step_py)
                # the step, the helpers and the products are globals of the scans: compiled first
                _quantized_lstm_buffers = numba.njit(inline="always", **exact)(_quantized_lstm_buffers_py)
                _quantized_lstm_after_product = numba.njit(inline="always", **exact)(_quantized_lstm_after_product_py)
                _quantized_lstm_scan = numba.njit(cache=cached, **exact)(_quantized_lstm_scan_py)
                if _quad_product is not None:
                    _quantized_lstm_quad_scan = numba.njit(cache=cached, **exact)(_quantized_lstm_quad_scan_py)
                _gru_scan = numba.njit(cache=cached, **elementwise)(_gru_scan_py)
                _rnn_scan = numba.njit(cache=cached, **elementwise)(_rnn_scan_py)
                _half_to_float = numba.njit(cache=cached, **elementwise)(_half_to_float_py)
                _float_to_half = numba.njit(cache=cached, **elementwise)(_float_to_half_py)
                # no "contract": each product rounded before its sum, as onnxruntime computes it
                _pairwise_coupling = numba.njit(cache=cached, nogil=True, boundscheck=False,
                                                error_model="numpy")(_pairwise_coupling_py)
                _roi_align = numba.njit(cache=cached, nogil=True, boundscheck=False,
                                        error_model="numpy")(_roi_align_py)
                _bilinear = numba.njit(cache=cached, nogil=True, boundscheck=False,
                                       error_model="numpy")(_bilinear_py)
                # the axis and plane helpers are globals of the GridSample loops: compiled first
                _grid_axis = numba.njit(inline="always", nogil=True, error_model="numpy")(_grid_axis_py)
                _plane_taps = numba.njit(inline="always", nogil=True, boundscheck=False, error_model="numpy")(_plane_taps_py)
                _grid_taps = numba.njit(cache=cached, nogil=True, boundscheck=False, error_model="numpy")(_grid_taps_py)
                _grid_linear = numba.njit(cache=cached, nogil=True, boundscheck=False, error_model="numpy")(_grid_linear_py)
                _top_k_rows = numba.njit(cache=cached, nogil=True, boundscheck=False)(_top_k_rows_py)
                # the block is a global of the serial and the split loops: compiled first
                _row_max = numba.njit(inline="always", **elementwise)(_row_max_py)
                _softmax_block = numba.njit(cache=cached, **reductions)(_softmax_block_py)
                _softmax_rows = numba.njit(cache=cached, **reductions)(_softmax_rows_py)
                rows_probe = (np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32), False, 2)
                _softmax_rows_split = _parallel_loop(numba, _softmax_rows_split_py, _softmax_rows, cached,
                                                     reductions, rows_probe)
                # the row blocks are globals of the passes, and the passes and shares globals of
                # the products: compiled first
                _kn_four_rows_add = numba.njit(inline="always", **reductions)(_kn_four_rows_add_py)
                _kn_three_rows_add = numba.njit(inline="always", **reductions)(_kn_three_rows_add_py)
                _kn_two_rows_add = numba.njit(inline="always", **reductions)(_kn_two_rows_add_py)
                _nk_four_rows = numba.njit(inline="always", **reductions)(_nk_four_rows_py)
                _nk_three_rows = numba.njit(inline="always", **reductions)(_nk_three_rows_py)
                _nk_two_rows = numba.njit(inline="always", **reductions)(_nk_two_rows_py)
                _nk_one_row = numba.njit(inline="always", **reductions)(_nk_one_row_py)
                _rows_times_kn_add = numba.njit(cache=cached, **reductions)(_rows_times_kn_add_py)
                _rows_times_kn = numba.njit(cache=cached, **reductions)(_rows_times_kn_py)
                # (the cell arithmetic as ``_lstm_cells``': not reassociated; the product is a call)
                _lstm_step = numba.njit(cache=cached, **elementwise)(_lstm_step_py)
                _rows_times_nk_share = numba.njit(cache=cached, **reductions)(_rows_times_nk_share_py)
                _rows_times_kn_part = numba.njit(cache=cached, **reductions)(_rows_times_kn_part_py)
                _rows_times_nk = numba.njit(cache=cached, **reductions)(_rows_times_nk_py)
                probe = (np.zeros((1, 2), np.float32), np.zeros((2, 2), np.float32), np.zeros(0, np.float32),
                         np.zeros((1, 2), np.float32), 2)
                _rows_times_nk_split = _parallel_loop(numba, _rows_times_nk_split_py, _rows_times_nk, cached,
                                                      reductions, probe)
                _rows_times_kn_split = _parallel_loop(numba, _rows_times_kn_split_py, _rows_times_kn, cached,
                                                      reductions, probe)
                # the row maximum is a global of the Normalizer's and LinearClassifier's loops
                _nan_max = numba.njit(inline="always", nogil=True)(_nan_max_py)
                # no "reassoc": the sums in order, as onnxruntime's loop adds them
                _normalize_rows = numba.njit(cache=cached, **elementwise)(_normalize_rows_py)
                # no fastmath (its exp is LLVM's; the float32 outputs equal the numpy path's)
                _linear_finish = numba.njit(cache=cached, nogil=True, boundscheck=False)(_linear_finish_py)
                _scale_rows = numba.njit(cache=cached, **elementwise)(_scale_rows_py)
                # no fastmath: each update applied in order, rounded as the spec's loop rounds it
                _scatter_rows = numba.njit(cache=cached, nogil=True, boundscheck=False)(_scatter_rows_py)
                # the scalar functions are globals of the loops: compiled first
                _logistic_point = numba.njit(inline="always", **elementwise)(_logistic_point_py)
                _tanh_point = numba.njit(inline="always", **elementwise)(_tanh_point_py)
                # "arcp": the division as a reciprocal with a Newton step (vectorised; the
                # values stay within 1.5e-7 relative of the exact logistic, as numpy's)
                logistic = {**elementwise, "fastmath": {"contract", "arcp"}}
                _sigmoid = numba.njit(cache=cached, **logistic)(_sigmoid_py)
                _sigmoid_in_place = numba.njit(cache=cached, **logistic)(_sigmoid_in_place_py)
                # MLAS's logistic is a global: compiled with DynamicQuantizeLSTM's step, above
                _quick_gelu = numba.njit(cache=cached, **exact)(_quick_gelu_py)
                _tanh = numba.njit(cache=cached, **elementwise)(_tanh_py)
                _exp_point = numba.njit(inline="always", **elementwise)(_exp_point_py)
                _exp = numba.njit(cache=cached, **elementwise)(_exp_py)
                _exp_in_place = numba.njit(cache=cached, **elementwise)(_exp_in_place_py)
                # the exponential ones read ``_exp_value``, compiled above
                _log1p_unit = numba.njit(inline="always", **elementwise)(_log1p_unit_py)
                _softplus_value = numba.njit(inline="always", **elementwise)(_softplus_value_py)
                for name, loop in (("elu", _elu_py), ("celu", _celu_py), ("thresholded_relu", _thresholded_relu_py),
                                   ("softsign", _softsign_py), ("softplus", _softplus_py), ("mish", _mish_py),
                                   ("leaky_relu", _leaky_relu_py)):
                    _activations[name] = numba.njit(cache=cached, **elementwise)(loop)
                _tanh_in_place = numba.njit(cache=cached, **elementwise)(_tanh_in_place_py)
                # the tanh point is a global of the tanh form's value, and both values of the loop
                _gelu_tanh_value = numba.njit(inline="always", **elementwise)(_gelu_tanh_value_py)
                _gelu_block = numba.njit(cache=cached, **elementwise)(_gelu_block_py)
                _gelu_rows = numba.njit(cache=cached, **elementwise)(_gelu_rows_py)
                _gelu_rows_split = _parallel_loop(numba, _gelu_rows_split_py, _gelu_rows, cached, elementwise,
                                                  (np.zeros((2, 2), np.float32), np.zeros(0, np.float32),
                                                   np.zeros((2, 2), np.float32), False, 2))
                f32 = np.float32(1)
                _fake_quantize_split = _parallel_loop(numba, _fake_quantize_split_py, _fake_quantize, cached, elementwise,
                                                      (np.zeros(4, np.float32), f32, f32, f32, f32, f32,
                                                       np.zeros(4, np.float32), 2))
                # the serial erf loops are the blocks' (compiled above)
                flat = np.zeros(4, np.float32)
                _erf_split = _parallel_loop(numba, _erf_split_py, _erf, cached, elementwise, (flat, flat.copy(), 2))
                _erf_in_place_split = _parallel_loop(numba, _erf_in_place_split_py, _erf_in_place, cached, elementwise,
                                                     (flat, 2))
                # the blocks are globals of the split loops: compiled first
                _binary_flat = numba.njit(cache=cached, **elementwise)(_binary_flat_py)
                _binary_rows = numba.njit(cache=cached, **elementwise)(_binary_rows_py)
                serial_flat = numba.njit(cache=cached, **elementwise)(_binary_flat_serial_py)
                serial_rows = numba.njit(cache=cached, **elementwise)(_binary_rows_serial_py)
                _binary_flat_split = _parallel_loop(numba, _binary_flat_split_py, serial_flat, cached, elementwise,
                                                    (flat, flat[:1].copy(), flat.copy(), 0, 2))
                grid = np.zeros((2, 2), np.float32)
                _binary_rows_split = _parallel_loop(numba, _binary_rows_split_py, serial_rows, cached, elementwise,
                                                    (grid, flat[:2].copy(), grid.copy(), 0, 2))
                # the probes started numba's OpenMP pool, which set this thread's OpenMP count
                threads.openmp_count_changed()
            _tried = True


def _taps_into_py(acc, src, starts, wt):  # pragma: no cover - compiled by numba
    """acc[i] += sum_t wt[t] * src[starts[t] + i] over len(acc) positions, four taps a pass:
    the depthwise loops are bound by loads and stores, and a pass loads and stores acc once per
    four multiply-adds instead of once per tap (2x on a 160-wide row)."""
    n = acc.shape[0]
    taps = starts.shape[0]
    t = 0
    while t + 4 <= taps:
        s0 = src[starts[t] : starts[t] + n]
        s1 = src[starts[t + 1] : starts[t + 1] + n]
        s2 = src[starts[t + 2] : starts[t + 2] + n]
        s3 = src[starts[t + 3] : starts[t + 3] + n]
        w0, w1, w2, w3 = wt[t], wt[t + 1], wt[t + 2], wt[t + 3]
        for i in range(n):
            acc[i] += (w0 * s0[i] + w1 * s1[i]) + (w2 * s2[i] + w3 * s3[i])
        t += 4
    while t < taps:
        s0 = src[starts[t] : starts[t] + n]
        w0 = wt[t]
        for i in range(n):
            acc[i] += w0 * s0[i]
        t += 1


def _depthwise_py(xp, w, b, y, sh, starts, c0, c1):  # pragma: no cover - compiled by numba
    """y[n, c, oy, ox] = b[c] + sum_t w[c, t] * plane[oy * sh * row + starts[t] + ox], where
    plane is xp[n, c] flat (rows of ``row`` values) and tap t = (a, j) starts at
    a * dh * row + its column's run: per output row one accumulator row in L1. Every tap reads a
    contiguous run: for a column stride the caller lays each padded row out as its stride
    phases end to end (a strided read kept the loops scalar, 3-4x slower)."""
    n_img, _, oh, ow = y.shape
    row = xp.shape[3]
    acc = np.empty(ow, dtype=y.dtype)
    for n in range(n_img):
        for c in range(c0, c1):
            plane = xp[n, c].reshape(-1)
            bc = b[c]
            for oy in range(oh):
                for i in range(ow):  # explicit loops: numba's slice assignment is slower
                    acc[i] = bc
                _taps_into(acc, plane[oy * sh * row :], starts, w[c])
                yr = y[n, c, oy]
                for i in range(ow):
                    yr[i] = acc[i]


def _depthwise_flat_py(xp, w, b, y, starts, c0, c1):  # pragma: no cover - compiled by numba
    """Stride-1 depthwise convolution "on the wide output": per channel one accumulator over
    the flat padded plane's ``(oh - 1) * wp + ow`` positions, taps at ``starts`` in the plane,
    four a pass (long vectorised loops where output rows are short: 3.5x on ocr-det's 10x10
    layers), then the rows cropped out. For accumulators that fit L1 (the caller checks)."""
    n_img, _, oh, ow = y.shape
    wp = xp.shape[3]
    wide = (oh - 1) * wp + ow
    acc = np.empty(wide, dtype=y.dtype)
    for n in range(n_img):
        for c in range(c0, c1):
            bc = b[c]
            for p in range(wide):
                acc[p] = bc
            _taps_into(acc, xp[n, c].reshape(-1), starts, w[c])
            for oy in range(oh):
                yr, row = y[n, c, oy], acc[oy * wp:oy * wp + ow]  # (a view from 0: see _lstm_cell_row_py)
                for i in range(ow):
                    yr[i] = row[i]


def _interleave_py(src, bias, y):  # pragma: no cover - compiled by numba
    """See ``interleave``: per output row, the kw source rows of its phase written kw apart."""
    n_img, channels, kh, kw, h, w = src.shape
    for n in range(n_img):
        for c in range(channels):
            bc = bias[c]
            for i in range(h):
                for a in range(kh):
                    yr = y[n, c, i * kh + a]
                    for b in range(kw):
                        s = src[n, c, a, b, i]
                        for j in range(w):
                            yr[j * kw + b] = s[j] + bc


def _hard_sigmoid_value_py(v, alpha, beta):  # pragma: no cover - compiled by numba
    """clip(alpha * v + beta, 0, 1) of one value. NaN stays NaN, as np.clip leaves it: neither
    comparison is true for it."""
    s = v * alpha + beta
    # float32 bounds (typed globals): integer literals would widen a float32 loop to float64
    if s < _ZERO:
        s = _ZERO
    elif s > _ONE:
        s = _ONE
    return s


def _hard_sigmoid_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    """y = clip(alpha * x + beta, 0, 1) in one pass (numpy needs three: multiply, add, clip)."""
    for i in range(x.size):
        y[i] = _hard_sigmoid_value(x[i], alpha, beta)


def _hard_sigmoid_in_place_py(x, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        x[i] = _hard_sigmoid_value(x[i], alpha, beta)


def _elu_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        v = x[i]
        y[i] = beta * (v if v > _ZERO else alpha * (_exp_value(v) - _ONE)) if v == v else v


def _celu_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        v = x[i]
        m = alpha * (_exp_value(v / alpha) - _ONE)
        y[i] = (v if v > _ZERO else _ZERO) + (m if m < _ZERO else _ZERO) if v == v else v


def _thresholded_relu_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        v = x[i]
        y[i] = v if v > alpha else _ZERO


def _leaky_relu_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        v = x[i]
        y[i] = v if v >= _ZERO else alpha * v


def _softsign_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        v = x[i]
        y[i] = v / (_ONE + abs(v))


#: 2 / (2k + 1), k = 0..8: log(1 + e) = 2 atanh(s) = sum 2 s^(2k+1) / (2k + 1), s = e / (2 + e)
_L1, _L3, _L5, _L7, _L9, _L11, _L13, _L15, _L17 = (np.float32(2 / (2 * k + 1)) for k in range(9))


def _log1p_unit_py(e):  # pragma: no cover - compiled by numba (inlined)
    """log(1 + e) for float32 e in [0, 1] (NaN gives NaN): by atanh's series in s = e / (2 +
    e) <= 1/3 to s^17 (the next term is below 2^-26 of the sum), no libm call, so that loops
    of it vectorise (numpy's log1p is libm's, one value at a time)."""
    t = e / (_F(2.0) + e)
    t2 = t * t
    return t * (_L1 + t2 * (_L3 + t2 * (_L5 + t2 * (_L7 + t2 * (_L9 + t2 * (_L11 + t2 * (_L13 + t2 * (_L15 + t2 * _L17))))))))


def _softplus_value_py(v):  # pragma: no cover - compiled by numba (inlined)
    """log(1 + e^v) = max(v, 0) + log(1 + e^-|v|), without overflow."""
    return (v if v > _ZERO else _ZERO) + _log1p_unit(_exp_point(-abs(v)))


def _softplus_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        y[i] = _softplus_value(x[i])


def _mish_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        v = x[i]
        y[i] = v * _tanh_point(_softplus_value(v))


def _hard_swish_py(x, y, alpha, beta):  # pragma: no cover - compiled by numba
    """y = x * clip(alpha * x + beta, 0, 1) in one pass (numpy needs four; HardSigmoid then Mul
    is two passes and an array: 2.4x slower on ocr-rec's 240x12x80 maps, 79 vs 33 us)."""
    for i in range(x.size):
        v = x[i]
        y[i] = v * _hard_sigmoid_value(v, alpha, beta)


def _hard_swish_in_place_py(x, alpha, beta):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        v = x[i]
        x[i] = v * _hard_sigmoid_value(v, alpha, beta)


# float32 constants: numba types them from these globals, so the loop stays in float32
_F = np.float32
_ZERO, _HALF, _ONE, _CLAMP = _F(0.0), _F(0.5), _F(1.0), _F(4.0)
_RSQRT2 = _F(1 / np.sqrt(2))
_SQRT_2_OVER_PI = _F(np.sqrt(2 / np.pi))
# Abramowitz & Stegun 7.1.26 (the numpy path's erf, ``fused.erf_f32``): |error| <= 1.5e-7
_P = _F(0.3275911)
_A1, _A2, _A3, _A4, _A5 = (_F(c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))
# exp(-a^2) as exp(u) ** 16, u = -a^2 / 16 in [-1, 0]: Taylor terms to u^8 (the rest,
# u^9 / 9! < 2.8e-6, grows 16-fold in relative terms by the squarings, but only where u is
# near -1 and exp(-a^2) ~ 1e-7: about 1e-11 on erf), then four squarings. gelu's error on
# [-12, 12] against float64 is the numpy path's: 4.7e-7 at most (float32 rounding)
_U = _F(-1 / 16)
_E3, _E4, _E5, _E6, _E7, _E8 = (_F(1 / f) for f in (6, 24, 120, 720, 5040, 40320))
_gelu_value: Callable | None = None  # the compiled _gelu_value_py (set by _load)
_gelu_tanh_value: Callable | None = None  # the compiled _gelu_tanh_value_py (set by _load)


#: erf's Maclaurin series in z^2, 2/sqrt(pi) (-1)^n / (n! (2n + 1)), for |z| < 1 (the next
#: term is under 1e-9)
_ERF_SERIES = np.array([2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(11)],
                       np.float32)


def _erf_value_py(z):  # pragma: no cover - compiled by numba
    """erf of one float32: for |z| < 1 its series (within 2e-7 relative), beyond A&S 7.1.26 with exp written out as a
    polynomial: a call to libm's exp would keep the loop scalar (numba has no vector math
    library without SVML), math.erf measured 4x slower than numpy's passes. |z| is clamped at
    4, where 1 - erf < 1.6e-8 is below float32's resolution at 1; NaN passes the clamp (the
    comparison is false) and stays NaN."""
    a = abs(z)
    if a < _ONE:  # the series: 1 - poly * e would lose the digits of a small erf
        z2 = z * z
        s = _ERF_SERIES[10]
        for n in range(9, -1, -1):
            s = s * z2 + _ERF_SERIES[n]
        return z * s
    a = _CLAMP if a > _CLAMP else a
    t = _ONE / (_ONE + _P * a)
    poly = ((((_A5 * t + _A4) * t + _A3) * t + _A2) * t + _A1) * t
    u = a * a * _U
    e = _ONE + u * (_ONE + u * (_HALF + u * (_E3 + u * (_E4 + u * (_E5 + u * (_E6 + u * (_E7 + u * _E8)))))))
    e *= e
    e *= e
    e *= e
    e *= e
    return math.copysign(_ONE - poly * e, z)


def _gelu_value_py(v):  # pragma: no cover - compiled by numba
    """0.5 * v * (1 + erf(v / sqrt(2))) of one float32."""
    return _HALF * v * (_ONE + _erf_value(v * _RSQRT2))


def _erf_py(x, y, parts):  # pragma: no cover - compiled by numba
    """See ``erf``: on the calling thread (``parts`` is not read)."""
    for i in range(x.size):
        y[i] = _erf_value(x[i])


def _erf_in_place_py(x, parts):  # pragma: no cover - compiled by numba
    for i in range(x.size):
        x[i] = _erf_value(x[i])


def _erf_split_py(x, y, parts):  # pragma: no cover - compiled by numba
    """See ``erf``: ``parts`` blocks at once (``prange``), each a slice (indexed from 0)."""
    n = x.size
    for part in _prange(parts):
        first, end = n * part // parts, n * (part + 1) // parts
        _erf(x[first:end], y[first:end], 1)


def _erf_in_place_split_py(x, parts):  # pragma: no cover - compiled by numba
    n = x.size
    for part in _prange(parts):
        first, end = n * part // parts, n * (part + 1) // parts
        _erf_in_place(x[first:end], 1)


def _binary_flat_py(a, b, y, op, first, end):  # pragma: no cover - compiled by numba
    """See ``binary_split``: y[first:end] = a op b, b of a's size or one value (the block as
    views from 0: offset indices may be negative as far as LLVM knows, and numba's wrap of
    negative indices kept such loops scalar, 5x slower)."""
    n = end - first
    ab = a[first:end]
    yb = y[first:end]
    if b.size == 1:
        v = b[0]
        if op == 0:
            for i in range(n):
                yb[i] = ab[i] + v
        elif op == 1:
            for i in range(n):
                yb[i] = ab[i] - v
        elif op == 2:
            for i in range(n):
                yb[i] = ab[i] * v
        else:
            for i in range(n):
                yb[i] = ab[i] / v
        return
    bb = b[first:end]
    if op == 0:
        for i in range(n):
            yb[i] = ab[i] + bb[i]
    elif op == 1:
        for i in range(n):
            yb[i] = ab[i] - bb[i]
    elif op == 2:
        for i in range(n):
            yb[i] = ab[i] * bb[i]
    else:
        for i in range(n):
            yb[i] = ab[i] / bb[i]


def _binary_rows_py(a, b, y, op, first, end):  # pragma: no cover - compiled by numba
    """See ``binary_split``: rows ``first`` to ``end`` of y = a op b, b (m,) against each row
    (each row a view from 0, so the loops vectorise)."""
    m = a.shape[1]
    for r in range(first, end):
        ar = a[r]
        yr = y[r]
        if op == 0:
            for j in range(m):
                yr[j] = ar[j] + b[j]
        elif op == 1:
            for j in range(m):
                yr[j] = ar[j] - b[j]
        elif op == 2:
            for j in range(m):
                yr[j] = ar[j] * b[j]
        else:
            for j in range(m):
                yr[j] = ar[j] / b[j]


def _binary_flat_serial_py(a, b, y, op, parts):  # pragma: no cover - compiled by numba
    _binary_flat(a, b, y, op, 0, a.size)


def _binary_rows_serial_py(a, b, y, op, parts):  # pragma: no cover - compiled by numba
    _binary_rows(a, b, y, op, 0, a.shape[0])


def _binary_flat_split_py(a, b, y, op, parts):  # pragma: no cover - compiled by numba
    """See ``binary_split``: ``parts`` blocks at once (``prange``)."""
    n = a.size
    for part in _prange(parts):
        _binary_flat(a, b, y, op, n * part // parts, n * (part + 1) // parts)


def _binary_rows_split_py(a, b, y, op, parts):  # pragma: no cover - compiled by numba
    rows = a.shape[0]
    for part in _prange(parts):
        _binary_rows(a, b, y, op, rows * part // parts, rows * (part + 1) // parts)


def _quantize_py(x, scale, zero_point, lo, hi, y):  # pragma: no cover - compiled by numba
    """y = clip(rint(x / scale) + zero_point, lo, hi) over flat arrays: QuantizeLinear per
    tensor in one pass (numpy takes five; x / scale as numpy divides, rint half to even)."""
    for i in range(x.size):
        q = np.rint(x[i] / scale) + zero_point
        q = q if q >= lo else lo  # NaN too: the type's minimum, as onnxruntime gives it
        q = hi if q > hi else q
        y[i] = q


def _dequantize_py(x, scale, zero_point, y):  # pragma: no cover - compiled by numba
    """y = (float32(x) - zero_point) * scale over flat arrays: DequantizeLinear per tensor."""
    for i in range(x.size):
        y[i] = (np.float32(x[i]) - zero_point) * scale


def _dequantize_axis_py(x, scale, zero_point, by_row, y):  # pragma: no cover - compiled by numba
    """y = (float32(x) - zero_point[c]) * scale[c] over (R, L) arrays, c = r % C or the column."""
    rows, length = x.shape
    channels = scale.size
    if by_row:
        for r in range(rows):
            z, s = zero_point[r % channels], scale[r % channels]
            for i in range(length):
                y[r, i] = (np.float32(x[r, i]) - z) * s
    else:
        for r in range(rows):
            for i in range(length):
                y[r, i] = (np.float32(x[r, i]) - zero_point[i]) * scale[i]


def _fake_quantize_split_py(x, scale, lo, hi, shift, out_scale, y, parts):  # pragma: no cover - compiled by numba
    """See ``fake_quantize``: ``parts`` blocks at once (``prange``), each a slice."""
    n = x.size
    for part in _prange(parts):
        first, end = n * part // parts, n * (part + 1) // parts
        _fake_quantize(x[first:end], scale, lo, hi, shift, out_scale, y[first:end], 1)


def _fake_quantize_value_py(v, scale, lo, hi, shift, out_scale):  # pragma: no cover - compiled by numba
    """(clip(rint(v / scale), lo, hi) + shift) * out_scale: one value's Q/DQ pair in float32."""
    q = np.rint(v / scale)
    q = q if q >= lo else lo  # NaN too (QuantizeLinear's type minimum)
    q = hi if q > hi else q
    return (q + shift) * out_scale


def _fake_quantize_py(x, scale, lo, hi, shift, out_scale, y, parts):  # pragma: no cover - compiled by numba
    """y = (clip(rint(x / scale), lo, hi) + shift) * out_scale over flat float32 arrays, on
    the calling thread (``parts`` is not read)."""
    for i in range(x.size):
        y[i] = _fake_quantize_value(x[i], scale, lo, hi, shift, out_scale)


def _qdq_hard_swish_py(x, add, pair1, pair2, divisor, divide_first, last, pair3, y):  # pragma: no cover - compiled by numba
    """See ``qdq_hard_swish``: the steps' float32 operations in their order, value by value."""
    s1, lo1, hi1, sh1, o1 = pair1
    s2, lo2, hi2, sh2, o2 = pair2
    s3, lo3, hi3, sh3, o3 = pair3
    for i in range(x.size):
        v = x[i]
        a = _fake_quantize_value(v + add, s1, lo1, hi1, sh1, o1)
        if divide_first:
            c = v * _fake_quantize_value(a / divisor, s2, lo2, hi2, sh2, o2)
        else:
            c = _fake_quantize_value(v * a, s2, lo2, hi2, sh2, o2) / divisor
        y[i] = _fake_quantize_value(c, s3, lo3, hi3, sh3, o3) if last else c


_U32 = np.uint32
#: 2^112: a float16's exponent bias (15) moved to float32's (127), subnormals included
_HALF_EXPONENT_SHIFT = np.float32(2.0 ** 112)


def _half_to_float_py(h, y):  # pragma: no cover - compiled by numba
    """See ``half_to_float``: the magnitude's bits moved into float32's place and scaled by
    2^112 (exact, and it normalises subnormals); infinities and NaNs get the full exponent."""
    for i in range(h.shape[0]):
        v = _U32(h[i])
        f = np.float32(_U32((v & _U32(0x7FFF)) << _U32(13)).view(np.float32) * _HALF_EXPONENT_SHIFT)
        u = _U32(f.view(np.uint32))
        if f >= np.float32(65536.0):  # the exponent was 31: inf or NaN
            u = _U32(u | _U32(0x7F800000))
        y[i] = _U32(u | _U32((v & _U32(0x8000)) << _U32(16)))


def _float_to_half_py(x, h):  # pragma: no cover - compiled by numba
    """See ``float_to_half``: integer rounding of the mantissa, half to even, for normal
    results; subnormal ones by a float addition of 0.5 (whose rounding is the same)."""
    for i in range(x.shape[0]):
        u = _U32(x[i])
        sign = _U32(u & _U32(0x80000000))
        u = _U32(u ^ sign)
        if u >= _U32(143 << 23):  # 65536 and up (rounds to inf), inf, NaN
            o = _U32(0x7E00) if u > _U32(0x7F800000) else _U32(0x7C00)
        elif u < _U32(113 << 23):  # below float16's smallest normal, 2^-14
            f = np.float32(_U32(u).view(np.float32) + np.float32(0.5))
            o = _U32(_U32(f.view(np.uint32)) - _U32(126 << 23))
        else:
            odd = _U32((u >> _U32(13)) & _U32(1))
            u = _U32(u + _U32(0xC8000FFF) + odd)  # exponent -112 (mod 2^32), and rounding
            o = _U32(u >> _U32(13))
        h[i] = np.uint16(o | (sign >> _U32(16)))


def _pairwise_coupling_py(r, p):  # pragma: no cover - compiled by numba
    """See ``pairwise_coupling`` (onnxruntime's multiclass_probability)."""
    n, k = p.shape
    one, two = np.float32(1), np.float32(2)
    eps = np.float32(0.005) / np.float32(k)
    q = np.empty((k, k), np.float32)
    qp = np.empty(k, np.float32)
    for b in range(n):
        for i in range(k):
            q[i, i] = np.float32(0)
            for j in range(k):
                if j != i:
                    q[i, i] += r[b, j, i] * r[b, j, i]
            for j in range(i):
                q[i, j] = q[j, i]
            for j in range(i + 1, k):
                q[i, j] = -r[b, j, i] * r[b, i, j]
        for i in range(k):
            p[b, i] = one / np.float32(k)
        for _ in range(100):
            pqp = np.float32(0)
            for i in range(k):
                qp[i] = np.float32(0)
                for j in range(k):
                    qp[i] += q[i, j] * p[b, j]
                pqp += p[b, i] * qp[i]
            error = np.float32(0)
            for i in range(k):
                error = max(error, abs(qp[i] - pqp))
            if error < eps:
                break
            for i in range(k):
                diff = (-qp[i] + pqp) / q[i, i]
                p[b, i] += diff
                scale = one + diff
                pqp = (pqp + diff * (diff * q[i, i] + two * qp[i])) / scale / scale
                for j in range(k):
                    qp[j] = (qp[j] + diff * q[i, j]) / scale
                    p[b, j] /= scale


def _roi_align_py(xt, rois, batch, scale, offset, half_pixel, ratio, is_max, y):  # pragma: no cover - compiled by numba
    """See ``roi_align``."""
    height, width, channels = xt.shape[1], xt.shape[2], xt.shape[3]
    out_h, out_w = y.shape[1], y.shape[2]
    f = np.float32
    acc = np.empty(channels, np.float32)
    for r in range(rois.shape[0]):
        b = batch[r]
        start_w = rois[r, 0] * scale - offset
        start_h = rois[r, 1] * scale - offset
        roi_w = rois[r, 2] * scale - offset - start_w
        roi_h = rois[r, 3] * scale - offset - start_h
        if not half_pixel:
            roi_w = max(roi_w, f(1))
            roi_h = max(roi_h, f(1))
        bin_h = roi_h / f(out_h)
        bin_w = roi_w / f(out_w)
        grid_h = ratio if ratio > 0 else int(np.ceil(roi_h / f(out_h)))
        grid_w = ratio if ratio > 0 else int(np.ceil(roi_w / f(out_w)))
        count = f(max(grid_h * grid_w, 1))
        for ph in range(out_h):
            for pw in range(out_w):
                first = True
                for c in range(channels):
                    acc[c] = f(0)
                for iy in range(grid_h):
                    yy = start_h + f(ph) * bin_h + (f(iy) + f(0.5)) * bin_h / f(grid_h)
                    for ix in range(grid_w):
                        xx = start_w + f(pw) * bin_w + (f(ix) + f(0.5)) * bin_w / f(grid_w)
                        if yy < f(-1) or yy > f(height) or xx < f(-1) or xx > f(width):
                            y0 = y1 = x0 = x1 = 0
                            w1 = w2 = w3 = w4 = f(0)
                        else:
                            yv = max(yy, f(0))
                            xv = max(xx, f(0))
                            y0 = int(yv)
                            x0 = int(xv)
                            if y0 >= height - 1:
                                y0 = y1 = height - 1
                                yv = f(y0)
                            else:
                                y1 = y0 + 1
                            if x0 >= width - 1:
                                x0 = x1 = width - 1
                                xv = f(x0)
                            else:
                                x1 = x0 + 1
                            ly = yv - f(y0)
                            lx = xv - f(x0)
                            hy = f(1) - ly
                            hx = f(1) - lx
                            w1, w2, w3, w4 = hy * hx, hy * lx, ly * hx, ly * lx
                        for c in range(channels):
                            v1 = w1 * xt[b, y0, x0, c]
                            v2 = w2 * xt[b, y0, x1, c]
                            v3 = w3 * xt[b, y1, x0, c]
                            v4 = w4 * xt[b, y1, x1, c]
                            if is_max:
                                v = max(max(max(v1, v2), v3), v4)
                                acc[c] = v if first else max(acc[c], v)
                            else:
                                acc[c] += v1 + v2 + v3 + v4
                        first = False
                for c in range(channels):
                    y[r, ph, pw, c] = acc[c] if is_max else acc[c] / count


def _plane_taps_py(plane, lin, w, y):  # pragma: no cover - compiled by numba (inlined)
    """y[p] = sum over taps t of w[p, t] * plane[lin[p, t]], each product rounded and added in
    tap order: one channel's interpolation, for both GridSample loops."""
    for p in range(y.shape[0]):
        acc = y.dtype.type(0)
        for t in range(lin.shape[1]):
            acc += w[p, t] * plane[lin[p, t]]
        y[p] = acc


def _grid_taps_py(x, lin, w, y):  # pragma: no cover - compiled by numba
    """See ``grid_taps``."""
    for n in range(y.shape[0]):
        for c in range(y.shape[1]):
            _plane_taps(x[n, c], lin[n], w[n], y[n, c])


def _grid_axis_py(v, size, align, border):  # pragma: no cover - compiled by numba (inlined)
    """One grid coordinate's two taps along an axis of ``size``: (index, weight) twice."""
    v = (v + 1.0) / 2.0 * (size - 1) if align else ((v + 1.0) * size - 1.0) / 2.0
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if border and (v < lo or v > hi):
        v = min(max(v, 0.0), size - 1.0)
    base = np.floor(v)
    frac = v - base
    i0, i1 = base, base + 1.0
    w0, w1 = 1.0 - frac, frac
    if not border:  # zeros: a tap outside the image weighs nothing
        w0 = 0.0 if i0 < 0 or i0 >= size else w0
        w1 = 0.0 if i1 < 0 or i1 >= size else w1
    return int(min(max(i0, 0.0), size - 1.0)), w0, int(min(max(i1, 0.0), size - 1.0)), w1


def _grid_linear_py(x, grid, height, width, align, border, y):  # pragma: no cover - compiled by numba
    """See ``grid_linear``."""
    n_images, channels = x.shape[0], x.shape[1]
    points = grid.shape[1]
    lin = np.empty((points, 4), np.int64)
    weight = np.empty((points, 4), y.dtype)
    t = y.dtype.type
    for n in range(n_images):
        for p in range(points):
            ix0, wx0, ix1, wx1 = _grid_axis(np.float64(grid[n, p, 0]), width, align, border)
            iy0, wy0, iy1, wy1 = _grid_axis(np.float64(grid[n, p, 1]), height, align, border)
            lin[p, 0], weight[p, 0] = iy0 * width + ix0, t(wy0 * wx0)
            lin[p, 1], weight[p, 1] = iy0 * width + ix1, t(wy0 * wx1)
            lin[p, 2], weight[p, 2] = iy1 * width + ix0, t(wy1 * wx0)
            lin[p, 3], weight[p, 3] = iy1 * width + ix1, t(wy1 * wx1)
        for c in range(channels):
            _plane_taps(x[n, c], lin, weight, y[n, c])


def _row_max_py(x, r):  # pragma: no cover - compiled by numba
    """The largest value of row ``r`` of x (n >= 1) other than NaNs, NaN where x[r, 0] is one
    (as ``max`` taken along the row), in eight running maxima: one maximum waited on the one
    before it, value by value (8 x 1000: 8.5 -> 1.7 us; the same result, a maximum is exact)."""
    n = x.shape[1]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = x[r, 0]
    j = 0
    while j + 8 <= n:
        m0, m1, m2, m3 = max(m0, x[r, j]), max(m1, x[r, j + 1]), max(m2, x[r, j + 2]), max(m3, x[r, j + 3])
        m4, m5, m6, m7 = max(m4, x[r, j + 4]), max(m5, x[r, j + 5]), max(m6, x[r, j + 6]), max(m7, x[r, j + 7])
        j += 8
    while j < n:
        m0 = max(m0, x[r, j])
        j += 1
    return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))


def _softmax_block_py(x, y, log, first, end):  # pragma: no cover - compiled by numba
    """See ``softmax_rows``: rows ``first`` to ``end``."""
    n = x.shape[1]
    for r in range(first, end):
        m = _row_max(x, r)
        if not (m - m == 0):  # a NaN or +-inf max: numpy's row is NaN (x - max has a NaN or is -inf)
            for j in range(n):
                y[r, j] = np.nan
            continue
        total = _F(0.0)
        for j in range(n):
            d = x[r, j] - m
            # 0 at and below -87 (-inf: a masked value), NaN for NaN (the sum, then the row)
            e = _exp_value(d) if d > _F(-87.0) else (_F(0.0) if d <= _F(-87.0) else d)
            y[r, j] = d if log else e
            total += e
        if log:
            shift = _F(math.log(total))
            for j in range(n):
                y[r, j] -= shift
        else:
            inverse = _ONE / total
            for j in range(n):
                y[r, j] *= inverse


def _softmax_rows_py(x, y, log, parts):  # pragma: no cover - compiled by numba
    """See ``softmax_rows``: on the calling thread (``parts`` is not read)."""
    _softmax_block(x, y, log, 0, x.shape[0])


def _softmax_rows_split_py(x, y, log, parts):  # pragma: no cover - compiled by numba
    """See ``softmax_rows``: the rows in ``parts`` blocks at once (``prange``)."""
    rows = x.shape[0]
    for part in _prange(parts):
        _softmax_block(x, y, log, rows * part // parts, rows * (part + 1) // parts)


def _rows_times_kn_py(a, w, bias, y, parts):  # pragma: no cover - compiled by numba
    """See ``row_products``: y[r] = bias + sum_k a[r, k] * w[k] (vectorised over N), on the
    calling thread (``parts`` is not read). (Two rows
    a pass over w measured no faster here, and slowed one row by a fifth.)"""
    m = a.shape[0]
    n = w.shape[1]
    for r in range(m):
        yr = y[r]
        for j in range(n):
            yr[j] = bias[j] if bias.shape[0] else _F(0.0)
    _rows_times_kn_add(a, w, y, 0, a.shape[1])


def _rows_times_nk_py(a, w, bias, y, parts):  # pragma: no cover - compiled by numba
    """See ``row_products``: y[r, j] = dot(a[r], w[j]) + bias[j], on the calling thread
    (``parts`` is not read)."""
    _rows_times_nk_share(a, w, bias, y, 0, w.shape[0])


def _rows_times_nk_split_py(a, w, bias, y, parts):  # pragma: no cover - compiled by numba
    """See ``row_products``: W's rows in ``parts`` blocks at once (``prange``)."""
    n = w.shape[0]
    for part in _prange(parts):
        _rows_times_nk_share(a, w, bias, y, n * part // parts, n * (part + 1) // parts)


def _rows_times_nk_share_py(a, w, bias, y, first, end):  # pragma: no cover - compiled by numba
    """y[:, first:end] of ``_rows_times_nk_py``: each dot vectorised over K; four, three or two
    rows of a at once, each pass reading four of W's rows (every weight loaded once for all the
    rows, every value of a once for four dots: 12-16 sums in registers), then the last row
    alone, also by fours of W's rows (``_nk_one_row``). Three rows in one pass, not two then
    one: 34 -> 27.5 us for 3 x 256 x 768 on one thread; four of W's rows a pass, not one (us,
    one thread, old / now: 4 x 512 x 256 20.4 / 11.8, 3 x 256 x 768 24 / 16, 2 x 1024 x 1024 91
    / 63)."""
    m = a.shape[0]
    r = 0
    while r + 4 <= m:
        _nk_four_rows(a, w, y, r, first, end)
        r += 4
    if r + 3 <= m:
        _nk_three_rows(a, w, y, r, first, end)
        r += 3
    elif r + 2 <= m:
        _nk_two_rows(a, w, y, r, first, end)
        r += 2
    if r < m:
        _nk_one_row(a, w, y, r, first, end)
    if bias.shape[0]:
        for r in range(m):
            for j in range(first, end):
                y[r, j] += bias[j]


def _nk_one_row_py(a, w, y, r, first, end):  # pragma: no cover - compiled by numba (inlined)
    """y[r, first:end] = a[r] @ w[first:end].T, four of W's rows a pass: four sums in flight,
    where one dot at a time waited on its one running sum (the same sums: each dot's own
    order is unchanged). One thread, us, one / four a pass, on an AVX-512 Xeon: 1 x 1536 x 128
    9.2 / 7.2; 1 x 512 x 512 14.3 / 10.9; 1 x 256 x 1024 15.0 / 11.9; 1 x 1024 x 1024 (W from
    memory) 145 / 144."""
    k = a.shape[1]
    a0 = a[r]
    j = first
    while j + 4 <= end:
        w0, w1, w2, w3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s0 = s1 = s2 = s3 = _F(0.0)
        for kk in range(k):
            v = a0[kk]
            s0 += v * w0[kk]
            s1 += v * w1[kk]
            s2 += v * w2[kk]
            s3 += v * w3[kk]
        y[r, j], y[r, j + 1], y[r, j + 2], y[r, j + 3] = s0, s1, s2, s3
        j += 4
    while j < end:
        wj = w[j]
        t0 = _F(0.0)
        for kk in range(k):
            t0 += a0[kk] * wj[kk]
        y[r, j] = t0
        j += 1


def _nk_four_rows_py(a, w, y, r, first, end):  # pragma: no cover - compiled by numba (inlined)
    """y[r:r + 4, first:end] = a[r:r + 4] @ w[first:end].T, by fours of W's rows (see
    ``_rows_times_nk_share_py``)."""
    k = a.shape[1]
    a0, a1, a2, a3 = a[r], a[r + 1], a[r + 2], a[r + 3]
    j = first
    while j + 4 <= end:
        w0, w1, w2, w3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = _F(0.0)
        s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = _F(0.0)
        for kk in range(k):
            u0, u1, u2, u3 = w0[kk], w1[kk], w2[kk], w3[kk]
            v = a0[kk]
            s00 += v * u0
            s01 += v * u1
            s02 += v * u2
            s03 += v * u3
            v = a1[kk]
            s10 += v * u0
            s11 += v * u1
            s12 += v * u2
            s13 += v * u3
            v = a2[kk]
            s20 += v * u0
            s21 += v * u1
            s22 += v * u2
            s23 += v * u3
            v = a3[kk]
            s30 += v * u0
            s31 += v * u1
            s32 += v * u2
            s33 += v * u3
        y[r, j], y[r, j + 1], y[r, j + 2], y[r, j + 3] = s00, s01, s02, s03
        y[r + 1, j], y[r + 1, j + 1], y[r + 1, j + 2], y[r + 1, j + 3] = s10, s11, s12, s13
        y[r + 2, j], y[r + 2, j + 1], y[r + 2, j + 2], y[r + 2, j + 3] = s20, s21, s22, s23
        y[r + 3, j], y[r + 3, j + 1], y[r + 3, j + 2], y[r + 3, j + 3] = s30, s31, s32, s33
        j += 4
    for jj in range(j, end):
        wj = w[jj]
        t0 = t1 = t2 = t3 = _F(0.0)
        for kk in range(k):
            v = wj[kk]
            t0 += a0[kk] * v
            t1 += a1[kk] * v
            t2 += a2[kk] * v
            t3 += a3[kk] * v
        y[r, jj], y[r + 1, jj], y[r + 2, jj], y[r + 3, jj] = t0, t1, t2, t3


def _nk_three_rows_py(a, w, y, r, first, end):  # pragma: no cover - compiled by numba (inlined)
    """y[r:r + 3, first:end], as ``_nk_four_rows_py``."""
    k = a.shape[1]
    a0, a1, a2 = a[r], a[r + 1], a[r + 2]
    j = first
    while j + 4 <= end:
        w0, w1, w2, w3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = s20 = s21 = s22 = s23 = _F(0.0)
        for kk in range(k):
            u0, u1, u2, u3 = w0[kk], w1[kk], w2[kk], w3[kk]
            v = a0[kk]
            s00 += v * u0
            s01 += v * u1
            s02 += v * u2
            s03 += v * u3
            v = a1[kk]
            s10 += v * u0
            s11 += v * u1
            s12 += v * u2
            s13 += v * u3
            v = a2[kk]
            s20 += v * u0
            s21 += v * u1
            s22 += v * u2
            s23 += v * u3
        y[r, j], y[r, j + 1], y[r, j + 2], y[r, j + 3] = s00, s01, s02, s03
        y[r + 1, j], y[r + 1, j + 1], y[r + 1, j + 2], y[r + 1, j + 3] = s10, s11, s12, s13
        y[r + 2, j], y[r + 2, j + 1], y[r + 2, j + 2], y[r + 2, j + 3] = s20, s21, s22, s23
        j += 4
    for jj in range(j, end):
        wj = w[jj]
        t0 = t1 = t2 = _F(0.0)
        for kk in range(k):
            v = wj[kk]
            t0 += a0[kk] * v
            t1 += a1[kk] * v
            t2 += a2[kk] * v
        y[r, jj], y[r + 1, jj], y[r + 2, jj] = t0, t1, t2


def _nk_two_rows_py(a, w, y, r, first, end):  # pragma: no cover - compiled by numba (inlined)
    """y[r:r + 2, first:end], as ``_nk_four_rows_py``."""
    k = a.shape[1]
    a0, a1 = a[r], a[r + 1]
    j = first
    while j + 4 <= end:
        w0, w1, w2, w3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = _F(0.0)
        for kk in range(k):
            u0, u1, u2, u3 = w0[kk], w1[kk], w2[kk], w3[kk]
            v = a0[kk]
            s00 += v * u0
            s01 += v * u1
            s02 += v * u2
            s03 += v * u3
            v = a1[kk]
            s10 += v * u0
            s11 += v * u1
            s12 += v * u2
            s13 += v * u3
        y[r, j], y[r, j + 1], y[r, j + 2], y[r, j + 3] = s00, s01, s02, s03
        y[r + 1, j], y[r + 1, j + 1], y[r + 1, j + 2], y[r + 1, j + 3] = s10, s11, s12, s13
        j += 4
    for jj in range(j, end):
        wj = w[jj]
        t0 = t1 = _F(0.0)
        for kk in range(k):
            v = wj[kk]
            t0 += a0[kk] * v
            t1 += a1[kk] * v
        y[r, jj], y[r + 1, jj] = t0, t1


def _rows_times_kn_part_py(a, w, y, first, end):  # pragma: no cover - compiled by numba
    """y = a[:, first:end] @ w[first:end] (K's block ``first`` to ``end``; no bias)."""
    y[:] = _F(0.0)
    _rows_times_kn_add(a, w, y, first, end)


def _rows_times_kn_add_py(a, w, y, first, end):  # pragma: no cover - compiled by numba
    """y += a[:, first:end] @ w[first:end]: four, three or two rows of a at once, then the last
    one alone, each pass over y taking four of W's rows (its loads and stores were two of the
    three memory operations of each multiply-add: one row, 256 x 512, 6.9 -> 5.4 us; 128 x 128
    1.8 -> 0.9). The rows of a pass share each weight they load (the rows one after another
    read all of W once a row: us, one thread, three runs: 3 x 256 x 768 28.5-34.4 -> 14.3-20.1,
    3 x 1024 x 1024 166-185 -> 84-95, 4 x 512 x 256 30-37 -> 15-22; one row unchanged)."""
    m = a.shape[0]
    r = 0
    while r + 4 <= m:
        _kn_four_rows_add(a, w, y, r, first, end)
        r += 4
    if r + 3 <= m:
        _kn_three_rows_add(a, w, y, r, first, end)
        r += 3
    elif r + 2 <= m:
        _kn_two_rows_add(a, w, y, r, first, end)
        r += 2
    if r < m:
        n = w.shape[1]
        yr = y[r]
        last4 = end - (end - first) % 4
        for kk in range(first, last4, 4):
            v0, v1, v2, v3 = a[r, kk], a[r, kk + 1], a[r, kk + 2], a[r, kk + 3]
            w0, w1, w2, w3 = w[kk], w[kk + 1], w[kk + 2], w[kk + 3]
            for j in range(n):
                yr[j] += v0 * w0[j] + v1 * w1[j] + v2 * w2[j] + v3 * w3[j]
        for kk in range(last4, end):
            v = a[r, kk]
            wk = w[kk]
            for j in range(n):
                yr[j] += v * wk[j]


def _kn_four_rows_add_py(a, w, y, r, first, end):  # pragma: no cover - compiled by numba (inlined)
    """y[r:r + 4] += a[r:r + 4, first:end] @ w[first:end] (see ``_rows_times_kn_add_py``)."""
    n = w.shape[1]
    y0, y1, y2, y3 = y[r], y[r + 1], y[r + 2], y[r + 3]
    last4 = end - (end - first) % 4
    for kk in range(first, last4, 4):
        w0, w1, w2, w3 = w[kk], w[kk + 1], w[kk + 2], w[kk + 3]
        a00, a01, a02, a03 = a[r, kk], a[r, kk + 1], a[r, kk + 2], a[r, kk + 3]
        a10, a11, a12, a13 = a[r + 1, kk], a[r + 1, kk + 1], a[r + 1, kk + 2], a[r + 1, kk + 3]
        a20, a21, a22, a23 = a[r + 2, kk], a[r + 2, kk + 1], a[r + 2, kk + 2], a[r + 2, kk + 3]
        a30, a31, a32, a33 = a[r + 3, kk], a[r + 3, kk + 1], a[r + 3, kk + 2], a[r + 3, kk + 3]
        for j in range(n):
            u0, u1, u2, u3 = w0[j], w1[j], w2[j], w3[j]
            y0[j] += a00 * u0 + a01 * u1 + a02 * u2 + a03 * u3
            y1[j] += a10 * u0 + a11 * u1 + a12 * u2 + a13 * u3
            y2[j] += a20 * u0 + a21 * u1 + a22 * u2 + a23 * u3
            y3[j] += a30 * u0 + a31 * u1 + a32 * u2 + a33 * u3
    for kk in range(last4, end):
        wk = w[kk]
        b0, b1, b2, b3 = a[r, kk], a[r + 1, kk], a[r + 2, kk], a[r + 3, kk]
        for j in range(n):
            u = wk[j]
            y0[j] += b0 * u
            y1[j] += b1 * u
            y2[j] += b2 * u
            y3[j] += b3 * u


def _kn_three_rows_add_py(a, w, y, r, first, end):  # pragma: no cover - compiled by numba (inlined)
    """y[r:r + 3], as ``_kn_four_rows_add_py``."""
    n = w.shape[1]
    y0, y1, y2 = y[r], y[r + 1], y[r + 2]
    last4 = end - (end - first) % 4
    for kk in range(first, last4, 4):
        w0, w1, w2, w3 = w[kk], w[kk + 1], w[kk + 2], w[kk + 3]
        a00, a01, a02, a03 = a[r, kk], a[r, kk + 1], a[r, kk + 2], a[r, kk + 3]
        a10, a11, a12, a13 = a[r + 1, kk], a[r + 1, kk + 1], a[r + 1, kk + 2], a[r + 1, kk + 3]
        a20, a21, a22, a23 = a[r + 2, kk], a[r + 2, kk + 1], a[r + 2, kk + 2], a[r + 2, kk + 3]
        for j in range(n):
            u0, u1, u2, u3 = w0[j], w1[j], w2[j], w3[j]
            y0[j] += a00 * u0 + a01 * u1 + a02 * u2 + a03 * u3
            y1[j] += a10 * u0 + a11 * u1 + a12 * u2 + a13 * u3
            y2[j] += a20 * u0 + a21 * u1 + a22 * u2 + a23 * u3
    for kk in range(last4, end):
        wk = w[kk]
        b0, b1, b2 = a[r, kk], a[r + 1, kk], a[r + 2, kk]
        for j in range(n):
            u = wk[j]
            y0[j] += b0 * u
            y1[j] += b1 * u
            y2[j] += b2 * u


def _kn_two_rows_add_py(a, w, y, r, first, end):  # pragma: no cover - compiled by numba (inlined)
    """y[r:r + 2], as ``_kn_four_rows_add_py``."""
    n = w.shape[1]
    y0, y1 = y[r], y[r + 1]
    last4 = end - (end - first) % 4
    for kk in range(first, last4, 4):
        w0, w1, w2, w3 = w[kk], w[kk + 1], w[kk + 2], w[kk + 3]
        a00, a01, a02, a03 = a[r, kk], a[r, kk + 1], a[r, kk + 2], a[r, kk + 3]
        a10, a11, a12, a13 = a[r + 1, kk], a[r + 1, kk + 1], a[r + 1, kk + 2], a[r + 1, kk + 3]
        for j in range(n):
            u0, u1, u2, u3 = w0[j], w1[j], w2[j], w3[j]
            y0[j] += a00 * u0 + a01 * u1 + a02 * u2 + a03 * u3
            y1[j] += a10 * u0 + a11 * u1 + a12 * u2 + a13 * u3
    for kk in range(last4, end):
        wk = w[kk]
        b0, b1 = a[r, kk], a[r + 1, kk]
        for j in range(n):
            u = wk[j]
            y0[j] += b0 * u
            y1[j] += b1 * u


def _rows_times_kn_split_py(a, w, bias, y, parts):  # pragma: no cover - compiled by numba
    """See ``row_products``: K in ``parts`` blocks at once (``prange``), each into its own
    partial product, the partials and the bias added after."""
    m, k = a.shape
    n = w.shape[1]
    partial = np.empty((parts, m, n), np.float32)
    for part in _prange(parts):
        _rows_times_kn_part(a, w, partial[part], k * part // parts, k * (part + 1) // parts)
    for r in range(m):
        for j in range(n):
            total = bias[j] if bias.shape[0] else _F(0.0)
            for part in range(parts):
                total += partial[part, r, j]
            y[r, j] = total


def _nan_max_py(row):  # pragma: no cover - compiled by numba
    """The maximum of a 1-D row, NaN where the row holds one (as numpy's maximum.reduce)."""
    m = row[0]
    for j in range(1, row.shape[0]):
        v = row[j]
        if v > m or v != v:
            m = v
            if v != v:
                break
    return m


def _linear_finish_py(scores, intercepts, softmax, best, out):  # pragma: no cover - compiled by numba
    """See ``linear_finish``."""
    k = scores.shape[1]
    for r in range(scores.shape[0]):
        for j in range(k):
            scores[r, j] += intercepts[j]
        at = 0
        top = scores[r, 0]
        for j in range(1, k):  # std::max_element's: a NaN is never greater, nor is any value than it
            v = scores[r, j]
            if top < v:
                top = v
                at = j
        best[r] = at
        if softmax == 1:
            m = _nan_max(scores[r])
            total = 0.0
            for j in range(k):
                e = np.exp(scores[r, j] - m)
                scores[r, j] = e
                total += e
            for j in range(k):
                out[r, j] = scores[r, j] / total
        else:
            for j in range(k):
                out[r, j] = scores[r, j]


def _normalize_rows_py(x, norm, y):  # pragma: no cover - compiled by numba
    """See ``normalize_rows``."""
    rows, n = x.shape
    for r in range(rows):
        if norm == 0:
            d = _nan_max(x[r])
        elif norm == 1:
            d = _F(0.0)
            for j in range(n):
                d += abs(x[r, j])
        else:
            d = _F(0.0)
            for j in range(n):
                d += x[r, j] * x[r, j]
            d = np.sqrt(d)
        if d == 0:
            d = _ONE
        for j in range(n):
            y[r, j] = x[r, j] / d


def _scale_rows_py(x, offset, scale, y):  # pragma: no cover - compiled by numba
    """See ``scale_rows``."""
    rows, n = x.shape
    one_offset, one_scale = offset.shape[0] == 1, scale.shape[0] == 1
    for r in range(rows):
        for j in range(n):
            y[r, j] = (x[r, j] - offset[0 if one_offset else j]) * scale[0 if one_scale else j]


def _scatter_rows_py(out, indices, updates, reduction):  # pragma: no cover - compiled by numba
    """See ``scatter_rows``: every row of ``indices`` checked first (one index, in range), so
    that nothing is written where the row path does not apply."""
    rows = out.shape[0]
    for i in range(indices.shape[0]):
        r = indices[i, 0]
        for j in range(1, indices.shape[1]):
            if indices[i, j] != r:
                return False
        if r < 0:
            r += rows
        if not 0 <= r < rows:
            return False
    for i in range(indices.shape[0]):
        r = indices[i, 0]
        if r < 0:
            r += rows
        target = out[r]
        source = updates[i]
        if reduction == 0:
            for j in range(source.shape[0]):
                target[j] += source[j]
        elif reduction == 1:
            for j in range(source.shape[0]):
                target[j] *= source[j]
        elif reduction == 2:  # NaN wins, as numpy's maximum
            for j in range(source.shape[0]):
                v = source[j]
                if v > target[j] or v != v:
                    target[j] = v
        else:
            for j in range(source.shape[0]):
                v = source[j]
                if v < target[j] or v != v:
                    target[j] = v
    return True


def _logistic_point_py(v):  # pragma: no cover - compiled by numba
    """See ``sigmoid``: 0 below -88.72, where numpy's float32 exp(-x) overflows to inf (-inf
    included); NaN stays NaN (``_exp_value``'s clamp would make it a number)."""
    return _ONE / (_ONE + _exp_value(-v)) if v >= _F(-88.72) else (_ZERO if v < _F(-88.72) else v)


# the loops of each point function are written out, not made by one function per point
# function: numba's cache misses closures in every new process (measured), so each process
# would compile them again
def _sigmoid_py(x, y):  # pragma: no cover - compiled by numba
    for i in range(x.shape[0]):
        y[i] = _logistic_point(x[i])


def _sigmoid_in_place_py(x):  # pragma: no cover - compiled by numba
    for i in range(x.shape[0]):
        x[i] = _logistic_point(x[i])


def _exp_point_py(v):  # pragma: no cover - compiled by numba (inlined)
    """See ``exp``: one polynomial, of x or of x / 2 (then squared)."""
    inside = _F(-87.0) <= v <= _F(88.0)
    e = _exp_value(v if inside else v * _HALF)
    return (e if inside else e * e) if v == v else v


def _exp_py(x, y):  # pragma: no cover - compiled by numba
    for i in range(x.shape[0]):
        y[i] = _exp_point(x[i])


def _exp_in_place_py(x):  # pragma: no cover - compiled by numba
    for i in range(x.shape[0]):
        x[i] = _exp_point(x[i])


def _quick_gelu_py(x, alpha, y):  # pragma: no cover - compiled by numba
    for i in range(x.shape[0]):
        v = x[i]
        y[i] = v * _mlas_logistic_value(alpha * v)


def _tanh_point_py(v):  # pragma: no cover - compiled by numba
    """See ``tanh``: NaN and zeros (-0.0 with its sign) passed through."""
    return _tanh_value(v) if v == v and v != _ZERO else v


def _tanh_py(x, y):  # pragma: no cover - compiled by numba
    for i in range(x.shape[0]):
        y[i] = _tanh_point(x[i])


def _tanh_in_place_py(x):  # pragma: no cover - compiled by numba
    for i in range(x.shape[0]):
        x[i] = _tanh_point(x[i])


def _top_k_rows_py(x, k, largest, values, indices):  # pragma: no cover - compiled by numba
    """See ``top_k_rows``: per row, the k best so far in order; a later value goes in only
    when strictly better than one kept (so the earlier of equal values stays ahead)."""
    rows, n = x.shape
    for r in range(rows):
        kept = 0
        for j in range(n):
            v = x[r, j]
            # where v goes among the kept: after every kept value it is not strictly better than
            pos = kept
            while pos > 0:
                w = values[r, pos - 1]
                if largest:
                    better = (v != v and w == w) or v > w  # NaN above everything, +inf included
                else:
                    better = v == v and (w != w or v < w)  # NaN below everything
                if not better:
                    break
                pos -= 1
            if pos >= k:
                continue
            last = kept if kept < k else k - 1
            for m in range(last, pos, -1):
                values[r, m] = values[r, m - 1]
                indices[r, m] = indices[r, m - 1]
            values[r, pos] = v
            indices[r, pos] = j
            if kept < k:
                kept += 1


#: columns of B per panel of ``_integer.pack_panels`` (two AVX2 vectors of int32 sums)
PRODUCT_PANEL = 16
#: rows of A per pass over B's panels in ``_packed_share_py``: 64 int16 rows of K = 1024 are
#: 128 KB, held in L2 while each panel of B meets them
_PRODUCT_ROW_BLOCK = 64


def _minus_zero_points_py(a, za, pairs):  # pragma: no cover - compiled by numba
    """The codes minus their rows' zero points as int16 (M, 2 * pairs), a zero past an odd K."""
    m, k = a.shape
    a16 = np.zeros((m, 2 * pairs), np.int16)
    for r in range(m):
        zr = za[r]
        for t in range(k):
            a16[r, t] = np.int16(np.int32(a[r, t]) - zr)
    return a16


def _panel_rows_py(a16, bp, q, z, top, bottom):  # pragma: no cover - compiled by numba (inlined)
    """Rows ``top`` to ``bottom`` of A met by panel ``q`` of B: four at a time, then the rest."""
    r = top
    while r + 4 <= bottom:
        _madd_rows4(a16, r, bp, q, z)
        r += 4
    left = bottom - r
    if left == 3:
        _madd_rows3(a16, r, bp, q, z)
    elif left == 2:
        _madd_rows2(a16, r, bp, q, z)
    elif left == 1:
        _madd_rows1(a16, r, bp, q, z)


def _packed_share_py(a16, bp, z, first, end):  # pragma: no cover - compiled by numba
    """B's panels ``first`` to ``end`` of the packed product: blocks of rows, each met by the
    panels in turn, four rows at a time by the register block."""
    m = a16.shape[0]
    for top in range(0, m, _PRODUCT_ROW_BLOCK):
        bottom = min(top + _PRODUCT_ROW_BLOCK, m)
        for q in range(first, end):
            _panel_rows(a16, bp, q, z, top, bottom)


def _packed_product_py(a, za, bp, z, parts):  # pragma: no cover - compiled by numba
    """See ``packed_product``: on the calling thread (``parts`` is not read)."""
    _packed_share(_minus_zero_points(a, za, bp.shape[1]), bp, z, 0, bp.shape[0])


def _packed_product_split_py(a, za, bp, z, parts):  # pragma: no cover - compiled by numba
    """See ``packed_product``: B's panels in ``parts`` shares at once (``prange``)."""
    a16 = _minus_zero_points(a, za, bp.shape[1])
    panels = bp.shape[0]
    for part in _prange(parts):
        _packed_share(a16, bp, z, panels * part // parts, panels * (part + 1) // parts)


#: float32 values of A per block of rows in ``_float_share_py``: 256 KB, held in L2 while each
#: panel of B meets them
_FLOAT_ROW_BLOCK_VALUES = 1 << 16


def _float_share_py(a, bp, bias, z, first, end):  # pragma: no cover - compiled by numba
    """B's panels ``first`` to ``end`` of the float32 product: blocks of rows, each met by the
    panels in turn, six rows at a time by the register block, then the rest."""
    m, k = a.shape
    block = max(6, _FLOAT_ROW_BLOCK_VALUES // max(k, 1) // 6 * 6)
    for top in range(0, m, block):
        bottom = min(top + block, m)
        for q in range(first, end):
            r = top
            while r + 6 <= bottom:
                _fma_rows6(a, r, bp, q, bias, z)
                r += 6
            left = bottom - r
            if left == 5:
                _fma_rows5(a, r, bp, q, bias, z)
            elif left == 4:
                _fma_rows4(a, r, bp, q, bias, z)
            elif left == 3:
                _fma_rows3(a, r, bp, q, bias, z)
            elif left == 2:
                _fma_rows2(a, r, bp, q, bias, z)
            elif left == 1:
                _fma_rows1(a, r, bp, q, bias, z)


def _float_product_py(a, bp, bias, z, parts):  # pragma: no cover - compiled by numba
    """See ``float_product``: on the calling thread (``parts`` is not read)."""
    _float_share(a, bp, bias, z, 0, bp.shape[0])


def _float_product_split_py(a, bp, bias, z, parts):  # pragma: no cover - compiled by numba
    """See ``float_product``: B's panels in ``parts`` shares at once (``prange``)."""
    panels = bp.shape[0]
    for part in _prange(parts):
        _float_share(a, bp, bias, z, panels * part // parts, panels * (part + 1) // parts)


def _quad_share_py(a, zu, bq, column_sums, starts, outliers, z, first, end):  # pragma: no cover - compiled by numba
    """Panels ``first`` to ``end`` of ``quad_product``: blocks of rows, each met by the panels in
    turn (four rows at a time by the register block), then the panel's outlier pairs added."""
    m = a.shape[0]
    for top in range(0, m, _PRODUCT_ROW_BLOCK):
        bottom = min(top + _PRODUCT_ROW_BLOCK, m)
        for q in range(first, end):
            r = top
            while r + 4 <= bottom:
                _quad_rows4(a, r, bq, q, zu, column_sums, z)
                r += 4
            left = bottom - r
            if left == 3:
                _quad_rows3(a, r, bq, q, zu, column_sums, z)
            elif left == 2:
                _quad_rows2(a, r, bq, q, zu, column_sums, z)
            elif left == 1:
                _quad_rows1(a, r, bq, q, zu, column_sums, z)
            # row by row: a row's outliers of this panel add into one cache line of z (down a
            # column, each row's was another line and page: 8 ns an addition, 2.5x slower)
            for row in range(top, bottom):
                for i in range(starts[q], starts[q + 1]):
                    k0, c = outliers[i, 0], outliers[i, 1]
                    z[row, c] += np.int32(a[row, k0]) * outliers[i, 2] + np.int32(a[row, k0 + 1]) * outliers[i, 3]


def _quad_product_py(a, zu, bq, column_sums, starts, outliers, z, parts):  # pragma: no cover - compiled by numba
    """See ``quad_product``: on the calling thread (``parts`` is not read)."""
    _quad_share(a, zu, bq, column_sums, starts, outliers, z, 0, bq.shape[0])


def _quad_product_split_py(a, zu, bq, column_sums, starts, outliers, z, parts):  # pragma: no cover - compiled by numba
    """See ``quad_product``: the panels in ``parts`` shares at once (``prange``)."""
    panels = bq.shape[0]
    for part in _prange(parts):
        _quad_share(a, zu, bq, column_sums, starts, outliers, z, panels * part // parts, panels * (part + 1) // parts)


def has_avx2() -> bool:
    """Whether numba compiles for a host CPU with AVX2 (the byte product's instructions)."""
    import numba  # noqa: PLC0415
    from llvmlite import binding  # noqa: PLC0415
    return numba.config.CPU_NAME is None and bool(binding.get_host_cpu_features().get("avx2", False))


@functools.cache
def has_avx512() -> bool:
    """Whether the host CPU has AVX-512 (AVX-512F), as LLVM reads it; False without numba."""
    try:
        from llvmlite import binding  # noqa: PLC0415
    except ImportError:
        return False
    return bool(binding.get_host_cpu_features().get("avx512f", False))


def has_avx512_vnni() -> bool:
    """Whether numba compiles for a host CPU with AVX-512 VNNI and VL (VPDPBUSD on 256-bit
    vectors: the byte product's block in one instruction)."""
    try:
        from llvmlite import binding  # noqa: PLC0415

        features = binding.get_host_cpu_features()
        return has_avx2() and bool(features.get("avx512vnni", False)) and bool(features.get("avx512vl", False))
    except ImportError:  # numba (and llvmlite) not installed
        return False


def _codes_share_py(a16, cols, zx, bp, z, first, end):  # pragma: no cover - compiled by numba
    """Panels ``first`` to ``end`` of ``codes_product``: each packed, then met by the rows."""
    k, n = cols.shape
    m = a16.shape[0]
    pairs = bp.shape[1]
    for q in range(first, end):
        start = q * PRODUCT_PANEL
        width = min(PRODUCT_PANEL, n - start)
        for pair in range(pairs):
            k0 = 2 * pair
            if width == PRODUCT_PANEL and k0 + 1 < k:  # the usual case: whole, in vectors
                _pack_code_pair(cols, k0, start, zx, bp, q, pair)
            else:  # the last panel's pixels past N, and a last row of K past an odd K: zeros
                for j in range(PRODUCT_PANEL):
                    low = np.int16(0)
                    high = np.int16(0)
                    if j < width:
                        low = np.int16(np.int32(cols[k0, start + j]) - zx)
                        if k0 + 1 < k:
                            high = np.int16(np.int32(cols[k0 + 1, start + j]) - zx)
                    bp[q, pair, 2 * j] = low
                    bp[q, pair, 2 * j + 1] = high
        _panel_rows(a16, bp, q, z, 0, m)


def _codes_product_py(a16, cols, zx, bp, z, parts):  # pragma: no cover - compiled by numba
    """See ``codes_product``: on the calling thread (``parts`` is not read)."""
    _codes_share(a16, cols, zx, bp, z, 0, bp.shape[0])


def _codes_product_split_py(a16, cols, zx, bp, z, parts):  # pragma: no cover - compiled by numba
    """See ``codes_product``: the panels in ``parts`` shares at once (``prange``)."""
    panels = bp.shape[0]
    for part in _prange(parts):
        _codes_share(a16, cols, zx, bp, z, panels * part // parts, panels * (part + 1) // parts)


def _integer_to_float_py(acc, a, za, column_sums, offset, scale, y):  # pragma: no cover - compiled by numba
    """See ``integer_to_float``."""
    m, k = a.shape
    n = acc.shape[1]
    per_column = scale.size != 1
    s0 = scale[0]
    for r in range(m):
        row_term = np.int32(0)
        if offset != 0:  # rowsum(A - za) * offset
            for i in range(k):
                row_term += np.int32(a[r, i])
            row_term = (row_term - np.int32(k) * za) * offset
        # the sum made int32 before the conversion (numba widens int32 arithmetic to int64,
        # whose float conversion AVX2 has no vector instruction for) and the branch outside
        # the column loops, so that each vectorises: 48 x 1024, 45 -> 8.5 us (numpy's two passes 10.5)
        if per_column:
            for j in range(n):
                y[r, j] = np.float32(np.int32(acc[r, j] - za * column_sums[j] + row_term)) * scale[j]
        else:
            for j in range(n):
                y[r, j] = np.float32(np.int32(acc[r, j] - za * column_sums[j] + row_term)) * s0


def _conv_combine_py(out, unit, zx, offset, y):  # pragma: no cover - compiled by numba
    """See ``conv_combine``."""
    batch, groups, m, p = y.shape
    for n in range(batch):
        for g in range(groups):
            sums = out[n, g, m]
            sums_unit = unit[g, m]
            for c in range(m):
                e = offset[g, c]
                row = out[n, g, c]
                row_unit = unit[g, c]
                target = y[n, g, c]
                for i in range(p):
                    target[i] = row[i] - zx * row_unit[i] + e * (sums[i] - zx * sums_unit[i])


def _gelu_tanh_value_py(v):  # pragma: no cover - compiled by numba
    """0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v^3))) of one float32."""
    return _HALF * v * (_ONE + _tanh_point(_SQRT_2_OVER_PI * (v + _F(0.044715) * v * v * v)))


def _gelu_block_py(x, b, y, tanh_form, first, end):  # pragma: no cover - compiled by numba
    """y[r, i] = gelu(x[r, i] + b[i]) (no bias where b is empty) for rows ``first`` to
    ``end`` of C-contiguous float32 rows, erf's or (``tanh_form``) the tanh approximation;
    the inner loops vectorise (AVX2: 8 lanes)."""
    h = x.shape[1]
    biased = b.size != 0
    for r in range(first, end):
        xr = x[r]
        yr = y[r]
        if tanh_form and biased:
            for i in range(h):
                yr[i] = _gelu_tanh_value(xr[i] + b[i])
        elif tanh_form:
            for i in range(h):
                yr[i] = _gelu_tanh_value(xr[i])
        elif biased:
            for i in range(h):
                yr[i] = _gelu_value(xr[i] + b[i])
        else:
            for i in range(h):
                yr[i] = _gelu_value(xr[i])


def _gelu_rows_py(x, b, y, tanh_form, parts):  # pragma: no cover - compiled by numba
    """See ``gelu_rows``: on the calling thread (``parts`` is not read)."""
    _gelu_block(x, b, y, tanh_form, 0, x.shape[0])


def _gelu_rows_split_py(x, b, y, tanh_form, parts):  # pragma: no cover - compiled by numba
    """See ``gelu_rows``: the rows in ``parts`` blocks at once (``prange``)."""
    rows = x.shape[0]
    for part in _prange(parts):
        _gelu_block(x, b, y, tanh_form, rows * part // parts, rows * (part + 1) // parts)


def _layer_norm_block_py(x, skip, bias, gamma, beta, eps, y, total, rms, first, end):  # pragma: no cover - compiled by numba
    """See ``layer_norm_rows``: rows ``first`` to ``end``, three passes over each row while it
    is in L1 (sum, not for ``rms``; squared deviations; normalise), y holding s in between."""
    h = x.shape[1]
    inv_h = _ONE / np.float32(h)
    for r in range(first, end):
        xr = x[r]
        yr = y[r]
        acc = _ZERO
        if skip.size == 0:
            for i in range(h):
                yr[i] = xr[i]
        else:
            sr = skip[r]
            for i in range(h):
                yr[i] = xr[i] + sr[i]
        if bias.size != 0:
            for i in range(h):
                yr[i] += bias[i]
        if total.size != 0:
            tr = total[r]
            for i in range(h):
                tr[i] = yr[i]
        mean = _ZERO
        if not rms:
            for i in range(h):
                acc += yr[i]
            mean = acc * inv_h
        sq = _ZERO
        for i in range(h):
            d = yr[i] - mean
            sq += d * d
        inv_std = _ONE / np.sqrt(sq * inv_h + eps)
        if beta.size == 0:
            for i in range(h):
                yr[i] = (yr[i] - mean) * inv_std * gamma[i]
        else:
            for i in range(h):
                yr[i] = (yr[i] - mean) * inv_std * gamma[i] + beta[i]


def _layer_norm_rows_py(x, skip, bias, gamma, beta, eps, y, total, rms, parts):  # pragma: no cover - compiled by numba
    """See ``layer_norm_rows``: on the calling thread (``parts`` is not read)."""
    _layer_norm_block(x, skip, bias, gamma, beta, eps, y, total, rms, 0, x.shape[0])


def _layer_norm_rows_split_py(x, skip, bias, gamma, beta, eps, y, total, rms, parts):  # pragma: no cover - compiled by numba
    """See ``layer_norm_rows``: the rows in ``parts`` blocks at once (``prange``)."""
    rows = x.shape[0]
    for part in _prange(parts):
        _layer_norm_block(x, skip, bias, gamma, beta, eps, y, total, rms, rows * part // parts,
                          rows * (part + 1) // parts)


def _recurrent_product_py(z, h, rt, col0, col1):  # pragma: no cover - compiled by numba
    """z[b, j] += sum_k h[b, k] * rt[k, col0 + j] for j in [0, col1 - col0): the inner loop
    runs along a slice of rt's row, so it vectorises (indexing rk[j] with j from col0 kept it
    scalar: 80 against 9.4 us for hidden 256). Each row of rt is read once for every batch row
    (rt is hundreds of KB, z a few: batch-outer read all of rt per batch row); each z[b, j]
    still adds its terms in k order, four rows of rt a pass (one load and store of z per four
    multiply-adds; the sum is evaluated left to right, so the order is the same)."""
    batch, n = h.shape
    m = col1 - col0
    k = 0
    while k + 4 <= n:
        r0, r1, r2, r3 = rt[k, col0:col1], rt[k + 1, col0:col1], rt[k + 2, col0:col1], rt[k + 3, col0:col1]
        for b in range(batch):
            h0, h1, h2, h3 = h[b, k], h[b, k + 1], h[b, k + 2], h[b, k + 3]
            zb = z[b]
            for j in range(m):
                zb[j] = zb[j] + h0 * r0[j] + h1 * r1[j] + h2 * r2[j] + h3 * r3[j]
        k += 4
    while k < n:
        rk = rt[k, col0:col1]
        for b in range(batch):
            hk = h[b, k]
            zb = z[b]
            for j in range(m):
                zb[j] += hk * rk[j]
        k += 1


#: exp's constants: log2(e), ln 2 in two parts (Cody and Waite), 1/i! for the polynomial on |r| <= ln(2)/2
_LOG2E, _LN2_HI, _LN2_LO = _F(1.4426950408889634), _F(0.693359375), _F(-2.1219444005469057e-4)
_E2, _E3, _E4, _E5, _E6, _E7 = (_F(1 / math.factorial(i)) for i in range(2, 8))
#: tanh's odd Taylor terms for |x| < 1/4, where 1 - 2 / (exp(2x) + 1) loses digits
_T3, _T5, _T7, _T9 = _F(-1 / 3), _F(2 / 15), _F(-17 / 315), _F(62 / 2835)


def _exp_value_py(x):  # pragma: no cover - compiled by numba
    """float32 exp without a libm call, so that loops of it vectorise (glibc's expf and tanhf
    kept the LSTM's gate loop scalar: 13 ns a value): x = k ln 2 + r, exp(r) by its Taylor
    polynomial to r^7, times 2^k made from its bits (a table's lookup needed a gather, which
    kept the loops scalar on an AVX2 EPYC: a Sigmoid of 77k values 268 us); within 2 ulp of
    expf over [-87, 88]."""
    x = min(max(x, _F(-87.0)), _F(88.0))
    k = np.floor(x * _LOG2E + _HALF)
    r = x - k * _LN2_HI - k * _LN2_LO
    p = ((((((_E7 * r + _E6) * r + _E5) * r + _E4) * r + _E3) * r + _E2) * r + _ONE) * r + _ONE
    return p * _float32_from_bits((np.int32(k) + np.int32(127)) << np.int32(23))


#: the logistic of v below this is under float32's smallest normal value (about e^v < 2^-126):
#: the recurrent cells take it as 0, as onnxruntime's LSTM gives it. Computed, it was
#: subnormal (``_exp_value`` stops at e^88), and so were the cell states made from it, whose
#: arithmetic the CPU does in microcode: silero-vad's compiled cells took 7.7 us a step in the
#: model, 4.1 without them
_SIGMOID_FLOOR = _F(-87.33)


def _sigmoid_value_py(v):  # pragma: no cover - compiled by numba
    s = _ONE / (_ONE + _exp_value(-max(v, _SIGMOID_FLOOR)))
    return s if v >= _SIGMOID_FLOOR else _ZERO


def _tanh_value_py(v):  # pragma: no cover - compiled by numba
    """float32 tanh from ``_exp_value``: an absolute error under 1e-7."""
    if abs(v) < _F(0.25):
        v2 = v * v
        return v + v * v2 * (_T3 + v2 * (_T5 + v2 * (_T7 + v2 * _T9)))
    return _ONE - _F(2.0) / (_exp_value(v + v) + _ONE)


def _lstm_cell_row_py(sigmoid, tanh):
    """One batch row of an LSTM cell (default activations ``sigmoid`` and ``tanh``, compiled
    scalar functions, frozen into the compiled row): ``row(z, p, c, h, y)``, gates z (4n,) in
    order i, o, f, c, overwritten (with the activations), peepholes p (3n,) or empty; c and h
    (n,) updated in place, y = h. The float LSTM's row takes ``_sigmoid_value``/``_tanh_value``, DynamicQuantizeLSTM's MLAS's
    (``_mlas_logistic_value``), the products and sums in onnxruntime's order."""

    def row(z, p, c, h, y):  # pragma: no cover - compiled by numba
        # one pass per activation, in place over z (the caller's scratch): loops of one input
        # and one output vectorise, where the whole cell in one loop stayed scalar (hidden 768:
        # 21 -> 9 us a DynamicQuantizeLSTM step on an AVX2 EPYC); the arithmetic per element is
        # unchanged. Each gate a view indexed from 0: an index such as 2 * n + j may be negative
        # as far as LLVM knows, and numba's wrap-around of negative indices kept those loops
        # scalar (hidden 512: 3.9 -> 0.9 us a cell)
        n = c.shape[0]
        zi, zo, zf, zc = z[:n], z[n:2 * n], z[2 * n:3 * n], z[3 * n:4 * n]
        peepholes = p.size != 0
        if peepholes:
            pi, po, pf = p[:n], p[n:2 * n], p[2 * n:3 * n]
            for j in range(n):
                zi[j] += pi[j] * c[j]
                zf[j] += pf[j] * c[j]
        for j in range(n):
            zi[j] = sigmoid(zi[j])
        for j in range(n):
            zf[j] = sigmoid(zf[j])
        for j in range(n):
            zc[j] = tanh(zc[j])
        for j in range(n):
            c[j] = zf[j] * c[j] + zi[j] * zc[j]
        if peepholes:
            for j in range(n):
                zo[j] += po[j] * c[j]
        for j in range(n):
            zo[j] = sigmoid(zo[j])
        for j in range(n):
            h[j] = tanh(c[j])
        for j in range(n):
            hj = zo[j] * h[j]
            h[j] = hj
            y[j] = hj

    return row


#: MLAS's rational approximations (onnxruntime's Sigmoid, Tanh and recurrent cells use them):
#: logistic(x) = x * P(x^2) / Q(x^2) + 1/2 on [-18, 18], tanh(x) = x * P(x^2) / Q(x^2) on [-9, 9],
#: the polynomials' coefficients highest power first, evaluated by fused multiply-adds
MLAS_LOGISTIC_P = np.array([4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                            8.51377133304701e-03, 2.48287947061529e-01], np.float32)
MLAS_LOGISTIC_Q = np.array([6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                            1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01], np.float32)
MLAS_TANH_P = np.array([-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                        5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                        4.89352455891786e-03], np.float32)
MLAS_TANH_Q = np.array([1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                        4.89352518554385e-03], np.float32)


def _rational_py(x, p, q):  # pragma: no cover - compiled by numba (inlined)
    """x * P(x^2) / Q(x^2) in float32, each polynomial by fused multiply-adds (Horner)."""
    x2 = x * x
    num = _fma(x2, p[0], p[1])
    for k in range(2, p.shape[0]):
        num = _fma(num, x2, p[k])
    den = _fma(x2, q[0], q[1])
    for k in range(2, q.shape[0]):
        den = _fma(den, x2, q[k])
    return (num * x) / den


def _mlas_logistic_value_py(v):  # pragma: no cover - compiled by numba
    x = min(max(v, _F(-18.0)), _F(18.0))
    return min(max(_rational(x, MLAS_LOGISTIC_P, MLAS_LOGISTIC_Q) + _HALF, _ZERO), _ONE)


def _mlas_tanh_value_py(v):  # pragma: no cover - compiled by numba
    x = min(max(v, _F(-9.0)), _F(9.0))
    return _rational(x, MLAS_TANH_P, MLAS_TANH_Q)


def mlas_logistic(x: np.ndarray) -> np.ndarray:
    """MLAS's logistic over an array (numpy, the same operations as ``_mlas_logistic_value``)."""
    return np.clip(_rational_array(np.clip(np.asarray(x, np.float32), -18, 18), MLAS_LOGISTIC_P, MLAS_LOGISTIC_Q)
                   + _HALF, _ZERO, _ONE)


def mlas_tanh(x: np.ndarray) -> np.ndarray:
    """MLAS's tanh over an array (numpy, the same operations as ``_mlas_tanh_value``)."""
    return _rational_array(np.clip(np.asarray(x, np.float32), -9, 9), MLAS_TANH_P, MLAS_TANH_Q)


def _rational_array(x: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``_rational`` over an array: the same fused multiply-adds (float32 products exact in
    float64, one rounding)."""
    def fma(a, b, c):
        return (np.asarray(a, np.float64) * b + np.float64(c)).astype(np.float32)

    x2 = x * x
    num = fma(x2, p[0], p[1])
    for k in range(2, len(p)):
        num = fma(num, x2, p[k])
    den = fma(x2, q[0], q[1])
    for k in range(2, len(q)):
        den = fma(den, x2, q[k])
    return ((num * x) / den).astype(np.float32)


def _lstm_cells_py(z, p, c, h, y):  # pragma: no cover - compiled by numba
    """See ``lstm_cells``."""
    for b in range(z.shape[0]):
        _lstm_cell_row(z[b], p, c[b], h[b], y[b])


def _lstm_step_py(x, h, wr, bias, p, c, h_out, y):  # pragma: no cover - compiled by numba
    """See ``lstm_step``: z = x @ W + bias by ``_rows_times_kn``, then h's product added by
    ``_rows_times_kn_add`` (both compiled apart, with their own reassociated sums)."""
    batch, inputs = x.shape
    z = np.empty((batch, wr.shape[1]), np.float32)
    _rows_times_kn(x, wr[:inputs], bias, z, 1)
    _rows_times_kn_add(h, wr[inputs:], z, 0, h.shape[1])
    for b in range(batch):
        _lstm_cell_row(z[b], p, c[b], h_out[b], y[b])


def _lstm_scan_py(xw, rt, rb, p, lens, h, c, ys):  # pragma: no cover - compiled by numba
    """See ``lstm_scan``."""
    seq, batch, g = xw.shape
    n = g // 4
    z = np.empty((batch, g), np.float32)
    for t in range(seq):
        for b in range(batch):
            for j in range(g):
                z[b, j] = xw[t, b, j] + rb[j]
        _recurrent_product(z, h, rt, 0, g)
        for b in range(batch):
            if t >= lens[b]:
                for j in range(n):
                    ys[t, b, j] = _ZERO
                continue
            _lstm_cell_row(z[b], p, c[b], h[b], ys[t, b])


def _lstm_panel_scan_py(xw, rp, rbp, p, lens, h, c, ys):  # pragma: no cover - compiled by numba
    """See ``lstm_panel_scan``."""
    seq, batch, g = xw.shape
    n = g // 4
    z = np.empty((batch, g), np.float32)
    for t in range(seq):
        _float_share(h, rp, rbp, z, 0, rp.shape[0])  # h @ R + rb
        for b in range(batch):
            if t >= lens[b]:
                for j in range(n):
                    ys[t, b, j] = _ZERO
                continue
            for j in range(g):
                z[b, j] += xw[t, b, j]
            _lstm_cell_row(z[b], p, c[b], h[b], ys[t, b])


def _quantized_lstm_step_py(acc, zq, column_sums, offset, scale, xt, rb, p, lens, step, h, c, y, q):  # pragma: no cover - compiled by numba
    """See ``quantized_lstm_step``."""
    batch, g = acc.shape
    n = g // 4
    z = np.empty(g, np.float32)
    terms = column_sums.size != 0
    for b in range(batch):
        if step >= lens[b]:
            for j in range(n):
                y[b, j] = _ZERO
            continue
        if terms:  # acc is A @ Bs: add -zq * colsum(Bs) + rowsum(A - zq) * offset
            row_term = np.int32(0)
            for k in range(n):
                row_term += np.int32(q[b, k])
            row_term = (row_term - np.int32(n) * zq) * offset
            for j in range(g):
                exact = acc[b, j] - zq * column_sums[j] + row_term
                z[j] = xt[b, j] + np.float32(exact) * scale + rb[j]
        else:
            for j in range(g):
                z[j] = xt[b, j] + np.float32(acc[b, j]) * scale + rb[j]
        _lstm_cell_row_mlas(z, p, c[b], h[b], y[b])
    # onnxruntime's dynamic quantization of h: the range widened to hold 0, 255 steps
    hi = _ZERO
    lo = _ZERO
    for b in range(batch):
        for j in range(n):
            hi = max(hi, h[b, j])
            lo = min(lo, h[b, j])
    h_scale = _ONE if hi == lo else (hi - lo) / np.float32(255.0)
    zp = np.rint(min(max(-lo / h_scale, _ZERO), np.float32(255.0)))
    for b in range(batch):
        for j in range(n):
            v = np.rint(h[b, j] / h_scale) + zp
            q[b, j] = np.uint8(min(max(v, _ZERO), np.float32(255.0)))
    return h_scale, np.uint8(zp)


def _quantized_lstm_scan_py(xw, bp, r_scale, bias, p, lens, reverse, h, c, y, q, h_scale, h_zero_point, parts):  # pragma: no cover - compiled by numba
    """See ``quantized_lstm_scan``: ``contrib_quant._compiled_steps``'s loop, compiled."""
    acc, zero_points, rows = _quantized_lstm_buffers(xw, lens)
    scale, zero = h_scale, h_zero_point
    for step in range(xw.shape[0]):
        zero_points[:] = np.int32(zero)
        if parts > 1:
            _packed_product_split(q, zero_points, bp, acc, parts)
        else:
            _packed_product(q, zero_points, bp, acc, parts)
        scale, zero = _quantized_lstm_after_product(step, acc, zero, scale, r_scale, xw, bias, p, lens, reverse, h, c,
                                                    y, q, rows)


def _quantized_lstm_quad_scan_py(xw, bq, column_sums, starts, outliers, r_scale, bias, p, lens, reverse, h, c, y, q,  # pragma: no cover - compiled by numba
                                 h_scale, h_zero_point, parts):
    """See ``quantized_lstm_quad_scan``: ``_quantized_lstm_scan_py`` with the byte product."""
    acc, zero_points, rows = _quantized_lstm_buffers(xw, lens)
    scale, zero = h_scale, h_zero_point
    for step in range(xw.shape[0]):
        zero_points[:] = np.int32(zero)
        if parts > 1:
            _quad_product_split(q, zero_points, bq, column_sums, starts, outliers, acc, parts)
        else:
            _quad_product(q, zero_points, bq, column_sums, starts, outliers, acc, parts)
        scale, zero = _quantized_lstm_after_product(step, acc, zero, scale, r_scale, xw, bias, p, lens, reverse, h, c,
                                                    y, q, rows)


def _quantized_lstm_buffers_py(xw, lens):  # pragma: no cover - compiled by numba
    """The scans' buffers: the product's int32 (batch, 4n) and its zero points per row, and the
    rows' (whether every row is as long as the sequence, x rows, out rows, time of each row)
    for a reverse walk of unequal lengths, row by row, with the step's empty zero-point terms."""
    seq, batch, g = xw.shape
    full = True
    for b in range(batch):
        if lens[b] != seq:
            full = False
    rows = (full, np.empty((batch, g), np.float32), np.empty((batch, g // 4), np.float32), np.zeros(batch, np.int64),
            np.empty(0, np.int32))
    return np.empty((batch, g), np.int32), np.empty(batch, np.int32), rows


def _quantized_lstm_after_product_py(step, acc, zero, scale, r_scale, xw, bias, p, lens, reverse, h, c, y, q, rows):  # pragma: no cover - compiled by numba
    """A scan's step once ``acc`` holds the product: the gates and cell at the step's time (a
    reverse walk of unequal lengths: each row at its own), h quantized into ``q``; returns the
    next (scale, zero point)."""
    seq, batch, _ = xw.shape
    full, x_rows, out_rows, t_rows, no_terms = rows
    if reverse and not full:
        for b in range(batch):
            t_rows[b] = lens[b] - 1 - step if step < lens[b] else 0
            x_rows[b] = xw[t_rows[b], b]
        scale, zero = _quantized_lstm_step(acc, np.int32(zero), no_terms, np.int32(0), np.float32(scale * r_scale),
                                           x_rows, bias, p, lens, step, h, c, out_rows, q)
        for b in range(batch):
            if step < lens[b]:
                y[t_rows[b], b] = out_rows[b]
        return scale, zero
    t = seq - 1 - step if reverse else step
    return _quantized_lstm_step(acc, np.int32(zero), no_terms, np.int32(0), np.float32(scale * r_scale), xw[t], bias,
                                p, lens, step, h, c, y[t], q)


def _gru_scan_py(xw, rt, rb, lbr, lens, h, ys):  # pragma: no cover - compiled by numba
    """See ``gru_scan``."""
    seq, batch, g = xw.shape
    n = g // 3
    zr = np.empty((batch, 2 * n), np.float32)
    hh = np.empty((batch, n), np.float32)
    rh = np.empty((batch, n), np.float32)
    for t in range(seq):
        for b in range(batch):
            for j in range(2 * n):
                zr[b, j] = rb[j]
            for j in range(n):
                hh[b, j] = rb[2 * n + j]
        _recurrent_product(zr, h, rt, 0, 2 * n)
        for b in range(batch):
            for j in range(2 * n):
                zr[b, j] = _sigmoid_value(zr[b, j] + xw[t, b, j])
        if lbr:  # cand = xw + r * (h @ Rh + Rbh)
            _recurrent_product(hh, h, rt, 2 * n, 3 * n)
        else:  # cand = xw + (r * h) @ Rh + Rbh
            for b in range(batch):
                for j in range(n):
                    rh[b, j] = zr[b, n + j] * h[b, j]
            _recurrent_product(hh, rh, rt, 2 * n, 3 * n)
        for b in range(batch):
            if t >= lens[b]:
                for j in range(n):
                    ys[t, b, j] = _ZERO
                continue
            # views indexed from 0 (see ``_lstm_cell_row_py``: offset indices kept loops scalar)
            xh, r_gate, z_gate, hb, hhb, yb = xw[t, b, 2 * n:3 * n], zr[b, n:2 * n], zr[b, :n], h[b], hh[b], ys[t, b]
            for j in range(n):
                if lbr:
                    cand = xh[j] + r_gate[j] * hhb[j]
                else:
                    cand = xh[j] + hhb[j]
                zj = z_gate[j]
                hj = (_ONE - zj) * _tanh_value(cand) + zj * hb[j]
                hb[j] = hj
                yb[j] = hj


def _rnn_scan_py(xw, rt, rb, activation, lens, h, ys):  # pragma: no cover - compiled by numba
    """See ``rnn_scan``."""
    seq, batch, n = xw.shape
    z = np.empty((batch, n), np.float32)
    for t in range(seq):
        for b in range(batch):
            for j in range(n):
                z[b, j] = rb[j]
        _recurrent_product(z, h, rt, 0, n)
        for b in range(batch):
            if t >= lens[b]:  # a finished row keeps its state; its outputs are 0
                for j in range(n):
                    ys[t, b, j] = _ZERO
                continue
            # one loop per activation (a branch inside the loop kept it scalar)
            if activation == 0:
                for j in range(n):
                    hj = _tanh_value(z[b, j] + xw[t, b, j])
                    h[b, j] = hj
                    ys[t, b, j] = hj
            elif activation == 1:
                for j in range(n):
                    hj = max(z[b, j] + xw[t, b, j], _ZERO)
                    h[b, j] = hj
                    ys[t, b, j] = hj
            else:
                for j in range(n):
                    hj = _sigmoid_value(z[b, j] + xw[t, b, j])
                    h[b, j] = hj
                    ys[t, b, j] = hj


def _bilinear_py(x, y1, y2, x1, x2, dy1, dy2, dx1, dx2, y):  # pragma: no cover - compiled by numba
    """See ``bilinear``."""
    for b in range(x.shape[0]):
        for i in range(y.shape[1]):
            top = x[b, y1[i]]
            bottom = x[b, y2[i]]
            upper = dy2[i]
            lower = dy1[i]
            row = y[b, i]
            for j in range(y.shape[2]):
                left = dx2[j]
                right = dx1[j]
                row[j] = (left * upper * top[x1[j]] + right * upper * top[x2[j]]
                          + left * lower * bottom[x1[j]] + right * lower * bottom[x2[j]])


def _small_conv_py(x, wt, b, y, sh, sw, dh, dw, ph, pw, group, relu):  # pragma: no cover - compiled by numba
    """See ``small_conv``: the input copied channels last, then per output pixel the sums of
    every output channel accumulated over the taps inside the image (padding is skipped), the
    bias added after the sums, as a GEMM's epilogue adds it."""
    n_, c_, h_, w_ = x.shape
    cg, kh_, kw_, m_ = wt.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    mg = m_ // group
    depthwise = cg == 1 and mg == 1
    xt = np.empty((h_, w_, c_), x.dtype)
    acc = np.empty(m_, y.dtype)
    for n in range(n_):
        for c in range(c_):
            for i in range(h_):
                for j in range(w_):
                    xt[i, j, c] = x[n, c, i, j]
        for oh in range(oh_):
            for ow in range(ow_):
                acc[:] = 0
                for kh in range(kh_):
                    ih = oh * sh - ph + kh * dh
                    if ih < 0 or ih >= h_:
                        continue
                    for kw in range(kw_):
                        iw = ow * sw - pw + kw * dw
                        if iw < 0 or iw >= w_:
                            continue
                        xp = xt[ih, iw]
                        if depthwise:
                            wp = wt[0, kh, kw]
                            for m in range(m_):
                                acc[m] += wp[m] * xp[m]
                        else:
                            for g in range(group):
                                # slices indexed from 0: an index from g * mg kept the loop
                                # scalar (LLVM cannot rule out a negative, wrapped index)
                                accg = acc[g * mg:(g + 1) * mg]
                                xg = xp[g * cg:(g + 1) * cg]
                                c = 0
                                while c + 4 <= cg:  # four channels a pass over the sums
                                    v0, v1, v2, v3 = xg[c], xg[c + 1], xg[c + 2], xg[c + 3]
                                    w0 = wt[c, kh, kw, g * mg:(g + 1) * mg]
                                    w1 = wt[c + 1, kh, kw, g * mg:(g + 1) * mg]
                                    w2 = wt[c + 2, kh, kw, g * mg:(g + 1) * mg]
                                    w3 = wt[c + 3, kh, kw, g * mg:(g + 1) * mg]
                                    for j in range(mg):
                                        accg[j] = accg[j] + v0 * w0[j] + v1 * w1[j] + v2 * w2[j] + v3 * w3[j]
                                    c += 4
                                while c < cg:
                                    v = xg[c]
                                    wc = wt[c, kh, kw, g * mg:(g + 1) * mg]
                                    for j in range(mg):
                                        accg[j] += v * wc[j]
                                    c += 1
                for m in range(m_):
                    v = acc[m] + b[m]
                    if relu and v < 0:
                        v = 0
                    y[n, m, oh, ow] = v
