"""Linear algebra, convolution and pooling (BLAS through numpy matmul).

Convolution: 1x1 stride-1 ones are one GEMM on the input; 1-D and 2-D ones with a larger
kernel or padding run "on the wide output" (``_WidePlan``: stride phases of the padded input
stored flat, one strided copy per phase into a column buffer, one GEMM per band of output rows,
the crop fused with the bias), depthwise ones through a compiled loop when numba is installed
(``_jit``); 3-D ones by oneDNN where it is installed, else (and strides with many phases) an im2col copy + GEMM. Pooling reduces
one spatial axis at a time over strided slices. Geometry (pads, slices, output shape, the
wide-output plan and its buffers) is worked out once per input shape and cached.
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import threads
from .._lazy import special  # scipy.special, imported at first use
from ..registry import kernel
from . import _blas, _jit, _onednn
from ._util import SHAPE_CACHE_MAX, as_dtype, as_float32, constant_weight, data_address, zero, zeros_vector
from .elementwise import JIT_FLOATS, hard_sigmoid_into
from .elementwise import sigmoid as elementwise_sigmoid
from .elementwise import tanh as elementwise_tanh

_FLOAT32 = np.dtype(np.float32)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul, with (..., K) @ (K, N) done as one (rows, K) @ (K, N) GEMM: one big BLAS call
    instead of one per leading index (better blocking and threading); float32 ones by oneDNN's
    sgemm where ``onednn_product`` takes them. float16 is multiplied in float32 and rounded
    once, as onnxruntime does (numpy's float16 product left 171 of 6,144 values off the
    correctly rounded one, onnxruntime 9)."""
    if a.dtype == np.float16 and b.dtype == np.float16:
        return as_dtype(matmul(as_float32(a), as_float32(b)), a.dtype)
    if 2 < b.ndim <= a.ndim and b.shape[0] == 1 and math.prod(b.shape[:-2]) == 1:
        # a B of batch 1 (decoders' (1, 1, K) @ (1, K, N)) is one matrix: numpy's batched
        # matmul took 8 us where the matrix product takes 2
        b = b.reshape(b.shape[-2:])
    y = onednn_product(a, b)
    if y is not None:
        return y
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:
        return np.matmul(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[1:])
    return np.matmul(a, b)


#: one-row products (GEMVs) with fewer B elements than this keep numpy's call: OpenBLAS's GEMV
#: is quicker than a oneDNN call for them (1x128 @ 128x128: 1.3 us, oneDNN's sgemm 2.0 us)
ONEDNN_MIN_GEMV_WEIGHTS = 1 << 17
#: products of several rows take oneDNN's sgemm from this many multiply-adds, or from this many
#: B elements: below, its fixed cost (about 4 us) loses to OpenBLAS's call (both on one thread;
#: us numpy / oneDNN: 3x256x160 4.3 / 6.3, 4x256x256 3.6 / 7.4, 8x256x256 6.4 / 8.8, 16x256x160
#: 8.0 / 9.9; above: 16x256x256 18.1 / 12.8, 4x512x512 57 / 24, 2x768x768 107 / 36)
ONEDNN_MIN_SGEMM_MACS = 3 << 18
ONEDNN_MIN_SGEMM_WEIGHTS = 1 << 19


def _sgemm_operand(x: np.ndarray) -> tuple[np.ndarray, bool, int]:
    """(matrix, transposed, leading dimension) for a 2-D float32 operand of ``sgemm``: a
    row-major one or the transposed view of one as it is (Gemm's transA / transB), others
    copied."""
    rows, cols = x.shape
    row_step, col_step = x.strides
    if col_step == 4 and (rows == 1 or row_step >= 4 * cols) and row_step % 4 == 0:
        return x, False, max(row_step // 4, cols) if rows > 1 else max(cols, 1)
    if row_step == 4 and (cols == 1 or col_step >= 4 * rows) and col_step % 4 == 0:
        return x, True, max(col_step // 4, rows) if cols > 1 else max(rows, 1)
    return np.ascontiguousarray(x), False, max(cols, 1)


def onednn_product(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a`` (..., K) @ ``b`` (K, N) for float32 by oneDNN's sgemm, or None where it is not
    taken (no oneDNN, another dtype or rank, an empty operand, a small product: one row by a
    small B, or ``ONEDNN_MIN_SGEMM_*``). Why: OpenBLAS's GEMM kernels for a few rows are slow on
    this CPU for larger products (4x512 @ 512x512: 57 / 24 us). (Measured with OpenBLAS's own
    choice of kernels: OPENBLAS_CORETYPE=Haswell made its small products 3-4x slower and had
    sent all of them here.)"""
    if a.dtype != np.float32 or b.dtype != np.float32 or b.ndim != 2 or a.ndim < 1 or not _onednn.USE:
        return None
    k, n = b.shape
    if a.shape[-1] != k or a.size == 0 or b.size == 0:
        return None  # numpy's matmul names the mismatch; empty products are numpy's
    rows = a.size // k
    if rows == 1 and k * n < ONEDNN_MIN_GEMV_WEIGHTS:
        return None
    if rows > 1 and rows * k * n < ONEDNN_MIN_SGEMM_MACS and k * n < ONEDNN_MIN_SGEMM_WEIGHTS:
        return None
    lib = _onednn.library()
    if lib is None:
        return None
    a2, trans_a, lda = _sgemm_operand(a.reshape(rows, k))
    b2, trans_b, ldb = _sgemm_operand(b)
    y = np.empty(a.shape[:-1] + (n,), np.float32)
    lib.sgemm(trans_a, trans_b, rows, n, k, data_address(a2), lda, data_address(b2), ldb, 0.0, data_address(y), n)
    return y


#: batched products of two run-time operands (attention's Q K^T and P V) take oneDNN's matmul
#: from this many multiply-adds in all: below, numpy's BLAS call per batch index is as quick
#: (us numpy / oneDNN, two threads: (8, 4, 32, 16) @ (8, 4, 16, 32) 12.2 / 11.0, (2, 4, 64, 64)
#: @ (2, 4, 64, 64) 38.9 / 23.7, (1, 6, 400, 64) @ (1, 6, 64, 400) 1285 / 627; one thread
#: 11.7 / 14.4, 38.6 / 40.8, 1243 / 1116)
ONEDNN_MIN_BATCHED_MACS = 1 << 20


def batched_product(a: np.ndarray, b: np.ndarray, plans: dict, out: np.ndarray | None = None) -> np.ndarray | None:
    """``a`` (..., M, K) @ ``b`` (..., K, N), float32 of one rank >= 3 whose batch axes are
    equal or 1, by oneDNN's matmul on the session's threads (``_onednn.BatchedMatMul``, kept in
    ``plans`` per shapes and strides), into ``out`` (a float32 array or view of the product's
    shape) or a new array; None where it is not taken (no oneDNN, other dtypes or ranks, an
    empty or small product: ``ONEDNN_MIN_BATCHED_MACS``, negative strides), ``out`` untouched."""
    if a.ndim != b.ndim or a.ndim < 3:
        return None
    # of equal batch axes, a.size * N is the product's size: the quick answer for attention's
    # small head products and a decoder's steps (the full checks below cost 1.3 us each)
    if a.shape[:-2] == b.shape[:-2] and a.size * b.shape[-1] < ONEDNN_MIN_BATCHED_MACS:
        return None
    if a.dtype != np.float32 or b.dtype != np.float32 or not _onednn.USE:
        return None
    *a_batch, m, k = a.shape
    *b_batch, k_b, n = b.shape
    batch = [max(da, db) for da, db in zip(a_batch, b_batch)]
    # (math.prod: np.prod of a tuple cost 2 us a call, on every small product)
    if k != k_b or math.prod(batch) * m * k * n < ONEDNN_MIN_BATCHED_MACS or a.size == 0 or b.size == 0:
        return None  # numpy's matmul names the mismatch; empty products are numpy's
    if any(da != db and da != 1 and db != 1 for da, db in zip(a_batch, b_batch)) or min(a.strides) < 0 \
            or min(b.strides) < 0:
        return None
    y_shape = (*batch, m, n)
    if out is not None and (out.shape != y_shape or out.dtype != np.float32 or min(out.strides) < 0):
        return None
    y = np.empty(y_shape, np.float32) if out is None else out
    a_form, b_form, y_form = (a.shape, a.strides), (b.shape, b.strides), (y_shape, y.strides)
    # (the maker is kept with the plan, to make its one-thread twin: it must hold the forms,
    # not this run's arrays, which it kept alive)
    plan = _onednn.plan_for(plans, (a_form, b_form, y_form),
                            lambda lib: _onednn.BatchedMatMul(lib, a_form, b_form, y_form))
    if plan is None:
        return None
    plan.run(a, b, y)
    return y


#: products (rows x K x N multiply-adds) smaller than this keep numpy's BLAS call (on one
#: thread while oneDNN is in use): a oneDNN matmul call costs about 18 us however small, so the
#: crossover lies between 0.5M and 0.85M MACs (measured, us numpy / oneDNN: 8x128x128 4 / 19;
#: 2x512x512 16 / 24; 1x128x6625 119 / 53; 4x512x512 69 / 27)
ONEDNN_MIN_GEMM_MACS = 3 << 18
#: ... and products whose constant B has this many elements or more take oneDNN however few
#: the rows: in a model's run such weights (512 KB and up) are not in the core's cache from
#: the last run, and one BLAS thread streams them alone where oneDNN's two split them (the
#: bench's mlp at batch 1, 256->512->512->512, in a loop of runs: 117 -> 72 us)
ONEDNN_MIN_GEMM_WEIGHTS = 1 << 17


def pack_float_panels(b: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """B (K, N) (any strides) as ``_jit.float_product`` reads it: (panels, K, 16) float32, panel
    q holding columns 16q to 16q + 15 row after row, zeros past N; and the bias as (16 panels,),
    zeros past N (all zeros where there is none)."""
    k, n = b.shape
    panel = _jit.PRODUCT_PANEL
    panels, whole = -(-n // panel), n // panel
    packed = np.zeros((panels, k, panel), np.float32)
    packed[:whole] = b[:, :whole * panel].reshape(k, whole, panel).transpose(1, 0, 2)
    if n % panel:
        packed[whole, :, :n % panel] = b[:, whole * panel:]
    padded = np.zeros(panels * panel, np.float32)
    if bias is not None:
        padded[:n] = bias.reshape(-1)
    return packed, padded


#: the compiled product (``_ConstantProduct``) of a product without bias from this many
#: multiply-adds and one 16-column panel of B: below, numpy's BLAS call is the quicker (one
#: BLAS thread, us compiled / numpy: 16 x 128 x 64 5.7 / 3.3, 64 x 256 x 16 8.5 / 6.4, 64 x
#: 128 x 64 11.7 / 10.9 at 512K, 64 x 128 x 128 18.7 / 24.0 at 1M), and a narrower B fills a
#: fraction of the panel it is padded to (256 x 256 x 1 20.7 / 4.4, x 8 21.2 / 11.2). With a
#: bias (Gemm) the compiled product adds it in its block and numpy needs a pass more: an MLP's
#: 8 x 512 -> 10 head 5.2 us compiled, 7.7 by numpy, so those keep the compiled product
COMPILED_PRODUCT_MIN_MACS = 1 << 19
#: ... and below this many where oneDNN is installed and the CPU has AVX-512: there oneDNN's
#: f32 GEMM, on 512-bit vectors, ran as fast as the compiled product's block of 8-lane vectors
#: and up to twice as fast (an AVX-512 Xeon, us, two threads, hot, compiled / oneDNN: 64 x 128
#: x 128 21 / 21, 64 x 256 x 256 75 / 46, 15 x 336 x 512 31 / 21, 128 x 768 x 768 1563 / 844,
#: 128 x 768 x 3072 6688 / 3711; one thread 64 x 768 x 768 814 / 453), where on the AVX2 EPYC
#: it was the slower (see ``_jit.float_product``).
COMPILED_PRODUCT_MAX_MACS_AVX512 = ONEDNN_MIN_GEMM_MACS
#: ... where A has at least this many rows; fewer rows keep the compiled product below
#: ``FEW_ROWS_MAX_MACS_AVX512``: in a model, whose weights are not in cache from the run
#: before, it was the quicker there. One session each, blocks alternated, ms a run, all
#: oneDNN's from 786K / this rule / all compiled: a molecule GNN (85 Gemms of 15-30 rows by
#: 336 x 336-512) 5.82 / 5.42 / 5.31; a captcha CRNN (its (25, 1024) @ (1024, 8210) head)
#: 8.01 / 7.86 / 9.80; PP-OCRv4's recogniser 6.38 / 6.35 / 6.46; the bench's transformer at
#: batch 8 (512 rows) 3.15 / 3.17 / 4.12; magika 4.07 / 4.08 / 4.33
FEW_ROWS_AVX512 = 64
FEW_ROWS_MAX_MACS_AVX512 = 1 << 24


def _onednn_wider(rows: int, macs: int) -> bool:
    """Whether a float32 product of constant weights of ``rows`` rows and ``macs``
    multiply-adds is oneDNN's on an AVX-512 CPU rather than the compiled product's
    (``COMPILED_PRODUCT_MAX_MACS_AVX512``)."""
    if macs < COMPILED_PRODUCT_MAX_MACS_AVX512 or (rows < FEW_ROWS_AVX512 and macs < FEW_ROWS_MAX_MACS_AVX512):
        return False
    return _onednn.USE and _jit.has_avx512()


class _ConstantProduct:
    """``a @ b`` for a float32 ``a`` (..., K) and the constant float32 ``b`` (K, N), plus a
    constant ``bias`` (N,) and an activation post-op. More than ``COMPILED_PRODUCT_ROWS`` rows
    without a post-op: the compiled register-blocked product (``_jit.float_product``, B packed
    once at its first use), which on the AVX2 EPYC took 0.5-1.0x the time of oneDNN's f32
    GEMM (nine shapes from 8 x 128 x 128 to 1000 x 128 x 32, none slower), and on an AVX-512
    CPU only below ``COMPILED_PRODUCT_MAX_MACS_AVX512``; else oneDNN, whose primitives (B
    packed in its layout once) are kept per row count.
    ``__call__`` returns None where neither is taken (not installed, small, another dtype,
    unimplemented): the caller runs numpy's."""

    def __init__(self, b: np.ndarray, bias: np.ndarray | None = None, post_op: tuple | None = None):
        self.b, self.bias, self.post_op = b, bias, post_op
        self.plans: dict[int, _onednn.MatMul | None] = {}
        self.packed = _onednn.PackedConstants()  # B in oneDNN's layout, for every row count
        self.panels: tuple[np.ndarray, np.ndarray] | None = None  # B and bias for the compiled product

    def __call__(self, a: np.ndarray) -> np.ndarray | None:
        if a.dtype != np.float32:
            return None
        k, n = self.b.shape
        if a.shape[-1] != k:
            return None  # numpy's matmul names the mismatch
        rows = a.size // k if k else 0
        if (rows > COMPILED_PRODUCT_ROWS and self.post_op is None
                and (self.bias is not None or n >= _jit.PRODUCT_PANEL and rows * k * n >= COMPILED_PRODUCT_MIN_MACS)
                and not _onednn_wider(rows, rows * k * n)):
            y = self._compiled(a, rows, k, n)
            if y is not None:
                return y
        if not _onednn.USE:
            return None
        plan = _onednn.plan_for(self.plans, rows, lambda lib: _onednn.MatMul(lib, rows, self.b, self.bias, self.post_op,
                                                                             self.packed)
                                if rows * k * n >= ONEDNN_MIN_GEMM_MACS or k * n >= ONEDNN_MIN_GEMM_WEIGHTS else None)
        if plan is None:
            return None
        y = np.empty(a.shape[:-1] + (n,), dtype=np.float32)
        plan.run(np.ascontiguousarray(a), y)
        return y

    def _compiled(self, a: np.ndarray, rows: int, k: int, n: int) -> np.ndarray | None:
        """The product by ``_jit.float_product``, on the session's threads (at most one a panel)
        from ``ROW_SPLIT_MACS``; None without numba."""
        parts = min(threads.split_threads(), -(-n // _jit.PRODUCT_PANEL)) if rows * k * n >= ROW_SPLIT_MACS else 1
        loop = _jit.float_product(parts)
        if loop is None:
            return None
        if self.panels is None:
            self.panels = pack_float_panels(self.b, self.bias)
        bp, bias = self.panels
        y = np.empty(a.shape[:-1] + (n,), np.float32)
        loop(np.ascontiguousarray(a).reshape(rows, k), bp, bias, y.reshape(rows, n), parts)
        return y


#: the products made, by (B's memory and view, the bias's values, the post-op), while a kernel
#: holds them: nodes that multiply by one initializer share its packed copies (an unrolled
#: LSTM's 20 steps each packed its own 6.5 MB copy of the same weights, 0.3 s of the first run
#: and 130 MB)
_PRODUCTS: weakref.WeakValueDictionary[tuple, _ConstantProduct] = weakref.WeakValueDictionary()
_PRODUCTS_LOCK = threading.Lock()


def _constant_product(b: np.ndarray | None, bias: np.ndarray | None = None,
                      post_op: tuple | None = None) -> _ConstantProduct | None:
    """A ``_ConstantProduct`` for a constant 2-D float32 ``b`` (any strides: oneDNN reads them
    as it packs B), else None; the one made before for the same B (memory, shape and strides:
    the product holds B, so its memory is not another's while the entry lives), bias values
    and post-op, where a kernel still holds it."""
    if b is None or not isinstance(b, np.ndarray) or b.ndim != 2 or b.dtype != np.float32:
        return None
    key = (b.__array_interface__["data"][0], b.shape, b.strides,
           None if bias is None else (bias.dtype.str, bias.shape, bias.tobytes()), post_op)
    with _PRODUCTS_LOCK:
        try:
            product = _PRODUCTS.get(key)
        except TypeError:  # a post-op that cannot be a key: not shared
            return _ConstantProduct(b, bias, post_op)
        if product is None:
            product = _PRODUCTS[key] = _ConstantProduct(b, bias, post_op)
        return product


#: products of up to this many rows by constant float32 weights of fewer than
#: ``COMPILED_PRODUCT_WEIGHTS`` elements run in one compiled loop with their bias
#: (``_jit.row_products``), on the session's threads from ``ROW_SPLIT_MACS`` multiply-adds.
#: Such products are bound by reading the weights, which the loop reads once for four rows
#: (us, two threads, compiled / oneDNN: 3 x 256 -> 768 21 / 46, 4 x 512 -> 512 42 / 68,
#: 1024 x 1024 55 / 67); oneDNN's GEMM is the faster from about eight rows.
COMPILED_PRODUCT_ROWS = 4
COMPILED_PRODUCT_WEIGHTS = 1 << 20
#: multiply-adds from which the row products split over the threads (us, one / two threads:
#: 1 x 128 x 512 6.9 / 11.0; 1 x 256 x 512 10.8 / 14.1; 1 x 256 x 768 15.6 / 11.6; 4 x 336 x
#: 336 25.3 / 18.2). At 1 << 17 silero VAD's LSTM step (1 x 256 x 512) split, and the model
#: ran 0.44 -> 0.56 ms, blocks alternated in one process; the wake-word model 0.128 -> 0.145
ROW_SPLIT_MACS = 1 << 18


class _RowProduct:
    """``a @ W + bias`` for a float32 ``a`` (..., K) of at most ``COMPILED_PRODUCT_ROWS`` rows
    and a small constant W (``w`` (K, N), or (N, K) where ``transposed``: a Gemm's transB
    weights as stored), by the compiled row loops; ``__call__`` returns None where they are not
    taken (more rows, another dtype, numba absent): the caller's paths run."""

    def __init__(self, w: np.ndarray, transposed: bool, bias: np.ndarray | None):
        self.w, self.transposed = w, transposed
        self.n, self.k = w.shape if transposed else w.shape[::-1]
        self.bias = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)
        self.panels: tuple[np.ndarray, np.ndarray] | None = None  # (K, N) W packed for a split product

    def __call__(self, a: np.ndarray) -> np.ndarray | None:
        shape = a.shape
        if a.dtype != _FLOAT32 or not shape or shape[-1] != self.k or not a.flags.c_contiguous:
            return None
        rows = a.size // self.k
        if rows > COMPILED_PRODUCT_ROWS or not rows:
            return None
        parts = threads.split_threads() if rows * self.w.size >= ROW_SPLIT_MACS else 1
        if parts > 1 and not self.transposed:
            return self._split_panels(a, rows, parts)
        loops = _jit.row_products(parts)
        if loops is None:
            return None
        y = np.empty((rows, self.n), _FLOAT32)
        # a Gemm's (rows, K) as it is: its reshapes cost a fifth of a small product's call
        # (1 x 64 -> 32: 2.0 -> 1.5 us a call, the loop 0.5)
        if len(shape) == 2:
            loops[self.transposed](a, self.w, self.bias, y, parts)
            return y
        loops[self.transposed](a.reshape(rows, self.k), self.w, self.bias, y, parts)
        return y.reshape(shape[:-1] + (self.n,))

    def _split_panels(self, a: np.ndarray, rows: int, parts: int) -> np.ndarray | None:
        """The split product of (K, N) weights by ``_jit.float_product`` over W packed once in
        16-column panels, the panels shared among the threads. The row loops' split over K
        (partial sums added after) took longer on two threads than on one (us, hot, one thread
        / two / the panels on two: 3 x 512 x 256 9.1 / 14.6 / 7.7; 3 x 256 x 768 13.0 / 18.2 /
        9.9; 4 x 512 x 512 21.2 / 25.0 / 14.1)."""
        loop = _jit.float_product(parts)
        if loop is None:
            return None
        if self.panels is None:
            self.panels = pack_float_panels(self.w, self.bias if self.bias.size else None)
        bp, bias = self.panels
        y = np.empty(a.shape[:-1] + (self.n,), _FLOAT32)
        loop(a.reshape(rows, self.k), bp, bias, y.reshape(rows, self.n), parts)
        return y


def _row_product(w: np.ndarray | None, transposed: bool = False, bias: np.ndarray | None = None) -> _RowProduct | None:
    """A ``_RowProduct`` for constant float32 weights ``w`` held C-contiguous (as given:
    no copy is made) with fewer elements than ``COMPILED_PRODUCT_WEIGHTS``, else None."""
    if (not isinstance(w, np.ndarray) or w.dtype != np.float32 or w.ndim != 2 or not w.size
            or w.size >= COMPILED_PRODUCT_WEIGHTS or not w.flags.c_contiguous):
        return None
    return _RowProduct(w, transposed, bias)


#: MatMuls under this many multiply-adds (A's size times N) that the compiled few-row loops do
#: not take are numpy's call as they are: oneDNN's paths and the compiled product start above
#: it, and asking them cost more than such a product ((1, 1, 256) @ (1, 256, 96) of two
#: run-time operands: the kernel 6.4 us, np.matmul 2.9; (1, 16, 7) @ a constant (7, 7) 3.9 us a
#: node, onnxruntime's 0.5)
SMALL_PRODUCT_MACS = ONEDNN_MIN_GEMV_WEIGHTS


@kernel("MatMul")
def _matmul(node, request):
    from .quant import qdq_integer_matmul  # noqa: PLC0415  (quant imports this module)

    b_given, b_ready = constant_weight(node, request, 1)
    # constant float16 weights: multiplied in float32 (see ``matmul``), converted once
    b_float32 = as_float32(b_ready) if isinstance(b_ready, np.ndarray) and b_ready.dtype == np.float16 else None
    product = _constant_product(b_ready if b_float32 is None else b_float32)
    row_product = _row_product(b_ready)
    integer_product = qdq_integer_matmul(node, request)  # a QDQ MatMul: 8-bit codes
    batched_plans: dict = {}  # oneDNN's products of two run-time operands, by shapes and strides

    def matmul_kernel(a, b):
        small = a.dtype == b.dtype and a.dtype in JIT_FLOATS and b.ndim and a.size * b.shape[-1] < SMALL_PRODUCT_MACS
        if b is b_given:
            if b_float32 is not None and a.dtype == np.float16:
                a32 = as_float32(a)
                y = product(a32) if product is not None and a.ndim >= 1 else None
                return as_dtype(matmul(a32, b_float32) if y is None else y, a.dtype)
            if integer_product is not None:
                y = integer_product(a)
                if y is not None:
                    return y
            if row_product is not None:
                y = row_product(a)
                if y is not None:
                    return y
            if small:  # (no other path takes it; asking them cost more than the product)
                return np.matmul(a, b_ready)
            if product is not None and a.ndim >= 1:
                y = product(a)
                if y is not None:
                    return y
            y = matmul(a, b_ready)
        else:
            if small:  # (a decoder step's; the other paths' checks cost twice the product)
                return np.matmul(a, b)
            y = batched_product(a, b, batched_plans)
            if y is not None:
                return y
            y = matmul(a, b)
        # ml_dtypes (bfloat16, float8) matmul comes back as float32; ONNX keeps the input type
        return y if y.dtype == a.dtype else y.astype(a.dtype)

    return matmul_kernel


def build_gemm(node, request, activation_name: str = "", activation_params: list[float] | None = None):
    """The Gemm kernel (also FusedGemm's, with an activation: onnxruntime's name, parameters)."""
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))
    activation = make_activation(activation_name, activation_params or [])
    b_const, b_weights = constant_weight(node, request, 1)
    # B as (K, N): a view of the constant weights for transB. oneDNN reads the view as it packs
    # B; the numpy path makes it contiguous at its first run (``contiguous_b``): OpenBLAS is
    # about 2x faster on a contiguous (K, N) B than on the transposed view when A has few rows
    # (batch 1-8). Made at creation it was a third copy of the weights beside the model's and
    # oneDNN's (the translit GRU decoder's peak memory: 3.2x onnxruntime's).
    b_view = b_weights.T if trans_b and b_weights is not None else b_weights
    b_ready: list[np.ndarray] = []
    b_float32: list[np.ndarray] = []  # constant float16 weights in float32, made at first use

    def contiguous_b() -> np.ndarray:
        if not b_ready:
            b_ready.append(np.ascontiguousarray(b_view))
        return b_ready[0]

    # oneDNN: alpha folded into B, beta * C as the bias where C is a constant row of N
    c_const = constant_weight(node, request, 2)[0] if len(node.inputs) > 2 and node.inputs[2] else None
    product = row_product = None
    if b_view is not None and (c_const is None or (isinstance(c_const, np.ndarray) and c_const.dtype == np.float32
                                                   and c_const.shape in ((b_view.shape[-1],), (1, b_view.shape[-1])))):
        post_op = _onednn.post_op(activation_name, activation_params or [])
        bias = None if c_const is None else (c_const.reshape(-1) * np.float32(beta)).astype(np.float32)
        scaled = b_view if alpha == 1.0 or b_view.dtype != np.float32 else b_view * np.float32(alpha)
        if post_op is not None or not activation_name:  # else an activation only numpy applies
            product = _constant_product(scaled, bias=bias, post_op=post_op)
        if alpha == 1.0 and not trans_a:  # a few rows: the compiled loop, the activation after it
            row_product = _row_product(b_weights, trans_b, bias)

    def gemm(a, b, c=None):
        if a.dtype == np.float16 and b.dtype == np.float16:  # in float32, rounded once (see ``matmul``)
            if b is b_const:
                if not b_float32:  # the constant weights converted once
                    b_float32.append(as_float32(b))
                b32 = b_float32[0]
            else:
                b32 = as_float32(b)
            c32 = None if c is None else as_float32(c)
            return as_dtype(gemm_float32(as_float32(a), b32, c32), a.dtype)
        if row_product is not None and b is b_const and c is c_const:
            y = row_product(a)
            if y is not None:
                if activation is not None:
                    activation(y)
                return y
        if product is not None and b is b_const and c is c_const and not trans_a:
            y = product(a)
            if y is not None:
                return y
        if b is b_const and b_view is not None:  # not an overridden initializer
            b = contiguous_b()  # transposed once for transB, subnormals flushed
        elif trans_b:
            b = b.T
        y = matmul(a.T if trans_a else a, b)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        if c is not None:
            y += c if beta == 1.0 else c * c.dtype.type(beta)
        if activation is not None:
            activation(y)
        return y

    def gemm_float32(a, b, c):
        y = matmul(a.T if trans_a else a, b.T if trans_b else b)
        if alpha != 1.0:
            y *= np.float32(alpha)
        if c is not None:
            y += c if beta == 1.0 else c * np.float32(beta)
        if activation is not None:
            activation(y)
        return y

    return gemm


@kernel("Gemm")
def _gemm(node, request):
    return build_gemm(node, request)


def conv_pads(node, spatial: tuple[int, ...], kernel_shape, strides, dilations) -> list[int]:
    """Explicit pads [begin..., end...] from ``pads`` or ``auto_pad``."""
    nd = len(kernel_shape)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", b"NOTSET"):
        return list(node.attr("pads") or [0] * (2 * nd))
    if auto_pad in ("VALID", b"VALID"):
        return [0] * (2 * nd)
    begin, end = [], []
    for i in range(nd):
        out = -(-spatial[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel_shape[i] - 1) * dilations[i] + 1 - spatial[i])
        small, large = total // 2, total - total // 2
        if auto_pad in ("SAME_UPPER", b"SAME_UPPER"):
            begin.append(small)
            end.append(large)
        else:
            begin.append(large)
            end.append(small)
    return begin + end


def _windows(x, kernel_shape, strides, dilations, pads, fill):
    """(N, C, out..., k...) strided view of the padded input."""
    nd = len(kernel_shape)
    if any(pads):
        width = [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)]
        x = np.pad(x, width, constant_values=fill)
    effective = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations)]
    win = sliding_window_view(x, effective, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None))
    index += tuple(slice(None, None, s) for s in strides)
    index += tuple(slice(None, None, d) for d in dilations)
    return win[index]


# --------------------------------------------------------------------------------------------
# sliding-window geometry shared by Conv, FusedConv and the pools
# --------------------------------------------------------------------------------------------


class _Geometry:
    """Pads, output shape and one slice tuple per kernel offset for one input shape."""

    __slots__ = ("pads", "padded", "out", "_offsets", "inner", "axis_slices", "kernel", "strides",
                 "dilations", "wide", "spatial", "_as_2d", "pad_pool", "pointwise", "gather", "gather_t", "depthwise")

    def __init__(self, spatial, kernel_shape, strides, dilations, pads):
        nd = len(kernel_shape)
        self.kernel, self.strides, self.dilations = tuple(kernel_shape), tuple(strides), tuple(dilations)
        self.pads = tuple(pads)
        self.spatial = tuple(spatial)
        self.wide = None  # the conv's _WidePlan, made on first use
        self.gather = None  # a small convolution's column index (_gather_index), made on first use
        self.gather_t = None  # ... transposed, row-major (the narrow product's), made on first use
        self.depthwise = None  # the compiled depthwise loops' _DepthwiseLayout, made on first use
        self._as_2d = None
        self.pad_pool: dict = {}  # (x shape, dtype) -> free zero-bordered padded buffers
        # a 1x1 kernel at stride 1 without padding: the output is one GEMM on the input
        self.pointwise = all(k == 1 for k in kernel_shape) and all(s == 1 for s in strides) and not any(pads)
        self.padded = tuple(spatial[i] + pads[i] + pads[i + nd] for i in range(nd))
        self.out = tuple(
            (self.padded[i] - ((kernel_shape[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(nd)
        )
        if any(o <= 0 for o in self.out):
            raise ValueError(
                f"kernel {list(kernel_shape)} (dilations {list(dilations)}) does not fit the padded "
                f"input {list(self.padded)}"
            )
        self._offsets: list[tuple] | None = None  # made on first use (``offsets``)
        # per spatial axis, per kernel offset along it: the strided slice it reads (separable pools)
        self.axis_slices = [
            [slice(o * dilations[i], o * dilations[i] + (self.out[i] - 1) * strides[i] + 1, strides[i])
             for o in range(kernel_shape[i])]
            for i in range(nd)
        ]
        # where the unpadded input sits inside the padded buffer
        self.inner = (slice(None), slice(None)) + tuple(
            slice(pads[i], pads[i] + spatial[i]) for i in range(nd)
        )

    @property
    def offsets(self) -> list[tuple]:
        """Per kernel offset, the strided slice of the padded input that it reads; made at first
        use: a pool's geometry (oneDNN groups) needs only its shapes, and a global-sized window
        (40 x 60) is thousands of offsets (a PP-OCRv6 detector's 14 pools: 0.28 s of its first
        run)."""
        if self._offsets is None:
            self._offsets = [
                (slice(None), slice(None))
                + tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                        for o, d, s, n in zip(offset, self.dilations, self.strides, self.out))
                for offset in itertools.product(*(range(k) for k in self.kernel))
            ]
        return self._offsets

    def as_2d(self) -> _Geometry:
        """This 1-D geometry as a 2-D one with a single row (cached)."""
        if self._as_2d is None:
            self._as_2d = _Geometry((1,) + self.spatial, (1,) + self.kernel, (1,) + self.strides,
                                    (1,) + self.dilations, (0, self.pads[0], 0, self.pads[1]))
        return self._as_2d

    def column_as_row(self) -> _Geometry:
        """This 2-D geometry of a one-column map under a one-column kernel as the 2-D geometry
        of the same map lying as one row (cached)."""
        if self._as_2d is None:
            self._as_2d = _Geometry((1, self.spatial[0]), (1, self.kernel[0]), (1, self.strides[0]),
                                    (1, self.dilations[0]), (0, self.pads[0], 0, self.pads[2]))
        return self._as_2d


def _im2col(xp: np.ndarray, g: _Geometry) -> np.ndarray:
    """Columns (N, C, K, out pixels) of the padded input: one copy of a strided window view
    (N, C, k..., out...) made with np.ndarray on the contiguous input (sliding_window_view
    costs about 15 us of Python per call, as much as the copy on small convolutions)."""
    xp = np.ascontiguousarray(xp)
    axis_strides = xp.strides[2:]
    view = np.ndarray(xp.shape[:2] + g.kernel + g.out, xp.dtype, xp, 0,
                      xp.strides[:2] + tuple(d * s for d, s in zip(g.dilations, axis_strides))
                      + tuple(st * s for st, s in zip(g.strides, axis_strides)))
    cols = np.empty(xp.shape[:2] + g.kernel + g.out, dtype=xp.dtype)
    np.copyto(cols, view)
    return cols.reshape(xp.shape[0], xp.shape[1], len(g.offsets), -1)


def _gather_index(g: _Geometry, c: int) -> np.ndarray:
    """Flat indices into ``[*x.ravel(), 0]`` (one image of ``c`` channels) that give its
    (C*K, out pixels) column matrix; padding positions read the appended 0. Made by running
    ``_im2col`` once on the input's own indices, so it follows the same geometry."""
    size = c * math.prod(g.spatial)
    idx = np.arange(size, dtype=np.intp).reshape((1, c) + g.spatial)
    return _im2col(_padded(idx, g, size), g).reshape(c * len(g.offsets), -1)


def _padded(x: np.ndarray, g: _Geometry, fill) -> np.ndarray:
    if not any(g.pads):
        return x
    xp = np.empty(x.shape[:2] + g.padded, dtype=x.dtype)
    xp.fill(fill)
    xp[g.inner] = x
    return xp


class _GeometryCache:
    """Geometry per input shape; the node's attributes are read once."""

    def __init__(self, node, kernel_shape=None, pads_of=None):
        self.node = node
        self.kernel_shape = kernel_shape
        self.pads_of = pads_of
        self.cache: dict[tuple, _Geometry] = {}
        self.lock = threading.Lock()

    def get(self, x_shape: tuple, kernel_shape) -> _Geometry:
        key = (x_shape, tuple(kernel_shape))
        g = self.cache.get(key)
        if g is None:
            node = self.node
            nd = len(kernel_shape)
            strides = list(node.attr("strides") or [1] * nd)
            dilations = list(node.attr("dilations") or [1] * nd)
            if self.pads_of is not None:
                pads = self.pads_of(x_shape)
            else:
                pads = conv_pads(node, x_shape[2:], kernel_shape, strides, dilations)
            g = _Geometry(x_shape[2:], kernel_shape, strides, dilations, pads)
            with self.lock:
                if len(self.cache) >= SHAPE_CACHE_MAX:  # ever new shapes: bounded, made again
                    self.cache.clear()
                self.cache[key] = g
        return g


# --------------------------------------------------------------------------------------------
# convolution
# --------------------------------------------------------------------------------------------

#: outputs of at most this many elements take scipy's expit for a Sigmoid activation
SMALL_SIGMOID = 512  # measured crossover: expit 1.2 us vs 1.8 at 256 elements, 4.1 vs 2.7 at 1024

#: in-place activations a fused convolution (or Gemm/MatMul) applies to its output
Activation = Callable[[np.ndarray], None]


def make_activation(name: str, params: list[float]) -> Activation | None:
    """The in-place activation ``name`` (onnxruntime's FusedConv spelling) or None for ""."""
    if not name:
        return None
    if name == "Relu":
        return lambda y: np.maximum(y, zero(y.dtype), out=y)
    if name == "Tanh":
        return lambda y: elementwise_tanh(y, out=y)
    if name == "Sigmoid":
        def sigmoid(y):  # 1 / (1 + exp(-y)), in place
            if y.dtype != np.float32 and y.size <= SMALL_SIGMOID and y.dtype.kind == "f" and y.dtype.itemsize >= 4:
                # one ufunc call: four numpy calls cost ~3 us on a few elements (scipy's expit is
                # slower per element, so only small outputs take it); float32 is one compiled pass
                special.expit(y, out=y)
                return
            elementwise_sigmoid(y, out=y)
        return sigmoid
    if name == "LeakyRelu":
        alpha = params[0] if params else 0.01

        def leaky(y):
            np.multiply(y, np.where(y < 0, y.dtype.type(alpha), y.dtype.type(1)), out=y)
        return leaky
    if name == "Clip":
        low, high = (params + [-np.inf, np.inf][len(params):])[:2] if params else (-np.inf, np.inf)
        return lambda y: np.clip(y, low, high, out=y)
    if name == "HardSigmoid":
        alpha, beta = (params[0], params[1]) if len(params) >= 2 else (0.2, 0.5)

        def hard_sigmoid(y):
            hard_sigmoid_into(y, y, alpha, beta)
        return hard_sigmoid
    raise ValueError(f"activation {name!r} is not supported; valid: Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid")


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, g: _Geometry,
         kernel_shape, activation: Activation | None = None,
         prepared: dict | None = None) -> np.ndarray:
    """N-D convolution of ``x`` (N, C, ...) by ``w`` (M, C/group, k...) with geometry ``g``.

    ``prepared`` is a per-node dict in which reordered weight matrices are kept between runs."""
    n, c = x.shape[:2]
    m = w.shape[0]
    out = g.out
    k = len(g.offsets)
    if g.pointwise and group == 1 and x.dtype == w.dtype:
        # 1x1, stride 1, no padding: one GEMM on the input as it is (the common case in
        # mobile nets, often on 1x1 images in squeeze-excite blocks: per-call overhead counts)
        x3 = x.reshape(n, c, -1)
        w2 = w.reshape(m, c)
        p = x3.shape[2]
        gemm = None
        if b is not None and m * p >= BIAS_FIRST_MIN and x.flags.c_contiguous and w2.flags.c_contiguous:
            gemm = _blas.gemm(x.dtype)
        if gemm is not None:
            # the bias written first and the GEMM accumulating onto it (beta = 1): one write
            # pass instead of a second read-modify-write pass (5-25% on ocr-rec's layers)
            y3 = np.empty((n, m, p), dtype=x.dtype)
            y3[...] = b.reshape(m, 1)
            for i in range(n):
                gemm(m, p, c, data_address(w2), c, data_address(x3[i]), p, 1.0, data_address(y3[i]), p)
        else:
            y3 = np.matmul(w2, x3[0])[None] if n == 1 else np.matmul(w2, x3)
            if b is not None:
                y3 += b.reshape(m, 1)
        y = y3.reshape((n, m) + out)
        if activation is not None:
            activation(y)
        return y
    if n == 1 and group == 1 and x.dtype == w.dtype and c * k * math.prod(out) <= SMALL_COLS:
        # a small convolution: its columns are one gather by an index made once per geometry
        # (the wide path's workspace and copies cost ~10 us of Python, more than such a GEMM)
        idx = g.gather
        if idx is None:
            idx = g.gather = _gather_index(g, c)
        flat = x.reshape(-1)
        if any(g.pads):
            flat = np.concatenate((flat, np.zeros(1, x.dtype)))
        pixels = idx.shape[1]
        products = None
        if pixels <= NARROW_MAX_PIXELS and x.dtype == np.float32 and (b is None or b.dtype == np.float32):
            products = _jit.row_products()
        if products is not None:  # a few output pixels: per filter one dot product a pixel, + bias
            if g.gather_t is None:  # row-major (pixels, C*K): what the loop reads
                g.gather_t = np.ascontiguousarray(idx.T)
            yt = np.empty((pixels, m), np.float32)
            products[1](flat[g.gather_t], np.ascontiguousarray(w.reshape(m, c * k)),
                        _NO_BIAS if b is None else b, yt, 1)
            y2 = yt.T.copy() if pixels > 1 else yt.reshape(m, 1)
        else:
            y2 = np.matmul(w.reshape(m, c * k), flat[idx])
            if b is not None:
                y2 += b.reshape(m, 1)
        y = y2.reshape((1, m) + out)
        if activation is not None:
            activation(y)
        return y
    dtype = np.result_type(x, w)
    y = np.empty((n, m) + out, dtype=dtype)
    if len(out) <= 2 and not (k == 1 and not any(g.pads)) and x.dtype == dtype:
        g2 = g.as_2d() if len(out) == 1 else g  # 1-D as 2-D with one row: same code (views)
        # (the compiled loops' padded rows are a column stride long: not for strides wider
        # than the padded image, whose one output column needs no such row)
        if group == c == m and dtype in JIT_FLOATS and _jit.enabled() and g2.strides[1] <= g2.padded[1]:
            # depthwise: a compiled loop (numba, optional) instead of columns + batched GEMV
            if len(out) == 1:
                _conv_depthwise_jit(x[:, :, None, :], w[:, :, None, :], b, g2, y[:, :, None, :])
            else:
                _conv_depthwise_jit(x, w, b, g2, y)
            if activation is not None:
                activation(y)
            return y
        if g2.wide is None:
            g2.wide = _WidePlan(g2)
        if len(g2.wide.phases) <= MAX_PHASES:
            owner = w  # the weight array the prepared matrix is kept for
            if len(out) == 1:
                x, w, y4 = x[:, :, None, :], w[:, :, None, :], y[:, :, None, :]
            else:
                y4 = y
            _conv_wide(x, w, b, group, g2, y4, prepared if prepared is not None else {}, owner)
            if activation is not None:
                activation(y)
            return y
    p = math.prod(out)
    y3 = y.reshape(n, m, p)
    if group == 1:
        if k == 1 and not any(g.pads):
            cols = x[g.offsets[0]]
            cols = cols.reshape(n, c, p) if cols.flags.c_contiguous else np.ascontiguousarray(cols).reshape(n, c, p)
        else:
            cols = _im2col(_padded(x, g, 0), g).reshape(n, c * k, p)
        np.matmul(w.reshape(m, c * k), cols, out=y3)
    elif group == c and m == c:  # depthwise: a (1 x K) @ (K x P) per channel
        cols = _im2col(_padded(x, g, 0), g)
        np.matmul(w.reshape(m, 1, k), cols, out=y3.reshape(n, m, 1, p))
    else:
        cg, mg = c // group, m // group
        cols = _im2col(_padded(x, g, 0), g).reshape(n, group, cg * k, p)
        np.matmul(w.reshape(group, mg, cg * k), cols, out=y3.reshape(n, group, mg, p))
    if b is not None:
        y3 += b.reshape(1, m, 1)
    if activation is not None:
        activation(y)
    return y


#: 1x1 convolutions with a bias and at least this many outputs per image write the bias first
#: and accumulate the GEMM onto it; on small outputs (squeeze-excite layers: 1x1 images) the
#: extra fill and the ctypes call cost more than the add they save (measured: 1x256 by 256x256
#: 4 us with np.matmul and an add, 10 us so)
BIAS_FIRST_MIN = 4096

#: convolutions (one image, one group) whose column matrix has at most this many elements take
#: the gather path; its index (8 bytes an element) is kept per input shape
SMALL_COLS = 8192
#: ... and those of at most this many output pixels take the compiled row products
#: (``_jit.row_products``, the pixels as rows: 2-3x faster than OpenBLAS on 2 to 4 columns,
#: slower at 8; on one column, a GEMV, 64 x 3 -> 128 channels 12.9 -> 8 us a run)
NARROW_MAX_PIXELS = 4
_NO_BIAS = np.empty(0, np.float32)

#: target size of one column buffer (one band of output rows, one chunk of groups): small enough
#: to stay in the core's L2 cache between its copy and its GEMM, large enough that the GEMM is
#: not a tiny one (this machine: 2 MB of L2 per core)
BAND_BYTES = 2 << 20
#: the wide-output path splits the input into strides[0] * strides[1] phases; past this many
#: (e.g. a stride-128 STFT convolution) the plain im2col copy is cheaper
MAX_PHASES = 4


_scratch = threading.local()


def _thread_scratch(nbytes: int) -> np.ndarray:
    """This thread's scratch bytes (column and GEMM buffers of the wide-output convolutions),
    grown to at least ``nbytes``; 64-byte aligned."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.nbytes < nbytes:
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        buffer = raw[start : start + nbytes]
        _scratch.buffer = buffer
    return buffer


class _WidePlan:
    """2-D convolution "on the wide output". The padded image is split into stride phases
    (phase (p, q) holds padded rows p, p+sh, ... and columns q, q+sw, ...; for stride 1 the
    padded image itself), each stored flat per channel, row-major, ``wq`` values a row. Every
    kernel tap then reads a phase at a fixed flat offset with unit step, so the column rows of
    all taps of one phase are ONE strided view (channel, tap row, tap column, pixel) copied in
    one call, and a band of output rows is a contiguous run of ``(rows - 1) * wq + ow`` flat
    positions. The GEMM computes that run (the ``wq - ow`` positions between rows are garbage)
    and the crop into the output adds the bias in the same pass.

    Everything but the input and output is set up once per input shape, in a workspace
    (phase buffer with zero borders, column and GEMM buffers, and every view into them) that
    runs reuse: a run is the fill of the phase interiors, then per band a copy per phase, one
    GEMM and one crop."""

    __slots__ = ("g", "hq", "wq", "phases", "perm", "fill", "taps", "pool")

    def __init__(self, g: _Geometry):
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilations
        hp, wp = g.padded
        self.g = g
        self.hq, self.wq = -(-hp // sh), -(-wp // sw)
        # per used phase: (index in the phase buffer, tap slice in the column rows,
        # (first tap row, tap rows, step), (first tap column, tap columns, step))
        self.phases = []
        perm: list[int] = []
        # only the phases some tap falls on (at most kh x kw of them, whatever the stride: a
        # loop over range(stride) took 41 s at a stride of 10^8)
        for p in sorted({(a * dh) % sh for a in range(kh)}):
            rows = [a for a in range(kh) if (a * dh) % sh == p]
            for q in sorted({(b * dw) % sw for b in range(kw)}):
                cols = [b for b in range(kw) if (b * dw) % sw == q]
                ra = [(a * dh - p) // sh for a in rows]  # tap rows inside the phase
                cb = [(b * dw - q) // sw for b in cols]
                row_step = ra[1] - ra[0] if len(ra) > 1 else 1
                col_step = cb[1] - cb[0] if len(cb) > 1 else 1
                t0 = len(perm)
                perm.extend(a * kw + b for a in rows for b in cols)
                self.phases.append((len(self.phases), p, q, slice(t0, len(perm)),
                                    (ra[0], len(ra), row_step), (cb[0], len(cb), col_step)))
        self.taps = len(perm)
        self.perm = None if perm == list(range(kh * kw)) else np.array(perm)
        # per used phase: the region of the phase grid the input fills, and the input slice
        top, left = g.pads[0], g.pads[1]
        self.fill = []
        h, w = g.spatial
        for _, p, q, *_ in self.phases:
            r_lo = max(0, -(-(top - p) // sh))
            c_lo = max(0, -(-(left - q) // sw))
            r_in, c_in = r_lo * sh + p - top, c_lo * sw + q - left
            nr = len(range(r_in, h, sh))
            nc = len(range(c_in, w, sw))
            self.fill.append(((slice(r_lo, r_lo + nr), slice(c_lo, c_lo + nc)),
                              (slice(r_in, None, sh), slice(c_in, None, sw))))
        self.pool: dict = {}  # (x shape, dtype, M, group) -> free workspaces

    def workspace(self, x_shape: tuple, dtype: np.dtype, m: int, group: int, taps: bool = False) -> tuple:
        """A free workspace for this input and thread, made on first need (list.pop is
        atomic: concurrent runs each get their own). Its column and GEMM buffers are views of
        the thread's scratch, shared by every convolution the thread runs, so they stay in
        cache from one convolution to the next; a workspace made on a scratch that has since
        grown is made again. ``taps``: the workspace of ``_conv_taps`` instead of the bands'."""
        key = (x_shape, dtype, m, group, taps, threading.get_ident())
        try:
            ws = self.pool[key].pop()
        except (KeyError, IndexError):
            ws = None
        if ws is None or ws[3] is not getattr(_scratch, "buffer", None):
            make = self._make_taps_workspace if taps else self._make_workspace
            ws = make(key, x_shape, dtype, m, group)
        return ws

    def columns_bytes(self, c: int, itemsize: int) -> int:
        """Size of the whole column matrix of one image (what the bands copy in pieces)."""
        oh, ow = self.g.out
        return c * self.taps * ((oh - 1) * self.wq + ow) * itemsize

    def _phase_buffer(self, n: int, c: int, dtype: np.dtype) -> tuple[np.ndarray, list]:
        """The zero-bordered phase buffer (phases, N, C, hq * wq) and, per phase, the (view of
        its interior, input slice) pairs that a run fills."""
        buf = np.zeros((len(self.phases), n, c, self.hq * self.wq), dtype=dtype)
        grid = buf.reshape(len(self.phases), n, c, self.hq, self.wq)
        fills = [(grid[(j, slice(None), slice(None)) + dst], (slice(None), slice(None)) + src)
                 for j, (dst, src) in enumerate(self.fill)]
        return buf, fills

    def _make_taps_workspace(self, key: tuple, x_shape: tuple, dtype: np.dtype, m: int, group: int) -> tuple:
        n, c = x_shape[:2]
        oh, ow = self.g.out
        wq = self.wq
        itemsize = np.dtype(dtype).itemsize
        wide = (oh - 1) * wq + ow
        buf, fills = self._phase_buffer(n, c, dtype)
        scratch = _thread_scratch(m * wide * itemsize)
        res = np.ndarray((m, wide), dtype, scratch, 0)
        crop = np.ndarray((m, oh, ow), dtype, scratch, 0, (wide * itemsize, wq * itemsize, itemsize))
        # per tap, in the weight columns' order: the address its run starts at, per image
        offsets = [(j, ((ra + r * da) * wq + cb + s * db) * itemsize)
                   for j, _, _, _, (ra, na, da), (cb, nb, db) in self.phases
                   for r in range(na) for s in range(nb)]
        starts = [[buf[j, i].ctypes.data + offset for j, offset in offsets] for i in range(n)]
        gemm = (m, wide, c, self.hq * wq, res.ctypes.data, wide)  # M, N, K, ldb, C, ldc
        return (key, fills, (starts, gemm, crop, buf), scratch)

    def give(self, ws: tuple) -> None:
        if ws[0] not in self.pool and len(self.pool) >= SHAPE_CACHE_MAX:
            self.pool.clear()  # batch sizes or threads ever new: bounded, workspaces are made again
        self.pool.setdefault(ws[0], []).append(ws)

    def _make_workspace(self, key: tuple, x_shape: tuple, dtype: np.dtype, m: int, group: int) -> tuple:
        n, c = x_shape[:2]
        oh, ow = self.g.out
        wq, k = self.wq, self.taps
        itemsize = np.dtype(dtype).itemsize
        cg, mg = c // group, m // group
        buf, fills = self._phase_buffer(n, c, dtype)
        # a band: all rows of as many groups as fit BAND_BYTES, or (one group too big) fewer rows
        full = ((oh - 1) * wq + ow) * cg * k * itemsize
        groups_per_band = max(1, min(group, BAND_BYTES // max(1, full)))
        rows_per_band = oh if groups_per_band > 1 else max(1, min(oh, BAND_BYTES // max(1, cg * k * wq * itemsize)))
        wide_max = (rows_per_band - 1) * wq + ow
        n_cols = min(group, groups_per_band) * cg * k * wide_max
        n_res = min(group, groups_per_band) * mg * wide_max
        scratch = _thread_scratch((n_cols + n_res) * itemsize + 64)
        # the column buffer at the start, the GEMM output after it (64-byte aligned)
        cols_buf = np.ndarray(n_cols, dtype, scratch, 0)
        res_off = -(-(n_cols * itemsize) // 64) * 64
        res_buf = np.ndarray(n_res, dtype, scratch, res_off)
        per_phase, per_image, per_channel = buf.strides[0], buf.strides[1], buf.strides[2]
        bands = []
        for i in range(n):
            for g0 in range(0, group, groups_per_band):
                g1 = min(group, g0 + groups_per_band)
                c0, c1, m0, m1 = g0 * cg, g1 * cg, g0 * mg, g1 * mg
                cc = c1 - c0
                for r0 in range(0, oh, rows_per_band):
                    r1 = min(oh, r0 + rows_per_band)
                    wide = (r1 - r0 - 1) * wq + ow
                    cols = cols_buf[: cc * k * wide].reshape(cc, k, wide)
                    copies = []
                    for j, _, _, taps, (ra, na, da), (cb, nb, db) in self.phases:
                        start = j * per_phase + i * per_image + c0 * per_channel + ((r0 + ra) * wq + cb) * itemsize
                        src = np.ndarray((cc, na, nb, wide), buf.dtype, buf, start,
                                         (per_channel, da * wq * itemsize, db * itemsize, itemsize))
                        copies.append((cols[:, taps].reshape(cc, na, nb, wide), src))
                    res = res_buf[: (m1 - m0) * wide].reshape(g1 - g0, mg, wide)
                    crop = np.ndarray((m1 - m0, r1 - r0, ow), dtype, scratch, res_off,
                                      (wide * itemsize, wq * itemsize, itemsize))
                    bands.append((copies, slice(g0, g1), cols.reshape(g1 - g0, cg * k, wide), res, crop,
                                  (i, slice(m0, m1), slice(r0, r1)), slice(m0, m1)))
        return (key, fills, bands, scratch)


#: the compiled stride-1 depthwise loop accumulates a whole channel's flat output when it fits
#: this (L1); larger planes are done a row at a time (measured: 160x160 planes slower flat)
DEPTHWISE_FLAT_BYTES = 32 << 10


def _conv_depthwise_jit(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, g: _Geometry,
                        y: np.ndarray) -> None:
    """Depthwise 2-D convolution by ``_jit``'s compiled loops, reading a zero-bordered padded
    copy of ``x`` kept per input shape (only its interior is rewritten). With a column stride
    ``sw`` each padded row is stored as its ``sw`` phases end to end (phase q: padded columns
    q, q + sw, ...), written straight from ``x``, so that each tap reads a contiguous run."""
    sw = g.strides[1]
    key = (x.shape, x.dtype)
    layout = _depthwise_layout(g)
    direct = sw == 1 and not any(g.pads)  # the input itself is the buffer
    try:  # list.pop is atomic: concurrent runs each get their own buffer
        xp = np.ascontiguousarray(x) if direct else g.pad_pool[key].pop()
    except (KeyError, IndexError):
        xp = np.zeros(x.shape[:2] + (g.padded[0], layout.row), dtype=x.dtype)
    try:
        if not direct:
            for dst, src in layout.fills:
                xp[dst] = x[src]
        c = x.shape[1]
        wk = np.ascontiguousarray(w.reshape(c, -1), dtype=y.dtype)
        bias = zeros_vector(c, y.dtype) if b is None else np.ascontiguousarray(b, dtype=y.dtype)
        if sw == 1 and g.strides[0] == 1 and ((g.out[0] - 1) * g.padded[1] + g.out[1]) * y.itemsize <= DEPTHWISE_FLAT_BYTES:
            _jit.depthwise_flat()(xp, wk, bias, y, layout.starts, 0, c)
        else:
            _jit.depthwise_rows()(xp, wk, bias, y, g.strides[0], layout.starts, 0, c)
    finally:
        if not direct:
            if key not in g.pad_pool and len(g.pad_pool) >= SHAPE_CACHE_MAX:
                g.pad_pool.clear()  # batch sizes ever new: bounded
            g.pad_pool.setdefault(key, []).append(xp)


class _DepthwiseLayout:
    """Where the input goes in the compiled depthwise loops' padded buffer (rows of ``row``
    values: the padded row, or its column-stride phases end to end), and where each kernel
    tap's run starts in a channel's flat plane, from the first output row's top row."""

    __slots__ = ("row", "fills", "starts")

    def __init__(self, g: _Geometry):
        (top, left), (h, w) = (g.pads[0], g.pads[1]), g.spatial
        sw, dw, kw = g.strides[1], g.dilations[1], g.kernel[1]
        phase = -(-g.padded[1] // sw)  # values of one phase (the last may be shorter)
        self.row = phase * sw if sw > 1 else g.padded[1]
        rows = (slice(None), slice(None), slice(top, top + h))
        self.fills = []
        for q in range(sw):
            first = max(0, -(-(left - q) // sw))  # first phase column that holds an input value
            x_first = first * sw + q - left
            count = len(range(x_first, w, sw))
            if count:
                base = q * phase
                self.fills.append((rows + (slice(base + first, base + first + count),),
                                   (slice(None), slice(None), slice(None), slice(x_first, None, sw))))
        dh = g.dilations[0]
        self.starts = np.array([a * dh * self.row + ((j * dw) % sw) * phase + (j * dw) // sw
                                for a in range(g.kernel[0]) for j in range(kw)], dtype=np.int64)


def _depthwise_layout(g: _Geometry) -> _DepthwiseLayout:
    if g.depthwise is None:
        g.depthwise = _DepthwiseLayout(g)
    return g.depthwise


#: a convolution of one group whose whole column matrix (one image) is larger than this, with
#: at least TAPS_MIN_CHANNELS input channels, sums one GEMM per tap (``_conv_taps``) instead of
#: copying columns: measured here (us, one thread / two) 96->24 channels at 80x80 4189 / 4800 ->
#: 3103 / 2789, 64->64 at 56x56 2499 / 2269 -> 2023 / 1670, 16->16 at 160x160 2545 / 2713 ->
#: 2177 / 1774; below it the column path won (64->64 at 16x16: 224 vs 276 at two threads)
TAPS_MIN_COLUMNS_BYTES = BAND_BYTES
TAPS_MIN_CHANNELS = 16


def _conv_wide(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, g: _Geometry,
               y: np.ndarray, prepared: dict, owner: np.ndarray) -> None:
    """2-D convolution into ``y`` (N, M, OH, OW) on ``_WidePlan``'s wide output: large ones as
    a sum of per-tap GEMMs (``_conv_taps``), the rest one band of output rows (and chunk of
    groups) at a time through a column buffer still in cache when its GEMM reads it."""
    plan = g.wide
    m, c = w.shape[0], x.shape[1]
    cg, mg = c // group, m // group
    gemm = None
    if group == 1 and c >= TAPS_MIN_CHANNELS and plan.columns_bytes(c, y.itemsize) > TAPS_MIN_COLUMNS_BYTES:
        gemm = _blas.gemm(y.dtype)
    # the weights in the column rows' tap order, kept per node for constant weights (a weight
    # fed at run time is a new array: recomputed): (groups, M/group, C/group * taps) for the
    # column GEMM, (taps, M, C) for the per-tap GEMMs
    key = (id(owner), id(plan), gemm is not None)  # plans live in the geometry cache: their ids are not reused
    entry = prepared.get(key)
    if entry is None or entry[0] is not owner:
        wt = w.reshape(m, cg, -1)
        if plan.perm is not None:
            wt = wt[:, :, plan.perm]
        if gemm is not None:
            wt = np.ascontiguousarray(wt.transpose(2, 0, 1), dtype=y.dtype)
        else:
            wt = np.ascontiguousarray(wt.reshape(group, mg, cg * plan.taps), dtype=y.dtype)
        entry = (owner, wt)
        if len(prepared) > 8:
            prepared.clear()
        prepared[key] = entry
    wmat = entry[1]
    ws = plan.workspace(x.shape, x.dtype, m, group, taps=gemm is not None)
    try:
        _, fills, work, _ = ws
        for dst, src in fills:  # the phase interiors; borders stay zero from creation
            dst[...] = x[src]
        bias = None if b is None else b.reshape(m, 1, 1)
        if gemm is not None:
            _conv_taps(work, wmat, bias, y, gemm)
            return
        for copies, gs, cols, res, crop, ys, ms in work:
            for dst, src in copies:
                np.copyto(dst, src)
            np.matmul(wmat[gs], cols, out=res)
            if bias is None:
                y[ys] = crop
            else:
                np.add(crop, bias[ms], out=y[ys])
    finally:
        plan.give(ws)


def _conv_taps(work: tuple, wtaps: np.ndarray, bias: np.ndarray | None, y: np.ndarray, gemm) -> None:
    """Per image, the wide output as the sum over kernel taps t of W_t (M x C) @ the phase
    planes read from tap t's offset (C x wide positions, rows a plane apart): one GEMM per tap
    accumulating into the same output (``_blas``), no column matrix. Each GEMM streams the
    input once instead of the column path copying it K times first, and leaves BLAS's threads
    the whole of the work (the copies ran on one thread between GEMMs)."""
    starts, (m, wide, c, ldb, res, ldc), crop, _ = work
    a0, step = wtaps.ctypes.data, m * c * wtaps.itemsize
    for i, image in enumerate(starts):
        for t, start in enumerate(image):
            gemm(m, wide, c, a0 + t * step, c, start, ldb, 1.0 if t else 0.0, res, ldc)
        if bias is None:
            y[i] = crop
        else:
            np.add(crop, bias, out=y[i])


#: convolutions of fewer multiply-adds than this keep the numpy path: oneDNN's primitive calls
#: cost more than they save (measured, us numpy / oneDNN at two threads: 16->16 3x3 on 8x8,
#: 0.15M MACs, 18 / 19; 8->8 3x3 on 32x32, 0.6M, 38 / 30; 32->32 3x3 on 16x16, 2.4M, 127 / 48)
ONEDNN_MIN_MACS = 1 << 18
#: 1x1 convolutions at stride 1 run oneDNN's GEMM on the NCHW data as it is (no reorders: they
#: cost more than a 1x1 kernel saves); on sums of fewer than 64 channels or under 1M MACs
#: numpy's GEMM is as fast or faster (16->88 on 12x48: 65 / 76 us; 32->128 on 40x40: 203 /
#: 232; 128->32 on 40x40: 232 / 117; 64->64 on 16x16: 52 / 45)
ONEDNN_POINTWISE_MIN_CHANNELS = 64
ONEDNN_POINTWISE_MIN_MACS = 1 << 20


def _as_2d(x_shape: tuple, g: _Geometry) -> tuple[_Geometry, tuple]:
    """A 1-D geometry and NCW input shape as 2-D ones with one row (oneDNN's primitives here
    are 2-D); 2-D ones as they are, but for a column: an H x 1 map under a k x 1 kernel is the
    same memory as a 1 x H map under a 1 x k kernel (also the weights and the output), and
    oneDNN is 4x faster on the row (magika's 5x1 convolution on 256 x 512 x 1: 6.7 ms as a
    column, 1.7 as a row; onnxruntime 1.5)."""
    if len(x_shape) == 3:
        return g.as_2d(), (x_shape[0], x_shape[1], 1, x_shape[2])
    if len(x_shape) == 5:  # 3-D: as it is
        return g, x_shape
    if x_shape[3] == 1 and x_shape[2] > 1 and g.kernel[1] == 1 and g.pads[1] == g.pads[3] == 0:
        return g.column_as_row(), (x_shape[0], x_shape[1], 1, x_shape[2])
    return g, x_shape


def _takes_onednn(x_shape: tuple[int, ...], w: np.ndarray, group: int, g: _Geometry, threads: int) -> bool:
    """Whether a convolution (float32, constant weights) of an input of ``x_shape`` goes to
    oneDNN. Depthwise ones do
    with more than one thread, or without numba: oneDNN's loop is parallel where numba's is
    not, but slower on one core (240-channel 5x5 on 8x12x80: 5.2 ms numba, 7.8 oneDNN at one
    thread; at two, 6.8 and 3.4)."""
    if len(x_shape) not in (3, 4, 5):
        return False
    macs = w.size * math.prod(g.out) * x_shape[0]
    if g.pointwise and group == 1:
        return x_shape[1] >= ONEDNN_POINTWISE_MIN_CHANNELS and macs >= ONEDNN_POINTWISE_MIN_MACS
    depthwise = group > 1 and group == x_shape[1] == w.shape[0]
    return macs >= ONEDNN_MIN_MACS and (threads > 1 or not depthwise or not _jit.enabled())


#: convolutions of at most this many multiply-adds take the compiled small-input loop
#: (``_jit.small_conv``), depthwise ones up to SMALL_DEPTHWISE_MACS: below these the other
#: paths' Python costs more than the sums. Measured (us a call, the loop / the paths before):
#: depthwise 258 channels x 7 samples, k 5 (9K MACs) 3.0 / 16; 16 x 4 1.3 / 6.9; 64 x 8x8 3x3
#: (37K) 8.3 / 10.5; 16 x 16x16 3x3 (37K) 11.1 / 11.1; 64 -> 64 on 1 pixel (4K) 1.8 / 5.9;
#: 16 -> 16 on 7 (1K) 1.3 / 5.8
SMALL_CONV_MACS = 12 << 10
SMALL_DEPTHWISE_MACS = 40 << 10
#: ... and, since the loop sums four input channels a pass into a vector of the output
#: channels, also those of at most SMALL_CONV_PIXELS output pixels and SMALL_CONV_PIXEL_MACS
#: multiply-adds an image: one-op sessions, us a run, the loop / the other paths: 129 -> 128,
#: k 3 on 3 samples (149K MACs) 8.1 / 11.9, 64 -> 128 on 1 (25K) 4.5 / 7.4, 40 -> 40 k 5 on 10
#: (80K) 8.4 / 10.5, 64 -> 64 k 3 on 12 (147K) 10.5 / 12.1, 3x3 on 2x2 (147K) 8.3 / 13.0,
#: batch 2 (98K) 9.1 / 15.3; but 258 -> 16 k 5 on 7 (144K) 17.5 / 16.7, 64 -> 64 on 16 (197K)
#: 14.9 / 12.2, 128 -> 128 on 6 (295K) 15.0 / 10.4 (oneDNN's), 2-D images of 64+ pixels 2-5x
#: slower: many pixels are GEMM's, where tiles keep the weights in registers
SMALL_CONV_PIXELS = 12
SMALL_CONV_PIXEL_MACS = 160 << 10


def _small_conv_plan(x_shape: tuple[int, ...], w: np.ndarray, group: int, g: _Geometry) -> tuple | None:
    """(y shape, x and y as 4-D, strides + dilations + top/left pads) of a 1-D or 2-D
    convolution small enough for ``_jit.small_conv``, else None."""
    if len(x_shape) not in (3, 4) or 0 in x_shape:
        return None
    depthwise = group == x_shape[1] == w.shape[0]
    pixels = math.prod(g.out)
    macs = w.size * pixels  # an image's
    if depthwise:
        if macs * x_shape[0] > SMALL_DEPTHWISE_MACS:
            return None
    elif macs * x_shape[0] > SMALL_CONV_MACS and (pixels > SMALL_CONV_PIXELS or macs > SMALL_CONV_PIXEL_MACS):
        return None
    g2 = g.as_2d() if len(x_shape) == 3 else g
    return ((x_shape[0], w.shape[0]) + g.out, x_shape[:2] + g2.spatial, (x_shape[0], w.shape[0]) + g2.out,
            g2.strides + g2.dilations + g2.pads[:2])


def _check_conv_shapes(node, x_shape: tuple, w_shape: tuple, group: int) -> None:
    """X and W fit each other, as onnxruntime checks (the numpy paths failed on a mismatch with
    a bare reshape or index error)."""
    where = f"{node.op_type} {node.name!r}"
    if len(x_shape) < 3 or len(x_shape) != len(w_shape):
        raise ValueError(f"{where}: input X has shape {list(x_shape)} and W {list(w_shape)}: both need the same "
                         "rank, 3 or more (N, C, spatial... and M, C/group, kernel...)")
    if x_shape[1] != w_shape[1] * group:
        raise ValueError(f"{where}: input X has {x_shape[1]} channels (shape {list(x_shape)}), W {list(w_shape)} "
                         f"with group {group} expects W's dimension 1 x group = {w_shape[1] * group}")
    if w_shape[0] % group:
        raise ValueError(f"{where}: W has {w_shape[0]} output channels (shape {list(w_shape)}), not a multiple of "
                         f"group {group}")


def build_conv(node, request, activation_name: str = "", activation_params: list[float] | None = None):
    """The Conv kernel (also used by FusedConv with an activation, onnxruntime's spelling)."""
    group = int(node.attr("group", 1))
    geometry = _GeometryCache(node)
    attr_kernel = node.attr("kernel_shape")
    prepared: dict = {}  # reordered weight matrices (see _conv_wide)
    # QDQ weights (DequantizeLinear of constants) are not taken as constants here: outside the
    # oneDNN groups that would send the convolution to oneDNN, whose sums round differently
    # from onnxruntime's im2col GEMM, and in a QDQ model every rounding difference can flip a
    # QuantizeLinear tie (a QDQ Whisper encoder's first attention block: 3 steps off on 0.35%
    # of its outputs, against 1 step on 0.05% on the numpy path)
    # They go to the integer convolution instead where the input is a DequantizeLinear too
    # (``qdq_integer_conv``): onnxruntime's QLinearConv arithmetic, exact sums
    w_given, w_ready = constant_weight(node, request, 1, dequantized=False)
    b_given = constant_weight(node, request, 2, dequantized=False)[0] if len(node.inputs) > 2 else None
    from .quant import qdq_integer_conv  # noqa: PLC0415  (quant imports this module)

    integer_conv = qdq_integer_conv(node, request)  # its weights are fixed: read at creation
    activation = make_activation(activation_name, activation_params or [])
    post_op = _onednn.post_op(activation_name, activation_params or [])
    onednn: dict[tuple, _onednn.Convolution | None] = {}  # input shape -> its primitives, None: numpy path
    packed = _onednn.PackedConstants()  # the weights in oneDNN's layouts, for every input shape
    small_runs: dict[tuple, Callable | None] = {}  # input shape -> ``small_run``'s answer
    small_weights: list[np.ndarray] = []  # the constant weights as (C/group, KH, KW, M), made at first use
    relu = activation_name == "Relu"  # the one activation the small loop applies itself

    def small_run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> Callable | None:
        """The compiled small-input loop bound to inputs of ``x``'s shape and type (with the
        constant weights and bias): a function of x giving y; or None where it is not taken.
        Made once per input shape: the plan, geometry and bias lookups of each call were about
        1 us of a one-pixel convolution's 3.5."""
        loop = _jit.small_conv()
        if loop is None:
            return None
        plan = _small_conv_plan(x.shape, w, group, geometry.get(x.shape, attr_kernel or w.shape[2:]))
        if plan is None:
            return None
        y_shape, x4_shape, y4_shape, params = plan
        if not small_weights:
            w4 = w.reshape(w.shape[:2] + (1,) * (4 - w.ndim) + w.shape[2:])
            small_weights.append(np.ascontiguousarray(w4.transpose(1, 2, 3, 0)))
        weights = small_weights[0]
        bias = zeros_vector(w.shape[0], x.dtype) if b is None else b
        dtype = x.dtype
        after = None if relu else activation

        def run(x: np.ndarray) -> np.ndarray:
            y = np.empty(y_shape, dtype)
            loop(np.ascontiguousarray(x).reshape(x4_shape), weights, bias, y.reshape(y4_shape), *params, group, relu)
            if after is not None:
                after(y)
            return y

        return run

    def onednn_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, g: _Geometry) -> np.ndarray | None:
        """The convolution by oneDNN (constant float32 weights and bias, 1-D or 2-D, large
        enough), or None where it is not taken."""
        x_shape = x.shape  # (``make`` is kept with the plan: not this run's array)

        def make(lib: _onednn._Library) -> _onednn.Convolution | None:
            if not _takes_onednn(x_shape, w, group, g, lib.threads()):
                return None
            g2, shape4 = _as_2d(x_shape, g)
            w4 = w.reshape(w.shape[:2] + g2.kernel)  # (a 1-D or column kernel as a row)
            return _onednn.Convolution(lib, shape4, np.ascontiguousarray(w4), b, group, g2.strides, g2.dilations,
                                       g2.pads, (shape4[0], w.shape[0]) + g2.out, () if post_op is None else (post_op,),
                                       any_layout=not (g.pointwise and group == 1), packed=packed)

        plan = _onednn.plan_for(onednn, x_shape, make)
        if plan is None:
            return None
        y = np.empty((x.shape[0], w.shape[0]) + g.out, dtype=np.float32)
        plan.run(np.ascontiguousarray(x), y)
        if post_op is None and activation is not None:
            activation(y)
        return y

    constants32: list[tuple] = []  # constant float16/bfloat16 weights and bias in float32, made once

    def conv_kernel(x, w, b=None):
        fixed = w is w_given and b is b_given  # the constants, not overridden at run time
        if x.dtype.itemsize < 4 and x.dtype.kind in "fV":
            # float16/bfloat16: accumulate in float32 (numpy has no BLAS for them), round once;
            # the constants converted once and taken by the float32 paths as theirs (oneDNN's
            # included: a float16 EfficientNet-B0's convolutions had only numpy's)
            if fixed:
                if not constants32:
                    constants32.append((as_float32(w_ready), None if b is None else as_float32(b)))
                w32, b32 = constants32[0]
            else:
                w32, b32 = as_float32(w), None if b is None else as_float32(b)
            return as_dtype(float32_conv(as_float32(x), w32, b32, fixed), x.dtype)
        return float32_conv(x, w_ready if w is w_given else w, b, fixed)

    checked: set[tuple] = set()  # (x shape, w shape) pairs ``_check_conv_shapes`` passed

    def float32_conv(x, w, b, fixed: bool):
        """The convolution of float32 (float64, integer) x; ``fixed``: w and b are the
        node's constants (as the plans cached here assume)."""
        if (x.shape, w.shape) not in checked:
            _check_conv_shapes(node, x.shape, w.shape, group)
            if len(checked) >= SHAPE_CACHE_MAX:
                checked.clear()
            checked.add((x.shape, w.shape))
        if integer_conv is not None:
            y = integer_conv(x, b)
            if y is not None:
                if activation is not None:
                    activation(y)
                return y
        if fixed and x.dtype == w.dtype and x.dtype in JIT_FLOATS:
            run = small_runs.get(x.shape, False)
            if run is False:
                run = small_run(x, w, b)
                if len(small_runs) >= SHAPE_CACHE_MAX:
                    small_runs.clear()
                small_runs[x.shape] = run
            if run is not None:
                return run(x)
        kernel_shape = attr_kernel or w.shape[2:]
        g = geometry.get(x.shape, kernel_shape)
        if fixed and x.dtype == np.float32 and w.dtype == np.float32 and _onednn.USE:
            y = onednn_conv(x, w, b, g)
            if y is not None:
                return y
        return conv(x, w, b, group, g, kernel_shape, activation, prepared)

    return conv_kernel


@kernel("Conv")
def _conv(node, request):
    return build_conv(node, request)


# --------------------------------------------------------------------------------------------
# pooling
# --------------------------------------------------------------------------------------------


def _pool_params(node, x):
    kernel_shape = list(node.attr("kernel_shape"))
    nd = len(kernel_shape)
    strides = node.attr("strides") or [1] * nd
    dilations = node.attr("dilations") or [1] * nd
    pads = conv_pads(node, x.shape[2:], kernel_shape, strides, dilations)
    if node.attr("ceil_mode", 0):
        # extend the end padding so that a last partial window exists, as ceil() asks
        pads = list(pads)
        for i in range(nd):
            span = x.shape[2 + i] + pads[i] + pads[i + nd] - ((kernel_shape[i] - 1) * dilations[i] + 1)
            out_ceil = -(-span // strides[i]) + 1
            if (out_ceil - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
                out_ceil -= 1
            needed = (out_ceil - 1) * strides[i] + (kernel_shape[i] - 1) * dilations[i] + 1
            pads[i + nd] += max(0, needed - (x.shape[2 + i] + pads[i] + pads[i + nd]))
    return kernel_shape, strides, dilations, pads


def _separable(xp: np.ndarray, g: _Geometry, op) -> np.ndarray:
    """Reduce the windows of ``xp`` with ``op`` (max or add), one spatial axis at a time: a
    k1 x k2 window costs k1 + k2 - 2 calls over shrinking arrays instead of k1 * k2 - 1."""
    y = xp
    for axis, slices in enumerate(g.axis_slices):
        index = [slice(None)] * y.ndim
        index[2 + axis] = slices[0]
        acc = y[tuple(index)].copy()
        for sl in slices[1:]:
            index[2 + axis] = sl
            op(acc, y[tuple(index)], out=acc)
        y = acc
    return y


def _separable_unpadded(x: np.ndarray, g: _Geometry, op, init) -> np.ndarray:
    """As ``_separable`` over the padded input, without building it: per axis and kernel offset,
    only the outputs whose input row lies inside ``x`` are combined (padding adds nothing to a
    max or a sum)."""
    y = x
    for axis in range(len(g.kernel)):
        size, n_out = y.shape[2 + axis], g.out[axis]
        stride, dilation, begin = g.strides[axis], g.dilations[axis], g.pads[axis]
        shape = list(y.shape)
        shape[2 + axis] = n_out
        acc = np.full(shape, init, dtype=y.dtype)
        src_index = [slice(None)] * y.ndim
        dst_index = [slice(None)] * y.ndim
        for o in range(g.kernel[axis]):
            shift = o * dilation - begin  # output i reads input i * stride + shift
            lo = max(0, -(shift // stride))
            hi = min(n_out - 1, (size - 1 - shift) // stride)
            if hi < lo:
                continue
            start = lo * stride + shift
            src_index[2 + axis] = slice(start, start + (hi - lo) * stride + 1, stride)
            dst_index[2 + axis] = slice(lo, hi + 1)
            dst = acc[tuple(dst_index)]
            op(dst, y[tuple(src_index)], out=dst)
        y = acc
    return y


#: pools over inputs of fewer values than this keep the numpy path (oneDNN's call costs more)
ONEDNN_MIN_POOL = 1 << 14


def _onednn_pooling(plans: dict, x: np.ndarray, g: _Geometry, algorithm: int,
                    applies: Callable[[], bool] | None = None) -> np.ndarray | None:
    """The 1-D or 2-D float32 pooling of ``x`` by oneDNN (plans per input shape in ``plans``),
    or None where it is not taken (no library, small, other dtype or rank, unimplemented, or
    ``applies()`` false: asked once per input shape)."""
    if x.dtype != np.float32 or not _onednn.USE:
        return None

    x_shape = x.shape  # (``make`` is kept with the plan: not this run's array)

    def make(lib: _onednn._Library) -> _onednn.Pooling | None:
        if len(x_shape) not in (3, 4) or math.prod(x_shape) < ONEDNN_MIN_POOL or (applies is not None and not applies()):
            return None
        g2, shape4 = _as_2d(x_shape, g)
        return _onednn.Pooling(lib, shape4, algorithm, g2.kernel, g2.strides, g2.dilations, g2.pads, shape4[:2] + g2.out)

    plan = _onednn.plan_for(plans, x.shape, make)
    if plan is None:
        return None
    y = np.empty(x.shape[:2] + g.out, dtype=np.float32)
    plan.run(np.ascontiguousarray(x), y)
    return y


class _PoolFake:
    """Shape-only stand-in so that ``_pool_params`` can run on a cached input shape."""

    def __init__(self, shape):
        self.shape = shape


@kernel("MaxPool")
def _max_pool(node, request):
    n_out = len(node.outputs)
    kernel_shape = list(node.attr("kernel_shape"))
    geometry = _GeometryCache(node, pads_of=lambda shape: _pool_params(node, _PoolFake(shape))[3])

    def max_pool_windows(x):  # the Indices output needs the windows; rare in practice
        ks, strides, dilations, pads = _pool_params(node, x)
        low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min
        win = _windows(x, ks, strides, dilations, pads, low)
        return win.max(axis=tuple(range(-len(ks), 0))), None

    onednn: dict = {}

    def max_pool(x):
        if x.dtype == np.float16:  # in float32, exact, on the fast paths (numpy's float16 maximum
            return as_dtype(max_pool(as_float32(x)), x.dtype)  # took 16 ms on a 1x96x109x109 input)
        g = geometry.get(x.shape, kernel_shape)
        y = _onednn_pooling(onednn, x, g, _onednn.POOLING_MAX)
        if y is not None:
            return y
        low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min
        return _separable_unpadded(x, g, np.maximum, low)

    return max_pool if n_out == 1 else max_pool_windows


@kernel("AveragePool")
def _avg_pool(node, request):
    include_pad = bool(node.attr("count_include_pad", 0))
    kernel_shape = list(node.attr("kernel_shape"))
    nd = len(kernel_shape)
    strides = list(node.attr("strides") or [1] * nd)
    dilations = list(node.attr("dilations") or [1] * nd)
    geometry = _GeometryCache(node, pads_of=lambda shape: _pool_params(node, _PoolFake(shape))[3])
    counts_cache: dict[tuple, np.ndarray] = {}

    def window_sum(xp, g):
        return _separable(xp, g, np.add)

    def counts_for(x, g):
        key = (x.shape[2:], x.dtype)
        counts = counts_cache.get(key)
        if counts is None:
            ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
            if include_pad:
                # count the explicit (or auto_pad) padding but not the extra that ceil_mode added
                explicit = conv_pads(node, x.shape[2:], kernel_shape, strides, dilations)
                padded = np.zeros((1, 1) + g.padded, dtype=x.dtype)
                region = (slice(None), slice(None)) + tuple(
                    slice(g.pads[i] - explicit[i], g.pads[i] + x.shape[2 + i] + explicit[i + nd]) for i in range(nd)
                )
                padded[region] = 1
                counts = window_sum(padded, g)
            else:
                counts = window_sum(_padded(ones, g, 0), g)
            if len(counts_cache) >= SHAPE_CACHE_MAX:
                counts_cache.clear()
            counts_cache[key] = counts
        return counts

    onednn: dict = {}
    algorithm = _onednn.POOLING_AVERAGE_INCLUDE_PADDING if include_pad else _onednn.POOLING_AVERAGE_EXCLUDE_PADDING

    def avg_pool(x):
        if x.dtype == np.float16:  # summed in float32 and rounded once, as onnxruntime does
            return as_dtype(avg_pool(as_float32(x)), x.dtype)
        g = geometry.get(x.shape, kernel_shape)
        # oneDNN counts all padding in or none; ceil_mode's extra end padding is not to be counted
        spatial = x.shape[2:]  # (the lambda is kept with the plan: not this run's array)
        y = _onednn_pooling(onednn, x, g, algorithm, lambda: not include_pad or list(g.pads) == list(
            conv_pads(node, spatial, kernel_shape, strides, dilations)))
        if y is not None:
            return y
        y = _separable_unpadded(x, g, np.add, 0)
        y /= counts_for(x, g)
        return y

    return avg_pool
