"""Whether the session's provider would run a fused node: core asks, it never assumes.

Fusions produce ops outside the ONNX standard (onnxruntime's ``com.microsoft`` contrib ops).
Core depends on no provider, so before rewriting, a fusion pass builds the fused node and asks
the session's first (highest-priority) provider, through the ordinary capability hook, whether
it claims that node in a one-node probe graph with the same input types, shapes and constant
inputs. Only a claim lets the rewrite happen. With an accelerator first that does not claim
the fused op, the graph stays as the accelerator can take it (such providers fuse on their
own); with the CPU provider first (or alone), the CPU provider's fused kernels are used.
Answers are cached per op, attributes and input types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from ..graph.view import GraphView
from ..partition import BoundProvider


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


def provider_gate(providers: Sequence[BoundProvider], opsets: dict[str, int],
                  ir_version: int = 8) -> Callable[[ir.Node], bool]:
    """``supports(node)``: True when the first of ``providers`` claims ``node``."""
    if not providers:
        return lambda node: False
    first = providers[0]
    cache: dict[tuple, bool] = {}

    def supports(node: ir.Node) -> bool:
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
