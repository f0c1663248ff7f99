"""The arena's policy (onnxruntime's BFC arena): region sizes by arena_extend_strategy, reuse,
splitting and merging, gpu_mem_limit errors that name the limit and the request, shrinkage.
The arena runs over ``FakeDeviceMemory`` (integers for device pointers) here; on a GPU the same
class runs over cudaMalloc (tests/test_gpu.py)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ort_core as ort
from conftest import PROVIDERS, fake_only, runtime
from fake_cuda import FakeDeviceMemory
from ort_core import MemoryInfo
from ort_core.testing import models
from ort_ep_cuda.arena import INITIAL_REGION, Arena

MiB = 1 << 20


def _arena(strategy="kNextPowerOfTwo", limit=None, capacity=None):
    memory = FakeDeviceMemory(capacity)
    return Arena(memory, MemoryInfo("Cuda", "GPU", 0, 256), strategy, limit), memory


def test_next_power_of_two_regions_double():
    arena, memory = _arena()
    arena.allocate(1000)
    assert arena.region_sizes() == [INITIAL_REGION]  # 1 MiB first, as onnxruntime
    arena.allocate(INITIAL_REGION)  # does not fit in what is left: a new region, twice the last
    assert arena.region_sizes() == [MiB, 2 * MiB]
    arena.allocate(5 * MiB)  # larger than the next doubling (4 MiB): the next power of two
    assert arena.region_sizes() == [MiB, 2 * MiB, 8 * MiB]
    assert memory.mallocs == 3
    assert arena.stats().reserved_bytes == 11 * MiB


def test_same_as_requested_regions_are_the_request():
    arena, _ = _arena("kSameAsRequested")
    for n in (1000, 3 * MiB, 256):
        arena.allocate(n)
    assert arena.region_sizes() == [1024, 3 * MiB, 256]  # rounded to 256 bytes, no more


def test_freed_chunks_are_reused_split_and_merged():
    arena, memory = _arena("kSameAsRequested")
    a = arena.allocate(4096)
    arena.free(a)
    b = arena.allocate(1024)  # best fit in the free 4 KiB chunk: no new region
    c = arena.allocate(1024)
    assert memory.mallocs == 1 and b == a and c == a + 1024
    arena.free(b)
    arena.free(c)  # b, c and the 2 KiB tail merge back into one 4 KiB chunk
    assert arena.allocate(4096) == a and memory.mallocs == 1
    stats = arena.stats()
    assert (stats.num_allocs, stats.num_frees, stats.in_use_bytes) == (4, 3, 4096)


def test_limit_error_names_the_limit_and_the_request_and_changes_nothing():
    arena, _ = _arena(limit=2 * MiB)
    keep = arena.allocate(MiB)
    before = arena.stats()
    with pytest.raises(MemoryError) as info:
        arena.allocate(3 * MiB)
    message = str(info.value)
    assert "gpu_mem_limit=2097152 bytes" in message
    assert f"a request of {3 * MiB} bytes" in message
    assert arena.stats() == before
    arena.free(keep)
    assert arena.allocate(2 * MiB)  # the free region is given back, then the request fits


def test_next_power_of_two_is_capped_by_the_limit():
    arena, _ = _arena(limit=3 * MiB)
    arena.allocate(MiB)
    arena.allocate(MiB)  # the doubling would reserve 2 MiB: fits exactly
    assert arena.region_sizes() == [MiB, 2 * MiB]
    arena.allocate(MiB)  # in the 2 MiB region
    with pytest.raises(MemoryError, match="gpu_mem_limit"):
        arena.allocate(MiB)


def test_device_out_of_memory_releases_free_regions_and_retries():
    arena, memory = _arena("kSameAsRequested", capacity=3 * MiB)
    x = arena.allocate(2 * MiB)
    arena.free(x)  # 2 MiB reserved, free
    y = arena.allocate(MiB + 256)  # fits in the free region: no device call
    arena.free(y)
    arena.allocate(3 * MiB)  # the device has 1 MiB left: the free region goes back, then it fits
    assert arena.region_sizes() == [3 * MiB] and memory.frees == 1
    with pytest.raises(MemoryError, match="the device has no room"):
        arena.allocate(256)


def test_shrink_gives_back_wholly_free_regions_only():
    arena, memory = _arena()
    a = arena.allocate(MiB)
    arena.allocate(MiB)  # second region, kept in use
    arena.free(a)
    assert arena.shrink() == MiB
    assert arena.region_sizes() == [2 * MiB] and memory.frees == 1


def test_bad_strategy_is_refused():
    with pytest.raises(ValueError, match="kNextPowerOfTwo, kSameAsRequested"):
        _arena("kDouble")


# ------------------------------------------------------------------ in a session
@fake_only
def test_gpu_mem_limit_error_in_a_session_and_the_session_stays_usable():
    model = models.mlp(in_features=64, hidden=256, layers=2)
    session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"gpu_mem_limit": str(2 * MiB)}),
                                                     "CPUExecutionProvider"])
    small = models.random_inputs(model, batch=2)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, small)[0]
    with pytest.raises(ort.OrtError) as info:
        session.run(None, models.random_inputs(model, batch=4096))
    assert "gpu_mem_limit=2097152 bytes" in str(info.value)
    np.testing.assert_allclose(session.run(None, small)[0], expected, rtol=1e-5, atol=1e-6)


@fake_only
def test_second_run_reuses_the_arena():
    model = models.mlp(in_features=32, hidden=64, layers=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    feeds = models.random_inputs(model, batch=4)
    session.run(None, feeds)
    arena = runtime(session).dev.arena
    first = arena.stats()
    session.run(None, feeds)
    second = arena.stats()
    assert second.num_allocs > first.num_allocs
    assert second.total_allocated_bytes == first.total_allocated_bytes  # no new device memory
    stats = session.get_memory_stats()["Cuda"]
    assert stats["allocator_reserved_bytes"] >= stats["allocator_in_use_bytes"] > 0


@fake_only
def test_run_option_arena_shrinkage_gives_memory_back():
    model = models.mlp(in_features=64, hidden=256, layers=2)
    session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"}),
                                                     "CPUExecutionProvider"])
    arena = runtime(session).dev.arena
    session.run(None, models.random_inputs(model, batch=512))
    grown = arena.stats().reserved_bytes
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0;gpu:0")
    session.run(None, models.random_inputs(model, batch=2), options)
    assert arena.stats().reserved_bytes < grown
    other = ort.RunOptions()
    other.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:1")  # another GPU: no shrink
    session.run(None, models.random_inputs(model, batch=512))
    grown = arena.stats().reserved_bytes
    session.run(None, models.random_inputs(model, batch=2), other)
    assert arena.stats().reserved_bytes == grown


def test_a_free_from_inside_the_arena_is_deferred_not_deadlocked():
    """CuPy frees an array's memory when the garbage collector collects it, which can happen
    inside the arena's own allocate (a finalizer run while it holds its lock)."""
    arena, memory = _arena("kSameAsRequested")
    first = arena.allocate(4096)
    held = [first]
    malloc = memory.malloc

    def malloc_with_a_gc_inside(nbytes):
        if held:
            arena.free(held.pop())  # what a finalizer does in the middle of allocate
        return malloc(nbytes)

    memory.malloc = malloc_with_a_gc_inside
    ptr = arena.allocate(8192)  # no free chunk fits: extends, and the nested free is deferred
    stats = arena.stats()
    assert stats.num_frees == 1 and stats.in_use_bytes == 8192
    arena.free(ptr)
    assert arena.allocate(4096) == first  # the deferred free was done: its chunk is reused
    assert memory.mallocs == 2


def test_close_gives_free_regions_back_and_the_rest_as_they_empty():
    arena, memory = _arena()
    held = arena.allocate(1000)  # an output the caller still holds after the session ended
    arena.allocate(2 * MiB)
    arena.free(arena.allocate(5 * MiB))
    for ptr in list(arena._used):
        if ptr != held:
            arena.free(ptr)
    arena.close()
    assert arena.region_sizes() == [MiB] and len(memory.live) == 1  # only the held one's region
    arena.free(held)
    assert arena.region_sizes() == [] and memory.live == {}


def test_an_arena_collected_without_close_gives_its_regions_back():
    arena, memory = _arena()
    arena.allocate(3 * MiB)
    arena.cycle = arena  # a reference cycle: only the collector frees it
    del arena
    gc.collect()
    assert memory.live == {} and memory.frees == memory.mallocs == 1


def test_a_closed_session_returns_its_device_memory():
    model = models.mlp(in_features=16, hidden=32, layers=2)
    session = ort.InferenceSession(model, providers=PROVIDERS)
    session.run(None, models.random_inputs(model, batch=4))
    arena = runtime(session).dev.arena
    assert arena.stats().reserved_bytes > 0
    del session
    gc.collect()
    assert arena.stats().reserved_bytes == 0
