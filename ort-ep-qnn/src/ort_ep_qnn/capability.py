"""What QNN runs: each candidate node is lowered and every QNN op it becomes is put to the
backend's ``backendValidateOpConfig``. That call is the only judge: ``graphAddNode`` and
``graphFinalize`` accept nodes the backend cannot run (a wrong output shape, int64 tensors)."""

from __future__ import annotations

import numpy as np

from ort_core import GraphView, NodeView

from .lowering import Lowering, Unsupported
from .runtime import Backend


def quant_params(graph: GraphView) -> dict[str, tuple[float, int, np.dtype]]:
    """value name -> (scale, zero point, dtype) for every quantized value a QuantizeLinear makes
    or a DequantizeLinear reads, with a constant per-tensor scale and zero point."""
    result: dict[str, tuple[float, int, np.dtype]] = {}
    for node in graph.nodes:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or node.domain not in ("", "ai.onnx"):
            continue
        quantized = node.outputs[0] if node.op_type == "QuantizeLinear" else node.inputs[0]
        scale = graph.value(node.inputs[1]).const_value
        zp = graph.value(node.inputs[2]).const_value if len(node.inputs) > 2 and node.inputs[2] else None
        if scale is None or scale.size != 1 or (zp is not None and zp.size != 1):
            continue  # per-axis (a constant's: lowering.axis_encoding) or dynamic: no per-tensor encoding
        # the quantized type: the zero point's, else the value's, else uint8 (ONNX's default)
        dtype = zp.dtype if zp is not None else graph.value(quantized).dtype or np.dtype(np.uint8)
        result[quantized] = (float(scale.reshape(())), int(0 if zp is None else zp.reshape(())), np.dtype(dtype))
    return result


def static_view(graph: GraphView) -> GraphView:
    """``graph`` with its inputs' symbolic dimensions set to 1 and shapes inferred again, so
    that every node can be put to the backend with concrete shapes (the kernel builds a graph
    for each input shape it meets). ``graph`` itself when it has no symbolic input dimension or
    re-inference does not give the same nodes."""
    import onnx_ir as ir

    from ort_core.graph.load import load_model

    symbolic = any(not graph.value(n).static_shape for node in graph.nodes for n in node.outputs if n)
    if not symbolic or graph.path:
        return graph
    try:
        proto = ir.serde.serialize_model(ir.Model(graph.ir, ir_version=graph.ir_version))
        for value in proto.graph.input:
            for d in value.type.tensor_type.shape.dim:
                if d.HasField("dim_param") or not d.HasField("dim_value"):
                    d.ClearField("dim_param")
                    d.dim_value = 1
        del proto.graph.value_info[:]
        model = load_model(proto.SerializeToString())
        view = GraphView(model.graph, opset_imports=dict(model.opset_imports), ir_version=model.ir_version)
    except Exception:  # no better shapes: the original ones (symbolic nodes are declined)
        return graph
    if [(n.name, n.op_type) for n in view.nodes] != [(n.name, n.op_type) for n in graph.nodes]:
        return graph
    return view


def node_reason(backend: Backend, graph: GraphView, node: NodeView,
                quant: dict[str, tuple[float, int, np.dtype]]) -> str | None:
    """None when QNN takes ``node``, else why not (naming the node, the QNN op and QNN's answer)."""
    if node.op_type == "DequantizeLinear" and graph.value(node.inputs[0]).const_value is not None:
        # (per-tensor or per-channel alike: a folded unit reads the quantized constant itself)
        return (f"DequantizeLinear {node.name}: of a constant; QNN nodes reading it take the dequantized "
                f"data as their constant")
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        q = node.outputs[0] if node.op_type == "QuantizeLinear" else node.inputs[0]
        if q not in quant:
            return f"{node.op_type} {node.name}: only a constant per-tensor scale and zero point are lowered"
    lowering = Lowering(graph, [n for n in node.inputs if n], node.outputs, quant)
    try:
        ops = lowering.lower(node)
    except Unsupported as exc:
        return f"{node.op_type} {node.name}: {exc}"
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # malformed attributes and the like
        return f"{node.op_type} {node.name}: cannot be lowered to QNN ({type(exc).__name__}: {exc})"
    for op in ops:
        try:
            code, message, detail = backend.validate(op)
        except (KeyError, TypeError, ValueError) as exc:  # a tensor or param QNN cannot express
            return f"{node.op_type} {node.name}: QNN {op.type_name} cannot be expressed ({type(exc).__name__}: {exc})"
        if code:
            tail = f": {detail}" if detail else ""
            return (f"{node.op_type} {node.name}: QNN {op.type_name} refused by backendValidateOpConfig, "
                    f"error {code} ({message}){tail}")
    return None
