"""Fusable groups: the nodes a compiling provider supports, split so each fuses without a cycle.

Every compiling provider needs this step between "which nodes can I take" and "which claims do
I make": core refuses a fused claim that would create a cycle (a path that leaves the group and
comes back), so providers split their supported nodes here first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph.view import GraphView


def fusable_groups(graph: GraphView, supported: set[int]) -> list[tuple[int, ...]]:
    """Split ``supported`` into maximal connected groups that can each be fused without a cycle.

    A connected component C is fusable unless a path leaves C and re-enters it. When it does,
    the nodes of C reachable from outside nodes that descend from C ("tainted") are split off;
    the untainted part, split into connected components, is fusable (a path from it that came
    back would make its end tainted), and the tainted part is processed again. The first node
    of C in topological order is never tainted, so every round makes progress.
    """
    result: list[tuple[int, ...]] = []
    pending = _components(graph, supported)
    while pending:
        comp = pending.pop()
        tainted = _tainted(graph, comp)
        if not tainted:
            result.append(tuple(sorted(comp)))
            continue
        clean = comp - tainted
        pending.extend(_components(graph, clean))
        pending.extend(_components(graph, tainted))
    return sorted(result)


def _successors(graph: GraphView, i: int) -> Iterable[int]:
    consumers = graph.consumers
    for out in graph.nodes[i].outputs:
        if out:
            yield from consumers.get(out, ())


def _components(graph: GraphView, nodes: set[int]) -> list[set[int]]:
    """Connected components of ``nodes`` (edges: a value one produces and the other reads)."""
    neighbours: dict[int, set[int]] = {i: set() for i in nodes}
    for i in nodes:
        for j in _successors(graph, i):
            if j in nodes and j != i:
                neighbours[i].add(j)
                neighbours[j].add(i)
    seen: set[int] = set()
    result = []
    for start in sorted(nodes):
        if start in seen:
            continue
        comp = {start}
        stack = [start]
        while stack:
            for j in neighbours[stack.pop()]:
                if j not in comp:
                    comp.add(j)
                    stack.append(j)
        seen |= comp
        result.append(comp)
    return result


def _tainted(graph: GraphView, comp: set[int]) -> set[int]:
    """Nodes of ``comp`` reachable from a node outside ``comp`` that descends from ``comp``."""
    outside = [j for i in comp for j in _successors(graph, i) if j not in comp]
    seen: set[int] = set()
    tainted: set[int] = set()
    while outside:
        n = outside.pop()
        if n in seen:
            continue
        seen.add(n)
        for j in _successors(graph, n):
            if j in comp:
                tainted.add(j)
            # continue through every node: a tainted node taints what it reaches too
            outside.append(j)
    return tainted
