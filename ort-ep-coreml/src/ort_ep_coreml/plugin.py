"""The Core ML provider's hook implementations (entry point ``ort_core.plugins: coreml``).

Importing this module never imports coremltools. Core ML runs on macOS only: elsewhere
``ort_ep_devices`` answers no device, with the reason and where to read about building packages
here (``ort_ep_coreml.build``, ``ort-core coreml-build``), so sessions skip the provider.

EPContext: a group's kernel exports its package (zipped) through ``Kernel.export_context`` when
this ort-core has it, and a ``com.microsoft`` EPContext node whose ``source`` is this provider is
claimed alone and loaded from its blob (``ort_core.epcontext.read_context``) without building.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import tempfile
from pathlib import Path

from ort_core import (
    Capability,
    Claim,
    EpDevice,
    EpDevices,
    EPFail,
    GraphView,
    InvalidGraph,
    Kernel,
    KernelRequest,
    ProviderContext,
    ProviderSpec,
    hookimpl,
)

from . import PROVIDER_NAME, _ct
from .capability import claim_groups
from .kernel import NOT_MACOS, GroupKernel
from .options import OPTIONS, BuildSettings, resolve
from .package import from_blob, to_blob
from .version import __version__

logger = logging.getLogger("ort_core.coreml")

BUILD_HINT = ("packages can still be built: see ort-ep-coreml's README, 'Building on Linux' "
              "(ort-core coreml-build MODEL OUT_DIR, or ort_ep_coreml.build.build_model)")
EPCONTEXT = ("com.microsoft", "EPContext")

SPEC = ProviderSpec(
    name=PROVIDER_NAME,
    version=__version__,
    vendor="Apple",
    kind="compiling",
    options=OPTIONS,
    description="claimed subgraphs become Core ML ML Programs (CPU, GPU, Neural Engine on macOS); "
                "packages can be built on any OS",
)

_UNIT_DEVICES = (("CPU", "CPU"), ("GPU", "GPU"), ("NPU", "Apple Neural Engine"))


@hookimpl
def ort_register_providers() -> list[ProviderSpec]:
    return [SPEC]


@hookimpl
def ort_ep_devices(provider: str) -> EpDevices | None:
    if provider != PROVIDER_NAME:
        return None
    try:
        ct = _ct.load()
    except ImportError as exc:
        return EpDevices((), str(exc))
    if not _ct.can_run():
        return EpDevices((), f"{NOT_MACOS} (this is {platform.system()}); {BUILD_HINT}")
    meta = {"coremltools_version": ct.__version__, "macos_version": platform.mac_ver()[0],
            "machine": platform.machine(), "compute_units": "CPUOnly, CPUAndGPU, CPUAndNeuralEngine, ALL"}
    devices = [EpDevice(PROVIDER_NAME, "Apple", kind, f"Core ML {name}", device_id=k, vendor="Apple", metadata=meta)
               for k, (kind, name) in enumerate(_UNIT_DEVICES)]
    return EpDevices(tuple(devices))


@hookimpl
def ort_session_start(ep: ProviderContext) -> None:
    if ep.name != PROVIDER_NAME:
        return
    settings = resolve(ep.options)
    if settings.cache_dir:
        try:
            os.makedirs(settings.cache_dir, exist_ok=True)
        except OSError as exc:
            raise EPFail(f"ModelCacheDirectory {settings.cache_dir!r} cannot be created: {exc}") from None
    ep.state["settings"] = settings
    # packages of a session without a cache live as long as the session
    ep.state["work"] = tempfile.TemporaryDirectory(prefix="ort-coreml-")
    ep.state["kernels"] = []


@hookimpl
def ort_session_end(ep: ProviderContext) -> None:
    if ep.name == PROVIDER_NAME:
        work = ep.state.pop("work", None)
        ep.state.clear()
        if work is not None:
            work.cleanup()


def _is_own_context(node) -> bool:
    return (node.domain, node.op_type) == EPCONTEXT and node.attr("source") in (PROVIDER_NAME, b"CoreMLExecutionProvider")


@hookimpl
def ort_get_capability(ep: ProviderContext, graph: GraphView, candidates: frozenset[int]) -> Capability | None:
    if ep.name != PROVIDER_NAME:
        return None
    settings: BuildSettings = ep.state["settings"]
    capability = Capability()
    contexts = {i for i in candidates if _is_own_context(graph.nodes[i])}
    for i in sorted(contexts):
        capability.claims.append(Claim((i,), fuse=False))
    found, declined = claim_groups(graph, set(candidates) - contexts, settings)
    capability.declined.update(declined)
    for group in found:
        capability.claims.append(Claim(group, fuse=True))
    return capability


@hookimpl
def ort_create_kernel(ep: ProviderContext, request: KernelRequest) -> Kernel | None:
    if ep.name != PROVIDER_NAME:
        return None
    from .build import build_group

    settings: BuildSettings = ep.state["settings"]
    work = Path(ep.state["work"].name)
    first = request.nodes[0]
    if len(request.nodes) == 1 and _is_own_context(first):
        built = _load_context(request, work / f"context_{first.index}")
        label = f"EPContext {first.name}"
    else:
        label = first.name if len(request.nodes) == 1 else f"{first.name} (+{len(request.nodes) - 1})"
        try:
            built = build_group(request.graph, [n.index for n in request.nodes], settings, work)
        except Exception as exc:
            raise EPFail(f"Core ML cannot build group {label}: {exc}") from exc
    group = GroupKernel(built, request.inputs, settings, label)
    ep.state["kernels"].append(group)
    extra = {}
    if "export_context" in {f.name for f in dataclasses.fields(Kernel)}:
        sdk = f"coremltools {_ct.load().__version__}"

        def export_context():
            from ort_core.types import EpContextBlob

            return EpContextBlob(to_blob(built), sdk_version=sdk, notes=f"ort-ep-coreml {__version__}")

        extra["export_context"] = export_context
    return Kernel(run=group, note=f"Core ML {settings.compute_units}", **extra)


def _load_context(request: KernelRequest, directory: Path):
    """The built group of an EPContext node of ours (core's ``read_context`` resolves the blob)."""
    node = request.nodes[0]
    try:
        from ort_core.epcontext import read_context
    except ImportError:
        raise InvalidGraph(f"EPContext node {node.name!r}: this ort-core cannot read EPContext blobs "
                           "(it has no ort_core.epcontext); install an ort-core with EPContext support") from None
    data = read_context(request)
    try:
        return from_blob(data, directory, f"EPContext node {node.name!r} (partition {node.attr('partition_name')!r})")
    except ValueError as exc:
        raise InvalidGraph(str(exc)) from exc
