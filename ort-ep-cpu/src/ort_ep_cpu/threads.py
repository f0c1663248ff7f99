"""``intra_op_num_threads`` for the CPU provider: the size of the thread pools.

numpy's (and scipy's) BLAS libraries keep one thread pool per process, not per session, so
the setting is applied when a session starts and undone when it ends (threadpoolctl finds the
libraries and sets their thread counts through their own C calls). With several live sessions
that ask for different counts, the most recently created one's count holds, and the
libraries' own counts come back when the last session ends. 0 (the default) leaves the
libraries at their own default (one thread per core).

Where oneDNN is used (``kernels/_onednn.py``), it runs the convolutions and the products with
constant weights on ``intra_op_num_threads`` OpenMP threads, and the BLAS libraries get ONE
thread while a session lives: two pools that each keep their idle workers spinning (OpenBLAS
for up to 0.1 s after a call, OpenMP's for a while after each region) take the cores from each
other, and a pool whose workers sleep instead pays a wake-up per call. Measured on ocr-det at
two threads: 200-300 ms a run with both pools at two threads, 20 ms with OpenBLAS at one.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

# re-entrant: a session's end can run inside limit() or restore() on the same thread, when the
# allocation of another call there sets off the garbage collector and it finalises a dead
# session (InferenceSession's weakref.finalize); a plain Lock deadlocked the process there
_lock = threading.RLock()
_controllers: list[Any] | None = None
_modules_seen = -1  # len(sys.modules) when the controllers were last found
_count = 0  # the count the last limit() set, 0 once no session lives (libraries' default)
_live = 0  # sessions between limit() and restore()
_saved: dict[str, tuple[Any, int]] = {}  # library path -> (controller, its count before the first)
_cores = len(os.sched_getaffinity(0))  # the cores this process may run on (``usable``)


def count() -> int:
    """The thread count the live session asked for, or 0 for the libraries' default; kernels
    whose library sizes its parallel regions per calling thread (oneDNN's OpenMP) read it."""
    return _count


def usable() -> int:
    """The threads a kernel may run on: the live session's count, else one per usable core
    (counted at import and at each session's start, as onnxruntime sizes its pool when a
    session is made: asking the kernel at every oneDNN call was a tenth of a small one's cost)."""
    return _count or _cores


def blas_libraries(refresh: bool = False) -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded in this process, found at the
    first call; ``refresh`` looks again where a module was imported since the last look (a
    BLAS library arrives with the extension module that links it: scipy's own OpenBLAS comes
    with scipy, which kernels import at their first use of it). Looking costs 1.5-2 ms (every
    loaded library's file is examined): half the creation of a small model's session, when each
    session looked."""
    global _controllers, _modules_seen
    if _controllers is None or refresh and len(sys.modules) != _modules_seen:
        _modules_seen = len(sys.modules)
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # optional at run time: without it the setting is not applied
            _controllers = []
        else:
            _controllers = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    return _controllers


def limit(threads: int, blas: int | None = None) -> None:
    """A session starts: record ``threads`` as the count and set every BLAS library to ``blas``
    threads (default: ``threads``; 0 leaves them as they are). Each call is paired with one
    ``restore`` when that session ends."""
    global _count, _live, _cores
    blas = threads if blas is None else blas
    with _lock:
        _cores = len(os.sched_getaffinity(0))
        _live += 1
        _count = max(threads, 0)
        if blas > 0:
            for lib in blas_libraries(refresh=True):
                _saved.setdefault(lib.filepath, (lib, lib.get_num_threads()))
                lib.set_num_threads(blas)


def restore() -> None:
    """A session ends. The libraries get back the counts they had before the first live
    session only when the last one ends: one session's end must not undo the setting another
    still runs with (with oneDNN, that would put two spinning pools back on the cores)."""
    global _count, _live
    with _lock:
        _live -= 1
        if _live > 0:
            return
        _count = 0
        for lib, count in _saved.values():
            lib.set_num_threads(count)
        _saved.clear()


def info() -> list[dict[str, Any]]:
    """The BLAS libraries in use, with their kernel architecture and thread count."""
    return [
        {"library": c.internal_api, "version": c.version, "architecture": getattr(c, "architecture", None),
         "threads": c.get_num_threads(), "path": c.filepath}
        for c in blas_libraries()
    ]
