"""CPU execution provider for ort-core: numpy kernels, the reference provider and final fallback."""

from .version import __version__

PROVIDER_NAME = "CPUExecutionProvider"

__all__ = ["PROVIDER_NAME", "__version__"]
