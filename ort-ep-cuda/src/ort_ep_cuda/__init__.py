"""CUDA execution provider for ort-core: CuPy device arrays, cuBLAS and cuDNN kernels."""

from .version import __version__

PROVIDER_NAME = "CUDAExecutionProvider"
MEMORY_NAME = "Cuda"

__all__ = ["MEMORY_NAME", "PROVIDER_NAME", "__version__"]
