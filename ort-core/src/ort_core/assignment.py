"""The placement in onnxruntime's shape (``InferenceSession.get_provider_graph_assignment_info``)."""

from __future__ import annotations

from dataclasses import dataclass

from .partition import Placement


@dataclass(frozen=True)
class OrtEpAssignedNode:
    """A node as onnxruntime's assignment info names it."""

    name: str
    op_type: str
    domain: str


@dataclass(frozen=True)
class OrtEpAssignedSubgraph:
    """Nodes one provider runs together: a fused group, or consecutive nodes on one provider."""

    ep_name: str
    nodes: tuple[OrtEpAssignedNode, ...]

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        return list(self.nodes)


def assignment_info(placement: Placement) -> list[OrtEpAssignedSubgraph]:
    result: list[OrtEpAssignedSubgraph] = []
    key = None
    nodes: list[OrtEpAssignedNode] = []
    for p in placement.nodes:
        if p.graph:  # control-flow bodies belong to their node's subgraph in onnxruntime's report
            continue
        here = (p.provider, p.group)
        if key is not None and here != key:
            result.append(OrtEpAssignedSubgraph(key[0], tuple(nodes)))
            nodes = []
        key = here
        nodes.append(OrtEpAssignedNode(p.name, p.op_type, p.domain))
    if nodes:
        result.append(OrtEpAssignedSubgraph(key[0], tuple(nodes)))
    return result
