"""I/O binding on host memory, named and behaving as onnxruntime's ``IOBinding``.

Inputs are bound once and reused by every ``InferenceSession.run_with_iobinding`` until they
are cleared; outputs are either allocated by the run (``bind_output(name)``) or written into a
buffer the caller owns (``bind_output`` with a pointer, ``bind_ortvalue_output``), so a loop of
runs can keep its arrays. ort-core's OrtValues live in host memory; binding a value on another
device is refused with the device named (a provider's device memory stays inside the run, where
the plan copies at device boundaries).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InvalidArgument
from .memory import OrtValue, require_host

if TYPE_CHECKING:
    from .session import InferenceSession, RunOptions


def array_at(buffer_ptr: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy array on the caller's host memory at ``buffer_ptr`` (no copy; the caller keeps
    the memory alive and large enough, as with onnxruntime's pointer bindings)."""
    dtype = np.dtype(element_type)
    count = int(np.prod(shape, dtype=np.int64))
    raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(tuple(shape))


class IOBinding:
    """Inputs and outputs bound to one session (``InferenceSession.io_binding()``)."""

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray | None] = {}  # name -> the caller's buffer, or None
        self._results: list[OrtValue] = []

    # ------------------------------------------------------------------ inputs
    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        """Bind input ``name`` to a host array (used as it is at each run: no copy)."""
        self._inputs[self._input_name(name)] = np.asarray(arr_on_cpu)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Sequence[int], buffer_ptr: int) -> None:
        """Bind input ``name`` to ``shape`` elements of ``element_type`` at ``buffer_ptr``."""
        require_host(device_type, f"bind_input {name!r}")
        self._inputs[self._input_name(name)] = array_at(buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        require_host(ortvalue.device_name(), f"bind_ortvalue_input {name!r}")
        self._inputs[self._input_name(name)] = ortvalue.numpy()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: host inputs are ready when bound."""

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # ------------------------------------------------------------------ outputs
    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        """Bind output ``name``: allocated by each run, or written into ``shape`` elements of
        ``element_type`` at ``buffer_ptr`` when those are given."""
        require_host(device_type, f"bind_output {name!r}")
        buffer = None
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise InvalidArgument(f"bind_output {name!r}: a buffer_ptr needs element_type and shape")
            buffer = array_at(buffer_ptr, element_type, shape)
        self._outputs[self._output_name(name)] = buffer

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind output ``name`` to ``ortvalue``: each run writes the output into its array."""
        require_host(ortvalue.device_name(), f"bind_ortvalue_output {name!r}")
        self._outputs[self._output_name(name)] = ortvalue.numpy()

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: host outputs are complete when the run returns."""

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs, in the order they were bound."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [v.numpy().copy() for v in self._results]

    # ------------------------------------------------------------------ the run
    def run(self, run_options: RunOptions | None = None) -> None:
        """Run the session on the bound inputs into the bound outputs (``run_with_iobinding``)."""
        names = list(self._outputs)
        results = self._session.run(names, self._inputs, run_options) if names else []
        values = []
        for name, result in zip(names, results, strict=True):
            buffer = self._outputs[name]
            if buffer is None:
                values.append(OrtValue(result))
                continue
            result = np.asarray(result)
            if buffer.shape != result.shape or buffer.dtype != result.dtype:
                raise InvalidArgument(
                    f"output {name!r}: the bound buffer is {buffer.dtype} {list(buffer.shape)}, the run gave "
                    f"{result.dtype} {list(result.shape)}")
            np.copyto(buffer, result)
            values.append(OrtValue(buffer))
        self._results = values

    def _input_name(self, name: str) -> str:
        known = [a.name for a in self._session.get_inputs()]
        if name not in known:
            raise InvalidArgument(f"unknown input name {name!r}; the model's inputs are: {', '.join(map(repr, known))}")
        return name

    def _output_name(self, name: str) -> str:
        self._session._output_indices([name])  # the session's own check: names the valid outputs
        return name
