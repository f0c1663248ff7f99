"""Attention (opset 23-25: MHA/GQA/MQA, masks, causal with cache offsets, sliding windows,
softcap, KV cache outputs), RotaryEmbedding (opset 23), LinearAttention (opset 27) and
onnxruntime's com.microsoft Attention and MultiHeadAttention (the ops ort-core's optimizer
fuses BERT-style attention into)."""

from __future__ import annotations

import numpy as np
import onnx

from ..registry import kernel
from ._util import constant_weight, ones_vector
from .elementwise import exp
from .nn import _constant_product, batched_product, matmul
from .reduce import EXP_SUM_TINY, row_sums


def _heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, n_heads, hidden // n_heads).transpose(0, 2, 1, 3)


def _product(a: np.ndarray, b: np.ndarray, plans: dict, out: np.ndarray | None = None) -> np.ndarray:
    """The heads' batched product a @ b (into ``out`` where given): oneDNN's on the session's
    threads where ``batched_product`` takes it, else numpy's (one BLAS call a head, on one
    thread while oneDNN is in use)."""
    y = batched_product(a, b, plans, out)
    return np.matmul(a, b, out=out) if y is None else y


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
    plans: dict = {}  # oneDNN's batched products, by shapes and strides

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
        scores = _product(q * root, np.swapaxes(k * root, 2, 3), plans).astype(dt, copy=False)
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
        exp(scores, out=scores)
        total = scores.sum(axis=-1, keepdims=True)
        scores /= np.where(total == 0, 1, total).astype(scores.dtype)
        probs = scores
        if bias is not None:
            empty = np.isneginf(np.max(bias, axis=-1, keepdims=True))
            if empty.any():
                probs = np.where(empty, 0, probs).astype(probs.dtype, copy=False)
        if mode == 3:
            qk_out = probs
        y = _product(probs.astype(dt, copy=False), v, plans).astype(dt, copy=False)  # bfloat16 matmul gives float32
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
            xs = x.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)  # (not -1: an empty x)
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


# --------------------------------------------------------------------------------------------
# com.microsoft MultiHeadAttention (onnxruntime's contrib op; ort-core's optimizer fuses BERT-style
# attention subgraphs into it)

_MS = "com.microsoft"
_MHA_INPUTS = ("query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key",
               "past_value", "past_sequence_length", "cache_indirection")
_MHA_SUPPORTED = _MHA_INPUTS[:6]
_MHA_OUTPUTS = ("output", "present_key", "present_value", "qk")


def _mha_unsupported(node) -> str | None:
    """The first input/output/form of ``node`` this kernel does not support, as a sentence."""
    where = f"MultiHeadAttention {node.name!r}"
    for k in range(len(_MHA_SUPPORTED), len(node.inputs)):
        if node.inputs[k]:
            name = _MHA_INPUTS[k] if k < len(_MHA_INPUTS) else f"#{k}"
            return (f"{where}: input {name} is not supported by the CPU kernel (supported inputs: "
                    f"{', '.join(_MHA_SUPPORTED)})")
    for k in range(1, len(node.outputs)):
        if node.outputs[k]:
            name = _MHA_OUTPUTS[k] if k < len(_MHA_OUTPUTS) else f"#{k}"
            return f"{where}: output {name} is not supported by the CPU kernel (only output)"
    if not node.attr("num_heads"):
        return f"{where}: attribute num_heads is required (a positive int)"
    if len(node.inputs) < 3 or not node.inputs[1] or not node.inputs[2]:
        return (f"{where}: inputs key and value are required by the CPU kernel (packed QKV in query "
                "is not supported)")
    return None


def _check_mha(node) -> str | None:
    reason = _mha_unsupported(node)
    if reason is not None:
        return reason
    query = node.graph.value(node.inputs[0])
    if query.dtype is not None and query.dtype not in (np.float32, np.float16):
        return f"MultiHeadAttention {node.name!r}: input query is {query.type}; the CPU kernel takes float and float16"
    for k, name, rank in ((0, "query", 3), (1, "key", 3), (2, "value", 3)):
        shape = node.graph.value(node.inputs[k]).shape
        if shape is not None and len(shape) != rank:
            return _mha_rank_error(node.name, name, len(shape))
    return None


def _mha_rank_error(node_name: str, name: str, rank: int) -> str:
    form = {("query", 5): "packed QKV", ("key", 5): "packed KV", ("key", 4): "key in (B, N, L, H) form",
            ("value", 4): "value in (B, N, L, H) form"}.get((name, rank), f"rank {rank}")
    return (f"MultiHeadAttention {node_name!r}: input {name} as {form} is not supported by the CPU kernel "
            f"(it takes {name} as (batch, sequence, hidden))")


def _padding_bias(mask: np.ndarray, batch: int, seq: int, kv_seq: int, fill: np.float32, where: str,
                  input_name: str = "key_padding_mask") -> np.ndarray:
    """A key padding mask (MultiHeadAttention's key_padding_mask, Attention's mask_index) as an
    additive bias broadcastable to (B, N, S, L): 0 where a key is attended, ``mask_filter_value``
    where it is not (onnxruntime: a mask entry attends when > 0). Attention's mask_index may also
    be (2 * batch,): each key sequence's end (exclusive), then its start (inclusive)."""
    if mask.shape == (batch,):  # right padding given as each key sequence's length
        keep = np.arange(kv_seq)[None, :] < mask[:, None]
        shape = (batch, 1, 1, kv_seq)
    elif mask.shape == (2 * batch,) and input_name == "mask_index":  # each key sequence's end, then its start
        keys = np.arange(kv_seq)[None, :]
        keep = (keys < mask[:batch, None]) & (keys >= mask[batch:, None])
        shape = (batch, 1, 1, kv_seq)
    elif mask.shape == (batch, kv_seq):
        keep, shape = mask > 0, (batch, 1, 1, kv_seq)
    elif mask.shape == (batch, seq, kv_seq):
        keep, shape = mask > 0, (batch, 1, seq, kv_seq)
    else:
        forms = f"({batch},), ({batch}, {kv_seq}) or ({batch}, {seq}, {kv_seq})"
        for form, n in (("(3 * batch + 2)", 3 * batch + 2), ("(2 * batch)", 2 * batch)):
            if mask.shape == (n,):  # ((2 * batch) here: a key_padding_mask, which does not take it)
                raise ValueError(f"{where}: input {input_name} of shape {form} is not supported by the CPU "
                                 f"kernel; it takes {forms}")
        raise ValueError(f"{where}: input {input_name} has shape {mask.shape}; expected {forms}")
    return np.where(keep, np.float32(0), fill).reshape(shape)


@kernel("MultiHeadAttention", domain=_MS, check=_check_mha)
def _multi_head_attention(node, request):
    reason = _mha_unsupported(node)
    if reason is not None:
        raise ValueError(reason)
    return _only_first_output(node, _heads_attention(node, f"MultiHeadAttention {node.name!r}"))


def _only_first_output(node, run):
    """``run`` (giving the first output) for a node whose other outputs are all omitted: with
    them named "" (``["y", "", ""]``) the node still has several outputs, and a lone array
    would be taken apart as if it were one value per output (its rows)."""
    n_out = len(node.outputs)
    if n_out <= 1:
        return run
    rest = (None,) * (n_out - 1)
    return lambda *args: (run(*args), *rest)


def _heads_attention(node, where: str, mask_name: str = "key_padding_mask"):
    """The attention of com.microsoft MultiHeadAttention (and of Attention after its input
    projection): ``(query, key, value, bias, key_padding_mask, attention_bias) -> output`` for the
    node's num_heads, scale, mask_filter_value and unidirectional. ``where`` opens its errors,
    which call the padding mask ``mask_name``."""
    heads = int(node.attr("num_heads"))
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    fill = np.float32(node.attr("mask_filter_value", -10000.0))
    causal = bool(node.attr("unidirectional", 0))
    cache: dict[tuple, np.ndarray] = {}  # per run shape: ones vectors, causal masks
    plans: dict = {}  # oneDNN's batched products, by shapes and strides

    def cached(key: tuple, make) -> np.ndarray:
        value = cache.get(key)
        if value is None:
            if len(cache) > 64:  # many shapes (dynamic lengths): keep the cache small
                cache.clear()
            value = cache[key] = make()
        return value

    def multi_head_attention(query, key, value, bias=None, key_padding_mask=None, attention_bias=None,
                             past_length: int = 0):
        for arg, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim != 3:
                raise ValueError(_mha_rank_error(node.name, arg, x.ndim))
        dtype = query.dtype
        if dtype not in (np.float32, np.float16):
            raise ValueError(f"{where}: input query is {dtype}; the CPU kernel takes float32 and float16")
        batch, seq, hidden = query.shape
        kv_seq, v_hidden = key.shape[1], value.shape[2]
        if hidden % heads or v_hidden % heads or key.shape[2] != hidden or value.shape[1] != kv_seq \
                or key.shape[0] != batch or value.shape[0] != batch:
            raise ValueError(f"{where}: query {query.shape}, key {key.shape}, value {value.shape} "
                             f"do not fit num_heads={heads} (hidden sizes must divide by it; key and value "
                             "must share batch and sequence; key's hidden size must be query's)")
        if not batch or not seq:  # no queries: an empty output (onnxruntime's)
            return np.zeros((batch, seq, v_hidden), dtype)
        head, v_head = hidden // heads, v_hidden // heads
        f32 = np.float32
        scale = f32(scale_attr or 1.0 / np.sqrt(head))
        if bias is not None:
            if bias.shape != (2 * hidden + v_hidden,):
                raise ValueError(f"{where}: input bias has shape {bias.shape}, expected ({2 * hidden + v_hidden},)")
            bias = bias.astype(f32, copy=False)
            q = np.add(query, bias[:hidden], dtype=f32)
            q *= scale
            value = np.add(value, bias[2 * hidden :], dtype=f32)
        else:
            q = np.multiply(query, scale, dtype=f32)  # scaling Q is the cheapest place: (B, S, D)
        # Q and V as strided views, no copies: numpy hands each (S, H) / (L, H) slice to BLAS with
        # its stride. K^T is written contiguous (B, N, H, L) (with K's bias in the same pass):
        # OpenBLAS's GEMM on a transposed strided B is about 2x slower at these sizes than the
        # copy costs (the whole kernel 4-5% faster at batch 1 and 8)
        qh = q.reshape(batch, seq, heads, head).transpose(0, 2, 1, 3)
        kh = np.empty((batch, heads, head, kv_seq), f32)
        k_view = key.reshape(batch, kv_seq, heads, head).transpose(0, 2, 3, 1)
        if bias is not None:
            np.add(k_view, bias[hidden : 2 * hidden].reshape(heads, head, 1), out=kh)
        else:
            np.copyto(kh, k_view)
        vh = value.astype(f32, copy=False).reshape(batch, kv_seq, heads, v_head).transpose(0, 2, 1, 3)
        biases = []
        if attention_bias is not None:
            if (attention_bias.ndim != 4 or attention_bias.shape[0] not in (1, batch)
                    or attention_bias.shape[1] not in (1, heads) or attention_bias.shape[2:] != (seq, kv_seq)):
                raise ValueError(f"{where}: input attention_bias has shape {attention_bias.shape}; "
                                 f"expected ({batch} or 1, {heads} or 1, {seq}, {kv_seq})")
            biases.append(attention_bias.astype(f32, copy=False))
        if key_padding_mask is not None:
            biases.append(_padding_bias(key_padding_mask, batch, seq, kv_seq, fill, where, mask_name))
        if causal:  # query i (at position past_length + i) sees keys j <= past_length + i
            if seq + past_length != kv_seq:  # which keys are "previous" is ambiguous; onnxruntime's answer is odd
                raise ValueError(f"{where}: attribute unidirectional=1 needs as many keys as the past's and the "
                                 f"query's lengths on the CPU kernel (got {kv_seq} keys for {seq} queries after "
                                 f"{past_length} past ones; onnxruntime masks rows 0..S-2 as j <= i and leaves the "
                                 "last row unmasked)")
            biases.append(cached(("causal", seq, kv_seq), lambda: np.where(
                np.arange(kv_seq)[None, :] <= np.arange(seq)[:, None] + (kv_seq - seq), f32(0), f32(-np.inf))))
        ones = ones_vector(kv_seq, np.dtype(f32))

        def scores():
            s = _product(qh, kh, plans)  # (B, N, S, L), contiguous
            for b in biases:
                s += b
            return s

        probs = scores()
        # softmax without the row max first: exp, sum; the max (a slow reduction over short rows)
        # is subtracted only when some row overflowed, underflowed or is NaN, and then for all
        with np.errstate(over="ignore", under="ignore"):
            exp(probs, out=probs)
        sums = row_sums(probs, ones)
        if not (sums.min() > EXP_SUM_TINY and sums.max() < np.inf):  # (NaN fails both)
            probs = scores()
            with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # all -inf rows: NaN, as onnxruntime
                probs -= probs.max(axis=-1, keepdims=True)
                exp(probs, out=probs)
            sums = row_sums(probs, ones)
        out = np.empty((batch, seq, heads, v_head), f32)
        _product(probs, vh, plans, out=out.transpose(0, 2, 1, 3))  # straight into (B, S, N, Hv)
        np.reciprocal(sums, out=sums)
        out *= sums.transpose(0, 2, 1, 3)  # normalise the (S, Hv) outputs, not the (S, L) probabilities
        out = out.reshape(batch, seq, v_hidden)
        return out if dtype == f32 else out.astype(dtype)

    return multi_head_attention


_ATTENTION_INPUTS = ("input", "weights", "bias", "mask_index", "past", "attention_bias", "past_sequence_length")
_ATTENTION_SUPPORTED = _ATTENTION_INPUTS[:6]


def _check_attention(node) -> str | None:
    """The first input/output/attribute of com.microsoft Attention this kernel does not
    support, as a sentence; None if it runs the node."""
    where = f"Attention {node.name!r}"
    for k, name in enumerate(_ATTENTION_INPUTS):
        if k < len(node.inputs) and node.inputs[k] and name not in _ATTENTION_SUPPORTED:
            return (f"{where}: input {name} is not supported by the CPU kernel (supported inputs: "
                    f"{', '.join(_ATTENTION_SUPPORTED)})")
    if len(node.inputs) > len(_ATTENTION_INPUTS):
        return f"{where}: has {len(node.inputs)} inputs; the op has {len(_ATTENTION_INPUTS)}"
    for name in ("do_rotary", "past_present_share_buffer"):
        if node.attr(name, 0):
            return f"{where}: attribute {name}={node.attr(name)} is not supported by the CPU kernel"
    if not node.attr("num_heads"):
        return f"{where}: attribute num_heads is required (a positive int)"
    sizes = list(node.attr("qkv_hidden_sizes") or [])
    if sizes and (len(sizes) != 3 or sizes[0] != sizes[1] or min(sizes) <= 0):
        return (f"{where}: attribute qkv_hidden_sizes={sizes}; expected three positive sizes with "
                "Q's equal to K's")
    if len(node.inputs) < 2 or not node.inputs[0] or not node.inputs[1]:
        return f"{where}: inputs input and weights are required"
    data = node.graph.value(node.inputs[0])
    if data.dtype is not None and data.dtype not in (np.float32, np.float16):
        return f"{where}: input input is {data.type}; the CPU kernel takes float and float16"
    if data.shape is not None and len(data.shape) != 3:
        return f"{where}: input input has rank {len(data.shape)}; expected 3 (batch, sequence, input_hidden_size)"
    return None


@kernel("Attention", domain=_MS, check=_check_attention)
def _ms_attention(node, request):
    """onnxruntime's com.microsoft Attention: the input projection to Q, K and V as one GEMM by
    the merged weights (the form ort-core's optimizer fuses a BERT layer's three projections
    into), then MultiHeadAttention's attention on views of its three column blocks."""
    reason = _check_attention(node)
    if reason is not None:
        raise ValueError(reason)
    where = f"Attention {node.name!r}"
    attend = _heads_attention(node, where, "mask_index")
    sizes = [int(s) for s in node.attr("qkv_hidden_sizes") or []]
    w_given, w_ready = constant_weight(node, request, 1)
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    b_given = constant_weight(node, request, 2)[0] if has_bias else None
    # constant weights (and bias): one oneDNN product with the bias added in it; None: numpy's
    product = None if has_bias and b_given is None else _constant_product(w_ready, bias=b_given)

    wants_present = len(node.outputs) > 1 and bool(node.outputs[1])
    heads = int(node.attr("num_heads"))

    def attention(data, weights, bias=None, mask_index=None, past=None, attention_bias=None):
        if data.ndim != 3:
            raise ValueError(f"{where}: input input has shape {data.shape}; expected (batch, sequence, "
                             "input_hidden_size)")
        width = weights.shape[1] if weights.ndim == 2 else 0
        if weights.ndim != 2 or weights.shape[0] != data.shape[2] or width == 0 \
                or width != (sum(sizes) if sizes else width - width % 3):
            expected = f"({data.shape[2]}, {sum(sizes) if sizes else '3 * hidden_size'})"
            raise ValueError(f"{where}: input weights has shape {weights.shape}; expected {expected} for input "
                             f"{data.shape}")
        if bias is not None and bias.shape != (width,):
            raise ValueError(f"{where}: input bias has shape {bias.shape}; expected ({width},)")
        q_size = k_size = sizes[0] if sizes else width // 3
        qkv = product(data) if product is not None and weights is w_given and bias is b_given else None
        if qkv is None:
            qkv = matmul(data, w_ready if weights is w_given else weights)
            if bias is not None:
                qkv += bias
        # Q, K and V as views of the product's column blocks: the attention reads them strided
        query, key, value = qkv[..., :q_size], qkv[..., q_size:q_size + k_size], qkv[..., q_size + k_size:]
        past_length = 0
        if past is not None:  # (2, B, N, P, H): the keys and values before these, heads first
            key, value, past_length = _after_past(past, key, value, where)
        out = attend(query, key, value, None, mask_index, attention_bias, past_length)
        if not wants_present:
            return out
        batch, total = key.shape[:2]
        present = np.stack([np.reshape(key, (batch, total, heads, -1)).transpose(0, 2, 1, 3),
                            np.reshape(value, (batch, total, heads, -1)).transpose(0, 2, 1, 3)])
        return out, present

    return attention if wants_present else _only_first_output(node, attention)


def _after_past(past: np.ndarray, key: np.ndarray, value: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Attention's key and value (B, S, hidden) after its input past (2, B, N, P, H) (GPT-2's
    cache as onnxruntime's converter writes it): (B, P + S, hidden) each, and P."""
    batch, _, hidden = key.shape
    if past.ndim != 5 or past.shape[0] != 2 or past.shape[1] != batch or past.shape[2] * past.shape[4] != hidden \
            or value.shape[2] != hidden:
        raise ValueError(f"{where}: input past has shape {list(past.shape)}; expected (2, {batch}, num_heads, "
                         f"past_sequence_length, {hidden} / num_heads) for key {list(key.shape)}")
    length = past.shape[3]
    merged = past.astype(key.dtype, copy=False).transpose(0, 1, 3, 2, 4).reshape(2, batch, length, hidden)
    return (np.concatenate([merged[0], key], axis=1), np.concatenate([merged[1], value], axis=1), length)
