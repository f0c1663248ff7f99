"""float16 models run in float32 between the ops that need float16, as onnxruntime runs them.

onnxruntime's CPU provider has no float16 kernel for most compute ops. It casts their float16
inputs to float32 and their outputs back, then removes every back-and-forth pair it inserted
(``RemoveDuplicateCastTransformer`` takes its own casts as free of precision loss), so a chain
of such ops runs in float32 with no rounding to float16 between them; and an op that does have
a float16 kernel but sits alone between such ops (all its float16 inputs made by them, all its
float16 outputs read by them, no graph output) is run in float32 too. The rounding happens
where a float16 kernel reads a value (Reshape, Transpose, Concat, LayerNormalization, ...) and
at the graph outputs.

``groups`` claims, per graph, the connected sets of such nodes (two or more) as fused groups.
``kernel`` turns a group into a float32 graph (float16 initializers converted once, float16
inputs and outputs declared float32) that core places and plans like a function body, so the
float32 paths run it (oneDNN's groups and constant-weight products included), and converts the
group's float16 inputs at entry and outputs at exit (the compiled conversions of ``_util``).
Node by node, every float16 kernel computing in float32 and rounding its output, a float16
EfficientNet-B0 took 37 ms a run; as one float32 region it takes what the float32 model does.

The op lists were read off onnxruntime 1.32: a one-op float16 model between two Identity nodes,
saved after session initialization, shows a cast around the op or not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnx.shape_inference
import onnx_ir as ir
from onnx import TensorProto, numpy_helper

from ort_core import GraphView, Kernel, KernelRequest, NodeView
from ort_core.grouping import fusable_groups

from ._util import GroupMembers, as_dtype, as_float32

#: standard ops onnxruntime's CPU provider computes in float32 for float16 inputs (no float16
#: kernel; the ones it expands into a function body first, Softmax, LeakyRelu, ..., included),
#: and the fused nodes ort-core's optimizer makes of them (onnxruntime does not fuse float16
#: graphs on the CPU: the unfused nodes would run in float32 all the same)
FLOAT32_OPS = frozenset({
    "Abs", "Add", "ArgMax", "AveragePool", "BatchNormalization", "Ceil", "Conv", "ConvTranspose", "Cos",
    "CumSum", "DepthToSpace", "Div", "Einsum", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Gemm",
    "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Hardmax",
    "InstanceNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "LpNormalization",
    "MatMul", "MaxPool", "Mean", "Mish", "Mul", "Neg", "PRelu", "Pad", "Pow", "Reciprocal", "ReduceL2",
    "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Resize", "Selu",
    "Sigmoid", "Sin", "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Sqrt", "Sub", "Sum", "Tanh",
    "ThresholdedRelu", "Tile", "Trilu", "Where",
})
_MS = "com.microsoft"
_FUSED_FLOAT32_OPS = frozenset({(_MS, "FastGelu"), (_MS, "QuickGelu"), (_MS, "BiasGelu"), (_MS, "Gelu"),
                                (_MS, "FusedConv"), (_MS, "FusedGemm"), (_MS, "FusedMatMul")})
#: standard ops with a float16 kernel there: computed in float32 only where isolated between
#: FLOAT32_OPS nodes (Relu is expanded into Max, which has one)
FLOAT16_OPS = frozenset({
    "Clip", "Concat", "Expand", "Flatten", "Gather", "GatherElements", "Identity", "LayerNormalization",
    "Max", "Min", "Relu", "Reshape", "Round", "Sign", "Slice", "Split", "Squeeze", "Transpose", "Unsqueeze",
})
_HALF = np.dtype(np.float16)
NOTE = "float16 region, computed in float32 between casts (as onnxruntime does)"
NOTE_BY_NODE = "float16 region, node by node (its float32 graph failed: see the log)"


def _io(node: NodeView) -> list[str]:
    return [n for n in (*node.inputs, *node.outputs) if n]


def _is_float32_op(node: NodeView) -> bool:
    return (node.op_type in FLOAT32_OPS and not node.domain) or (node.domain, node.op_type) in _FUSED_FLOAT32_OPS


def _is_same_type_cast(graph: GraphView, node: NodeView) -> bool:
    """A Cast or CastLike of float16 to float16: an identity, which onnxruntime removes; in a
    region it passes the float32 value on (a region output is rounded all the same)."""
    return (node.op_type in ("Cast", "CastLike") and not node.domain
            and graph.value(node.inputs[0]).dtype == _HALF == graph.value(node.outputs[0]).dtype)


def _is_float_cast(graph: GraphView, node: NodeView) -> bool:
    """A Cast or CastLike between float16 and float32 (either way)."""
    if node.op_type not in ("Cast", "CastLike") or node.domain or len(node.outputs) != 1:
        return False
    return {graph.value(node.inputs[0]).dtype, graph.value(node.outputs[0]).dtype} == {_HALF, np.dtype(np.float32)}


def _reads_or_makes_half(graph: GraphView, node: NodeView) -> bool:
    """The node has a float16 input or output, and every input and output has a known type
    (the region's outputs are rounded back by their declared type)."""
    dtypes = [graph.value(n).dtype for n in _io(node)]
    return all(d is not None for d in dtypes) and any(d == _HALF for d in dtypes)


def _has_half(graph: GraphView) -> bool:
    """Whether a node of ``graph`` reads or makes a float16 value, read off the IR values (the
    per-node views cost ~0.1 ms a 50-node graph: silero-vad's 51 graphs, all float32, spent 5
    ms of its session creation on them)."""
    half = ir.DataType.FLOAT16
    return any(v is not None and v.dtype == half for node in graph.ir for v in (*node.inputs, *node.outputs))


def groups(graph: GraphView, taken: Sequence[int]) -> list[tuple[int, ...]]:
    """The float32 regions among ``taken``: connected, fusable without a cycle, two nodes or
    more."""
    if not _has_half(graph):
        return []
    candidates = [i for i in taken if not graph.nodes[i].subgraphs and _reads_or_makes_half(graph, graph.nodes[i])]
    compute = {i for i in candidates if _is_float32_op(graph.nodes[i])}
    if not compute:
        return []
    producer, consumers, outputs = graph.producer, graph.consumers, set(graph.outputs)

    def isolated(node: NodeView) -> bool:
        halves_in = [n for n in node.inputs if n and graph.value(n).dtype == _HALF]
        halves_out = [n for n in node.outputs if n and graph.value(n).dtype == _HALF]
        if not halves_in or not halves_out or any(n in outputs for n in node.outputs):
            return False
        return (all(producer.get(n) in compute for n in halves_in)
                and all(c in compute for n in halves_out for c in consumers.get(n, ())))

    def cast_dropped(node: NodeView) -> bool:
        # onnxruntime's own casts count as free of precision loss, so a model's Cast next to
        # them goes with them: float16 -> float32 of a float32 op's output reads its float32
        # value, and the float32 ops reading a float32 -> float16 Cast read its float32 input
        if not _is_float_cast(graph, node):
            return False
        source, target = node.inputs[0], node.outputs[0]
        if graph.value(source).dtype == _HALF:
            return producer.get(source) in compute
        return any(c in compute for c in consumers.get(target, ()))

    members = compute | {i for i in candidates if not graph.nodes[i].domain
                         and (_is_same_type_cast(graph, graph.nodes[i]) or cast_dropped(graph.nodes[i])
                              or (graph.nodes[i].op_type in FLOAT16_OPS and isolated(graph.nodes[i])))}
    return [group for group in fusable_groups(graph, members) if len(group) >= 2]


def is_region(request: KernelRequest) -> bool:
    """Whether a fused request is one of ``groups``' regions (their nodes read or make float16
    and are float32 or float16 ops; the other fused groups have none of them)."""
    graph = request.graph
    return all((_is_float32_op(n) or (not n.domain and n.op_type in FLOAT16_OPS) or _is_float_cast(graph, n)
                or _is_same_type_cast(graph, n))
               and _reads_or_makes_half(graph, n) for n in request.nodes)


def _float32_graph(request: KernelRequest) -> GraphView:
    """The region as a graph of float32 values: its float16 initializers converted, its
    float16 inputs and outputs declared float32, the types in between inferred."""
    graph = request.graph
    model = graph.group_to_model([n.index for n in request.nodes])
    for node in model.graph.node:
        if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "to" and attr.i == TensorProto.FLOAT16:
                    attr.i = TensorProto.FLOAT  # (see ``groups``: its rounding is dropped)
    for info in (*model.graph.input, *model.graph.output):
        if info.type.tensor_type.elem_type == TensorProto.FLOAT16:
            info.type.tensor_type.elem_type = TensorProto.FLOAT
    initializers = []
    for tensor in model.graph.initializer:
        if tensor.data_type == TensorProto.FLOAT16:
            tensor = numpy_helper.from_array(as_float32(numpy_helper.to_array(tensor)), tensor.name)
        initializers.append(tensor)
    # shape inference copies the model: it sees the large initializers as typed inputs
    small = [t for t in initializers if int(np.prod(t.dims)) <= 1024]
    large = [t for t in initializers if int(np.prod(t.dims)) > 1024]
    del model.graph.initializer[:]
    model.graph.initializer.extend(small)
    model.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in large)
    try:
        typed = onnx.shape_inference.infer_shapes(model)
        model.graph.value_info.extend(typed.graph.value_info)
    except Exception:  # noqa: BLE001  (types help kernels but are not required to run)
        pass
    del model.graph.input[len(model.graph.input) - len(large):]
    model.graph.initializer.extend(large)
    path = f"{graph.path}/" if graph.path else ""
    return GraphView(ir.serde.deserialize_model(model).graph, path=f"{path}float32 region of {request.nodes[0].name}",
                     opset_imports=dict(graph.opset_imports), ir_version=graph.ir_version)


def kernel(request: KernelRequest, build_node: Callable[[NodeView, KernelRequest], Kernel]) -> Kernel | None:
    """The region's kernel, or None where ``request`` is no region. Where the float32 graph
    cannot be made or planned, the members run one by one (``build_node`` builds each one's
    own kernel, in float16) and the error is logged: the region is an optimisation."""
    if not request.fused or not is_region(request):
        return None
    try:
        body = request.build_graph(_float32_graph(request))
    except Exception as error:  # noqa: BLE001
        logging.getLogger("ort_core").warning("CPUExecutionProvider: float16 region of %s runs node by node: %s: %s",
                                              request.nodes[0].name, type(error).__name__, error)
        members = GroupMembers(request, build_node, "float16 region")
        return Kernel(run=lambda *args: members.run(args), note=NOTE_BY_NODE)
    # the body's inputs and outputs are the group's (``GraphView.group_io``), in its order
    position = {name: k for k, name in enumerate(request.inputs)}
    order = [position[name] for name in body.input_names]
    widen = [request.graph.value(name).dtype == _HALF for name in body.input_names]
    produced = {name: k for k, name in enumerate(body.output_names)}
    pick = [produced[name] for name in request.outputs]
    narrow = [request.graph.value(name).dtype == _HALF for name in request.outputs]

    def run(*args):
        values = [as_float32(args[k]) if w else args[k] for k, w in zip(order, widen)]
        results = body(values, {})
        return [as_dtype(results[k], _HALF) if n else results[k] for k, n in zip(pick, narrow)]

    return Kernel(run=run, note=NOTE)
