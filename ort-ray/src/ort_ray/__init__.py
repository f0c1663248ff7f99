"""Batch inference with ort-core on Ray Data."""

from .predictor import GPU_PROVIDERS, OrtPredictor, assigned_device_id, predictor_resources, read_model
from .version import __version__

__all__ = ["GPU_PROVIDERS", "OrtPredictor", "__version__", "assigned_device_id", "predictor_resources", "read_model"]
