"""The one module that talks to the GPU: CuPy, cuBLAS (through ``cupy.matmul``) and cuDNN
(through NVIDIA's cudnn-frontend graph API).

A ``CudaDevice`` is one session's view of a GPU: its array module (``xp = cupy``), its compute
stream, its arena (every CuPy allocation its kernels make goes through it), the host<->device
copies through pinned buffers, and the library calls that are not NumPy's API (``matmul`` with
the TF32 choice, ``conv``/``conv_transpose`` on cuDNN, ``erf``). Kernels (``kernels.py``) are
written against ``xp`` and these few calls only, so that the tests can stand numpy in for CuPy
by replacing this one class (``tests/fake_cuda.py``); nothing else in the package imports CuPy.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ort_core import MemoryInfo

from .arena import Arena
from .bfloat16 import BFLOAT16, BFloat16Tensor
from .devices import CUDNN_HINT, GpuRecord
from .options import SMALL_CONV_WORKSPACE

#: dtypes CuPy arrays can hold (not bfloat16: it is held as bits, see bfloat16.py)
DEVICE_DTYPES = frozenset(np.dtype(t) for t in (
    np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.bool_,
))


class _RawMemory:
    """The arena's device memory: cudaMalloc/cudaFree on one device."""

    def __init__(self, cupy: Any, device_id: int):
        self._cupy = cupy
        self._device_id = device_id

    def malloc(self, nbytes: int) -> int:
        with self._cupy.cuda.Device(self._device_id):
            try:
                return int(self._cupy.cuda.runtime.malloc(nbytes))
            except self._cupy.cuda.runtime.CUDARuntimeError as exc:
                raise MemoryError(str(exc)) from exc

    def free(self, ptr: int) -> None:
        with self._cupy.cuda.Device(self._device_id):
            self._cupy.cuda.runtime.free(ptr)


@dataclass
class _ConvPlan:
    graph: Any
    tensors: tuple[Any, ...]  # the graph's tensors: X, W, Y (convolutions) or Q, K, V, O (attention)
    workspace: int  # bytes
    nhwc: bool
    out_shape: tuple[int, ...]
    index: int | None = None  # the plan chosen by timing (EXHAUSTIVE), else cuDNN's choice


#: cudaDataType and cublasComputeType_t values (cuBLAS's library_types.h / cublas_api.h)
_CUDA_TYPE = {np.dtype(np.float16): 2, np.dtype(np.float32): 0, np.dtype(np.float64): 1}
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32, _COMPUTE_64F = 68, 77, 70
CAPTURED_COPY_TO_HOST = (
    "enable_cuda_graph=1: a copy to the host inside the captured run (an output not bound on the device); "
    "bind outputs with IOBinding on 'cuda' (bind_output(name, 'cuda')), as onnxruntime requires")
CAPTURE_BLAS_WORKSPACE = 32 << 20  # bytes: cuBLAS's own default on Hopper


class _CaptureBlas:
    """cuBLAS products for a CUDA graph capture, called through ctypes.

    CuPy refuses every cuBLAS call while the current stream captures (its ``cublas.setStream``
    raises NotImplementedError), but cuBLAS itself can be captured when its handle has a stream
    and a workspace set beforehand (cuBLAS's documentation, "CUDA Graphs Support"). So the capture
    run computes its products here, on the same library CuPy loaded; every other run uses
    ``cupy.matmul``."""

    def __init__(self, cupy: Any, stream_ptr: int, workspace: Any, tf32: bool):
        from cupy_backends.cuda.libs import cublas  # noqa: F401  (loads libcublas into the process)

        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps
                         if "/libcublas.so" in line and "libcublasLt" not in line), None)
        if path is None:
            raise RuntimeError("enable_cuda_graph: libcublas is not loaded in this process; cannot capture products")
        self.cupy = cupy
        self.lib = ctypes.CDLL(path)
        self.tf32 = tf32
        self.workspace = workspace  # kept alive: the graph's products use it
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream_ptr)), "cublasSetStream")
        self._check(self.lib.cublasSetWorkspace_v2(self.handle, ctypes.c_void_p(workspace.data.ptr),
                                                   ctypes.c_size_t(workspace.nbytes)), "cublasSetWorkspace")

    @staticmethod
    def _check(status: int, call: str) -> None:
        if status != 0:
            raise RuntimeError(f"{call} failed with cuBLAS status {status}")

    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b`` with NumPy's rules, for float16/32/64 operands of one dtype."""
        cupy = self.cupy
        if a.ndim == 1:
            return self.matmul(a[None, :], b)[..., 0, :] if b.ndim > 1 else self.matmul(a[None, :], b[:, None])[0, 0]
        if b.ndim == 1:
            return self.matmul(a, b[:, None])[..., 0]
        m, k = a.shape[-2:]
        n = b.shape[-1]
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        count = int(np.prod(batch, dtype=np.int64))
        out = cupy.empty((*batch, m, n), a.dtype)

        def operand(x: Any, rows: int, cols: int) -> tuple[Any, int]:
            if int(np.prod(x.shape[:-2], dtype=np.int64)) == 1:  # one matrix for every batch entry
                return cupy.ascontiguousarray(x.reshape(rows, cols)), 0
            return cupy.ascontiguousarray(cupy.broadcast_to(x, (*batch, rows, cols))), rows * cols

        a_c, stride_a = operand(a, m, k)
        b_c, stride_b = operand(b, k, n)
        if out.size == 0:
            return out
        if k == 0:
            out.fill(0)
            return out
        dtype = _CUDA_TYPE[np.dtype(a.dtype)]
        if a.dtype == np.float64:
            compute, scalar = _COMPUTE_64F, ctypes.c_double
        else:
            compute = _COMPUTE_32F_FAST_TF32 if (self.tf32 and a.dtype == np.float32) else _COMPUTE_32F
            scalar = ctypes.c_float
        alpha, beta = scalar(1.0), scalar(0.0)
        # row-major C = A @ B is column-major C^T = B^T @ A^T: B first, no transposes
        status = self.lib.cublasGemmStridedBatchedEx(
            self.handle, 0, 0, n, m, k, ctypes.byref(alpha),
            ctypes.c_void_p(b_c.data.ptr), dtype, n, ctypes.c_longlong(stride_b),
            ctypes.c_void_p(a_c.data.ptr), dtype, k, ctypes.c_longlong(stride_a),
            ctypes.byref(beta), ctypes.c_void_p(out.data.ptr), dtype, n, ctypes.c_longlong(m * n),
            count, compute, -1)  # -1: CUBLAS_GEMM_DEFAULT
        self._check(status, "cublasGemmStridedBatchedEx")
        return out

    def close(self) -> None:
        if self.handle:
            self.lib.cublasDestroy_v2(self.handle)
            self.handle = ctypes.c_void_p()


class CudaDevice:
    """One session's GPU. See the module docstring."""

    def __init__(self, record: GpuRecord, options: dict[str, Any], memory_name: str):
        import cupy

        self.cupy = cupy
        self.xp = cupy
        self.record = record
        self.device_id = record.index
        self._device = cupy.cuda.Device(self.device_id)
        with self._device:
            # a blocking stream: work on CUDA's legacy default stream (the copies with
            # do_copy_in_default_stream=1) is ordered with it, so no event is needed between them
            # (a CUDA graph is captured on a non-blocking stream, which CUDA requires not to
            # meet the legacy default stream during capture; copies then wait on events)
            self.stream = cupy.cuda.Stream(non_blocking=bool(options["enable_cuda_graph"]))
        self.copy_stream = cupy.cuda.Stream.null if options["do_copy_in_default_stream"] else self.stream
        limit = options["gpu_mem_limit"] or None
        self.arena = Arena(_RawMemory(cupy, self.device_id), MemoryInfo(memory_name, "GPU", self.device_id, 256),
                           options["arena_extend_strategy"], limit)
        self._allocator = cupy.cuda.PythonFunctionAllocator(self._malloc, self._free)
        self.use_tf32 = bool(options["use_tf32"])
        self.prefer_nhwc = bool(options["prefer_nhwc"])
        self.algo_search = options["cudnn_conv_algo_search"]
        self.workspace_limit = None if options["cudnn_conv_use_max_workspace"] else SMALL_CONV_WORKSPACE
        self._uploads: list[tuple[Any, np.ndarray]] = []  # pinned staging buffers of copies in flight
        self._conv_plans: dict[tuple, _ConvPlan | None] = {}  # cuDNN graphs per op and shape
        self._cudnn: Any = None
        self._handle: Any = None
        self._lock = threading.Lock()
        self._graph: Any = None
        self._capture_blas: _CaptureBlas | None = None

    # ------------------------------------------------------------------ CUDA graphs
    def begin_capture(self) -> None:
        """Record the stream's work into a CUDA graph (relaxed mode: the arena may cudaMalloc)."""
        self.synchronize()
        if self._capture_blas is None:
            with self._device, self.cupy.cuda.using_allocator(self._allocator.malloc):
                workspace = self.cupy.empty(CAPTURE_BLAS_WORKSPACE, np.uint8)
            self._capture_blas = _CaptureBlas(self.cupy, self.stream.ptr, workspace, self.use_tf32)
        self.arena.hold_frees()
        self.stream.begin_capture(mode=self.cupy.cuda.runtime.streamCaptureModeRelaxed)

    def end_capture(self) -> None:
        try:
            self._graph = self.stream.end_capture()
        finally:
            self.arena.end_hold()

    def launch_graph(self) -> None:
        self._graph.launch(stream=self.stream)

    # ------------------------------------------------------------------ memory and streams
    def _malloc(self, size: int, device_id: int) -> int:
        return self.arena.allocate(size)

    def _free(self, ptr: int, device_id: int) -> None:
        arena = self.__dict__.get("arena")
        # None: the garbage collector is tearing this device down with its session (a reference
        # cycle) and has cleared it; the arena's finalizer gives its regions back
        if arena is not None:
            arena.free(ptr)

    def launch(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        """Run a kernel body on this device, its stream and its arena."""
        with self._device, self.stream, self.cupy.cuda.using_allocator(self._allocator.malloc):
            return fn(*args)

    def to_device(self, array: Any) -> Any:
        """A host array copied to a new device array, through a pinned staging buffer."""
        array = np.asarray(array, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if array.dtype == BFLOAT16:  # held as its bit patterns (CuPy has no bfloat16)
            return BFloat16Tensor(self.to_device(array.view(np.uint16)))
        if array.dtype not in DEVICE_DTYPES:
            raise TypeError(f"a {array.dtype} tensor cannot be held on the GPU (CuPy has no {array.dtype} arrays)")
        cupy = self.cupy
        with self._device, cupy.cuda.using_allocator(self._allocator.malloc):
            out = cupy.empty(array.shape, array.dtype)
            if array.size:
                pinned = self._pinned(array.shape, array.dtype)
                pinned[...] = array
                out.set(pinned, stream=self.copy_stream)
                # the staging buffer must live until the copy has read it; the compute stream
                # waits for the copy (implicit with the legacy default stream, not with a
                # per-thread one: CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1)
                event = self.copy_stream.record()
                if self.copy_stream is not self.stream:
                    if self.stream.is_capturing():  # a capture cannot wait on work outside it
                        event.synchronize()
                    else:
                        self.stream.wait_event(event)
                self._uploads = [(e, p) for e, p in self._uploads if not e.done]
                self._uploads.append((event, pinned))
        return out

    def to_host(self, tensor: Any) -> np.ndarray:
        """A device array copied into a pinned host array (complete when this returns)."""
        if isinstance(tensor, BFloat16Tensor):
            return self.to_host(tensor.bits).view(BFLOAT16)
        cupy = self.cupy
        if self.stream.is_capturing():  # nothing has run yet: the captured run computes at its end
            raise RuntimeError(CAPTURED_COPY_TO_HOST)
        with self._device, cupy.cuda.using_allocator(self._allocator.malloc):
            if self.copy_stream is not self.stream:
                self.stream.synchronize()  # the compute stream's work on it is done
            with self.stream:
                tensor = cupy.asarray(tensor, order="C")
            out = self._pinned(tensor.shape, tensor.dtype)
            if tensor.size:
                tensor.get(stream=self.copy_stream, out=out)
                self.copy_stream.synchronize()
        return out

    def _pinned(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        import cupyx

        return cupyx.empty_pinned(shape, dtype)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.synchronize()
        self._uploads.clear()
        self._conv_plans.clear()
        self._graph = None
        if self._capture_blas is not None:
            self._capture_blas.close()
            self._capture_blas = None
        self.arena.release_held()
        self.arena.close()
        if self._handle is not None:
            self._cudnn.destroy_handle(self._handle)
            self._handle = None

    # ------------------------------------------------------------------ library calls
    def matmul(self, a: Any, b: Any) -> Any:
        """cuBLAS through ``cupy.matmul``; float32 may use TF32 tensor cores (option use_tf32)."""
        if self._capture_blas is not None and a.dtype == b.dtype and self.stream.is_capturing():
            return self._capture_blas.matmul(a, b)  # CuPy's cuBLAS calls refuse a capturing stream
        if a.dtype == np.float32:
            from cupy._core import _routines_linalg as linalg

            # CuPy keeps one process-wide compute type per dtype: set it for this session's call
            linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32 if self.use_tf32 else linalg.COMPUTE_TYPE_DEFAULT)
        return self.cupy.matmul(a, b)

    def erf(self, x: Any) -> Any:
        import cupyx.scipy.special

        return cupyx.scipy.special.erf(x)

    def conv(self, x: Any, w: Any, pads: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
             group: int) -> Any:
        """ONNX Conv (no bias) through cuDNN's convolution forward."""
        del group  # cuDNN infers it: the weight's channel dimension is C / group
        return self._conv("fprop", x, w, pads, strides, dilations, _conv_out_shape(x.shape, w.shape, pads, strides, dilations))

    def conv_transpose(self, x: Any, w: Any, pads: Sequence[int], strides: Sequence[int],
                       dilations: Sequence[int], group: int, out_shape: tuple[int, ...]) -> Any:
        """ONNX ConvTranspose (no bias) as cuDNN's data gradient of a convolution."""
        del group
        return self._conv("dgrad", x, w, pads, strides, dilations, out_shape)

    def sdpa(self, q: Any, k: Any, v: Any, scale: float, causal: bool) -> Any:
        """cuDNN's fused attention on float16 (B, N, S, H) arrays, or None where cuDNN is missing
        or declines the graph (the caller then computes it with two products and a softmax)."""
        if not self.record.cudnn:
            return None
        key = ("sdpa", q.shape, k.shape, v.shape, float(scale), bool(causal))
        with self._lock:
            if key not in self._conv_plans:
                try:
                    self._conv_plans[key] = self._build_sdpa(q.shape, k.shape, v.shape, scale, causal)
                except Exception:  # cudnnGraphNotSupportedError and kin: not this graph
                    self._conv_plans[key] = None
            plan = self._conv_plans[key]
        if plan is None:
            return None
        cupy = self.cupy
        Q, K, V, Out = plan.tensors
        qc, kc, vc = (cupy.asarray(a, order="C") for a in (q, k, v))
        out = cupy.empty(plan.out_shape, q.dtype)
        workspace = cupy.empty(max(plan.workspace, 1), np.uint8)
        plan.graph.execute({Q: qc.data.ptr, K: kc.data.ptr, V: vc.data.ptr, Out: out.data.ptr}, workspace.data.ptr,
                           handle=self._handle)
        return out

    def _build_sdpa(self, q_shape, k_shape, v_shape, scale, causal) -> _ConvPlan:
        cudnn = self._cudnn_module()
        half = cudnn.data_type.HALF
        graph = cudnn.pygraph(io_data_type=half, intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT, handle=self._handle)
        Q, K, V = (graph.tensor(name=n, dim=list(s), stride=_strides(s, False), data_type=half)
                   for n, s in (("Q", q_shape), ("K", k_shape), ("V", v_shape)))
        Out, _stats = graph.sdpa(name="sdpa", q=Q, k=K, v=V, is_inference=True, attn_scale=float(scale),
                               use_causal_mask=bool(causal))
        out_shape = (*q_shape[:3], v_shape[3])
        Out.set_output(True).set_data_type(half).set_dim(list(out_shape)).set_stride(_strides(out_shape, False))
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans(cudnn.build_plan_policy.HEURISTICS_CHOICE)
        return _ConvPlan(graph, (Q, K, V, Out), int(graph.get_workspace_size()), False, out_shape)

    def _cudnn_module(self) -> Any:
        if self._cudnn is None:
            try:
                import cudnn
            except Exception as exc:
                raise RuntimeError(f"cuDNN is needed for convolutions: {exc}; {CUDNN_HINT}") from exc
            self._cudnn = cudnn
            with self._device:
                self._handle = cudnn.create_handle()
                cudnn.set_stream(handle=self._handle, stream=self.stream.ptr)
        return self._cudnn

    def _conv(self, kind: str, x: Any, w: Any, pads: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int], out_shape: tuple[int, ...]) -> Any:
        cupy = self.cupy
        spatial = x.ndim - 2
        if spatial == 1:  # cuDNN convolves 2-D and 3-D images: a 1-D one is 1 x L
            x, w = x[:, :, None, :], w[:, :, None, :]
            pads = (0, pads[0], 0, pads[1])
            strides, dilations = (1, strides[0]), (1, dilations[0])
            y = self._conv(kind, x, w, pads, strides, dilations, (*out_shape[:2], 1, out_shape[2]))
            return y[:, :, 0, :]
        key = (kind, x.shape, x.dtype.str, w.shape, tuple(pads), tuple(strides), tuple(dilations), out_shape)
        with self._lock:
            plan = self._conv_plans.get(key)
            if plan is None:
                plan = self._conv_plans[key] = self._build_conv(kind, x, w, pads, strides, dilations, out_shape)
        X, W, Y = plan.tensors
        if plan.nhwc:
            perm = (0, *range(2, x.ndim), 1)
            xc, wc = cupy.asarray(x.transpose(perm), order="C"), cupy.asarray(w.transpose(perm), order="C")
            y = cupy.empty(tuple(out_shape[k] for k in perm), x.dtype)
        else:
            xc, wc = cupy.asarray(x, order="C"), cupy.asarray(w, order="C")
            y = cupy.empty(out_shape, x.dtype)
        workspace = cupy.empty(max(plan.workspace, 1), np.uint8)
        pack = {X: xc.data.ptr, W: wc.data.ptr, Y: y.data.ptr}
        if plan.index is None:
            plan.graph.execute(pack, workspace.data.ptr, handle=self._handle)
        else:
            plan.graph.execute_plan_at_index(pack, workspace.data.ptr, plan.index, handle=self._handle)
        if plan.nhwc:
            y = y.transpose(0, x.ndim - 1, *range(1, x.ndim - 1))
        return y

    def _build_conv(self, kind: str, x: Any, w: Any, pads: Sequence[int], strides: Sequence[int],
                    dilations: Sequence[int], out_shape: tuple[int, ...]) -> _ConvPlan:
        cudnn = self._cudnn_module()
        dt = {np.dtype(np.float32): cudnn.data_type.FLOAT, np.dtype(np.float16): cudnn.data_type.HALF}[np.dtype(x.dtype)]
        nhwc = self.prefer_nhwc
        spatial = x.ndim - 2
        graph = cudnn.pygraph(io_data_type=dt, intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT, handle=self._handle)
        X = graph.tensor(name="X", dim=list(x.shape), stride=_strides(x.shape, nhwc), data_type=dt)
        W = graph.tensor(name="W", dim=list(w.shape), stride=_strides(w.shape, nhwc), data_type=dt)
        common = dict(pre_padding=list(pads[:spatial]), post_padding=list(pads[spatial:]), stride=list(strides),
                      dilation=list(dilations), compute_data_type=cudnn.data_type.FLOAT)
        if kind == "fprop":
            Y = graph.conv_fprop(image=X, weight=W, **common)
        else:
            Y = graph.conv_dgrad(loss=X, filter=W, **common)
        Y.set_output(True).set_data_type(dt).set_dim(list(out_shape)).set_stride(_strides(out_shape, nhwc))
        graph.validate()
        graph.build_operation_graph()
        modes = {"EXHAUSTIVE": [cudnn.heur_mode.A, cudnn.heur_mode.B, cudnn.heur_mode.FALLBACK],
                 "HEURISTIC": [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK],
                 "DEFAULT": [cudnn.heur_mode.FALLBACK]}[self.algo_search]
        graph.create_execution_plans(modes)
        if x.dtype == np.float32 and not self.use_tf32:
            graph.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])
        if self.workspace_limit is not None:
            graph.deselect_workspace_greater_than(self.workspace_limit)
        graph.check_support()
        if self.algo_search == "EXHAUSTIVE":
            graph.build_plans(cudnn.build_plan_policy.ALL)
            best = self._time_plans(graph, (X, W, Y), x.shape, w.shape, out_shape, x.dtype, nhwc)
            return _ConvPlan(graph, (X, W, Y), int(graph.get_workspace_size_plan_at_index(best)), nhwc,
                             tuple(out_shape), best)
        graph.build_plans(cudnn.build_plan_policy.HEURISTICS_CHOICE)
        return _ConvPlan(graph, (X, W, Y), int(graph.get_workspace_size()), nhwc, tuple(out_shape))

    def _time_plans(self, graph: Any, tensors: tuple[Any, Any, Any], x_shape: tuple[int, ...],
                    w_shape: tuple[int, ...], y_shape: tuple[int, ...], dtype: np.dtype, nhwc: bool) -> int:
        """cudnn_conv_algo_search=EXHAUSTIVE: the fastest plan on scratch tensors of these shapes
        (onnxruntime times cudnnFindConvolutionForwardAlgorithmEx the same way, once per shape)."""
        cupy = self.cupy
        X, W, Y = tensors
        bufs = [cupy.zeros(int(np.prod(s)), dtype) for s in (x_shape, w_shape, y_shape)]
        pack = {X: bufs[0].data.ptr, W: bufs[1].data.ptr, Y: bufs[2].data.ptr}
        best, best_ms = -1, float("inf")
        for index in range(graph.get_execution_plan_count()):
            try:
                size = graph.get_workspace_size_plan_at_index(index)
            except Exception:  # build_plans(ALL) keeps going past plans that fail to build
                continue
            if self.workspace_limit is not None and size > self.workspace_limit:
                continue
            try:
                workspace = cupy.empty(max(size, 1), np.uint8)
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                graph.execute_plan_at_index(pack, workspace.data.ptr, index, handle=self._handle)  # warm-up
                start.record(self.stream)
                graph.execute_plan_at_index(pack, workspace.data.ptr, index, handle=self._handle)
                end.record(self.stream)
                end.synchronize()
                ms = cupy.cuda.get_elapsed_time(start, end)
            except Exception:  # a plan that did not build or run is not a candidate
                continue
            if ms < best_ms:
                best, best_ms = index, ms
        if best_ms == float("inf"):
            raise RuntimeError(f"cuDNN built no runnable plan for this convolution (x {x_shape}, w {w_shape}, "
                               f"{np.dtype(dtype)})")
        return best


def _strides(shape: Sequence[int], channels_last: bool) -> list[int]:
    """Element strides of a contiguous NC... (or N...C when ``channels_last``) tensor."""
    order = [0, *range(2, len(shape)), 1] if channels_last else list(range(len(shape)))
    strides = [0] * len(shape)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= max(int(shape[axis]), 1)
    return strides


def _conv_out_shape(x: Sequence[int], w: Sequence[int], pads: Sequence[int], strides: Sequence[int],
                    dilations: Sequence[int]) -> tuple[int, ...]:
    n = len(x) - 2
    spatial = tuple(
        (x[2 + k] + pads[k] + pads[n + k] - dilations[k] * (w[2 + k] - 1) - 1) // strides[k] + 1 for k in range(n)
    )
    return (int(x[0]), int(w[0]), *spatial)


def open_device(record: GpuRecord, options: dict[str, Any], memory_name: str) -> CudaDevice:
    """The session's device (the tests' emulation replaces this function)."""
    return CudaDevice(record, options, memory_name)
