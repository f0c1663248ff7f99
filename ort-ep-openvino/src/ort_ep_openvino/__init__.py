"""OpenVINO execution provider for ort-core: claimed subgraphs become OpenVINO compiled models."""

from .version import __version__

PROVIDER_NAME = "OpenVINOExecutionProvider"

__all__ = ["PROVIDER_NAME", "__version__"]
