"""A session's QNN objects: log, backend, device, contexts and graphs, built from ``OpSpec``s.

One ``Backend`` per session (made in ``ort_session_start``, freed in ``ort_session_end``):
QNN's log goes through a ctypes callback to the ``ort_core.qnn`` logger; validation
(``backendValidateOpConfig``) and every context use that backend. A fused group becomes one
context holding one graph (``Graph``), so that its binary can be exported on its own.
"""

from __future__ import annotations

import ctypes as C
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _qnn as Q

logger = logging.getLogger("ort_core.qnn")

# --- QNN's log -> the ort_core logger ------------------------------------------------------------

_libc = C.CDLL(None)
_vsnprintf = _libc.vsnprintf
_vsnprintf.restype = C.c_int
_vsnprintf.argtypes = [C.c_char_p, C.c_size_t, C.c_char_p, C.c_void_p]
# QNN's warnings are routine (the simulator warns on every graph about settings it ignores):
# they are INFO here, so a session at the default severity (warning) shows QNN's errors only
_LEVELS = {Q.LOG_ERROR: logging.ERROR, Q.LOG_WARN: logging.INFO, Q.LOG_INFO: logging.INFO,
           Q.LOG_VERBOSE: logging.DEBUG, Q.LOG_DEBUG: logging.DEBUG}


_capture = threading.local()  # while validating: QNN's messages are collected, logged at DEBUG


def _log(fmt: bytes, level: int, timestamp: int, args: int) -> None:
    # on x86-64 and aarch64 a va_list parameter arrives as a pointer, which vsnprintf takes;
    # a va_list may be read once, hence one fixed-size buffer
    try:
        buf = C.create_string_buffer(2048)
        _vsnprintf(buf, len(buf), fmt, args)
        text = buf.value.decode(errors="replace").strip()
        lines = getattr(_capture, "lines", None)
        if "unexpected GraphHtpSettings option 66" in text:
            # the simulator logs this error on every graph, with or without graph configs
            logger.debug("QNN: %s", text)
        elif lines is not None:
            lines.append(text)
            logger.debug("QNN: %s", text)
        else:
            logger.log(_LEVELS.get(level, logging.DEBUG), "QNN: %s", text)
    except Exception:  # never raise into C
        pass


_LOG_CALLBACK = Q.LOG_CALLBACK(_log)  # kept alive for the process: QNN may log at any time

#: a QNN log line's level tag: <E>, <W>, <I>, <V>, <D>
_TAG = re.compile(r"<[EWIVD]> ")


def _cause(lines: list[str]) -> str:
    """The line of QNN's log about a refused op that names the cause: the first of the untagged
    lines just before its first <E> line ("Out[0] has incorrect dimension ...", then "<E>
    validateNativeOps ... failed"); at a verbose log level QNN's tagged <V>/<I> lines and untagged
    setup lines come first and say nothing of it. Else the first untagged line, or the first."""
    first_error = next((k for k, line in enumerate(lines) if line.startswith("<E>")), None)
    if first_error is not None:
        k = first_error
        while k > 0 and not _TAG.match(lines[k - 1]):
            k -= 1
        return lines[k]
    return next((line for line in lines if not _TAG.match(line)), lines[0] if lines else "")


def qnn_log_level() -> int:
    """The QNN log level matching the ``ort_core.qnn`` logger's effective level."""
    level = logger.getEffectiveLevel()
    if level <= logging.DEBUG:
        return Q.LOG_VERBOSE
    if level <= logging.INFO:
        return Q.LOG_INFO
    return Q.LOG_ERROR


# --- what a graph is made of ---------------------------------------------------------------------

NUMPY_TO_QNN = {
    np.dtype(np.float32): Q.DT_FLOAT_32, np.dtype(np.float16): Q.DT_FLOAT_16,
    np.dtype(np.int32): Q.DT_INT_32, np.dtype(np.int64): Q.DT_INT_64, np.dtype(np.uint32): Q.DT_UINT_32,
    np.dtype(np.int8): Q.DT_INT_8, np.dtype(np.uint8): Q.DT_UINT_8, np.dtype(np.int16): Q.DT_INT_16,
    np.dtype(np.uint16): Q.DT_UINT_16, np.dtype(np.bool_): Q.DT_BOOL_8, np.dtype(np.uint64): Q.DT_UINT_64,
}
QUANTIZED = {np.dtype(np.uint8): Q.DT_UFIXED_8, np.dtype(np.uint16): Q.DT_UFIXED_16,
             np.dtype(np.int8): Q.DT_SFIXED_8, np.dtype(np.int16): Q.DT_SFIXED_16,
             np.dtype(np.int32): Q.DT_SFIXED_32}


@dataclass
class TensorSpec:
    """One QNN tensor: ``kind`` is "in" (fed by the caller), "out" (read back), "native"
    (inside the graph) or "static" (``data`` baked into the graph). ``quant`` is
    (scale, zero_point) for a quantized tensor: QNN's offset is the negated zero point.
    ``axis_quant`` is (axis, scales, zero points) for a constant quantized per channel
    (per-channel weights and their biases)."""

    name: str
    dtype: np.dtype
    dims: tuple[int, ...]
    kind: str = "native"
    data: np.ndarray | None = None
    quant: tuple[float, int] | None = None
    axis_quant: tuple[int, tuple[float, ...], tuple[int, ...]] | None = None

    @property
    def quantized(self) -> bool:
        return self.quant is not None or self.axis_quant is not None

    @property
    def qnn_dtype(self) -> int:
        return QUANTIZED[self.dtype] if self.quantized else NUMPY_TO_QNN[self.dtype]


@dataclass
class OpSpec:
    """One QNN node: its op type, tensors and params. A param is a Python scalar
    (bool, int -> uint32 or int32, float) or a numpy array (a static tensor param)."""

    name: str
    type_name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    params: dict[str, Any] = field(default_factory=dict)


_TYPES = {"in": Q.TENSOR_APP_WRITE, "out": Q.TENSOR_APP_READ, "native": Q.TENSOR_NATIVE, "static": Q.TENSOR_STATIC}


class _Keep:
    """Holds the Python objects a ctypes struct points into, for as long as it is used."""

    def __init__(self) -> None:
        self.refs: list[Any] = []

    def keep(self, obj: Any) -> Any:
        self.refs.append(obj)
        return obj


def fill_tensor(t: Q.Tensor, spec: TensorSpec, keep: _Keep, id_: int = 0) -> None:
    t.version = Q.TENSOR_VERSION_1
    v = t.v1
    v.id = id_
    v.name = keep.keep(spec.name.encode())
    v.type = _TYPES[spec.kind]
    v.dataFormat = 0  # flat buffer
    v.dataType = spec.qnn_dtype
    q = v.quantizeParams
    if spec.axis_quant is not None:
        axis, scales, zero_points = spec.axis_quant
        q.encodingDefinition, q.quantizationEncoding = Q.DEFINITION_DEFINED, Q.ENCODING_AXIS_SCALE_OFFSET
        pairs = keep.keep((Q.ScaleOffset * len(scales))(*[Q.ScaleOffset(float(sc), -int(zp))
                                                           for sc, zp in zip(scales, zero_points)]))
        enc = q.axisScaleOffsetEncoding
        enc.axis, enc.numScaleOffsets = axis, len(scales)
        enc.scaleOffset = C.cast(pairs, C.POINTER(Q.ScaleOffset))
    elif spec.quant is None:
        q.encodingDefinition, q.quantizationEncoding = Q.DEFINITION_UNDEFINED, Q.ENCODING_UNDEFINED
    else:
        q.encodingDefinition, q.quantizationEncoding = Q.DEFINITION_DEFINED, Q.ENCODING_SCALE_OFFSET
        q.scaleOffsetEncoding.scale = float(spec.quant[0])
        q.scaleOffsetEncoding.offset = -int(spec.quant[1])
    v.rank = len(spec.dims)
    if spec.dims:
        dims = keep.keep((C.c_uint32 * len(spec.dims))(*spec.dims))
        v.dimensions = C.cast(dims, C.POINTER(C.c_uint32))
    else:  # QNN wants a rank-0 tensor's dimensions NULL
        v.dimensions = None
    v.memType = Q.MEMTYPE_RAW
    if spec.data is not None:
        data = keep.keep(np.ascontiguousarray(spec.data))
        v.clientBuf.data = data.ctypes.data
        v.clientBuf.dataSize = data.nbytes
    else:
        v.clientBuf.data = None
        v.clientBuf.dataSize = 0


def _fill_param(p: Q.Param, name: str, value: Any, keep: _Keep, tensor_ids: dict[int, int] | None,
                op_name: str) -> None:
    p.name = keep.keep(name.encode())
    if isinstance(value, np.ndarray):
        p.paramType = Q.PARAM_TENSOR
        spec = TensorSpec(f"{op_name}.{name}", value.dtype, tuple(value.shape), "static", value)
        fill_tensor(p.tensorParam, spec, keep)
        if tensor_ids is not None:
            tensor_ids[id(p)] = 0
        return
    p.paramType = Q.PARAM_SCALAR
    s = p.scalarParam
    if isinstance(value, np.int32):  # an op that wants a signed param (Gather's axis)
        s.dataType, s.int32Value = Q.DT_INT_32, int(value)
    elif isinstance(value, bool):
        s.dataType, s.bool8Value = Q.DT_BOOL_8, int(value)
    elif isinstance(value, float):
        s.dataType, s.floatValue = Q.DT_FLOAT_32, value
    elif isinstance(value, int) and value >= 0:
        s.dataType, s.uint32Value = Q.DT_UINT_32, value
    elif isinstance(value, int):
        s.dataType, s.int32Value = Q.DT_INT_32, value
    else:
        raise TypeError(f"param {name}: {value!r}")


def op_config(op: OpSpec, keep: _Keep, tensors: dict[str, Q.Tensor] | None = None,
              lib: Q.Library | None = None, graph: Any = None) -> Q.OpConfig:
    """``op`` as a Qnn_OpConfig_t. With ``tensors`` (name -> created graph tensor) the node
    refers to the graph's tensors; tensor params are created in ``graph`` first."""
    cfg = Q.OpConfig()
    cfg.version = Q.OPCONFIG_VERSION_1
    v = cfg.v1
    v.name = keep.keep(op.name.encode())
    v.packageName = Q.OP_PACKAGE
    v.typeName = keep.keep(op.type_name.encode())
    params = keep.keep((Q.Param * max(len(op.params), 1))())
    for k, (name, value) in enumerate(op.params.items()):
        _fill_param(params[k], name, value, keep, None, op.name)
        if graph is not None and params[k].paramType == Q.PARAM_TENSOR:
            lib.call("tensorCreateGraphTensor", graph, C.byref(params[k].tensorParam))
    v.numOfParams, v.params = len(op.params), params
    for attr, specs in (("inputTensors", op.inputs), ("outputTensors", op.outputs)):
        arr = keep.keep((Q.Tensor * max(len(specs), 1))())
        for k, spec in enumerate(specs):
            if tensors is not None:
                C.memmove(C.byref(arr[k]), C.byref(tensors[spec.name]), C.sizeof(Q.Tensor))
            else:
                fill_tensor(arr[k], spec, keep)
        setattr(v, attr, arr)
    v.numOfInputs, v.numOfOutputs = len(op.inputs), len(op.outputs)
    return cfg


#: QNN objects alive in this process, by kind (tests read it to prove handles are freed)
LIVE: dict[str, int] = {"backend": 0, "context": 0, "profile": 0}
_live_lock = threading.Lock()


def _count(kind: str, delta: int) -> None:
    with _live_lock:
        LIVE[kind] += delta


# --- profiling -----------------------------------------------------------------------------------

#: the columns onnxruntime's QNN EP writes to its profiling CSV (so its readers read ours)
PROFILE_CSV_HEADER = "Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier"
_PROFILE_LEVELS = {"basic": Q.PROFILE_LEVEL_BASIC, "detailed": Q.PROFILE_LEVEL_DETAILED}


class Profiler:
    """QNN's profile API for one session (``profiling_level`` basic or detailed).

    Each graph gets its own profile handle (``create``), passed to its graphFinalize and every
    graphExecute, so the events read after a call are that graph's. A call replaces the
    handle's events (measured on the simulator: the same event ids, new values, after each
    execute), so ``report`` writes every root event, each followed by its sub-events (per QNN
    node with ``detailed``), after each call. The rows go to
    ``profiling_file_path`` as onnxruntime writes them (appended; the header when the file is
    new), or to the ``ort_core.qnn`` logger at INFO when no file is named."""

    def __init__(self, lib: Q.Library, level: str, path: str = ""):
        self.lib = lib
        self.level = _PROFILE_LEVELS[level]
        self.path = path
        # the extended event data carry a timestamp (the CSV's first column); onnxruntime uses
        # them when the backend says it has them, as here (the low 16 bits: the property code)
        code = int(lib.fn("propertyHasCapability")(Q.PROPERTY_PROFILE_SUPPORTS_EXTENDED_EVENT))
        self.extended = (code & 0xFFFF) == 0
        self._lock = threading.Lock()  # graphs of one session may report from several threads

    def create(self, backend: Any) -> C.c_void_p:
        handle = C.c_void_p()
        self.lib.call("profileCreate", backend, self.level, C.byref(handle))
        _count("profile", 1)
        return handle

    def free(self, handle: C.c_void_p) -> None:
        code = self.lib.fn("profileFree")(handle)
        if code:
            logger.warning("QNN profileFree returned %d (%s)", code, self.lib.message(int(code)))
        _count("profile", -1)

    def _ids(self, name: str, key: Any) -> list[int]:
        ids = C.POINTER(C.c_uint64)()
        count = C.c_uint32()
        self.lib.call(name, key, C.byref(ids), C.byref(count))
        return [int(ids[k]) for k in range(count.value)]

    def _rows(self, event: int, level: str, rows: list[str]) -> None:
        if self.extended:
            ext = Q.ProfileExtendedEventData()
            self.lib.call("profileGetExtendedEventData", event, C.byref(ext))
            if ext.version != Q.PROFILE_DATA_VERSION_1:
                return  # a later layout than this one knows: skipped, as onnxruntime does
            data = ext.v1
            stamp, value = str(data.timestamp), _scalar_text(data.value)
        else:
            data = Q.ProfileEventData()
            self.lib.call("profileGetEventData", event, C.byref(data))
            # the basic event data have no timestamp: onnxruntime writes UNKNOWN there too
            stamp, value = "UNKNOWN", str(data.value)
        kind = Q.PROFILE_EVENT_TYPES.get(data.type, "BACKEND" if data.type > 1000 else "UNKNOWN")
        ident = (data.identifier or b"NULL").decode(errors="replace").replace(",", ";").replace("\n", " ")
        rows.append(f"{stamp},{kind},{value},{Q.PROFILE_UNITS.get(data.unit, 'UNKNOWN')},BACKEND,{level},{ident}")
        for sub in self._ids("profileGetSubEvents", C.c_uint64(event)):
            self._rows(sub, "SUB-EVENT", rows)

    def report(self, handle: C.c_void_p, graph: str) -> int:
        """Write the events of ``handle`` (those of the last call it was given); returns how many rows."""
        rows: list[str] = []
        for event in self._ids("profileGetEvents", handle):
            self._rows(event, "ROOT", rows)
        if not rows:
            return 0
        with self._lock:
            if self.path:
                import os

                new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
                with open(self.path, "a", encoding="utf-8") as f:
                    if new:
                        f.write(PROFILE_CSV_HEADER + "\n")
                    f.write("\n".join(rows) + "\n")
            else:
                for row in rows:
                    logger.info("QNN profile %s: %s", graph, row)
        return len(rows)


def _scalar_text(s: Q.Scalar) -> str:
    """An extended event's value (a Qnn_Scalar_t) as text."""
    fields = {Q.DT_INT_8: "int8Value", Q.DT_INT_16: "int16Value", Q.DT_INT_32: "int32Value",
              Q.DT_INT_64: "int64Value", Q.DT_UINT_8: "uint8Value", Q.DT_UINT_16: "uint16Value",
              Q.DT_UINT_32: "uint32Value", Q.DT_UINT_64: "uint64Value", Q.DT_FLOAT_32: "floatValue",
              Q.DT_FLOAT_64: "doubleValue"}
    name = fields.get(s.dataType)
    return str(getattr(s, name)) if name else "UNKNOWN"


# --- the backend -----------------------------------------------------------------------------


class Backend:
    """QNN log + backend + device for one session."""

    def __init__(self, lib: Q.Library, profiling: str = "off", profiling_file_path: str = ""):
        self.lib = lib
        self.profiler = Profiler(lib, profiling, profiling_file_path) if profiling != "off" else None
        self.log = C.c_void_p()
        self.backend = C.c_void_p()
        self.device = C.c_void_p()
        self._lock = threading.Lock()
        self._closed = False
        lib.call("logCreate", _LOG_CALLBACK, qnn_log_level(), C.byref(self.log))
        _count("backend", 1)
        try:
            lib.call("backendCreate", self.log, None, C.byref(self.backend))
            lib.call("deviceCreate", self.log, None, C.byref(self.device))
        except Exception:
            self.close()
            raise
        self.contexts: list[Context] = []

    def validate(self, op: OpSpec) -> tuple[int, str, str]:
        """backendValidateOpConfig's answer for ``op``: (0, "", "") or (code, QNN's message,
        the first line QNN logged about it)."""
        keep = _Keep()
        cfg = op_config(op, keep)
        _capture.lines = []
        try:
            code = int(self.lib.fn("backendValidateOpConfig")(self.backend, cfg))
        finally:
            lines, _capture.lines = _capture.lines, None
        if code == 0:
            return 0, "", ""
        return code, self.lib.message(code), _cause(lines)

    def close(self) -> None:
        """Free every context, then device, backend and log (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for ctx in getattr(self, "contexts", []):
                ctx.close()
            for name, handle in (("deviceFree", self.device), ("backendFree", self.backend), ("logFree", self.log)):
                if handle:
                    code = self.lib.fn(name)(handle)
                    if code:
                        logger.warning("QNN %s returned %d (%s)", name, code, self.lib.message(int(code)))
            _count("backend", -1)


class Context:
    """A QNN context holding one graph, built from OpSpecs or loaded from a binary."""

    def __init__(self, backend: Backend, graph_name: str, configs: Sequence[Any] = (),
                 graph_configs: Sequence[Any] = ()):
        self.backend = backend
        self.lib = backend.lib
        self.handle = C.c_void_p()
        self.graph = C.c_void_p()
        self.graph_name = graph_name
        self._keep = _Keep()
        self._closed = False
        self._context_configs = self._null_terminated(configs)
        self._graph_configs = self._null_terminated(graph_configs)
        self.ids: dict[str, int] = {}  # tensor name -> the id QNN gave it (execute refers to it)
        self.profile = C.c_void_p()  # this graph's QNN profile handle, when the session profiles
        backend.contexts.append(self)

    def _profile(self) -> Any:
        """The profile handle to pass to a QNN call (None without profiling)."""
        profiler = self.backend.profiler
        if profiler is None:
            return None
        if not self.profile:
            self.profile = profiler.create(self.backend.backend)
        return self.profile

    def _report(self) -> None:
        if self.profile:
            self.backend.profiler.report(self.profile, self.graph_name)

    def _null_terminated(self, configs: Sequence[Any]) -> Any:
        if not configs:
            return None
        arr = self._keep.keep((C.c_void_p * (len(configs) + 1))(*[C.addressof(c) for c in configs], None))
        for c in configs:
            self._keep.keep(c)
        return arr

    def build(self, ops: Sequence[OpSpec]) -> None:
        """Create the graph, its tensors and nodes, and finalize it."""
        lib = self.lib
        lib.call("contextCreate", self.backend.backend, self.backend.device, self._context_configs, C.byref(self.handle))
        _count("context", 1)
        lib.call("graphCreate", self.handle, self.graph_name.encode(), self._graph_configs, C.byref(self.graph))
        tensors: dict[str, Q.Tensor] = {}
        for op in ops:
            for spec in (*op.inputs, *op.outputs):
                if spec.name in tensors:
                    continue
                t = self._keep.keep(Q.Tensor())
                fill_tensor(t, spec, self._keep)
                lib.call("tensorCreateGraphTensor", self.graph, C.byref(t))
                tensors[spec.name] = t
                self.ids[spec.name] = t.v1.id
        for op in ops:
            cfg = op_config(op, self._keep, tensors, lib, self.graph)
            try:
                lib.call("graphAddNode", self.graph, cfg)
            except Q.QnnError as exc:
                raise Q.QnnError(f"graphAddNode({op.name}: {op.type_name})", exc.code, exc.qnn_message) from None
        _capture.lines = []
        try:
            lib.call("graphFinalize", self.graph, self._profile(), None)
        except Q.QnnError as exc:
            exc.log = list(_capture.lines)
            culprits = [ln.split('"')[1] for ln in exc.log if "generated: could not create op" in ln and '"' in ln]
            exc.culprits = culprits
            if culprits:
                exc.args = (f"{exc.args[0]}; QNN could not create op {culprits[0]!r}",)
            raise
        finally:
            _capture.lines = None
        self._report()

    def load(self, binary: bytes, ids: dict[str, int]) -> None:
        """Create the context from ``binary`` and retrieve its graph; ``ids`` are its I/O
        tensors' ids, as ``build`` found them."""
        self.ids = dict(ids)
        buf = self._keep.keep(C.create_string_buffer(binary, len(binary)))
        self.lib.call("contextCreateFromBinary", self.backend.backend, self.backend.device, self._context_configs,
                      buf, len(binary), C.byref(self.handle), self._profile())
        _count("context", 1)
        self._report()
        self.lib.call("graphRetrieve", self.handle, self.graph_name.encode(), C.byref(self.graph))

    def binary(self) -> bytes:
        size = C.c_uint64()
        self.lib.call("contextGetBinarySize", self.handle, C.byref(size))
        buf = C.create_string_buffer(size.value)
        written = C.c_uint64()
        self.lib.call("contextGetBinary", self.handle, buf, size.value, C.byref(written))
        return buf.raw[: written.value]

    def execute(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> None:
        """Run the graph: ``inputs`` carry data, ``outputs`` carry the buffers to fill."""
        keep = _Keep()
        ins = (Q.Tensor * max(len(inputs), 1))()
        outs = (Q.Tensor * max(len(outputs), 1))()
        for arr, specs in ((ins, inputs), (outs, outputs)):
            for k, spec in enumerate(specs):
                fill_tensor(arr[k], spec, keep, self.ids[spec.name])
        self.lib.call("graphExecute", self.graph, ins, len(inputs), outs, len(outputs), self._profile(), None)
        self._report()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.handle:
            code = self.lib.fn("contextFree")(self.handle, None)
            if code:
                logger.warning("QNN contextFree returned %d (%s)", code, self.lib.message(int(code)))
            self.handle = C.c_void_p()
            _count("context", -1)
        if self.profile:
            self.backend.profiler.free(self.profile)
            self.profile = C.c_void_p()
