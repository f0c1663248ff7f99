"""Whether the optimizer may form a fused node: only for a provider that computes it exactly.

Fusions produce nodes outside the model's own ops (onnxruntime's ``com.microsoft`` contrib ops,
ort-core's ``ort_core`` ops, and the standard LayerNormalization/HardSwish in place of their
decomposed forms). A node may be formed only where the provider that will run it computes
exactly that op with those attributes. Core depends on no provider, so it asks the session's
first (highest-priority) provider, which is the one that runs a node it claims:

1. the provider must declare the op with these attribute values in ``ProviderSpec.fused_ops``
   (a claim says a provider *takes* a node, not that it *computes* it: OpenVINO's frontend
   converts com.microsoft FusedGemm but drops its Tanh);
2. and claim the fused node in a one-node probe graph with the same input types, shapes and
   constant inputs (a declared op may still be declined for its types).

A provider that declares nothing (the default; compiling providers, which fuse on their own)
gets the graph unfused, as onnxruntime gives its compiling providers; with the CPU provider
first (or alone), its fused kernels are used. Whether a declared op matches the unfused graph
is what the conformance kit's ``fusion_parity`` check verifies. Answers are cached per op,
attributes and input types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from ..graph.view import GraphView
from ..partition import BoundProvider
from ..types import FusedOp, ProviderSpec
from .fusion import ACTIVATIONS, CORE_DOMAIN, GEMM_ACTIVATIONS


def _probe_graph(node: ir.Node, opsets: dict[str, int]) -> ir.Graph:
    inputs: list[ir.Value] = []
    initializers: list[ir.Value] = []
    args: list[ir.Value | None] = []
    for k, v in enumerate(node.inputs):
        if v is None:
            args.append(None)
            continue
        value = ir.Value(name=f"probe_in{k}", type=v.type, shape=v.shape)
        if v.const_value is not None and not v.is_graph_input():
            value.const_value = v.const_value
            initializers.append(value)
        else:
            inputs.append(value)
        args.append(value)
    probe = ir.Node(node.domain, node.op_type, args, [a for a in node.attributes.values()],
                    num_outputs=len(node.outputs), name=node.name or "probe", version=node.version)
    for k, out in enumerate(probe.outputs):
        out.name = f"probe_out{k}"
        out.type = node.outputs[k].type
        out.shape = node.outputs[k].shape
    return ir.Graph(inputs, list(probe.outputs), nodes=[probe], initializers=initializers,
                    opset_imports=dict(opsets), name="fusion_probe")


def declared(spec: ProviderSpec, node: ir.Node) -> bool:
    """Whether ``spec`` declares ``node`` (op and attribute values) among its ``fused_ops``."""
    attributes = {name: a.value for name, a in node.attributes.items()}
    return any(op.admits(node.domain, node.op_type, attributes) for op in spec.fused_ops)


def provider_gate(providers: Sequence[BoundProvider], opsets: dict[str, int],
                  ir_version: int = 8) -> Callable[[ir.Node], bool]:
    """``supports(node)``: True when the first of ``providers`` declares ``node`` in its
    ``ProviderSpec.fused_ops`` and claims it in a one-node probe."""
    if not providers:
        return lambda node: False
    first = providers[0]
    cache: dict[tuple, bool] = {}

    def supports(node: ir.Node) -> bool:
        if not declared(first.spec, node):
            return False
        key = (
            node.domain, node.op_type,
            tuple(sorted((name, repr(a.value)) for name, a in node.attributes.items())),
            tuple(None if v is None else (str(v.type), v.const_value is not None) for v in node.inputs),
        )
        answer = cache.get(key)
        if answer is None:
            probe_opsets = dict(opsets)
            probe_opsets.setdefault(node.domain, node.version or 1)
            view = GraphView(_probe_graph(node, probe_opsets), opset_imports=probe_opsets, ir_version=ir_version)
            try:
                capability = first.hooks.ort_get_capability(ep=first.ctx, graph=view, candidates=frozenset({0}))
            except Exception:  # a provider that cannot answer does not get fused ops
                capability = None
            answer = capability is not None and any(0 in claim.nodes for claim in capability.claims)
            cache[key] = answer
        return answer

    return supports


#: Every fused node the optimizer can form, with every attribute value it can give it: what a
#: provider with kernels for all of them (the CPU provider) declares, and what the conformance
#: kit's ``fusion_parity`` check covers.
FUSED_OPS: tuple[FusedOp, ...] = (
    FusedOp("FusedConv", attributes={"activation": ACTIVATIONS}),
    FusedOp("FusedGemm", attributes={"activation": GEMM_ACTIVATIONS}),
    FusedOp("FusedMatMul"),
    FusedOp("MatMulIntegerToFloat"),
    FusedOp("Gelu"),
    FusedOp("FastGelu"),
    FusedOp("QuickGelu"),
    FusedOp("BiasGelu"),
    FusedOp("SkipLayerNormalization"),
    FusedOp("Attention"),
    FusedOp("MultiHeadAttention"),
    FusedOp("LayerNormalization", ""),
    FusedOp("SimplifiedLayerNormalization", ""),
    FusedOp("LayerNormalization", CORE_DOMAIN),
    FusedOp("HardSwish", ""),
    FusedOp("HardSwish", CORE_DOMAIN),
)
