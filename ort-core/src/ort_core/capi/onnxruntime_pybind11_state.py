"""The exception classes onnxruntime's ``onnxruntime.capi.onnxruntime_pybind11_state`` defines,
as ort-core raises them (``ort_core.errors``: one base class, ``OrtError``)."""

from ..errors import (
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
)

__all__ = ["EPFail", "Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "ModelLoadCanceled", "NoModel",
           "NoSuchFile", "NotImplemented", "RuntimeException"]
