"""A FAKE CUDA device for the tests on machines without a GPU: numpy stands in for CuPy.

``FakeCudaDevice`` replaces ``ort_ep_cuda.backend.CudaDevice``, the one module of the package
that talks to CuPy, cuBLAS and cuDNN. Its ``xp`` is numpy, so every kernel written against
CuPy's NumPy-compatible API runs unchanged; its ``conv``/``conv_transpose``/``matmul``/``erf``
are plain numpy (and scipy) versions of the cuDNN/cuBLAS calls. Its arena is the real
``Arena`` over ``FakeDeviceMemory`` (integers instead of device pointers), and every array a
kernel returns is charged to it until the array is garbage-collected, as CuPy's allocator hook
does on a GPU. ``install()`` makes the provider see one fake GPU.

This is test-only emulation; it is not part of the package and never user-visible.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.special

from ort_core import MemoryInfo
from ort_ep_cuda import backend, devices
from ort_ep_cuda.arena import Arena
from ort_ep_cuda.bfloat16 import BFLOAT16, BFloat16Tensor

FAKE_GPU = devices.GpuRecord(
    index=0, name="FAKE GPU (numpy standing in for CuPy)", compute_capability=(9, 0), total_memory=1 << 34,
    driver_version=12040, runtime_version=12040, cupy_version="fake", cudnn="fake",
)


class FakeDeviceMemory:
    """Device memory as integers: malloc hands out increasing fake addresses; a capacity makes
    the device 'full' like cudaMalloc's out-of-memory error."""

    def __init__(self, capacity: int | None = None):
        self.capacity = capacity
        self.live: dict[int, int] = {}
        self.mallocs = 0
        self.frees = 0
        self._next = 1 << 20

    def malloc(self, nbytes: int) -> int:
        if self.capacity is not None and sum(self.live.values()) + nbytes > self.capacity:
            raise MemoryError(f"FakeDeviceMemory: out of memory ({nbytes} bytes)")
        ptr = self._next
        self._next += -(-nbytes // 4096) * 4096 + 4096
        self.live[ptr] = nbytes
        self.mallocs += 1
        return ptr

    def free(self, ptr: int) -> None:
        del self.live[ptr]
        self.frees += 1


class FakeCudaDevice:
    """numpy in CuPy's place; the same attributes and calls as ``backend.CudaDevice``."""

    xp = np

    def __init__(self, record: devices.GpuRecord, options: dict[str, Any], memory_name: str):
        self.record = record
        self.options = options
        self.device_id = record.index
        limit = options["gpu_mem_limit"] or None
        self.memory = FakeDeviceMemory()
        self.arena = Arena(self.memory, MemoryInfo(memory_name, "GPU", self.device_id, 256),
                           options["arena_extend_strategy"], limit)
        self._charged: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()
        self.uploads = 0
        self.downloads = 0
        self.closed = False

    # ------------------------------------------------------------------ memory
    def _charge(self, array: Any) -> None:
        """Charge a new array to the arena until it is collected (CuPy's allocator hook)."""
        if isinstance(array, np.ndarray) and array.base is None and array.nbytes and id(array) not in self._charged:
            self._charged[id(array)] = array  # an input passed through (Identity) is charged once
            ptr = self.arena.allocate(array.nbytes)
            weakref.finalize(array, self.arena.free, ptr)

    launches = 0  # kernel bodies run (a replayed CUDA graph runs none)

    def launch(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        self.launches += 1
        out = self._call(fn, args)
        for array in out if isinstance(out, list) else (out,):
            self._charge(array)
        if self.recording is not None:
            self.recording.append((fn, tuple(args), out))
        return out

    @staticmethod
    def _call(fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        out = fn(*args)
        # CuPy returns 0-d arrays where numpy returns scalars (np.matmul of two vectors)
        def array(o):
            return np.asarray(o) if isinstance(o, (np.generic, float, int, bool)) else o

        return [array(o) for o in out] if isinstance(out, list) else array(out)

    # ------------------------------------------------------------------ CUDA graphs, FAKE: the
    # captured "graph" is the list of kernel calls; launching it calls them again and writes
    # each result into the arrays the captured run returned (the fixed buffers of a graph)
    recording: list | None = None

    def begin_capture(self) -> None:
        self.arena.hold_frees()
        self.recording = []

    def end_capture(self) -> None:
        self.arena.end_hold()
        self.graph, self.recording = self.recording, None
        self.graph_launches = 0

    def launch_graph(self) -> None:
        for fn, args, out in self.graph:
            result = self._call(fn, args)
            for o, r in zip(out, result) if isinstance(out, list) else ((out, result),):
                if o is not r:
                    np.copyto(o, r)
        self.graph_launches += 1

    def to_device(self, array: Any) -> Any:
        array = np.asarray(array, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if array.dtype == BFLOAT16:
            return BFloat16Tensor(self.to_device(array.view(np.uint16)))
        if array.dtype not in backend.DEVICE_DTYPES:
            raise TypeError(f"a {array.dtype} tensor cannot be held on the GPU (CuPy has no {array.dtype} arrays)")
        out = array.copy()
        self._charge(out)
        self.uploads += 1
        return out

    def to_host(self, tensor: Any) -> np.ndarray:
        if isinstance(tensor, BFloat16Tensor):
            return self.to_host(tensor.bits).view(BFLOAT16)
        if self.recording is not None:  # as a capturing stream: nothing has been computed yet
            raise RuntimeError(backend.CAPTURED_COPY_TO_HOST)
        self.downloads += 1
        return np.array(tensor, order="C")  # (ascontiguousarray would make a 0-d array 1-d)

    def synchronize(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
        self.arena.release_held()
        self.arena.close()

    # ------------------------------------------------------------------ cuBLAS / cuDNN stand-ins
    def matmul(self, a: Any, b: Any) -> Any:
        if a.dtype == np.float16:  # cuBLAS accumulates half products in float32
            return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
        return np.matmul(a, b)

    def erf(self, x: Any) -> Any:
        return scipy.special.erf(x)

    def sdpa(self, q, k, v, scale, causal):
        """cuDNN's fused attention, as numpy: float32 inside, one rounding to float16."""
        self.sdpa_calls = getattr(self, "sdpa_calls", 0) + 1
        if k.shape[1] != q.shape[1]:
            k, v = np.repeat(k, q.shape[1] // k.shape[1], axis=1), np.repeat(v, q.shape[1] // v.shape[1], axis=1)
        s = np.matmul(q.astype(np.float32), np.swapaxes(k.astype(np.float32), 2, 3)) * np.float32(scale)
        if causal:
            s = np.where(np.arange(s.shape[-1])[None, :] <= np.arange(s.shape[-2])[:, None], s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return np.matmul(p / p.sum(axis=-1, keepdims=True), v.astype(np.float32)).astype(q.dtype)

    def conv(self, x, w, pads, strides, dilations, group):
        n = x.ndim - 2
        x32, w32 = x.astype(np.float32), w.astype(np.float32)
        padded = np.pad(x32, [(0, 0), (0, 0)] + [(pads[k], pads[n + k]) for k in range(n)])
        out = [(padded.shape[2 + k] - dilations[k] * (w.shape[2 + k] - 1) - 1) // strides[k] + 1 for k in range(n)]
        from ort_ep_cuda.ops_nn import windows

        win = windows(np, padded, w.shape[2:], strides, dilations, out)  # N, C, *out, *k
        cg, kg = x.shape[1] // group, w.shape[0] // group
        letters = "defg"[:n]
        ys = []
        for g in range(group):
            ys.append(np.einsum(f"nc{letters}{letters.upper()},kc{letters.upper()}->nk{letters}",
                                win[:, g * cg:(g + 1) * cg], w32[g * kg:(g + 1) * kg]))
        return np.concatenate(ys, axis=1).astype(x.dtype)

    def conv_transpose(self, x, w, pads, strides, dilations, group, out_shape):
        n = x.ndim - 2
        cin_g, cout_g = x.shape[1] // group, w.shape[1]
        full = [(x.shape[2 + k] - 1) * strides[k] + (w.shape[2 + k] - 1) * dilations[k] + 1 for k in range(n)]
        size = [max(full[k], pads[k] + out_shape[2 + k]) for k in range(n)]
        y = np.zeros((x.shape[0], cout_g * group, *size), np.float32)
        x32, w32 = x.astype(np.float32), w.astype(np.float32)
        letters = "defg"[:n]
        for g in range(group):
            xg, wg = x32[:, g * cin_g:(g + 1) * cin_g], w32[g * cin_g:(g + 1) * cin_g]
            for kk in itertools.product(*(range(s) for s in w.shape[2:])):
                part = np.einsum(f"nc{letters},co->no{letters}", xg, wg[(slice(None), slice(None), *kk)])
                index = tuple(slice(kk[k] * dilations[k], kk[k] * dilations[k] + (x.shape[2 + k] - 1) * strides[k] + 1,
                                    strides[k]) for k in range(n))
                y[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *index)] += part
        crop = tuple(slice(pads[k], pads[k] + out_shape[2 + k]) for k in range(n))
        return y[(slice(None), slice(None), *crop)].astype(x.dtype)


def open_fake_device(record: devices.GpuRecord, options: dict[str, Any], memory_name: str) -> FakeCudaDevice:
    return FakeCudaDevice(record, options, memory_name)


def install() -> None:
    """Make the provider see one FAKE GPU backed by numpy (before core asks for devices)."""
    devices.probe = lambda: devices.Probe((FAKE_GPU,))
    backend.open_device = open_fake_device
