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

import ctypes
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

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


#: counts the times another library set a thread's OpenMP thread count behind oneDNN's back
#: (``openmp_count_changed``)
openmp_changes = 0


def openmp_count_changed() -> None:
    """Another library set this thread's OpenMP thread count (numba's pool, as it starts, sets
    the thread's to its own): oneDNN sets the session's count again before its next primitive.
    (A one-thread session's primitives made after numba's first split loop ran on two threads.)"""
    global openmp_changes
    openmp_changes += 1


def usable() -> int:
    """The threads a kernel may run on: the live session's count, else one per usable core
    (counted at import and at each session's start, as onnxruntime sizes its pool when a
    session is made: asking the kernel at every oneDNN call was a tenth of a small one's cost)."""
    return _count or _cores


#: A run on two or more OpenMP threads ends when every thread is done, also one the scheduler
#: has not run yet (GNU OpenMP's caller sleeps at the region's end; onnxruntime's caller runs
#: the shares its late workers have not started, which OpenMP offers no way to do). Beside one
#: busy process on one core of two, a 3 x 256 x 768 row product split in two took 8 ms in most
#: runs where onnxruntime's took 30 us. A run waited on a late thread when the calling thread
#: was idle (wall time less its CPU time) for this long and for half the run (``waited``).
STALL_SECONDS = 200e-6
#: ... and that many in a row are taken for a busy core (one alone is a run after a pause: the
#: workers asleep, the caches cold)
STALLS_IN_A_ROW = 2
#: compiled split loops (``watched``) then run on one thread (``split_threads``) for this long,
#: twice as long each time they stall again in their first ``WATCH_RUNS`` runs back, up to
#: ``ALONE_SECONDS_MOST`` (a core busy for minutes costs two stalled runs a spell)
ALONE_SECONDS = 0.1
ALONE_SECONDS_MOST = 10.0
#: the CPU time (a system call: 1 us here) is read on one split run in ``SPLIT_SAMPLE``, and on
#: each of the first ``WATCH_RUNS`` (at first, and after each spell on one thread)
SPLIT_SAMPLE = 8
WATCH_RUNS = 4

_alone_until = 0.0  # perf_counter time until which split loops take one thread (0: they do not)
_alone_seconds = ALONE_SECONDS  # the last spell's length
_split_runs = 0
_split_stalls = 0  # watched runs in a row that waited on a late thread
_watch_left = WATCH_RUNS  # split runs whose CPU time is read whatever the sample
_back = False  # the watched runs follow a spell on one thread


#: GNU OpenMP's shared library, whose pool (per calling thread) runs numba's split loops and
#: oneDNN's primitives; ``place_workers`` finds the pool's threads through it
OPENMP_LIBRARY = "libgomp.so.1"


class _Pool:
    """The OpenMP pool of one calling thread, as ``place_workers`` knows it: its workers' thread
    ids, the team size they were found at, the CPU they were last kept off (-1: none), and each
    worker's CPUs before the first move (given back by ``_release_workers``)."""

    __slots__ = ("workers", "size", "away_from", "before")

    def __init__(self, workers: tuple[int, ...], size: int, before: dict[int, set[int]]):
        self.workers, self.size, self.away_from, self.before = workers, size, -1, before


_pools: dict[int, _Pool | None] = {}  # calling thread's ident -> its pool (None: placing failed)
_sched_getcpu: Callable[[], int] | None = None


def _find_sched_getcpu() -> Callable[[], int] | None:
    try:
        getcpu = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):  # not glibc
        return None
    getcpu.restype, getcpu.argtypes = ctypes.c_int, []
    return getcpu


def _pool_workers(size: int) -> tuple[int, ...] | None:
    """The thread ids of the calling thread's OpenMP workers, found by one parallel region of
    ``size`` threads through libgomp's own entry point (each thread records its id), or None
    where libgomp is not loaded in this process (numba then runs another pool, and oneDNN
    another OpenMP)."""
    try:
        gomp = ctypes.CDLL(OPENMP_LIBRARY, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    ids: list[int] = []
    body = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: ids.append(threading.get_native_id()))
    gomp.GOMP_parallel.restype = None
    gomp.GOMP_parallel.argtypes = [type(body), ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    gomp.GOMP_parallel(body, None, size, 0)
    me = threading.get_native_id()
    return tuple(sorted({i for i in ids if i != me}))


def place_workers() -> None:
    """Before a region on two or more OpenMP threads: keep the calling thread's OpenMP workers
    off the CPU it runs on. Why: on a 2-vCPU VM, after an idle spell, Linux woke a sleeping
    worker on the caller's own CPU (the other one idle), where the caller, done with its share,
    spun at the region's end until the scheduler preempted it. A 1 x 288 x 1024 row product on
    two threads after 0.3 s pauses took 7-8 ms, and the run after it 4 ms, in most tries; with
    the workers kept off the caller's CPU, 0.2-0.35 ms and 23 us (the loop's own time). The
    CPU is read each time (0.1 us) and the workers moved only when it changed."""
    global _sched_getcpu
    pool = _pools.get(threading.get_ident(), False)
    if pool is None or _forked or _count == 1:  # (one thread a session: no loop is split)
        return
    getcpu = _sched_getcpu
    if getcpu is None:
        getcpu = _sched_getcpu = _find_sched_getcpu() or (lambda: -1)
    cpu = getcpu()
    size = max(_count, _cores)  # numba's regions take one thread per core whatever the split
    if size <= 1:
        return
    if pool is not False and pool.away_from == cpu and pool.size >= size:
        return
    if cpu < 0:
        _pools[threading.get_ident()] = None
        return
    try:
        if pool is False and _bound_by_user():
            _pools[threading.get_ident()] = None
            return
        if pool is False or pool.size < size:
            workers = _pool_workers(size)
            if workers is None:  # (numba and oneDNN load it when their first loops are made)
                _pools[threading.get_ident()] = None
                return
            # (a pool found again at a larger size: the workers moved before keep their first CPUs)
            known = {} if pool is False else pool.before
            before = {w: known[w] if w in known else os.sched_getaffinity(w) for w in workers}
            pool = _pools[threading.get_ident()] = _Pool(workers, size, before)
        others = os.sched_getaffinity(0) - {cpu}
        if others:
            for worker in pool.workers:
                _set_affinity(worker, others)
        pool.away_from = cpu
    except OSError as error:  # a worker gone, or the calls not allowed: the pool is left as it is
        logger.debug("OpenMP workers not placed: %s", error)
        _pools[threading.get_ident()] = None


def _bound_by_user() -> bool:
    """Whether the environment binds OpenMP's threads itself (``OMP_PROC_BIND`` other than
    false, ``OMP_PLACES``, ``GOMP_CPU_AFFINITY``): then ``place_workers`` leaves them there."""
    env = os.environ
    bind = env.get("OMP_PROC_BIND", "").strip().lower()
    return bool(bind and bind != "false" or env.get("OMP_PLACES") or env.get("GOMP_CPU_AFFINITY"))


def _set_affinity(worker: int, cpus: set[int]) -> None:
    """``cpus`` for the thread ``worker`` of this process. A thread id is the system's: once a
    pool's thread has ended (its calling thread gone) the id may name another process's thread,
    which must not be touched, so a gone worker raises ProcessLookupError instead."""
    if not os.path.exists(f"/proc/self/task/{worker}"):
        raise ProcessLookupError(f"thread {worker} is not this process's")
    os.sched_setaffinity(worker, cpus)


def _release_workers() -> None:
    """The last session ended: every pool's workers get back the CPUs they had before."""
    for pool in _pools.values():
        for worker, cpus in pool.before.items() if pool else ():
            try:
                _set_affinity(worker, cpus)
            except OSError:  # (a gone worker among them)
                pass
    _pools.clear()


def _after_fork() -> None:
    """In a forked child: the ids recorded name the parent's threads, and entering the parent's
    pool there hangs the child (``_jit`` runs no split loop in one): no placing."""
    global _forked
    _forked = True
    _pools.clear()


_forked = False
os.register_at_fork(after_in_child=_after_fork)


def waited(elapsed: float, cpu: float) -> bool:
    """Whether a run of ``elapsed`` seconds wall time, of which the calling thread spent ``cpu``
    on a CPU, waited on a late thread (``STALL_SECONDS``)."""
    idle = elapsed - cpu
    return idle > STALL_SECONDS and idle > elapsed / 2


def split_threads() -> int:
    """The threads a compiled loop split over the pool (numba's ``prange``) may take now:
    ``usable()``, or one for a while after split runs waited on late threads (``watched``)."""
    global _alone_until, _watch_left, _back
    if _alone_until:
        if time.perf_counter() < _alone_until:
            return 1
        _alone_until, _watch_left, _back = 0.0, WATCH_RUNS, True  # back on the threads: the next runs are read
    place_workers()
    return _count or _cores


def watched(loop: Callable[..., Any]) -> Callable[..., Any]:
    """``loop`` (a compiled loop that splits its work over the pool when asked) with its runs
    judged by ``waited``: ``STALLS_IN_A_ROW`` stalled runs in a row send every split loop to
    one thread (``split_threads``) for ``ALONE_SECONDS``."""

    def run(*args: Any) -> Any:
        global _split_runs
        _split_runs += 1
        if _watch_left <= 0 and _split_runs % SPLIT_SAMPLE:
            return loop(*args)
        start, cpu = time.perf_counter(), time.thread_time()
        result = loop(*args)
        _judge(time.perf_counter() - start, time.thread_time() - cpu)
        return result

    return run


def _judge(elapsed: float, cpu: float) -> None:
    """One watched run's times (see ``watched``). Module state without a lock: a count two
    threads race on is off by one, which moves a spell by a run."""
    global _alone_until, _alone_seconds, _split_stalls, _watch_left, _back
    again = _back and _watch_left > 0  # stalled again at once on the return
    if _watch_left > 0:
        _watch_left -= 1
    if not waited(elapsed, cpu):
        _split_stalls = 0
        return
    _split_stalls += 1
    if _split_stalls < STALLS_IN_A_ROW:
        return
    _split_stalls = 0
    _alone_seconds = min(2 * _alone_seconds, ALONE_SECONDS_MOST) if again else ALONE_SECONDS
    _alone_until, _back = time.perf_counter() + _alone_seconds, False
    logger.debug("split loops waited on a late thread; one thread for %.1f s", _alone_seconds)


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
        _release_workers()


def info() -> list[dict[str, Any]]:
    """The BLAS libraries in use, with their kernel architecture and thread count."""
    return [
        {"library": c.internal_api, "version": c.version, "architecture": getattr(c, "architecture", None),
         "threads": c.get_num_threads(), "path": c.filepath}
        for c in blas_libraries()
    ]
