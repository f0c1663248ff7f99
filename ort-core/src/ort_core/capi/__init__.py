"""onnxruntime's ``capi`` module paths, for code moving from onnxruntime that imports its
exception classes or classes from there (``from onnxruntime.capi.onnxruntime_pybind11_state
import InvalidArgument``, ``except ort.capi.onnxruntime_pybind11_state.Fail:``,
``from onnxruntime.capi.onnxruntime_inference_collection import OrtValue``): the same paths
under ``ort_core.capi`` hold the same names. The submodules are attributes of this package
without an import of their own, as onnxruntime's are after ``import onnxruntime``."""

from __future__ import annotations

import importlib
from types import ModuleType

_SUBMODULES = frozenset({
    "onnxruntime_pybind11_state", "_pybind_state", "onnxruntime_inference_collection", "build_and_package_info",
})


def __getattr__(name: str) -> ModuleType:
    # imported at first use (PEP 562): an ``except ort.capi.onnxruntime_pybind11_state.Fail``
    # clause evaluates this path while an error is in flight, and must not raise AttributeError
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ort_core.capi' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBMODULES)
