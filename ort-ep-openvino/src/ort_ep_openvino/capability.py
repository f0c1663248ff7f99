"""Which nodes OpenVINO takes, decided by OpenVINO, and how they are grouped.

Each candidate node is cut out as a one-node ONNX model (constant inputs embedded), read by
OpenVINO's ONNX frontend and queried on the target device (``Core.query_model``): the node is
supported when the frontend converts it and the device supports every operation it became.
Answers are cached per process by a signature of the node (op, opset, attributes, input
types, ranks and small constant values), so a model with many alike nodes asks once per kind.

Supported nodes are then grouped into maximal connected groups that can be fused without a
cycle (a path leaving the group and coming back through a declined node), see ``groups``.
"""

from __future__ import annotations

import functools
import hashlib
import io
import platform
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ort_core import GraphView, NodeView
from ort_core.devices import host_cpu

from . import _ov

# element types exchanged with OpenVINO: not strings, complex or float8 (the frontend has no
# mapping), nor bfloat16 (OpenVINO's Python API does not read ml_dtypes' bfloat16 buffers as
# bf16: the conformance cases came back as garbage)
SUPPORTED_TYPES = frozenset(
    f"tensor({t})"
    for t in (
        "float", "float16", "double", "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64", "bool",
    )
)
_PLUMBING = ("Parameter", "Result", "Constant")
_SMALL_CONST = 64  # constants up to this many elements are part of the signature

_cache: dict[tuple[str, str], str | None] = {}
_cache_lock = threading.Lock()


def type_reason(graph: GraphView, node: NodeView) -> str | None:
    """Why OpenVINO cannot take ``node`` for the types of its values alone, else None."""
    for name in (*node.inputs, *node.outputs):
        if not name:
            continue
        try:
            value = graph.value(name)
        except KeyError:
            return f"value {name!r} is not defined"
        # an unknown type (a value a graph rewrite made without one) is left to OpenVINO,
        # which infers it when converting
        if value.type not in SUPPORTED_TYPES and value.type != "unknown":
            what = "input" if name in node.inputs else "output"
            return (f"{what} {name!r} is {value.type}; OpenVINO takes tensors of these types only: "
                    + ", ".join(sorted(t[7:-1] for t in SUPPORTED_TYPES)))
    return None


# Where OpenVINO (2026.4, CPU) accepts a node but computes something else than ONNX specifies,
# found by the ONNX backend node suite (see README). OpenVINO decides support; this list only
# takes back what it would get wrong. op -> why, for ops that diverge whatever their attributes.
DIVERGENT_OPS: dict[str, str] = {
    "BitShift": "OpenVINO's BitShift differs from ONNX for negative values and shifts >= the bit width",
    "DeformConv": "OpenVINO's DeformConv differs from ONNX's reference",
    "DFT": "OpenVINO's DFT differs from ONNX (onesided/inverse forms)",
    "STFT": "OpenVINO's STFT differs from ONNX's reference",
    "MelWeightMatrix": "OpenVINO's MelWeightMatrix differs from ONNX's reference",
    "DynamicQuantizeLinear": "OpenVINO rounds DynamicQuantizeLinear differently (off by one)",
    "NonMaxSuppression": "OpenVINO's NonMaxSuppression differs at the IoU threshold boundary",
    "TopK": "OpenVINO orders the indices of equal values differently from ONNX (lower index first)",
    "Attention": "OpenVINO's Attention-23 conversion differs from ONNX (windows, masks, caches)",
}


# onnxruntime's com.microsoft ops that OpenVINO's frontend converts but computes otherwise than
# onnxruntime's kernels, found running ort-ep-cpu's contrib-op tests and onnxruntime's tool
# models (QOperator CNN, MatMulNBits BERT) through OpenVINO (2026.4, CPU).
DIVERGENT_MS_OPS: dict[str, str] = {
    "QLinearAdd": "OpenVINO's QLinearAdd rounds otherwise than onnxruntime (half the elements one unit off; the QOperator CNN's logits 120% off)",
    "QLinearMul": "OpenVINO's QLinearMul rounds otherwise than onnxruntime (half the elements one unit off)",
    "QLinearSigmoid": "OpenVINO's QLinearSigmoid rounds otherwise than onnxruntime (half the elements one unit off)",
    "QLinearLeakyRelu": "OpenVINO's QLinearLeakyRelu differs from onnxruntime's (up to 255 units)",
    "QLinearAveragePool": "OpenVINO's QLinearAveragePool differs from onnxruntime's (up to 251 units)",
    "QLinearConcat": "OpenVINO's QLinearConcat differs from onnxruntime's for inputs requantized to the output's scale (up to 255 units)",
    "DynamicQuantizeMatMul": "OpenVINO's DynamicQuantizeMatMul differs from onnxruntime's (every element)",
    "DynamicQuantizeLSTM": "OpenVINO's DynamicQuantizeLSTM differs from onnxruntime's quantized recurrence",
    "MatMulNBits": "OpenVINO's CPU plugin quantizes the activations of MatMulNBits products (1e-2 of the output's range off onnxruntime's float compute)",
}


def divergence_reason(graph: GraphView, node: NodeView) -> str | None:
    """Why ``node`` must not go to OpenVINO although it converts: it would compute something
    else than ONNX specifies (each rule was seen failing the ONNX node suite), or, for
    onnxruntime's com.microsoft ops, than onnxruntime's kernels. None if fine."""
    if node.domain == "com.microsoft" and node.op_type == "FusedGemm" and node.attr("activation", "") not in ("Relu", "LeakyRelu"):
        # the frontend converts the Gemm and drops any other activation (Tanh: errors of 27)
        return f"OpenVINO's com.microsoft FusedGemm ignores activation {node.attr('activation', '')!r}"
    if node.domain == "com.microsoft" and node.op_type in DIVERGENT_MS_OPS:
        return DIVERGENT_MS_OPS[node.op_type]
    if node.domain:
        return None
    op = node.op_type
    if op in DIVERGENT_OPS:
        return DIVERGENT_OPS[op]
    for k, name in enumerate(node.inputs):
        value = graph.value(name) if name else None
        # empty constant parameters (e.g. Resize's unused roi) are fine; empty data is not
        if (value is not None and value.shape and any(d == 0 for d in value.shape)
                and (k == 0 or value.const_value is None)):
            return f"input {name!r} is empty (shape {list(value.shape)}); OpenVINO mishandles empty tensors"
    dtypes = [graph.value(n).dtype for n in (*node.inputs, *node.outputs) if n]
    if any(d is not None and d == np.float64 for d in dtypes):
        return "OpenVINO computes double as float, losing precision and saturating infinities"
    if op in ("ReduceMax", "ReduceMin") and any(d is not None and d.kind == "f" for d in dtypes):
        return f"OpenVINO's {op} gives the largest finite float where ONNX gives an infinity (all-masked rows)"
    if op in ("Cast", "CastLike") and node.inputs and graph.value(node.inputs[0]).const_value is not None:
        const = graph.value(node.inputs[0]).const_value
        if const.dtype.kind == "f" and not np.all(np.isfinite(const)):
            return "OpenVINO's Convert saturates infinities (the ONNX result keeps them)"
    if op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual") and any(
        _infinite_constant(graph, n) for n in node.inputs
    ):
        # e.g. the fully-masked-row guard of ONNX's Attention function (ReduceMax == -inf);
        # in one group with the attention OpenVINO fuses it away and returns NaN rows
        return f"{op} against an infinite constant: OpenVINO saturates infinities"
    if op in ("RNN", "GRU", "LSTM"):
        if node.attr("layout", 0) == 1:
            return f"OpenVINO's {op} with layout=1 (batch first) differs from ONNX"
        if op == "LSTM" and len(node.inputs) > 7 and node.inputs[7]:
            return "OpenVINO's LSTM with peepholes differs from ONNX"
    if op in ("MaxPool", "AveragePool") and node.attr("ceil_mode", 0) == 1:
        return f"OpenVINO's {op} with ceil_mode=1 differs from ONNX where the last window starts in the padding"
    if op in ("QuantizeLinear", "DequantizeLinear") and any(
        d is not None and d.itemsize == 2 and d.kind in "iu" for d in dtypes
    ):
        return f"OpenVINO's {op} with 16-bit integers differs from ONNX"
    if op == "QuantizeLinear" and len(node.inputs) > 1 and graph.value(node.inputs[1]).const_value is None:
        # constant scales (QDQ models) are fine; computed ones meet OpenVINO's reciprocal
        # multiply, which rounds exact .5 ties the other way
        return "OpenVINO's QuantizeLinear with a computed scale rounds ties differently from ONNX"
    if op == "Constant" and node.outputs and (c := graph.value(node.outputs[0]).const_value) is not None and c.size == 0:
        return "an empty Constant comes back from OpenVINO with the wrong shape"
    if op == "RoiAlign" and node.attr("mode", "avg") == "max":
        return "OpenVINO's RoiAlign mode=max differs from ONNX"
    if op == "SpaceToDepth" and "mode" in node.attributes:
        return "SpaceToDepth with a mode attribute: OpenVINO applies it, ONNX has none"
    if op == "Tile" and len(node.inputs) > 1 and graph.value(node.inputs[1]).const_value is None:
        return "OpenVINO's Tile with computed (non-constant) repeats gave wrong values"
    if op == "Range" and (len(node.inputs) < 3 or not _nonzero_constant(graph, node.inputs[2])):
        return "OpenVINO's Range returns an empty tensor for a delta of 0, where ONNX (onnxruntime) fails"
    if _too_deep(node):
        return (f"{op} with control flow nested {_control_flow_depth(node.ir)} deep (more than "
                f"{MAX_CONTROL_FLOW_DEPTH}): OpenVINO's query and compile time doubles with each level "
                "(depth 20 took 31 s)")
    if op == "Resize":
        return _resize_reason(graph, node)
    return None


#: ops OpenVINO's CPU plugin runs with 8-bit integer kernels (a QDQ model's Q/DQ pairs become
#: its FakeQuantize, and the convolutions and matmuls between them integer ones)
INT8_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
                      "MatMulInteger", "DynamicQuantizeLinear"})


def int8_reason(node: NodeView, device: str) -> str | None:
    """Why an 8-bit op must not go to OpenVINO's CPU plugin on this CPU: on an x86 CPU without
    8-bit dot-product instructions (VNNI, AMX), OpenVINO 2026.4's multi-threaded 8-bit kernels
    gave different answers run to run (a QDQ CNN 8 output steps off on some runs, 1 on the
    others; every run 1 with one thread: measured on an AVX2 AMD EPYC)."""
    if node.op_type in INT8_OPS and node.domain in ("", "com.microsoft") and "CPU" in device.upper() \
            and not cpu_has_int8_dot_products():
        return ("OpenVINO's 8-bit CPU kernels are not repeatable on a CPU without VNNI or AMX "
                "(answers differed run to run)")
    return None


@functools.cache
def cpu_has_int8_dot_products() -> bool:
    """Whether this CPU has 8-bit dot-product instructions, or is not an x86 one (True where its
    flags cannot be read)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return True
    flags = host_cpu().flags
    return not flags or bool({"avx512_vnni", "avx_vnni", "amx_int8"} & flags)


#: control flow nested deeper than this is declined: OpenVINO 2026.4's query_model and
#: compile_model time doubles per nested If (depth 15: 2.2 s, 20: 31 s, 22: 124 s)
MAX_CONTROL_FLOW_DEPTH = 8


def _too_deep(node: NodeView) -> bool:
    return node.op_type in ("If", "Loop", "Scan") and _control_flow_depth(node.ir) > MAX_CONTROL_FLOW_DEPTH


def _control_flow_depth(node: Any) -> int:
    """Levels of If/Loop/Scan from ``node`` (an onnx-ir node) down: 1 for one without any inside."""
    deepest = 0
    for a in node.attributes.values():
        kind = getattr(a.type, "name", "")
        subs = [a.value] if kind == "GRAPH" else list(a.value) if kind == "GRAPHS" else []
        for sub in subs:
            for inner in sub:
                if inner.op_type in ("If", "Loop", "Scan"):
                    deepest = max(deepest, _control_flow_depth(inner))
    return deepest + 1


def _nonzero_constant(graph: GraphView, name: str) -> bool:
    value = graph.value(name).const_value if name else None
    return value is not None and value.size == 1 and bool(np.all(value != 0))


def _infinite_constant(graph: GraphView, name: str, depth: int = 3) -> bool:
    """``name`` is a constant holding an infinity, possibly through Cast/CastLike/Identity."""
    if not name:
        return False
    value = graph.value(name)
    const = value.const_value
    if const is not None:
        return const.dtype.kind == "f" and bool(np.isinf(const).any())
    producer = graph.producer.get(name)
    if depth and producer is not None:
        node = graph.nodes[producer]
        if node.op_type in ("Cast", "CastLike", "Identity") and node.inputs:
            return _infinite_constant(graph, node.inputs[0], depth - 1)
    return False


def _resize_reason(graph: GraphView, node: NodeView) -> str | None:
    mode = node.attr("mode", "nearest")
    if node.attr("antialias", 0):
        return "OpenVINO's Resize ignores antialias"
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "OpenVINO's Resize ignores keep_aspect_ratio_policy"
    if mode == "cubic" and (node.attr("exclude_outside", 0) or abs(node.attr("cubic_coeff_a", -0.75) + 0.75) > 1e-6):
        return "OpenVINO's cubic Resize differs with exclude_outside or cubic_coeff_a != -0.75"
    if mode in ("linear", "cubic") and node.attr("coordinate_transformation_mode", "half_pixel") == "align_corners":
        return f"OpenVINO's {mode} Resize with align_corners differs from ONNX when downsampling"
    return None


def decline_reason(graph: GraphView, node: NodeView, device: str, hints: ShapeHints | None = None) -> str | None:
    """None when OpenVINO takes ``node`` on ``device`` (asked of OpenVINO), else why not."""
    return decline_reasons(graph, [node.index], device, hints)[node.index]


def node_model(graph: GraphView, indices: Iterable[int], hints: ShapeHints | None = None) -> onnx.ModelProto:
    """The nodes as a standalone model, with values computed by Constant nodes outside the
    group embedded as initializers (OpenVINO needs some inputs, e.g. shapes, to be constant
    to convert or to compile well), and input/output shapes the graph does not know filled in
    from ``hints``."""
    model = graph.group_to_model(sorted(indices))
    if hints:
        for info in (*model.graph.input, *model.graph.output):
            hint = hints.get(info.name)
            if hint is None:
                continue
            elem_type, dims = hint
            tensor_type = info.type.tensor_type
            if not info.type.HasField("tensor_type") and elem_type:
                tensor_type.elem_type = elem_type
            if not info.type.HasField("tensor_type") or dims is None:
                continue
            if not tensor_type.HasField("shape"):
                shape = tensor_type.shape
                shape.SetInParent()  # present with no dims is a scalar
                for d in dims:
                    dim = shape.dim.add()
                    if d is not None:
                        dim.dim_value = d
            elif len(tensor_type.shape.dim) == len(dims):
                for dim, d in zip(tensor_type.shape.dim, dims):
                    if d is not None and not dim.HasField("dim_value"):
                        dim.dim_value = d  # OpenVINO knows this size statically; ONNX did not
    moved = []
    for inp in model.graph.input:
        try:
            const = graph.value(inp.name).const_value
        except KeyError:
            const = None
        if const is not None:
            moved.append((inp, const))
    for inp, const in moved:
        model.graph.input.remove(inp)
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(const), inp.name))
    if graph.opset_imports.get("", 0) >= 11:  # Clip-6's bounds are attributes
        _fill_clip_bounds(model.graph, _clip_types(graph))
    return model


# OpenVINO's ONNX frontend (2026.4) dies with SIGSEGV converting a Clip-11+ with its min or max
# omitted whose data input comes from a node it could not convert (the input's element type is
# then dynamic, and the translator builds the omitted bound from that type). It does so in
# ``convert_partially`` (the survey) and ``read_model`` alike, taking the process with it: seen
# with onnx-asr's wespeaker front end (DFT -> ReduceSumSquare -> MatMul that fails to convert ->
# Clip(x, eps)). So no model handed to OpenVINO has such a Clip: an omitted bound is spelled out
# as ONNX defines it, the type's lowest or largest value (so +-inf saturate, as in onnxruntime).
# A Clip whose element type the graph does not know cannot be filled in: ``fragile_reason``
# declines it and keeps it out of the survey.


def _clip_types(graph: GraphView) -> dict[str, np.dtype]:
    """The element type of each Clip's output, by output name, in ``graph`` and its bodies."""
    types: dict[str, np.dtype] = {}
    for node in graph.nodes:
        if node.op_type == "Clip" and not node.domain and node.outputs and node.outputs[0]:
            dtype = _clip_dtype(graph, node)
            if dtype is not None:
                types[node.outputs[0]] = dtype
        for value in node.attributes.values():
            for body in value if isinstance(value, list) else [value]:
                if isinstance(body, GraphView):
                    types.update(_clip_types(body))
    return types


def _clip_dtype(graph: GraphView, node: NodeView) -> np.dtype | None:
    for name in (node.outputs[0], node.inputs[0] if node.inputs else ""):
        if name and graph.value(name).dtype is not None:
            return graph.value(name).dtype
    return None


def _fill_clip_bounds(graph: onnx.GraphProto, types: dict[str, np.dtype]) -> None:
    nodes = []
    for node in graph.node:
        for attr in node.attribute:
            for body in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                _fill_clip_bounds(body, types)
        inputs = list(node.input) + [""] * (3 - len(node.input))
        dtype = types.get(node.output[0]) if node.op_type == "Clip" and node.domain in ("", "ai.onnx") else None
        if dtype is not None and not (inputs[1] and inputs[2]):
            info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
            for k, bound in ((1, info.min), (2, info.max)):
                if not inputs[k]:
                    inputs[k] = f"{node.output[0]}__clip_bound{k}"
                    tensor = onnx.numpy_helper.from_array(np.array(bound, dtype=dtype), inputs[k])
                    nodes.append(onnx.helper.make_node("Constant", [], [inputs[k]], value=tensor))
            del node.input[:]
            node.input.extend(inputs)
        copy = onnx.NodeProto()  # the originals go with the field cleared below
        copy.CopyFrom(node)
        nodes.append(copy)
    del graph.node[:]
    graph.node.extend(nodes)


def fragile_reason(graph: GraphView, node: NodeView) -> str | None:
    """Why handing ``node`` to OpenVINO's frontend could crash the process, else None: a
    Clip-11+ with an omitted bound whose element type is unknown (see ``_fill_clip_bounds``)."""
    if (node.op_type == "Clip" and not node.domain and node.opset >= 11
            and (len(node.inputs) < 3 or not node.inputs[1] or not node.inputs[2])
            and _clip_dtype(graph, node) is None):
        return "Clip with an omitted min/max and an unknown element type (OpenVINO's frontend can crash on it)"
    return None


def rule_reason(graph: GraphView, node: NodeView, device: str) -> str | None:
    """Why ``node`` is declined before OpenVINO is asked: its types, a fragile form, a known
    divergence, or 8-bit kernels this CPU does not run repeatably; None if none applies."""
    return (type_reason(graph, node) or fragile_reason(graph, node) or divergence_reason(graph, node)
            or int8_reason(node, device))


def decline_reasons(graph: GraphView, indices: Iterable[int], device: str,
                    hints: ShapeHints | None = None) -> dict[int, str | None]:
    """``decline_reason`` of each node: ``rule_reason``, then the answers kept
    per (device, node signature), then OpenVINO asked, with the nodes converted one by one but
    queried on the device together: ``Core.query_model`` costs
    10-30 ms a call whatever the model's size (40 one-node models: 540 ms alone, 32 ms as one
    model), and the device answers per operation, so side by side the one-node models get the
    answers they get alone. Should the joint query fail, each model is queried alone."""
    reasons: dict[int, str | None] = {}
    pending: dict[tuple[str, str], list[int]] = {}
    for i in indices:
        node = graph.nodes[i]
        reason = rule_reason(graph, node, device)
        if reason is not None:
            reasons[i] = reason
            continue
        key = (device, _signature(graph, node, hints))
        with _cache_lock:
            if key in _cache:
                reasons[i] = _cache[key]
                continue
        pending.setdefault(key, []).append(i)  # alike nodes: asked once
    if pending:
        answers = _ask_openvino_many(graph, [(key, nodes[0]) for key, nodes in pending.items()], device, hints)
        with _cache_lock:
            _cache.update(answers)
        for key, nodes in pending.items():
            for i in nodes:
                reasons[i] = answers[key]
    return reasons


def _ask_openvino_many(graph: GraphView, items: list[tuple[Any, int]], device: str,
                       hints: ShapeHints | None) -> dict[Any, str | None]:
    """For each (key, node index): why OpenVINO does not take the node cut out alone, or None."""
    core = _ov.core()
    answers: dict[Any, str | None] = {}
    converted = []
    for key, i in items:
        node = graph.nodes[i]
        try:
            with _ov.CALL_LOCK:
                model = core.read_model(node_model(graph, [i], hints).SerializeToString())
        except Exception as exc:
            answers[key] = f"OpenVINO's ONNX frontend cannot convert {node.op_type} (opset {node.opset}): {_first_line(exc)}"
            continue
        converted.append((key, node, model))
    together = None
    if len(converted) > 1:
        import openvino as ov

        params, results = [], []
        for k, (_, _, model) in enumerate(converted):
            for op in model.get_ops():  # unique names across the models (answers are by name)
                op.set_friendly_name(f"{k}|{op.get_friendly_name()}")
            params.extend(model.get_parameters())
            results.extend(model.get_results())
        try:
            together = query(ov.Model(results, params, "ort_capability"), device)
        except Exception:  # asked alone below, for each model's own answer or error
            together = None
    for key, node, model in converted:
        if together is not None:
            supported = together
        else:
            try:
                supported = query(model, device)
            except Exception as exc:
                answers[key] = f"{device} cannot take {node.op_type}: {_first_line(exc)}"
                continue
        ops = [op for op in model.get_ops() if op.get_type_name() not in _PLUMBING]
        missing = sorted({op.get_type_name() for op in ops if op.get_friendly_name() not in supported})
        if missing:
            answers[key] = f"{device} does not support the OpenVINO operation(s) {node.op_type} becomes: {', '.join(missing)}"
        else:
            answers[key] = None
    return answers


def query(model, device: str) -> dict[str, str]:
    """``Core.query_model``; bare AUTO (which the AUTO plugin cannot query without a device
    list) is asked as AUTO over every device present."""
    core = _ov.core()
    with _ov.CALL_LOCK:
        if device == "AUTO":
            device = "AUTO:" + ",".join(core.available_devices)
        return core.query_model(model, device)


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("Exception from")]
    text = lines[-1] if lines else type(exc).__name__
    return text[:300]


def _signature(graph: GraphView, node: NodeView, hints: ShapeHints | None) -> str:
    """What decides support: op, opset, attributes, input/output types and ranks, small constants."""
    h = hashlib.sha1()
    h.update(f"{node.domain}::{node.op_type}:{node.opset}".encode())
    for name in sorted(node.attributes):
        h.update(name.encode())
        h.update(_attr_bytes(node.attributes[name]))
    for name in node.inputs:
        h.update(b"|in:")
        if not name:
            continue
        value = graph.value(name)
        h.update(f"{value.type}:{_rank(value.shape, name, hints)}".encode())
        const = value.const_value
        if const is not None:
            if const.size <= _SMALL_CONST:
                h.update(b"c" + const.tobytes())
            else:
                h.update(f"C{const.shape}".encode())
    for name in node.outputs:
        value = graph.value(name) if name else None
        h.update(f"|out:{value.type}:{_rank(value.shape, name, hints)}".encode() if value else b"|out:")
    return h.hexdigest()


def _rank(shape: tuple | None, name: str, hints: ShapeHints | None) -> int | None:
    if shape is not None:
        return len(shape)
    dims = (hints or {}).get(name, (0, None))[1]
    return None if dims is None else len(dims)


def _attr_bytes(value: Any) -> bytes:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{value.shape}".encode() + value.tobytes()
    if isinstance(value, GraphView):
        # a subgraph: its serialized body decides (hashing the protobuf is enough)
        from onnx_ir import serde

        return serde.serialize_graph(value.ir).SerializeToString()
    if isinstance(value, list):
        return b"[" + b",".join(_attr_bytes(v) for v in value) + b"]"
    return repr(value).encode()


# --------------------------------------------------------------------------------------------
# shape hints
# --------------------------------------------------------------------------------------------

#: value name -> (ONNX element type or 0, dims with None for a dynamic dim, or None for an
#: unknown rank), for values whose type or shape the graph does not know
ShapeHints = dict[str, tuple[int, tuple[int | None, ...] | None]]

@dataclass
class Survey:
    """What converting all candidates of a graph as one model told: shapes OpenVINO inferred
    (``hints``) and whether the device supports every operation of it (``all_supported``)."""

    hints: ShapeHints = field(default_factory=dict)
    all_supported: bool = False
    reason: str = ""


_surveys: weakref.WeakKeyDictionary[GraphView, dict[tuple[str, frozenset[int]], Survey]] = weakref.WeakKeyDictionary()
_surveys_lock = threading.Lock()


def survey(graph: GraphView, candidates: Iterable[int], device: str) -> Survey:
    """Convert the candidates as one model with the frontend's partial conversion (it keeps
    going past ops it cannot convert) and query the device with it.

    Two things come of it. Shapes for values the ONNX graph leaves without one (models exported
    without value_info, or whose shapes ONNX shape inference cannot follow): a node cut out alone
    would otherwise get inputs of unknown rank, which several conversions refuse (Softmax-12
    needs the rank). And, when everything converted and the device supports every operation,
    the answer for all candidates at once, sparing a query per node (about 10 ms each).
    Computed once per graph view, device and candidate set.
    """
    # a node that could crash the frontend never goes to it, not even to be surveyed; deep
    # control flow is declined (divergence_reason): converting and querying it here would cost
    # what declining it saves
    key = (device, frozenset(i for i in candidates
                             if fragile_reason(graph, graph.nodes[i]) is None and not _too_deep(graph.nodes[i])))
    with _surveys_lock:
        cached = _surveys.get(graph, {}).get(key)
    if cached is not None:
        return cached
    try:
        result = _survey(graph, sorted(key[1]), device)
    except Exception as exc:  # the survey is an optimisation: without it nodes are judged alone
        result = Survey(reason=_first_line(exc))
    with _surveys_lock:
        _surveys.setdefault(graph, {})[key] = result
    return result


def _survey(graph: GraphView, indices: list[int], device: str) -> Survey:
    _ov.load()  # the reason, as ImportError, when openvino is unusable
    from openvino.frontend import FrontEndManager

    wanted = {
        name
        for i in indices
        for name in (*graph.nodes[i].inputs, *graph.nodes[i].outputs)
        if name and (not graph.value(name).static_shape or graph.value(name).dtype is None)
    }
    model = node_model(graph, indices)
    frontend = FrontEndManager().load_by_framework("onnx")
    converted = frontend.convert_partially(frontend.load(io.BytesIO(model.SerializeToString())))
    hints: ShapeHints = {}
    unconverted = False
    for op in converted.get_ops():
        unconverted = unconverted or "FrameworkNode" in op.get_type_name()
        for out in op.outputs():
            names = out.get_names() & wanted
            if not names:
                continue
            shape = out.get_partial_shape()
            dims = None if shape.rank.is_dynamic else tuple(d.get_length() if d.is_static else None for d in shape)
            try:
                elem_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(out.get_element_type().to_dtype()))
            except Exception:  # dynamic or exotic element type
                elem_type = 0
            if dims is None and not elem_type:
                continue
            for name in names:
                hints[name] = (elem_type, dims)
    if unconverted:
        return Survey(hints, False, "some nodes did not convert")
    supported = query(converted, device)
    missing = [op for op in converted.get_ops() if op.get_type_name() not in _PLUMBING
               and op.get_friendly_name() not in supported]
    return Survey(hints, not missing, f"{len(missing)} operation(s) unsupported" if missing else "")


# --------------------------------------------------------------------------------------------
# grouping
# --------------------------------------------------------------------------------------------
