"""A fused group as one OpenVINO compiled model, run with pooled infer requests.

Dynamic shapes: by default the group is compiled once as a dynamic-shape model (OpenVINO's CPU
and GPU plugins run any input shape). With ``disable_dynamic_shapes`` (or on NPU, which compiles
static shapes only) the model is reshaped to each new input shape and compiled; the compiled
models are kept in an LRU cache of ``shape_cache_size`` entries.

Thread safety: a compiled model is shared; infer requests are not, so each run takes one from a
pool (creating one when all are busy) and gives it back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _ov
from .options import CompileSettings


class _Compiled:
    """A compiled model and its pool of idle infer requests."""

    def __init__(self, compiled: Any):
        self.compiled = compiled
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    def infer(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        with self._lock:
            request = self._idle.pop() if self._idle else None
        if request is None:
            request = self.compiled.create_infer_request()
        try:
            # share_inputs: OpenVINO reads our numpy buffers in place (no copy in);
            # outputs are copied out because the request reuses its buffers on the next run
            result = request.infer(list(inputs), share_inputs=True, share_outputs=False)
            return result.to_tuple()
        finally:
            with self._lock:
                self._idle.append(request)


class GroupKernel:
    """Runs one claimed group: ``__call__(*inputs)`` returns the outputs in order."""

    def __init__(self, model_bytes: bytes, settings: CompileSettings, output_dtypes: Sequence[np.dtype | None],
                 label: str):
        self.label = label
        self.settings = settings
        core = _ov.core()
        self.model = core.read_model(model_bytes)
        self._output_dtypes = tuple(output_dtypes)
        self._static_model = all(not p.get_partial_shape().is_dynamic for p in self.model.inputs)
        self._lock = threading.Lock()
        self._by_shape: OrderedDict[tuple[tuple[int, ...], ...], _Compiled] = OrderedDict()
        self._single: _Compiled | None = None
        self.compilations = 0  # how many times this group was compiled (tests read it)
        if self._static_model or settings.dynamic:
            self._single = self._compile(self.model)

    def _compile(self, model: Any) -> _Compiled:
        compiled = _ov.core().compile_model(model, self.settings.device_type, self.settings.config)
        self.compilations += 1
        return _Compiled(compiled)

    def _for_shapes(self, inputs: Sequence[np.ndarray]) -> _Compiled:
        key = tuple(tuple(x.shape) for x in inputs)
        with self._lock:
            entry = self._by_shape.get(key)
            if entry is not None:
                self._by_shape.move_to_end(key)
                return entry
            ov = _ov.load()
            model = self.model.clone()
            model.reshape({p: ov.PartialShape(list(s)) for p, s in zip(model.inputs, key)})
            entry = self._compile(model)
            self._by_shape[key] = entry
            while len(self._by_shape) > self.settings.shape_cache_size:
                self._by_shape.popitem(last=False)
            return entry

    @property
    def cached_shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        with self._lock:
            return list(self._by_shape)

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        # OpenVINO reads C-contiguous buffers in place; np.ascontiguousarray would turn a
        # 0-d array into 1-d, so only non-contiguous inputs are copied
        arrays = [x if isinstance(x, np.ndarray) and x.flags.c_contiguous else np.array(x, order="C") for x in inputs]
        compiled = self._single if self._single is not None else self._for_shapes(arrays)
        outputs = compiled.infer(arrays)
        result = []
        for out, dtype in zip(outputs, self._output_dtypes):
            # OpenVINO may hand back another element type than the ONNX graph declares
            # (e.g. f64 computed as f32); deliver the declared one
            if dtype is not None and out.dtype != dtype:
                out = out.astype(dtype)
            result.append(out)
        return result
