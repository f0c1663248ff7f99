"""The ``openvino`` module, imported lazily, and one process-wide ``openvino.Core``.

The plugin module must import without openvino (core then lists the provider as not usable
with the reason), so nothing imports openvino at module level. One Core is shared by every
session (sharing it loads each device plugin once per process); its model calls are made one at
a time (``CALL_LOCK``), inference is not.
Session-specific settings travel in the ``compile_model`` config, never as Core properties.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
#: held around the Core's model calls (``read_model``, ``query_model``, ``compile_model``): eight
#: sessions made at once from eight threads in a fresh process deadlocked inside openvino (every
#: thread idle in those three calls, the GIL's holder waiting on one of openvino's own locks),
#: once in three runs of the concurrency test; made one at a time they cannot
CALL_LOCK = threading.RLock()
_module: Any = None
_error: str | None = None
_core: Any = None

MIN_VERSION = (2024, 0)


def load() -> Any:
    """The openvino module; raises ImportError with an actionable message when unusable."""
    global _module, _error
    if _module is not None:
        return _module
    if _error is not None:
        raise ImportError(_error)
    with _lock:
        if _module is None and _error is None:
            try:
                import openvino
            except Exception as exc:  # ImportError, or a broken native library (OSError)
                _error = f"openvino is not installed or failed to import ({type(exc).__name__}: {exc}); pip install 'openvino>=2024.0'"
            else:
                version = _version_tuple(getattr(openvino, "__version__", "0"))
                if version < MIN_VERSION:
                    _error = f"openvino {openvino.__version__} is too old; ort-ep-openvino needs openvino>=2024.0"
                else:
                    _module = openvino
    if _module is None:
        raise ImportError(_error)
    return _module


def core() -> Any:
    """The process-wide ``openvino.Core``."""
    global _core
    if _core is None:
        ov = load()
        with _lock:
            if _core is None:
                _core = ov.Core()
    return _core


def reset() -> None:
    """Forget the import result and the Core (tests simulate a missing openvino with it)."""
    global _module, _error, _core
    with _lock:
        _module = _error = _core = None


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("-")[0].split(".")[:2]:
        try:
            parts.append(int(piece))
        except ValueError:
            break
    return tuple(parts) or (0,)
