"""Which nodes Core ML takes, and how they are grouped.

A candidate is taken when it lowers alone to a MIL program (``lowering.lower`` on a one-node
group, so every reason is the lowering's own: op, attribute, dtype or shape) and passes the
options' checks. Answers are cached per process by a signature of the node (op, opset,
attributes, input types and shapes, small constant values). Supported nodes are then grouped
into maximal connected groups that can be fused without a cycle (see ``groups``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable

import numpy as np

from ort_core import GraphView, NodeView
from ort_core.grouping import fusable_groups

from .lowering import LOWERINGS, Decline, lower
from .options import BuildSettings

_SMALL_CONST = 64
_cache: dict[str, str | None] = {}
_cache_lock = threading.Lock()


def decline_reason(graph: GraphView, node: NodeView, settings: BuildSettings) -> str | None:
    """None when Core ML takes ``node``, else why not."""
    if graph.path and not settings.subgraphs:
        return f"in control-flow body {graph.path!r}: set EnableOnSubgraphs=1 to claim nodes in bodies"
    if node.domain not in ("", "ai.onnx"):
        return f"{node.qualified_op}: domain {node.domain!r} is not lowered to Core ML"
    if node.op_type not in LOWERINGS:
        return f"{node.op_type} is not lowered to Core ML"
    if node.op_type == "Constant":
        return "Constant: its value is embedded in the Core ML groups that read it"
    inputs, outputs = graph.group_io([node.index])
    if settings.static_shapes:
        for name in inputs:
            shape = graph.value(name).shape
            if shape is None or not all(isinstance(d, int) for d in shape):
                return f"input {name!r} has dynamic shape {None if shape is None else list(shape)} and RequireStaticInputShapes=1"
    key = _signature(graph, node, settings)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    try:
        lower(graph, [node.index], inputs, outputs, dict(settings.dims), trial=True)
        reason = None
    except Decline as exc:
        reason = str(exc)
    with _cache_lock:
        _cache[key] = reason
    return reason


def _signature(graph: GraphView, node: NodeView, settings: BuildSettings) -> str:
    h = hashlib.sha256()
    h.update(repr((node.domain, node.op_type, node.opset, settings.dims, len(node.outputs))).encode())
    for name in sorted(node.attributes):
        h.update(name.encode() + repr(node.attributes[name]).encode()[:4096])
    for name in node.inputs:
        if not name:
            h.update(b"<none>")
            continue
        value = graph.value(name)
        h.update(repr((value.type, value.shape)).encode())
        const = value.const_value
        if const is not None:
            const = np.asarray(const)
            h.update(b"const" + repr(const.shape).encode())
            if const.size <= _SMALL_CONST:
                h.update(const.tobytes())
    return h.hexdigest()


def claimable(graph: GraphView, candidates: Iterable[int], settings: BuildSettings) -> tuple[set[int], dict[int, str]]:
    """The candidates Core ML takes, and a reason for each it does not."""
    supported: set[int] = set()
    declined: dict[int, str] = {}
    for i in sorted(candidates):
        reason = decline_reason(graph, graph.nodes[i], settings)
        if reason is None:
            supported.add(i)
        else:
            declined[i] = reason
    return supported, declined


def claim_groups(graph: GraphView, candidates: Iterable[int], settings: BuildSettings) -> tuple[list[tuple[int, ...]], dict[int, str]]:
    """The groups to claim, and a reason for each candidate left out. A group that reads only
    constants computes nothing at run time: it is left to other providers (or folding)."""
    supported, declined = claimable(graph, candidates, settings)
    result = []
    for group in fusable_groups(graph, supported):
        inputs, _ = graph.group_io(group)
        if all(graph.value(n).const_value is not None for n in inputs):
            for i in group:
                declined[i] = "every input of its group is a constant: nothing for Core ML to compute at run time"
        else:
            result.append(group)
    return result, declined


# grouping: the same rule as ort-ep-openvino's (maximal connected, fusable without a cycle)
