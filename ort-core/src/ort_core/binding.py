"""I/O binding, named and behaving as onnxruntime's ``IOBinding``, on host and device memory.

Inputs are bound once and reused by every ``InferenceSession.run_with_iobinding`` until they
are cleared; outputs are either allocated by the run (``bind_output(name)``) or written into a
buffer the caller owns (``bind_output`` with a pointer, ``bind_ortvalue_output``), so a loop of
runs can keep its arrays.

Device memory: an input bound as an OrtValue on a device (``OrtValue.ortvalue_from_numpy(x,
"webgpu", 0)``) is read there, and an output bound with a device type (``bind_output(name,
"webgpu")``) is left there: the run's plan starts and ends its copy steps in that memory, so a
loop of runs over device values makes no host copy (``copies()`` lists the copy steps a run
makes). The device is found by memory name (``ort_core.devices.device_memory``): any provider
whose ``EpDevice.memory`` is the device type serves ("webgpu" -> "WebGpu", "cuda" -> "Cuda").
A device output bound with ``bind_ortvalue_output`` is delivered by pointing that OrtValue at
the run's output tensor (device tensors are the provider's objects; core cannot write into
them).
"""

from __future__ import annotations

import copy
import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InvalidArgument
from .memory import OrtValue, OrtValueVector, element_dtype

if TYPE_CHECKING:
    from .session import InferenceSession, RunOptions


def array_at(buffer_ptr: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy array on the caller's host memory at ``buffer_ptr`` (no copy; the caller keeps
    the memory alive and large enough, as with onnxruntime's pointer bindings)."""
    dtype = element_dtype(element_type)
    count = int(np.prod(shape, dtype=np.int64))
    raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(tuple(shape))


class IOBinding:
    """Inputs and outputs bound to one session (``InferenceSession.io_binding()``)."""

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict[str, np.ndarray | OrtValue] = {}  # host arrays, or OrtValues on a device
        # name -> the caller's host buffer, None (allocated by the run), a DeviceMemory (left on
        # that device) or the caller's device OrtValue
        self._outputs: dict[str, Any] = {}
        self._results: list[OrtValue] = []
        self._copies: list = []

    # ------------------------------------------------------------------ inputs
    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        """Bind input ``name`` to a host array (used as it is at each run: no copy)."""
        self._inputs[self._input_name(name)] = np.asarray(arr_on_cpu)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Sequence[int], buffer_ptr: int) -> None:
        """Bind input ``name`` to ``shape`` elements of ``element_type`` at ``buffer_ptr`` (host
        memory; device memory is bound as an OrtValue with ``bind_ortvalue_input``)."""
        if str(device_type).lower() != "cpu":
            raise InvalidArgument(
                f"bind_input {name!r}: a raw pointer on device {device_type!r} cannot be bound; make an OrtValue "
                f"on it (OrtValue.ortvalue_from_numpy(x, {str(device_type).lower()!r}, {device_id}) or "
                "OrtValue.from_dlpack) and bind it with bind_ortvalue_input")
        self._inputs[self._input_name(name)] = array_at(buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind input ``name`` to ``ortvalue``: a host array, or a device value read on its device."""
        if not isinstance(ortvalue, OrtValue):
            raise InvalidArgument(f"bind_ortvalue_input {name!r}: expected an OrtValue, got {type(ortvalue).__name__}")
        self._inputs[self._input_name(name)] = ortvalue.numpy() if ortvalue.on_host else ortvalue

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: host inputs are ready when bound."""

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # ------------------------------------------------------------------ outputs
    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        """Bind output ``name``: allocated by each run (on ``device_type``: "cpu", or a device
        such as "webgpu", where it is left), or written into ``shape`` elements of
        ``element_type`` at host ``buffer_ptr`` when those are given."""
        if str(device_type).lower() != "cpu":
            if buffer_ptr is not None:
                raise InvalidArgument(f"bind_output {name!r}: a raw pointer on device {device_type!r} cannot be "
                                      "bound; bind_output without one leaves the output on the device")
            from .devices import device_memory

            self._outputs[self._output_name(name)] = device_memory(device_type, device_id)
            return
        buffer = None
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise InvalidArgument(f"bind_output {name!r}: a buffer_ptr needs element_type and shape")
            buffer = array_at(buffer_ptr, element_type, shape)
        self._outputs[self._output_name(name)] = buffer

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind output ``name`` to ``ortvalue``: each run writes the output into its array (a
        device OrtValue is pointed at the run's output tensor, left on its device)."""
        if not isinstance(ortvalue, OrtValue):
            raise InvalidArgument(f"bind_ortvalue_output {name!r}: expected an OrtValue, got {type(ortvalue).__name__}")
        self._outputs[self._output_name(name)] = ortvalue.numpy() if ortvalue.on_host else ortvalue

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: host outputs are complete when the run returns."""

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs, in the order they were bound."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> OrtValueVector:
        """The last run's outputs as an ``OrtValueVector``."""
        return OrtValueVector(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        """The last run's outputs on the host: arrays, and the lists (sequences) and dicts
        (maps) of non-tensor outputs, copied."""
        return [v.numpy().copy() if v.is_tensor() else copy.deepcopy(v._data) for v in self._results]  # noqa: SLF001

    def copies(self) -> list:
        """The copy steps (``CopyPlacement``: value, source and target memory) the last run's
        plan made, main graph: empty for a loop over device values that all stay on their
        device."""
        return list(self._copies)

    # ------------------------------------------------------------------ the run
    def run(self, run_options: RunOptions | None = None) -> None:
        """Run the session on the bound inputs into the bound outputs (``run_with_iobinding``)."""
        from .devices import DeviceMemory

        names = list(self._outputs)
        if not names:  # onnxruntime's words and class (a RuntimeError)
            raise InvalidArgument("At least one output should be requested: bind_output() or "
                                  "bind_ortvalue_output() before run_with_iobinding()")
        on_device = {}
        for name, target in self._outputs.items():
            if isinstance(target, DeviceMemory):
                on_device[name] = (target.memory, target.transfer)
            elif isinstance(target, OrtValue):
                on_device[name] = (target._memory, target._transfer)
        session = self._session
        results = session._run(names, self._inputs, run_options, on_device)
        self._copies = list(session._plan_for(self._inputs, on_device).copies)
        values = []
        for name, result in zip(names, results, strict=True):
            buffer = self._outputs[name]
            if buffer is None:
                values.append(OrtValue(np.asarray(result) if isinstance(result, np.generic) else result))
                continue
            if isinstance(buffer, DeviceMemory):
                # the session's own transfer for its memory, whose queue produced the result
                transfer = session._transfers.get(buffer.memory, buffer.transfer)
                values.append(OrtValue(result, buffer.memory_device_type, buffer.device_id, buffer.memory, transfer))
                continue
            if isinstance(buffer, OrtValue):
                buffer._data = result
                values.append(buffer)
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
