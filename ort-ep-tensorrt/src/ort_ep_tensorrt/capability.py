"""What TensorRT takes: its ONNX parser's subgraph report, intersected with core's candidates.

The candidates are exported as one ONNX model and handed to ``OnnxParser.supports_model_v2``;
``num_subgraphs`` / ``is_subgraph_supported`` / ``get_subgraph_nodes`` then say which runs of
nodes TensorRT can build. Each supported subgraph becomes one fused claim; nodes of unsupported
subgraphs are declined with the parser's own error for that node where it gave one.
``trt_op_types_to_exclude`` removes op types before the parser is asked, and
``trt_min_subgraph_size`` declines groups too small to be worth an engine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ort_core import Capability, Claim, GraphView
from ort_core.epcontext import is_context_node

from . import PROVIDER_NAME

logger = logging.getLogger("ort_core")


def parser_errors(parser: Any) -> dict[int, str]:
    """The parser's errors by the index of the node they are about (-1: no node)."""
    errors: dict[int, str] = {}
    for k in range(int(parser.num_errors)):
        error = parser.get_error(k)
        node = int(error.node()) if hasattr(error, "node") else -1
        errors.setdefault(node, str(error.desc()))
    return errors


def capability(trt: Any, trt_logger: Any, graph: GraphView, candidates: Iterable[int], options: dict) -> Capability:
    result = Capability()
    excluded: frozenset[str] = options["trt_op_types_to_exclude"]
    asked: list[int] = []
    for i in sorted(candidates):
        node = graph.nodes[i]
        if is_context_node(node):
            if is_context_node(node, PROVIDER_NAME):
                result.claims.append(Claim((i,)))
            else:
                result.declined[i] = "an EPContext node of another provider"
        elif node.op_type in excluded:
            result.declined[i] = f"{node.op_type} is in trt_op_types_to_exclude"
        else:
            asked.append(i)
    if not asked:
        return result
    model = graph.group_to_model(asked)
    builder = trt.Builder(trt_logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, trt_logger)
    parser.supports_model_v2(model.SerializeToString())
    errors = parser_errors(parser)
    covered: set[int] = set()
    for s in range(int(parser.num_subgraphs)):
        local = [int(k) for k in parser.get_subgraph_nodes(s)]
        nodes = tuple(sorted(asked[k] for k in local))
        covered.update(nodes)
        if not parser.is_subgraph_supported(s):
            for k in local:
                reason = errors.get(k) or errors.get(-1) or "TensorRT's ONNX parser cannot build this subgraph"
                result.declined[asked[k]] = f"TensorRT parser: {reason}"
            continue
        if len(nodes) < options["trt_min_subgraph_size"]:
            for i in nodes:
                result.declined[i] = (f"group too small: {len(nodes)} node(s) < trt_min_subgraph_size="
                                      f"{options['trt_min_subgraph_size']}")
            continue
        result.claims.append(Claim(nodes, fuse=True))
    for k, i in enumerate(asked):
        if i not in covered:  # the parser put the node in no subgraph: it cannot take it
            reason = errors.get(k) or "not in any subgraph TensorRT's parser reported"
            result.declined[i] = f"TensorRT parser: {reason}"
    return result
