"""The per-call helpers of the compiled and oneDNN paths: an array's data address read from
numpy's struct (``_util.data_address``) and the usable core count counted once per session
(``threads.usable``)."""

from __future__ import annotations

import numpy as np
import pytest

import ort_core as ort
from ort_ep_cpu import threads
from ort_ep_cpu.kernels import _util


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32),
    lambda: np.arange(20, dtype=np.uint8).reshape(4, 5)[1:, 2:],  # a view inside another array
    lambda: np.zeros((3, 4)).T,  # not C-contiguous
    lambda: np.zeros(0, np.int32),
    lambda: np.zeros((2, 3), np.int64)[::-1],  # a negative stride: the address of element [0, 0]
], ids=["plain", "view", "transposed", "empty", "reversed"])
def test_data_address_is_numpys(make):
    a = make()
    assert _util.data_address(a) == a.ctypes.data


def test_data_address_refuses_what_is_not_an_array():
    with pytest.raises(TypeError, match="float32"):
        _util.data_address(np.float32(1.0))


def test_usable_cores_are_counted_when_a_session_starts(monkeypatch):
    """Counted at import and at each session's start (not at every kernel call)."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    threads.limit(0, blas=0)
    try:
        assert threads.usable() == 3
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
        assert threads.usable() == 3  # until the next session starts
    finally:
        threads.restore()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 0
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert threads.usable() == 1
    del session
    monkeypatch.undo()
    threads.limit(0, blas=0)  # counted again for the tests after this one
    threads.restore()


@pytest.mark.parametrize("threads_asked", [1, 2])
def test_onednn_primitives_are_made_at_the_sessions_thread_count(threads_asked, monkeypatch):
    """oneDNN sizes a primitive's parallel work by this thread's OpenMP count when the primitive
    is made, and keeps it: the count is set first (a primitive made at the default ran two
    threads in a one-thread session)."""
    import os

    from onnx import TensorProto, helper, numpy_helper

    from ort_ep_cpu.kernels import _onednn

    lib = _onednn.library()
    if lib is None:
        pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
    if threads_asked > len(os.sched_getaffinity(0)):
        pytest.skip("fewer cores than threads asked")
    seen = []
    real = lib.dnnl.dnnl_convolution_forward_primitive_desc_create

    def spy(*args):
        seen.append(lib.gomp.omp_get_max_threads())
        return real(*args)

    monkeypatch.setattr(lib.dnnl, "dnnl_convolution_forward_primitive_desc_create", spy)
    monkeypatch.setattr(_onednn, "ONEDNN_MIN_CONV_MACS", 0, raising=False)
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads_asked
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    session.run(None, {"x": rng.standard_normal((1, 16, 24, 24)).astype(np.float32)})
    assert seen and set(seen) == {threads_asked}, seen


class _Sleepy:
    """A stand-in for a primitive: ``run`` records its thread mode and sleeps (a run that waits
    on a late thread is idle: wall time without CPU time)."""

    def __init__(self, lib, made: list, seconds: float):
        self.one_thread = bool(getattr(lib.local, "one_thread", False))
        self.seconds, self.calls = seconds, []
        made.append(self)

    def run(self, x):
        import time

        self.calls.append(x)
        if self.seconds:
            time.sleep(self.seconds)
        return x


def test_a_run_that_waited_on_a_late_thread_hands_over_to_a_one_thread_twin(monkeypatch):
    """``_onednn.Stallable``: a threaded run seen idle (waiting, not computing) makes a twin at
    one thread, which runs instead for ``ONE_THREAD_SECONDS`` (and ``ONE_THREAD_RUNS``); then
    the threaded one again."""
    from ort_ep_cpu.kernels import _onednn

    lib = _onednn.library()
    if lib is None:
        pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
    # stalls counted from 20 ms idle: the test's quiet runs are not taken for stalls where a
    # busy machine takes the core from this thread for a few ms (it did, beside other jobs)
    monkeypatch.setattr(threads, "STALL_SECONDS", 0.02)
    monkeypatch.setattr(_onednn, "ONE_THREAD_SECONDS", 60.0)  # ended below by hand
    made: list = []

    def make(lib):
        return _Sleepy(lib, made, 0.0)

    plan = _onednn.Stallable(lib, make(lib), make)
    threaded = made[0]
    for k in range(2):  # the first run is never judged
        assert plan.run(k) == k
    assert len(made) == 1  # quiet runs: no twin
    threaded.seconds = 0.1  # now each run sleeps: idle, watched (the first runs are)
    plan.run(2)
    assert len(made) == 1  # one stalled run alone: a run after a pause, perhaps
    plan.run(3)
    assert len(made) == 2 and made[1].one_thread  # two in a row
    threaded.seconds = 0.0
    for k in range(4, 7):
        plan.run(k)
    assert made[1].calls == [4, 5, 6] and threaded.calls == [0, 1, 2, 3]
    monkeypatch.setattr(plan, "single_until", 1e-9)  # the twin's time is over
    monkeypatch.setattr(plan, "single_runs", 0)  # ... and its runs
    plan.run(7)
    assert threaded.calls[-1] == 7
    assert not lib.local.one_thread  # the twin was made under the flag, which is off again


def test_the_one_thread_twin_runs_a_number_of_runs_and_longer_when_stalls_persist(monkeypatch):
    """A primitive run once a model run, in a model slowed past ``ONE_THREAD_SECONDS`` a run by
    a busy core, never reached its twin (a quantized T5 encoder: 440 ms a run at two threads,
    8 with this rule, 8 at one thread): the twin takes ``ONE_THREAD_RUNS`` runs whatever the
    time, and twice as many each time the threaded one stalls again at once on its return."""
    from ort_ep_cpu.kernels import _onednn

    lib = _onednn.library()
    if lib is None:
        pytest.skip(f"oneDNN not used: {_onednn.info().get('reason')}")
    monkeypatch.setattr(threads, "STALL_SECONDS", 0.02)
    monkeypatch.setattr(_onednn, "ONE_THREAD_SECONDS", 0.0)  # the time alone ends a spell at once
    monkeypatch.setattr(_onednn, "ONE_THREAD_RUNS", 3)
    made: list = []
    plan = _onednn.Stallable(lib, _Sleepy(lib, made, 0.0), lambda lib: _Sleepy(lib, made, 0.0))
    threaded = made[0]
    plan.run(0)
    threaded.seconds = 0.05  # stalls from now on
    plan.run(1)
    plan.run(2)  # two in a row: the twin
    assert len(made) == 2
    twin = made[1]
    for k in range(3, 6):
        plan.run(k)
    assert twin.calls == [3, 4, 5]  # three runs, though its time was over at once
    plan.run(6)
    plan.run(7)  # back on the threaded one, which stalls twice at once
    assert threaded.calls[-2:] == [6, 7]
    for k in range(8, 14):
        plan.run(k)
    assert twin.calls[3:] == list(range(8, 14))  # twice as long: six runs
    threaded.seconds = 0.0
    plan.run(14)
    assert threaded.calls[-1] == 14


def test_split_loops_that_wait_on_a_late_thread_go_to_one_thread_for_a_while(monkeypatch):
    """``threads.watched``: compiled loops split over OpenMP's pool wait at their end for a
    worker the scheduler has not run (beside a busy process, a 30 us row product took 8 ms).
    Two watched runs in a row seen idle send every split loop to one thread
    (``split_threads``) for ``ALONE_SECONDS``, twice as long when they stall again at once on
    their return, and back to the base spell once they do not."""
    import time

    monkeypatch.setattr(threads, "STALL_SECONDS", 0.02)  # quiet runs on a busy machine are not stalls
    monkeypatch.setattr(threads, "ALONE_SECONDS", 60.0)  # spells ended below by hand
    monkeypatch.setattr(threads, "ALONE_SECONDS_MOST", 600.0)
    for name, value in (("_alone_until", 0.0), ("_split_stalls", 0), ("_watch_left", threads.WATCH_RUNS),
                        ("_back", False), ("_alone_seconds", 60.0), ("_split_runs", 0)):
        monkeypatch.setattr(threads, name, value)
    wait = [0.0]
    calls: list[int] = []

    def loop(k):  # idle for ``wait`` seconds, as a caller waiting on a late worker is
        time.sleep(wait[0])
        calls.append(k)
        return k

    run = threads.watched(loop)
    usable = threads.usable()
    assert run(0) == 0 and threads.split_threads() == usable
    wait[0] = 0.05
    run(1)
    assert threads.split_threads() == usable  # one stalled run alone: a run after a pause, perhaps
    run(2)
    assert threads.split_threads() == 1  # two in a row
    assert threads._alone_seconds == 60.0
    monkeypatch.setattr(threads, "_alone_until", 1e-9)  # the spell is over
    assert threads.split_threads() == usable
    run(3)
    run(4)  # stalled again at once on the return: a spell twice as long
    assert threads.split_threads() == 1 and threads._alone_seconds == 120.0
    monkeypatch.setattr(threads, "_alone_until", 1e-9)
    wait[0] = 0.0
    for k in range(5, 5 + threads.WATCH_RUNS):  # quiet on the return
        run(k)
    assert threads.split_threads() == usable and calls == list(range(5 + threads.WATCH_RUNS))
    wait[0] = 0.05
    for k in range(threads.SPLIT_SAMPLE * threads.STALLS_IN_A_ROW):  # later stalls, seen by the sample
        run(k)
    assert threads.split_threads() == 1 and threads._alone_seconds == 60.0  # the base spell again


def test_openmp_workers_are_kept_off_the_calling_threads_cpu(monkeypatch):
    """``threads.place_workers`` (called by ``split_threads`` before each split loop): the
    calling thread's OpenMP workers may run on every usable CPU but the caller's, moved again
    when the caller is seen on another CPU, and given back their CPUs when the last session
    ends. (In a VM after a pause, a worker woken on the caller's CPU waited there until the
    scheduler preempted the caller, which spun at the region's end: 7-8 ms for a 30 us loop.)"""
    import os
    import threading

    from ort_ep_cpu.kernels import _jit

    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("one usable CPU: no loop is split")
    loops = _jit.row_products(2)
    if loops is None:
        pytest.skip("numba is not installed: no OpenMP pool")
    import numba

    if numba.threading_layer() != "omp":
        loops[0](np.ones((1, 4), np.float32), np.ones((4, 4), np.float32), np.zeros(0, np.float32),
                 np.empty((1, 4), np.float32), 2)  # starts numba's pool
        if numba.threading_layer() != "omp":
            pytest.skip(f"numba's pool is {numba.threading_layer()!r}, not GNU OpenMP's")
    me = threading.get_ident()
    monkeypatch.setattr(threads, "_alone_until", 0.0)
    threads._release_workers()  # (earlier tests may have placed them: their own CPUs back first)
    threads.limit(2, blas=0)
    try:
        assert threads.split_threads() == 2
        pool = threads._pools[me]
        tasks = {int(t) for t in os.listdir("/proc/self/task")}
        assert pool.workers and set(pool.workers) <= tasks - {threading.get_native_id()}
        assert pool.away_from in allowed
        for worker in pool.workers:
            assert os.sched_getaffinity(worker) == allowed - {pool.away_from}
        other = min(allowed - {pool.away_from})
        monkeypatch.setattr(threads, "_sched_getcpu", lambda: other)  # the caller moved
        threads.split_threads()
        assert pool.away_from == other
        for worker in pool.workers:
            assert os.sched_getaffinity(worker) == allowed - {other}
    finally:
        threads.restore()
    if threads._live == 0:  # no other session lives in this process: the workers are free again
        assert me not in threads._pools
        for worker in pool.workers:
            assert os.sched_getaffinity(worker) == allowed


def test_one_thread_sessions_move_no_openmp_worker(monkeypatch):
    """``place_workers`` in a one-thread session: no loop is split there, so no pool is probed
    and no worker moved (it had sized the pool by the cores and pinned workers no loop used)."""
    import threading

    monkeypatch.setattr(threads, "_alone_until", 0.0)
    threads._release_workers()
    threads.limit(1, blas=0)
    try:
        assert threads.split_threads() == 1
        assert threading.get_ident() not in threads._pools
    finally:
        threads.restore()


def test_a_gone_openmp_worker_is_never_touched(monkeypatch):
    """A thread id recorded for a pool whose thread has ended may name another process's thread
    by now: ``place_workers`` gives up on that pool (it is left as it is), and the release at
    the last session's end skips it; neither sets that id's affinity."""
    import os
    import threading

    calls: list[int] = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda tid, cpus: calls.append(tid))
    gone = max(int(t) for t in os.listdir("/proc/self/task")) + 1_000_000  # no thread of this process
    me = threading.get_ident()
    pool = threads._Pool((gone,), size=max(threads._count, threads._cores), before={gone: {0}})
    monkeypatch.setitem(threads._pools, me, pool)
    monkeypatch.setattr(threads, "_sched_getcpu", lambda: 0)
    monkeypatch.setattr(threads, "_cores", max(threads._cores, 2))
    threads.place_workers()
    assert calls == [] and threads._pools[me] is None
    threads._pools[me] = pool
    threads._release_workers()
    assert calls == [] and me not in threads._pools


@pytest.mark.parametrize("name,value", [("OMP_PROC_BIND", "close"), ("OMP_PLACES", "cores"),
                                        ("GOMP_CPU_AFFINITY", "0-1")])
def test_openmp_threads_bound_by_the_environment_are_left_where_they_are(name, value, monkeypatch):
    """Where the environment binds OpenMP's threads itself, ``place_workers`` moves none of
    them (``OMP_PROC_BIND=false`` binds nothing, and placing goes on)."""
    import os
    import threading

    calls: list[int] = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda tid, cpus: calls.append(tid))
    monkeypatch.setattr(threads, "_pool_workers", lambda size: (threading.get_native_id() + 1,))
    monkeypatch.setattr(threads, "_set_affinity", lambda worker, cpus: calls.append(worker))
    monkeypatch.setattr(threads, "_sched_getcpu", lambda: 0)
    monkeypatch.setattr(threads, "_cores", max(threads._cores, 2))
    monkeypatch.setattr(os, "sched_getaffinity", lambda tid: {0, 1})
    me = threading.get_ident()
    monkeypatch.delitem(threads._pools, me, raising=False)
    for variable in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("OMP_PROC_BIND", "false")
    try:
        threads.place_workers()
        assert calls and threads._pools[me] is not None  # placed
        calls.clear()
        del threads._pools[me]
        monkeypatch.setenv(name, value)
        threads.place_workers()
        assert calls == [] and threads._pools[me] is None
    finally:
        threads._pools.pop(me, None)  # (the next test's placing starts afresh)


def test_a_pool_found_again_at_a_larger_size_keeps_its_workers_first_cpus(monkeypatch):
    """A session asking for more threads than the pool was found at makes ``place_workers``
    find it again: the workers it had already moved are given back, at the release, the CPUs
    they had before the first move, not the ones it gave them."""
    import os
    import threading

    cpus = {101: {0, 1}, 102: {0, 1}}  # the fake workers' CPUs, as sched_getaffinity reads them
    monkeypatch.setattr(os, "sched_getaffinity", lambda tid: cpus.get(tid, {0, 1}))
    monkeypatch.setattr(threads, "_set_affinity", lambda worker, allowed: cpus.__setitem__(worker, set(allowed)))
    monkeypatch.setattr(threads, "_sched_getcpu", lambda: 0)
    monkeypatch.setattr(threads, "_bound_by_user", lambda: False)
    found = [(101,)]
    monkeypatch.setattr(threads, "_pool_workers", lambda size: found[0])
    me = threading.get_ident()
    monkeypatch.setattr(threads, "_count", 0)
    monkeypatch.setattr(threads, "_cores", 2)
    threads._pools.pop(me, None)
    try:
        threads.place_workers()
        assert cpus[101] == {1}  # moved off CPU 0
        found[0] = (101, 102)
        monkeypatch.setattr(threads, "_count", 3)  # a session at three threads: found again
        threads.place_workers()
        assert cpus == {101: {1}, 102: {1}} and threads._pools[me].size == 3
        threads._release_workers()
        assert cpus == {101: {0, 1}, 102: {0, 1}}
    finally:
        threads._pools.pop(me, None)
