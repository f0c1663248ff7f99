"""Adapters, devices, pooled GPU buffers and the command batching every kernel shares.

* ``list_adapters`` asks wgpu once per process which adapters exist (hardware first).
* ``GpuDevice`` is one ``GPUDevice`` per adapter and feature set, shared by the sessions of a
  process (device creation is slow), with the cache of compiled compute pipelines.
* ``BufferPool`` is the session's allocator: buffers are rounded to a size class and kept in
  free lists for reuse. Tensors free their buffer when the last tensor using it is dropped
  (the plan drops values after their last reader), so reuse needs no explicit free call.
* ``Stream`` records the dispatches of a run into one command encoder and submits it only
  when a host copy needs the results (or at run end), so a run is a few submissions.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ort_core import Allocator, AllocatorStats, MemoryInfo

# dtypes kernels compute on -> (dtype stored on the device, WGSL storage type, kind for math)
# int64 has no WGSL type: it is stored as its 8 bytes (vec2<i32>), so copies and data movement
# are exact; kernels do integer math on the low 32 bits (exact for values in int32's range)
# and write the sign-extended result. bool has no storage type either: it is stored as u32.
# Other dtypes (float64, bfloat16, int8, ...) can be held as raw bytes, so data transfer is
# exact for them, but no kernel takes them (the capability declines such nodes).
DEVICE_TYPES: dict[np.dtype, tuple[np.dtype, str, str]] = {
    np.dtype(np.float32): (np.dtype(np.float32), "f32", "f"),
    np.dtype(np.float16): (np.dtype(np.float16), "f16", "f"),
    np.dtype(np.int32): (np.dtype(np.int32), "i32", "i"),
    np.dtype(np.int64): (np.dtype(np.int64), "vec2<i32>", "i"),
    np.dtype(np.bool_): (np.dtype(np.uint32), "u32", "b"),
}


def device_dtype_of(dtype: np.dtype) -> np.dtype:
    """What the buffer of a ``dtype`` tensor holds (the dtype itself for raw-byte tensors)."""
    layout = DEVICE_TYPES.get(np.dtype(dtype))
    return layout[0] if layout is not None else np.dtype(dtype)
BUFFER_ALIGNMENT = 256


# --------------------------------------------------------------------------------------------
# adapters
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdapterRecord:
    """One adapter wgpu offers here."""

    index: int
    adapter: Any
    name: str
    vendor: str
    backend: str
    adapter_type: str  # DiscreteGPU, IntegratedGPU, CPU, Unknown
    features: frozenset[str]

    @property
    def hardware(self) -> bool:
        # wgpu reports software rasterisers (lavapipe, SwiftShader, WARP) as adapter_type CPU
        return self.adapter_type != "CPU"


_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2}


def _ensure_runtime_dir() -> None:
    """Mesa's drivers print "XDG_RUNTIME_DIR is invalid or not set" at every adapter request on
    headless machines; a private runtime dir (what a login session would give) silences it."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and os.path.isdir(current):
        return
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="ort-ep-webgpu-xdg-")


@lru_cache(maxsize=1)
def list_adapters() -> tuple[tuple[AdapterRecord, ...], str | None]:
    """The adapters of this machine, hardware and native backends first, or why there are none."""
    try:
        import wgpu
    except Exception as exc:  # ImportError, or the native library failing to load
        return (), f"wgpu cannot be imported ({type(exc).__name__}: {exc}); pip install 'wgpu>=0.31'"
    _ensure_runtime_dir()
    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
        if not adapters:
            adapters = [wgpu.gpu.request_adapter_sync()]
    except Exception as exc:
        return (), (
            f"wgpu found no adapter ({type(exc).__name__}: {exc}); install a Vulkan, Metal or D3D12 "
            "driver (on Linux without a GPU: apt-get install mesa-vulkan-drivers for lavapipe)"
        )
    records = []
    for adapter in adapters:
        info = adapter.info
        records.append(
            AdapterRecord(
                index=0,
                adapter=adapter,
                name=str(info.get("device") or info.get("description") or "unknown adapter"),
                vendor=str(info.get("vendor") or ""),
                backend=str(info.get("backend_type") or ""),
                adapter_type=str(info.get("adapter_type") or "Unknown"),
                features=frozenset(adapter.features),
            )
        )
    records.sort(key=lambda r: (not r.hardware, _BACKEND_RANK.get(r.backend, 1), r.adapter_type != "DiscreteGPU"))
    ordered = tuple(
        AdapterRecord(k, r.adapter, r.name, r.vendor, r.backend, r.adapter_type, r.features)
        for k, r in enumerate(records)
    )
    return ordered, None


def choose_adapter(records: tuple[AdapterRecord, ...], selector: str, power_preference: str) -> AdapterRecord:
    """Pick the adapter named by ``selector`` (an index or part of its name, "" for automatic).

    Automatic choice: hardware before software, then by ``power_preference`` (discrete GPUs for
    "high-performance", integrated for "low-power"), then native backends before OpenGL.
    """
    if selector:
        if selector.isdigit():
            k = int(selector)
            if k >= len(records):
                raise ValueError(f"adapter index {k} out of range; adapters here: {describe(records)}")
            return records[k]
        matches = [r for r in records if selector.lower() in f"{r.name} {r.backend}".lower()]
        if not matches:
            raise ValueError(f"no adapter matches {selector!r}; adapters here: {describe(records)}")
        return matches[0]
    prefer = "IntegratedGPU" if power_preference == "low-power" else "DiscreteGPU"
    return min(
        records,
        key=lambda r: (not r.hardware, r.adapter_type != prefer, _BACKEND_RANK.get(r.backend, 1), r.index),
    )


def describe(records: tuple[AdapterRecord, ...]) -> str:
    return "; ".join(f"[{r.index}] {r.name} ({r.backend}, {r.adapter_type})" for r in records) or "(none)"


# --------------------------------------------------------------------------------------------
# device and pipelines
# --------------------------------------------------------------------------------------------


@dataclass
class Pipeline:
    pipeline: Any
    layout: Any  # bind group layout 0


#: compiled pipelines a device keeps (by WGSL source)
MAX_PIPELINES = 1024


class GpuDevice:
    """A wgpu device with its compiled-pipeline cache (shared by the sessions of a process)."""

    def __init__(self, record: AdapterRecord, f16: bool):
        self.record = record
        self.f16 = f16
        features = ["shader-f16"] if f16 else []
        self.device = record.adapter.request_device_sync(required_features=features)
        self.queue = self.device.queue
        limits = self.device.limits
        self.max_groups = int(limits.get("max-compute-workgroups-per-dimension", 65535))
        self.max_binding = int(limits.get("max-storage-buffer-binding-size", 1 << 27))
        self._pipelines: dict[str, Pipeline] = {}
        self.compiled = 0
        self.lock = threading.RLock()

    def pipeline(self, source: str) -> Pipeline:
        """The compute pipeline of a WGSL source (entry point ``main``), compiled once."""
        cached = self._pipelines.get(source)
        if cached is not None:
            return cached
        with self.lock:
            cached = self._pipelines.get(source)
            if cached is None:
                module = self.device.create_shader_module(code=source)
                pipeline = self.device.create_compute_pipeline(
                    layout="auto", compute={"module": module, "entry_point": "main"}
                )
                cached = Pipeline(pipeline, pipeline.get_bind_group_layout(0))
                if len(self._pipelines) >= MAX_PIPELINES:
                    # sources specialised by shape, ever new: bounded (kernels keep the
                    # pipelines they prepared; the others are compiled again when asked)
                    self._pipelines.clear()
                self._pipelines[source] = cached
                self.compiled += 1
        return cached


_DEVICES: dict[tuple[int, bool], GpuDevice] = {}
_DEVICES_LOCK = threading.Lock()


def get_device(record: AdapterRecord, f16: bool) -> GpuDevice:
    with _DEVICES_LOCK:
        key = (record.index, f16)
        dev = _DEVICES.get(key)
        if dev is None:
            dev = _DEVICES[key] = GpuDevice(record, f16)
        return dev


# --------------------------------------------------------------------------------------------
# buffers and tensors
# --------------------------------------------------------------------------------------------


def size_class(nbytes: int) -> int:
    """Pool bucket of a request: powers of two from 256 bytes to 16 MiB, then 4 MiB steps."""
    if nbytes <= BUFFER_ALIGNMENT:
        return BUFFER_ALIGNMENT
    if nbytes <= 1 << 24:
        return 1 << (nbytes - 1).bit_length()
    step = 1 << 22
    return -(-nbytes // step) * step


class BufferPool(Allocator):
    """GPU buffers (STORAGE | COPY_SRC | COPY_DST) pooled by size class, with statistics."""

    def __init__(self, gpu: GpuDevice, memory_name: str, limit_bytes: int | None = None):
        import wgpu

        self.memory_info = MemoryInfo(memory_name, "GPU", gpu.record.index, BUFFER_ALIGNMENT)
        self._gpu = gpu
        self._usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self._free: dict[int, list[Any]] = {}
        self._stats = AllocatorStats(limit_bytes=limit_bytes)
        self.reused = 0  # allocations served from a free list
        self._lock = threading.Lock()
        self.closed = False

    def allocate(self, nbytes: int) -> Any:
        size = size_class(nbytes)
        with self._lock:
            if self.closed:
                raise RuntimeError("WebGPU buffer pool is released (session ended)")
            s = self._stats
            s.num_allocs += 1
            bucket = self._free.get(size)
            if bucket:
                buffer = bucket.pop()
                self.reused += 1
            else:
                if s.limit_bytes is not None and s.reserved_bytes + size > s.limit_bytes:
                    self._trim()
                    if s.reserved_bytes + size > s.limit_bytes:
                        raise MemoryError(
                            f"WebGPU allocator: {nbytes} bytes requested (class {size}), "
                            f"{s.in_use_bytes} in use, limit {s.limit_bytes} (option memory_limit_mb)"
                        )
                buffer = self._gpu.device.create_buffer(size=size, usage=self._usage)
                s.reserved_bytes += size
                s.total_allocated_bytes += size
            s.in_use_bytes += size
            s.peak_bytes = max(s.peak_bytes, s.in_use_bytes)
        return buffer

    def free(self, buffer: Any) -> None:
        with self._lock:
            self._stats.num_frees += 1
            self._stats.in_use_bytes -= buffer.size
            if self.closed:
                buffer.destroy()
                self._stats.reserved_bytes -= buffer.size
                return
            self._free.setdefault(buffer.size, []).append(buffer)

    def _trim(self) -> None:
        for bucket in self._free.values():
            for buffer in bucket:
                self._stats.reserved_bytes -= buffer.size
                buffer.destroy()
        self._free.clear()

    def stats(self) -> AllocatorStats:
        with self._lock:
            return AllocatorStats(**self._stats.__dict__)

    def release(self) -> None:
        """Destroy the free buffers; buffers still held are destroyed when they come back."""
        with self._lock:
            self.closed = True
            self._trim()

    def tensor(self, shape: tuple[int, ...], dtype: np.dtype) -> GpuTensor:
        """A new tensor of ``shape``/``dtype`` whose buffer returns to this pool when dropped."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = max(4, count * device_dtype_of(dtype).itemsize)
        return GpuTensor(Storage(self.allocate(nbytes), self), tuple(int(d) for d in shape), dtype)


class Storage:
    """A pooled buffer; goes back to its pool when the last tensor viewing it is dropped."""

    __slots__ = ("buffer", "pool")

    def __init__(self, buffer: Any, pool: BufferPool | None):
        self.buffer = buffer
        self.pool = pool

    def __del__(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            try:
                pool.free(self.buffer)
            except Exception:  # interpreter shutdown: the device may already be gone
                pass


class GpuTensor:
    """A tensor in a GPU buffer: what WebGPU kernels take and return.

    ``dtype`` is the ONNX/numpy dtype the graph sees; ``device_dtype`` what the buffer holds
    (int64 as int32, bool as uint32). Reshape-like ops return views on the same ``storage``.
    """

    __slots__ = ("storage", "shape", "dtype")

    def __init__(self, storage: Storage, shape: tuple[int, ...], dtype: np.dtype):
        self.storage = storage
        self.shape = shape
        self.dtype = dtype

    @property
    def buffer(self) -> Any:
        return self.storage.buffer

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def device_dtype(self) -> np.dtype:
        return device_dtype_of(self.dtype)

    @property
    def wgsl(self) -> str:
        return DEVICE_TYPES[self.dtype][1]

    def view(self, shape: tuple[int, ...]) -> GpuTensor:
        return GpuTensor(self.storage, tuple(int(d) for d in shape), self.dtype)

    def __repr__(self) -> str:
        return f"GpuTensor(shape={self.shape}, dtype={self.dtype})"


# --------------------------------------------------------------------------------------------
# command batching
# --------------------------------------------------------------------------------------------


@dataclass
class StreamStats:
    dispatches: int = 0
    submits: int = 0
    uploads: int = 0
    downloads: int = 0
    bind_groups: int = 0


@dataclass
class Stream:
    """Records a session's dispatches into one command encoder; submits on demand.

    Ordering: compute passes in one encoder run in order, and a submit runs before any later
    ``write_buffer``, so a pooled buffer reused by a later dispatch or upload is never written
    before an earlier dispatch has read it (uploads flush first for that reason).
    """

    gpu: GpuDevice
    pool: BufferPool
    max_batch: int = 512
    stats: StreamStats = field(default_factory=StreamStats)

    def __post_init__(self) -> None:
        self._encoder: Any = None
        self._pending = 0
        self._bind_groups: dict[tuple, tuple[Any, tuple]] = {}
        self._lock = threading.RLock()

    def dispatch(self, pipeline: Pipeline, buffers: list[Any], groups: tuple[int, int, int]) -> None:
        if groups[0] == 0 or groups[1] == 0 or groups[2] == 0:
            return
        key = (id(pipeline), *map(id, buffers))
        with self._lock:
            cached = self._bind_groups.get(key)
            if cached is None:
                if len(self._bind_groups) > 4096:
                    self._bind_groups.clear()
                entries = [
                    {"binding": k, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                    for k, b in enumerate(buffers)
                ]
                group = self.gpu.device.create_bind_group(layout=pipeline.layout, entries=entries)
                # the tuple keeps the buffers alive, so their ids cannot be reused by others
                cached = self._bind_groups[key] = (group, tuple(buffers))
                self.stats.bind_groups += 1
            if self._encoder is None:
                self._encoder = self.gpu.device.create_command_encoder()
            compute = self._encoder.begin_compute_pass()
            compute.set_pipeline(pipeline.pipeline)
            compute.set_bind_group(0, cached[0])
            compute.dispatch_workgroups(*groups)
            compute.end()
            self._pending += 1
            self.stats.dispatches += 1
            if self._pending >= self.max_batch:
                self.flush()

    def copy(self, source: Any, target: Any, nbytes: int, source_offset: int = 0, target_offset: int = 0) -> None:
        """Buffer-to-buffer copy recorded in the batch (sizes and offsets multiples of 4)."""
        if nbytes == 0:
            return
        with self._lock:
            if self._encoder is None:
                self._encoder = self.gpu.device.create_command_encoder()
            self._encoder.copy_buffer_to_buffer(source, source_offset, target, target_offset, nbytes)
            self._pending += 1

    def flush(self) -> None:
        with self._lock:
            if self._encoder is not None:
                self.gpu.queue.submit([self._encoder.finish()])
                self._encoder = None
                self._pending = 0
                self.stats.submits += 1

    def upload(self, array: np.ndarray) -> GpuTensor:
        """A host array as a new device tensor (bit-exact; bool widened to u32)."""
        array = np.asarray(array)
        dtype = array.dtype
        if dtype.kind in "OSU":
            raise TypeError(f"WebGPU cannot hold {dtype} tensors (strings and objects stay in host memory)")
        device_dtype = device_dtype_of(dtype)
        data = np.ascontiguousarray(array, dtype=device_dtype).reshape(-1).view(np.uint8)
        tensor = self.pool.tensor(array.shape, dtype)
        if data.nbytes % 4:  # write_buffer wants a multiple of 4 bytes
            data = np.concatenate([data, np.zeros(4 - data.nbytes % 4, np.uint8)])
        with self._lock:
            self.flush()
            if data.nbytes:
                self.gpu.queue.write_buffer(tensor.buffer, 0, data)
            self.stats.uploads += 1
        return tensor

    def download(self, tensor: GpuTensor) -> np.ndarray:
        """The tensor as a host numpy array (waits for the work that produces it)."""
        device_dtype = tensor.device_dtype
        nbytes = tensor.size * device_dtype.itemsize
        with self._lock:
            self.flush()
            self.stats.downloads += 1
            if nbytes == 0:
                return np.zeros(tensor.shape, tensor.dtype)
            # read_buffer maps a staging buffer and waits; it avoids on_submitted_work_done_sync,
            # whose ffi signature is broken in wgpu 0.32.0
            raw = self.gpu.queue.read_buffer(tensor.buffer, 0, -(-nbytes // 4) * 4)
        data = np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(device_dtype).reshape(tensor.shape)
        if tensor.dtype == np.bool_:
            return data != 0
        return data.astype(tensor.dtype, copy=True) if data.dtype != tensor.dtype else data.copy()

    def uniform(self, values: list[int]) -> Any:
        """A uniform buffer holding ``values`` as u32 (padded to whole vec4s)."""
        import wgpu

        data = np.zeros(max(4, -(-len(values) // 4) * 4), np.uint32)
        data[: len(values)] = values
        buffer = self.gpu.device.create_buffer(size=data.nbytes, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        # a fresh buffer: only dispatches recorded after this read it, and they are submitted
        # after this write, so no flush is needed
        self.gpu.queue.write_buffer(buffer, 0, data)
        return buffer

    def close(self) -> None:
        with self._lock:
            self.flush()
            self._bind_groups.clear()
