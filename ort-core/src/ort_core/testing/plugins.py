"""Cross-cutting plugins: plugins that offer no provider and wrap the hooks of those that do.

Core calls every registered plugin's hook wrappers around each provider's answer, so a plugin
that registers no provider can change or observe what any provider does without touching its
code. Two useful ones, ready to import:

* ``OpVeto`` keeps chosen ops (or nodes) away from one provider by wrapping
  ``ort_get_capability``; the vetoed nodes fall back to the next provider with the veto as
  the reason in the placement report.
* ``KernelTracer`` times every kernel execution by wrapping ``ort_create_kernel``: each
  returned ``Kernel.run`` is replaced by a timed one (per-node records, a summary, a Chrome
  trace).

Register them for the whole process with ``ort_core.register(plugin)``, or for a block with
``with plugin.installed(): ...``. A plugin affects sessions created while it is registered.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..graph.view import GraphView, NodeView
from ..hookspecs import hookimpl
from ..plugins import registry
from ..types import Capability, Kernel, KernelRequest, ProviderContext


class _Installable:
    """``installed()``: register the plugin for the duration of a ``with`` block."""

    plugin_name: str

    @contextmanager
    def installed(self) -> Iterator[Any]:
        reg = registry()
        if not reg.register(self, self.plugin_name):
            failure = reg.failures[-1]
            raise RuntimeError(f"plugin {self.plugin_name!r} could not be registered: {failure.error}")
        try:
            yield self
        finally:
            reg.unregister(self)


class OpVeto(_Installable):
    """Keep ``ops`` (op types, e.g. ``"Conv"`` or ``"com.microsoft::Gelu"``) and ``nodes``
    (node names) away from ``provider``.

    A claimed node that is vetoed is declined with ``reason``. A fused group that holds a vetoed
    node is dropped whole (its other nodes declined, naming the vetoed one) because a compiling
    provider built the group as one unit and may not handle a part of it.

    Example::

        veto = OpVeto("OpenVINOExecutionProvider", ops=["Resize"], reason="Resize differs on GPU")
        with veto.installed():
            sess = ort.InferenceSession(model, providers=["OpenVINOExecutionProvider"])
    """

    def __init__(
        self,
        provider: str,
        ops: Iterable[str] = (),
        nodes: Iterable[str] = (),
        reason: str = "vetoed by the OpVeto plugin",
        name: str | None = None,
    ) -> None:
        self.provider = provider
        self.ops = frozenset(ops)
        self.nodes = frozenset(nodes)
        self.reason = reason
        self.plugin_name = name or f"op-veto[{provider}]@{id(self):x}"
        if not self.ops and not self.nodes:
            raise ValueError("OpVeto: give at least one op type or node name to veto")

    def vetoed(self, node: NodeView) -> bool:
        return node.op_type in self.ops or node.qualified_op in self.ops or node.name in self.nodes

    @hookimpl(wrapper=True)
    def ort_get_capability(
        self, ep: ProviderContext, graph: GraphView, candidates: frozenset[int]
    ) -> Generator[None, Capability | None, Capability | None]:
        capability = yield
        if capability is None or ep.name != self.provider:
            return capability
        # a new answer: the provider may keep its own Capability object
        result = Capability(claims=[], declined=dict(capability.declined))
        for claim in capability.claims:
            hit = [i for i in claim.nodes if 0 <= i < len(graph.nodes) and self.vetoed(graph.nodes[i])]
            if not hit:
                result.claims.append(claim)
                continue
            names = ", ".join(repr(graph.nodes[i].name) for i in hit)
            for i in claim.nodes:
                result.declined[i] = (
                    self.reason if i in hit else f"its fused group was dropped: {self.reason} ({names})"
                )
        return result


@dataclass(frozen=True)
class KernelRecord:
    """One kernel execution: which claim, on which provider, when and how long (ns)."""

    provider: str
    node: str  # node name, or "first (+k fused)" for a fused group
    op_type: str  # op type, or "FusedGroup"
    graph: str  # "" for the main graph
    start_ns: int
    duration_ns: int
    thread: int
    ok: bool


@dataclass(frozen=True)
class KernelStats:
    """Totals for one node over the recorded runs."""

    provider: str
    op_type: str
    calls: int
    total_ns: int

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0


class KernelTracer(_Installable):
    """Record every kernel execution of the chosen providers (all when ``providers`` is None).

    Kernels are wrapped when a session is created, so trace sessions created while the tracer
    is registered. The timing wraps only the kernel's ``run`` call: copies and core's own work
    are not included.

    Example::

        tracer = KernelTracer()
        with tracer.installed():
            sess = ort.InferenceSession(model)
        sess.run(None, feeds)
        for node, s in tracer.summary().items():
            print(node, s.calls, s.mean_ns / 1e3, "us")
    """

    def __init__(
        self,
        providers: Iterable[str] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        name: str | None = None,
    ) -> None:
        self.providers = None if providers is None else frozenset(providers)
        self.clock = clock
        self.records: list[KernelRecord] = []
        self._lock = threading.Lock()
        self.plugin_name = name or f"kernel-tracer@{id(self):x}"

    @hookimpl(wrapper=True)
    def ort_create_kernel(
        self, ep: ProviderContext, request: KernelRequest
    ) -> Generator[None, Kernel | None, Kernel | None]:
        kernel = yield
        if kernel is None or (self.providers is not None and ep.name not in self.providers):
            return kernel
        first = request.nodes[0]
        fused = len(request.nodes) > 1
        node = f"{first.name} (+{len(request.nodes) - 1} fused)" if fused else first.name
        op_type = "FusedGroup" if fused else first.op_type
        return dataclasses.replace(kernel, run=self._timed(kernel.run, ep.name, node, op_type, request.graph.path))

    def _timed(self, run: Callable[..., Any], provider: str, node: str, op_type: str, graph: str) -> Callable[..., Any]:
        clock = self.clock
        records = self.records
        lock = self._lock

        def timed_run(*args: Any) -> Any:
            start = clock()
            ok = False
            try:
                result = run(*args)
                ok = True
                return result
            finally:
                record = KernelRecord(provider, node, op_type, graph, start, clock() - start, threading.get_ident(), ok)
                with lock:
                    records.append(record)

        return timed_run

    def clear(self) -> None:
        with self._lock:
            self.records.clear()

    def summary(self) -> dict[str, KernelStats]:
        """Per node (``graph/name`` for control-flow bodies): calls and total time."""
        with self._lock:
            records = list(self.records)
        totals: dict[str, KernelStats] = {}
        for r in records:
            key = f"{r.graph}/{r.node}" if r.graph else r.node
            s = totals.get(key)
            totals[key] = KernelStats(
                r.provider, r.op_type, (s.calls if s else 0) + 1, (s.total_ns if s else 0) + r.duration_ns
            )
        return totals

    def chrome_trace(self) -> list[dict[str, Any]]:
        """The records as Chrome trace events (open in chrome://tracing or Perfetto)."""
        with self._lock:
            records = list(self.records)
        origin = min((r.start_ns for r in records), default=0)
        return [
            {
                "name": r.node, "cat": r.provider, "ph": "X", "pid": 0, "tid": r.thread,
                "ts": (r.start_ns - origin) / 1000, "dur": r.duration_ns / 1000,
                "args": {"op_type": r.op_type, "graph": r.graph, "ok": r.ok},
            }
            for r in records
        ]


__all__ = ["KernelRecord", "KernelStats", "KernelTracer", "OpVeto"]
