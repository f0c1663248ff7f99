"""The lazy import of TensorRT, and what its version means for precision.

Importing the provider never imports ``tensorrt``: when it is missing (or its ``libnvinfer`` is),
discovery says why and what to install. TensorRT 11 removed the FP16/INT8/BF16 builder flags
(networks are strongly typed: precision comes from the model's own types and Q/DQ nodes);
TensorRT 10 still has them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

INSTALL_HINT = ("install TensorRT for your CUDA version: 'pip install tensorrt-cu12' (or tensorrt-cu13) "
                "from NVIDIA's package index, as NVIDIA's TensorRT installation guide describes; the PyPI "
                "wheels 'ort-ep-tensorrt[cu12]' bring the Python bindings only")


@lru_cache(maxsize=1)
def _import() -> tuple[Any, str | None]:
    try:
        import tensorrt
    except Exception as exc:  # ImportError, or OSError from a missing libnvinfer
        return None, f"TensorRT cannot be imported ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
    return tensorrt, None


def load() -> Any:
    trt, reason = _import()
    if trt is None:
        raise ImportError(reason)
    return trt


def unavailable_reason() -> str | None:
    return _import()[1]


def major_version(trt: Any) -> int:
    return int(str(trt.__version__).split(".")[0])


def has_precision_flags(trt: Any) -> bool:
    """TensorRT 10 has BuilderFlag.FP16/INT8; TensorRT 11 networks are strongly typed."""
    return major_version(trt) < 11 and hasattr(trt.BuilderFlag, "FP16")
