"""Core ML execution provider for ort-core: claimed subgraphs become Core ML ML Programs."""

from .version import __version__

PROVIDER_NAME = "CoreMLExecutionProvider"

__all__ = ["PROVIDER_NAME", "__version__"]
