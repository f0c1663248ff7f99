"""NumExprExecutionProvider: elementwise chains fused into numexpr expressions (an example)."""

from .version import __version__

PROVIDER_NAME = "NumExprExecutionProvider"

__all__ = ["PROVIDER_NAME", "__version__"]
