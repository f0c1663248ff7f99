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
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .binding import IOBinding
from .devices import (
    ONNXRUNTIME_PROVIDERS,
    PROVIDER_PACKAGES,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
    OrtEpDevice,
    OrtHardwareDevice,
    OrtHardwareDeviceType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    OrtSyncStream,
    create_and_register_allocator,
    create_and_register_allocator_v2,
)
from .errors import (
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    NoModel,
    NoSuchFile,
    NoSuchProvider,
    NotImplemented,
    OrtError,
    RuntimeException,
)
from .errors import NotImplemented as OrtNotImplemented
from .hookspecs import ENTRY_POINT_GROUP, hookimpl
from .memory import HostAllocator, OrtSparseFormat, OrtValue, OrtValueVector, SparseTensor
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
    "ExecutionMode": "session", "ExecutionOrder": "session", "GraphOptimizationLevel": "session", "InferenceSession": "session",
    "ModelMetadata": "session", "NodeArg": "session", "RunOptions": "session",
    "SessionOptions": "session",
    "ModelCompiler": "epcontext", "OrtCompileApiFlags": "epcontext",
    "OrtExecutionProviderDevicePolicy": "policy",
    "OrtEpAssignedNode": "assignment", "OrtEpAssignedSubgraph": "assignment",
    "OrtEpContextDataBuffer": "epcontext", "OrtEpContextData": "epcontext", "OrtExternalInitializerInfo": "epcontext",
    "AdapterFormat": "lora", "LoraAdapter": "lora",
}

if TYPE_CHECKING:
    from .assignment import OrtEpAssignedNode, OrtEpAssignedSubgraph
    from .epcontext import (
        ModelCompiler,
        OrtCompileApiFlags,
        OrtEpContextData,
        OrtEpContextDataBuffer,
        OrtExternalInitializerInfo,
    )
    from .graph.view import GraphView, NodeView, ValueView
    from .lora import AdapterFormat, LoraAdapter
    from .optimizer.fusion import CORE_DOMAIN
    from .partition import CopyPlacement, NodePlacement, Placement
    from .policy import OrtExecutionProviderDevicePolicy
    from .session import (
        ExecutionMode,
        ExecutionOrder,
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
    # (``capi``, onnxruntime's module paths, is imported at its first use, as the names above)
    return sorted(set(globals()) | set(_LAZY) | {"capi"})

# The providers of this project's family; get_all_providers() lists them and any other
# provider installed here, as onnxruntime lists every provider its build knows.
KNOWN_PROVIDERS = tuple(PROVIDER_PACKAGES)


def get_available_providers() -> list[str]:
    """Installed providers that can run on this machine, CPU provider last."""
    return registry().available()


def get_all_providers() -> list[str]:
    """Every provider name known: onnxruntime's (this project's family among them), then any
    other installed one, the CPU provider last."""
    names = list(dict.fromkeys([*ONNXRUNTIME_PROVIDERS, *KNOWN_PROVIDERS]))
    names.remove("CPUExecutionProvider")
    names += [n for n in registry().providers() if n not in names and n != "CPUExecutionProvider"]
    return [*names, "CPUExecutionProvider"]


def get_ep_devices() -> list[OrtEpDevice]:
    """Every device of every installed provider that can run here, in onnxruntime's shape
    (``OrtEpDevice``; its ``ep_device`` is the provider's ``EpDevice``)."""
    from .devices import ep_devices

    return ep_devices()


def get_version_string() -> str:
    """ort-core's version."""
    return __version__


#: the package onnxruntime names itself by (``onnxruntime.package_name``)
package_name = "ort-core"
#: no CUDA is built into core (a CUDA provider brings its own); onnxruntime's CPU build gives ""
cuda_version = ""

# set_global_thread_pool_sizes: the thread counts of sessions with use_per_session_threads=False
_GLOBAL_THREAD_POOL = {"intra_op_num_threads": 0, "inter_op_num_threads": 0}
_VERBOSITY = {"level": 0}
_EP_LIBRARIES: dict[str, Any] = {}  # register_execution_provider_library: name -> plugin


def set_global_thread_pool_sizes(intra_op_num_threads: int = 0, inter_op_num_threads: int = 0) -> None:
    """Thread counts for sessions whose options set ``use_per_session_threads = False`` (and no
    ``intra_op_num_threads``); providers get them as ``ProviderContext.intra_op_num_threads``."""
    if int(intra_op_num_threads) < 0 or int(inter_op_num_threads) < 0:
        raise InvalidArgument("set_global_thread_pool_sizes: thread counts must be >= 0")
    _GLOBAL_THREAD_POOL.update(intra_op_num_threads=int(intra_op_num_threads),
                               inter_op_num_threads=int(inter_op_num_threads))


def set_default_logger_verbosity(verbosity: int) -> None:
    """The verbosity of verbose (severity 0) log lines; kept, ort-core's logger has one level."""
    _VERBOSITY["level"] = int(verbosity)


class _CallbackHandler(logging.Handler):
    """Hands the "ort_core" logger's records to a ``set_default_logger_callback`` callable."""

    _SEVERITY = {logging.DEBUG: 0, logging.INFO: 1, logging.WARNING: 2, logging.ERROR: 3, logging.CRITICAL: 4}

    def __init__(self, callback: Any):
        super().__init__()
        self.callback = callback
        self._inside = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._inside, "active", False):  # a message logged by the callback itself
            return
        self._inside.active = True
        try:
            self.callback(self._SEVERITY.get(record.levelno, 2), record.name, "",
                          f"{record.pathname}:{record.lineno}", record.getMessage())
        except Exception:
            self.handleError(record)
        finally:
            self._inside.active = False


def set_default_logger_callback(callback: Any, severity: int = 2) -> None:
    """Send ort-core's log messages to ``callback(severity, category, logid, code_location,
    message)`` and set the logger's severity; ``None`` restores the default (the severity stays)."""
    if not 0 <= int(severity) <= 4:
        raise InvalidArgument(f"set_default_logger_callback: severity {severity} is not 0-4")
    log = logging.getLogger("ort_core")
    for h in [h for h in log.handlers if isinstance(h, _CallbackHandler)]:
        log.removeHandler(h)
    if callback is None:
        log.propagate = True
        return
    if not callable(callback):
        raise InvalidArgument(f"set_default_logger_callback needs a callable or None, got {type(callback).__name__}")
    log.addHandler(_CallbackHandler(callback))
    log.propagate = False  # the callback replaces the default sink, as in onnxruntime
    set_default_logger_severity(severity)


def register_execution_provider_library(registration_name: str, path_to_ep_library: str) -> None:
    """Load a provider plugin from ``path_to_ep_library`` and register it as
    ``registration_name``: a ``.py`` file, or a module (``pkg.module`` or ``pkg.module:attr``,
    as an ``ort_core.providers`` entry point names it). Native libraries (.so/.dll) are refused:
    ort-core's providers are Python plugins (``hookspecs``)."""
    import importlib.util
    import os

    name, path = str(registration_name), os.fspath(path_to_ep_library)
    if name in _EP_LIBRARIES:
        raise InvalidArgument(f"register_execution_provider_library: {name!r} is already registered")
    if path.endswith((".so", ".dll", ".dylib")):
        raise OrtNotImplemented(f"register_execution_provider_library({name!r}, {path!r}): ort-core loads provider "
                             "plugins written in Python (a .py file or a module), not onnxruntime's native EP libraries")
    try:
        if path.endswith(".py"):
            if not os.path.isfile(path):
                raise NoSuchFile(f"register_execution_provider_library: {path!r} not found")
            spec = importlib.util.spec_from_file_location(f"ort_core_ep_{name}", path)
            plugin: Any = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(plugin)
        else:
            module, _, attr = path.partition(":")
            plugin = importlib.import_module(module)
            for part in filter(None, attr.split(".")):
                plugin = getattr(plugin, part)
    except OrtError:
        raise
    except Exception as exc:
        raise Fail(f"register_execution_provider_library({name!r}): cannot load {path!r}: "
                   f"{type(exc).__name__}: {exc}") from exc
    if not registry().register(plugin, name):
        failure = next((f.error for f in reversed(registry().failures) if f.plugin == name), "unknown reason")
        raise Fail(f"register_execution_provider_library({name!r}): {path!r} is not a usable provider plugin: {failure}")
    _EP_LIBRARIES[name] = plugin


def unregister_execution_provider_library(registration_name: str) -> None:
    """Remove a plugin registered with ``register_execution_provider_library``."""
    plugin = _EP_LIBRARIES.pop(str(registration_name), None)
    if plugin is None:
        raise Fail(f"Execution provider library: {registration_name} was not registered.")
    registry().unregister(plugin)


def preload_dlls(cuda: bool = True, cudnn: bool = True, msvc: bool = True, directory: str | None = None) -> None:
    """Nothing to preload: each provider plugin loads its own native libraries when it starts."""


def print_debug_info() -> None:
    """Print ort-core's version, providers, devices and plugins that failed to load."""
    print(f"ort-core {__version__} (provider contract {CONTRACT_VERSION})")
    print("available providers:", ", ".join(get_available_providers()) or "(none)")
    for d in get_ep_devices():
        print(" ", d)
    for f in plugin_failures():
        print(f"  plugin {f.plugin!r} ({f.package or 'in-process'}) failed: {f.error}")


def copy_tensors(src: Sequence[OrtValue], dst: Sequence[OrtValue], stream: OrtSyncStream | None = None) -> None:
    """Copy each ``src[k]`` into ``dst[k]`` (same dtype and shape) on whatever devices they are,
    through the providers' data transfers; host to host too. ``stream``: a device's
    ``OrtSyncStream`` (the copies are done when this returns, whatever the stream)."""
    if stream is not None and not isinstance(stream, OrtSyncStream):
        raise InvalidArgument(f"copy_tensors: stream must be an OrtSyncStream or None, got {type(stream).__name__}")
    if len(src) != len(dst):
        raise InvalidArgument(f"copy_tensors: {len(src)} sources but {len(dst)} destinations")
    for k, (s, d) in enumerate(zip(src, dst)):
        if not isinstance(s, OrtValue) or not isinstance(d, OrtValue):
            raise InvalidArgument(f"copy_tensors[{k}]: expected OrtValues")
        if s.shape() != d.shape() or s.element_type() != d.element_type():
            raise InvalidArgument(f"copy_tensors[{k}]: source {s.data_type()} {s.shape()} and destination "
                                  f"{d.data_type()} {d.shape()} differ")
        d.update_inplace(s.numpy())


def enable_telemetry_events() -> None:
    """Nothing to enable: ort-core sends no telemetry."""


def disable_telemetry_events() -> None:
    """Nothing to disable: ort-core sends no telemetry."""


def has_collective_ops() -> bool:
    """False: no collective (multi-device communication) ops are built in."""
    return False


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


#: onnxruntime's severities (0 verbose .. 4 fatal) as logging levels; here, not in session.py,
#: so that setting the severity right after ``import ort_core`` loads no onnx (session.py reads it)
_SEVERITY_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR, 4: logging.CRITICAL}


def set_default_logger_severity(severity: int) -> None:
    """0 verbose, 1 info, 2 warning, 3 error, 4 fatal (onnxruntime's levels; another is an
    error, as there)."""
    if int(severity) not in _SEVERITY_LEVELS:
        raise InvalidArgument(f"set_default_logger_severity: {severity} is not a severity: 0 (verbose) to 4 (fatal)")
    logging.getLogger("ort_core").setLevel(_SEVERITY_LEVELS[int(severity)])


__all__ = [
    "CONTRACT_VERSION", "CORE_DOMAIN", "ENTRY_POINT_GROUP", "HOST_MEMORY", "KNOWN_PROVIDERS", "Allocator",
    "AdapterFormat", "AllocatorStats", "Capability", "Claim", "CopyPlacement", "DataTransfer", "EPFail",
    "EpContextBlob", "EpDevice", "EpDevices", "ExecutionMode", "ExecutionOrder", "Fail", "FusedOp", "GraphOptimizationLevel", "GraphView",
    "HostAllocator", "IOBinding", "InferenceSession", "InvalidArgument", "InvalidGraph", "InvalidProtobuf",
    "Kernel", "KernelRequest", "LoraAdapter", "MemoryInfo", "ModelCompiler", "ModelLoadCanceled", "ModelMetadata", "NoModel", "NoSuchFile",
    "NoSuchProvider", "NodeArg", "NodePlacement", "NodeView", "NotImplemented", "OptionSpec",
    "OrtAllocatorType", "OrtArenaCfg", "OrtCompileApiFlags", "OrtDevice", "OrtDeviceMemoryType", "OrtDeviceVendorId",
    "OrtEpAssignedNode", "OrtEpAssignedSubgraph", "OrtEpContextData", "OrtEpContextDataBuffer", "OrtExternalInitializerInfo", "OrtMemType", "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType", "OrtSparseFormat", "OrtValueVector", "SparseTensor", "OrtEpDevice", "OrtError", "OrtExecutionProviderDevicePolicy",
    "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtSyncStream", "OrtValue", "Placement", "PluginFailure", "ProviderContext", "ProviderSpec",
    "RunOptions", "RuntimeException", "SessionOptions", "SubgraphRunner", "ValueView",
    "__version__", "get_all_providers", "get_available_providers", "get_device",
    "get_build_info", "get_ep_devices", "get_version_string", "hookimpl", "plugin_failures", "register",
    "registry", "set_default_logger_severity", "set_seed", "unregister",
    "copy_tensors", "create_and_register_allocator", "create_and_register_allocator_v2", "cuda_version", "disable_telemetry_events", "enable_telemetry_events", "has_collective_ops",
    "package_name", "preload_dlls", "print_debug_info", "register_execution_provider_library",
    "set_default_logger_callback", "set_default_logger_verbosity", "set_global_thread_pool_sizes", "unregister_execution_provider_library",
]
