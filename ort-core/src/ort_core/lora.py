"""LoRA adapters in onnxruntime's adapter file format (``.onnx_adapter``).

``AdapterFormat`` writes and reads the files; ``LoraAdapter`` loads one, and a run whose
``RunOptions.add_active_adapter`` names it gets the adapter's parameters as inputs by name (a
model made for adapters takes its LoRA weights as inputs whose initializers are the defaults).
An adapter's value replaces a feed of the same name, and a parameter that is no input of the
model is refused, as onnxruntime does.

The file is a FlatBuffer with the identifier ``TORT`` in the layout of onnxruntime's
``adapter_schema.fbs``: an Adapter table (format_version, adapter_version, model_version,
parameters) whose Parameter tables hold a name, int64 dims, an ONNX element type and the
little-endian raw bytes (aligned to 8). It is built and read with the ``flatbuffers``
library's builder and table accessors; the files interchange with onnxruntime's own (tested
both ways).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InvalidArgument, InvalidGraph, NoSuchFile
from .memory import OrtValue

#: the adapter format's version this module writes (onnxruntime's ``kAdapterFormatVersion``)
FORMAT_VERSION = 1
_IDENTIFIER = b"TORT"
# vtable slots (4 + 2 * field index) of the schema's fields
_ADAPTER_FORMAT, _ADAPTER_VERSION, _MODEL_VERSION, _PARAMETERS = 4, 6, 8, 10
_NAME, _DIMS, _DATA_TYPE, _RAW_DATA = 4, 6, 8, 10


def _dtype_of(element_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type (ml_dtypes for bfloat16 and the float8 types)."""
    import onnx

    if element_type == onnx.TensorProto.STRING:
        raise InvalidGraph("LoRA adapter: string parameters are not in the adapter format")
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(element_type))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidGraph(f"LoRA adapter: element type {element_type} is not an ONNX tensor type") from exc


def _element_type_of(array: np.ndarray) -> int:
    import onnx

    try:
        return onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(f"AdapterFormat: parameters of dtype {array.dtype} have no ONNX element type") from exc


def _serialize(format_version: int, adapter_version: int, model_version: int,
               parameters: Mapping[str, np.ndarray]) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(1024 + sum(a.nbytes for a in parameters.values()))
    tables = []
    for name, array in parameters.items():
        name_at = builder.CreateString(name)
        builder.StartVector(8, array.ndim, 8)
        for d in reversed(array.shape):
            builder.PrependInt64(d)
        dims_at = builder.EndVector()
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).tobytes()
        builder.StartVector(1, len(data), 8)  # the schema's force_align: 8
        builder.head -= len(data)
        builder.Bytes[builder.head:builder.head + len(data)] = data
        raw_at = builder.EndVector()
        builder.StartObject(4)
        builder.PrependUOffsetTRelativeSlot(0, name_at, 0)
        builder.PrependUOffsetTRelativeSlot(1, dims_at, 0)
        builder.PrependInt32Slot(2, _element_type_of(array), 0)
        builder.PrependUOffsetTRelativeSlot(3, raw_at, 0)
        tables.append(builder.EndObject())
    builder.StartVector(4, len(tables), 4)
    for at in reversed(tables):
        builder.PrependUOffsetTRelative(at)
    parameters_at = builder.EndVector()
    builder.StartObject(4)
    builder.PrependInt32Slot(0, format_version, 0)
    builder.PrependInt32Slot(1, adapter_version, 0)
    builder.PrependInt32Slot(2, model_version, 0)
    builder.PrependUOffsetTRelativeSlot(3, parameters_at, 0)
    builder.Finish(builder.EndObject(), file_identifier=_IDENTIFIER)
    return bytes(builder.Output())


def _deserialize(data: bytes, source: str) -> tuple[int, int, int, dict[str, np.ndarray]]:
    """(format version, adapter version, model version, parameters) of an adapter file's bytes;
    InvalidGraph naming ``source`` where they are not one (flatbuffers has no verifier in
    Python: every offset is bounds-checked by the reads, and each parameter's byte count
    against its dims and type)."""
    from flatbuffers import encode, number_types, packer, table, util

    buf = bytearray(data)
    try:
        if len(buf) < 8 or not util.BufferHasIdentifier(buf, 0, _IDENTIFIER):
            raise ValueError("no TORT file identifier")
        root = table.Table(buf, encode.Get(packer.uoffset, buf, 0))

        def scalar(t: table.Table, slot: int) -> int:
            at = t.Offset(slot)
            return t.Get(number_types.Int32Flags, at + t.Pos) if at else 0

        parameters: dict[str, np.ndarray] = {}
        at = root.Offset(_PARAMETERS)
        for k in range(root.VectorLen(at) if at else 0):
            item = table.Table(buf, root.Indirect(root.Vector(at) + 4 * k))
            name_at, dims_at, raw_at = item.Offset(_NAME), item.Offset(_DIMS), item.Offset(_RAW_DATA)
            name = item.String(name_at + item.Pos).decode("utf-8") if name_at else ""
            dims = (np.frombuffer(buf, "<i8", item.VectorLen(dims_at), item.Vector(dims_at)).tolist()
                    if dims_at else [])
            raw = (np.frombuffer(buf, np.uint8, item.VectorLen(raw_at), item.Vector(raw_at))
                   if raw_at else np.zeros(0, np.uint8))
            dtype = _dtype_of(scalar(item, _DATA_TYPE))
            if not name or not dims or any(d < 0 for d in dims) or math.prod(dims) * dtype.itemsize != raw.size:
                raise ValueError(f"parameter {k} ({name!r}): dims {dims} of {dtype} do not match its {raw.size} bytes")
            parameters[name] = raw.view(dtype).reshape(dims).copy()  # (little-endian hosts, as the file)
        return scalar(root, _ADAPTER_FORMAT), scalar(root, _ADAPTER_VERSION), scalar(root, _MODEL_VERSION), parameters
    except InvalidGraph:
        raise
    except Exception as exc:  # a truncated or foreign file: whatever the reads met
        raise InvalidGraph(f"{source} is not a valid LoRA adapter file (onnxruntime's .onnx_adapter format): "
                           f"{type(exc).__name__}: {exc}") from exc


def _read_file(path: str | os.PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError as exc:
        raise NoSuchFile(f"LoRA adapter file not found: {os.fspath(path)!r}") from exc
    except OSError as exc:
        raise InvalidArgument(f"cannot read the LoRA adapter file {os.fspath(path)!r}: {exc}") from exc


class AdapterFormat:
    """An adapter file's contents (onnxruntime's ``AdapterFormat``): versions and parameters,
    written with ``export_adapter`` and read with ``read_adapter``."""

    def __init__(self) -> None:
        self._format_version = FORMAT_VERSION
        self._adapter_version = 0
        self._model_version = 0
        self._parameters: dict[str, np.ndarray] = {}

    def get_format_version(self) -> int:
        return self._format_version

    def get_adapter_version(self) -> int:
        return self._adapter_version

    def set_adapter_version(self, adapter_version: int) -> None:
        self._adapter_version = int(adapter_version)

    def get_model_version(self) -> int:
        return self._model_version

    def set_model_version(self, model_version: int) -> None:
        self._model_version = int(model_version)

    def set_parameters(self, params: Mapping[str, OrtValue]) -> None:
        """The parameters to export, by name: host OrtValues (or numpy arrays)."""
        parameters = {}
        for name, value in params.items():
            array = value.numpy() if isinstance(value, OrtValue) else np.asarray(value)
            if not isinstance(name, str) or not name:
                raise InvalidArgument(f"AdapterFormat.set_parameters: parameter names must be non-empty str, got {name!r}")
            if array.dtype.kind in "OUS":
                raise InvalidArgument(f"AdapterFormat.set_parameters: {name!r} holds strings; the adapter format "
                                      "holds numeric tensors only")
            if array.ndim == 0:  # onnxruntime's reader refuses a parameter without dims
                raise InvalidArgument(f"AdapterFormat.set_parameters: {name!r} is a scalar; give it one dimension "
                                      "(onnxruntime reads no parameter without dims)")
            _element_type_of(array)
            parameters[name] = array
        self._parameters = parameters

    def get_parameters(self) -> dict[str, OrtValue]:
        return {name: OrtValue.ortvalue_from_numpy(array) for name, array in self._parameters.items()}

    def export_adapter(self, file_path: str | os.PathLike) -> None:
        data = _serialize(FORMAT_VERSION, self._adapter_version, self._model_version, self._parameters)
        try:
            with open(file_path, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise InvalidArgument(f"cannot write the LoRA adapter file {os.fspath(file_path)!r}: {exc}") from exc

    @staticmethod
    def read_adapter(file_path: str | os.PathLike) -> AdapterFormat:
        versions_and_parameters = _deserialize(_read_file(file_path), repr(os.fspath(file_path)))
        adapter = AdapterFormat()
        (adapter._format_version, adapter._adapter_version, adapter._model_version,
         adapter._parameters) = versions_and_parameters
        return adapter


class LoraAdapter:
    """A loaded adapter (onnxruntime's ``LoraAdapter``): ``Load(path)``, then
    ``RunOptions.add_active_adapter(adapter)`` feeds its parameters to a run."""

    def __init__(self) -> None:
        self._parameters: dict[str, np.ndarray] | None = None

    def Load(self, file_path: str | os.PathLike) -> None:  # noqa: N802  (onnxruntime's name)
        parameters = _deserialize(_read_file(file_path), repr(os.fspath(file_path)))[3]
        for array in parameters.values():
            array.flags.writeable = False  # fed to every run that names the adapter
        self._parameters = parameters

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """The loaded parameters by name (read-only arrays)."""
        if self._parameters is None:
            raise InvalidArgument("LoraAdapter: no adapter loaded; call Load(file_path) first")
        return self._parameters


def with_adapters(feeds: Mapping[str, Any], adapters: list[LoraAdapter], input_names: frozenset[str]) -> dict[str, Any]:
    """``feeds`` with the active adapters' parameters, in the order they were added (a later
    adapter's, and any adapter's over a feed's, as onnxruntime's); a parameter that names no
    input of the model is refused."""
    merged = dict(feeds)
    for adapter in adapters:
        for name, array in adapter.parameters.items():
            if name not in input_names:
                raise InvalidArgument(f"Invalid input name: {name} (a parameter of an active LoRA adapter; the "
                                      f"model's inputs: {', '.join(sorted(input_names))})")
            merged[name] = array
    return merged
