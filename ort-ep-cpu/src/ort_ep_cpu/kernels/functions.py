"""Ops that ONNX defines by a function body, run by expanding that body.

When the CPU provider has no kernel for a standard op whose schema carries a function body
(``has_function``) or builds one for the node (``has_context_dependent_function``), it claims
the node and, at kernel creation, expands it: the body becomes a small graph that core places
and plans like a control-flow body (``KernelRequest.build_graph``), so its nodes appear in the
placement report under ``<node path>/<op type>`` and may themselves run on any provider, or
be expanded again.
"""

from __future__ import annotations

import onnx
import onnx.inliner
import onnx.shape_inference
import onnx_ir as ir

from ort_core import GraphView, Kernel, KernelRequest, NodeView

NOTE = "expanded into its ONNX function body"
_LOCAL_DOMAIN = "ort.function_expansion"


def _schema(node: NodeView) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(node.op_type, node.opset, node.domain)
    except onnx.defs.SchemaError:
        return None


def _version(versions, opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def expansion_reason(node: NodeView) -> str | None:
    """None if ``node`` can be expanded into a function body, else why not."""
    schema = _schema(node)
    if schema is None:
        return f"no schema for {node.qualified_op} at opset {node.opset}"
    if _version(schema.function_opset_versions, node.opset) is not None:
        return None
    if _version(schema.context_dependent_function_opset_versions, node.opset) is not None:
        return None
    return f"{node.qualified_op} has no function body at opset {node.opset}"


def _type_proto(request: KernelRequest, name: str) -> onnx.TypeProto:
    value = request.value(name)
    proto = onnx.TypeProto()
    if value.ir.type is not None:
        proto.CopyFrom(ir.serde.serialize_type(value.ir.type))
        if value.ir.shape is not None and isinstance(value.ir.type, ir.TensorType):
            # some bodies depend on the rank (RotaryEmbedding): keep the shape
            ir.serde.serialize_shape_into(proto, value.ir.shape)
    return proto


def _function_proto(node: NodeView, request: KernelRequest, node_proto: onnx.NodeProto) -> onnx.FunctionProto:
    schema = _schema(node)
    if schema is None:
        raise ValueError(f"{node.name!r}: no schema for {node.qualified_op} at opset {node.opset}")
    function = onnx.FunctionProto()
    version = _version(schema.function_opset_versions, node.opset)
    if version is not None:
        function.ParseFromString(schema.get_function_with_opset_version(version))
        return function
    version = _version(schema.context_dependent_function_opset_versions, node.opset)
    if version is None:
        raise ValueError(f"{node.name!r}: {node.qualified_op} has no function body at opset {node.opset}")
    types = [_type_proto(request, n).SerializeToString() if n else onnx.TypeProto().SerializeToString()
             for n in node.inputs]
    data = schema.get_context_dependent_function_with_opset_version(
        version, node_proto.SerializeToString(), types
    )
    if not data:
        raise ValueError(f"{node.name!r}: {node.qualified_op} builds no function body for these input types")
    function.ParseFromString(data)
    return function


def expand(node: NodeView, request: KernelRequest) -> GraphView:
    """The node's function body as a graph whose inputs are the node's (present) inputs."""
    node_proto = ir.serde.serialize_node(node.ir)
    schema = _schema(node)
    # the body refers to attributes by name; give it the schema's defaults for those not set
    present = {a.name for a in node_proto.attribute}
    for name, attr in (schema.attributes.items() if schema else ()):
        if name not in present and attr.default_value.type != onnx.AttributeProto.UNDEFINED:
            node_proto.attribute.append(attr.default_value)
            node_proto.attribute[-1].name = name
    function = _function_proto(node, request, node_proto)
    function.domain = _LOCAL_DOMAIN
    function.name = node.op_type
    call = onnx.NodeProto()
    call.CopyFrom(node_proto)
    call.domain = _LOCAL_DOMAIN
    call.name = node.name

    inputs = [n for n in node.inputs if n]
    graph = onnx.helper.make_graph(
        [call],
        f"{node.name}_{node.op_type}",
        [onnx.helper.make_value_info(n, _type_proto(request, n)) for n in inputs],
        [onnx.helper.make_value_info(n, onnx.TypeProto()) for n in node.outputs if n],
    )
    opsets = dict(request.graph.opset_imports)
    for imp in function.opset_import:
        # The body is written against the op's first version; the inliner refuses a body
        # whose imports differ from the model's, and the body's ops mean the same at the
        # model's opset (as onnxruntime assumes when it expands function ops).
        if imp.domain in opsets:
            imp.version = opsets[imp.domain]
        else:
            opsets[imp.domain] = imp.version
    opsets[_LOCAL_DOMAIN] = 1
    model = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()],
        functions=[function],
    )
    model.ir_version = max(request.graph.ir_version, 8)
    model = onnx.inliner.inline_local_functions(model)
    if any(n.domain == _LOCAL_DOMAIN for n in model.graph.node):
        raise ValueError(f"{node.name!r}: the function body of {node.qualified_op} could not be inlined")
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # types help kernels but are not required to run
        pass
    ir_model = ir.serde.deserialize_model(model)
    path = f"{request.graph.path}/{node.name}" if request.graph.path else node.name
    return GraphView(
        ir_model.graph,
        path=f"{path}/{node.op_type}",
        opset_imports={k: v for k, v in opsets.items() if k != _LOCAL_DOMAIN},
        ir_version=model.ir_version,
    )


def build_expanded(node: NodeView, request: KernelRequest) -> Kernel:
    """A kernel that runs the node's function body, placed and planned by core."""
    body = request.build_graph(expand(node, request))
    present = [k for k, n in enumerate(node.inputs) if n]
    n_out = len(node.outputs)
    wanted = [k for k, n in enumerate(node.outputs) if n]

    def run(*args):
        produced = body([args[k] for k in present], {})
        outputs: list = [None] * n_out
        for k, value in zip(wanted, produced):
            outputs[k] = value
        return outputs

    if n_out == 1:
        return Kernel(run=lambda *args: run(*args)[0], single_output=True, note=NOTE)
    return Kernel(run=run, note=NOTE)
