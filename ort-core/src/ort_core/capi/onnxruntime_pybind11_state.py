"""The names of onnxruntime's ``onnxruntime.capi.onnxruntime_pybind11_state`` (its C extension
module), as ort-core defines them: the exception classes (``ort_core.errors``: one base class,
``OrtError``), and the classes, enums and functions code imports from there instead of from
``onnxruntime`` (``OrtValue``, ``SessionOptions``, ``get_available_providers``, ...). Those
come from the ``ort_core`` package at first use, so that naming an exception class here does
not import the session's modules (onnx, onnx-ir)."""

from __future__ import annotations

from typing import Any

from ..errors import (
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,
    RuntimeException,
)

#: names this module hands on from the ``ort_core`` package
_FROM_PACKAGE = (
    "ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "InferenceSession", "ModelMetadata", "NodeArg",
    "OrtAllocatorType", "OrtArenaCfg", "OrtCompileApiFlags", "OrtDevice", "OrtDeviceMemoryType", "OrtEpDevice",
    "OrtExecutionProviderDevicePolicy", "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType", "OrtMemType", "OrtSparseFormat", "OrtSyncStream", "OrtValue", "OrtValueVector",
    "RunOptions", "SessionOptions", "SparseTensor", "disable_telemetry_events", "enable_telemetry_events",
    "get_all_providers", "get_available_providers", "get_build_info", "get_device", "get_ep_devices",
    "get_version_string", "register_execution_provider_library", "set_default_logger_severity",
    "set_default_logger_verbosity", "set_seed", "unregister_execution_provider_library",
)

__all__ = [  # noqa: RUF022  (the exception classes, then what comes from the package)
    "EPFail", "EngineError", "Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "ModelLoadCanceled",
    "ModelLoaded", "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NotFound", "NotImplemented",
    "RuntimeException", *_FROM_PACKAGE,
]

def __getattr__(name: str) -> Any:
    if name in _FROM_PACKAGE:
        import ort_core

        value = getattr(ort_core, name)  # (the package's own lazy names resolve there)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ort_core.capi.onnxruntime_pybind11_state' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM_PACKAGE))
