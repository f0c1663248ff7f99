"""com.microsoft MatMulNBits: weight-only blockwise quantization (4-bit, also 2- and 8-bit), the
op onnxruntime's MatMulNBits quantizer and LLM exporters emit.

Y = A @ dequantize(B)^T + bias, where B holds N rows of K codes in blocks of ``block_size`` along
K, each block with its scale and zero point (default 2^(bits-1)). The codes are unpacked once
(one byte per weight, a quarter of float32's size, when B is a constant) and the product is
taken a slab of K at a time: each slab of weights is dequantized into a scratch of at most
``_SLAB_BYTES`` and multiplied in, so no float copy of the whole weight matrix is made, kept or
rebuilt per run; memory stays near the int4 size and the scratch stays in cache.

A few rows of A (decoding: M = 1) make that product memory-bound on the float slabs; there,
with numba installed (``_jit.USE``), a compiled loop reads the packed 4-bit codes themselves,
per block: y[m, n] += scale * (a_block . codes) - scale * zero_point * sum(a_block)
(0.2 ms at M = 1, K = N = 2048, block 32, against 1.8 ms for the loop it replaced).
"""

from __future__ import annotations

import numpy as np

from .. import threads
from ..registry import kernel
from . import _jit
from ._util import const_input, has_input

MS = "com.microsoft"
_F = np.float32
_SLAB_BYTES = 4 << 20  # float32 weights dequantized per step: fits L2/L3 for typical N


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` codes of each row of ``packed`` (uint8 rows), lowest bits first."""
    rows = packed.reshape(packed.shape[0], -1)
    if bits == 8:
        return rows[:, :count]
    per_byte = 8 // bits
    shifts = (np.arange(per_byte, dtype=np.uint8) * bits)
    codes = (rows[:, :, None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(rows.shape[0], -1)[:, :count]


class _Weights:
    """B's codes (N, K) uint8, the scales (N, blocks) and scale x zero point (N, blocks)."""

    def __init__(self, name: str, b, scales, zero_points, n: int, k: int, bits: int, block: int):
        blocks = -(-k // block)
        if b.size != n * blocks * (block * bits // 8):
            raise ValueError(f"{name}: B has {b.size} bytes, expected N={n} x {blocks} blocks x "
                             f"{block * bits // 8} bytes (K={k}, block_size={block}, bits={bits})")
        if scales.size != n * blocks:
            raise ValueError(f"{name}: scales has {scales.size} values, expected N x blocks = {n * blocks}")
        self.packed = np.ascontiguousarray(b.reshape(n, blocks, -1)) if bits == 4 else None
        self._b, self._bits, self._codes = b, bits, None
        self.scales = scales.reshape(n, blocks).astype(_F)
        if zero_points is None:
            zp = np.full((n, blocks), 1 << (bits - 1), _F)
        elif zero_points.dtype == np.uint8:
            zp = _unpack(zero_points.reshape(n, -1), bits, blocks).astype(_F)
        else:  # float zero points, one per block
            zp = zero_points.reshape(n, blocks).astype(_F)
        self.offsets = (self.scales * zp).astype(_F)  # w = code * scale - scale * zp
        self.n, self.k, self.block, self.blocks = n, k, block, blocks

    def codes(self) -> np.ndarray:
        """B's codes, one byte each, (N, K padded to whole blocks): made at first use, since the
        compiled 4-bit loops read the packed bytes and never need them."""
        if self._codes is None:
            self._codes = _unpack(self._b.reshape(self.n, -1), self._bits, self.blocks * self.block)
        return self._codes


#: at most this many rows of A take the compiled dot-product loop over packed codes; more rows
#: take compiled dequantization of a slab + BLAS (measured at K = N = 2048: the loop's time grows
#: faster than linearly in M past 4, while the slab's dequantization is paid once for all rows)
_FEW_ROWS = 4
_compiled = None
_compile_lock = __import__("threading").Lock()


def _packed4_kernels():
    """The compiled 4-bit loops ``(dot, dequantize)``, or None (numba absent or switched off)."""
    global _compiled
    if not _jit.USE:
        return None
    with _compile_lock:
        if _compiled is None:
            try:
                import numba
            except ImportError:
                _compiled = False
                return None
            # fastmath: the float32 sums may be reassociated, which lets the inner loops vectorise
            jit = numba.njit(parallel=True, cache=True, fastmath=True)
            dot, dequantize = _packed4_loops(numba.prange)
            _compiled = (jit(dot), jit(dequantize))
    return _compiled or None


def _packed4_loops(prange):
    """The 4-bit loops for numba; ``prange`` (numba's parallel range) comes in as a closure
    constant, so this module imports numba only when the loops are first wanted.

    Both see each block's K positions as its even positions then its odd ones: a packed byte
    holds codes 2j (low bits) and 2j + 1, so that order keeps every access contiguous and the
    loops branch-free. A is split the same way (``a_lo``, ``a_hi``: (M, blocks, block / 2));
    the per-block sums of A (for the zero points) are taken once, outside.
    """

    def dot(a_lo, a_hi, a_sums, packed, scales, offsets, y):  # pragma: no cover - compiled by numba
        m_rows = a_lo.shape[0]
        n_rows, blocks, half = packed.shape
        for n in prange(n_rows):
            for m in range(m_rows):
                total = np.float32(0.0)
                for b in range(blocks):
                    acc = np.float32(0.0)
                    for j in range(half):
                        byte = packed[n, b, j]
                        acc += a_lo[m, b, j] * np.float32(byte & 15) + a_hi[m, b, j] * np.float32(byte >> 4)
                    total += scales[n, b] * acc - offsets[n, b] * a_sums[m, b]
                y[m, n] = total

    def dequantize(packed, scales, offsets, first, out):  # pragma: no cover - compiled by numba
        n_rows, count, block = out.shape  # blocks first .. first + count
        half = block // 2
        for n in prange(n_rows):
            for b in range(count):
                s = scales[n, first + b]
                o = offsets[n, first + b]
                for j in range(half):
                    byte = packed[n, first + b, j]
                    out[n, b, j] = np.float32(byte & 15) * s - o
                    out[n, b, half + j] = np.float32(byte >> 4) * s - o

    return dot, dequantize


def _packed4_product(kernels, a: np.ndarray, w: _Weights) -> np.ndarray:
    """a (M, K) @ dequantized(w)^T from the packed codes, A zero-padded to whole blocks. The
    loops' ``prange`` takes the session's threads (``threads.split_threads``): numba's pool
    otherwise runs every region on all its threads, whatever ``intra_op_num_threads`` says (a
    4-bit MiniLM at one thread beside a busy core: 2-13x onnxruntime's time). The count is
    the calling thread's in numba and is given back after: other loops size their own splits."""
    import numba  # (the loops exist: numba is installed)

    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads.split_threads(), numba.config.NUMBA_NUM_THREADS)))
    try:
        return _packed4_loops_run(kernels, a, w)
    finally:
        numba.set_num_threads(before)


def _packed4_loops_run(kernels, a: np.ndarray, w: _Weights) -> np.ndarray:
    """``_packed4_product``'s work on the thread count it set."""
    dot, dequantize = kernels
    m = a.shape[0]
    padded = np.zeros((m, w.blocks, w.block), _F)
    padded.reshape(m, -1)[:, : w.k] = a
    a_lo, a_hi = padded[:, :, 0::2], padded[:, :, 1::2]
    if m <= _FEW_ROWS:
        y = np.empty((m, w.n), _F)
        dot(np.ascontiguousarray(a_lo), np.ascontiguousarray(a_hi), padded.sum(axis=2, dtype=_F),
            w.packed, w.scales, w.offsets, y)
        return y
    a_even_odd = np.concatenate([a_lo, a_hi], axis=2)  # (M, blocks, block) in the loops' order
    y = np.zeros((m, w.n), _F)
    per_slab = max(1, _SLAB_BYTES // (4 * w.n * w.block))  # blocks per slab
    slab = np.empty((w.n, min(per_slab, w.blocks), w.block), _F)
    for first in range(0, w.blocks, per_slab):
        count = min(per_slab, w.blocks - first)
        part = slab if count == slab.shape[1] else np.empty((w.n, count, w.block), _F)
        dequantize(w.packed, w.scales, w.offsets, first, part)
        y += a_even_odd[:, first: first + count].reshape(m, -1) @ part.reshape(w.n, -1).T
    return y


def _product(a: np.ndarray, w: _Weights) -> np.ndarray:
    """a (M, K) float32 @ dequantized(w)^T, a slab of whole blocks of K at a time."""
    m = a.shape[0]
    if w.packed is not None and (kernels := _packed4_kernels()) is not None:
        return _packed4_product(kernels, a, w)
    y = np.zeros((m, w.n), _F)
    per_slab = max(1, _SLAB_BYTES // (4 * w.n * w.block))  # blocks per slab
    codes = w.codes()
    for first in range(0, w.blocks, per_slab):
        last = min(first + per_slab, w.blocks)
        nb = last - first
        slab = np.empty((w.n, nb, w.block), _F)
        np.multiply(codes[:, first * w.block: last * w.block].reshape(w.n, nb, w.block),
                    w.scales[:, first:last, None], out=slab, casting="unsafe")
        slab -= w.offsets[:, first:last, None]
        k0, k1 = first * w.block, min(last * w.block, w.k)
        y += a[:, k0:k1] @ slab.reshape(w.n, nb * w.block)[:, : k1 - k0].T
    return y


def quantize_a_blockwise(a: np.ndarray, block: int) -> np.ndarray:
    """A as onnxruntime's accuracy_level=4 (int8 compute) sees it: each block of ``block``
    values along K quantized to int8 with scale max|a| / 127 (times the reciprocal, rounded
    half to even), given back dequantized. The integer dot products onnxruntime then takes are
    exact, so the float product of this A with the dequantized weights is its answer."""
    m, k = a.shape
    blocks = -(-k // block)
    padded = np.zeros((m, blocks * block), _F)
    padded[:, :k] = a
    rows = padded.reshape(m, blocks, block)
    scale = (np.abs(rows).max(axis=2, keepdims=True) / _F(127)).astype(_F)
    inverse = np.divide(_F(1), scale, out=np.zeros_like(scale), where=scale > 0)
    q = np.clip(np.rint(rows * inverse), -128, 127)
    return (q * scale).reshape(m, -1)[:, :k].astype(_F)


@kernel("MatMulNBits", domain=MS)
def _matmul_nbits(node, request):
    name = f"MatMulNBits {node.name!r}"
    k, n = int(node.attr("K")), int(node.attr("N"))
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size"))
    if bits not in (2, 4, 8):
        raise NotImplementedError(f"{name}: bits={bits} (2, 4 and 8 are supported)")
    if block < 16 or block & (block - 1):
        raise ValueError(f"{name}: block_size {block} must be a power of 2 and at least 16")
    if has_input(node, 4):
        raise NotImplementedError(f"{name}: g_idx (act-order) is not supported")
    if node.attr("weight_prepacked", 0):
        raise NotImplementedError(f"{name}: weight_prepacked=1 is not supported")
    int8_compute = int(node.attr("accuracy_level", 0)) == 4
    zp_given = node.inputs[3] if has_input(node, 3) else ""
    if bits == 8 and zp_given and request.value(zp_given).dtype != np.uint8:
        # as onnxruntime's CPU kernel: no answer of its to match
        raise NotImplementedError(f"{name}: 8-bit weights with float zero points (onnxruntime's CPU kernel declines them too)")
    const_b, const_s = const_input(node, request, 1), const_input(node, request, 2)
    const_zp = const_input(node, request, 3)
    ready = None
    if const_b is not None and const_s is not None and (const_zp is not None or not has_input(node, 3)):
        ready = _Weights(name, const_b, const_s, const_zp, n, k, bits, block)

    def matmul_nbits(a, b, scales, zero_points=None, g_idx=None, bias=None):
        w = ready if (ready is not None and b is const_b and scales is const_s and zero_points is const_zp) \
            else _Weights(name, b, scales, zero_points, n, k, bits, block)
        if a.shape[-1] != k:
            raise ValueError(f"{name}: A's last dimension is {a.shape[-1]}, K is {k}")
        lead = a.shape[:-1]
        if not a.size:  # no rows: an empty product (the blockwise passes reshape by -1)
            return np.zeros((*lead, n), a.dtype)
        rows = a.reshape(-1, k).astype(_F, copy=False)
        if int8_compute:  # onnxruntime's answer at accuracy_level 4: A quantized per block
            rows = quantize_a_blockwise(rows, block)
        y = _product(rows, w)
        if bias is not None:
            y += bias.astype(_F)
        return y.reshape(*lead, n).astype(a.dtype, copy=False)

    return matmul_nbits
