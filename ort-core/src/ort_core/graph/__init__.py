"""Model loading and checking, and the read-only graph view providers see."""

from .load import load_model, load_proto
from .view import GraphView, NodeView, ValueView, numpy_dtype, onnx_type_string

__all__ = ["GraphView", "NodeView", "ValueView", "load_model", "load_proto", "numpy_dtype", "onnx_type_string"]
