"""Host memory: the allocator for numpy arrays, and OrtValue (a tensor on a device)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._enum import OrtEnum
from .errors import InvalidArgument
from .errors import NotImplemented as OrtNotImplemented
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


# DLPack device types (dlpack.h DLDeviceType) -> the device type OrtValues name
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda", 10: "rocm", 13: "cuda"}


class _Capsule:
    """A bare DLPack capsule as an object ``np.from_dlpack`` takes (a host capsule; a device
    one is refused by numpy with its own error)."""

    def __init__(self, capsule: Any):
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def element_dtype(element_type: Any) -> np.dtype:
    """The numpy dtype of an element type given as onnxruntime takes it: a numpy type or dtype,
    or an ONNX element type number (``onnx.TensorProto.FLOAT`` = 1, ...)."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        import onnx_ir as ir

        try:
            return np.dtype(ir.DataType(int(element_type)).numpy())
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"element type {int(element_type)} is not an ONNX tensor element type: {exc}") from None
    return np.dtype(element_type)


class OrtValue:
    """A tensor and the device it lives on, as onnxruntime's ``OrtValue``.

    On the host the data is a numpy array. On a device (``device_type`` "webgpu", "cuda", ...)
    it is the provider's own tensor, made through the data transfer of the provider whose
    ``EpDevice.memory`` is that device type (``ort_core.devices.device_memory``); a session fed
    such a value, or an I/O binding holding it, runs on it where it is, with no host copy.
    """

    def __init__(self, data: Any, device_type: str = "cpu", device_id: int = 0, memory: str = HOST_MEMORY,
                 transfer: Any = None):
        self._data = data
        self._device_type = str(device_type).lower()
        self._device_id = int(device_id)
        self._memory = memory
        self._transfer = transfer

    @staticmethod
    def _device(device_type: str, device_id: int) -> Any:
        from .devices import device_memory

        return device_memory(device_type, device_id)

    @staticmethod
    def _memory_info_device(memory_info: Any) -> tuple[str, int]:
        """(device type, device id) of an ``OrtMemoryInfo``: "cpu" for host memory, else the
        memory's name ("Cuda", "WebGpu": what ``device_memory`` looks the provider up by)."""
        from .devices import OrtMemoryInfo, OrtMemoryInfoDeviceType

        if not isinstance(memory_info, OrtMemoryInfo):
            raise InvalidArgument(f"memory_info: an OrtMemoryInfo, not {type(memory_info).__name__}")
        host = memory_info.device_type == OrtMemoryInfoDeviceType.CPU
        return ("cpu" if host else memory_info.name), memory_info.device_id

    @staticmethod
    def ortvalue_from_numpy(array: np.ndarray, device_type: str = "cpu", device_id: int = 0,
                            vendor_id: int = -1) -> OrtValue:
        """``array`` as an OrtValue: on the host (no copy of a contiguous array) or copied to the
        device ``device_type``/``device_id``. ``vendor_id`` (onnxruntime's, to tell devices of
        one type apart) is taken and not needed: each device type here is one provider's."""
        if str(device_type).lower() == "cpu":
            return OrtValue(np.asarray(array, order="C"), "cpu", device_id)
        dm = OrtValue._device(device_type, device_id)
        return OrtValue(dm.transfer.to_device(np.asarray(array, order="C")), device_type, device_id, dm.memory, dm.transfer)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any = np.float32, device_type: str = "cpu",
                                     device_id: int = 0, vendor_id: int = -1, memory_info: Any = None) -> OrtValue:
        """A new tensor of ``shape`` and ``element_type`` (a numpy type, or an ONNX element type
        number); on a device it is zero-filled (made by one host-to-device copy, at this call
        only). ``memory_info`` (an ``OrtMemoryInfo``), where given, names the device instead of
        ``device_type``/``device_id``; ``vendor_id`` as in ``ortvalue_from_numpy``."""
        if memory_info is not None:
            device_type, device_id = OrtValue._memory_info_device(memory_info)
        dims = tuple(int(d) for d in shape)
        dtype = element_dtype(element_type)
        if str(device_type).lower() == "cpu":
            return OrtValue(np.empty(dims, dtype=dtype), "cpu", device_id)
        dm = OrtValue._device(device_type, device_id)
        return OrtValue(dm.transfer.to_device(np.zeros(dims, dtype)), device_type, device_id, dm.memory, dm.transfer)

    @property
    def on_host(self) -> bool:
        return self._memory == HOST_MEMORY

    def numpy(self) -> np.ndarray:
        """The data as a numpy array (copied to the host for a device value)."""
        if self.on_host:
            return np.asarray(self._data)
        return np.asarray(self._transfer.to_host(self._data))

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def data_type(self) -> str:
        """onnxruntime's type string: tensor(float), seq(tensor(int64)), seq(map(int64,tensor(float)))."""
        return _type_string(self._data)

    def element_type(self) -> int:
        """The ONNX element type (``onnx.TensorProto.FLOAT`` = 1, ...), as onnxruntime gives it."""
        import onnx_ir as ir

        return int(ir.DataType.from_numpy(np.dtype(self._data.dtype)))

    def device_name(self) -> str:
        return self._device_type

    def is_tensor(self) -> bool:
        return hasattr(self._data, "shape")

    def is_tensor_sequence(self) -> bool:
        """True for a sequence of tensors (a list of arrays), as a ``seq(tensor)`` output is."""
        return isinstance(self._data, list) and all(hasattr(v, "shape") for v in self._data)

    def is_sparse_tensor(self) -> bool:
        """Always False: ort-core has no sparse tensors (see ``SparseTensor``)."""
        return False

    def update_inplace(self, data: np.ndarray) -> None:
        """Write ``data`` (same number of elements and dtype) into this value's memory, in place."""
        data = np.asarray(data)
        size = int(np.prod(self._data.shape, dtype=np.int64))
        if data.size != size or np.dtype(data.dtype) != np.dtype(self._data.dtype):
            raise InvalidArgument(f"update_inplace: the array ({data.dtype}, {data.size} elements) does not match the "
                                  f"OrtValue ({np.dtype(self._data.dtype)}, {size} elements)")
        if self.on_host:
            np.copyto(self._data, data.reshape(self._data.shape))
        else:  # a provider's tensor: written through its data transfer
            self._data = self._transfer.to_device(np.asarray(data.reshape(tuple(self._data.shape)), order="C"))

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: np.ndarray, onnx_element_type: int) -> OrtValue:
        """``data`` (host) reinterpreted as ONNX element type ``onnx_element_type`` (e.g. uint16
        bits as bfloat16, ``TensorProto.BFLOAT16``); the item sizes must match."""
        import onnx_ir as ir

        data = np.asarray(data, order="C")
        try:
            dtype = np.dtype(ir.DataType(int(onnx_element_type)).numpy())
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(f"ortvalue_from_numpy_with_onnx_type: element type {onnx_element_type}: {exc}") from None
        if dtype.itemsize != data.dtype.itemsize:
            raise InvalidArgument(f"ortvalue_from_numpy_with_onnx_type: items of the array are {data.dtype.itemsize} "
                                  f"bytes, ONNX type {onnx_element_type} ({dtype}) takes {dtype.itemsize}")
        return OrtValue(data.view(dtype))

    def as_sparse_tensor(self) -> Any:
        raise OrtNotImplemented("OrtValue.as_sparse_tensor: ort-core has no sparse tensors (its providers' kernels "
                             "take dense arrays); use numpy()")

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: Any) -> OrtValue:
        raise OrtNotImplemented("OrtValue.ort_value_from_sparse_tensor: ort-core has no sparse tensors (its providers' "
                             "kernels take dense arrays)")

    def has_value(self) -> bool:
        return self._data is not None

    def tensor_size_in_bytes(self) -> int:
        return int(self._data.nbytes)

    def data_ptr(self) -> int:
        """The address of a host value's data."""
        require_host(self._device_type, "OrtValue.data_ptr")
        return int(np.asarray(self._data).ctypes.data)

    # ------------------------------------------------------------------ DLPack
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule over the data, no copy: host arrays, and device tensors that are
        DLPack arrays themselves (CuPy for CUDA). WebGPU buffers have no DLPack form."""
        producer = self._dlpack_producer()
        return producer.__dlpack__(stream=stream, **kwargs) if stream is not None else producer.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return tuple(self._dlpack_producer().__dlpack_device__())

    def _dlpack_producer(self) -> Any:
        if self.on_host:
            return np.asarray(self._data)
        if hasattr(self._data, "__dlpack__"):
            return self._data
        raise InvalidArgument(f"OrtValue on {self._device_type!r} ({self._memory} memory): the provider's tensors "
                              f"({type(self._data).__name__}) have no DLPack form; use numpy() for a host copy")

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> OrtValue:
        """An OrtValue over a DLPack producer (an object with ``__dlpack__``, or a host capsule),
        no copy. Host data becomes a numpy array; device data is taken as it is when the
        provider for that device type keeps such objects as its tensors (CuPy arrays for
        CUDA), else refused naming the device."""
        if not hasattr(data, "__dlpack__"):
            if type(data).__name__ != "PyCapsule":
                raise InvalidArgument(f"from_dlpack needs a DLPack producer or capsule, got {type(data).__name__}")
            data = _Capsule(data)
        kind, device_id = data.__dlpack_device__()
        device_type = _DLPACK_DEVICES.get(int(kind))
        if device_type == "cpu":
            array = np.from_dlpack(data)
            if is_bool_tensor and array.dtype == np.uint8:
                array = array.view(np.bool_)
            return OrtValue(array, "cpu", 0)
        if device_type is None:
            raise InvalidArgument(f"from_dlpack: DLPack device type {kind} is not one ort-core knows")
        dm = OrtValue._device(device_type, int(device_id))
        if not all(hasattr(data, a) for a in ("shape", "dtype", "nbytes")):
            raise InvalidArgument(f"from_dlpack: {type(data).__name__} on {device_type} is not a tensor object "
                                  f"{dm.provider} can take (it needs shape, dtype and nbytes)")
        return OrtValue(data, device_type, int(device_id), dm.memory, dm.transfer)


def _type_string(data: Any) -> str:
    """onnxruntime's type string of a value as a run gives it: an array, a list (sequence) of
    arrays or of dicts (ZipMap's seq(map)), a dict (map: str or int keys, float values)."""
    import onnx_ir as ir

    from .graph.view import onnx_type_string  # local: avoid import cycle at module load

    if isinstance(data, list):
        return f"seq({_type_string(data[0]) if data else 'tensor(float)'})"
    if isinstance(data, dict):
        key = "string" if any(isinstance(k, str) for k in data) else "int64"
        first = next(iter(data.values()), np.float32(0))
        # a Python float is ZipMap's float (the runs give its values as Python numbers)
        value = np.dtype(np.float32) if isinstance(first, float) else np.asarray(first).dtype
        return f"map({key},{onnx_type_string(ir.TensorType(ir.DataType.from_numpy(value)))})"
    return onnx_type_string(ir.TensorType(ir.DataType.from_numpy(np.dtype(data.dtype))))


class OrtValueVector(list):
    """A list of OrtValues with onnxruntime's ``OrtValueVector`` methods (``run_with_ortvaluevector``
    fills one; ``IOBinding.get_outputs_as_ortvaluevector`` returns one)."""

    def push_back(self, value: OrtValue) -> None:
        self.append(value)

    def push_back_batch(self, values: Sequence[OrtValue], *_: Any) -> None:
        self.extend(values)

    def reserve(self, n: int) -> None:
        """Nothing to reserve in a Python list."""

    def shrink_to_fit(self) -> None:
        """Nothing to shrink in a Python list."""

    def element_type_at(self, index: int) -> int:
        return self[index].element_type()

    def dlpack_at(self, index: int) -> Any:
        return self[index].__dlpack__()

    def to_dlpacks(self, *_: Any) -> list[Any]:
        return [v.__dlpack__() for v in self]


class OrtSparseFormat(OrtEnum):
    """onnxruntime's sparse formats (names only: ort-core has no sparse tensors)."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


class SparseTensor:
    """onnxruntime's ``SparseTensor``: refused, ort-core's providers take dense tensors only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise OrtNotImplemented("SparseTensor: ort-core has no sparse tensors (its providers' kernels take dense "
                             "arrays); densify the data (e.g. scipy's toarray()) and use OrtValue")

    @staticmethod
    def sparse_coo_from_numpy(*args: Any, **kwargs: Any) -> SparseTensor:
        return SparseTensor()

    @staticmethod
    def sparse_csr_from_numpy(*args: Any, **kwargs: Any) -> SparseTensor:
        return SparseTensor()
