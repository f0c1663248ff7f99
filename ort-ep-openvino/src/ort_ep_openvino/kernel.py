"""A fused group as one OpenVINO compiled model, run with pooled infer requests.

Shapes: a group whose inputs have static shapes is compiled once, at session creation. A group
with symbolic dimensions is compiled at creation as a dynamic-shape model (OpenVINO's CPU and
GPU plugins run any shape with it; compiling it also proves the group compiles), and, because a
static-shape model runs markedly faster (CNN batch 8: 19 vs 23 ms; OCR detector batch 8: 274
vs 455 ms on the test machine), each of the first ``shape_cache_size`` input shapes seen gets
its own static compiled model; later new shapes use the dynamic model, so a stream of ever new
shapes costs no recompilation. With ``disable_dynamic_shapes`` (and always on NPU, which compiles
static shapes only) every shape gets a static model, kept in an LRU of ``shape_cache_size``.

Thread safety: a compiled model is shared; infer requests are not, so each run takes one from a
pool (creating one when all are busy) and gives it back.
"""

from __future__ import annotations

import io
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _ov
from .options import CompileSettings

#: what a group input is: its value name, numpy dtype (None if unknown), rank (None if unknown)
InputSpec = tuple[str, "np.dtype | None", "int | None"]


def _numpy_dtype(port: Any) -> np.dtype | None:
    try:
        return np.dtype(port.get_element_type().to_dtype())
    except Exception:  # an element type numpy has no dtype for
        return None


def _match_inputs(ports: Sequence[Any], inputs: Sequence[InputSpec], label: str) -> list[int]:
    """For each OpenVINO parameter, the position of the group input it reads.

    By tensor or friendly name first. The frontend may drop inputs a node ignores and rename a
    parameter that passes straight to an output (Dropout in inference: x is renamed y); such a
    parameter takes the first unmatched input of its element type and rank, in order.
    """
    names = [name for name, _, _ in inputs]
    positions: list[int | None] = []
    for port in ports:
        found = [n for n in (*port.get_names(), port.get_node().get_friendly_name()) if n in names]
        positions.append(names.index(found[0]) if found else None)
    for k, port in enumerate(ports):
        if positions[k] is not None:
            continue
        shape = port.get_partial_shape()
        rank = None if shape.rank.is_dynamic else shape.rank.get_length()
        dtype = _numpy_dtype(port)
        for j, (_, want_dtype, want_rank) in enumerate(inputs):
            if j in positions:
                continue
            if (dtype is None or want_dtype is None or dtype == want_dtype) and (
                rank is None or want_rank is None or rank == want_rank
            ):
                positions[k] = j
                break
        else:
            raise ValueError(f"OpenVINO input {port.get_any_name()!r} of {label} matches none of its inputs {names}")
    return [p for p in positions if p is not None]


def reported_precisions(compiled: Any) -> dict[str, str]:
    """What OpenVINO says a compiled model runs in: execution device -> element type ("f32",
    "bf16", "f16"). A meta device (AUTO, HETERO, MULTI) answers per device through
    DEVICE_PROPERTIES; a physical one directly."""
    devices = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]
    try:
        per_device = compiled.get_property("DEVICE_PROPERTIES")
    except Exception:  # a physical device's compiled model has no DEVICE_PROPERTIES
        per_device = None
    if isinstance(per_device, dict):
        return {d: _type_name(p["INFERENCE_PRECISION_HINT"]) for d, p in per_device.items()
                if "INFERENCE_PRECISION_HINT" in p}
    hint = _type_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
    return {d: hint for d in devices}


def _type_name(value: Any) -> str:
    return value.to_string() if hasattr(value, "to_string") else str(value)


class _Compiled:
    """A compiled model and its pool of idle infer requests."""

    def __init__(self, compiled: Any):
        self.compiled = compiled
        self._tensor = _ov.load().Tensor
        self._dtypes = [_numpy_dtype(p) for p in compiled.inputs]
        self._outputs = range(len(compiled.outputs))
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    def infer(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        with self._lock:
            request = self._idle.pop() if self._idle else None
        if request is None:
            request = self.compiled.create_infer_request()
        try:
            # Inputs are set as tensors over our numpy buffers (no copy in) and the request is
            # run without arguments: ~20 us per run less than infer(list), which goes through
            # OpenVINO's Python data dispatcher. What the dispatcher would do is done here: a
            # mismatched dtype is cast, a read-only buffer (OpenVINO cannot wrap it) copied.
            # A tensor over shared memory does not keep its array alive: the casts and copies
            # are held until the run ends (freed at once, a later copy took the same memory,
            # and two inputs read one buffer: wrong shapes downstream).
            held = []
            for k, (x, dtype) in enumerate(zip(inputs, self._dtypes)):
                if dtype is not None and x.dtype != dtype:
                    x = x.astype(dtype)
                elif not x.flags.writeable:
                    x = x.copy()
                held.append(x)
                request.set_input_tensor(k, self._tensor(x, shared_memory=True))
            request.infer()
            # copied out: the request reuses its output buffers on the next run
            return tuple(request.get_output_tensor(k).data.copy() for k in self._outputs)
        finally:
            with self._lock:
                self._idle.append(request)


class GroupKernel:
    """Runs one claimed group: ``__call__(*inputs)`` returns the outputs in order."""

    def __init__(self, model_bytes: bytes, settings: CompileSettings, inputs: Sequence[InputSpec],
                 output_names: Sequence[str], output_dtypes: Sequence[np.dtype | None], label: str):
        self.label = label
        self.settings = settings
        core = _ov.core()
        with _ov.CALL_LOCK:
            self.model = core.read_model(model_bytes)
        # OpenVINO's parameters and results are matched to ours by tensor name, not position:
        # the frontend may drop inputs it does not read (or that were embedded as constants)
        self._feed = _match_inputs(self.model.inputs, inputs, label)
        results = {name: k for k, r in enumerate(self.model.outputs) for name in r.get_names()}
        missing = [n for n in output_names if n not in results]
        if missing:
            raise ValueError(f"OpenVINO's model of {label} has no output named {', '.join(map(repr, missing))}")
        self._take = [results[n] for n in output_names]
        self._output_dtypes = tuple(output_dtypes)
        self._static_model = all(not p.get_partial_shape().is_dynamic for p in self.model.inputs)
        self._lock = threading.Lock()
        self._by_shape: OrderedDict[tuple[tuple[int, ...], ...], _Compiled] = OrderedDict()
        self._single: _Compiled | None = None  # the static model, or the dynamic one
        self.compilations = 0  # how many times this group was compiled (tests read it)
        self.precisions: dict[str, str] = {}  # what OpenVINO reported at the last compilation
        if self._static_model or settings.dynamic:
            self._single = self._compile(self.model)
        self._per_shape = not self._static_model

    def _compile(self, model: Any) -> _Compiled:
        with _ov.CALL_LOCK:
            compiled = _ov.core().compile_model(model, self.settings.device_type, self.settings.config)
        self.compilations += 1
        self.precisions = reported_precisions(compiled)
        if self.settings.precision == "FP32":
            # the precision the note states is the one OpenVINO must report, on every device
            # it runs on (a CPU plugin left without a hint runs in bf16 where the CPU has it)
            wrong = {d: t for d, t in self.precisions.items() if t != "f32"}
            if wrong:
                raise ValueError(f"FP32 was asked, but OpenVINO compiled {self.label} for "
                                 + ", ".join(f"{d} in {t}" for d, t in sorted(wrong.items())))
        return _Compiled(compiled)

    def _for_shapes(self, inputs: Sequence[np.ndarray]) -> _Compiled:
        key = tuple(tuple(x.shape) for x in inputs)
        with self._lock:
            entry = self._by_shape.get(key)
            if entry is not None:
                self._by_shape.move_to_end(key)
                return entry
            if self._single is not None and len(self._by_shape) >= self.settings.shape_cache_size:
                return self._single  # the cache is full: the dynamic model serves new shapes
            ov = _ov.load()
            model = self.model.clone()
            model.reshape({p: ov.PartialShape(list(s)) for p, s in zip(model.inputs, key)})
            entry = self._compile(model)
            self._by_shape[key] = entry
            while len(self._by_shape) > self.settings.shape_cache_size:
                self._by_shape.popitem(last=False)
            return entry

    def export(self) -> bytes | None:
        """The compiled model that serves every shape, as OpenVINO exports it
        (``CompiledModel.export_model``), or None when each shape has its own static model
        (NPU, ``disable_dynamic_shapes``): there is no one compiled form to save."""
        if self._single is None:
            return None
        return self._single.compiled.export_model().getvalue()

    @property
    def cached_shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        with self._lock:
            return list(self._by_shape)

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        # OpenVINO reads C-contiguous buffers in place; np.ascontiguousarray would turn a
        # 0-d array into 1-d, so only non-contiguous inputs are copied
        arrays = [
            x if isinstance(x, np.ndarray) and x.flags.c_contiguous else np.array(x, order="C")
            for x in (inputs[k] for k in self._feed)
        ]
        try:
            compiled = self._for_shapes(arrays) if self._per_shape else self._single
            outputs = compiled.infer(arrays)
        except RuntimeError as exc:
            raise RuntimeError(f"OpenVINO: {openvino_message(exc)}") from exc
        result = []
        for k, dtype in zip(self._take, self._output_dtypes):
            out = outputs[k]
            # OpenVINO may hand back another element type than the ONNX graph declares
            # (e.g. f64 computed as f32); deliver the declared one
            if dtype is not None and out.dtype != dtype:
                out = out.astype(dtype)
            result.append(out)
        return result


class ImportedKernel(GroupKernel):
    """A group compiled earlier, imported from its exported blob (an EPContext node): no
    compilation. It runs like a ``GroupKernel`` whose one model serves every shape."""

    def __init__(self, blob: bytes, settings: CompileSettings, inputs: Sequence[InputSpec],
                 output_names: Sequence[str], output_dtypes: Sequence[np.dtype | None], label: str):
        self.label = label
        self.settings = settings
        with _ov.CALL_LOCK:
            compiled = _ov.core().import_model(io.BytesIO(blob), settings.device_type, settings.config)
        self._feed = _match_inputs(compiled.inputs, inputs, label)
        results = {name: k for k, r in enumerate(compiled.outputs) for name in r.get_names()}
        missing = [n for n in output_names if n not in results]
        if missing:
            raise ValueError(f"the imported model of {label} has no output named {', '.join(map(repr, missing))}")
        self._take = [results[n] for n in output_names]
        self._output_dtypes = tuple(output_dtypes)
        self._lock = threading.Lock()
        self._by_shape = OrderedDict()
        self._single = _Compiled(compiled)
        self._per_shape = False
        self.compilations = 0


def openvino_message(exc: BaseException) -> str:
    """OpenVINO's message without the lines that say where in its C++ sources it was thrown
    ("Exception from src/inference/src/cpp/compiled_model.cpp:128:", "Check '...' failed at
    src/...cpp:117:"), which users cannot act on."""
    kept = []
    for line in (ln.strip() for ln in str(exc).splitlines()):
        if not line or _SOURCE_LINE.match(line):
            continue
        kept.append(_SOURCE_REF.sub("", line).strip())
    return " ".join(k for k in kept if k) or type(exc).__name__


_SOURCE_LINE = re.compile(r"^(Exception from \S+:\d+:|Check .* failed at \S+:\d+:?)$")
_SOURCE_REF = re.compile(r"(Exception from |at )?\S+\.(cpp|hpp|h):\d+:?")
