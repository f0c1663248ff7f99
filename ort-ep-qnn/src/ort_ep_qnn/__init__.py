"""QNN execution provider for ort-core: claimed subgraphs become QNN graphs on the HTP backend."""

from .version import __version__

PROVIDER_NAME = "QNNExecutionProvider"

__all__ = ["PROVIDER_NAME", "__version__"]
