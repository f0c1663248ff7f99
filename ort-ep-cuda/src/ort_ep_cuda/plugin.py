"""The CUDA provider's hook implementations (entry point ``ort_core.plugins: cuda``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_core import (
    CORE_DOMAIN,
    Allocator,
    Capability,
    Claim,
    DataTransfer,
    EpDevice,
    EpDevices,
    EPFail,
    FusedOp,
    GraphView,
    Kernel,
    KernelRequest,
    NodeView,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)
from ort_core.hostshapes import host_kernel, host_nodes_cached

from . import (  # noqa: F401  (the ops_* modules register the kernels)
    MEMORY_NAME,
    PROVIDER_NAME,
    backend,
    devices,
    ops_attention,
    ops_control,
    ops_fused,
    ops_math,
    ops_nn,
    ops_tensor,
)
from .bfloat16 import BFLOAT16, adapt
from .graphs import GraphMode, graph_kernel
from .ops_fused import ACTIVATIONS
from .options import OPTIONS, SHRINKAGE_RUN_OPTION
from .registry import Runtime, entry
from .version import __version__

SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="ort",
    kind="kernel",
    options=OPTIONS,
    description="CuPy device arrays on NVIDIA GPUs; cuBLAS products, cuDNN convolutions",
    # the fused nodes core's optimizer may form for this provider (contract 1.2): ops_fused.py,
    # ops_attention.py and ops_math.py compute each as onnxruntime does (the kit's
    # fusion_parity checks it)
    fused_ops=(
        FusedOp("FusedConv", attributes={"activation": ACTIVATIONS}),
        FusedOp("FusedGemm", attributes={"activation": tuple(a for a in ACTIVATIONS if a != "Clip")}),
        FusedOp("FusedMatMul"),
        FusedOp("Gelu"),
        FusedOp("BiasGelu"),
        FusedOp("SkipLayerNormalization"),
        FusedOp("Attention"),
        FusedOp("MultiHeadAttention"),
        FusedOp("LayerNormalization", ""),
        FusedOp("LayerNormalization", CORE_DOMAIN),
        FusedOp("HardSwish", ""),
        FusedOp("HardSwish", CORE_DOMAIN),
    ),
)


def _device(record: devices.GpuRecord) -> EpDevice:
    return EpDevice(PROVIDER_NAME, "ort", "GPU", record.name, device_id=record.index, vendor="NVIDIA",
                    memory=MEMORY_NAME, hardware=True, metadata=devices.metadata(record))


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    found = devices.probe()
    if not found.records:
        return EpDevices((), found.reason)
    return EpDevices(tuple(_device(r) for r in found.records))


def _runtime(ep: ProviderContext) -> Runtime:
    return ep.state["runtime"]


@hookimpl
def ort_session_start(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME:
        return
    found = devices.probe()
    if not found.records:
        raise EPFail(found.reason or "no CUDA device")
    # core picked the device named by option device_id (and refused one that is not present)
    record = next(r for r in found.records if r.index == ep.device.device_id)
    dev = backend.open_device(record, dict(ep.options), MEMORY_NAME)
    ep.state["runtime"] = Runtime(dev, cudnn=bool(record.cudnn), cudnn_reason=record.cudnn_reason)
    ep.state["graph_mode"] = GraphMode() if ep.options["enable_cuda_graph"] else None
    ep.device = _device(record)


@hookimpl
def ort_session_end(ep: ProviderContext) -> None:
    if ep.name == PROVIDER_NAME and "runtime" in ep.state:
        ep.state.pop("runtime").dev.close()


@hookimpl
def ort_create_allocator(ep: ProviderContext) -> Allocator | None:
    if ep.name != PROVIDER_NAME:
        return None
    return _runtime(ep).dev.arena


@hookimpl
def ort_create_data_transfer(ep: ProviderContext) -> DataTransfer | None:
    if ep.name != PROVIDER_NAME:
        return None
    dev = _runtime(ep).dev
    return DataTransfer(to_device=dev.to_device, to_host=dev.to_host)


def shrink_requested(value: str, device_id: int) -> bool:
    """Whether ``memory.enable_memory_arena_shrinkage`` (e.g. "cpu:0;gpu:0") names this GPU."""
    for token in value.replace(",", ";").split(";"):
        kind, _, index = token.strip().partition(":")
        if kind.strip().lower() in ("gpu", "cuda") and index.strip() == str(device_id):
            return True
    return False


@hookimpl
def ort_run_start(ep: ProviderContext, run_options: Any) -> None:
    if ep.name == PROVIDER_NAME and ep.state.get("graph_mode") is not None:
        ep.state["graph_mode"].start_run(_runtime(ep).dev)


@hookimpl
def ort_run_end(ep: ProviderContext, run_options: Any) -> None:
    if ep.name != PROVIDER_NAME or "runtime" not in ep.state:
        return
    if ep.state.get("graph_mode") is not None:
        ep.state["graph_mode"].end_run(_runtime(ep).dev)
    if run_options is None:
        return
    try:
        value = run_options.get_run_config_entry(SHRINKAGE_RUN_OPTION)
    except Exception:  # not set
        return
    if shrink_requested(value, ep.options["device_id"]):
        rt = _runtime(ep)
        rt.dev.synchronize()  # the run's kernels are done with the memory being given back
        rt.dev.arena.shrink()


def decline_reason(node: NodeView, rt: Runtime) -> str | None:
    """Why the CUDA provider cannot take ``node``, or None if it can."""
    e = entry(node.domain, node.op_type)
    if e is None:
        return f"no CUDA kernel for {node.qualified_op}"
    if node.opset < e.since:
        return f"no CUDA kernel for {node.op_type} at opset {node.opset} (first: {e.since})"
    names = [n for k, n in enumerate(node.inputs) if k not in e.host_inputs] + list(node.outputs)
    for name in names:
        if not name:
            continue
        dtype = node.graph.value(name).dtype
        if dtype is None:
            return f"{node.op_type}: {name!r} is not a tensor of a known type"
        if dtype == BFLOAT16 and np.dtype(np.float32) in e.dtypes:
            continue  # computed in float32 (bfloat16.py)
        if dtype not in e.dtypes:
            if dtype == BFLOAT16:
                return f"{node.op_type} on bfloat16 has no CUDA kernel (no float32 kernel to compute it in)"
            return f"{node.op_type} on {dtype} has no CUDA kernel (takes {', '.join(sorted(d.name for d in e.dtypes))})"
    return None if e.check is None else e.check(node, rt)


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    rt = _runtime(ep)
    on_host = host_nodes_cached(ep, graph)
    capability = Capability()
    for i in sorted(candidates):
        reason = None if i in on_host else decline_reason(graph.nodes[i], rt)
        if reason is None:
            capability.claims.append(Claim((i,)))
        else:
            capability.declined[i] = reason
    if ep.state.get("graph_mode") is not None:
        ep.state["graph_mode"].check_graph(graph, candidates, capability.declined)
    return capability


def _touches_bfloat16(node: NodeView) -> bool:
    return any(n and node.graph.value(n).dtype == BFLOAT16 for n in (*node.inputs, *node.outputs))


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    node = request.node
    if node.index in host_nodes_cached(ep, request.graph):
        return host_kernel(node, backend.DEVICE_DTYPES | {BFLOAT16})
    e = entry(node.domain, node.op_type)
    if e is None:
        raise ValueError(f"no CUDA kernel for {node.qualified_op}")
    rt = _runtime(ep)
    body = e.build(node, request, rt)
    launch, fn = rt.dev.launch, body.fn
    if body.launch and _touches_bfloat16(node):
        outs = [bool(n) and node.graph.value(n).dtype == BFLOAT16 for n in node.outputs]
        fn = adapt(rt.xp, fn, outs, body.n_outputs)
    run = (lambda *args: launch(fn, args)) if body.launch else fn
    mode = ep.state.get("graph_mode")
    if mode is not None and body.launch:
        run = graph_kernel(mode, node.name, launch, fn, body.host_inputs)
    return Kernel(run=run, single_output=body.n_outputs == 1, host_inputs=body.host_inputs)
