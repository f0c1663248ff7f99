"""Exact integer products of 8-bit codes, the core of the quantized matmuls (MatMulInteger,
QLinearMatMul, MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm, QAttention) and of
DynamicQuantizeLSTM's steps.

``product(a, b)``: int32 operands (codes minus their zero points) as float64 BLAS, exact (sums
far below 2^53); any shapes and layouts.

``ConstantIntegerMatrix``: a constant B (an initializer) prepared once for exact products with
row codes A. Where oneDNN has an 8-bit dot-product kernel (AMX, VNNI), the codes themselves are
multiplied there, B as int8 (uint8 codes shifted by 128), and the zero points enter as the
terms of

    (A - za) @ (B - zb) = A @ Bs - za * colsum(Bs) + rowsum(A - za) * (s - zb),   Bs = B - s,

all in int32: the true result is below 2^31 in magnitude for K < 33025, and int32's wrapping
arithmetic gives it exactly whatever its intermediate terms do. Elsewhere, where B - zb fits
int8 with few pairs that could saturate VPMADDUBSW, it is packed for the compiled byte product
on AVX2 (``pack_quads``, ``_jit.quad_product``: A @ (B - zb) - za * colsum(B - zb), the
codes themselves as the unsigned bytes); else for the compiled VPMADDWD product
(``pack_panels``, ``_jit.packed_product``), or kept as float32 for BLAS products where numba
is absent (``exact_product_f32``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .. import threads
from . import _jit, _onednn
from ._util import PreparedFor
from .nn import _as_2d, _im2col, _padded

#: K at or above this does not keep every sum of 8-bit products below 2^31
MAX_K = 33025
#: products with fewer multiply-adds keep the compiled loop: a oneDNN call costs about 8 us
#: however small, and its zero-point terms as much again (measured, us loop / oneDNN with
#: the terms: 1 x 256 x 512 7.8 / 17; 1 x 256 x 1024 14.6 / 18.4; 1 x 768 x 3072 167 / 31)
ONEDNN_MIN_MACS = 1 << 18
#: rows of K per float32 product in ``exact_product_f32`` where the operands' bound does not
#: allow one: operands of 8-bit codes minus their zero points are at most 255 in magnitude, so a
#: sum of 256 products stays below 2^24 and every partial sum is an integer float32 holds exactly
EXACT_F32_ROWS = 256
#: float32 holds every integer of smaller magnitude exactly
F32_EXACT = 1 << 24
#: products with fewer multiply-adds take one thread in ``ConstantIntegerMatrix`` (us one /
#: two threads on an AVX2 EPYC: 1 x 256 x 1024 5.7 / 5.4; 1 x 512 x 2048 21.5 / 14.1)
SPLIT_MIN_MACS = 1 << 19
#: the largest column matrix of one image (bytes of 8-bit codes) ``ConstantIntegerConvolution``
#: gathers for the exact product; larger inputs take the caller's float32 convolution
COLUMNS_MAX_BYTES = 1 << 26
#: without the compiled product, rows of A from which the exact float32 product replaces a QDQ
#: MatMul's float one where oneDNN declines (a QDQ transformer 3.8 -> 2.2 ms at batch 1 on an
#: AVX2 EPYC; below it the int16 loop this replaced was slower than float32 BLAS)
F32_MIN_ROWS = 8


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The exact integer product of int32 operands (as float64: exact below 2^53)."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def exact_product_f32(a: np.ndarray, b32: np.ndarray, b_column_abs: float) -> np.ndarray:
    """The exact integer product of int32 ``a`` (M, K) and ``b32`` (K, N), integers of magnitude
    <= 255 held as float32, as int32; ``b_column_abs``: the largest sum of |B| over a column.
    Every partial sum of a column is at most max|A| * that: below 2^24, in any order the BLAS
    adds, one float32 GEMM is exact; else one GEMM per ``EXACT_F32_ROWS`` rows of B, their sums
    in float64. Twice the speed of ``product``'s float64 GEMM or better."""
    a32 = a.astype(np.float32)
    if a.size == 0 or float(np.abs(a).max()) * b_column_abs < F32_EXACT:
        return np.matmul(a32, b32).astype(np.int32)
    total = None
    for start in range(0, b32.shape[0], EXACT_F32_ROWS):
        part = np.matmul(a32[:, start:start + EXACT_F32_ROWS], b32[start:start + EXACT_F32_ROWS])
        total = part.astype(np.float64) if total is None else total + part
    return total.astype(np.int32)


def _as_int32(zero_point) -> np.ndarray:
    return np.zeros((), np.int32) if zero_point is None else np.asarray(zero_point).astype(np.int32)


def _first_zero_point(zero_point) -> int:
    """A per-tensor zero point (None, a scalar or a one-element array) as an int; 0 for None."""
    return 0 if zero_point is None else int(np.asarray(zero_point).reshape(-1)[0])


#: panels ``pack_panels`` makes at a time (its transient block: K x 1024 int16, 2 MB at K = 1024)
PACK_PANELS_AT_ONCE = 64


def pack_panels(b: np.ndarray, zero_point) -> np.ndarray:
    """B - zb for 8-bit codes B (K, N) and their zero point (a scalar or one per column, as
    int32) in ``_jit.packed_product``'s layout: (N/16 panels, K/2 pairs, 32), pair p of a panel
    holding B[2p, c] - zb, B[2p + 1, c] - zb for its 16 columns c in turn (K and N zero-padded
    to a pair and a panel); int8 where every value fits (weights of zero point 0, or uint8 ones
    of zero point 128: half the memory each product reads), else int16. Made a block of
    ``PACK_PANELS_AT_ONCE`` panels at a time: B - zb as a whole int32 array, padded and
    transposed, held four copies of B at once (ddddocr's 1024 x 8210 classifier: 67 MB at its
    first run, twice the session's own peak)."""
    k, n = b.shape
    width = _jit.PRODUCT_PANEL
    pairs, panels = (k + 1) // 2, -(-n // width) if n else 0
    zb = _per_column(zero_point, n)
    fits_int8 = b.size == 0 or (int((b.min(axis=0).astype(np.int32) - zb).min()) >= -128
                                and int((b.max(axis=0).astype(np.int32) - zb).max()) <= 127)
    packed = np.empty((panels, pairs, 2 * width), np.int8 if fits_int8 else np.int16)
    for first, last, _, _, block in _panel_blocks(b, zb, 2 * pairs):
        grouped = block.reshape(pairs, 2, last - first, width)  # [p, t, q, c] = B[2p + t, 16q + c] - zb
        packed[first:last] = grouped.transpose(2, 0, 3, 1).reshape(last - first, pairs, 2 * width)
    return packed


def _per_column(zero_point, n: int) -> np.ndarray:
    """A zero point (a scalar or one per column, as int32) as one per column of N."""
    zb = np.asarray(zero_point, np.int32).reshape(-1)
    return np.broadcast_to(zb if zb.size else np.zeros(1, np.int32), (n,))


def _panel_blocks(b: np.ndarray, zb: np.ndarray, rows: int) -> Iterator[tuple[int, int, int, int, np.ndarray]]:
    """(first, last, lo, hi, block) for each ``PACK_PANELS_AT_ONCE`` panels of B's columns:
    panels first to last are columns lo to hi, and ``block`` int16 (rows, 16 (last - first))
    holds B - zb there, zeros past K and N (the packers' transient: a block, not all of B)."""
    k, n = b.shape
    width = _jit.PRODUCT_PANEL
    panels = -(-n // width) if n else 0
    for first in range(0, panels, PACK_PANELS_AT_ONCE):
        last = min(first + PACK_PANELS_AT_ONCE, panels)
        lo, hi = first * width, min(last * width, n)
        block = np.zeros((rows, (last - first) * width), np.int16)
        block[:k, :hi - lo] = b[:, lo:hi]
        block[:k, :hi - lo] -= zb[lo:hi].astype(np.int16)
        yield first, last, lo, hi, block


#: the largest share of B's neighbouring pairs the byte product moves out of its packing (the
#: pairs VPMADDUBSW could saturate on, added back one at a time: 3 ns a row each); above it
#: ``packed_product`` runs. 48 x 512 x 1024, one thread, us packed_product / byte product at
#: outlier shares 0 / 0.1 / 0.2 / 0.4%: 335 / 266, 307, 343, 418 (uniform weights: a quarter;
#: int8 transformers' weights 0.01-0.13%)
MAX_OUTLIER_SHARE = 1 / 1024


class QuadPacked(NamedTuple):
    """B - zb in ``_jit.quad_product``'s layout (``pack_quads``)."""

    quads: np.ndarray  # int8 (panels, ceil(K/4), 64), the outlier pairs zero
    column_sums: np.ndarray  # int32 (16 panels,): colsum(B - zb), zeros past N
    starts: np.ndarray  # int64 (panels + 1,): panel q's outliers at starts[q]:starts[q + 1]
    outliers: np.ndarray  # int32 (count, 4): (k, column, B[k] - zb, B[k + 1] - zb), k even


def pack_quads(b: np.ndarray, zero_point) -> QuadPacked | None:
    """B - zb (8-bit codes B (K, N), zero point scalar or one per column) for
    ``_jit.quad_product``, or None where it does not apply: B - zb outside int8 (only weights
    of zero point 0, or uint8 ones of 128, fit), or more than ``MAX_OUTLIER_SHARE`` of the
    pairs (B[2j, c], B[2j + 1, c]) are outliers: of one sign, their magnitudes summing past 128
    (255 times that leaves VPMADDUBSW's int16 sum; pairs of opposite signs never do). Where
    the product is VPDPBUSD (AVX-512 VNNI: ``_jit.has_avx512_vnni``), which sums exactly, no
    pair is an outlier. Quad q of panel p holds B[4q + t, 16p + c] - zb for t = 0..3 of each
    column c in turn. Made a block of ``PACK_PANELS_AT_ONCE`` panels at a time, as
    ``pack_panels``."""
    saturates = not _jit.has_avx512_vnni()
    k, n = b.shape
    width = _jit.PRODUCT_PANEL
    quads, panels = -(-k // 4), -(-n // width) if n else 0
    packed = np.empty((panels, quads, 4 * width), np.int8)
    column_sums = np.zeros(panels * width, np.int32)
    limit, found, count = MAX_OUTLIER_SHARE * max(2 * quads * n, 1), [], 0
    for first, last, lo, hi, block in _panel_blocks(b, _per_column(zero_point, n), 4 * quads):
        if block.size and (int(block.min()) < -128 or int(block.max()) > 127):
            return None
        column_sums[lo:hi] = block[:k, :hi - lo].sum(axis=0, dtype=np.int32)
        if saturates:
            even, odd = block[0::2], block[1::2]  # the pairs' first and second values
            outlying = (np.maximum(even, 0) + np.maximum(odd, 0) > 128) | (np.maximum(-even, 0) + np.maximum(-odd, 0) > 128)
            pair, column = np.nonzero(outlying)
            count += pair.size
            if count > limit:
                return None
            found.append(np.stack([2 * pair, lo + column, even[pair, column], odd[pair, column]], axis=1).astype(np.int32))
            even[outlying] = 0
            odd[outlying] = 0
        grouped = block.astype(np.int8).reshape(quads, 4, last - first, width)  # [q, t, p, c] = B[4q + t, 16p + c] - zb
        packed[first:last] = grouped.transpose(2, 0, 3, 1).reshape(last - first, quads, 4 * width)
    outliers = np.concatenate(found) if found else np.zeros((0, 4), np.int32)
    outliers = outliers[np.argsort(outliers[:, 1] // width, kind="stable")]
    starts = np.searchsorted(outliers[:, 1] // width, np.arange(panels + 1)).astype(np.int64)
    return QuadPacked(packed, column_sums, starts, np.ascontiguousarray(outliers))


class ConstantIntegerMatrix:
    """A constant B (K, N) of 8-bit codes (int8 or uint8) with its zero point (None, a scalar or
    one per column), made once; ``times(a, a_zero_point)`` is the exact int32 (M, N) product
    (A - za) @ (B - zb) for 2-D codes A (uint8 or int8) or int32 values (already minus their
    zero point) and a scalar or per-row (M,) za."""

    def __init__(self, b: np.ndarray, b_zero_point=None):
        if b.ndim != 2:
            raise ValueError(f"ConstantIntegerMatrix: B must be 2-D, got shape {b.shape}")
        self.k, self.n = b.shape
        # the codes as given (the model holds them anyway); the fallback's copy is made at its
        # first use, so with oneDNN there is one copy of B besides the model's: oneDNN's
        self.b, self.zb = b, _as_int32(b_zero_point)
        self.onednn = _onednn.USE and b.dtype in (np.int8, np.uint8) and self.k < MAX_K
        if self.onednn:
            shift = 128 if b.dtype == np.uint8 else 0
            self.column_sums = self._codes_s8().sum(axis=0, dtype=np.int32)  # colsum(Bs)
            self.offset = np.asarray(shift - self.zb, np.int32)  # s - zb
            self.has_offset = bool(self.offset.any())
            # one offset for every column (B's zero point per tensor, or the same for all): what
            # the compiled passes take (``_jit.integer_to_float``, DynamicQuantizeLSTM's steps)
            offsets = np.unique(self.offset)
            self.one_offset = np.int32(offsets[0]) if offsets.size == 1 else None
            self.plans: dict[tuple, _onednn.IntegerMatMul | _onednn.ScaledIntegerMatMul | None] = {}
            self.packed = _onednn.PackedConstants()  # the codes in oneDNN's layout, for every row count
        # B - zb for ``_exact``, made at its first use: packed for the compiled product, else
        # as float32 with the largest column sum of its magnitudes
        self._packed: np.ndarray | None = None
        self._quads: QuadPacked | None | bool = False  # ``pack_quads``'s, made at first use (False: not yet)
        self._float: np.ndarray | None = None
        self._column_abs = 0.0
        self._no_column_sums: np.ndarray | None = None  # zeros: ``scaled_times``' pass over an exact product

    def times(self, a: np.ndarray, a_zero_point=None, out: np.ndarray | None = None,
              onednn_only: bool = False) -> np.ndarray | None:
        """The product; ``out``: a C-contiguous int32 (M, N) to write it into (a loop's steps
        reuse one: oneDNN then keeps the address it was given). ``onednn_only``: None where
        oneDNN does not take it (for a caller whose own float path is faster than the loop)."""
        if a.ndim != 2 or a.shape[1] != self.k or a.dtype not in (np.int8, np.uint8):
            raise ValueError(f"ConstantIntegerMatrix: A must be 8-bit codes (M, {self.k}), got {a.dtype} {a.shape}")
        m = a.shape[0]
        if self.takes_onednn(m, a.dtype):
            plan = self.codes_plan(m, a.dtype)
            if plan is not None:
                z = np.empty((m, self.n), np.int32) if out is None else out
                plan.run(np.ascontiguousarray(a), z)
                self._add_zero_point_terms(z, a, a_zero_point)
                return z
        if onednn_only:
            return None
        return self._exact(a, _as_int32(a_zero_point), out)

    def codes_plan(self, rows: int, a_dtype: np.dtype) -> _onednn.IntegerMatMul | None:
        """oneDNN's product A @ Bs of ``rows`` rows of ``a_dtype`` codes into int32, without the
        zero-point terms (``column_sums`` and ``offset`` give them), for a caller that adds
        them in its own compiled loop; None where oneDNN does not take it. Made once per shape."""
        if not self.onednn or a_dtype not in (np.uint8, np.int8):
            return None
        return _onednn.plan_for(self.plans, (rows, np.dtype(a_dtype).char), lambda lib: _onednn.integer_product(
            lib, lambda: _onednn.IntegerMatMul(lib, rows, self._codes_s8(), a_dtype, self.packed), rows, self.k, self.n))

    def scaled_plan(self, rows: int, a_dtype: np.dtype, per_column: bool) -> _onednn.ScaledIntegerMatMul | None:
        """oneDNN's float32 (A - za) @ (B - zb) * scale of ``rows`` rows of ``a_dtype`` codes, a
        scale per column (``per_column``) or one, where B has one zero point; None where oneDNN
        does not take it (``scaled_times`` then converts oneDNN's int32 sums in its own pass).
        Made once per shape."""
        if not self.onednn or a_dtype not in (np.uint8, np.int8) or self.one_offset is None:
            return None
        # B - zb = Bs + offset: the codes oneDNN holds (``_codes_s8``) with zero point -offset
        return _onednn.plan_for(self.plans, ("scaled", rows, np.dtype(a_dtype).char, per_column), lambda lib: _onednn.integer_product(
            lib, lambda: _onednn.ScaledIntegerMatMul(lib, rows, self._codes_s8(), a_dtype, -int(self.one_offset), per_column,
                                                     self.packed), rows, self.k, self.n))

    def _codes_s8(self) -> np.ndarray:
        """B's codes as int8, Bs = B - 128 for uint8 (B itself for int8), for oneDNN to read as
        it packs them: made when needed and not kept (oneDNN keeps its packed copy), by one
        XOR that flips the sign bit, where ``(B.astype(int16) - 128).astype(int8)`` held two
        int16 copies at once (ddddocr's 1024 x 8210 classifier: 34 MB at its first run)."""
        if self.b.dtype == np.uint8:
            return np.bitwise_xor(self.b, np.uint8(128)).view(np.int8)
        return np.ascontiguousarray(self.b, dtype=np.int8)

    def scaled_times(self, a: np.ndarray, a_zero_point, scale: np.ndarray, onednn_only: bool = False
                     ) -> np.ndarray | None:
        """float32((A - za) @ (B - zb)) * scale for a scalar za and a float32 ``scale`` (one, or
        one per column): onnxruntime's MatMulIntegerToFloat arithmetic. oneDNN's product with the
        zero points and the scale (``scaled_plan``) where it takes them, else its bare product
        and one compiled pass (``_jit.integer_to_float``: the zero-point terms and the scale),
        else ``times`` and two numpy passes; ``onednn_only`` as in ``times``."""
        m = a.shape[0]
        scale = np.ascontiguousarray(scale, np.float32).reshape(-1)
        plan = self.scaled_plan(m, a.dtype, scale.size > 1) if self.takes_onednn(m, a.dtype) else None
        if plan is not None:
            y = np.empty((m, self.n), np.float32)
            plan.run(np.ascontiguousarray(a), 0 if a_zero_point is None else int(a_zero_point), scale, y)
            return y
        to_float = _jit.integer_to_float() if self.onednn and self.one_offset is not None else None
        plan = self.codes_plan(m, a.dtype) if to_float is not None and self.takes_onednn(m, a.dtype) else None
        if plan is not None:
            acc = np.empty((m, self.n), np.int32)
            plan.run(np.ascontiguousarray(a), acc)
            y = np.empty((m, self.n), np.float32)
            za = np.int32(0 if a_zero_point is None else int(a_zero_point))
            to_float(acc, a, za, self.column_sums, self.one_offset, scale, y)
            return y
        acc = self.times(a, a_zero_point, onednn_only=onednn_only)
        if acc is None:
            return None
        to_float = _jit.integer_to_float()
        if to_float is None:
            y = acc.astype(np.float32)
            y *= scale
            return y
        # the exact product's conversion and scale in one pass (48 x 1024: 8.5 us, numpy's two 10.5)
        if self._no_column_sums is None:
            self._no_column_sums = np.zeros(self.n, np.int32)
        y = np.empty((m, self.n), np.float32)
        to_float(acc, a, np.int32(0), self._no_column_sums, np.int32(0), scale, y)
        return y

    def takes_onednn(self, rows: int, a_dtype: np.dtype) -> bool:
        """Whether a product of ``rows`` rows of ``a_dtype`` codes goes to oneDNN (where it
        has a kernel for it: ``times`` falls back otherwise)."""
        return self.onednn and a_dtype in (np.uint8, np.int8) and rows * self.k * self.n >= ONEDNN_MIN_MACS

    def _add_zero_point_terms(self, z: np.ndarray, a: np.ndarray, a_zero_point) -> None:
        """z = A @ Bs (oneDNN's) made (A - za) @ (B - zb), in place."""
        if a_zero_point is not None and np.ndim(a_zero_point) == 0:
            za = int(a_zero_point)  # the usual case: one zero point (a scalar multiply, not an array's)
            if za:
                z -= za * self.column_sums
        else:
            za = _as_int32(a_zero_point)
            za = za.reshape(-1, 1) if za.ndim == 1 else za
            if za.any():
                z -= za * self.column_sums
        if self.has_offset:
            row_sums = a.sum(axis=1, dtype=np.int32).reshape(-1, 1) - self.k * za  # rowsum(A - za)
            z += row_sums * self.offset

    def packed_panels(self) -> np.ndarray | None:
        """B - zb packed for ``_jit.packed_product`` (``pack_panels``, made once), or None where
        that product is not there (numba absent, or K too large for int32 sums): for a caller
        that runs the product in its own compiled loop (DynamicQuantizeLSTM's steps)."""
        if self.k >= MAX_K or _jit.packed_product() is None:
            return None
        if self._packed is None:
            self._packed = pack_panels(self.b, self.zb)
        return self._packed

    def product_threads(self, rows: int) -> int:
        """The threads ``_jit.packed_product`` takes for ``rows`` rows of A (``SPLIT_MIN_MACS``)."""
        return threads.split_threads() if rows * self.k * self.n >= SPLIT_MIN_MACS else 1

    def _exact(self, a: np.ndarray, za: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """(A - za) @ (B - zb) without oneDNN, into ``out`` where given, B - zb made once:
        packed for the compiled product (``_jit.packed_product``), on the session's threads
        where it is large; else (numpy only) as float32 for ``exact_product_f32``'s BLAS
        products."""
        quads = self.quad_packed()
        packed = self.packed_panels() if quads is None else None
        if quads is None and packed is None:
            za = za.reshape(-1, 1) if za.ndim == 1 else za
            if self._float is None:
                b = self.b.astype(np.int32) - self.zb
                self._float = np.ascontiguousarray(b, dtype=np.float32)
                self._column_abs = float(np.abs(b).sum(axis=0).max()) if b.size else 0.0
            z = exact_product_f32(np.ascontiguousarray(a.astype(np.int32) - za), self._float, self._column_abs)
            if out is not None:
                out[...] = z
            return z
        m = a.shape[0]
        # one per row (np.full for the usual scalar: broadcast_to took 5 us of Python a call)
        zero_points = np.full(m, za, np.int32) if za.size == 1 else np.ascontiguousarray(za.reshape(-1), np.int32)
        z = np.empty((m, self.n), np.int32) if out is None else out
        parts = self.product_threads(m)
        if quads is not None:
            if a.dtype == np.uint8 and self.k % 4 == 0:
                codes = np.ascontiguousarray(a)
            else:  # zeros past K to a quad; int8 codes shifted to uint8 (their zero point with them)
                codes = np.zeros((m, quads.quads.shape[1] * 4), np.uint8)
                codes[:, :self.k] = a.view(np.uint8) ^ np.uint8(128) if a.dtype == np.int8 else a
                if a.dtype == np.int8:
                    zero_points = zero_points + np.int32(128)
            _jit.quad_product(parts)(codes, zero_points, quads.quads, quads.column_sums, quads.starts, quads.outliers,
                                     z, parts)
            return z
        _jit.packed_product(parts)(np.ascontiguousarray(a), zero_points, packed, z, parts)
        return z

    def quad_packed(self) -> QuadPacked | None:
        """``pack_quads``'s B, made once, or None where the byte product is not taken (for
        ``_jit.quad_product`` here and in DynamicQuantizeLSTM's compiled scan)."""
        if self._quads is False:
            usable = self.k < MAX_K and _jit.quad_product() is not None
            self._quads = pack_quads(self.b, self.zb) if usable else None
        return self._quads


def prepared_matrix(prepared: PreparedFor, b: np.ndarray, b_zero_point, b_constant: np.ndarray | None
                    ) -> ConstantIntegerMatrix | None:
    """The ``ConstantIntegerMatrix`` of ``b`` where it is the constant ``b_constant`` (the
    node's initializer, as given this run), 2-D and 8-bit, with a scalar or per-column zero
    point; else None (the caller runs ``product``). Made once, in ``prepared``."""
    if b is not b_constant or b.ndim != 2 or b.dtype not in (np.int8, np.uint8):
        return None
    if b_zero_point is not None and np.ndim(b_zero_point) > 1:
        return None
    return prepared.get("B", (b, b_zero_point), lambda: ConstantIntegerMatrix(b, b_zero_point))


def matrix_product(matrix: ConstantIntegerMatrix, a: np.ndarray, a_zero_point) -> np.ndarray | None:
    """(A - za) @ (B - zb) for A (..., K) of 8-bit codes, as int32 (..., N); None where the
    zero point is per row of a batched A (the caller runs ``product``)."""
    if a.dtype not in (np.int8, np.uint8) or a.ndim < 1 or a.shape[-1] != matrix.k:
        return None
    if a_zero_point is not None and np.size(a_zero_point) > 1 and a.ndim != 2:
        return None
    rows = a.reshape(-1, matrix.k) if a.ndim != 2 else a
    return matrix.times(rows, a_zero_point).reshape(a.shape[:-1] + (matrix.n,))


def _minus(x: np.ndarray, zero_point, per_row: bool) -> np.ndarray:
    """x - zero_point as int32; a 1-D zero point of several values is per row of A
    (``per_row``) or per column of B."""
    xi = x.astype(np.int32)
    if zero_point is None:
        return xi
    zp = np.asarray(zero_point).astype(np.int32)
    return xi - (zp.reshape(-1, 1) if per_row and zp.ndim == 1 and zp.size > 1 else zp)


def exact_product(prepared: PreparedFor, a: np.ndarray, a_zero_point, b: np.ndarray, b_zero_point,
                  b_constant: np.ndarray | None) -> np.ndarray:
    """(A - za) @ (B - zb), exact, for 8-bit codes with their zero points (scalar, per row of A,
    per column of B): by B's ``ConstantIntegerMatrix`` (kept in ``prepared``) where B is the
    node's constant ``b_constant``, else by ``product``. int32 or float64 holding integers."""
    matrix = prepared_matrix(prepared, b, b_zero_point, b_constant)
    acc = None if matrix is None else matrix_product(matrix, a, a_zero_point)
    if acc is None:
        acc = product(_minus(a, a_zero_point, True), _minus(b, b_zero_point, False))
    return acc


class ConstantIntegerConvolution:
    """ConvInteger with constant 8-bit weights W (M, C/g, k...) and their zero point (scalar or
    per output channel), by oneDNN's 8-bit convolution where the CPU has dot-product kernels:
    ``__call__(x, x_zero_point, geometry)`` gives the exact int32 output, or None (no oneDNN,
    or a kernel that would saturate: the caller runs its own path).

    oneDNN convolves the codes with zero padding; ONNX pads the codes minus their zero point
    with zeros. With Ws = W - s (int8, s = 128 for uint8 codes) and e = s - zw:

        conv(X - zx, W - zw) = conv(X, Ws) - zx * conv(1, Ws) + e * (conv(X, 1) - zx * conv(1, 1)),

    where 1 is an input of ones inside the image (zero in the padding) or a kernel of ones. The
    ``conv(X, 1)`` term is one more output channel per group with weights all ones (only where
    e is not 0); the ``conv(1, .)`` maps depend on the shape alone and are made once per input
    shape, by running the primitive on ones. All in int32 (exact: see the module's note)."""

    def __init__(self, w: np.ndarray, w_zero_point, group: int):
        self.group, self.m = group, w.shape[0]
        self.w, self.w_zero_point = w, w_zero_point
        self.rows16: np.ndarray | None = None  # ``_columns``'s W - zw, made at its first use
        shift = 128 if w.dtype == np.uint8 else 0
        ws = (w.astype(np.int16) - shift).astype(np.int8).reshape((group, self.m // group) + w.shape[1:])
        offset = (shift - _as_int32(w_zero_point)).reshape(-1)  # e, scalar or per channel
        self.with_sums = bool(offset.any())
        # e broadcast over the output grouped as (N, g, M/g, H, W)
        self.offset = (offset if offset.size > 1 else np.repeat(offset, self.m)).reshape(1, group, -1, 1, 1)
        if self.with_sums:  # after each group's channels, one of ones
            ws = np.concatenate([ws, np.ones((group, 1) + w.shape[1:], np.int8)], axis=1)
        self.weights = np.ascontiguousarray(ws.reshape((-1,) + w.shape[1:]))
        self.plans: dict[tuple, tuple | None] = {}
        self.packed = _onednn.PackedConstants()  # the weights in oneDNN's layouts, for every input shape

    def __call__(self, x: np.ndarray, x_zero_point, geometry) -> np.ndarray | None:
        if x.dtype not in (np.uint8, np.int8) or x.ndim not in (3, 4):
            return None
        plan = None
        if _onednn.USE:
            x_shape, x_dtype = x.shape, x.dtype  # (the maker is kept with the plan: not this run's array)
            plan = _onednn.plan_for(self.plans, (x_shape, x_dtype.char), lambda lib: self._plan(lib, x_shape, x_dtype, geometry))
        if plan is None:
            return self._columns(x, x_zero_point, geometry)
        primitive, shape4, y_shape, unit = plan
        out = np.empty(y_shape, np.int32)
        primitive.run(np.ascontiguousarray(x).reshape(shape4), out)
        y = self._combine(out, unit, _first_zero_point(x_zero_point))
        return y.reshape((x.shape[0], self.m) + geometry.out)

    def _columns(self, x: np.ndarray, x_zero_point, geometry) -> np.ndarray | None:
        """The exact output where oneDNN does not take it (no VNNI): per image, the codes'
        im2col columns (K = channels x kernel taps rows, one column per output pixel; the input
        itself for a pointwise kernel), padded with the zero point so that padding adds 0,
        and W - zw as constant int16 rows, multiplied by ``_jit.codes_product`` (the columns
        packed a panel at a time, the VPMADDWD register blocks): the output comes out in NCHW
        order. One group, one zero point for x, and at most ``COLUMNS_MAX_BYTES`` of columns;
        else None (the caller's float32 convolution). On an AVX2 EPYC (2 threads), against the
        pixel-rows product this replaced, which moved channels last and back: 24 -> 24 channels
        at 32 x 100, 1 x 1 235 -> 60 us, 3 x 3 749 -> 260 us."""
        if self.group != 1 or np.size(x_zero_point) != 1 or self.w.dtype not in (np.uint8, np.int8):
            return None
        n, c = x.shape[:2]
        pixels = math.prod(geometry.out)
        k = c * len(geometry.offsets)
        if pixels * k > COLUMNS_MAX_BYTES or k >= MAX_K or _jit.codes_product() is None:
            return None
        if self.rows16 is None:
            pairs = (k + 1) // 2
            rows = self.w.reshape(self.m, k).astype(np.int16) - _as_int32(self.w_zero_point).reshape(-1, 1).astype(np.int16)
            self.rows16 = np.zeros((self.m, 2 * pairs), np.int16)
            self.rows16[:, :k] = rows
        zx = _first_zero_point(x_zero_point)
        parts = threads.split_threads() if self.m * k * pixels >= SPLIT_MIN_MACS else 1
        product = _jit.codes_product(parts)
        panels = -(-pixels // _jit.PRODUCT_PANEL)
        scratch = np.empty((panels, self.rows16.shape[1] // 2, 2 * _jit.PRODUCT_PANEL), np.int16)
        y = np.empty((n, self.m, pixels), np.int32)
        for image in range(n):
            xi = np.ascontiguousarray(x[image:image + 1])
            if geometry.pointwise:
                columns = xi.reshape(c, pixels)
            else:
                columns = _im2col(_padded(xi, geometry, zx), geometry).reshape(k, pixels)
            product(self.rows16, columns, np.int32(zx), scratch, y[image], parts)
        return y.reshape((n, self.m) + geometry.out)

    def _plan(self, lib, x_shape: tuple[int, ...], x_dtype: np.dtype, geometry) -> tuple:
        """(the primitive, its input and output shapes, conv(1, .) of one image) for an input of
        ``x_shape`` and ``x_dtype``."""
        g2, shape4 = _as_2d(x_shape, geometry)  # 1-D convolutions as one row
        y_shape = (shape4[0], self.weights.shape[0]) + g2.out
        w4 = self.weights.reshape(self.weights.shape[:2] + g2.kernel)
        primitive = _onednn.Convolution(lib, shape4, w4, None, self.group, g2.strides, g2.dilations, g2.pads, y_shape,
                                        x_dtype=x_dtype, packed=self.packed)
        unit = np.empty(y_shape, np.int32)
        primitive.run(np.ones(shape4, x_dtype), unit)
        return primitive, shape4, y_shape, unit[:1].copy()

    def _combine(self, out: np.ndarray, unit: np.ndarray, zx: int) -> np.ndarray:
        """The exact output from oneDNN's ``out`` (N, M', H, W), as (N, g, M/g, H, W)."""
        n, g = out.shape[0], self.group
        grouped = out.reshape((n, g, -1) + out.shape[2:])
        unit_grouped = unit.reshape((1, g, -1) + unit.shape[2:])
        if not self.with_sums:
            if zx:
                grouped -= zx * unit_grouped
            return grouped
        loop = _jit.conv_combine()
        if loop is not None:  # the lines below in one pass
            main = np.empty((n, g, grouped.shape[2] - 1) + out.shape[2:], np.int32)
            flat = (n, g, grouped.shape[2], -1)
            loop(grouped.reshape(flat), unit_grouped.reshape(flat[1:]), np.int32(zx),
                 np.ascontiguousarray(self.offset.reshape(g, -1), np.int32), main.reshape(n, g, main.shape[2], -1))
            return main
        main = grouped[:, :, :-1] - zx * unit_grouped[:, :, :-1]  # a new array: conv(X - zx, Ws)
        sums = grouped[:, :, -1:]
        if zx:
            sums -= zx * unit_grouped[:, :, -1:]
        main += self.offset * sums
        return main
