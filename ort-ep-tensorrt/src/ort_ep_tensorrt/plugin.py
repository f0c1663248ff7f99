"""The TensorRT provider's hook implementations (entry point ``ort_core.plugins: tensorrt``).

Importing this module never imports tensorrt or CuPy. TensorRT's tensors are the CUDA
provider's: the device is opened through ``ort_ep_cuda.backend`` and named "Cuda" memory, so
in ``[TensorRT, CUDA, CPU]`` the plan copies nothing between TensorRT and CUDA nodes.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ort_core import (
    Allocator,
    Capability,
    DataTransfer,
    EpContextBlob,
    EpDevice,
    EpDevices,
    EPFail,
    Fail,
    GraphView,
    Kernel,
    KernelRequest,
    OptionSpec,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)
from ort_core.epcontext import is_context_node, read_context

from . import MEMORY_NAME, PROVIDER_NAME, _trt
from .capability import capability
from .engine import BuildSettings, EngineKernel, Profile, TrtLogger
from .options import OPTIONS, check_profiles
from .version import __version__

logger = logging.getLogger("ort_core")

SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="ort",
    kind="compiling",
    options=OPTIONS,
    description="claimed subgraphs become TensorRT engines on NVIDIA GPUs, on the CUDA provider's memory",
)


def _cuda_options() -> dict[str, Any]:
    from ort_ep_cuda.options import OPTIONS as CUDA_OPTIONS

    return {o.name: o.default for o in CUDA_OPTIONS if isinstance(o, OptionSpec)}


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    from ort_ep_cuda import devices

    found = devices.probe()
    reasons = [] if found.records else [f"no CUDA GPU for TensorRT: {found.reason}"]
    if _trt.unavailable_reason() is not None:
        reasons.append(_trt.unavailable_reason())
    if reasons:  # both are said when both are missing, so one install does not reveal the other
        return EpDevices((), "; and ".join(reasons))
    trt = _trt.load()
    return EpDevices(tuple(
        EpDevice(PROVIDER_NAME, "ort", "GPU", r.name, device_id=r.index, vendor="NVIDIA", memory=MEMORY_NAME,
                 hardware=True, metadata={**devices.metadata(r), "tensorrt_version": str(trt.__version__)})
        for r in found.records
    ))


@hookimpl
def ort_session_start(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME:
        return
    options = dict(ep.options)
    try:
        check_profiles(options)
    except ValueError as exc:
        raise EPFail(f"{PROVIDER_NAME}: {exc}") from exc
    if options["trt_cuda_graph_enable"]:
        raise EPFail("option trt_cuda_graph_enable=1: CUDA graph capture of engines is not implemented in this "
                     "version of ort-ep-tensorrt; run without it")
    from ort_ep_cuda import backend, devices

    trt = _trt.load()
    record = next(r for r in devices.probe().records if r.index == ep.device.device_id)
    ep.state["trt"] = trt
    ep.state["logger"] = TrtLogger.create(trt, options["trt_detailed_build_log"])
    ep.state["dev"] = backend.open_device(record, _cuda_options(), MEMORY_NAME)
    cc = f"{record.compute_capability[0]}.{record.compute_capability[1]}"
    ep.state["settings"] = BuildSettings.from_options(trt, options, cc)
    ep.state["groups"] = 0


@hookimpl
def ort_session_end(ep: ProviderContext) -> None:
    if ep.name == PROVIDER_NAME and "dev" in ep.state:
        ep.state.pop("dev").close()


@hookimpl
def ort_create_allocator(ep: ProviderContext) -> Allocator | None:
    return ep.state["dev"].arena if ep.name == PROVIDER_NAME else None


@hookimpl
def ort_create_data_transfer(ep: ProviderContext) -> DataTransfer | None:
    if ep.name != PROVIDER_NAME:
        return None
    dev = ep.state["dev"]
    return DataTransfer(to_device=dev.to_device, to_host=dev.to_host)


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    return capability(ep.state["trt"], ep.state["logger"], graph, candidates, dict(ep.options))


def static_profile(request: KernelRequest, options: dict) -> Profile | None:
    """Each group input's (min, opt, max) when all are known before the first run: fixed shapes,
    or the trt_profile_* options; None when some input's shape is only known at run time."""
    mins, opts, maxs = (options[f"trt_profile_{k}_shapes"] for k in ("min", "opt", "max"))
    profile: Profile = {}
    for name in request.inputs:
        if name in mins:
            profile[name] = (mins[name], opts[name], maxs[name])
            continue
        shape = request.value(name).shape
        if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
            return None
        profile[name] = (tuple(shape),) * 3
    return profile


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    trt, trt_logger, dev, settings = (ep.state[k] for k in ("trt", "logger", "dev", "settings"))
    dtypes = [request.value(n).dtype for n in request.outputs]
    if not request.fused and is_context_node(request.node, PROVIDER_NAME):
        return _imported_kernel(ep, request, dtypes)
    k = ep.state["groups"]
    ep.state["groups"] = k + 1
    label = f"TensorRT group {k} ({request.graph.path or 'main'})"
    model = request.to_model()
    if ep.options["trt_dump_subgraphs"]:
        folder = ep.options["trt_engine_cache_path"] or "."
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"TensorrtExecutionProvider_subgraph_{k}.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        logger.info("TensorRT: %s written to %s", label, path)
    kernel = EngineKernel(trt, trt_logger, dev, label, request.inputs, request.outputs, dtypes, model=model,
                          settings=settings, static_profile=static_profile(request, dict(ep.options)))

    def export_context() -> EpContextBlob:
        if kernel.static_bytes is None:
            raise Fail(f"{label} builds one engine per input shape (no optimization profile): give "
                       "trt_profile_min/opt/max_shapes to export one engine")
        return EpContextBlob(kernel.static_bytes, sdk_version=settings.tensorrt_version,
                             hardware_architecture=f"sm_{settings.compute_capability}")

    precision = "fp16" if settings.fp16 else "int8" if settings.int8 else "model types"
    return Kernel(run=kernel, note=f"TensorRT {settings.tensorrt_version} engine ({precision})",
                  export_context=export_context)


def _imported_kernel(ep: ProviderContext, request: KernelRequest, dtypes: list) -> Kernel:
    settings = ep.state["settings"]
    node = request.node

    def text(key: str) -> str:
        v = node.attr(key, "")
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

    label = f"EPContext partition {text('partition_name') or node.name!r}"
    version, arch = text("ep_sdk_version"), text("hardware_architecture")
    if version and version != settings.tensorrt_version:
        raise Fail(f"{label} holds an engine built by TensorRT {version}; this is {settings.tensorrt_version}: "
                   "compile the model again (ep.context_enable=1)")
    here = f"sm_{settings.compute_capability}"
    if arch and arch != here:
        raise Fail(f"{label} holds an engine built for {arch}; this GPU is {here}: compile the model again")
    kernel = EngineKernel(ep.state["trt"], ep.state["logger"], ep.state["dev"], label, request.inputs,
                          request.outputs, dtypes, engine_bytes=read_context(request))
    return Kernel(run=kernel, note=f"TensorRT {settings.tensorrt_version}: engine from the EPContext node")
