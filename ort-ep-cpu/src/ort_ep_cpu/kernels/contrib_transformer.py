"""onnxruntime's com.microsoft transformer fusions that ``onnxruntime.transformers.optimizer``
and LLM exporters emit: EmbedLayerNormalization, FastGelu, QuickGelu,
SkipSimplifiedLayerNormalization and RotaryEmbedding (BiasGelu, Gelu, SkipLayerNormalization,
Attention and MultiHeadAttention are in ``fused.py``, ``norm.py`` and ``attention.py``).
Each computes in float32 for float32 inputs, with onnxruntime's defaults for omitted inputs
and attributes.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from . import attention

MS = "com.microsoft"


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    y = centred / np.sqrt(var + x.dtype.type(eps)) * gamma
    return y if beta is None else y + beta


@kernel("EmbedLayerNormalization", domain=MS)
def _embed_layer_normalization(node, request):
    """LayerNorm(word[input_ids] + position[position_ids or 0..S-1] + segment[segment_ids]);
    mask_index is the mask's row sums (int32), as onnxruntime's Attention takes it."""
    eps = float(node.attr("epsilon", 1e-12))
    name = f"EmbedLayerNormalization {node.name!r}"
    n_out = len(node.outputs)

    def embed(input_ids, segment_ids=None, word=None, position=None, segment=None, gamma=None, beta=None,
              mask=None, position_ids=None):
        batch, seq = input_ids.shape
        for label, ids, table in (("input_ids", input_ids, word), ("segment_ids", segment_ids, segment)):
            if ids is not None and table is not None and ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
                raise IndexError(f"{name}: {label} out of range [0, {table.shape[0]})")
        pos = np.arange(seq) if position_ids is None else position_ids
        total = word[input_ids] + position[pos]  # (S, H) or (B, S, H)
        if segment_ids is not None and segment is not None:
            total = total + segment[segment_ids]
        total = total.astype(word.dtype, copy=False)
        out = _layer_norm(total, gamma, beta, eps).astype(word.dtype, copy=False)
        if mask is None:
            mask_index = np.zeros(batch, np.int32)
        else:
            mask_index = mask.astype(np.int64).sum(axis=1).astype(np.int32)
        outs = (out, mask_index, total)[:n_out]
        return outs[0] if n_out == 1 else outs

    return embed


_SQRT_2_OVER_PI = 0.7978845608028654


@kernel("FastGelu", domain=MS)
def _fast_gelu(node, request):
    """The tanh approximation of Gelu on x (+ bias): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

    def fast_gelu(x, bias=None):
        v = x if bias is None else x + bias
        t = v.dtype.type
        inner = t(_SQRT_2_OVER_PI) * (v + t(0.044715) * v * v * v)
        return (t(0.5) * v * (t(1) + np.tanh(inner))).astype(x.dtype, copy=False)

    return fast_gelu


@kernel("QuickGelu", domain=MS)
def _quick_gelu(node, request):
    alpha = float(node.attr("alpha", 1.702))

    def quick_gelu(x):
        t = x.dtype.type
        return (x / (t(1) + np.exp(-t(alpha) * x))).astype(x.dtype, copy=False)

    return quick_gelu


@kernel("SkipSimplifiedLayerNormalization", domain=MS)
def _skip_simplified_layer_normalization(node, request):
    """RMS normalisation of input + skip (+ bias), times gamma; the optional fourth output is
    that sum, the third 1 / RMS (float32), the second (a mean) unset, as onnxruntime leaves it."""
    eps = float(node.attr("epsilon", 1e-5))
    n_out = len(node.outputs)
    if n_out > 1 and node.outputs[1]:
        raise NotImplementedError(f"SkipSimplifiedLayerNormalization {node.name!r}: output 1 (mean) is not produced")

    def skip_simplified(x, skip, gamma, bias=None):
        total = x + skip
        if bias is not None:
            total = total + bias
        t32 = total.astype(np.float32, copy=False)
        inv = (1.0 / np.sqrt((t32 * t32).mean(axis=-1, keepdims=True) + np.float32(eps))).astype(np.float32)
        y = (t32 * inv * gamma.astype(np.float32)).astype(x.dtype, copy=False)
        return y if n_out == 1 else (y, None, inv, total)[:n_out]

    return skip_simplified


@kernel("RotaryEmbedding", domain=MS)
def _ms_rotary_embedding(node, request):
    """com.microsoft RotaryEmbedding(input, position_ids, cos_cache, sin_cache): position_ids is
    (B, S) or one start offset; the rotation is the one of ONNX's RotaryEmbedding-23."""
    if node.attr("is_packed_batching", 0):
        raise NotImplementedError(f"RotaryEmbedding {node.name!r}: is_packed_batching=1 is not supported")
    rotate = attention._rotary(node, request)

    def rotary(x, position_ids, cos_cache, sin_cache):
        batch, seq = x.shape[0], (x.shape[2] if x.ndim == 4 else x.shape[1])
        pos = np.asarray(position_ids).astype(np.int64)
        if pos.size == 1:  # a start offset: positions offset .. offset + S - 1 for every row
            pos = np.broadcast_to(int(pos.reshape(-1)[0]) + np.arange(seq), (batch, seq))
        return rotate(x, cos_cache, sin_cache, pos)

    return rotary

