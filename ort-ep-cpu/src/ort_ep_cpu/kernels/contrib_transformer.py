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
from . import _jit, attention, elementwise
from ._util import as_dtype, as_float32
from .elementwise import compiled_quick_gelu
from .fused import gelu
from .norm import _stat_dtype
from .reduce import CompiledLayerNorm

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


@kernel("FastGelu", domain=MS)
def _fast_gelu(node, request):
    """The tanh approximation of Gelu on x (+ bias): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

    def fast_gelu(x, bias=None):
        if x.dtype == np.float16:  # in float32, rounded once, as onnxruntime computes it
            return as_dtype(fast_gelu(as_float32(x), None if bias is None else as_float32(bias)), x.dtype)
        return gelu(x, bias, tanh_form=True)

    return fast_gelu


@kernel("QuickGelu", domain=MS)
def _quick_gelu(node, request):
    alpha = float(node.attr("alpha", 1.702))

    def quick_gelu(x):
        if x.dtype == np.float16:  # in float32, rounded once, as onnxruntime computes it
            return as_dtype(quick_gelu(as_float32(x)), x.dtype)
        if x.dtype == np.float32:  # MLAS's logistic of alpha * x, times x: onnxruntime's values
            y = compiled_quick_gelu(x, alpha)
            if y is not None:
                return y
            with np.errstate(invalid="ignore"):  # inf * 0: NaN, as onnxruntime gives it
                return x * _jit.mlas_logistic(np.float32(alpha) * x)
        t = x.dtype.type
        return (x / (t(1) + np.exp(-t(alpha) * x))).astype(x.dtype, copy=False)

    return quick_gelu


@kernel("SkipSimplifiedLayerNormalization", domain=MS)
def _skip_simplified_layer_normalization(node, request):
    """RMS normalisation of input + skip (+ bias), times gamma; the optional fourth output is
    that sum, the third 1 / RMS (float32), the second (a mean, which RMS normalisation has not)
    zeros of the third's shape, as onnxruntime gives it. Computed in float32 (stash_type 1),
    a float64 input in float64 (the optimizer's fusion of a float64 graph)."""
    eps = float(node.attr("epsilon", 1e-5))
    n_out = len(node.outputs)
    wants_mean = n_out > 1 and bool(node.outputs[1])
    wants_inv = n_out > 2 and bool(node.outputs[2])
    compiled_layer_norm = CompiledLayerNorm(eps, rms=True)

    def skip_simplified(x, skip, gamma, bias=None):
        mean = np.zeros(x.shape[:-1] + (1,), np.float32) if wants_mean else None
        if not wants_inv:  # (the compiled rows give no 1 / RMS)
            compiled = compiled_layer_norm(x, skip, bias, gamma, None, total=n_out == 4)
            if compiled is not None:
                y, total = compiled
                return y if n_out == 1 else (y, mean, None, total)[:n_out]
        total = x + skip
        if bias is not None:
            total = total + bias
        work = np.dtype(_stat_dtype(total)).type  # float32, or float64 for float64 (onnxruntime's)
        t = total.astype(work, copy=False)
        inv = (1.0 / np.sqrt((t * t).mean(axis=-1, keepdims=True) + work(eps))).astype(work)
        y = (t * inv * gamma.astype(work)).astype(x.dtype, copy=False)
        return y if n_out == 1 else (y, mean, inv.astype(np.float32, copy=False), total)[:n_out]

    return skip_simplified


@kernel("SimplifiedLayerNormalization")
def _simplified_layer_normalization(node, request):
    """onnxruntime's RMS normalisation, registered by onnxruntime in the ONNX domain (LLM
    exports emit it there): x / sqrt(mean(x^2 over axes axis..) + epsilon) * scale, computed in
    float32 (stash_type 1), a float64 input in float64 as onnxruntime computes it; the optional
    second output is 1 / RMS (float32) with the normalised axes kept as 1. ort-core registers
    its schema so the model loads (``graph/ort_schemas.py``)."""
    eps = float(node.attr("epsilon", 1e-5))
    axis = int(node.attr("axis", -1))
    n_out = len(node.outputs)  # ["y", ""] is two outputs, the second omitted
    compiled_layer_norm = CompiledLayerNorm(np.float32(eps), rms=True)

    def simplified(x, scale):
        rank = x.ndim
        first = axis + rank if axis < 0 else axis
        if (n_out == 1 or not node.outputs[1]) and first == rank - 1:  # the compiled rows give no 1 / RMS
            compiled = compiled_layer_norm(x, None, None, scale, None, total=False)
            if compiled is not None:
                return compiled[0] if n_out == 1 else (compiled[0], None)
        axes = tuple(range(first, rank))
        work = np.dtype(_stat_dtype(x)).type  # float32, or float64 for float64 (onnxruntime's)
        t = x.astype(work, copy=False)
        inv = (1.0 / np.sqrt((t * t).mean(axis=axes, keepdims=True) + work(eps))).astype(work)
        y = (t * inv * scale.astype(work)).astype(scale.dtype, copy=False)
        return y if n_out == 1 else (y, inv.astype(np.float32, copy=False))[:n_out]

    return simplified


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



_GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
               "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale", "v_scale",
               "q_norm_weight", "k_norm_weight", "query_seqlens")


@kernel("GroupQueryAttention", domain=MS)
def _group_query_attention(node, request):
    """onnxruntime's GroupQueryAttention on the CPU: query heads share key/value heads in groups,
    the new keys and values are written after each row's past (``seqlens_k`` + 1 is each row's
    total length), attention is causal from each row's past length on, optionally within a
    local window, with rotary embeddings (do_rotary) and softcap. Decoder-only LLM exports
    (one prompt, then one token at a time) use it."""
    where = f"GroupQueryAttention {node.name!r}"
    for k, name in enumerate(_GQA_INPUTS):
        if k >= 9 and k < len(node.inputs) and node.inputs[k]:
            raise NotImplementedError(f"{where}: input {name} is not supported by the CPU kernel")
    if len(node.outputs) > 3 and node.outputs[3]:
        raise NotImplementedError(f"{where}: output output_qk is not supported")
    for name in ("smooth_softmax", "qk_output", "k_quant_type", "v_quant_type"):
        value = node.attr(name, 0)
        if value not in (0, "NONE", b"NONE", None, ""):
            raise NotImplementedError(f"{where}: attribute {name}={value!r} is not supported")
    heads, kv_heads = int(node.attr("num_heads")), int(node.attr("kv_num_heads"))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"{where}: num_heads ({heads}) must be a positive multiple of kv_num_heads ({kv_heads})")
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    window = int(node.attr("local_window_size", -1))
    do_rotary, interleaved = bool(node.attr("do_rotary", 0)), bool(node.attr("rotary_interleaved", 0))
    n_out = len(node.outputs)

    def rotate(x, cos, sin, pos):  # x (B, S, heads, H); pos (B, S)
        dim = cos.shape[1] * 2
        c, s = cos[pos][:, :, None, :], sin[pos][:, :, None, :]
        rot = x[..., :dim]
        x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., : dim // 2], rot[..., dim // 2:])
        real, imag = c * x1 - s * x2, s * x1 + c * x2
        rot = np.stack((real, imag), axis=-1).reshape(rot.shape) if interleaved else np.concatenate((real, imag), -1)
        return np.concatenate((rot, x[..., dim:]), axis=-1)

    def gqa(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None, total_sequence_length=None,
            cos_cache=None, sin_cache=None, *unused):
        batch, seq = query.shape[:2]
        if key is None:  # packed QKV
            head = query.shape[2] // (heads + 2 * kv_heads)
            query, key, value = np.split(query, [heads * head, (heads + kv_heads) * head], axis=2)
        head = query.shape[2] // heads
        if query.shape[2] != heads * head or key.shape[2] != kv_heads * head or value.shape[2] != kv_heads * head:
            raise ValueError(f"{where}: query {query.shape}, key {key.shape}, value {value.shape} do not fit "
                             f"num_heads={heads}, kv_num_heads={kv_heads}")
        total = np.asarray(seqlens_k).astype(np.int64).reshape(batch) + 1  # each row's total length
        max_total = int(np.asarray(total_sequence_length).reshape(-1)[0])
        first_prompt = past_key is None or past_key.shape[2] == 0
        past = np.zeros(batch, np.int64) if first_prompt else total - seq
        q = query.reshape(batch, seq, heads, head).astype(np.float32)
        k = key.reshape(batch, seq, kv_heads, head).astype(np.float32)
        v = value.reshape(batch, seq, kv_heads, head).astype(np.float32)
        if do_rotary:
            pos = past[:, None] + np.arange(seq)[None, :]
            q, k = rotate(q, cos_cache, sin_cache, pos), rotate(k, cos_cache, sin_cache, pos)
        buffer = 0 if past_key is None else past_key.shape[2]
        length = max(buffer, max_total)
        present_k = np.zeros((batch, kv_heads, length, head), np.float32)
        present_v = np.zeros_like(present_k)
        for b in range(batch):
            p = int(past[b])
            if p:
                present_k[b, :, :p] = past_key[b, :, :p]
                present_v[b, :, :p] = past_value[b, :, :p]
            present_k[b, :, p:p + seq] = k[b].transpose(1, 0, 2)
            present_v[b, :, p:p + seq] = v[b].transpose(1, 0, 2)
        scale = np.float32(scale_attr or 1.0 / np.sqrt(head))
        group = heads // kv_heads
        qh = q.transpose(0, 2, 1, 3)  # (B, N, S, H)
        kh = np.repeat(present_k, group, axis=1)  # (B, N, L, H): each kv head serves `group` query heads
        vh = np.repeat(present_v, group, axis=1)
        scores = np.matmul(qh, kh.transpose(0, 1, 3, 2)) * scale  # (B, N, S, L)
        if softcap > 0:
            scores = softcap * np.tanh(scores / softcap)
        keys = np.arange(length)[None, None, :]
        query_pos = past[:, None, None] + np.arange(seq)[None, :, None]  # (B, S, 1)
        allowed = (keys <= query_pos) & (keys < total[:, None, None])
        if window > 0:
            allowed &= keys > query_pos - window
        scores = np.where(allowed[:, None], scores, -np.inf)
        # a query row that may see no key (a padded row whose window holds only padding) gives
        # 0, as onnxruntime's does, not the NaN of -inf - -inf
        row_max = scores.max(axis=-1, keepdims=True)
        scores -= np.where(np.isneginf(row_max), np.float32(0), row_max)
        probs = elementwise.exp(scores)
        sums = probs.sum(axis=-1, keepdims=True)
        probs /= np.where(sums == 0, np.float32(1), sums)
        out = np.matmul(probs, vh).transpose(0, 2, 1, 3).reshape(batch, seq, heads * head).astype(query.dtype)
        outs = (out, present_k.astype(query.dtype), present_v.astype(query.dtype))[:n_out]
        return outs[0] if n_out == 1 else outs

    return gqa
