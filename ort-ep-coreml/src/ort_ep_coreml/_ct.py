"""The ``coremltools`` module, imported lazily.

The plugin module must import without coremltools (core then lists the provider as not usable,
with the reason), so nothing imports it at module level. coremltools logs one warning per
missing native proxy when imported on Linux (``libcoremlpython`` is built for macOS only);
those are expected here and silenced.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

_lock = threading.Lock()
_module: Any = None
_error: str | None = None

MIN_VERSION = (8, 0)
INSTALL = "pip install 'coremltools>=8.0'"


def load() -> Any:
    """The coremltools module; raises ImportError with an actionable message when unusable."""
    global _module, _error
    if _module is not None:
        return _module
    with _lock:
        if _module is None and _error is None:
            logger = logging.getLogger("coremltools")
            level = logger.level
            logger.setLevel(logging.ERROR)
            try:
                import coremltools
            except Exception as exc:  # ImportError, or a broken native library (OSError)
                _error = f"coremltools is not installed or failed to import ({type(exc).__name__}: {exc}); {INSTALL}"
            else:
                if _version_tuple(coremltools.__version__) < MIN_VERSION:
                    _error = f"coremltools {coremltools.__version__} is too old; ort-ep-coreml needs {INSTALL}"
                else:
                    _module = coremltools
            finally:
                logger.setLevel(level)
    if _module is None:
        raise ImportError(_error)
    return _module


def can_run() -> bool:
    """Core ML itself (compile, predict) exists on macOS only; coremltools builds anywhere."""
    return sys.platform == "darwin"


def reset() -> None:
    """Forget the import result (tests simulate a missing coremltools with it)."""
    global _module, _error
    with _lock:
        _module = _error = None


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("b")[0].split(".")[:2]:
        try:
            parts.append(int(piece))
        except ValueError:
            break
    return tuple(parts) or (0,)
