"""onnxruntime's ``onnxruntime.capi._pybind_state``, the module its own Python code (and code
built on it) imports the C extension's names from: the same names as
``ort_core.capi.onnxruntime_pybind11_state``, resolved there at first use."""

from __future__ import annotations

from typing import Any

from . import onnxruntime_pybind11_state as _state

__all__ = _state.__all__


def __getattr__(name: str) -> Any:
    return getattr(_state, name)


def __dir__() -> list[str]:
    return dir(_state)
