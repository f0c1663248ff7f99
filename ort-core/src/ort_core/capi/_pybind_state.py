"""onnxruntime's ``onnxruntime.capi._pybind_state``, the module its own Python code (and code
built on it) imports the C extension's names from: the same names as
``ort_core.capi.onnxruntime_pybind11_state``."""

from .onnxruntime_pybind11_state import *  # noqa: F403
from .onnxruntime_pybind11_state import __all__  # noqa: F401
