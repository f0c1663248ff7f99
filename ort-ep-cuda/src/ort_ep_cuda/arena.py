"""The session's device-memory arena: onnxruntime's BFC arena policy over raw device memory.

Device memory is reserved in *regions* (one ``cudaMalloc`` each) and handed out as *chunks*
carved from them: an allocation takes the best-fitting free chunk (splitting off the rest), a
freed chunk merges with its free neighbours, so memory is reused across runs without calling the
driver. When no free chunk fits, the arena *extends* by a new region, sized by
``arena_extend_strategy`` as onnxruntime sizes it:

* ``kNextPowerOfTwo``: regions double (1 MiB, 2 MiB, 4 MiB, ...), at least the request rounded
  up to a power of two, capped by what ``gpu_mem_limit`` leaves;
* ``kSameAsRequested``: a region is exactly the request (rounded to 256 bytes).

``gpu_mem_limit`` bounds the reserved bytes. A request that would pass it first releases the
regions with nothing in use, then fails with ``MemoryError`` naming the limit and the request;
nothing else changes, so the session keeps working. ``shrink()`` gives wholly free regions back
(run option ``memory.enable_memory_arena_shrinkage``).

The arena knows nothing of CuPy: ``DeviceMemory`` is two functions (``cupy.cuda.runtime.malloc``
and ``free`` on a GPU, integers in the tests' fake).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Protocol

from ort_core import Allocator, AllocatorStats, MemoryInfo

ALIGNMENT = 256  # onnxruntime's kMinAllocationSize; cudaMalloc itself aligns to 256
INITIAL_REGION = 1 << 20  # onnxruntime's initial chunk size for kNextPowerOfTwo
NEXT_POWER_OF_TWO = "kNextPowerOfTwo"
SAME_AS_REQUESTED = "kSameAsRequested"
STRATEGIES = (NEXT_POWER_OF_TWO, SAME_AS_REQUESTED)


class DeviceMemory(Protocol):
    def malloc(self, nbytes: int) -> int: ...  # a device pointer; MemoryError when the device is full

    def free(self, ptr: int) -> None: ...


def round_up(nbytes: int) -> int:
    return max(ALIGNMENT, -(-nbytes // ALIGNMENT) * ALIGNMENT)


def next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


@dataclass(eq=False)
class _Chunk:
    region: _Region
    offset: int
    size: int
    free: bool = True
    prev: _Chunk | None = None
    next: _Chunk | None = None

    @property
    def ptr(self) -> int:
        return self.region.ptr + self.offset


@dataclass(eq=False)
class _Region:
    ptr: int
    size: int
    in_use: int = 0  # chunks of this region in use


class Arena(Allocator):
    """Best-fit chunks in regions of device memory, with onnxruntime's extension policy."""

    def __init__(self, memory: DeviceMemory, memory_info: MemoryInfo, strategy: str = NEXT_POWER_OF_TWO,
                 limit_bytes: int | None = None, limit_option: str = "gpu_mem_limit"):
        if strategy not in STRATEGIES:
            raise ValueError(f"arena_extend_strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        self.memory = memory
        self.memory_info = memory_info
        self.strategy = strategy
        self.limit_option = limit_option
        self._stats = AllocatorStats(limit_bytes=limit_bytes)
        self._next_region = INITIAL_REGION
        self._regions: list[_Region] = []
        self._free: list[_Chunk] = []
        self._used: dict[int, _Chunk] = {}
        # re-entrant: CuPy frees an array's memory when the array is collected, and the garbage
        # collector may run inside the arena's own critical section (it allocates Python
        # objects); such a nested free is queued and done when the outer call leaves
        self._lock = threading.RLock()
        self._depth = 0
        self._deferred: list[int] = []
        self._held: list[int] | None = None  # while a CUDA graph is captured: frees kept here
        self._keep_after: list[int] | None = None  # ... and after, until the graph is gone
        self.extensions = 0  # regions reserved so far (for tests and statistics)
        self._closed = False  # the session ended: regions go back to the device as they empty
        # an arena collected without close() (its session in a reference cycle) still gives its
        # regions back; not at interpreter exit, when the CUDA context may already be gone
        weakref.finalize(self, _release_regions, memory, self._regions).atexit = False

    # ------------------------------------------------------------------ Allocator
    def allocate(self, nbytes: int) -> int:
        """A device pointer to at least ``nbytes`` bytes, aligned to 256."""
        size = round_up(int(nbytes))
        with self._critical():
            chunk = self._best_fit(size)
            if chunk is None:
                self._extend(size, int(nbytes))
                chunk = self._best_fit(size)
                assert chunk is not None
            self._take(chunk, size)
            s = self._stats
            s.in_use_bytes += chunk.size
            s.peak_bytes = max(s.peak_bytes, s.in_use_bytes)
            s.num_allocs += 1
            return chunk.ptr

    def free(self, buffer: int) -> None:
        with self._lock:
            if self._held is not None:  # a captured CUDA graph writes there again: not reusable
                self._held.append(int(buffer))
                return
            if self._depth:  # inside this thread's own allocate/free (a GC finalizer): later
                self._deferred.append(int(buffer))
                return
            with self._critical():
                self._free_now(int(buffer))

    def _critical(self) -> _Critical:
        return _Critical(self)

    def _free_now(self, buffer: int) -> None:
        chunk = self._used.pop(int(buffer), None)
        if chunk is None:
            raise ValueError(f"{self.memory_info.name} arena: pointer {int(buffer):#x} was not allocated here")
        self._stats.in_use_bytes -= chunk.size
        self._stats.num_frees += 1
        chunk.free = True
        chunk.region.in_use -= 1
        self._free.append(chunk)
        for neighbour in (chunk.next, chunk.prev):
            if neighbour is not None and neighbour.free:
                chunk = self._merge(chunk, neighbour)
        if self._closed and chunk.region.in_use == 0:
            self._release_free_regions()

    def stats(self) -> AllocatorStats:
        with self._lock:
            return AllocatorStats(**self._stats.__dict__)

    # ------------------------------------------------------------------ policy
    def hold_frees(self) -> None:
        """From now on, keep what is freed (a CUDA graph being captured will reuse it)."""
        with self._lock:
            if self._held is None:
                self._held = []

    def end_hold(self) -> None:
        """Stop keeping frees (the capture is over); what was kept stays kept."""
        with self._lock:
            self._keep_after = self._held
            self._held = None

    def release_held(self) -> None:
        """Free what ``hold_frees`` kept (the graph is gone) and reuse memory again."""
        with self._lock:
            held = (self._held or []) + (self._keep_after or [])
            self._held = self._keep_after = None
        for ptr in held:
            self.free(ptr)

    def close(self) -> None:
        """The session ended (onnxruntime frees its arena then): the free regions go back to the
        device now, the others when their last chunk is freed (outputs the caller still holds)."""
        with self._critical():
            self._closed = True
            self._release_free_regions()

    def shrink(self) -> int:
        """Give the regions with no chunk in use back to the device; returns the bytes released."""
        with self._critical():
            return self._release_free_regions()

    def region_sizes(self) -> list[int]:
        with self._lock:
            return [r.size for r in self._regions]

    def _best_fit(self, size: int) -> _Chunk | None:
        best = None
        for chunk in self._free:
            if chunk.size >= size and (best is None or chunk.size < best.size):
                best = chunk
        return best

    def _take(self, chunk: _Chunk, size: int) -> None:
        self._free.remove(chunk)
        rest = chunk.size - size
        if rest >= ALIGNMENT:  # split: the tail stays free
            tail = _Chunk(chunk.region, chunk.offset + size, rest, True, chunk, chunk.next)
            if chunk.next is not None:
                chunk.next.prev = tail
            chunk.next = tail
            chunk.size = size
            self._free.append(tail)
        chunk.free = False
        chunk.region.in_use += 1
        self._used[chunk.ptr] = chunk

    def _merge(self, a: _Chunk, b: _Chunk) -> _Chunk:
        """Merge two adjacent free chunks; returns the survivor (the lower one)."""
        low, high = (a, b) if a.offset < b.offset else (b, a)
        self._free.remove(high)
        low.size += high.size
        low.next = high.next
        if high.next is not None:
            high.next.prev = low
        return low

    def _region_size(self, size: int, available: int | None) -> int:
        if self.strategy == SAME_AS_REQUESTED:
            return size
        grow = max(self._next_region, next_power_of_two(size))
        if available is not None and grow > available:
            grow = max(size, available // ALIGNMENT * ALIGNMENT)  # what the limit leaves, at least the request
        return grow

    def _available(self) -> int | None:
        limit = self._stats.limit_bytes
        return None if limit is None else limit - self._stats.reserved_bytes

    def _extend(self, size: int, requested: int) -> None:
        available = self._available()
        if available is not None and size > available:
            self._release_free_regions()
            available = self._available()
            if size > available:
                s = self._stats
                raise MemoryError(
                    f"{self.memory_info.name} arena: a request of {requested} bytes ({mib(requested)}) would exceed "
                    f"{self.limit_option}={s.limit_bytes} bytes ({mib(s.limit_bytes)}): {s.reserved_bytes} bytes "
                    f"reserved, {s.in_use_bytes} in use; raise {self.limit_option} or use smaller inputs"
                )
        region_size = self._region_size(size, available)
        try:
            ptr = self.memory.malloc(region_size)
        except MemoryError:
            # the device is full (other processes, other sessions): give back what is free, retry
            # with exactly the request
            self._release_free_regions()
            region_size = size
            try:
                ptr = self.memory.malloc(region_size)
            except MemoryError as exc:
                raise MemoryError(
                    f"{self.memory_info.name} arena: the device has no room for {requested} bytes "
                    f"({mib(requested)}); this session reserves {self._stats.reserved_bytes} bytes"
                ) from exc
        region = _Region(ptr, region_size)
        self._regions.append(region)
        self._free.append(_Chunk(region, 0, region_size))
        self._stats.reserved_bytes += region_size
        self._stats.total_allocated_bytes += region_size
        self.extensions += 1
        if self.strategy == NEXT_POWER_OF_TWO:
            self._next_region = max(self._next_region, region_size) * 2

    def _release_free_regions(self) -> int:
        released = 0
        for region in [r for r in self._regions if r.in_use == 0]:
            self._free = [c for c in self._free if c.region is not region]
            self._regions.remove(region)
            self.memory.free(region.ptr)
            self._stats.reserved_bytes -= region.size
            released += region.size
        return released


def _release_regions(memory: DeviceMemory, regions: list[_Region]) -> None:
    for region in regions:
        memory.free(region.ptr)
    regions.clear()


class _Critical:
    """The arena's critical section: the lock held, nested frees deferred, and done on leaving."""

    def __init__(self, arena: Arena):
        self.arena = arena

    def __enter__(self) -> None:
        self.arena._lock.acquire()
        self.arena._depth += 1

    def __exit__(self, *exc: object) -> None:
        arena = self.arena
        try:
            while arena._depth == 1 and arena._deferred:
                arena._free_now(arena._deferred.pop())
        finally:
            arena._depth -= 1
            arena._lock.release()
