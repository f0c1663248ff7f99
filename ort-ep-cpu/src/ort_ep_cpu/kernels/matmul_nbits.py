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
per block: y[m, n] += scale * (a_block . codes) - scale * zero_point * sum(a_block).
"""

from __future__ import annotations

import numpy as np

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
        self.codes = _unpack(b.reshape(n, -1), bits, blocks * block)  # K padded to whole blocks
        self.scales = scales.reshape(n, blocks).astype(_F)
        if zero_points is None:
            zp = np.full((n, blocks), 1 << (bits - 1), _F)
        elif zero_points.dtype == np.uint8:
            zp = _unpack(zero_points.reshape(n, -1), bits, blocks).astype(_F)
        else:  # float zero points, one per block
            zp = zero_points.reshape(n, blocks).astype(_F)
        self.offsets = (self.scales * zp).astype(_F)  # w = code * scale - scale * zp
        self.n, self.k, self.block, self.blocks = n, k, block, blocks


#: at most this many rows of A take the compiled loop over packed codes
_FEW_ROWS = 8
_compiled = None
_compile_lock = __import__("threading").Lock()


def _few_rows_kernel():
    """The compiled 4-bit loop, or None (numba absent or switched off)."""
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
            _compiled = numba.njit(parallel=True, cache=True)(_packed4_loop(numba.prange))
    return _compiled or None


def _packed4_loop(prange):
    """The 4-bit loop for numba; ``prange`` (numba's parallel range) comes in as a closure
    constant, so this module imports numba only when the loop is first wanted."""

    def packed4(a, packed, scales, offsets, k, y):  # pragma: no cover - compiled by numba
        m_rows = a.shape[0]
        n_rows, blocks, half = packed.shape
        block = 2 * half
        for n in prange(n_rows):
            for m in range(m_rows):
                total = 0.0
                for b in range(blocks):
                    k0 = b * block
                    acc = 0.0
                    asum = 0.0
                    for j in range(half):
                        byte = packed[n, b, j]
                        kk = k0 + 2 * j
                        if kk < k:
                            x = a[m, kk]
                            acc += x * (byte & 15)
                            asum += x
                        if kk + 1 < k:
                            x = a[m, kk + 1]
                            acc += x * (byte >> 4)
                            asum += x
                    total += scales[n, b] * acc - offsets[n, b] * asum
                y[m, n] = total

    return packed4


def _product(a: np.ndarray, w: _Weights) -> np.ndarray:
    """a (M, K) float32 @ dequantized(w)^T, a slab of whole blocks of K at a time."""
    m = a.shape[0]
    if m <= _FEW_ROWS and w.packed is not None and (compiled := _few_rows_kernel()) is not None:
        y = np.empty((m, w.n), _F)
        compiled(np.ascontiguousarray(a), w.packed, w.scales, w.offsets, w.k, y)
        return y
    y = np.zeros((m, w.n), _F)
    per_slab = max(1, _SLAB_BYTES // (4 * w.n * w.block))  # blocks per slab
    for first in range(0, w.blocks, per_slab):
        last = min(first + per_slab, w.blocks)
        nb = last - first
        slab = np.empty((w.n, nb, w.block), _F)
        codes = w.codes[:, first * w.block: last * w.block].reshape(w.n, nb, w.block)
        np.multiply(codes, w.scales[:, first:last, None], out=slab, casting="unsafe")
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
        rows = a.reshape(-1, k).astype(_F, copy=False)
        if int8_compute:  # onnxruntime's answer at accuracy_level 4: A quantized per block
            rows = quantize_a_blockwise(rows, block)
        y = _product(rows, w)
        if bias is not None:
            y += bias.astype(_F)
        return y.reshape(*lead, n).astype(a.dtype, copy=False)

    return matmul_nbits
