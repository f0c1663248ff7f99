"""Level-2 fusion of BERT-style scaled-dot-product attention into onnxruntime's contrib op
``com.microsoft.MultiHeadAttention``.

The subgraph exporters write for one attention layer, from the per-head reshapes on::

    q4 = Transpose(Reshape(q, [B, S, N, H]), perm=[0, 2, 1, 3])          # (B, N, S, H)
    kT = Transpose(Transpose(Reshape(k, ...), [0, 2, 1, 3]), [0, 1, 3, 2])  # (B, N, H, L)
         (or Transpose(Reshape(k, ...), perm=[0, 2, 3, 1]))
    v4 = Transpose(Reshape(v, [B, L, N, Hv]), perm=[0, 2, 1, 3])
    scores = MatMul(q4, kT) / c            (or * c, or no scaling; q4 and/or kT may be
                                            scaled by constants first: the factors multiply)
    probs = Softmax(scores [+ mask], axis=-1)
    y = Reshape(Transpose(MatMul(probs, v4), [0, 2, 1, 3]), [B, S, N * Hv])

becomes ``y = MultiHeadAttention(q, k, v, attention_bias=mask', num_heads=N, scale=1/c)`` with
``q, k, v`` the (B, S, hidden) values the reshapes read. Where those are the three input
projections of one value, ``MatMul(x, W) + b`` with constant weights and biases (a BERT layer's
self-attention), the projections go into the node too, as onnxruntime's fusion does: ``y =
Attention(x, [Wq Wk Wv], [bq bk bv], attention_bias=mask', ...)`` (com.microsoft), one GEMM
instead of three GEMMs and three Adds. The mask is an additive bias; the op wants it as (B or 1, N or 1, S, L), so a
mask broadcast along S or L (a BERT padding mask is (B, 1, 1, L)) is expanded once per mask and
shape by an ``Expand`` shared by every layer that reads it. The mask is kept as the exact
additive bias rather than rewritten as ``key_padding_mask``: that form would only agree for
masks of 0/1 values.

The pass does not fire unless every piece is proven: the reshapes split the last axis into
(N, H) with N and H known integers and keep batch and sequence (from constant shapes, inferred
output shapes, or a Concat of ``Shape`` gathers and constants), the scale is a constant scalar,
the softmax is over the last axis of a rank-4 tensor, and no intermediate value is read
elsewhere or is a graph output. Like the other fusions it asks ``supports(node)`` first.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx_ir as ir

from ._ir import Namer, attr, const, detach, graphs, initializer, is_op, only_use, replace, scalar
from .fusion import MS_DOMAIN, _FusionPass

_SPLIT = [0, 2, 1, 3]


def _dims(value: ir.Value | None) -> list | None:
    """The value's dimensions: ints, symbol names (str) or None (unknown); None if rank unknown."""
    if value is None or value.shape is None:
        return None
    out = []
    for d in value.shape:
        if isinstance(d, int):
            out.append(d if d >= 0 else None)
        else:
            out.append(d.value if getattr(d, "value", None) else None)
    return out


def _same(a, b) -> bool:
    """Two dimensions known to be equal: the same int, or the same symbol (ONNX's convention:
    one name, one size within a graph)."""
    return a is not None and b is not None and a == b


def _single(value: ir.Value, reader: ir.Node, index: int | None = None) -> bool:
    """``reader`` is the only node that reads ``value`` (at input ``index`` when given)."""
    if only_use(value) is not reader:
        return False
    return index is None or reader.inputs[index] is value


def _perm(node: ir.Node | None, perm: list[int]) -> bool:
    return is_op(node, "Transpose") and list(attr(node, "perm", []) or []) == perm


def _target_entries(reshape: ir.Node) -> list | None:
    """What the Reshape's shape operand says per output axis: ints (0 and -1 with their Reshape
    meaning), dimensions of other values (ints/symbols from ``Shape`` gathers), or None."""
    shape_in = reshape.inputs[1]
    data = const(shape_in)
    if data is not None:
        return [int(x) for x in data.reshape(-1)]
    concat = shape_in.producer() if shape_in is not None else None
    if not is_op(concat, "Concat") or int(attr(concat, "axis", 0)) != 0:
        return None
    entries: list = []
    for part in concat.inputs:
        data = const(part)
        if data is not None:
            entries.extend(int(x) for x in data.reshape(-1))
            continue
        dim = _gathered_dim(part)
        if dim is None:
            return None
        entries.append(("dim", dim))
    return entries


def _gathered_dim(value: ir.Value | None):
    """``Unsqueeze(Gather(Shape(x), i), [0])`` -> the dimension x.shape[i] (int or symbol)."""
    unsq = value.producer() if value is not None else None
    if not is_op(unsq, "Unsqueeze"):
        return None
    axes = const(unsq.inputs[1]) if len(unsq.inputs) > 1 else np.asarray(attr(unsq, "axes", []))
    gather = unsq.inputs[0].producer()
    if axes is None or list(np.asarray(axes).reshape(-1)) != [0] or not is_op(gather, "Gather"):
        return None
    shape = gather.inputs[0].producer()
    index = const(gather.inputs[1])
    if not is_op(shape, "Shape") or index is None or index.size != 1 or int(attr(gather, "axis", 0)) != 0:
        return None
    if attr(shape, "start") is not None or attr(shape, "end") is not None:
        return None
    dims = _dims(shape.inputs[0])
    i = int(index.reshape(()))
    if dims is None or not -len(dims) <= i < len(dims):
        return None
    return dims[i]


def _scaled_operand(value: ir.Value, reader: ir.Node) -> tuple[float, ir.Node, int] | None:
    """``value`` = Mul(x, c) / Mul(c, x) / Div(x, c) with a constant scalar c, read only by
    ``reader``: (the factor it applies, that node, x's input index); else None."""
    node = value.producer()
    if not _single(value, reader) or not (is_op(node, "Mul") or is_op(node, "Div")):
        return None
    if is_op(node, "Div"):
        c = scalar(node.inputs[1])
        factor, index = (1.0 / c if c else None), 0
    elif scalar(node.inputs[1]) is not None:
        factor, index = scalar(node.inputs[1]), 0
    else:
        factor, index = scalar(node.inputs[0]), 1
    if factor is None or not np.isfinite(factor):
        return None
    return factor, node, index


def _resolve_reshape(reshape: ir.Node) -> tuple[list, list] | None:
    """(input dims, output dims) of a Reshape, the output's resolved as far as proven: from the
    shape operand (0 copies an input axis unless ``allowzero``; one -1 is solved when the other
    factors account for the input's, symbols cancelling), else from inferred output shapes."""
    dims_in = _dims(reshape.inputs[0])
    dims_out = _dims(reshape.outputs[0])
    if dims_in is None:
        return None
    entries = _target_entries(reshape)
    if entries is None:
        return (dims_in, dims_out) if dims_out is not None else None
    if dims_out is not None and len(dims_out) != len(entries):
        return None
    allowzero = bool(attr(reshape, "allowzero", 0))
    out: list = []
    for i, e in enumerate(entries):
        if isinstance(e, tuple):
            d = e[1]
        elif e == 0 and not allowzero:
            d = dims_in[i] if i < len(dims_in) else None
        elif e > 0 or e == -1:
            d = e
        else:
            return None
        if d is None and dims_out is not None:
            d = dims_out[i]  # inference knew it
        out.append(d)
    if out.count(-1) == 1:
        i = out.index(-1)
        solved = _solve(dims_in, out[:i] + out[i + 1 :])
        out[i] = solved if solved is not None else (dims_out[i] if dims_out is not None else None)
    return dims_in, [None if d == -1 else d for d in out]


def _solve(dims_in: list, known_out: list):
    """The dimension a Reshape's -1 stands for: input elements over the known output ones."""
    if None in dims_in or None in known_out:
        return None
    syms_in = collections.Counter(d for d in dims_in if isinstance(d, str))
    syms_out = collections.Counter(d for d in known_out if isinstance(d, str))
    if syms_out - syms_in:
        return None
    rest = syms_in - syms_out
    num = int(np.prod([d for d in dims_in if isinstance(d, int)], dtype=np.int64))
    den = int(np.prod([d for d in known_out if isinstance(d, int)], dtype=np.int64))
    if den <= 0 or num % den:
        return None
    if not rest:
        return num // den
    if len(rest) == 1 and sum(rest.values()) == 1 and num == den:
        return next(iter(rest))
    return None


def _split_heads(reshape: ir.Node) -> tuple[int, int] | None:
    """(N, H) when ``reshape`` turns (B, S, N*H) into (B, S, N, H) with N, H known; else None."""
    resolved = _resolve_reshape(reshape)
    if resolved is None:
        return None
    dims_in, out = resolved
    if len(dims_in) != 3 or len(out) != 4 or not isinstance(dims_in[2], int):
        return None
    n, h = out[2], out[3]
    if not isinstance(n, int) or not isinstance(h, int) or n <= 0 or h <= 0 or n * h != dims_in[2]:
        return None
    # axis 0 kept and N*H the hidden size: the element count forces axis 1 to be S
    return (n, h) if _same(out[0], dims_in[0]) else None


def _merges_heads(reshape: ir.Node, hidden: int) -> bool:
    """``reshape`` turns (B, S, N, Hv) into (B, S, N*Hv == hidden)."""
    resolved = _resolve_reshape(reshape)
    if resolved is None:
        return False
    dims_in, out = resolved
    return len(dims_in) == 4 and len(out) == 3 and out[2] == hidden and _same(out[0], dims_in[0])


class _Match:
    def __init__(self):
        self.nodes: list[ir.Node] = []
        self.q = self.k = self.v = self.mask = None
        self.heads = self.head = self.v_head = 0
        self.scale = 1.0
        self.out: ir.Value | None = None


def _heads_input(value: ir.Value, reader: ir.Node, index: int, perms: list[list[int]], m: _Match):
    """Follow ``value`` (read by ``reader`` at ``index``) back through Transposes with ``perms``
    (outermost first) to the splitting Reshape; returns (input, (N, H)) or None. The nodes
    passed go to ``m.nodes`` only when the whole path matches."""
    passed = []
    for perm in perms:
        tr = value.producer()
        if not _perm(tr, perm) or not _single(value, reader, index):
            return None
        passed.append(tr)
        value, reader, index = tr.inputs[0], tr, 0
    reshape = value.producer()
    if not is_op(reshape, "Reshape") or not _single(value, reader, index):
        return None
    split = _split_heads(reshape)
    if split is None:
        return None
    m.nodes += [*passed, reshape]
    return reshape.inputs[0], split


def _match(softmax: ir.Node, opset: int) -> _Match | None:
    x = softmax.inputs[0]
    dims = _dims(x)
    axis = attr(softmax, "axis", -1 if opset >= 13 else 1)
    if dims is None or len(dims) != 4 or axis not in (3, -1):
        return None
    add = x.producer()
    if is_op(add, "Add") and _single(x, softmax):
        for i in (0, 1):  # either operand may be the scores (a mask may be made by a Mul too)
            m = _match_scores(softmax, add.inputs[i], add, add.inputs[1 - i])
            if m is not None:
                return m
        return None
    return _match_scores(softmax, x, softmax, None)


def _match_scores(softmax: ir.Node, scores: ir.Value, reader: ir.Node, mask: ir.Value | None) -> _Match | None:
    """The rest of the pattern, given which value is the (scaled) scores and which the mask."""
    m = _Match()
    m.mask = mask
    m.nodes.append(softmax)
    if reader is not softmax:
        m.nodes.append(reader)
    found = _scaled_operand(scores, reader)  # a Mul/Div by anything but a constant scalar stops here
    if found is not None:
        m.scale, scaler, index = found
        m.nodes.append(scaler)
        reader, scores = scaler, scaler.inputs[index]
    node = scores.producer()
    if not is_op(node, "MatMul") or not _single(scores, reader):
        return None
    qk = node
    m.nodes.append(qk)
    # Q and K^T may be scaled before the product (DistilBERT scales Q; torch's SDPA export
    # scales both by the square root): the factors multiply into the one scale
    ends = []
    for index in (0, 1):
        value, reader = qk.inputs[index], qk
        found = _scaled_operand(value, reader)
        if found is not None:
            factor, scaler, data_index = found
            m.scale *= factor
            m.nodes.append(scaler)
            value, reader, index = scaler.inputs[data_index], scaler, data_index
        ends.append((value, reader, index))
    q = _heads_input(*ends[0], [_SPLIT], m)
    k = _heads_input(*ends[1], [[0, 1, 3, 2], _SPLIT], m)
    if k is None:
        k = _heads_input(*ends[1], [[0, 2, 3, 1]], m)
    pv = only_use(softmax.outputs[0])
    if q is None or k is None or not is_op(pv, "MatMul") or pv.inputs[0] is not softmax.outputs[0]:
        return None
    m.nodes.append(pv)
    v = _heads_input(pv.inputs[1], pv, 1, [_SPLIT], m)
    back = only_use(pv.outputs[0])
    if v is None or not _perm(back, _SPLIT):
        return None
    merge = only_use(back.outputs[0])
    if not is_op(merge, "Reshape") or merge.inputs[0] is not back.outputs[0]:
        return None
    (m.q, (n, h)), (m.k, (nk, hk)), (m.v, (nv, hv)) = q, k, v
    if n != nk or n != nv or h != hk or not _merges_heads(merge, n * hv):
        return None
    qd, kd, vd = _dims(m.q), _dims(m.k), _dims(m.v)
    # one batch for all three (MultiHeadAttention does not broadcast it) and one key length
    if not (_same(qd[0], kd[0]) and _same(qd[0], vd[0]) and _same(kd[1], vd[1])):
        return None
    if m.q.type is None or m.q.type.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
        return None
    if mask is not None and not _mask_fits(mask, qd[0], n, qd[1], kd[1], m.q.type):
        return None
    m.nodes += [back, merge]
    m.heads, m.head, m.v_head = n, h, hv
    m.out = merge.outputs[0]
    return m


def _mask_fits(mask: ir.Value, batch, heads: int, seq, kv_seq, dtype) -> bool:
    """The additive mask broadcasts to (B, N, S, L) without enlarging it, in the query's type."""
    dims = _dims(mask)
    if dims is None or len(dims) > 4 or mask.type != dtype:
        return False
    full = [batch, heads, seq, kv_seq]
    return all(d == 1 or _same(d, full[4 - len(dims) + i]) for i, d in enumerate(dims))


def _without_trailing_none(inputs: list[ir.Value | None]) -> list[ir.Value | None]:
    """The node's inputs without the absent optional ones at the end (ONNX leaves them off)."""
    end = len(inputs)
    while end and inputs[end - 1] is None:
        end -= 1
    return inputs[:end]


def _stand_in(data: np.ndarray) -> ir.Value:
    """A value typed and shaped like ``data``, for a probe (its initializer is made only if the
    provider claims the node)."""
    return ir.Value(name="stand_in", type=ir.TensorType(ir.DataType.from_numpy(data.dtype)), shape=ir.Shape(data.shape))


def _bias_ready(m: _Match) -> bool:
    """The mask already has attention_bias's shape (B|1, N|1, S, L)."""
    dims = _dims(m.mask)
    return len(dims) == 4 and _same(dims[2], _dims(m.q)[1]) and _same(dims[3], _dims(m.k)[1])


class _Projections:
    """Q, K and V as ``MatMul(x, W) [+ b]`` of one ``x`` with constant 2-D weights (and 1-D
    biases, all three or none): what com.microsoft Attention takes merged."""

    def __init__(self, x: ir.Value, weights: np.ndarray, bias: np.ndarray | None, nodes: list[ir.Node]):
        self.x, self.weights, self.bias, self.nodes = x, weights, bias, nodes


def _projection(value: ir.Value) -> tuple[ir.Value, np.ndarray, np.ndarray | None, list[ir.Node]] | None:
    """(x, W, b or None, its nodes) when ``value`` = MatMul(x, W) [+ b], W constant (K, N), b
    constant (N,), each intermediate read only by the next; else None."""
    if only_use(value) is None:
        return None
    node, bias, nodes = value.producer(), None, []
    if is_op(node, "Add"):
        for i in (0, 1):
            b, product = const(node.inputs[1 - i]), node.inputs[i]
            if b is not None and b.ndim == 1 and is_op(product.producer(), "MatMul") and only_use(product) is node:
                bias, nodes, value = b, [node], product
                break
        else:
            return None
        node = value.producer()
    if not is_op(node, "MatMul"):
        return None
    x, weights = node.inputs[0], const(node.inputs[1])
    if weights is None or weights.ndim != 2 or (bias is not None and bias.shape != weights.shape[1:]):
        return None
    return x, weights, bias, [node, *nodes]


def _projections(m: _Match) -> _Projections | None:
    """The merged projections of ``m``'s Q, K and V, or None where they are not of that form."""
    found = [_projection(v) for v in (m.q, m.k, m.v)]
    if any(f is None for f in found):
        return None
    (x, *_), dims = found[0], _dims(found[0][0])
    if dims is None or len(dims) != 3 or any(f[0] is not x for f in found):
        return None
    weights = [f[1] for f in found]
    biases = [f[2] for f in found]
    widths = [m.heads * m.head, m.heads * m.head, m.heads * m.v_head]
    if [w.shape[1] for w in weights] != widths or len({w.shape[0] for w in weights}) != 1 \
            or len({w.dtype for w in weights}) != 1 \
            or ir.DataType.from_numpy(weights[0].dtype) != m.q.type.dtype \
            or (any(b is None for b in biases) and not all(b is None for b in biases)):
        return None
    bias = None if biases[0] is None else np.concatenate(biases).astype(weights[0].dtype)
    return _Projections(x, np.concatenate(weights, axis=1), bias, [n for f in found for n in f[3]])


class AttentionFusionPass(_FusionPass):
    """Scaled-dot-product attention on split heads -> com.microsoft Attention (with its three
    input projections) or MultiHeadAttention."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
        modified = False
        for graph in graphs(model.graph):
            namer = Namer(graph)
            expanded: dict[tuple, ir.Value] = {}  # one Expand per (mask, S, L), shared by layers
            for softmax in list(graph):
                if not is_op(softmax, "Softmax") or softmax.graph is not graph:
                    continue
                m = _match(softmax, opset)
                if m is None or (opset < 8 and m.mask is not None and not _bias_ready(m)):
                    continue  # (Expand, needed to shape the mask, came with opset 8)
                attention_bias = None
                if m.mask is not None:  # the gate sees the node with its bias input, as it will run
                    attention_bias = ir.Value(name="attention_bias", type=m.mask.type,
                                              shape=ir.Shape([_dims(m.q)[0], 1, _dims(m.q)[1], _dims(m.k)[1]]))
                projections = _projections(m)
                probe = None if projections is None else self._probe(
                    "Attention", m, softmax, [projections.x, _stand_in(projections.weights),
                                              None if projections.bias is None else _stand_in(projections.bias),
                                              None, None, attention_bias])
                if probe is None:
                    probe = self._probe("MultiHeadAttention", m, softmax, [m.q, m.k, m.v, None, None, attention_bias])
                if probe is None:
                    continue
                detach(probe)  # the node inserted below reads the real inputs, not the probe's stand-ins
                new_nodes: list[ir.Node] = []
                if probe.op_type == "Attention":
                    inputs = [projections.x, initializer(graph, namer, "qkv_weights", projections.weights),
                              None if projections.bias is None else initializer(graph, namer, "qkv_bias", projections.bias)]
                    removed = m.nodes + projections.nodes
                    lengths = (projections.x, projections.x)  # (self-attention: S = L)
                else:
                    inputs, removed, lengths = [m.q, m.k, m.v], m.nodes, (m.q, m.k)
                if m.mask is not None:
                    inputs += [None] * (5 - len(inputs)) + [self._bias(graph, namer, m, expanded, new_nodes, lengths)]
                fused = ir.Node(MS_DOMAIN, probe.op_type, _without_trailing_none(inputs), list(probe.attributes.values()),
                                num_outputs=1, name=probe.name, version=1)
                new_nodes.append(fused)
                replace(graph, removed, new_nodes, [m.out], [fused.outputs[0]])
                modified = True
        if modified:
            model.opset_imports.setdefault(MS_DOMAIN, 1)
        return ir.passes.PassResult(model, modified)

    def _probe(self, op_type: str, m: _Match, softmax: ir.Node, inputs: list[ir.Value | None]) -> ir.Node | None:
        """The fused node ``op_type`` on ``inputs`` if the provider claims it, else None."""
        inputs = _without_trailing_none(inputs)
        attributes = [ir.AttrInt64("num_heads", m.heads), ir.AttrFloat32("scale", float(m.scale))]
        if op_type == "Attention" and m.v_head != m.head:
            attributes.append(ir.AttrInt64s("qkv_hidden_sizes", [m.heads * m.head] * 2 + [m.heads * m.v_head]))
        suffix = "attention" if op_type == "Attention" else "mha"
        probe = ir.Node(MS_DOMAIN, op_type, inputs, attributes, num_outputs=1, name=f"{softmax.name}_{suffix}",
                        version=1)
        probe.outputs[0].type, probe.outputs[0].shape = m.out.type, m.out.shape
        return probe if self.claimed(probe) else None

    @staticmethod
    def _bias(graph: ir.Graph, namer: Namer, m: _Match, expanded: dict, new_nodes: list[ir.Node],
              sources: tuple[ir.Value, ir.Value]) -> ir.Value:
        """The mask as attention_bias: itself when already (B|1, N|1, S, L), else expanded (to S
        and L read from ``sources``' axis 1 where they are known only at run time)."""
        mask = m.mask
        dims = _dims(mask)
        seq, kv_seq = _dims(m.q)[1], _dims(m.k)[1]
        if _bias_ready(m):
            return mask
        if isinstance(seq, int) and isinstance(kv_seq, int):
            key = (id(mask), seq, kv_seq)
            if key not in expanded:
                target = initializer(graph, namer, "attention_bias_shape", np.array([1, 1, seq, kv_seq], np.int64))
                expand = ir.Node("", "Expand", [mask, target], num_outputs=1, name=namer("attention_bias_expand"))
                out = expand.outputs[0]
                out.name, out.type = namer("attention_bias"), mask.type
                padded = [1] * (4 - len(dims)) + dims
                out.shape = ir.Shape([padded[0], padded[1], seq, kv_seq])
                producer = mask.producer()
                if producer is not None and producer.graph is graph:
                    graph.insert_after(producer, expand)  # before every layer that reads the mask
                else:
                    graph.insert_before(next(iter(graph)), expand)
                expanded[key] = out
            return expanded[key]
        # S or L known only at run time: [1, 1, S, L] from the inputs' shapes, next to this node
        one_one = initializer(graph, namer, "ones_2", np.array([1, 1], np.int64))
        index = initializer(graph, namer, "axis_1", np.array([1], np.int64))
        parts = [one_one]
        for src in sources:
            shape = ir.Node("", "Shape", [src], num_outputs=1, name=namer("attention_shape"))
            gather = ir.Node("", "Gather", [shape.outputs[0], index], [ir.AttrInt64("axis", 0)], num_outputs=1,
                             name=namer("attention_len"))
            shape.outputs[0].name, gather.outputs[0].name = namer("attention_shape"), namer("attention_len")
            new_nodes += [shape, gather]
            parts.append(gather.outputs[0])
        concat = ir.Node("", "Concat", parts, [ir.AttrInt64("axis", 0)], num_outputs=1, name=namer("attention_bias_shape"))
        concat.outputs[0].name = namer("attention_bias_shape")
        expand = ir.Node("", "Expand", [mask, concat.outputs[0]], num_outputs=1, name=namer("attention_bias_expand"))
        expand.outputs[0].name, expand.outputs[0].type = namer("attention_bias"), mask.type
        new_nodes += [concat, expand]
        return expand.outputs[0]
