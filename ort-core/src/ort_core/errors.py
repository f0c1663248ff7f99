"""Exceptions, named as onnxruntime names them, under one base class.

onnxruntime raises these from ``onnxruntime.capi.onnxruntime_pybind11_state``; code that catches
them by name keeps working here. Every message names the thing that is wrong.
"""

from __future__ import annotations


class OrtError(RuntimeError):
    """Base class of every error ort-core raises on purpose."""


class Fail(OrtError):
    """A generic failure, e.g. a kernel raised while running a node."""


class InvalidArgument(OrtError, ValueError):
    """A bad argument: unknown input name, wrong dtype or shape, unknown option key."""


class NoSuchFile(OrtError, FileNotFoundError):
    """A model path (or an external-data path) that does not exist."""


class NoModel(OrtError):
    """No model was given."""


class InvalidProtobuf(OrtError):
    """The bytes are not a valid ONNX ModelProto."""


class InvalidGraph(OrtError):
    """The model fails the ONNX checker or breaks a rule core relies on."""


class NotImplemented(OrtError):  # noqa: A001 - the name onnxruntime uses
    """No installed provider can run a node (op, domain or opset unsupported)."""


class EPFail(OrtError):
    """An execution provider failed: not usable here, bad claim, kernel creation failed."""


class RuntimeException(OrtError):
    """A failure while running the model that is not the caller's fault."""


class NoSuchProvider(InvalidArgument):
    """A provider name that no installed plugin offers."""


class ModelLoadCanceled(OrtError):
    """Session creation was canceled (``SessionOptions.set_load_cancellation_flag(True)``)."""


class EngineError(OrtError):
    """onnxruntime's ENGINE_ERROR status; ort-core raises none of its own (kept for handlers
    that catch it by name)."""


class ModelLoaded(OrtError):
    """onnxruntime's MODEL_LOADED status (a model loaded twice into one session); ort-core
    raises none (kept for handlers that catch it by name)."""


class NotFound(OrtError):
    """onnxruntime's NOT_FOUND status; ort-core raises none of its own (kept for handlers that
    catch it by name)."""


class ModelRequiresCompilation(OrtError):
    """onnxruntime's MODEL_REQUIRES_COMPILATION status (an EP-context model whose provider must
    compile it first); ort-core raises none of its own (kept for handlers that catch it by
    name)."""


class InvalidGraphFail(InvalidGraph, Fail):
    """A model onnxruntime refuses with its FAIL status where this runtime names it an invalid
    graph (a type clash between nodes, a standard opset newer than it knows, a graph output no
    node produces): caught as either class."""


class InvalidArgumentFail(InvalidArgument, Fail):
    """A run that failed on the data it was given (an index out of range), which onnxruntime's
    kernels answer with INVALID_ARGUMENT: caught as that class or as ``Fail``, as every other
    kernel failure is."""
