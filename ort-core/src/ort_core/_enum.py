"""The base class of the enums onnxruntime defines in its C extension (pybind11 enums)."""

from __future__ import annotations

import enum


class OrtEnum(enum.IntEnum):
    """An enum that prints as onnxruntime's (pybind11) enums do: ``GraphOptimizationLevel.ORT_ENABLE_ALL``
    (an IntEnum prints its number on Python 3.11+)."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class OrtFlags(enum.IntFlag):
    """``OrtEnum``'s printing for a flags enum (``OrtCompileApiFlags.NONE``)."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"
