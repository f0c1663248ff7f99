"""numpy evaluation of the ops constant folding meets most (shape arithmetic: Concat, Reshape,
Slice, Gather, Squeeze/Unsqueeze, Transpose, Cast, ConstantOfShape; and QuantizeLinear of a QDQ
model's float weights).

Each function computes exactly what ``onnx.reference`` computes for the node (the same numpy
calls on the same arrays), or returns None for any case it does not cover (another opset's
form, an unusual dtype, an attribute it does not know, an input numpy refuses), and the pass
then asks ``onnx.reference`` as before. Why: building a ReferenceEvaluator per node cost about
0.3 ms, and its first use imports ``onnx.reference.ops`` (tens of ms), for nodes that are one
numpy call. ``tests/test_creation.py`` checks every function against ``onnx.reference``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

#: dtypes whose Cast is a plain ``astype`` in onnx.reference (no float8, strings, bfloat16)
_PLAIN = {
    ir.DataType.FLOAT: np.float32, ir.DataType.DOUBLE: np.float64, ir.DataType.FLOAT16: np.float16,
    ir.DataType.INT8: np.int8, ir.DataType.INT16: np.int16, ir.DataType.INT32: np.int32,
    ir.DataType.INT64: np.int64, ir.DataType.UINT8: np.uint8, ir.DataType.UINT16: np.uint16,
    ir.DataType.UINT32: np.uint32, ir.DataType.UINT64: np.uint64, ir.DataType.BOOL: np.bool_,
}
_PLAIN_NUMPY = {np.dtype(t) for t in _PLAIN.values()}

_MISSING = object()


def _attrs(node: ir.Node, known: Sequence[str]) -> dict[str, object] | None:
    """The node's attributes, or None when it has one outside ``known`` or a reference one."""
    result = {}
    for name, a in node.attributes.items():
        if name not in known or a.is_ref():
            return None
        result[name] = a.value
    return result


def _arrays(inputs: Sequence[np.ndarray | None], n_min: int, n_max: int) -> bool:
    if not n_min <= len(inputs) <= n_max:
        return False
    return all(isinstance(x, np.ndarray) for x in inputs[:n_min])


def _concat(node, inputs, version):
    a = _attrs(node, ("axis",))
    if a is None or "axis" not in a or not inputs or not all(isinstance(x, np.ndarray) for x in inputs):
        return None
    axis = a["axis"]
    if len({x.dtype for x in inputs}) != 1 or any(not -x.ndim <= axis < x.ndim for x in inputs):
        return None
    return [np.concatenate(tuple(inputs), axis)]


def _reshape(node, inputs, version):
    a = _attrs(node, ("allowzero",))
    if version < 5 or a is None or not _arrays(inputs, 2, 2) or inputs[1].dtype != np.int64:
        return None
    data, shape = inputs
    allowzero = version >= 14 and a.get("allowzero", 0) == 1
    new_shape = np.copy(shape)
    if not allowzero:
        zeros = np.where(shape == 0)
        new_shape[zeros] = np.array(data.shape)[zeros]
    return [np.reshape(data, new_shape)]


def _transpose(node, inputs, version):
    a = _attrs(node, ("perm",))
    if a is None or not _arrays(inputs, 1, 1):
        return None
    perm = a.get("perm")
    if perm is None or len(perm) == 0:
        return [np.transpose(inputs[0])]
    if len(perm) != inputs[0].ndim:
        return None
    return [np.transpose(inputs[0], axes=tuple(perm))]


def _axes_input(inputs) -> tuple[int, ...] | None | object:
    if len(inputs) < 2 or inputs[1] is None:
        return None
    axes = inputs[1]
    if not isinstance(axes, np.ndarray) or axes.ndim != 1 or axes.dtype != np.int64:
        return _MISSING
    return tuple(axes)


def _squeeze(node, inputs, version):
    if not inputs or not isinstance(inputs[0], np.ndarray):
        return None
    data = inputs[0]
    if version >= 13:
        if _attrs(node, ()) is None or len(inputs) > 2:
            return None
        axes = _axes_input(inputs)
        if axes is _MISSING:
            return None
        return [np.squeeze(data) if axes is None else np.squeeze(data, axis=axes)]
    a = _attrs(node, ("axes",))
    if a is None or len(inputs) != 1:
        return None
    axes = a.get("axes")
    if not axes:
        return [np.squeeze(data, axis=None)]
    for axis in reversed(tuple(axes)):
        data = np.squeeze(data, axis=axis)
    return [data]


def _unsqueeze(node, inputs, version):
    if not inputs or not isinstance(inputs[0], np.ndarray):
        return None
    data = inputs[0]
    if version >= 13:
        if _attrs(node, ()) is None or len(inputs) != 2:
            return None
        axes = _axes_input(inputs)
        if axes is None or axes is _MISSING or len(axes) == 0:
            return None
        return [np.expand_dims(data, axis=axes)]
    a = _attrs(node, ("axes",))
    if a is None or len(inputs) != 1 or not a.get("axes"):
        return None
    for axis in tuple(a["axes"]):
        data = np.expand_dims(data, axis=axis)
    return [data]


def _gather(node, inputs, version):
    a = _attrs(node, ("axis",))
    if a is None or not _arrays(inputs, 2, 2) or inputs[1].dtype not in (np.int64, np.int32):
        return None
    x, indices = inputs
    # (as the reference: only when not contiguous, since np.ascontiguousarray makes 0-d arrays 1-d)
    if not x.flags["C_CONTIGUOUS"]:
        x = np.ascontiguousarray(x)
    if not indices.flags["C_CONTIGUOUS"]:
        indices = np.ascontiguousarray(indices)
    return [np.take(x, indices, axis=a.get("axis", 0))]


def _slice(node, inputs, version):
    if version < 10 or _attrs(node, ()) is None or not _arrays(inputs, 3, 5):
        return None
    if any(x is not None and (not isinstance(x, np.ndarray) or x.ndim != 1 or x.dtype not in (np.int64, np.int32))
           for x in inputs[1:]):
        return None
    data, starts, ends = inputs[:3]
    axes = inputs[3] if len(inputs) > 3 else None
    steps = inputs[4] if len(inputs) > 4 else None
    if axes is None:
        if steps is None:
            slices = [slice(s, e) for s, e in zip(starts, ends)]
        else:
            slices = [slice(s, e, d) for s, e, d in zip(starts, ends, steps)]
    else:
        slices = [slice(0, n) for n in data.shape]
        if steps is None:
            for s, e, ax in zip(starts, ends, axes):
                slices[ax] = slice(s, e)
        else:
            for s, e, ax, d in zip(starts, ends, axes, steps):
                slices[ax] = slice(s, e, d)
    return [data[tuple(slices)]]


def _cast(node, inputs, version):
    a = _attrs(node, ("to", "saturate", "round_mode"))
    if version < 6 or a is None or not _arrays(inputs, 1, 1) or inputs[0].dtype not in _PLAIN_NUMPY:
        return None
    target = _PLAIN.get(ir.DataType(a["to"])) if isinstance(a.get("to"), int) else None
    if target is None:
        return None
    return [inputs[0].astype(target)]


def _constant_of_shape(node, inputs, version):
    a = _attrs(node, ("value",))
    if a is None or not _arrays(inputs, 1, 1) or inputs[0].dtype != np.int64 or inputs[0].ndim != 1:
        return None
    tensor = a.get("value")
    if tensor is None:
        value = np.array(0, dtype=np.float32)
    else:
        if tensor.dtype not in _PLAIN:
            return None
        array = tensor.numpy()
        if array.size != 1:
            return None
        value = array.flat[0]
    return [np.full(tuple(inputs[0]), value)]


#: QuantizeLinear's integer codes and their ranges, as onnx.reference saturates them
_QUANT_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
                 np.dtype(np.uint16): (0, 65535), np.dtype(np.int16): (-32768, 32767)}


def _quantize_linear(node, inputs, version):
    """Per-tensor or per-axis QuantizeLinear of float32 values to 8- or 16-bit integers (a QDQ
    model's weights stored as floats: 126 such nodes were a third of a QDQ OCR classifier's
    folding time through the evaluator)."""
    a = _attrs(node, ("axis", "saturate", "block_size", "output_dtype"))
    if version < 10 or a is None or a.get("block_size", 0) or not _arrays(inputs, 2, 3):
        return None
    x, scale = inputs[:2]
    zero = inputs[2] if len(inputs) > 2 else None
    if x.dtype != np.float32 or scale.dtype != np.float32 or scale.ndim > 1:
        return None
    if zero is not None and (not isinstance(zero, np.ndarray) or zero.shape != scale.shape):
        return None
    dtype = zero.dtype if zero is not None else np.dtype(np.uint8)
    output_dtype = a.get("output_dtype", 0)
    if dtype not in _QUANT_RANGES or (output_dtype and _PLAIN.get(ir.DataType(output_dtype)) != dtype.type):
        return None
    if scale.size != 1:  # per axis: along ``axis``, as onnx.reference reshapes it
        axis = a.get("axis", 1)
        if not -x.ndim <= axis < x.ndim or x.shape[axis] != scale.size:
            return None
        dims = [1] * x.ndim
        dims[axis] = scale.size
        scale = scale.reshape(dims)
        zero = None if zero is None else zero.reshape(dims)
    elif scale.ndim == 1:
        scale, zero = scale[0], None if zero is None else zero[0]
    with np.errstate(invalid="ignore"):  # NaN and beyond int32 (the reference's cast, unwarned)
        codes = np.rint(x / scale).astype(np.int32)
    if zero is not None:
        codes += zero
    lo, hi = _QUANT_RANGES[dtype]
    return [np.clip(codes, lo, hi).astype(dtype)]


_EVALUATORS: dict[str, Callable] = {
    "Concat": _concat,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Gather": _gather,
    "Slice": _slice,
    "Cast": _cast,
    "ConstantOfShape": _constant_of_shape,
    "QuantizeLinear": _quantize_linear,
}


def evaluate(node: ir.Node, inputs: Sequence[np.ndarray | None], version: int) -> list[np.ndarray] | None:
    """The node's outputs as onnx.reference computes them, or None where this module does not
    cover the case (or numpy refused it: the reference then decides)."""
    if node.domain != "" or len(node.outputs) != 1:
        return None
    function = _EVALUATORS.get(node.op_type)
    if function is None:
        return None
    try:
        result = function(node, inputs, version)
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if result is None:
        return None
    # onnx.reference turns numpy scalars into 0-d arrays
    return [np.array(r) if np.isscalar(r) else r for r in result]
