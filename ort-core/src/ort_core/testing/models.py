"""Models the project generates for tests, the demo and the benchmark.

They use the op patterns torch.onnx emits for the same modules (opset 17): Gemm for Linear,
Conv + BatchNormalization + Relu blocks with residual Add, LayerNormalization, GELU as
Erf arithmetic, attention as MatMul/Div/Softmax with Reshape/Transpose on dynamic shapes
computed by Shape/Gather/Concat. Weights are seeded, so every call gives the same model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def weight(self, shape, scale=None, prefix="w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), prefix)

    def const(self, array, prefix="c") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs, n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name, inputs, outputs, opset: int = OPSET) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ort-core")
        model.ir_version = 8 if opset <= 17 else 10
        onnx.checker.check_model(model)
        return model


def mlp(in_features: int = 256, hidden: int = 512, layers: int = 3, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Linear/ReLU stack with a softmax head; input ``x`` [batch, in_features]."""
    b = _Builder(seed)
    h = "x"
    width = in_features
    for _ in range(layers):
        h = b.op("Gemm", [h, b.weight((hidden, width)), b.const(np.zeros(hidden, np.float32))], transB=1)
        h = b.op("Relu", [h])
        width = hidden
    logits = b.op("Gemm", [h, b.weight((classes, width)), b.const(np.zeros(classes, np.float32))], transB=1)
    b.nodes.append(helper.make_node("Softmax", [logits], ["probs"], name="softmax", axis=-1))
    return b.model(
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", in_features])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])],
    )


def _conv_bn(b: _Builder, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
    pad = k // 2
    y = b.op("Conv", [x, b.weight((cout, cin, k, k))], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
    y = b.op(
        "BatchNormalization",
        [y, b.const(1 + 0.1 * b.rng.standard_normal(cout).astype(np.float32)),
         b.const(0.1 * b.rng.standard_normal(cout).astype(np.float32)),
         b.const(0.1 * b.rng.standard_normal(cout).astype(np.float32)),
         b.const((1 + 0.1 * np.abs(b.rng.standard_normal(cout))).astype(np.float32))],
        epsilon=1e-5,
    )
    return b.op("Relu", [y]) if relu else y


def cnn(image: int = 64, width: int = 32, blocks: int = 3, classes: int = 10, seed: int = 0,
        opset: int = OPSET) -> onnx.ModelProto:
    """ResNet-style: stem conv + max-pool, residual blocks (one strided with a 1x1 shortcut),
    global average pool, flatten, linear; input ``x`` [batch, 3, image, image]."""
    b = _Builder(seed)
    h = _conv_bn(b, "x", 3, width, 3, 1, True)
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = width
    for i in range(blocks):
        stride = 2 if i == blocks - 1 else 1
        out_ch = channels * 2 if stride == 2 else channels
        y = _conv_bn(b, h, channels, out_ch, 3, stride, True)
        y = _conv_bn(b, y, out_ch, out_ch, 3, 1, False)
        shortcut = h if stride == 1 else _conv_bn(b, h, channels, out_ch, 1, stride, False)
        h = b.op("Relu", [b.op("Add", [y, shortcut])])
        channels = out_ch
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h], axis=1)
    b.nodes.append(helper.make_node("Gemm", [h, b.weight((classes, channels)), b.const(np.zeros(classes, np.float32))], ["logits"], name="fc", transB=1))
    return b.model(
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, image, image])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        opset,
    )


def transformer(vocab: int = 1000, seq: int = 64, dim: int = 128, heads: int = 4, layers: int = 2, seed: int = 0,
                pooler: bool = False, bias: bool = True) -> onnx.ModelProto:
    """BERT-style encoder: token + position embeddings (Gather), LayerNormalization,
    multi-head self-attention with a padding mask, GELU (Erf) feed-forward; inputs
    ``input_ids`` int64 [batch, seq] and ``attention_mask`` int64 [batch, seq]. With
    ``pooler``, BERT's pooler as torch.onnx exports it (first token -> Linear -> Tanh) gives a
    second output ``pooler_output`` [batch, dim]. ``bias=False``: the linear layers have no
    bias (attention without bias)."""
    b = _Builder(seed)
    head_dim = dim // heads
    tok = b.op("Gather", [b.weight((vocab, dim), 0.02), "input_ids"], axis=0)
    pos_ids = b.const(np.arange(seq, dtype=np.int64).reshape(1, seq))
    pos = b.op("Gather", [b.weight((seq, dim), 0.02), pos_ids], axis=0)
    h = b.op("LayerNormalization", [b.op("Add", [tok, pos]), b.const(np.ones(dim, np.float32)), b.const(np.zeros(dim, np.float32))], axis=-1, epsilon=1e-12)
    # mask: (1 - mask) * -10000, shaped [batch, 1, 1, seq]
    mask = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", b.const(np.array([1, 2], np.int64))])], to=TensorProto.FLOAT)
    mask = b.op("Mul", [b.op("Sub", [b.const(np.array(1.0, np.float32)), mask]), b.const(np.array(-10000.0, np.float32))])
    batch = b.op("Gather", [b.op("Shape", ["input_ids"]), b.const(np.array(0, np.int64))], axis=0)
    batch1 = b.op("Unsqueeze", [batch, b.const(np.array([0], np.int64))])
    split_shape = b.op("Concat", [batch1, b.const(np.array([-1, heads, head_dim], np.int64))], axis=0)
    merge_shape = b.op("Concat", [batch1, b.const(np.array([-1, dim], np.int64))], axis=0)

    def linear(x, din, dout):
        y = b.op("MatMul", [x, b.weight((din, dout))])
        return b.op("Add", [y, b.const(0.02 * b.rng.standard_normal(dout).astype(np.float32))]) if bias else y

    def heads_of(x):
        return b.op("Transpose", [b.op("Reshape", [x, split_shape])], perm=[0, 2, 1, 3])

    for _ in range(layers):
        q, k, v = (heads_of(linear(h, dim, dim)) for _ in range(3))
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.op("Div", [b.op("MatMul", [q, kt]), b.const(np.array(np.sqrt(head_dim), np.float32))])
        probs = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        attn = linear(b.op("Reshape", [ctx, merge_shape]), dim, dim)
        h = b.op("LayerNormalization", [b.op("Add", [h, attn]), b.const(np.ones(dim, np.float32)), b.const(np.zeros(dim, np.float32))], axis=-1, epsilon=1e-12)
        ff = linear(h, dim, 4 * dim)
        gelu = b.op("Mul", [b.op("Mul", [ff, b.op("Add", [b.op("Erf", [b.op("Div", [ff, b.const(np.array(np.sqrt(2.0), np.float32))])]), b.const(np.array(1.0, np.float32))])]), b.const(np.array(0.5, np.float32))])
        ff = linear(gelu, 4 * dim, dim)
        h = b.op("LayerNormalization", [b.op("Add", [h, ff]), b.const(np.ones(dim, np.float32)), b.const(np.zeros(dim, np.float32))], axis=-1, epsilon=1e-12)
    b.nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"], name="output"))
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", seq, dim])]
    if pooler:
        first = b.op("Gather", [h, b.const(np.array(0, np.int64))], axis=1)
        dense = b.op("Gemm", [first, b.weight((dim, dim)), b.const(0.1 * b.rng.standard_normal(dim).astype(np.float32))], transB=1)
        b.nodes.append(helper.make_node("Tanh", [dense], ["pooler_output"], name="pooler_tanh"))
        outputs.append(helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", dim]))
    return b.model(
        "transformer",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", seq])],
        outputs,
    )


def _layer_norm_decomposed(b: _Builder, x: str, dim: int, eps: float = 1e-5) -> str:
    """LayerNorm as exporters write it without the op: ReduceMean, Sub, Pow, ReduceMean, Add,
    Sqrt, Div, Mul, Add (opset 17: ReduceMean's axes attribute)."""
    mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    centred = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [centred, b.const(np.array(2.0, np.float32))])], axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, b.const(np.array(eps, np.float32))])])
    normed = b.op("Div", [centred, std])
    gamma = b.const((1 + 0.1 * b.rng.standard_normal(dim)).astype(np.float32))
    return b.op("Add", [b.op("Mul", [normed, gamma]), b.const(0.1 * b.rng.standard_normal(dim).astype(np.float32))])


def _gelu_erf(b: _Builder, x: str) -> str:
    """0.5 * x * (1 + erf(x / sqrt(2))), in torch.onnx's order."""
    erf = b.op("Erf", [b.op("Div", [x, b.const(np.array(np.sqrt(2.0), np.float32))])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [erf, b.const(np.array(1.0, np.float32))])]),
                        b.const(np.array(0.5, np.float32))])


def _gelu_tanh(b: _Builder, x: str) -> str:
    """GPT-2's GELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    cube = b.op("Pow", [x, b.const(np.array(3.0, np.float32))])
    inner = b.op("Add", [x, b.op("Mul", [cube, b.const(np.array(0.044715, np.float32))])])
    t = b.op("Tanh", [b.op("Mul", [inner, b.const(np.array(np.sqrt(2 / np.pi), np.float32))])])
    return b.op("Mul", [b.op("Mul", [x, b.const(np.array(0.5, np.float32))]),
                        b.op("Add", [t, b.const(np.array(1.0, np.float32))])])


def gpt(vocab: int = 1000, seq: int = 16, dim: int = 64, heads: int = 2, layers: int = 2, seed: int = 0) -> onnx.ModelProto:
    """GPT-2-style decoder: token + position embeddings, pre-norm blocks with LayerNorm in its
    decomposed form, causal self-attention (an additive -10000 upper-triangular mask, scores
    scaled by Mul), tanh-GELU MLP, a final LayerNorm and a bias-free LM head; input
    ``input_ids`` int64 [batch, seq], output ``logits`` [batch, seq, vocab]."""
    b = _Builder(seed)
    head_dim = dim // heads
    tok = b.op("Gather", [b.weight((vocab, dim), 0.02), "input_ids"], axis=0)
    pos = b.op("Gather", [b.weight((seq, dim), 0.02), b.const(np.arange(seq, dtype=np.int64).reshape(1, seq))], axis=0)
    h = b.op("Add", [tok, pos])
    causal = b.const((np.triu(np.ones((seq, seq), np.float32), 1) * -10000.0).reshape(1, 1, seq, seq))
    split = b.const(np.array([0, 0, heads, head_dim], np.int64))
    merge = b.const(np.array([0, 0, dim], np.int64))

    def linear(x, din, dout):
        return b.op("Add", [b.op("MatMul", [x, b.weight((din, dout))]), b.const(0.02 * b.rng.standard_normal(dout).astype(np.float32))])

    for _ in range(layers):
        a = _layer_norm_decomposed(b, h, dim)
        q, k, v = (b.op("Transpose", [b.op("Reshape", [linear(a, dim, dim), split])], perm=[0, 2, 1, 3]) for _ in range(3))
        scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                              b.const(np.array(1 / np.sqrt(head_dim), np.float32))])
        probs = b.op("Softmax", [b.op("Add", [scores, causal])], axis=-1)
        ctx = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge])
        h = b.op("Add", [h, linear(ctx, dim, dim)])
        m = _gelu_tanh(b, linear(_layer_norm_decomposed(b, h, dim), dim, 4 * dim))
        h = b.op("Add", [h, linear(m, 4 * dim, dim)])
    h = _layer_norm_decomposed(b, h, dim)
    b.nodes.append(helper.make_node("MatMul", [h, b.weight((dim, vocab))], ["logits"], name="lm_head"))
    return b.model(
        "gpt",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", seq, vocab])],
    )


def norms(seq: int = 16, dim: int = 32, seed: int = 0, opset: int = OPSET) -> onnx.ModelProto:
    """LayerNorm and GELU in their decomposed forms: LayerNorm (ReduceMean...Add), a linear
    with bias then erf-GELU (-> BiasGelu), a linear then tanh-GELU, a residual Add then the
    decomposed LayerNorm again (-> SkipLayerNormalization); input ``x`` [batch, seq, dim].
    Below opset 17 (``opset=13``) the LayerNorm fusion is ort-core's own op (level ALL)."""
    b = _Builder(seed)
    h = _layer_norm_decomposed(b, "x", dim)
    up = b.op("Add", [b.op("MatMul", [h, b.weight((dim, 2 * dim))]), b.const(0.1 * b.rng.standard_normal(2 * dim).astype(np.float32))])
    g = _gelu_erf(b, up)
    down = b.op("MatMul", [g, b.weight((2 * dim, dim))])
    t = _gelu_tanh(b, down)
    out = _layer_norm_decomposed(b, b.op("Add", [h, t]), dim)
    b.nodes.append(helper.make_node("Identity", [out], ["y"], name="output"))
    return b.model("norms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, dim])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, dim])], opset)


def rewrites(image: int = 16, width: int = 8, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """One of each rewrite of the BASIC to ALL levels not in the other models: a Constant node,
    Conv + Mul + Add by per-channel constants (folded into the Conv), Conv + LeakyRelu/Sigmoid/
    Clip/HardSigmoid (FusedConv), hard-swish in both spellings (HardSwish), Dropout and
    Identity, MatMul + Add (Gemm) + Sigmoid (FusedGemm), MatMul by a transposed weight scaled
    by Div (FusedMatMul); input ``x`` [batch, 3, image, image], outputs ``logits`` and ``scores``."""
    b = _Builder(seed)

    def conv(x, cin, cout):
        return b.op("Conv", [x, b.weight((cout, cin, 3, 3)), b.const(0.1 * b.rng.standard_normal(cout).astype(np.float32))],
                    kernel_shape=[3, 3], pads=[1, 1, 1, 1])

    scale = b.name("constant")
    b.nodes.append(helper.make_node("Constant", [], [scale], name=b.name("Constant"),
                                    value=numpy_helper.from_array((1 + 0.1 * b.rng.standard_normal((1, width, 1, 1))).astype(np.float32))))
    h = b.op("Mul", [conv("x", 3, width), scale])
    h = b.op("Add", [h, b.const(0.1 * b.rng.standard_normal((1, width, 1, 1)).astype(np.float32))])
    h = b.op("LeakyRelu", [h], alpha=0.1)
    h = b.op("Sigmoid", [conv(h, width, width)])
    c = conv(h, width, width)  # hard-swish, HardSigmoid spelling
    h = b.op("Mul", [c, b.op("HardSigmoid", [c], alpha=1 / 6, beta=0.5)])
    c = b.op("Dropout", [conv(h, width, width)])
    c = b.op("Identity", [c])  # hard-swish, Clip spelling
    clip = b.op("Clip", [b.op("Add", [c, b.const(np.array(3.0, np.float32))]), b.const(np.array(0.0, np.float32)),
                         b.const(np.array(6.0, np.float32))])
    h = b.op("Div", [b.op("Mul", [c, clip]), b.const(np.array(6.0, np.float32))])
    h = b.op("Clip", [conv(h, width, width), b.const(np.array(0.0, np.float32)), b.const(np.array(6.0, np.float32))])
    h = b.op("HardSigmoid", [conv(h, width, width)], alpha=0.3, beta=0.4)
    flat = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    logits = b.op("Add", [b.op("MatMul", [flat, b.weight((width, classes))]), b.const(0.1 * b.rng.standard_normal(classes).astype(np.float32))])
    b.nodes.append(helper.make_node("Sigmoid", [logits], ["logits"], name="head"))
    wt = b.op("Transpose", [b.weight((classes, width))], perm=[1, 0])
    b.nodes.append(helper.make_node("Div", [b.op("MatMul", [flat, wt]), b.const(np.array(2.0, np.float32))], ["scores"], name="scaled"))
    return b.model(
        "rewrites",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, image, image])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", classes])],
        14,  # HardSwish is standard from 14
    )


def recurrent(op: str = "LSTM", seq: int = 8, features: int = 16, hidden: int = 32, seed: int = 0) -> onnx.ModelProto:
    """One bidirectional LSTM or GRU (GRU with linear_before_reset=1, as torch exports it) with
    biases; input ``x`` [seq, batch, features], outputs ``y`` [seq, 2, batch, hidden] and
    ``y_h`` [2, batch, hidden]."""
    b = _Builder(seed)
    gates = {"LSTM": 4, "GRU": 3}[op]
    w = b.weight((2, gates * hidden, features))
    r = b.weight((2, gates * hidden, hidden))
    bias = b.const(0.1 * b.rng.standard_normal((2, 2 * gates * hidden)).astype(np.float32))
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    b.nodes.append(helper.make_node(op, ["x", w, r, bias], ["y", "y_h"], name=op.lower(), hidden_size=hidden,
                                    direction="bidirectional", **extra))
    return b.model(
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, "batch", features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 2, "batch", hidden]),
         helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [2, "batch", hidden])],
    )


def control_flow(features: int = 8, steps: int = 4, seed: int = 0) -> onnx.ModelProto:
    """If and Loop: two Ifs whose conditions are opposite (so each run takes both branches,
    each reading an outer-scope value), then a Loop of ``steps`` iterations carrying
    s = tanh(s @ W + x) with W read from the outer scope, its scan output stacked; input
    ``x`` [batch, features], outputs ``branches`` [2, batch, features], ``state`` and ``trace``."""
    b = _Builder(seed)
    w = b.weight((features, features))
    cond = b.op("Greater", [b.op("ReduceSum", ["x"], keepdims=0), b.const(np.array(0.0, np.float32))])
    other = b.op("Not", [cond])
    f = TensorProto.FLOAT

    def branch(name, op, operand):
        node = helper.make_node(op, ["x", operand], [f"{name}_out"], name=f"{name}_node")
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_out", f, None)])

    one = b.const(np.array(1.0, np.float32))
    outs = []
    for k, c in enumerate((cond, other)):
        out = b.name("if")
        b.nodes.append(helper.make_node("If", [c], [out], name=b.name("If"),
                                        then_branch=branch(f"then{k}", "MatMul", w),
                                        else_branch=branch(f"else{k}", "Sub", one)))
        outs.append(b.op("Unsqueeze", [out, b.const(np.array([0], np.int64))]))
    b.nodes.append(helper.make_node("Concat", outs, ["branches"], name="branches", axis=0))
    body = helper.make_graph(
        [helper.make_node("MatMul", ["s_in", w], ["sw"]), helper.make_node("Add", ["sw", "x"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["s_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"])],
        "loop_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_in", f, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("s_out", f, None),
         helper.make_tensor_value_info("scan", f, None)],
    )
    zeros = b.op("Mul", ["x", b.const(np.array(0.0, np.float32))])
    b.nodes.append(helper.make_node("Loop", [b.const(np.array(steps, np.int64)), b.const(np.array(True)), zeros],
                                    ["state", "trace"], name="loop", body=body))
    return b.model(
        "control_flow",
        [helper.make_tensor_value_info("x", f, ["batch", features])],
        [helper.make_tensor_value_info("branches", f, [2, "batch", features]),
         helper.make_tensor_value_info("state", f, ["batch", features]),
         helper.make_tensor_value_info("trace", f, [steps, "batch", features])],
    )


def qdq(model: onnx.ModelProto, activation: str = "uint8", samples: int = 8, seed: int = 0) -> onnx.ModelProto:
    """``model`` quantized by ``onnxruntime.quantization.quantize_static`` in QDQ format:
    uint8 or uint16 activations (``activation``), int8 per-channel weights, calibrated (MinMax)
    on ``samples`` seeded random inputs of batch 1. Needs onnxruntime; 16-bit Q/DQ needs opset
    21 (build ``model`` at it, or it is converted)."""
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class _Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([random_inputs(model, batch=1, seed=seed + k) for k in range(samples)])

        def get_next(self):
            return next(self.feeds, None)

    if activation == "uint16" and model.opset_import[0].version < 21:
        model = onnx.version_converter.convert_version(model, 21)
    types = {"uint8": QuantType.QUInt8, "uint16": QuantType.QUInt16}
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(model, src)
        quantize_static(str(src), str(dst), _Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=types[activation], weight_type=QuantType.QInt8)
        return onnx.load(dst)


def random_inputs(model: onnx.ModelProto, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for the generated models (symbolic dims become ``batch``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        t = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(0, 1000, size=shape, dtype=np.int64)
        elif value.name == "attention_mask":
            mask = np.ones(shape, dtype=np.int64)
            mask[:, shape[1] * 3 // 4 :] = 0
            feeds[value.name] = mask
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 10, size=shape).astype(dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def text_image(batch: int, height: int = 320, width: int = 320, seed: int = 0) -> np.ndarray:
    """An OCR input: dark glyph-like blocks in rows on white, normalised as PaddleOCR does (NCHW float32):
    gives the detector real activations (random noise gives outputs near 0, where relative
    comparisons mean nothing)."""
    rng = np.random.default_rng(seed)
    img = np.ones((batch, height, width, 3), np.float32)
    for b in range(batch):
        for row in range(20, height - 30, 40):
            x0 = int(rng.integers(10, 60))
            x1 = int(rng.integers(x0 + 60, width - 10))
            for col in range(x0, x1, 12):
                img[b, row : row + 18, col : col + 8] = rng.uniform(0, 0.3)
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    return np.ascontiguousarray(((img - mean) / std).transpose(0, 3, 1, 2))


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer}
