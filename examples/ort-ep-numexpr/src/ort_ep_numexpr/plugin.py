"""NumExprExecutionProvider: the plugin module (entry point ``ort_core.plugins: numexpr``).

A compiling provider in a few hooks: capability groups chains of elementwise nodes into trees
(``Claim(nodes, fuse=True)``); kernel creation turns each tree into one numexpr expression,
evaluated in one pass over memory with numexpr's threads.
"""

from __future__ import annotations

import numexpr

from ort_core import (
    HOST_MEMORY,
    Capability,
    Claim,
    EpDevice,
    EpDevices,
    GraphView,
    Kernel,
    KernelRequest,
    OptionSpec,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)
from ort_core.devices import host_cpu

from . import PROVIDER_NAME
from .expressions import build_kernel, decline_reason
from .version import __version__


def _max_group(value: object) -> int:
    number = int(str(value))
    if number < 1:
        raise ValueError("must be 1 or more")
    return number


SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="ort examples",
    kind="compiling",
    options=(OptionSpec("max_group", 16, "most nodes fused into one expression (1: no fusion)", _max_group),),
    description="elementwise chains fused into numexpr expressions",
    # the fused nodes core's optimizer may form for this provider: none, since it fuses the
    # elementwise chains itself (a com.microsoft Gelu would hide the chain from it). A provider
    # lists here only the ops it computes exactly as onnxruntime does, e.g.
    # FusedOp("FusedGemm", attributes={"activation": ("Relu",)}); the kit's fusion_parity
    # check runs each against the unfused graph.
    fused_ops=(),
)


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    threads = str(numexpr.get_num_threads())
    cpu = host_cpu()
    return EpDevices((
        EpDevice(PROVIDER_NAME, "ort examples", "CPU", cpu.name, vendor=cpu.vendor, memory=HOST_MEMORY,
                 metadata={"numexpr": numexpr.__version__, "threads": threads}),
    ))


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    capability = Capability()
    taken = []
    for i in sorted(candidates):
        reason = decline_reason(graph, graph.nodes[i])
        if reason is None:
            taken.append(i)
        else:
            capability.declined[i] = reason
    groups = _trees(graph, taken, ep.options["max_group"])
    for group in groups:
        capability.claims.append(Claim(tuple(group), fuse=len(group) > 1))
    return capability


def _trees(graph: GraphView, taken: list[int], limit: int) -> list[list[int]]:
    """Join a node to the group of its producer when the producer's output has this node as
    its only reader and is no graph output: the groups are trees, one output each."""
    group_of = {i: [i] for i in taken}
    outputs = set(graph.outputs)
    for i in taken:  # topological order: producers first
        for name in graph.nodes[i].inputs:
            p = graph.producer.get(name) if name else None
            if p is None or p not in group_of or group_of[p] is group_of[i]:
                continue
            if name in outputs or len(graph.consumers.get(name, ())) != 1:
                continue
            mine, theirs = group_of[i], group_of[p]
            if len(mine) + len(theirs) > limit:
                continue
            mine.extend(theirs)
            for j in theirs:
                group_of[j] = mine
    unique = {id(g): sorted(g) for g in group_of.values()}
    return sorted(unique.values())


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    return build_kernel(request)
