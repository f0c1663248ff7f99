"""``intra_op_num_threads`` for the CPU provider: the size of the BLAS thread pools.

numpy's (and scipy's) BLAS libraries keep one thread pool per process, not per session, so
the setting is applied when a session starts and undone when it ends (threadpoolctl finds the
libraries and sets their thread counts through their own C calls). With several live sessions
that ask for different counts, the most recently created one's count holds. 0 (the default)
leaves the libraries at their own default (one thread per core).
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_controllers: list[Any] | None = None


def blas_libraries(refresh: bool = False) -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded in this process, found at the
    first call; ``refresh`` looks again (0.4 ms), for one loaded since (scipy's own OpenBLAS
    comes with scipy, which kernels import at their first use of it)."""
    global _controllers
    if _controllers is None or refresh:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # optional at run time: without it the setting is not applied
            _controllers = []
        else:
            _controllers = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    return _controllers


def limit(threads: int) -> list[tuple[Any, int]] | None:
    """Set every BLAS library to ``threads`` threads; return what to restore, or None."""
    if threads <= 0:
        return None
    previous = []
    with _lock:
        for lib in blas_libraries(refresh=True):
            previous.append((lib, lib.get_num_threads()))
            lib.set_num_threads(threads)
    return previous


def restore(previous: list[tuple[Any, int]] | None) -> None:
    if not previous:
        return
    with _lock:
        for lib, count in previous:
            lib.set_num_threads(count)


def info() -> list[dict[str, Any]]:
    """The BLAS libraries in use, with their kernel architecture and thread count."""
    return [
        {"library": c.internal_api, "version": c.version, "architecture": getattr(c, "architecture", None),
         "threads": c.get_num_threads(), "path": c.filepath}
        for c in blas_libraries()
    ]
