"""WebGPU execution provider for ort-core: WGSL compute shaders on wgpu, tensors in GPU buffers."""

from .version import __version__

PROVIDER_NAME = "WebGpuExecutionProvider"
MEMORY_NAME = "WebGpu"

__all__ = ["MEMORY_NAME", "PROVIDER_NAME", "__version__"]
