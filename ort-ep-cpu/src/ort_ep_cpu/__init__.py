"""CPU execution provider for ort-core: numpy kernels, the reference provider and final fallback."""

import warnings

from .version import __version__

# numpy's floating-point warnings from this provider's kernels (divide by zero in a Log of 0,
# invalid value in a Sqrt of -1, overflow in Exp): onnxruntime gives the IEEE results (-inf,
# NaN, inf) without a word, and so do they. Only warnings raised in this package's modules are
# filtered; the user's own numpy calls keep their settings.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"ort_ep_cpu(\.|$)")

PROVIDER_NAME = "CPUExecutionProvider"

__all__ = ["PROVIDER_NAME", "__version__"]
