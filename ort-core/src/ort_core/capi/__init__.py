"""onnxruntime's ``capi`` module paths, for code moving from onnxruntime that imports its
exception classes from there (``from onnxruntime.capi.onnxruntime_pybind11_state import
InvalidArgument``): ``ort_core.capi.onnxruntime_pybind11_state`` (and ``_pybind_state``) hold
the same names."""
