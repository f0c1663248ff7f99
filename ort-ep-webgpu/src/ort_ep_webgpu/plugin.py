"""The WebGPU provider's hook implementations (entry point ``ort_core.plugins: webgpu``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ort_core import (
    Allocator,
    Capability,
    Claim,
    DataTransfer,
    EpDevice,
    EpDevices,
    EPFail,
    GraphView,
    Kernel,
    KernelRequest,
    NodeView,
    OptionSpec,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)
from ort_core.hostshapes import host_kernel, host_nodes_cached

from . import MEMORY_NAME, PROVIDER_NAME, ops_control, ops_elementwise, ops_nn, ops_tensor  # noqa: F401  (register kernels)
from .registry import SessionRuntime, entry
from .runtime import DEVICE_TYPES, BufferPool, Stream, choose_adapter, describe, get_device, list_adapters
from .version import __version__


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected a boolean (1/0, true/false)")


def parse_nonnegative(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be >= 0")
    return number


SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="ort",
    kind="kernel",
    options=(
        OptionSpec("adapter", "", "adapter to use: '' picks one (hardware first, then by power_preference); "
                   "an index into get_ep_devices() order; or part of the adapter's name or backend", str),
        OptionSpec("power_preference", "high-performance", "automatic choice prefers discrete "
                   "(high-performance) or integrated (low-power) GPUs", str, ("high-performance", "low-power")),
        OptionSpec("require_hardware", False, "refuse software adapters (lavapipe, SwiftShader, WARP)", parse_bool),
        OptionSpec("fp16", True, "run float16 nodes when the adapter offers shader-f16", parse_bool),
        OptionSpec("memory_limit_mb", 0, "limit of the session's GPU buffer pool in MiB (0: none)", parse_nonnegative),
        OptionSpec("max_batch", 512, "dispatches recorded before a command submission is forced", parse_nonnegative),
        OptionSpec("gemm_kernel", "auto", "MatMul/Gemm with 32 rows or more: 'tiled' (workgroup memory), "
                   "'registers' (4x4 per thread, no workgroup memory), 'auto' (registers on software "
                   "adapters, tiled on hardware)", str, ("auto", "tiled", "registers")),
    ),
    description="WGSL compute shaders on wgpu; tensors stay in GPU buffers",
)

# inputs some ops read as host arrays (shapes, axes, bounds): their dtype need not be on the GPU
HOST_INPUT_POSITIONS: dict[str, frozenset[int]] = {
    "Reshape": frozenset({1}), "Unsqueeze": frozenset({1}), "Squeeze": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}), "Expand": frozenset({1}), "Split": frozenset({1}),
    "Clip": frozenset({1, 2}), "Dropout": frozenset({1, 2}), "Shape": frozenset({0}), "Size": frozenset({0}),
    "If": frozenset({0}), "ConstantOfShape": frozenset({0}), "Pad": frozenset({1, 2, 3}),
    "Resize": frozenset({1, 2, 3}),
    **{name: frozenset({1}) for name in ops_nn.REDUCE},
}


def _device(record) -> EpDevice:
    return EpDevice(
        PROVIDER_NAME, "ort", "GPU", record.name, device_id=record.index, vendor=record.vendor,
        memory=MEMORY_NAME, hardware=record.hardware,
        metadata={
            "backend": record.backend,
            "adapter_type": record.adapter_type,
            "shader-f16": "yes" if "shader-f16" in record.features else "no",
        },
    )


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    records, reason = list_adapters()
    if not records:
        return EpDevices((), reason)
    return EpDevices(tuple(_device(r) for r in records))


def _runtime(ep: ProviderContext) -> SessionRuntime:
    return ep.state["runtime"]


@hookimpl
def ort_session_start(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME:
        return
    records, reason = list_adapters()
    if not records:
        raise EPFail(reason or "no WebGPU adapter")
    try:
        record = choose_adapter(records, ep.options["adapter"], ep.options["power_preference"])
    except ValueError as exc:
        raise EPFail(f"option adapter: {exc}") from None
    if ep.options["require_hardware"] and not record.hardware:
        raise EPFail(
            f"require_hardware is set but adapter {record.name!r} ({record.backend}) is a software "
            f"adapter; adapters here: {describe(records)}"
        )
    fp16 = bool(ep.options["fp16"]) and "shader-f16" in record.features
    gpu = get_device(record, fp16)
    limit = ep.options["memory_limit_mb"] * (1 << 20) or None
    pool = BufferPool(gpu, MEMORY_NAME, limit)
    stream = Stream(gpu, pool, max_batch=max(1, ep.options["max_batch"]))
    gemm = ep.options["gemm_kernel"]
    direct = gemm == "registers" or (gemm == "auto" and not record.hardware)
    ep.state["runtime"] = SessionRuntime(gpu, pool, stream, fp16, direct)
    # the session uses the adapter chosen here (core picked the first listed one)
    ep.device = _device(record)


@hookimpl
def ort_session_end(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME or "runtime" not in ep.state:
        return
    rt = ep.state.pop("runtime")
    rt.stream.close()
    rt.pool.release()


@hookimpl
def ort_create_allocator(ep: ProviderContext) -> Allocator | None:
    if ep.name != PROVIDER_NAME:
        return None
    return _runtime(ep).pool


@hookimpl
def ort_create_data_transfer(ep: ProviderContext) -> DataTransfer | None:
    if ep.name != PROVIDER_NAME:
        return None
    stream = _runtime(ep).stream
    return DataTransfer(to_device=stream.upload, to_host=stream.download)


@hookimpl
def ort_run_end(ep: ProviderContext, run_options: object) -> None:
    if ep.name == PROVIDER_NAME and "runtime" in ep.state:
        _runtime(ep).stream.flush()


def decline_reason(node: NodeView, rt: SessionRuntime) -> str | None:
    """Why the WebGPU provider cannot take ``node``, or None if it can."""
    if node.domain:
        return f"no WebGPU kernel for {node.qualified_op}"
    e = entry(node.op_type)
    if e is None:
        return f"no WebGPU kernel for {node.op_type}"
    if node.opset < e.since:
        return f"no WebGPU kernel for {node.op_type} at opset {node.opset} (first: {e.since})"
    supported = rt.supported_dtypes()
    host_positions = HOST_INPUT_POSITIONS.get(node.op_type, frozenset())
    names = [(n, k in host_positions) for k, n in enumerate(node.inputs)] + [(n, False) for n in node.outputs]
    for name, on_host in names:
        if not name or on_host:
            continue
        dtype = node.graph.value(name).dtype
        if dtype is None:
            return f"{node.op_type}: type of {name!r} is not a known tensor type"
        if dtype not in supported:
            if dtype == np.float16:
                return "float16 needs the adapter's shader-f16 feature and option fp16=1"
            return f"{node.op_type} on {dtype} is not supported (WebGPU kernels take float32, float16, int32, int64 and bool)"
    if e.check is not None:
        return e.check(node)
    return None


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    rt = _runtime(ep)
    on_host = host_nodes_cached(ep, graph)
    capability = Capability()
    for i in sorted(candidates):
        node = graph.nodes[i]
        reason = None if i in on_host else decline_reason(node, rt)
        if reason is None:
            capability.claims.append(Claim((i,)))
        else:
            capability.declined[i] = reason
    return capability


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    node = request.node
    if node.index in host_nodes_cached(ep, request.graph):
        return host_kernel(node, DEVICE_TYPES)
    e = entry(node.op_type)
    if e is None:
        raise ValueError(f"no WebGPU kernel for {node.op_type}")
    return e.build(node, request, _runtime(ep))
