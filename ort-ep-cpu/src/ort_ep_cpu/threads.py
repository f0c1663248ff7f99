"""``intra_op_num_threads`` for the CPU provider: the size of the BLAS thread pools.

numpy's (and scipy's) BLAS libraries keep one thread pool per process, not per session, so
the setting is applied when a session starts and undone when it ends (threadpoolctl finds the
libraries and sets their thread counts through their own C calls). With several live sessions
that ask for different counts, the most recently created one's count holds. 0 (the default)
leaves the libraries at their own default (one thread per core).

Parallel mode. Where numba is installed with a threading layer whose workers spin between
parallel regions (omp or tbb; ``_jit.parallel``), a session with more than one thread runs
its work in parallel through numba's pool instead: the compiled loops split by channel or
range, the float32 GEMMs split by column blocks, each a single-threaded CBLAS call, and
OpenBLAS itself is set to one thread. Two pools would fight: OpenBLAS's workers spin for a
while after each GEMM and hold the cores the other pool's threads need (a GEMM followed by a
parallel loop: 8.0 ms that way, 1.3 ms with one pool). The switch happens at the first piece
of work big enough to split (``PARALLEL_MIN_WORK``), which also starts numba's pool (about a
second, once per process).
"""

from __future__ import annotations

import os
import threading
from typing import Any

_lock = threading.Lock()
_controllers: list[Any] | None = None
#: intra-op threads of the most recently started session (its count, or one per core for 0)
_session_threads = 1
#: whether the BLAS libraries were set to one thread for the parallel mode (per session start)
_blas_single = False

#: work (multiply-adds of a GEMM, values of a loop) below which splitting does not pay: an
#: omp parallel region costs about 2 us to start here, plus each thread's cache warm-up
PARALLEL_MIN_WORK = 1 << 16


def _blas(refresh: bool = False) -> list[Any]:
    """threadpoolctl's controllers of the loaded BLAS libraries; ``refresh`` looks again (a
    library loaded since, e.g. scipy's own OpenBLAS, is then found; 0.4 ms)."""
    global _controllers
    if _controllers is None or refresh:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # optional at run time: without it the setting is not applied
            _controllers = []
        else:
            _controllers = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    return _controllers


def limit(threads: int) -> list[tuple[Any, int]]:
    """Set every BLAS library to ``threads`` threads (0: leave them); return what to restore."""
    global _session_threads, _blas_single
    previous = []
    with _lock:
        _session_threads = threads if threads > 0 else (os.cpu_count() or 1)
        _blas_single = False
        for lib in _blas(refresh=True):
            previous.append((lib, lib.get_num_threads()))
            if threads > 0:
                lib.set_num_threads(threads)
    return previous


def parallel_active() -> bool:
    """Whether the session asked for more than one thread (the parallel mode may apply)."""
    return _session_threads > 1


def parallel_parts(work: int) -> int:
    """How many pieces to split ``work`` into (see "Parallel mode" above): the session's thread
    count where the parallel mode is on and the work is big enough, else 1."""
    global _blas_single
    threads = _session_threads
    if threads <= 1 or work < PARALLEL_MIN_WORK:
        return 1
    from .kernels import _jit

    if _jit.parallel() is None:
        return 1
    if not _blas_single:
        with _lock:
            if not _blas_single:
                for lib in _blas():
                    lib.set_num_threads(1)
                _blas_single = True
    return threads


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
        for c in _blas()
    ]
