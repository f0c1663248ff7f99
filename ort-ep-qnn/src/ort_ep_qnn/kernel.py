"""A fused group as one QNN context holding one finalized graph, executed on client buffers.

The graph is built and finalized once, at session creation (or loaded from a context binary,
which skips both). ``graphExecute`` calls on one graph are serialized by a lock: QNN does not
promise that concurrent executions of one graph handle are safe, and a run's buffers are its
own, so concurrent ``run`` calls on a session stay correct.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .runtime import Backend, Context, OpSpec, TensorSpec


class GroupKernel:
    """Runs one group: ``__call__(*inputs)`` returns the outputs in ``outputs`` order.

    ``io`` describes the graph's application tensors: for each input and output position its
    TensorSpec (name, dtype, dims, quantization); inputs that are constants (None) are ignored.
    """

    def __init__(self, backend: Backend, name: str, inputs: Sequence[TensorSpec | None],
                 outputs: Sequence[TensorSpec], context_configs: Sequence[Any] = (),
                 graph_configs: Sequence[Any] = (), label: str = ""):
        self.name = name
        self.label = label or name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.context = Context(backend, name, context_configs, graph_configs)
        self.ops: list[OpSpec] = []
        self.fixed_point: list[str] = []  # the ONNX nodes (QDQ units) lowered as fixed-point QNN ops
        self.float_units: dict[str, str] = {}  # QDQ units the backend refused in fixed point: why
        self._lock = threading.Lock()

    @classmethod
    def build(cls, backend: Backend, name: str, ops: Sequence[OpSpec], inputs: Sequence[TensorSpec | None],
              outputs: Sequence[TensorSpec], context_configs: Sequence[Any] = (),
              graph_configs: Sequence[Any] = (), label: str = "") -> GroupKernel:
        kernel = cls(backend, name, inputs, outputs, context_configs, graph_configs, label)
        kernel.context.build(ops)
        kernel.ops = list(ops)  # what the graph was built from (tests and diagnostics read it)
        return kernel

    @classmethod
    def load(cls, backend: Backend, binary: bytes, notes: str, context_configs: Sequence[Any] = ()) -> GroupKernel:
        """A kernel from a context binary and the ``notes`` ``describe()`` wrote beside it."""
        meta = json.loads(notes)
        inputs = [None if d is None else _spec(d, "in") for d in meta["inputs"]]
        outputs = [_spec(d, "out") for d in meta["outputs"]]
        kernel = cls(backend, meta["graph"], inputs, outputs, context_configs, (), meta.get("label", ""))
        kernel.context.load(binary, meta["ids"])
        return kernel

    def reorder(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        """Take inputs and return outputs in these orders (names absent from the graph's
        inputs are constants it ignores)."""
        by_name = {s.name: s for s in (*self.inputs, *self.outputs) if s is not None}
        self.inputs = [by_name.get(n) if by_name.get(n) is not None and by_name[n].kind == "in" else None
                       for n in inputs]
        self.outputs = [by_name[n] for n in outputs]

    def binary(self) -> bytes:
        return self.context.binary()

    def describe(self) -> str:
        """What a binary's reader needs besides the binary: tensor names, ids, types, shapes."""
        return json.dumps({
            "graph": self.name, "label": self.label,
            "inputs": [None if s is None else _describe(s) for s in self.inputs],
            "outputs": [_describe(s) for s in self.outputs],
            "ids": {s.name: self.context.ids[s.name] for s in (*self.inputs, *self.outputs) if s is not None},
        })

    def __call__(self, *values: Any) -> list[np.ndarray]:
        feeds = []
        for spec, x in zip(self.inputs, values):
            if spec is None:
                continue
            arr = np.ascontiguousarray(x, dtype=spec.dtype)
            if tuple(arr.shape) != spec.dims:
                raise ValueError(f"{self.label}: input {spec.name!r} has shape {tuple(arr.shape)}, "
                                 f"the QNN graph was built for {spec.dims}")
            feeds.append(TensorSpec(spec.name, spec.dtype, spec.dims, "in", arr, spec.quant))
        results = [np.empty(s.dims, s.dtype) for s in self.outputs]
        outs = [TensorSpec(s.name, s.dtype, s.dims, "out", r, s.quant) for s, r in zip(self.outputs, results)]
        with self._lock:
            self.context.execute(feeds, outs)
        return results

    def close(self) -> None:
        self.context.close()


def _describe(s: TensorSpec) -> dict[str, Any]:
    return {"name": s.name, "dtype": s.dtype.str, "dims": list(s.dims), "quant": s.quant}


def _spec(d: dict[str, Any], kind: str) -> TensorSpec:
    quant = tuple(d["quant"]) if d.get("quant") else None
    return TensorSpec(d["name"], np.dtype(d["dtype"]), tuple(d["dims"]), kind, None, quant)


class PerShapeKernel:
    """A group with symbolic dimensions or int64 inputs: one QNN graph per set of input shapes
    (and values of the int64 inputs: shape tensors computed on the host, which the graph takes
    as constants, as the HTP backend has no int64), built (lowered and finalized) the first
    time they are run; the last ``cache_size`` are kept.

    ``build(values)`` returns the runner (called with every input) for the fed inputs ``values``.
    """

    def __init__(self, build: Any, positions: Sequence[int], label: str, cache_size: int = 4):
        self._build = build
        self._positions = list(positions)  # the inputs that are fed (not constants)
        self.label = label
        self.cache_size = cache_size
        self._kernels: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()
        self.builds = 0

    def __call__(self, *values: Any) -> list[np.ndarray]:
        key = tuple(_key(values[k]) for k in self._positions)
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is None:
                kernel = self._build([values[k] for k in self._positions])
                self.builds += 1
                self._kernels[key] = kernel
                if len(self._kernels) > self.cache_size:
                    self._kernels.pop(next(iter(self._kernels)))  # freed with the session's backend
        return kernel(*values)

    def close(self) -> None:
        with self._lock:
            self._kernels.clear()


def _key(x: Any) -> Any:
    arr = np.asarray(x)
    if arr.dtype == np.int64:
        return ("int64", arr.shape, arr.tobytes())
    return arr.shape
