"""Partitioning: providers claim nodes in priority order; the placement report.

Each provider, in the order the user gave, is offered the nodes no earlier provider took. What it
declines goes to the next; the CPU provider comes last. A fused group is refused (its nodes
declined with the reason) when fusing it would create a cycle. Every node ends with the provider
that runs it and the reason each earlier provider gave for declining it.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .errors import NotImplemented as OrtNotImplemented
from .graph.view import GraphView
from .types import Allocator, Capability, Claim, DataTransfer, ProviderContext, ProviderSpec

logger = logging.getLogger("ort_core")

CPU_PROVIDER = "CPUExecutionProvider"


@dataclass
class BoundProvider:
    """A provider bound to a session: its context, spec, hooks and memory."""

    ctx: ProviderContext
    spec: ProviderSpec
    hooks: Any
    allocator: Allocator | None = None
    data_transfer: DataTransfer | None = None

    @property
    def name(self) -> str:
        return self.ctx.name

    @property
    def memory(self) -> str:
        return self.ctx.device.memory


@dataclass
class Assignment:
    """Result of partitioning one graph."""

    graph: GraphView
    claims: list[tuple[BoundProvider, Claim]]
    node_claim: list[int]  # node index -> index into claims
    declined: list[dict[str, str]]  # node index -> {provider name: reason}


def _creates_cycle(graph: GraphView, group: set[int]) -> bool:
    """True if some path leaves ``group`` and comes back into it through other nodes. In a
    sorted graph paths only go forward, so nodes past the group's last one are not followed
    (the whole downstream graph was walked for each group: about 1 ms of a QDQ transformer's
    37 ms session creation)."""
    consumers = graph.consumers
    last = max(group) if graph.is_sorted else len(graph.nodes)
    frontier = [
        c
        for i in group
        for out in graph.nodes[i].outputs
        if out
        for c in consumers.get(out, ())
        if c not in group and c < last
    ]
    seen: set[int] = set()
    while frontier:
        n = frontier.pop()
        if n in seen:
            continue
        seen.add(n)
        for out in graph.nodes[n].outputs:
            for c in consumers.get(out, ()) if out else ():
                if c in group:
                    return True
                if c < last:
                    frontier.append(c)
    return False


def _ask(bp: BoundProvider, graph: GraphView, candidates: frozenset[int]) -> tuple[Capability, str]:
    """Ask one provider for its capability; a raising or empty answer declines everything."""
    try:
        capability = bp.hooks.ort_get_capability(ep=bp.ctx, graph=graph, candidates=candidates)
    except Exception as exc:
        logger.warning("%s: capability query raised %s: %s", bp.name, type(exc).__name__, exc)
        return Capability(), f"capability query raised {type(exc).__name__}: {exc}"
    if capability is None:
        return Capability(), "the provider gave no capability answer"
    return capability, "not claimed (the provider gave no reason)"


def partition(
    graph: GraphView,
    providers: list[BoundProvider],
    excluded: dict[str, dict[int, str]] | None = None,
) -> Assignment:
    """Assign every node of ``graph`` to a provider; raise NotImplemented naming what is left.

    ``excluded[provider][node] = reason`` removes nodes from a provider's candidates (used
    after a kernel for them failed to build).
    """
    excluded = excluded or {}
    n = len(graph.nodes)
    node_claim = [-1] * n
    declined: list[dict[str, str]] = [{} for _ in range(n)]
    claims: list[tuple[BoundProvider, Claim]] = []

    for bp in providers:
        unassigned = [i for i in range(n) if node_claim[i] < 0]
        if not unassigned:
            break
        barred = excluded.get(bp.name, {})
        for i in unassigned:
            if i in barred:
                declined[i][bp.name] = barred[i]
        candidates = frozenset(i for i in unassigned if i not in barred)
        if not candidates:
            continue
        capability, default_reason = _ask(bp, graph, candidates)
        taken: set[int] = set()
        for claim in capability.claims:
            nodes = set(claim.nodes)
            problem = None
            if not nodes:
                problem = "empty claim"
            elif not nodes <= candidates:
                problem = f"claimed nodes that were not offered: {sorted(nodes - candidates)}"
            elif nodes & taken:
                problem = f"claimed nodes twice: {sorted(nodes & taken)}"
            elif claim.fuse and len(nodes) > 1 and _creates_cycle(graph, nodes):
                for i in nodes:
                    declined[i][bp.name] = "fusing its group would create a cycle"
                taken |= nodes
                continue
            if problem:
                logger.warning("%s: invalid claim ignored: %s", bp.name, problem)
                for i in nodes & candidates - taken:
                    declined[i][bp.name] = f"invalid claim ignored: {problem}"
                continue
            taken |= nodes
            index = len(claims)
            claims.append((bp, Claim(tuple(sorted(nodes)), claim.fuse)))
            for i in nodes:
                node_claim[i] = index
        for i in candidates - taken:
            if node_claim[i] < 0:
                declined[i][bp.name] = capability.declined.get(i, default_reason)

    missing = [i for i in range(n) if node_claim[i] < 0]
    if missing:
        lines = []
        for i in missing:
            node = graph.nodes[i]
            reasons = "; ".join(f"{p}: {r}" for p, r in declined[i].items()) or "no provider"
            lines.append(
                f"node {node.name!r} (op {node.op_type}, domain {node.domain or 'ai.onnx'}, "
                f"opset {node.opset}): {reasons}"
            )
        asked = ", ".join(bp.name for bp in providers) or "none"
        # the first node and its reasons on the first line (logs and one-line reports show it)
        raise OrtNotImplemented(
            f"no provider can run {lines[0]}"
            + (f" (and {len(missing) - 1} more node(s) below)" if len(missing) > 1 else "")
            + f"; graph {graph.path or 'main'}, providers asked: {asked}"
            + "".join(f"\n  {line}" for line in lines[1:])
        )
    return Assignment(graph, claims, node_claim, declined)


# --------------------------------------------------------------------------------------------
# the placement report
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePlacement:
    """Where one node runs and why the providers before it declined it."""

    name: str
    op_type: str
    domain: str
    opset: int
    provider: str
    declined: dict[str, str]
    group: int | None = None  # fused group id (per graph), None for single-node claims
    graph: str = ""  # "" for the main graph, else the control-flow body path
    note: str = ""


@dataclass(frozen=True)
class CopyPlacement:
    """A device copy the plan inserted."""

    value: str
    source: str
    target: str
    graph: str = ""


@dataclass
class Placement:
    """The placement report of a session (``InferenceSession.get_placement()``)."""

    providers: list[str]
    nodes: list[NodePlacement] = field(default_factory=list)
    copies: list[CopyPlacement] = field(default_factory=list)
    #: the EPContext model this session wrote (``ep.context_enable=1``), else ""
    context_model: str = ""
    #: what chose the providers (a selection policy, its delegate, MAX_PERFORMANCE's
    #: measurements: ``ort_core.policy.Selection``), None for an explicit providers list
    selection: Any = None

    def counts(self, graph: str | None = "") -> Counter[str]:
        """Nodes per provider (of the main graph by default; ``None`` for all graphs)."""
        return Counter(p.provider for p in self.nodes if graph is None or p.graph == graph)

    def fallback_summary(self, provider: str) -> str | None:
        """One line when ``provider`` got less than the whole main graph, else None."""
        main = [p for p in self.nodes if p.graph == ""]
        taken = sum(1 for p in main if p.provider == provider)
        if not main or taken == len(main):
            return None
        fell = Counter(p.op_type for p in main if p.provider != provider)
        ops = ", ".join(f"{op} x{k}" for op, k in fell.most_common())
        return f"{provider} runs {taken}/{len(main)} nodes; the others fell back: {ops}"

    def summary(self) -> str:
        """Per provider: nodes taken (all graphs) and their op types; then the copy count."""
        lines = []
        total = len(self.nodes)
        for provider in self.providers:
            ops = Counter(p.op_type for p in self.nodes if p.provider == provider)
            if ops:
                kinds = ", ".join(f"{op} x{k}" for op, k in ops.most_common())
                lines.append(f"{provider}: {sum(ops.values())}/{total} nodes ({kinds})")
        lines.append(f"device copies: {len(self.copies)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "providers": list(self.providers),
            "nodes": [p.__dict__ for p in self.nodes],
            "copies": [c.__dict__ for c in self.copies],
            "context_model": self.context_model,
            "selection": None if self.selection is None else self.selection.to_dict(),
        }

    def __str__(self) -> str:
        lines = [] if self.selection is None else self.selection.describe().splitlines()
        counts = self.counts(None)
        total = sum(counts.values())
        lines.append(
            "placement: "
            + ", ".join(f"{p} {counts.get(p, 0)}/{total}" for p in self.providers if counts.get(p))
        )
        for p in self.nodes:
            where = f"{p.graph}/" if p.graph else ""
            group = f" [group {p.group}]" if p.group is not None else ""
            note = f" ({p.note})" if p.note else ""
            lines.append(f"  {where}{p.name} {p.op_type} -> {p.provider}{group}{note}")
            for other, reason in p.declined.items():
                lines.append(f"      {other} declined: {reason}")
        for c in self.copies:
            where = f"{c.graph}/" if c.graph else ""
            lines.append(f"  copy {where}{c.value}: {c.source} -> {c.target}")
        if self.context_model:
            lines.append(f"  context model written: {self.context_model}")
        return "\n".join(lines)
