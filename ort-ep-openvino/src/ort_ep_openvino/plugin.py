"""The OpenVINO provider's hook implementations (entry point ``ort_core.plugins: openvino``).

Importing this module never imports openvino: when it is missing, ``ort_ep_devices`` answers
``EpDevices((), reason)`` and core lists the provider as not usable here.
"""

from __future__ import annotations

import logging
import os

from ort_core import (
    Capability,
    Claim,
    EpContextBlob,
    EpDevice,
    EpDevices,
    EPFail,
    Fail,
    GraphView,
    Kernel,
    KernelRequest,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)
from ort_core.devices import host_cpu
from ort_core.epcontext import is_context_node, read_context
from ort_core.grouping import fusable_groups

from . import PROVIDER_NAME, _ov
from .capability import decline_reasons, node_model, rule_reason, survey
from .kernel import GroupKernel, ImportedKernel
from .options import META, OPTIONS, CompileSettings, physical_devices, resolve
from .version import __version__

logger = logging.getLogger("ort_core.openvino")

SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="Intel",
    kind="compiling",
    options=OPTIONS,
    description="claimed subgraphs become OpenVINO compiled models (CPU, GPU, NPU, AUTO/HETERO/MULTI)",
    # none: OpenVINO fuses on its own, so core's optimizer hands it the graph unfused (as
    # onnxruntime does its compiling providers); the fused ops a model already holds are
    # OpenVINO's to take or decline (capability.divergence_reason)
    fused_ops=(),
)

_TYPES = {"CPU": "CPU", "GPU": "GPU", "NPU": "NPU"}


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    try:
        core = _ov.core()
        names = list(core.available_devices)
    except Exception as exc:  # missing or broken openvino: not usable, with the reason
        return EpDevices((), str(exc) if isinstance(exc, ImportError) else f"openvino failed: {type(exc).__name__}: {exc}")
    ov_version = _ov.load().__version__
    devices = []
    for k, name in enumerate(names):
        kind = _TYPES.get(name.split(".")[0])
        if kind is None:  # e.g. a plugin for hardware this contract has no type for
            continue
        try:
            full = str(core.get_property(name, "FULL_DEVICE_NAME"))
        except Exception:
            full = name
        # OpenVINO's CPU plugin runs on any x86 or ARM processor: the hardware is the host's
        vendor = host_cpu().vendor if kind == "CPU" else "Intel"
        devices.append(
            EpDevice(
                PROVIDER_NAME, "Intel", kind, full, device_id=k, vendor=vendor,
                metadata={"ov_device": name, "openvino_version": ov_version},
            )
        )
    if not devices:
        return EpDevices((), f"OpenVINO finds no CPU, GPU or NPU device here (available_devices: {names})")
    return EpDevices(tuple(devices))


@hookimpl
def ort_session_start(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME:
        return
    core = _ov.core()
    available = list(core.available_devices)
    device_type: str = ep.options["device_type"]
    for dev in physical_devices(device_type):
        if not _present(dev, available):
            raise EPFail(
                f"device_type {device_type!r}: OpenVINO device {dev} is not present here; "
                f"available devices: {', '.join(available) or '(none)'}"
            )
    for dev, props in ep.options["load_config"].items():
        if dev in META or not _present(dev, available):
            continue  # properties for a device this session does not compile for are ignored
        supported = dict(core.get_property(dev, "SUPPORTED_PROPERTIES"))
        writable = sorted(k for k, v in supported.items() if v == "RW")
        bad = [k for k in props if k not in writable]
        if bad:
            raise EPFail(
                f"load_config: {dev} has no writable property {', '.join(map(repr, bad))}; "
                f"valid: {', '.join(writable)}"
            )
    cache_dir = ep.options["cache_dir"]
    if cache_dir:
        try:
            os.makedirs(cache_dir, exist_ok=True)
        except OSError as exc:
            raise EPFail(f"cache_dir {cache_dir!r} cannot be created: {exc}") from None
    ep.state["settings"] = resolve(ep.options, ep.intra_op_num_threads)
    ep.state["kernels"] = []


def _present(dev: str, available: list[str]) -> bool:
    if dev in available:
        return True
    base, _, index = dev.partition(".")
    same = [a for a in available if a.split(".")[0] == base]
    if not same:
        return False
    return not index or (index == "0" and base in available)  # "GPU" alone is GPU.0


@hookimpl
def ort_session_end(ep: ProviderContext) -> None:
    if ep.name == PROVIDER_NAME:
        ep.state.clear()  # drops compiled models and infer requests


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    settings: CompileSettings = ep.state["settings"]
    capability = Capability()
    # EPContext nodes (a model compiled earlier): ours are claimed one by one, others declined
    contexts = {i for i in candidates if is_context_node(graph.nodes[i])}
    for i in sorted(contexts):
        node = graph.nodes[i]
        if is_context_node(node, PROVIDER_NAME):
            capability.claims.append(Claim((i,)))
        else:
            capability.declined[i] = f"EPContext node compiled by {node.attr('source')!r}, not OpenVINO"
    candidates = frozenset(candidates - contexts)
    if not candidates:
        return capability
    supported: set[int] = set()
    found = survey(graph, candidates, settings.device_type)
    # kept for kernel creation, which reuses the shapes it found (and keeps the view alive)
    ep.state.setdefault("surveys", {})[id(graph)] = (graph, found)
    # OpenVINO is asked about the nodes left together (one device query), see decline_reasons
    asked = None if found.all_supported else decline_reasons(graph, candidates, settings.device_type, found.hints)
    for i in sorted(candidates):
        if asked is None:
            reason = rule_reason(graph, graph.nodes[i], settings.device_type)
        else:
            reason = asked[i]  # those checks first, then OpenVINO's answer
        if reason is None:
            supported.add(i)
        else:
            capability.declined[i] = reason
    least = settings.min_subgraph_size
    for group in fusable_groups(graph, supported):
        # a small fragment costs an OpenVINO call for little work; the whole model is no fragment
        whole = graph.outer is None and len(group) == len(graph.nodes)
        if len(group) < least and not whole:
            for i in group:
                capability.declined[i] = f"group too small: {len(group)} node(s) < min_subgraph_size {least}"
        else:
            capability.claims.append(Claim(group, fuse=True))
    return capability


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    settings: CompileSettings = ep.state["settings"]
    if len(request.nodes) == 1 and is_context_node(request.node, PROVIDER_NAME):
        return _imported_kernel(ep, request, settings)
    indices = [n.index for n in request.nodes]
    known = ep.state.get("surveys", {}).get(id(request.graph))
    hints = known[1].hints if known is not None and known[0] is request.graph else None
    model = node_model(request.graph, indices, hints)
    first = request.nodes[0]
    label = first.name if len(request.nodes) == 1 else f"{first.name} (+{len(request.nodes) - 1})"
    dtypes = [request.value(name).dtype for name in request.outputs]
    specs = []
    for name in request.inputs:
        value = request.value(name)
        shape = value.shape if value.shape is not None else (hints or {}).get(name, (0, None))[1]
        specs.append((name, value.dtype, None if shape is None else len(shape)))
    try:
        group = GroupKernel(model.SerializeToString(), settings, specs, request.outputs, dtypes, label)
    except Exception as exc:
        raise EPFail(f"OpenVINO cannot compile group {label} for {settings.device_type}: {exc}") from exc
    ep.state.setdefault("kernels", []).append(group)
    version = _ov.load().__version__

    def export_context() -> EpContextBlob:
        data = group.export()
        if data is None:
            raise EPFail(f"group {label} has one static model per input shape on {settings.device_type} "
                         "(disable_dynamic_shapes or NPU): no single compiled model to export")
        return EpContextBlob(data, sdk_version=version, hardware_architecture=settings.device_type,
                             notes=f"precision={settings.precision}")

    note = f"OpenVINO {settings.device_type} {settings.precision}"
    stated = {"FP32": "f32", "FP16": "f16"}.get(settings.precision)
    if stated and any(t != stated for t in group.precisions.values()):  # e.g. FP16 as bf16 on a CPU
        note += " (OpenVINO runs " + ", ".join(f"{d} in {t}" for d, t in sorted(group.precisions.items())) + ")"
    exportable = group._single is not None
    return Kernel(run=group, note=note, export_context=export_context if exportable else None)


def _imported_kernel(ep: ProviderContext, request: KernelRequest, settings: CompileSettings) -> Kernel:
    """The kernel of one of our EPContext nodes: the exported compiled model, imported."""
    node = request.node
    partition = node.attr("partition_name", node.name)
    partition = partition.decode() if isinstance(partition, bytes) else partition
    blob = read_context(request)

    def text(key: str) -> str:
        v = node.attr(key, "")
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

    version, device = text("ep_sdk_version"), text("hardware_architecture")
    here = _ov.load().__version__
    if version and version != here:
        raise Fail(f"EPContext partition {partition!r} was compiled by OpenVINO {version}; this is {here}: "
                   "compile the model again (ep.context_enable=1 or ModelCompiler)")
    if device and device != settings.device_type:
        raise Fail(f"EPContext partition {partition!r} was compiled for OpenVINO device {device}; this session's "
                   f"device_type is {settings.device_type}: set device_type={device} or compile again")
    dtypes = [request.value(name).dtype for name in request.outputs]
    specs = []
    for name in request.inputs:
        value = request.value(name)
        specs.append((name, value.dtype, None if value.shape is None else len(value.shape)))
    try:
        kernel = ImportedKernel(blob, settings, specs, request.outputs, dtypes, partition)
    except Exception as exc:
        raise Fail(f"OpenVINO cannot import EPContext partition {partition!r} ({len(blob)} bytes): "
                   f"{type(exc).__name__}: {exc}") from exc
    ep.state.setdefault("kernels", []).append(kernel)
    return Kernel(run=kernel, note=f"OpenVINO {settings.device_type}: imported compiled model")
