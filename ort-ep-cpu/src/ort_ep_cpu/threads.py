"""``intra_op_num_threads`` for the CPU provider: the size of the BLAS thread pools.

numpy's (and scipy's) BLAS libraries keep one thread pool per process, not per session, so
the setting is applied when a session starts and undone when it ends (threadpoolctl finds the
libraries and sets their thread counts through their own C calls). With several live sessions
that ask for different counts, the most recently created one's count holds. 0 (the default)
leaves the libraries at their own default (one thread per core).

With the provider option ``split_compiled_loops`` (off by default: it did not pay on a 2-core
machine, see the README), the provider's own compiled loops (``kernels/_jit``: depthwise
convolution, HardSigmoid, Gelu) use the count too, per session: a kernel reads
``kernel_threads()`` when it is built (the session's count, set around ``ort_create_kernel``)
and splits its large calls into that many parts with ``parallel_for``, on one process-wide pool
of helper threads (the calling thread does one part; the loops release the GIL). A split never
changes a result: each part computes whole channels or rows, with the same arithmetic as one
call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_controllers: list[Any] | None = None


def _blas() -> list[Any]:
    global _controllers
    if _controllers is None:
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
        for lib in _blas():
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
        for c in _blas()
    ]


def cores() -> int:
    """The cores this process may run on (what ``intra_op_num_threads=0`` means)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_building = threading.local()


@contextmanager
def building(threads: int) -> Iterator[None]:
    """Kernels built inside this block split their work into ``threads`` parts (0: one per core)."""
    previous = getattr(_building, "count", None)
    _building.count = cores() if threads <= 0 else threads
    try:
        yield
    finally:
        _building.count = previous


def kernel_threads() -> int:
    """The thread count for a kernel being built now: the session's, or 1 outside a build."""
    return getattr(_building, "count", None) or 1


_pool: ThreadPoolExecutor | None = None
#: how many calls ``parallel_for`` has split (tests check that the parallel path ran)
parallel_calls = 0


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                # threads start on first need; a session asking for more threads than cores
                # still gets its parts run, queued on these
                _pool = ThreadPoolExecutor(max(1, cores() - 1), thread_name_prefix="ort-ep-cpu")
    return _pool


def parallel_for(fn: Callable[[int, int], object], start: int, stop: int, parts: int) -> None:
    """Run ``fn(lo, hi)`` over ``[start, stop)`` cut into ``parts`` near-equal ranges: the first
    on this thread, the others on the helper pool; returns when all are done (raising the
    first error). ``fn`` must release the GIL (a nogil compiled loop) for this to pay."""
    global parallel_calls
    parts = min(parts, stop - start)
    if parts <= 1:
        fn(start, stop)
        return
    bounds = [start + (stop - start) * i // parts for i in range(parts + 1)]
    pool = _executor()
    parallel_calls += 1
    futures = [pool.submit(fn, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    try:
        fn(bounds[0], bounds[1])
    finally:  # wait even on error: the helpers write into the caller's arrays
        for f in futures:
            f.exception()
    for f in futures:
        f.result()
