"""Attention: ONNX Attention (opset 23+) and onnxruntime's com.microsoft MultiHeadAttention and
Attention (the ops ort-core's optimizer fuses BERT-style attention into).

Scores, masks and softmax are computed in float32 (as onnxruntime's CUDA kernels do) with two
batched products on cuBLAS. Where cuDNN's fused attention applies (float16, no additive mask,
head size a multiple of 8 up to 128), the device's ``sdpa`` runs it in one cuDNN graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_core import KernelRequest, NodeView

from .registry import Body, Runtime, op

HALF_AND_FLOAT = frozenset({np.dtype(np.float32), np.dtype(np.float16)})
INT_MASKS = frozenset(np.dtype(t) for t in (np.int32, np.int64, np.bool_))


def split_heads(x: Any, heads: int) -> Any:
    """(B, S, N*H) -> (B, N, S, H)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def attend(rt: Runtime, q: Any, k: Any, v: Any, scale: float, bias: Any = None, causal_offset: int | None = None,
           softcap: float = 0.0) -> Any:
    """softmax(q k^T * scale + bias) v over (B, N, S, H) arrays, float32 inside; rows whose keys
    are all masked give 0. ``causal_offset``: query i sees keys j <= i + offset."""
    xp, dev = rt.xp, rt.dev
    dtype = q.dtype
    hq, hk = q.shape[1], k.shape[1]
    if (bias is None and softcap == 0 and dtype == np.float16 and q.shape[3] % 8 == 0 and q.shape[3] <= 128
            and v.shape[3] == q.shape[3] and causal_offset in (None, 0) and getattr(dev, "sdpa", None) is not None):
        y = dev.sdpa(q, k, v, scale, causal_offset == 0)
        if y is not None:
            return y
    if hq != hk:  # grouped / multi-query attention: each KV head serves hq / hk query heads
        k, v = xp.repeat(k, hq // hk, axis=1), xp.repeat(v, hq // hk, axis=1)
    scores = dev.matmul(q.astype(np.float32), xp.swapaxes(k.astype(np.float32), 2, 3)) * np.float32(scale)
    if softcap > 0:
        scores = softcap * xp.tanh(scores / softcap)
    if bias is not None:
        scores = scores + bias
    if causal_offset is not None:
        sq, skv = scores.shape[-2:]
        # made on the device: no host->device copy in a run (a CUDA graph capture allows none)
        allowed = xp.arange(skv)[None, :] <= xp.arange(sq)[:, None] + causal_offset
        scores = xp.where(allowed, scores, np.float32(-np.inf))
    row_max = xp.max(scores, axis=-1, keepdims=True)
    e = xp.exp(scores - xp.where(row_max == -np.inf, 0, row_max))
    total = xp.sum(e, axis=-1, keepdims=True)
    probs = e / xp.where(total == 0, 1, total)
    return dev.matmul(probs, v.astype(np.float32)).astype(dtype)


# ------------------------------------------------------------------------------ ONNX Attention
def _onnx_attention_check(node: NodeView, rt: Runtime) -> str | None:
    if len(node.inputs) > 6 and node.inputs[6]:
        return "Attention with nonpad_kv_seqlen has no CUDA kernel"
    if len(node.outputs) > 3 and node.outputs[3]:
        return "Attention's qk_matmul_output has no CUDA kernel"
    for name in ("left_window_size", "right_window_size"):
        if int(node.attr(name, -1)) >= 0:
            return f"Attention with {name} has no CUDA kernel"
    if node.attr("softmax_precision") is not None:
        return "Attention with softmax_precision has no CUDA kernel (softmax is float32)"
    return None


@op("Attention", since=23, dtypes=HALF_AND_FLOAT | frozenset({np.dtype(np.bool_)}), check=_onnx_attention_check)
def _onnx_attention(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    xp = rt.xp
    a = node.attr
    scale_attr = a("scale")
    causal = bool(a("is_causal", 0))
    q_heads, kv_heads = a("q_num_heads"), a("kv_num_heads")
    softcap = float(a("softcap", 0.0))
    n_out = len(node.outputs)

    def run(q, k, v, attn_mask=None, past_key=None, past_value=None):
        if (past_key is None) != (past_value is None):
            raise ValueError(f"Attention {node.name!r}: inputs past_key and past_value must be given together")
        three_d = q.ndim == 3
        if three_d:
            if not q_heads or not kv_heads:
                raise ValueError(f"Attention {node.name!r}: 3-D inputs need attributes q_num_heads and kv_num_heads")
            q, k, v = split_heads(q, int(q_heads)), split_heads(k, int(kv_heads)), split_heads(v, int(kv_heads))
        if past_key is not None:
            k, v = xp.concatenate((past_key, k), axis=2), xp.concatenate((past_value, v), axis=2)
        scale = float(scale_attr) if scale_attr else 1.0 / float(np.sqrt(q.shape[3]))
        bias = None
        if attn_mask is not None:
            skv = k.shape[2]
            pad = skv - attn_mask.shape[-1]  # a mask shorter than the keys masks the rest out
            if attn_mask.dtype == np.bool_:
                bias = xp.where(attn_mask, np.float32(0), np.float32(-np.inf))
            else:
                bias = attn_mask.astype(np.float32)
            if pad > 0:
                bias = xp.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        offset = (0 if past_key is None else past_key.shape[2]) if causal else None
        y = attend(rt, q, k, v, scale, bias, offset, softcap)
        if three_d:
            y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
        outs = [y, k, v]
        return outs[:n_out] if n_out > 1 else y

    return Body(run, n_outputs=n_out)


# ------------------------------------------------------------------------------ com.microsoft
def padding_bias(xp: Any, mask: Any, batch: int, seq: int, kv_seq: int, fill: float) -> Any:
    """A key padding mask (MultiHeadAttention's key_padding_mask, Attention's mask_index: (B,)
    lengths, (B, L) or (B, S, L) with 1 = attend) as an additive float32 bias on (B, N, S, L)."""
    if mask.shape == (batch,):
        keep = xp.arange(kv_seq)[None, :] < mask[:, None]
        shape = (batch, 1, 1, kv_seq)
    elif mask.shape == (batch, kv_seq):
        keep, shape = mask > 0, (batch, 1, 1, kv_seq)
    elif mask.shape == (batch, seq, kv_seq):
        keep, shape = mask > 0, (batch, 1, seq, kv_seq)
    else:
        raise ValueError(f"mask has shape {tuple(mask.shape)}; expected ({batch},), ({batch}, {kv_seq}) or "
                         f"({batch}, {seq}, {kv_seq})")
    return xp.where(keep, np.float32(0), np.float32(fill)).reshape(shape)


def _ms_check(supported_inputs: int, what: str):
    def check(node: NodeView, rt: Runtime) -> str | None:
        extra = [n for n in node.inputs[supported_inputs:] if n]
        if extra:
            return f"{what} with input {extra[0]!r} (past state) has no CUDA kernel"
        if len([o for o in node.outputs[1:] if o]):
            return f"{what}: only the first output has a CUDA kernel"
        if not node.attr("num_heads"):
            return f"{what}: attribute num_heads is required"
        query = node.graph.value(node.inputs[0])
        if query.dtype is not None and query.dtype not in HALF_AND_FLOAT:
            return f"{what} on {query.dtype} has no CUDA kernel (float32 and float16)"
        shape = query.shape
        if shape is not None and len(shape) != 3:
            return f"{what}: input of rank {len(shape)} has no CUDA kernel (3-D only)"
        if what == "MultiHeadAttention" and (len(node.inputs) < 3 or not node.inputs[1] or not node.inputs[2]):
            return "MultiHeadAttention with packed QKV (no key and value inputs) has no CUDA kernel"
        return None

    return check


def _heads_attention(node: NodeView, rt: Runtime, q: Any, k: Any, v: Any, mask: Any, attention_bias: Any) -> Any:
    xp = rt.xp
    heads = int(node.attr("num_heads"))
    batch, seq, hidden = q.shape
    kv_seq = k.shape[1]
    scale = float(node.attr("scale", 0.0) or 0.0) or 1.0 / float(np.sqrt(hidden // heads))
    fill = float(node.attr("mask_filter_value", -10000.0))
    bias = None
    if attention_bias is not None:
        bias = attention_bias.astype(np.float32)
    if mask is not None:
        pad = padding_bias(xp, mask, batch, seq, kv_seq, fill)
        bias = pad if bias is None else bias + pad
    causal = 0 if node.attr("unidirectional", 0) else None
    y = attend(rt, split_heads(q, heads), split_heads(k, heads), split_heads(v, heads), scale, bias, causal)
    return y.transpose(0, 2, 1, 3).reshape(batch, seq, -1)


@op("MultiHeadAttention", domain="com.microsoft", dtypes=HALF_AND_FLOAT | INT_MASKS,
    check=_ms_check(6, "MultiHeadAttention"))
def _multi_head_attention(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    def run(query, key, value, bias=None, key_padding_mask=None, attention_bias=None):
        if bias is not None:
            hidden = query.shape[2]
            query, key, value = query + bias[:hidden], key + bias[hidden:2 * hidden], value + bias[2 * hidden:]
        return _heads_attention(node, rt, query, key, value, key_padding_mask, attention_bias)

    return Body(run)


@op("Attention", domain="com.microsoft", dtypes=HALF_AND_FLOAT | INT_MASKS, check=_ms_check(4, "Attention"))
def _ms_attention(node: NodeView, request: KernelRequest, rt: Runtime) -> Body:
    """The input projection to Q, K and V as one cuBLAS product by the merged weights, then the
    attention of MultiHeadAttention on its three column blocks."""
    sizes = [int(s) for s in node.attr("qkv_hidden_sizes") or []]
    dev = rt.dev

    def run(data, weights, bias=None, mask_index=None):
        qkv = dev.matmul(data, weights)
        if bias is not None:
            qkv = qkv + bias
        q_size = sizes[0] if sizes else qkv.shape[2] // 3
        k_size = sizes[1] if sizes else q_size
        q, k, v = qkv[..., :q_size], qkv[..., q_size:q_size + k_size], qkv[..., q_size + k_size:]
        return _heads_attention(node, rt, q, k, v, mask_index, None)

    return Body(run)
