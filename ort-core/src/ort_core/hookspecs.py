"""The provider contract: every hook core calls, with its whole documentation.

A plugin is a module (or object) with functions decorated by ``ort_core.hookimpl`` whose names
are the hook names below. It is advertised through the entry-point group ``ort_core.plugins``::

    [project.entry-points."ort_core.plugins"]
    my_ep = "my_ep.plugin"

Core loads the group at first use. A plugin may offer several providers; core calls the
per-provider hooks only on the plugin that registered the provider (and on cross-cutting
plugins, which register no provider), so one plugin's failure cannot break another's. Hook
implementations still return ``None`` for a ``ProviderContext`` whose name is not theirs.

Call order for one session::

    ort_register_providers            once per process, when plugins are loaded
    ort_ep_devices                    once per process and provider, cached
    ort_session_start                 per provider, after options are validated
    ort_create_allocator              per provider, once
    ort_create_data_transfer          per provider whose device memory is not host memory
    ort_get_capability                per provider in priority order, per graph
    ort_create_kernel                 per claim (a node or a fused group), once
      ... then per run:
    ort_run_start / ort_run_end       per provider that implements them, around each run
    ort_session_end                   when the session is released

Kernels are resolved at session creation: a run calls the kernels' ``run`` callables directly,
never through pluggy.

Fused ops (contract 1.2). At levels EXTENDED and ALL core's optimizer rewrites patterns into
single nodes (``com.microsoft`` FusedGemm, Gelu, SkipLayerNormalization, Attention, ...,
ort-core's own ``ort_core`` ops, and the standard LayerNormalization/HardSwish in place of
their decomposed forms; the whole list with every attribute value is
``ort_core.optimizer.FUSED_OPS``). The rule: a fused node is formed only where the provider
that will run it computes exactly that op with those attributes, as onnxruntime computes it.
Core applies it so, before partitioning, for the session's first provider:

* the provider declares the fused ops it computes exactly in ``ProviderSpec.fused_ops``, as
  ``FusedOp(op_type, domain, attributes={name: values computed})``; nothing else is formed
  for it, whatever its ``ort_get_capability`` would claim (claiming a node says a provider
  *takes* it, not that it *computes* it);
* a declared op is formed only if the provider also claims the fused node in a one-node probe
  graph (same input types, shapes and constant inputs) through ``ort_get_capability``, so it
  can still decline it for its types.

Declare nothing (the default) and the provider gets the graph as level BASIC leaves it: a
compiling provider, which fuses on its own, should, as onnxruntime's compiling providers get
the graph unfused. The conformance kit's ``fusion_parity`` check verifies both halves: every
declared op it forms matches the unfused graph, and every fused node the provider claims
(a model may hold them already) matches or is declined.

Cross-cutting plugins use the same hooks as wrappers, e.g. to veto nodes for a provider::

    @hookimpl(wrapper=True)
    def ort_get_capability(ep, graph, candidates):
        capability = yield
        if ep.name == "OpenVINOExecutionProvider" and capability is not None:
            ...  # drop claims on vetoed ops, add reasons to capability.declined
        return capability

Failures are contained to the plugin: a cross-cutting plugin that raises in
``ort_session_start``, ``ort_create_allocator``, ``ort_run_start`` or ``ort_run_end`` is skipped
and recorded once in ``ort_core.plugin_failures()``; a provider's own exception from its run
hooks becomes an ``EPFail`` naming the provider (the original chained), and ``ort_run_end`` is
called for exactly the providers whose ``ort_run_start`` returned.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .graph.view import GraphView
    from .types import (
        Allocator,
        Capability,
        DataTransfer,
        EpDevices,
        Kernel,
        KernelRequest,
        ProviderContext,
        ProviderSpec,
    )

PROJECT_NAME = "ort_core"
ENTRY_POINT_GROUP = "ort_core.plugins"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --------------------------------------------------------------------------------------------
# 1. discovery
# --------------------------------------------------------------------------------------------


@hookspec
def ort_register_providers() -> Iterable[ProviderSpec]:
    """Return the providers this plugin offers.

    Called once per process when core loads plugins. Every plugin's answer is collected.
    Cross-cutting plugins (tracers, vetoes) return an empty list. ``ProviderSpec.fused_ops``
    lists the fused nodes the optimizer may form for the provider: only those it computes
    exactly (see "Fused ops" above).

    Example::

        @hookimpl
        def ort_register_providers():
            return [ProviderSpec(name="MyExecutionProvider", version=__version__,
                                 vendor="Me", kind="kernel",
                                 options=(OptionSpec("device_id", 0, "device index", int),),
                                 fused_ops=(FusedOp("FusedGemm", attributes={"activation": ("Relu",)}),))]
    """


@hookspec(firstresult=True)
def ort_ep_devices(provider: str) -> EpDevices | None:
    """Return the devices ``provider`` can use on this machine, or why it can use none.

    Called at most once per process and provider (the answer is cached). Must not raise when
    the hardware or the vendor library is missing: return ``EpDevices((), reason)`` with a
    reason a user can act on (``"openvino is not installed: pip install openvino"``,
    ``"no Vulkan adapter: Request adapter failed"``). Return ``None`` for providers that are
    not yours.

    Example::

        @hookimpl
        def ort_ep_devices(provider):
            if provider != "MyExecutionProvider":
                return None
            return EpDevices((EpDevice(provider, "Me", "CPU", name=platform.processor()),))
    """


# --------------------------------------------------------------------------------------------
# 6. lifecycle (session)
# --------------------------------------------------------------------------------------------


@hookspec
def ort_session_start(ep: ProviderContext) -> None:
    """A session that uses ``ep`` is being created; ``ep.options`` are validated.

    Put session-scoped state in ``ep.state`` (streams, caches, a compiled-model cache
    directory). Raise ``ort_core.EPFail`` with the reason if the options cannot work here
    (e.g. a device type that is not present); core reports it naming the provider.

    Example::

        @hookimpl
        def ort_session_start(ep):
            if ep.name == "MyExecutionProvider":
                ep.state["stream"] = my_lib.Stream(ep.options["device_id"])
    """


@hookspec
def ort_session_end(ep: ProviderContext) -> None:
    """The session that used ``ep`` is released: free what ``ort_session_start`` made."""


# --------------------------------------------------------------------------------------------
# 2. capability
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def ort_get_capability(
    ep: ProviderContext, graph: GraphView, candidates: frozenset[int]
) -> Capability | None:
    """Say which of the ``candidates`` nodes ``ep`` takes, and why it declines the others.

    ``graph`` is a read-only view of the whole graph (node indices, op types, opset versions,
    attributes, value types and shapes, initializers). ``candidates`` are the indices of the
    nodes no earlier provider took; claim only among them. Called once per provider and graph
    (control-flow bodies are graphs too), in the priority order the user gave.

    Kernel providers return one ``Claim((i,))`` per node, and may return a group they run as
    one kernel of their own as ``Claim(nodes, fuse=True)``. Compiling providers return groups
    ``Claim(nodes, fuse=True)``; core refuses a group whose fusion would create a cycle and
    reports its nodes as declined with that reason. Give every declined candidate a reason in
    ``Capability.declined``.

    Also called on one-node probe graphs holding a fused node the optimizer would form for a
    provider that declares it in ``ProviderSpec.fused_ops`` (see "Fused ops" above): claim it
    only if your kernel computes it. Claim a node in a vendor domain (``com.microsoft``) that
    a model holds only if you compute it as onnxruntime does; decline it with a reason if not.

    Example::

        @hookimpl
        def ort_get_capability(ep, graph, candidates):
            if ep.name != "MyExecutionProvider":
                return None
            capability = Capability()
            for i in sorted(candidates):
                node = graph.nodes[i]
                if node.op_type in MY_KERNELS:
                    capability.claims.append(Claim((i,)))
                else:
                    capability.declined[i] = f"{node.op_type} has no kernel"
            return capability
    """


# --------------------------------------------------------------------------------------------
# 3. allocation and 4. data transfer
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def ort_create_allocator(ep: ProviderContext) -> Allocator | None:
    """Return the allocator for ``ep.device`` (once per session and provider).

    Optional for providers on host memory. Device providers return an ``Allocator`` whose
    ``memory_info.name`` equals ``ep.device.memory``; their kernels allocate outputs through it
    so that reuse (a pool or arena), the memory limit and the statistics hold. The session
    reports ``stats()`` in ``InferenceSession.get_memory_stats()``.

    Example::

        @hookimpl
        def ort_create_allocator(ep):
            if ep.name == "MyExecutionProvider":
                return PoolAllocator(MemoryInfo("My:0", "GPU"), limit=ep.options["mem_limit"])
    """


@hookspec(firstresult=True)
def ort_create_data_transfer(ep: ProviderContext) -> DataTransfer | None:
    """Return the copies between ``ep.device.memory`` and host memory (once per session).

    Required when ``ep.device.memory`` is not ``"Cpu"``. Core calls ``to_device``/``to_host``
    in copy steps it inserts where a value crosses between memories (graph inputs and outputs,
    fallback nodes, initializers once at session creation). Copies must be bit-exact.

    Example::

        @hookimpl
        def ort_create_data_transfer(ep):
            if ep.name == "MyExecutionProvider":
                return DataTransfer(to_device=my_lib.asarray, to_host=my_lib.asnumpy)
    """


# --------------------------------------------------------------------------------------------
# 5. kernel execution
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    """Build the callable that runs one claim of ``ep``: a node, or a fused group.

    Called once per claim at session creation; the returned ``Kernel.run`` is then called on
    every run with the values named by ``request.inputs`` and must return those named by
    ``request.outputs``. Values arrive in ``ep.device.memory`` unless listed in
    ``Kernel.host_inputs``. Do the expensive work here (compile, pick an algorithm, read
    constant inputs from ``request.value(name).const_value``), not in ``run``. ``run`` may be
    called from several threads at once.

    Compiling providers call ``request.to_model()`` and hand the ``onnx.ModelProto`` to their
    vendor's parser. Control-flow kernels call ``request.build_subgraph("body")``.

    Compiled-model caches (EPContext, contract 1.2): a compiling provider whose compiled group
    can be saved sets ``Kernel.export_context`` (returns an ``EpContextBlob``); with the
    session config ``ep.context_enable=1`` core writes a model in which that group is one
    ``com.microsoft.EPContext`` node holding the blob. When such a model is loaded, claim the
    EPContext nodes whose ``source`` attribute is your name (``fuse=False``;
    ``ort_core.epcontext.is_context_node(node, ep.name)``) and build their kernel from
    ``ort_core.epcontext.read_context(request)`` without compiling. A blob you cannot load is
    an ``ort_core`` error naming the partition; core fails the session with it (no other
    provider can run the node).

    Raise (any exception, with a message naming the node and the reason) if the claim cannot be
    built after all; core then declines those nodes for ``ep`` with that reason and offers them
    to the next provider.

    Example::

        @hookimpl
        def ort_create_kernel(ep, request):
            if ep.name != "MyExecutionProvider":
                return None
            if request.node.op_type == "Relu":
                return Kernel(run=lambda x: np.maximum(x, 0), single_output=True)
    """


# --------------------------------------------------------------------------------------------
# 6. lifecycle (run)
# --------------------------------------------------------------------------------------------


@hookspec
def ort_run_start(ep: ProviderContext, run_options: object) -> None:
    """A run begins on a session that uses ``ep`` (called per run; keep it cheap).

    Core calls it only for providers that implement it. Use it, e.g., to pick a stream.
    """


@hookspec
def ort_run_end(ep: ProviderContext, run_options: object) -> None:
    """A run ends (also after a failed run): e.g. synchronise the provider's queue."""
