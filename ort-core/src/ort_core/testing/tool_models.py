"""Models that onnxruntime's own tools make from the project's generated models, the way their
users make them: ``onnxruntime.transformers.optimizer`` (BERT and GPT-2 fusions),
``onnxruntime.quantization`` (static QOperator, dynamic) and the MatMulNBits weight-only
quantizer. They carry onnxruntime's com.microsoft contrib ops. onnxruntime must be installed
(it is in every package's ``test`` extra). Each function returns (model bytes, feeds).
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import models
from .models import _Builder

BERT = dict(seq=16, dim=64, heads=4, layers=2)


def gpt_decoder(vocab: int = 256, dim: int = 64, heads: int = 4, layers: int = 2, max_positions: int = 64,
                seed: int = 0) -> onnx.ModelProto:
    """GPT-2-style decoder with past key/values, as exported for generation: inputs
    ``input_ids`` int64 [batch, seq] and ``past_key_<i>`` / ``past_value_<i>`` [batch, heads,
    past, head_dim]; outputs ``logits`` and ``present_key_<i>`` / ``present_value_<i>``. Each
    layer: LayerNormalization, one QKV projection split three ways, the past concatenated, a
    causal mask sliced from a lower-triangular buffer, tanh-GELU MLP (GPT-2's)."""
    b = _Builder(seed)
    head = dim // heads
    i64 = lambda v: b.const(np.array(v, np.int64))  # noqa: E731
    past_len = b.op("Gather", [b.op("Shape", ["past_key_0"]), i64(2)], axis=0)
    seq_len = b.op("Gather", [b.op("Shape", ["input_ids"]), i64(1)], axis=0)
    total = b.op("Add", [past_len, seq_len])
    positions = b.op("Unsqueeze", [b.op("Range", [past_len, total, i64(1)]), i64([0])])
    wte = b.weight((vocab, dim), 0.02)
    h = b.op("Add", [b.op("Gather", [wte, "input_ids"], axis=0), b.op("Gather", [b.weight((max_positions, dim), 0.02), positions], axis=0)])
    tril = b.const(np.tril(np.ones((max_positions, max_positions), bool)).reshape(1, 1, max_positions, max_positions))
    mask = b.op("Slice", [b.op("Slice", [tril, b.op("Unsqueeze", [past_len, i64([0])]), b.op("Unsqueeze", [total, i64([0])]), i64([2])]),
                          i64([0]), b.op("Unsqueeze", [total, i64([0])]), i64([3])])
    batch1 = b.op("Unsqueeze", [b.op("Gather", [b.op("Shape", ["input_ids"]), i64(0)], axis=0), i64([0])])
    split_shape = b.op("Concat", [batch1, i64([-1, heads, head])], axis=0)
    merge_shape = b.op("Concat", [batch1, i64([-1, dim])], axis=0)

    def ln(x):
        return b.op("LayerNormalization", [x, b.const(np.ones(dim, np.float32)), b.const(np.zeros(dim, np.float32))], axis=-1, epsilon=1e-5)

    def linear(x, din, dout):
        return b.op("Add", [b.op("MatMul", [x, b.weight((din, dout))]), b.const(np.zeros(dout, np.float32))])

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])]
    for layer in range(layers):
        qkv = linear(ln(h), dim, 3 * dim)
        q, k, v = b.op("Split", [qkv, i64([dim, dim, dim])], n_out=3, axis=-1)
        q, k, v = (b.op("Transpose", [b.op("Reshape", [t, split_shape])], perm=[0, 2, 1, 3]) for t in (q, k, v))
        for kind, new in (("key", k), ("value", v)):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}_{layer}", TensorProto.FLOAT, ["batch", heads, "past", head]))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}_{layer}", TensorProto.FLOAT, ["batch", heads, "total", head]))
            b.nodes.append(helper.make_node("Concat", [f"past_{kind}_{layer}", new], [f"present_{kind}_{layer}"], axis=2,
                                            name=b.name("Concat")))
        scores = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [f"present_key_{layer}"], perm=[0, 1, 3, 2])]),
                              b.const(np.array(np.sqrt(head), np.float32))])
        scores = b.op("Where", [mask, scores, b.const(np.array(-10000.0, np.float32))])
        ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), f"present_value_{layer}"])
        attn = linear(b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape]), dim, dim)
        h = b.op("Add", [h, attn])
        ff = linear(ln(h), dim, 4 * dim)
        cube = b.op("Mul", [b.op("Pow", [ff, b.const(np.array(3.0, np.float32))]), b.const(np.array(0.044715, np.float32))])
        inner = b.op("Mul", [b.op("Add", [ff, cube]), b.const(np.array(np.sqrt(2 / np.pi), np.float32))])
        gelu = b.op("Mul", [b.op("Mul", [ff, b.const(np.array(0.5, np.float32))]),
                            b.op("Add", [b.op("Tanh", [inner]), b.const(np.array(1.0, np.float32))])])
        h = b.op("Add", [h, linear(gelu, 4 * dim, dim)])
    logits = b.op("MatMul", [ln(h), b.op("Transpose", [wte], perm=[1, 0])])
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="output"))
    return b.model("gpt_decoder", inputs, outputs)


def gpt_feeds(model: onnx.ModelProto, batch: int = 2, seq: int = 3, past: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, 256, (batch, seq)).astype(np.int64)}
    for value in model.graph.input[1:]:
        dims = value.type.tensor_type.shape.dim
        feeds[value.name] = rng.standard_normal((batch, dims[1].dim_value, past, dims[3].dim_value)).astype(np.float32)
    return feeds


def _quiet():
    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def bert_optimized() -> tuple[bytes, dict]:
    """The BERT encoder through ``optimizer.optimize_model(model_type="bert")`` (its Python fusions,
    opt_level=0: the onnxruntime graph pass on top wants torch installed)."""
    from onnxruntime.transformers.optimizer import optimize_model

    _quiet()
    bert = models.transformer(**BERT)
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(bert, Path(tmp) / "bert.onnx")
        opt = optimize_model(str(Path(tmp) / "bert.onnx"), model_type="bert", num_heads=BERT["heads"], hidden_size=BERT["dim"], opt_level=0)
        opt.save_model_to_file(str(Path(tmp) / "opt.onnx"))
        return (Path(tmp) / "opt.onnx").read_bytes(), models.random_inputs(bert, batch=2)


def gpt2_optimized() -> tuple[bytes, dict]:
    """The GPT-style decoder with past key/values through ``optimize_model(model_type="gpt2")``."""
    from onnxruntime.transformers.optimizer import optimize_model

    _quiet()
    gpt = gpt_decoder()
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(gpt, Path(tmp) / "gpt.onnx")
        opt = optimize_model(str(Path(tmp) / "gpt.onnx"), model_type="gpt2", num_heads=4, hidden_size=64, opt_level=0)
        opt.save_model_to_file(str(Path(tmp) / "opt.onnx"))
        return (Path(tmp) / "opt.onnx").read_bytes(), gpt_feeds(gpt)


def cnn_qoperator() -> tuple[bytes, dict]:
    """The CNN through static quantization in QOperator format (uint8 activations, int8
    weights, calibrated on four seeded batches)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    _quiet()
    cnn = models.cnn(image=32, width=16, blocks=2)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([models.random_inputs(cnn, batch=2, seed=s) for s in range(4)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(cnn, Path(tmp) / "cnn.onnx")
        quantize_static(str(Path(tmp) / "cnn.onnx"), str(Path(tmp) / "q.onnx"), Reader(), quant_format=QuantFormat.QOperator,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return (Path(tmp) / "q.onnx").read_bytes(), models.random_inputs(cnn, batch=2, seed=9)


def bert_dynamic() -> tuple[bytes, dict]:
    """The BERT encoder through dynamic quantization (int8 weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _quiet()
    bert = models.transformer(**BERT)
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(bert, Path(tmp) / "bert.onnx")
        quantize_dynamic(str(Path(tmp) / "bert.onnx"), str(Path(tmp) / "q.onnx"), weight_type=QuantType.QInt8)
        return (Path(tmp) / "q.onnx").read_bytes(), models.random_inputs(bert, batch=2)


def bert_matmul_nbits(block_size: int = 32) -> tuple[bytes, dict]:
    """The BERT encoder (MatMul-heavy) through onnxruntime's MatMulNBits quantizer (4-bit)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    _quiet()
    bert = models.transformer(**BERT)
    quantizer = MatMulNBitsQuantizer(bert, block_size=block_size, is_symmetric=False)
    quantizer.process()
    return quantizer.model.model.SerializeToString(), models.random_inputs(bert, batch=2)


TOOL_MODELS = {
    "bert-optimized": bert_optimized,
    "gpt2-optimized": gpt2_optimized,
    "cnn-qoperator": cnn_qoperator,
    "bert-dynamic": bert_dynamic,
    "bert-matmulnbits": bert_matmul_nbits,
}
