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

    def model(self, name, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ort-core")
        model.ir_version = 8
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


def cnn(image: int = 64, width: int = 32, blocks: int = 3, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
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
    )


def transformer(vocab: int = 1000, seq: int = 64, dim: int = 128, heads: int = 4, layers: int = 2, seed: int = 0,
                pooler: bool = False) -> onnx.ModelProto:
    """BERT-style encoder: token + position embeddings (Gather), LayerNormalization,
    multi-head self-attention with a padding mask, GELU (Erf) feed-forward; inputs
    ``input_ids`` int64 [batch, seq] and ``attention_mask`` int64 [batch, seq]. With
    ``pooler``, BERT's pooler as torch.onnx exports it (first token -> Linear -> Tanh) gives a
    second output ``pooler_output`` [batch, dim]."""
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
        return b.op("Add", [b.op("MatMul", [x, b.weight((din, dout))]), b.const(np.zeros(dout, np.float32))])

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
