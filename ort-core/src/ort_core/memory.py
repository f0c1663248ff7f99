"""Host memory: the allocator for numpy arrays, and OrtValue (a tensor on a device)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidArgument
from .types import HOST_MEMORY, Allocator, AllocatorStats, MemoryInfo


def require_host(device_type: str, what: str) -> None:
    """Refuse ``device_type`` unless it is host memory: ort-core's OrtValues and I/O bindings
    live there (a provider's device memory stays inside a run)."""
    if str(device_type).lower() != "cpu":
        raise InvalidArgument(f"{what}: device {device_type!r} is not supported; ort-core keeps OrtValues "
                              "and bindings in host memory ('cpu') only")


class HostAllocator(Allocator):
    """Aligned host buffers (numpy) with counters and an optional limit. ``memory_info`` lets a
    provider whose "device" memory is host RAM (or a test double) name it differently."""

    def __init__(self, alignment: int = 64, limit_bytes: int | None = None, memory_info: MemoryInfo | None = None):
        self.memory_info = memory_info or MemoryInfo(HOST_MEMORY, "CPU", 0, alignment)
        self._stats = AllocatorStats(limit_bytes=limit_bytes)
        self._sizes: dict[int, int] = {}
        self._lock = threading.Lock()

    def allocate(self, nbytes: int) -> np.ndarray:
        align = self.memory_info.alignment
        with self._lock:
            s = self._stats
            if self._over_limit(nbytes):
                raise MemoryError(
                    f"{self.memory_info.name} allocator: {nbytes} bytes requested, {s.in_use_bytes} in use, "
                    f"limit {s.limit_bytes}"
                )
            raw = np.empty(nbytes + align, dtype=np.uint8)
            offset = (-raw.ctypes.data) % align
            buffer = raw[offset : offset + nbytes]
            self._sizes[id(buffer)] = nbytes
            s.in_use_bytes += nbytes
            s.total_allocated_bytes += nbytes
            s.num_allocs += 1
            s.peak_bytes = max(s.peak_bytes, s.in_use_bytes)
        return buffer

    def _over_limit(self, nbytes: int) -> bool:
        s = self._stats
        return s.limit_bytes is not None and s.in_use_bytes + nbytes > s.limit_bytes

    def free(self, buffer: Any) -> None:
        with self._lock:
            nbytes = self._sizes.pop(id(buffer), 0)
            self._stats.in_use_bytes -= nbytes
            self._stats.num_frees += 1

    def stats(self) -> AllocatorStats:
        with self._lock:
            return AllocatorStats(**self._stats.__dict__)


class OrtValue:
    """A tensor and the device it lives on, as onnxruntime's ``OrtValue`` for host tensors."""

    def __init__(self, data: Any, device_type: str = "cpu", device_id: int = 0):
        self._data = data
        self._device_type = device_type
        self._device_id = device_id

    @staticmethod
    def ortvalue_from_numpy(array: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        require_host(device_type, "OrtValue")
        return OrtValue(np.ascontiguousarray(array), "cpu", device_id)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any = np.float32, device_type: str = "cpu",
                                     device_id: int = 0) -> OrtValue:
        """A new (uninitialised) tensor of ``shape`` and ``element_type`` (a numpy type)."""
        require_host(device_type, "OrtValue")
        return OrtValue(np.empty(tuple(int(d) for d in shape), dtype=np.dtype(element_type)), "cpu", device_id)

    def numpy(self) -> np.ndarray:
        return np.asarray(self._data)

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def data_type(self) -> str:
        import onnx_ir as ir

        from .graph.view import onnx_type_string  # local: avoid import cycle at module load

        return onnx_type_string(ir.TensorType(ir.DataType.from_numpy(self._data.dtype)))

    def element_type(self) -> np.dtype:
        return self._data.dtype

    def device_name(self) -> str:
        return self._device_type

    def is_tensor(self) -> bool:
        return hasattr(self._data, "shape")
