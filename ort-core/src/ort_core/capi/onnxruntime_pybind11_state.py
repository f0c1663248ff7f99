"""The names of onnxruntime's ``onnxruntime.capi.onnxruntime_pybind11_state`` (its C extension
module), as ort-core defines them: the exception classes (``ort_core.errors``: one base class,
``OrtError``), and the classes, enums and functions code imports from there instead of from
``onnxruntime`` (``OrtValue``, ``SessionOptions``, ``get_available_providers``, ...)."""

from .. import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    ModelMetadata,
    NodeArg,
    OrtDevice,
    OrtMemoryInfo,
    OrtMemType,
    OrtSparseFormat,
    OrtValue,
    OrtValueVector,
    RunOptions,
    SessionOptions,
    SparseTensor,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    set_default_logger_severity,
)
from ..errors import (
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
)

__all__ = [
    "EPFail", "EngineError", "ExecutionMode", "ExecutionOrder", "Fail", "GraphOptimizationLevel", "InferenceSession",
    "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "ModelLoadCanceled", "ModelLoaded", "ModelMetadata",
    "NoModel", "NoSuchFile", "NodeArg", "NotImplemented", "OrtDevice", "OrtMemType", "OrtMemoryInfo",
    "OrtSparseFormat", "OrtValue", "OrtValueVector", "RunOptions", "RuntimeException", "SessionOptions",
    "SparseTensor", "get_all_providers", "get_available_providers", "get_build_info", "get_device",
    "set_default_logger_severity",
]
