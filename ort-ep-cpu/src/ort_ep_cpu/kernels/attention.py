"""Attention (opset 23-25: MHA/GQA/MQA, masks, causal with cache offsets, sliding windows,
softcap, KV cache outputs) and RotaryEmbedding (opset 23)."""

from __future__ import annotations

import numpy as np
import onnx

from ..registry import kernel


def _heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, n_heads, hidden // n_heads).transpose(0, 2, 1, 3)


def _allowed_bias(allowed: np.ndarray, dtype) -> np.ndarray:
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def _attention_builder(node, request):
    scale_attr = node.attr("scale")
    is_causal = bool(node.attr("is_causal", 0))
    q_heads_attr = node.attr("q_num_heads")
    kv_heads_attr = node.attr("kv_num_heads")
    softcap = float(node.attr("softcap", 0.0))
    precision = node.attr("softmax_precision")
    mode = int(node.attr("qk_matmul_output_mode", 0))
    left = int(node.attr("left_window_size", -1))
    right = int(node.attr("right_window_size", -1))
    n_out = len(node.outputs)

    def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        if (past_key is None) != (past_value is None):
            raise ValueError(f"Attention {node.name!r}: inputs past_key and past_value must be given together")
        three_d = q.ndim == 3
        if three_d:
            if not q_heads_attr or not kv_heads_attr:
                raise ValueError(f"Attention {node.name!r}: 3-D inputs need attributes q_num_heads and kv_num_heads")
            q, k, v = _heads(q, int(q_heads_attr)), _heads(k, int(kv_heads_attr)), _heads(v, int(kv_heads_attr))
        dt = q.dtype
        scale = float(scale_attr) if scale_attr else 1.0 / np.sqrt(q.shape[3])
        root = dt.type(np.sqrt(scale))  # scale Q and K by sqrt(scale) each, as the spec's graph does
        if past_key is not None:
            k = np.concatenate((past_key, k), axis=2)
            v = np.concatenate((past_value, v), axis=2)
        present_k, present_v = k, v
        sq, skv = q.shape[2], k.shape[2]
        i = np.arange(sq)[:, None]
        j = np.arange(skv)[None, :]
        if past_key is None and nonpad_kv_seqlen is not None:
            offset = (nonpad_kv_seqlen.reshape(-1) - sq).reshape(-1, 1, 1, 1)  # per batch
        else:
            offset = np.int64(0 if past_key is None else past_key.shape[2])
        bias = None  # additive (…, sq, skv) bias; None while nothing is masked

        def add(b):
            return b if bias is None else bias + b

        if attn_mask is not None:
            mask = attn_mask
            pad = skv - mask.shape[-1]  # a mask shorter than the keys masks the rest out
            if pad > 0:
                fill = False if mask.dtype == np.bool_ else -np.inf
                mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=fill)
            bias = add(_allowed_bias(mask, dt) if mask.dtype == np.bool_ else mask.astype(dt, copy=False))
        if is_causal:
            bias = add(_allowed_bias(j <= i + offset, dt))
        if left >= 0 or right >= 0:
            diff = (i + offset) - j
            allowed = np.ones(diff.shape, bool)
            if left >= 0:
                allowed &= diff <= left
            if right >= 0:
                allowed &= -diff <= right
            bias = add(_allowed_bias(allowed, dt))
        if nonpad_kv_seqlen is not None:
            keep = np.arange(skv)[None, :] < nonpad_kv_seqlen.reshape(-1, 1)
            bias = add(_allowed_bias(keep, dt).reshape(-1, 1, 1, skv))
        hq, hk = q.shape[1], k.shape[1]
        if hq != hk:  # grouped / multi-query attention: each KV head serves hq/hk query heads
            k = np.repeat(k, hq // hk, axis=1)
            v = np.repeat(v, hq // hk, axis=1)
        scores = np.matmul(q * root, np.swapaxes(k * root, 2, 3)).astype(dt, copy=False)
        if softcap > 0:
            scores = softcap * np.tanh(scores / softcap)
        qk_out = scores
        if bias is not None:
            scores = scores + bias
        if mode == 2:
            qk_out = scores
        if precision:
            scores = scores.astype(onnx.helper.tensor_dtype_to_np_dtype(int(precision)))
        elif scores is qk_out:
            scores = scores.copy()  # the softmax below works in place
        # softmax in place; rows whose keys are all masked give 0, not NaN
        row_max = scores.max(axis=-1, keepdims=True)
        np.subtract(scores, np.where(np.isneginf(row_max), 0, row_max).astype(scores.dtype), out=scores)
        np.exp(scores, out=scores)
        total = scores.sum(axis=-1, keepdims=True)
        scores /= np.where(total == 0, 1, total).astype(scores.dtype)
        probs = scores
        if bias is not None:
            empty = np.isneginf(np.max(bias, axis=-1, keepdims=True))
            if empty.any():
                probs = np.where(empty, 0, probs).astype(probs.dtype, copy=False)
        if mode == 3:
            qk_out = probs
        y = np.matmul(probs.astype(dt, copy=False), v).astype(dt, copy=False)  # bfloat16 matmul gives float32
        if three_d:
            y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], sq, -1)
        outs = (y, present_k, present_v, qk_out.astype(dt, copy=False))
        return y if n_out == 1 else outs[:n_out]

    return attention


for _since in (23, 24, 25):
    kernel("Attention", since=_since)(_attention_builder)


@kernel("RotaryEmbedding", since=23)
def _rotary(node, request):
    interleaved = bool(node.attr("interleaved", 0))
    rot_attr = int(node.attr("rotary_embedding_dim", 0))
    num_heads = int(node.attr("num_heads", 0) or 0)

    def rotary(x, cos_cache, sin_cache, position_ids=None):
        shape = x.shape
        if x.ndim == 4:
            xs = x.transpose(0, 2, 1, 3)  # (B, S, H, D)
        else:
            if not num_heads:
                raise ValueError(f"RotaryEmbedding {node.name!r}: 3-D input needs attribute num_heads")
            xs = x.reshape(shape[0], shape[1], num_heads, -1)
        dim = rot_attr or xs.shape[3]
        if position_ids is not None:
            cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
        cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
        rot = xs[..., :dim]
        if interleaved:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
        else:
            x1, x2 = rot[..., : dim // 2], rot[..., dim // 2 :]
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if interleaved:
            rot = np.stack((real, imag), axis=-1).reshape(rot.shape)
        else:
            rot = np.concatenate((real, imag), axis=-1)
        y = np.concatenate((rot, xs[..., dim:]), axis=-1).astype(x.dtype, copy=False)
        return y.transpose(0, 2, 1, 3) if x.ndim == 4 else y.reshape(shape)

    return rotary


_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


@kernel("LinearAttention", since=27)
def _linear_attention(node, request):
    rule = node.attr("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else str(rule)
    if rule not in _UPDATE_RULES:
        raise ValueError(f"LinearAttention {node.name!r}: attribute update_rule={rule!r}; valid values: {list(_UPDATE_RULES)}")
    hq, hkv = int(node.attr("q_num_heads", 0) or 0), int(node.attr("kv_num_heads", 0) or 0)
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ValueError(f"LinearAttention {node.name!r}: q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    n_out = len(node.outputs)

    def linear_attention(query, key, value, past_state=None, decay=None, beta=None):
        if gating and decay is None:
            raise ValueError(f"LinearAttention {node.name!r}: update_rule {rule!r} needs input decay")
        if delta and beta is None:
            raise ValueError(f"LinearAttention {node.name!r}: update_rule {rule!r} needs input beta")
        b, t, _ = query.shape
        dk, dv, group = query.shape[2] // hq, value.shape[2] // hkv, hq // hkv
        f32 = np.float32
        # (T, B, H, D) so that each time step is one contiguous slice
        q = query.reshape(b, t, hkv, group, dk).transpose(1, 0, 2, 3, 4).astype(f32)
        k = key.reshape(b, t, hkv, dk).transpose(1, 0, 2, 3).astype(f32)
        v = value.reshape(b, t, hkv, dv).transpose(1, 0, 2, 3).astype(f32)
        if gating:
            per_key = decay.shape[-1] == hkv * dk  # decay per key dimension, else per head
            g = np.exp(decay.reshape(b, t, hkv, dk if per_key else 1).transpose(1, 0, 2, 3).astype(f32))
        if delta:
            bt = beta.reshape(b, t, beta.shape[-1], 1).transpose(1, 0, 2, 3).astype(f32)
        if past_state is not None and past_state.shape != (b, hkv, dk, dv):
            raise ValueError(f"LinearAttention {node.name!r}: input past_state has shape {past_state.shape}, expected {(b, hkv, dk, dv)}")
        state = np.zeros((b, hkv, dk, dv), f32) if past_state is None else past_state.astype(f32)
        scale = scale_attr or 1.0 / np.sqrt(dk)
        out = np.empty((t, b, hkv, group, dv), f32)
        for i in range(t):  # the recurrence is sequential in time by definition
            if gating:
                state = state * g[i][..., None]
            vi = v[i]
            if delta:
                retrieved = np.matmul(k[i][:, :, None, :], state)[:, :, 0, :]  # S^T k
                vi = bt[i] * (vi - retrieved)
            state = state + k[i][..., :, None] * vi[..., None, :]
            out[i] = np.matmul(q[i], state)  # (B, Hkv, G, dk) @ (B, Hkv, dk, dv)
        y = (out * f32(scale)).transpose(1, 0, 2, 3, 4).reshape(b, t, hq * dv).astype(query.dtype)
        present = state.astype(query.dtype if past_state is None else past_state.dtype)
        return y if n_out == 1 else (y, present)

    return linear_attention
