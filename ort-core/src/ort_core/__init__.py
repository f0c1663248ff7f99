"""ort-core: an ONNX inference runtime whose execution providers are installable plugins.

The names follow onnxruntime's Python API on purpose::

    import ort_core as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    outputs = sess.run(None, {"x": x})
    print(sess.get_placement())
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from .binding import IOBinding
from .devices import PROVIDER_PACKAGES, OrtDeviceMemoryType, OrtEpDevice, OrtHardwareDevice, OrtHardwareDeviceType
from .errors import (
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    NoModel,
    NoSuchFile,
    NoSuchProvider,
    NotImplemented,
    OrtError,
    RuntimeException,
)
from .hookspecs import ENTRY_POINT_GROUP, hookimpl
from .memory import HostAllocator, OrtValue
from .plugins import PluginFailure, plugin_failures, register, registry, unregister
from .seed import set_seed
from .types import (
    HOST_MEMORY,
    Allocator,
    AllocatorStats,
    Capability,
    Claim,
    DataTransfer,
    EpContextBlob,
    EpDevice,
    EpDevices,
    FusedOp,
    Kernel,
    KernelRequest,
    MemoryInfo,
    OptionSpec,
    ProviderContext,
    ProviderSpec,
    SubgraphRunner,
)
from .version import CONTRACT_VERSION, __version__

# The names below live in modules that import onnx and onnx-ir (and, through onnx-ir, sympy):
# about 1 s together, which `import ort_core` must not pay (onnxruntime imports in 0.03 s).
# They are imported at their first use (PEP 562), which is when a session is made.
_LAZY = {
    "GraphView": "graph.view", "NodeView": "graph.view", "ValueView": "graph.view",
    "CORE_DOMAIN": "optimizer.fusion",
    "CopyPlacement": "partition", "NodePlacement": "partition", "Placement": "partition",
    "ExecutionMode": "session", "GraphOptimizationLevel": "session", "InferenceSession": "session",
    "ModelMetadata": "session", "NodeArg": "session", "RunOptions": "session",
    "SessionOptions": "session",
    "ModelCompiler": "epcontext", "OrtCompileApiFlags": "epcontext",
    "OrtExecutionProviderDevicePolicy": "policy",
}

if TYPE_CHECKING:
    from .epcontext import ModelCompiler, OrtCompileApiFlags
    from .graph.view import GraphView, NodeView, ValueView
    from .optimizer.fusion import CORE_DOMAIN
    from .partition import CopyPlacement, NodePlacement, Placement
    from .policy import OrtExecutionProviderDevicePolicy
    from .session import (
        ExecutionMode,
        GraphOptimizationLevel,
        InferenceSession,
        ModelMetadata,
        NodeArg,
        RunOptions,
        SessionOptions,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # a submodule not imported yet (``ort_core.optimizer.FUSED_OPS``), as a package attribute
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
        raise AttributeError(f"module 'ort_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

# The providers of this project's family; get_all_providers() lists them and any other
# provider installed here, as onnxruntime lists every provider its build knows.
KNOWN_PROVIDERS = tuple(PROVIDER_PACKAGES)


def get_available_providers() -> list[str]:
    """Installed providers that can run on this machine, CPU provider last."""
    return registry().available()


def get_all_providers() -> list[str]:
    """Every provider name known: this project's family plus any other installed one."""
    names = list(KNOWN_PROVIDERS)
    names[-1:-1] = [n for n in registry().providers() if n not in KNOWN_PROVIDERS]
    return names


def get_ep_devices() -> list[OrtEpDevice]:
    """Every device of every installed provider that can run here, in onnxruntime's shape
    (``OrtEpDevice``; its ``ep_device`` is the provider's ``EpDevice``)."""
    from .devices import ep_devices

    return ep_devices()


def get_version_string() -> str:
    return __version__


def get_build_info() -> str:
    """What this ort-core is and what it runs with (onnxruntime's ``get_build_info``): the
    package and contract versions and each installed provider's package and version."""
    import platform

    import numpy
    import onnx

    reg = registry()
    providers = ", ".join(f"{name} {p.spec.version} ({p.package or 'in-process'})" for name, p in reg.providers().items())
    return (f"ort-core {__version__}, provider contract {CONTRACT_VERSION}, Python {platform.python_version()}, "
            f"onnx {onnx.__version__}, numpy {numpy.__version__}; providers: {providers or '(none)'}")


def get_device() -> str:
    """'CPU', or the device type of the first available non-CPU provider."""
    for d in get_ep_devices():
        if d.device_type != "CPU":
            return d.device_type
    return "CPU"


def set_default_logger_severity(severity: int) -> None:
    """0 verbose, 1 info, 2 warning, 3 error, 4 fatal (onnxruntime's levels)."""
    levels = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR, 4: logging.CRITICAL}
    logging.getLogger("ort_core").setLevel(levels.get(int(severity), logging.WARNING))


__all__ = [
    "CONTRACT_VERSION", "CORE_DOMAIN", "ENTRY_POINT_GROUP", "HOST_MEMORY", "KNOWN_PROVIDERS", "Allocator",
    "AllocatorStats", "Capability", "Claim", "CopyPlacement", "DataTransfer", "EPFail",
    "EpContextBlob", "EpDevice", "EpDevices", "ExecutionMode", "Fail", "FusedOp", "GraphOptimizationLevel", "GraphView",
    "HostAllocator", "IOBinding", "InferenceSession", "InvalidArgument", "InvalidGraph", "InvalidProtobuf",
    "Kernel", "KernelRequest", "MemoryInfo", "ModelCompiler", "ModelMetadata", "NoModel", "NoSuchFile",
    "NoSuchProvider", "NodeArg", "NodePlacement", "NodeView", "NotImplemented", "OptionSpec",
    "OrtCompileApiFlags", "OrtDeviceMemoryType", "OrtEpDevice", "OrtError", "OrtExecutionProviderDevicePolicy",
    "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtValue", "Placement", "PluginFailure", "ProviderContext", "ProviderSpec",
    "RunOptions", "RuntimeException", "SessionOptions", "SubgraphRunner", "ValueView",
    "__version__", "get_all_providers", "get_available_providers", "get_device",
    "get_build_info", "get_ep_devices", "get_version_string", "hookimpl", "plugin_failures", "register",
    "registry", "set_default_logger_severity", "set_seed", "unregister",
]
