"""Cast and CastLike for every ONNX tensor type: bfloat16, float8 (saturating or not), float8e8m0,
int4/uint4, int2/uint2, float4e2m1 (through ml_dtypes) and strings."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto
from onnx.numpy_helper import saturate_cast, to_float8e8m0

from ..registry import kernel
from ._util import as_dtype, as_float32

_FLOAT8 = {
    TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E4M3FNUZ,
    TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
}
_SMALL_FLOATS = {np.dtype(t) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                       ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu,
                                       ml_dtypes.float4_e2m1fn)}


#: numpy's standard types (not ml_dtypes', not strings or objects): cast by astype alone
_PLAIN = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                         np.uint32, np.uint64, np.float16, np.float32, np.float64,
                                         np.complex64, np.complex128))


def _is_ml(dtype: np.dtype) -> bool:
    """An ml_dtypes type: the small floats above and int4/uint4/int2/uint2."""
    return dtype.type.__module__ == "ml_dtypes"  # (float8_e5m2 has numpy kind "f", the rest "V")


def _standard(x: np.ndarray) -> np.ndarray:
    """An ml_dtypes array as the standard numpy type holding all its values."""
    return x.astype(np.float32 if x.dtype in _SMALL_FLOATS else np.int32)


#: onnxruntime's spelling of a float's non-finite values in Cast to STRING
_NON_FINITE_TEXT = {"nan": "NaN", "-nan": "NaN", "inf": "INF", "-inf": "-INF"}


def _to_string(x: np.ndarray) -> np.ndarray:
    """Cast to STRING as onnxruntime writes numbers: a float (any width, through float64) with
    at most 8 significant digits (C's ``%.8g``: 1 -> "1", 0.1f -> "0.1", 1e10 -> "1e+10", -0.0
    -> "-0"), NaN and infinities as "NaN", "INF", "-INF"; a bool as "1" / "0"; an integer in
    decimal."""
    if x.dtype == object or x.dtype.kind in "SU":
        return x.astype(object)
    if _is_ml(x.dtype):
        x = _standard(x)
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    if x.dtype.kind != "f":
        return x.astype(np.str_).astype(object)
    text = np.char.mod("%.8g", x.astype(np.float64)).astype(object)
    non_finite = ~np.isfinite(x)
    if non_finite.any():
        text[non_finite] = [_NON_FINITE_TEXT[t] for t in text[non_finite]]
    return text


def _from_string(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # parse through float64 for floats (accepts "INF", "-inf", "NaN", "1e-5"); ints directly
    text = x.astype(np.str_)
    if dtype.kind in "iu":
        try:  # exact for integers beyond float64's 53 bits
            return text.astype(dtype)
        except ValueError:  # "1e3", "-2.5": through float64, truncated toward zero as C does
            return np.trunc(text.astype(np.float64)).astype(dtype)
    return text.astype(np.float64).astype(dtype)  # floats and bool ("0" -> False, "2.5" -> True)


def cast_array(x: np.ndarray, to: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` cast to the ONNX type ``to`` as the Cast operator does."""
    if to == TensorProto.STRING:
        return _to_string(x)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    if x.dtype == object or x.dtype.kind in "SU":
        x = _from_string(x, dtype) if not _is_ml(dtype) else _from_string(x, np.dtype(np.float32))
        if x.dtype == dtype:
            return x
    if x.dtype == dtype:
        return x
    if to in _FLOAT8:
        if saturate:
            # clamp finite and infinite values into range; NaN stays NaN
            return saturate_cast(x.astype(np.float32) if x.dtype in _SMALL_FLOATS else x, dtype)
        if x.dtype in _SMALL_FLOATS:
            x = x.astype(np.float32)
        return x.astype(dtype)
    if to == TensorProto.FLOAT8E8M0:
        return to_float8e8m0(x, saturate, round_mode).astype(dtype)
    if _is_ml(x.dtype) or _is_ml(dtype):
        try:  # ml_dtypes' own conversion (NaN and out-of-range give 0, as onnx.reference has it)
            return x.astype(dtype)
        except TypeError:  # a pair ml_dtypes does not convert directly: through float32/int32
            return (_standard(x) if _is_ml(x.dtype) else x).astype(dtype)
    return x.astype(dtype)


def _cast_attrs(node) -> tuple[bool, str]:
    saturate = bool(node.attr("saturate", 1))
    round_mode = node.attr("round_mode", "up")
    if isinstance(round_mode, bytes):
        round_mode = round_mode.decode()
    if round_mode not in ("up", "down", "nearest"):
        raise ValueError(f"{node.op_type} {node.name!r}: round_mode {round_mode!r} is not one of up, down, nearest")
    return saturate, round_mode


@kernel("Cast", since=1)
def _cast(node, request):
    to = node.attr("to")
    if to is None:
        raise ValueError(f"Cast {node.name!r}: attribute 'to' is required")
    if isinstance(to, (str, bytes)):  # Cast-1 spelled the type as a string
        to = TensorProto.DataType.Value(to.decode() if isinstance(to, bytes) else to)
    to = int(to)
    saturate, round_mode = _cast_attrs(node)
    if to == TensorProto.STRING:
        return lambda x: cast_array(x, to, saturate, round_mode)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))
    if dtype not in _PLAIN:
        return lambda x: cast_array(x, to, saturate, round_mode)

    def cast(x):
        # numpy's own types both sides: what cast_array does for them, without its per-call
        # type lookups (~1 us; silero-vad runs six Casts a chunk)
        if x.dtype in _PLAIN:
            if x.dtype.kind == "f" and dtype.kind in "iu":
                # NaN, inf and out-of-range values: the integer numpy's cast gives (as the C cast
                # onnxruntime makes does on x86), without numpy's RuntimeWarning
                with np.errstate(invalid="ignore", over="ignore"):
                    return x.astype(dtype)
            return as_float32(x) if dtype == np.float32 else as_dtype(x, dtype)
        return cast_array(x, to, saturate, round_mode)

    return cast


@kernel("CastLike", since=15)
def _cast_like(node, request):
    saturate, round_mode = _cast_attrs(node)

    def cast_like(x, like):
        to = onnx.helper.np_dtype_to_tensor_dtype(like.dtype) if like.dtype != object else TensorProto.STRING
        return cast_array(x, to, saturate, round_mode)

    return cast_like
