"""The kernel registry: one builder per (domain, op type, first opset version).

A builder takes the node (``ort_core.NodeView``) and the ``KernelRequest`` and returns either a
``Kernel`` or a plain callable. A plain callable of a node with one output returns that output;
of a node with several it returns a sequence with one value per output ("" outputs get any
value, e.g. None). Builders read attributes and constant inputs once, so the callable does only
the numpy work. ``lookup`` picks the registration with the greatest ``since`` not newer than the
model's opset, the way ``onnx.reference.ops`` dispatches by version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ort_core import Kernel, KernelRequest, NodeView

Builder = Callable[[NodeView, KernelRequest], Any]
Check = Callable[[NodeView], "str | None"]


@dataclass(frozen=True)
class OpKernel:
    domain: str
    op_type: str
    since: int
    build: Builder
    check: Check | None = None  # returns a reason to decline the node, or None


_REGISTRY: dict[tuple[str, str], list[OpKernel]] = {}


def kernel(op_type: str, since: int = 1, domain: str = "", check: Check | None = None):
    """Register the decorated builder for ``op_type`` from opset ``since`` on."""

    def decorate(build: Builder) -> Builder:
        entries = _REGISTRY.setdefault((domain, op_type), [])
        entries.append(OpKernel(domain, op_type, since, build, check))
        entries.sort(key=lambda e: e.since)
        return build

    return decorate


def lookup(domain: str, op_type: str, opset: int) -> OpKernel | None:
    entries = _REGISTRY.get(("" if domain == "ai.onnx" else domain, op_type))
    if not entries:
        return None
    chosen = None
    for entry in entries:
        if entry.since <= opset:
            chosen = entry
    return chosen


def decline_reason(node: NodeView) -> str | None:
    """Why the CPU provider cannot take ``node``, or None if it can."""
    entries = _REGISTRY.get((node.domain, node.op_type))
    entry = lookup(node.domain, node.op_type, node.opset) if entries else None
    if entry is None:
        from .kernels import functions  # here, not at the top: kernels import this module

        # no kernel: an op ONNX defines by a function body runs as that body
        if functions.expansion_reason(node) is None:
            return None
        if not entries:
            return f"no CPU kernel for {node.qualified_op}"
        return f"no CPU kernel for {node.qualified_op} at opset {node.opset} (first: {entries[0].since})"
    if entry.check is not None:
        return entry.check(node)
    return None


def build_kernel(node: NodeView, request: KernelRequest) -> Kernel:
    entry = lookup(node.domain, node.op_type, node.opset)
    if entry is None:
        from .kernels import functions

        if functions.expansion_reason(node) is None:
            return functions.build_expanded(node, request)
        raise NotImplementedError(f"no CPU kernel for {node.qualified_op} opset {node.opset}")
    built = entry.build(node, request)
    if isinstance(built, Kernel):
        return built
    return Kernel(run=built, single_output=len(request.outputs) == 1)


def registered_ops() -> list[tuple[str, str, int]]:
    """(domain, op type, since) of every registration."""
    return sorted((e.domain, e.op_type, e.since) for es in _REGISTRY.values() for e in es)
