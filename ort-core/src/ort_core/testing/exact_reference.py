"""onnxruntime as an exact reference for integer models, on every x86-64 CPU.

On CPUs with AVX2 but no VNNI (AMD EPYC before Zen 4, Intel before Cascade Lake), onnxruntime's
MLAS multiplies uint8 activations by int8 weights with VPMADDUBSW, whose int16 sums of pairs
saturate: ``(255 * 127) * 2`` does not fit, and the product is then not the model's (a
quantized T5 encoder's output 0.65 off; onnxruntime's quantization documentation names the
limit). Its uint8 x uint8 and int8 x int8 products are exact there.

``with_uint8_weights`` writes every int8 constant weight of an integer product as uint8, ``w +
128`` with its zero point ``+ 128``: every product holds the same integers, and onnxruntime
computes them with its exact kernels. ``session`` makes an onnxruntime session of the model so
written where this CPU's onnxruntime saturates, of the model as given elsewhere; tests, the
parity matrix, the conformance kit and the benchmark take their references from it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

_MS = "com.microsoft"

# (domain, op) -> (its activation input, (weight input, its zero point input) pairs): the
# int8 constant operands that onnxruntime multiplies by activations. Where the activation is
# int8 the node is left alone (onnxruntime has no int8 x uint8 for most); ``None``: always
# uint8 (dynamically quantized floats), or a QDQ model's weights, which onnxruntime fuses into
# QLinearConv/MatMul with either activation type (its int8 x int8 convolution saturates too)
WEIGHT_INPUTS: dict[tuple[str, str], tuple[int | None, tuple[tuple[int, int], ...]]] = {
    ("", "MatMulInteger"): (0, ((1, 3),)),
    ("", "ConvInteger"): (0, ((1, 3),)),
    ("", "QLinearMatMul"): (0, ((3, 5),)),
    ("", "QLinearConv"): (0, ((3, 5),)),
    ("", "DequantizeLinear"): (None, ((0, 2),)),  # a QDQ model's weights; onnxruntime fuses them into QLinearConv/MatMul
    (_MS, "MatMulIntegerToFloat"): (0, ((1, 5),)),
    (_MS, "DynamicQuantizeMatMul"): (None, ((1, 3),)),
    (_MS, "QGemm"): (0, ((3, 5),)),
    (_MS, "QAttention"): (0, ((1, 7),)),
    (_MS, "DynamicQuantizeLSTM"): (None, ((1, 9), (2, 11))),
}


@functools.cache
def onnxruntime_saturates_u8s8() -> bool:
    """Whether this CPU's onnxruntime gives a uint8 x int8 product that is not exact."""
    import onnxruntime

    a = np.full((1, 64), 255, np.uint8)
    b = np.full((64, 1), 127, np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "u8s8",
        [helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, [1, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, [1, 1])],
        [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    got = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    return int(got[0, 0]) != 255 * 127 * 64


def with_uint8_weights(model: onnx.ModelProto | bytes) -> onnx.ModelProto | bytes:
    """``model`` with its int8 constant weights of integer products written as uint8 (see the
    module docstring); subgraphs included. Returns the form it was given."""
    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.ModelProto.FromString(model.SerializeToString())
    _rewrite(proto.graph, {}, _int8_values(proto))
    return proto.SerializeToString() if isinstance(model, bytes) else proto


def session(model: onnx.ModelProto | bytes | str | os.PathLike, sess_options: Any = None, **kwargs: Any):
    """An onnxruntime CPU session of ``model`` (a proto, its bytes or its path), exact in its
    integer products on this CPU."""
    import onnxruntime

    if onnxruntime_saturates_u8s8():
        model = with_uint8_weights(onnx.load(model) if isinstance(model, (str, os.PathLike)) else model)
    data = str(Path(model)) if isinstance(model, (str, os.PathLike)) else model
    data = data if isinstance(data, (bytes, str)) else data.SerializeToString()
    kwargs.setdefault("providers", ["CPUExecutionProvider"])
    return onnxruntime.InferenceSession(data, sess_options, **kwargs)


def _int8_values(model: onnx.ModelProto) -> set[str]:
    """The values onnx's type inference finds int8 (or that are given as int8)."""
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model onnx cannot infer: the given types only
        pass
    int8 = set()
    for graph in _graphs(model.graph):
        for info in [*graph.input, *graph.value_info, *graph.output]:
            if info.type.tensor_type.elem_type == onnx.TensorProto.INT8:
                int8.add(info.name)
    return int8


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for attr in node.attribute for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs)]


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for sub in _subgraphs(node):
            yield from _graphs(sub)


def _rewrite(graph: onnx.GraphProto, outer: dict[str, onnx.TensorProto], int8: set[str]) -> None:
    inits = {**outer, **{t.name: t for t in graph.initializer}}
    added: dict[str, str] = {}  # int8 initializer -> its uint8 twin

    def as_uint8(name: str) -> str:
        if name not in added:
            values = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
            added[name] = f"{name}__uint8"
            graph.initializer.append(numpy_helper.from_array(values.astype(np.uint8), added[name]))
        return added[name]

    int8_operands = int8 | {name for name, t in inits.items() if t.data_type == onnx.TensorProto.INT8}
    for node in graph.node:
        activation, weights = WEIGHT_INPUTS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type), (None, ()))
        if activation is not None and node.input[activation] in int8_operands:
            continue  # onnxruntime has no int8 x uint8 for most of these ops
        for weight, zero_point in weights:
            if not _is_int8_constant(node, weight, inits):
                continue
            has_zero_point = len(node.input) > zero_point and node.input[zero_point]
            if has_zero_point and not _is_int8_constant(node, zero_point, inits):
                continue  # a computed zero point: left as it is
            while len(node.input) <= zero_point:
                node.input.append("")
            if has_zero_point:
                node.input[zero_point] = as_uint8(node.input[zero_point])
            else:  # int8's zero point 0 is uint8's 128, in the shape the scale gives
                name = f"{node.name or node.output[0]}__zero_point_{zero_point}"
                shape = _zero_point_shape(node, weight, inits)
                graph.initializer.append(numpy_helper.from_array(np.full(shape, 128, np.uint8), name))
                node.input[zero_point] = name
            node.input[weight] = as_uint8(node.input[weight])
        for sub in _subgraphs(node):
            _rewrite(sub, inits, int8)
    # the int8 originals no node reads any more (onnxruntime warns of unused initializers)
    used = _names_read(graph)
    kept = [t for t in graph.initializer if t.name not in added or t.name in used]
    if len(kept) < len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _names_read(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output} | {i.name for i in graph.input}
    for node in graph.node:
        names.update(node.input)
        for sub in _subgraphs(node):
            names |= _names_read(sub)
    return names


def _is_int8_constant(node: onnx.NodeProto, index: int, inits: dict[str, onnx.TensorProto]) -> bool:
    return (len(node.input) > index and node.input[index] in inits
            and inits[node.input[index]].data_type == onnx.TensorProto.INT8)


def _zero_point_shape(node: onnx.NodeProto, weight: int, inits: dict[str, onnx.TensorProto]) -> tuple[int, ...]:
    """The shape of the zero point a node without one is given: its scale's (DequantizeLinear's,
    which must match), one per direction for an LSTM's, else one for the tensor."""
    if node.op_type == "DequantizeLinear":
        scale = inits.get(node.input[1])
        return tuple(scale.dims) if scale is not None else ()
    if node.op_type == "DynamicQuantizeLSTM":
        return (int(inits[node.input[weight]].dims[0]),)
    return ()
