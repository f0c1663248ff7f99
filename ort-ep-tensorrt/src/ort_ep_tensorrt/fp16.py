"""``trt_fp16_enable`` under TensorRT 11: the claimed subgraph converted to float16 before parsing.

TensorRT 11 networks are strongly typed (no FP16 builder flag), so reduced precision must be in
the model. The conversion is onnxconverter-common's ``convert_float_to_float16``, the converter
onnxruntime's own float16 tooling is built on, with its rules: float32 inputs and outputs kept
(Casts at the boundaries), and the numerically sensitive ops left in float32 (its default block
list plus the reductions and normalizations that overflow float16's range).
"""

from __future__ import annotations

import logging
import warnings

import onnx

logger = logging.getLogger("ort_core")

#: ops kept in float32 beside onnxconverter-common's DEFAULT_OP_BLOCK_LIST: sums of squares and
#: exponentials overflow float16 (max 65504), and softmax/normalization statistics lose precision
SENSITIVE_OPS = (
    "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization", "BatchNormalization",
    "InstanceNormalization", "GroupNormalization", "Softmax", "LogSoftmax", "ReduceSumSquare", "ReduceL2",
    "ReduceLogSumExp", "ReduceMean", "Pow", "Exp", "Log", "Erf",
)


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with float32 tensors in float16 except the block list; I/O stays float32."""
    from onnxconverter_common import float16

    block = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(SENSITIVE_OPS))
    # the model's own Casts to float32 (e.g. of an attention mask), by output name
    own_casts = {n.output[0] for n in model.graph.node
                 if n.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in n.attribute)}
    with warnings.catch_warnings():
        # the converter warns for every initializer it clamps to float16's range: expected here
        warnings.simplefilter("ignore", UserWarning)
        converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=block,
                                                     disable_shape_infer=False)
    # the converter rewrites every float value_info to float16, also those of values its
    # block list keeps in float32 (e.g. a Cast to float): drop them, shape inference redoes them
    del converted.graph.value_info[:]
    # as onnxruntime's converter does, a Cast to float32 of the model's own that is not blocked
    # casts to float16 (onnxconverter-common leaves it float32, which its float16 consumers
    # then cannot take)
    for node in converted.graph.node:
        if node.op_type == "Cast" and node.output[0] in own_casts:
            for a in node.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                    a.i = onnx.TensorProto.FLOAT16
    return converted
