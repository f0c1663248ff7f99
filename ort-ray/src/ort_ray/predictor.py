"""``OrtPredictor``: an ort-core session as a Ray Data ``map_batches`` callable class.

Ray builds one instance per actor of the pool, so the session is created once per actor and
reused for every batch it is handed::

    ds.map_batches(OrtPredictor, fn_constructor_kwargs={"model": "s3://bucket/model.onnx"},
                   concurrency=4, batch_size=256, **predictor_resources(providers))
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

import ort_core
from ort_core.errors import InvalidArgument

ProviderList = Sequence[str | tuple[str, Mapping[str, Any]]]

# providers whose device is an NVIDIA GPU that Ray schedules as "GPU" and which take device_id
GPU_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"})

_DTYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32,
    "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def _provider_name(entry: str | tuple[str, Mapping[str, Any]]) -> str:
    return entry if isinstance(entry, str) else entry[0]


def predictor_resources(providers: ProviderList | None, gpus_per_actor: float = 1) -> dict[str, float]:
    """The ``map_batches`` resource arguments for a pool of ``OrtPredictor`` actors:
    ``{"num_gpus": gpus_per_actor}`` when a GPU provider is listed, else ``{}``."""
    names = {_provider_name(p) for p in providers or ()}
    return {"num_gpus": gpus_per_actor} if names & GPU_PROVIDERS else {}


def assigned_device_id() -> int | None:
    """The device index, as this process sees it, of the first GPU Ray assigned to this actor,
    or None outside Ray or without a GPU. Ray narrows ``CUDA_VISIBLE_DEVICES`` to the
    assigned GPUs, so the index is the position of Ray's id in that list (0 when Ray isolates
    the actor's GPU, the id itself when it does not)."""
    import ray

    if not ray.is_initialized():
        return None
    ids = [str(i) for i in ray.get_gpu_ids()]
    if not ids:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        listed = [v.strip() for v in visible.split(",")]
        if ids[0] in listed:
            return listed.index(ids[0])
    return int(ids[0])


def _with_device_ids(providers: ProviderList | None, device_id: int | None) -> list:
    """The providers list with ``device_id`` set on each GPU provider that did not set it."""
    out: list = []
    for entry in providers or ():
        name = _provider_name(entry)
        options = {} if isinstance(entry, str) else dict(entry[1])
        if device_id is not None and name in GPU_PROVIDERS:
            options.setdefault("device_id", device_id)
        out.append((name, options) if options else name)
    return out


def read_model(model: str | os.PathLike | bytes) -> bytes | str:
    """A model's bytes or local path. A URI with a scheme (``s3://``, ``gs://``, ``file://``,
    ...) is read through pyarrow's filesystems, which every Ray node has."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    text = os.fspath(model)
    if "://" not in text:
        return text
    from pyarrow import fs

    try:
        filesystem, path = fs.FileSystem.from_uri(text)
        with filesystem.open_input_stream(path) as stream:
            return stream.read()
    except Exception as e:  # pyarrow raises OSError/ArrowInvalid subclasses by scheme
        raise ort_core.errors.NoSuchFile(f"model {text!r} could not be read: {e}") from e


class OrtPredictor:
    """A Ray Data callable class running one ``ort_core.InferenceSession`` per actor.

    ``model``: a path, the model's bytes, or a URI the cluster's nodes can read.
    ``providers`` / ``provider_options`` / ``sess_options``: as for ``InferenceSession``; a GPU
    provider gets ``device_id`` from the GPU Ray assigned to the actor.
    ``input_columns`` maps model input names to batch columns (default: same names);
    ``output_columns`` maps model output names to the columns written (default: every output,
    under its own name). Columns not consumed are passed through unchanged.
    ``on_error``: "raise" fails the batch with the bad row's index and the input's name;
    "record" writes the message to ``error_column`` for that row ("" for good rows), runs the
    other rows, and fills the bad rows' outputs with NaN (0 for integer outputs).
    A model whose inputs have a fixed batch dimension gets the batch split into chunks of that
    size, the last one padded by repeating its final row; padded rows are dropped from the
    outputs.
    """

    def __init__(
        self,
        model: str | os.PathLike | bytes,
        providers: ProviderList | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        sess_options: ort_core.SessionOptions | None = None,
        input_columns: Mapping[str, str] | None = None,
        output_columns: Mapping[str, str] | None = None,
        on_error: Literal["raise", "record"] = "raise",
        error_column: str = "error",
    ) -> None:
        if on_error not in ("raise", "record"):
            raise InvalidArgument(f"on_error={on_error!r}: expected 'raise' or 'record'")
        self.device_id = assigned_device_id()
        self.providers = _with_device_ids(providers, self.device_id) if providers else None
        self.session = self._create_session(read_model(model), self.providers, provider_options, sess_options)
        inputs = self.session.get_inputs()
        outputs = [o.name for o in self.session.get_outputs()]
        self.input_columns = dict(input_columns or {i.name: i.name for i in inputs})
        unknown = set(self.input_columns) - {i.name for i in inputs}
        if unknown:
            raise InvalidArgument(f"input_columns names {sorted(unknown)}, which are not model inputs; "
                                  f"the model's inputs are {[i.name for i in inputs]}")
        self.output_columns = dict(output_columns or {name: name for name in outputs})
        unknown = set(self.output_columns) - set(outputs)
        if unknown:
            raise InvalidArgument(f"output_columns names {sorted(unknown)}, which are not model outputs; "
                                  f"the model's outputs are {outputs}")
        self._inputs = {i.name: i for i in inputs if i.name in self.input_columns}
        self.on_error = on_error
        self.error_column = error_column
        batch_dims = {i.shape[0] for i in self._inputs.values() if i.shape and isinstance(i.shape[0], int)}
        self.fixed_batch: int | None = batch_dims.pop() if len(batch_dims) == 1 else None

    def _create_session(self, model: bytes | str, providers, provider_options, sess_options) -> ort_core.InferenceSession:
        return ort_core.InferenceSession(model, sess_options, providers=providers, provider_options=provider_options)

    # ------------------------------------------------------------------ one batch
    def __call__(self, batch: Any) -> Any:
        try:
            import pandas as pd
        except ImportError:  # pandas is optional: numpy batches need none
            pd = None
        if pd is not None and isinstance(batch, pd.DataFrame):
            columns = {c: batch[c].to_numpy() for c in batch.columns}
            result = self._predict(columns, len(batch))
            return pd.DataFrame({k: list(v) if v.ndim > 1 else v for k, v in result.items()})
        if not isinstance(batch, Mapping):
            raise InvalidArgument(f"batch of type {type(batch).__name__}: expected a dict of numpy arrays "
                                  "(batch_format='numpy') or a pandas DataFrame (batch_format='pandas')")
        lengths = {len(v) for v in batch.values()}
        if len(lengths) > 1:
            raise InvalidArgument(f"batch columns have different lengths {sorted(lengths)}")
        return self._predict(dict(batch), lengths.pop() if lengths else 0)

    def _predict(self, columns: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        feeds, errors = self._feeds(columns, rows)
        good = np.array([e == "" for e in errors], dtype=bool)
        out = dict(columns)
        if good.all():
            results = self._run({k: v for k, v in feeds.items()}, rows)
        else:
            kept = {k: v[good] for k, v in feeds.items()}
            partial = self._run(kept, int(good.sum())) if good.any() else None
            results = {}
            for name in self.output_columns:
                if partial is None:
                    # no row ran: the output's row shape and dtype are unknown, so NaN scalars
                    results[name] = np.full(rows, np.nan, dtype=np.float32)
                    continue
                values = partial[name]
                fill = np.nan if np.issubdtype(values.dtype, np.floating) else 0
                full = np.full((rows, *values.shape[1:]), fill, dtype=values.dtype)
                full[good] = values
                results[name] = full
        for name, column in self.output_columns.items():
            out[column] = results[name]
        if self.on_error == "record":
            out[self.error_column] = np.array(errors, dtype=object)
        return out

    def _feeds(self, columns: Mapping[str, np.ndarray], rows: int) -> tuple[dict[str, np.ndarray], list[str]]:
        """Each input's column as one array; bad rows named (raise) or recorded."""
        errors = [""] * rows
        feeds: dict[str, np.ndarray] = {}
        for name, column in self.input_columns.items():
            if column not in columns:
                raise InvalidArgument(f"model input {name!r} reads column {column!r}, which the batch lacks; "
                                      f"the batch has columns {sorted(columns)}")
            arg = self._inputs[name]
            dtype = _DTYPES.get(arg.type)
            row_shape = arg.shape[1:] if arg.shape else None
            values = columns[column]
            whole = _whole_column(values, dtype, row_shape)
            if whole is not None:  # the common case: one regular array, checked at once
                feeds[name] = whole
                continue
            checked: list[np.ndarray | None] = []
            for index in range(rows):
                try:
                    checked.append(_check_row(values[index], dtype, row_shape))
                except InvalidArgument as e:
                    message = f"row {index}: input {name!r} (column {column!r}): {e}"
                    if self.on_error == "raise":
                        raise InvalidArgument(message) from e
                    errors[index] = errors[index] or message
                    checked.append(None)
            template = next((c for c in checked if c is not None), None)
            if template is None:
                feeds[name] = np.zeros((rows, 0), dtype=dtype or np.float32)
                continue
            feeds[name] = np.stack([c if c is not None else np.zeros_like(template) for c in checked])
        return feeds, errors

    def _run(self, feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        names = list(self.output_columns)
        size = self.fixed_batch
        if size is None or rows == size:
            values = self.session.run(names, feeds)
            return dict(zip(names, values))
        chunks: list[list[np.ndarray]] = []
        for start in range(0, rows, size):
            stop = min(start + size, rows)
            chunk = {}
            for k, v in feeds.items():
                part = v[start:stop]
                if stop - start < size:  # pad by repeating the last row: a valid input for any model
                    part = np.concatenate([part, np.repeat(part[-1:], size - (stop - start), axis=0)])
                chunk[k] = part
            values = self.session.run(names, chunk)
            chunks.append([value[: stop - start] for value in values])
        return {name: np.concatenate([c[k] for c in chunks]) for k, name in enumerate(names)}


def _whole_column(values: Any, dtype: type | None, row_shape: Sequence[int | str | None] | None) -> np.ndarray | None:
    """The column as the input's array when it is regular and valid as a whole, else None."""
    if not isinstance(values, np.ndarray) or values.dtype.kind in "OUSV":
        return None
    try:
        return _check_row(values, dtype, None if row_shape is None else ["rows", *row_shape])
    except InvalidArgument:
        return None


def _check_row(value: Any, dtype: type | None, row_shape: Sequence[int | str | None] | None) -> np.ndarray:
    """One row of an input column as an array of the input's dtype and row shape."""
    try:
        array = np.asarray(value)
    except Exception as e:  # ragged nested lists
        raise InvalidArgument(f"cannot be made an array: {e}") from e
    if dtype is not None and array.dtype != dtype:
        if array.dtype.kind in "OUSV" or not np.can_cast(array.dtype, dtype, casting="same_kind"):
            raise InvalidArgument(f"dtype {array.dtype} cannot be taken as {np.dtype(dtype)}")
        array = array.astype(dtype)
    if row_shape is not None:
        if array.ndim != len(row_shape):
            raise InvalidArgument(f"row shape {list(array.shape)}, expected {list(row_shape)}")
        for got, want in zip(array.shape, row_shape):
            if isinstance(want, int) and got != want:
                raise InvalidArgument(f"row shape {list(array.shape)}, expected {list(row_shape)}")
    return array
