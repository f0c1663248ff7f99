"""Elementwise arithmetic, comparisons and logic (numpy ufuncs, ONNX broadcasting); Bitwise*/BitShift are in bitwise.py.

Types: ml_dtypes' bfloat16 (and the other small floats) go through float32 and back, because not
every numpy ufunc has a loop for them; every other dtype is computed in its own type so the
output dtype is the input's, as ONNX requires.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .._lazy import special  # scipy.special, imported at first use
from ..registry import kernel, lookup
from . import _jit
from ._util import as_dtype, as_float32, const_input


def is_small_float(dtype: np.dtype) -> bool:
    """An ml_dtypes type (bfloat16, float8*, float4, int4, ...): numpy kind "V", except
    float8_e5m2 which says "f", so the test is the module that defines the type."""
    return dtype.type.__module__ == "ml_dtypes"


#: numpy's float16 ufunc loops convert each element to float32 and back one at a time: the
#: kernels compute float16 in float32 and round once, the same result (see ``_KEEPS_DTYPE``)
_HALF = np.dtype(np.float16)
_FLOAT32 = np.dtype(np.float32)


def _rounded_to_half(y) -> np.ndarray:
    """A float16 kernel's float32 result rounded once to float16 (a float64 one, as Pow with
    an integer exponent gives, directly: through float32 it would round twice)."""
    return as_dtype(np.asarray(y), _HALF)


def _widen(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if is_small_float(x.dtype) else x


#: dtypes whose ufunc results keep the input's dtype (one dtype in): the kernels' fast path, a
#: third of a microsecond a call fewer on the tiny tensors of streaming models. float16 is not
#: one: numpy's float16 loops convert each element to float32 and back one at a time (a float16
#: EfficientNet's Adds and Muls: 0.3 s of a profiled run); the binary kernels compute it in float32 and
#: round once, which is the same result (float32 holds a float16 sum, difference, product or
#: quotient to well under half a float16 step before that one rounding)
_KEEPS_DTYPE = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32,
                                                np.int64, np.uint8, np.uint16, np.uint32, np.uint64))


def unary(fn, float32_for=()):
    """A kernel computing ``fn(x)`` with the output in x's dtype. Small floats, and the dtypes
    in ``float32_for`` (float16 for multi-step activations, integers for Erf), are computed in
    float32 and cast back: one rounding at the end instead of one per step."""
    widen = {np.dtype(t) for t in float32_for}
    direct = frozenset({np.dtype(np.float32), np.dtype(np.float64)} - widen)  # fn keeps these

    def run(x):
        if not x.ndim:  # numpy answers a 0-d array with a scalar, which out= arguments refuse
            return run(x.reshape(1)).reshape(())
        if x.dtype in direct:
            y = fn(x)
            return y if type(y) is np.ndarray else np.asarray(y)
        if x.dtype == _HALF:
            return _rounded_to_half(fn(as_float32(x)))
        if is_small_float(x.dtype) or x.dtype in widen:
            return np.asarray(fn(x.astype(np.float32))).astype(x.dtype)
        return np.asarray(fn(x)).astype(x.dtype, copy=False)

    return run


#: float32 Add / Sub / Mul / Div of this many values or more split over the session's threads
#: (``split_binary``): numpy's ufunc runs on one (us on (8, 64, 512), numpy / two threads: a
#: same-shape add 38 / 22, a bias 54 / 17, a division by a scalar 30 / 18)
SPLIT_BINARY_MIN = 1 << 17
#: the compiled loops' op codes (``_jit.binary_split``)
_BINARY_CODES = {np.add: 0, np.subtract: 1, np.multiply: 2, np.divide: 3}


def split_binary(ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``ufunc(a, b)`` (np.add, np.subtract, np.multiply or np.divide) for float32 C-contiguous
    arrays where ``a`` has the output's shape and ``b`` is a's shape, one value, or a row of
    a's last axis, on the session's threads by ``_jit.binary_split`` (each value as numpy
    computes it) into a new array; None where it is not taken (smaller, other forms, one
    thread, numba absent)."""
    if (a.dtype != _FLOAT32 or b.dtype != _FLOAT32 or a.size < SPLIT_BINARY_MIN or not a.flags.c_contiguous
            or not b.flags.c_contiguous or b.ndim > a.ndim):
        return None
    m = a.shape[-1]
    rows = b.ndim > 0 and b.size == m and b.size != a.size and b.shape[-1] == m  # (a 0-d b is one value)
    if not (rows or b.size == 1 or b.shape == a.shape):
        return None
    parts = _jit.split_parts(a.size, a.size // m if rows else a.size)
    loop = _jit.binary_split(rows) if parts > 1 else None
    if loop is None:
        return None
    y = np.empty(a.shape, _FLOAT32)
    if rows:
        loop(a.reshape(-1, m), b.ravel(), y.reshape(-1, m), _BINARY_CODES[ufunc], parts)
    else:
        loop(a.ravel(), b.ravel(), y.ravel(), _BINARY_CODES[ufunc], parts)
    return y


def binary(fn):
    """A kernel computing ``fn(a, b)`` (broadcasting) with the output in a's dtype; large
    float32 ones of np.add / np.subtract / np.multiply by ``split_binary``."""
    split = fn in _BINARY_CODES

    def run(a, b):
        if a.dtype == b.dtype and a.dtype in _KEEPS_DTYPE:
            if split and (a.size >= SPLIT_BINARY_MIN or b.size >= SPLIT_BINARY_MIN):
                y = split_binary(fn, a, b)
                if y is None and fn is not np.subtract:  # (commutative: the large one first)
                    y = split_binary(fn, b, a)
                if y is not None:
                    return y
            y = fn(a, b)
            return y if type(y) is np.ndarray else np.asarray(y)
        if a.dtype == _HALF:
            return _rounded_to_half(fn(as_float32(a), as_float32(b) if b.dtype == _HALF else b))
        if is_small_float(a.dtype):
            return np.asarray(fn(a.astype(np.float32), _widen(b))).astype(a.dtype)
        return np.asarray(fn(a, b)).astype(a.dtype, copy=False)

    return run


def _compare(fn):
    def run(a, b):
        if is_small_float(a.dtype):
            a, b = a.astype(np.float32), _widen(b)
        return np.asarray(fn(a, b))

    return run


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + e^-x), in place on one temporary or on ``out`` (which may be ``x``: see
    inplace.py); several times faster than scipy's expit. e^-x overflowing to inf for very
    negative x gives the right limit, 0. float32 in one compiled pass (``_jit.sigmoid``)."""
    y = _compiled_unary(_jit.sigmoid, x, out)
    if y is not None:
        return y
    with np.errstate(over="ignore"):
        y = np.negative(x, out=out)
        np.exp(y, out=y)
        y += y.dtype.type(1)
        return np.reciprocal(y, out=y)


#: Tanh and Exp of fewer values than this are numpy's ufunc (one vectorised pass too: numpy 2
#: dispatches float32 tanh and exp to AVX2 and AVX-512 loops), whose call costs less than the
#: compiled loop's (ns, numpy / compiled, float32, AVX-512: 64 values tanh 317 / 1409, exp 301
#: / 1373; 1024 1131 / 2843, 878 / 1747; 4096 1935 / 3113, 2329 / 2807). Kept at half the
#: crossover seen here: numpy's AVX2 tanh measured slower a value than the compiled loop
COMPILED_UNARY_MIN_SIZE = 2048


def tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """tanh of ``x`` (into ``out``, which may be ``x``): contiguous float32 from
    ``COMPILED_UNARY_MIN_SIZE`` values in one compiled pass (``_jit.tanh``), others by numpy."""
    y = None if x.size < COMPILED_UNARY_MIN_SIZE else _compiled_unary(_jit.tanh, x, out)
    return np.tanh(x, out=out) if y is None else y


def exp(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """e^x (into ``out``, which may be ``x``): contiguous float32 from
    ``COMPILED_UNARY_MIN_SIZE`` values in one compiled pass (``_jit.exp``), others by numpy."""
    y = None if x.size < COMPILED_UNARY_MIN_SIZE else _compiled_unary(_jit.exp, x, out)
    return np.exp(x, out=out) if y is None else y


def compiled_quick_gelu(x: np.ndarray, alpha: float) -> np.ndarray | None:
    """x * logistic(alpha x) by MLAS's rational logistic (``_jit.quick_gelu``) for contiguous
    float32 ``x`` into a new array, or None where it does not apply (the caller's numpy form):
    com.microsoft QuickGelu's and ONNX Swish's compiled pass."""
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    loop = _jit.quick_gelu()
    if loop is None:
        return None
    y = np.empty_like(x)
    loop(x.ravel(), _scalars(_FLOAT32, alpha, 0.0)[0], y.ravel())
    return y


def _compiled_unary(loops: Callable, x: np.ndarray, out: np.ndarray | None) -> np.ndarray | None:
    """``loops`` (``_jit.sigmoid``, ``_jit.tanh`` or ``_jit.exp``) over contiguous float32 ``x`` into a new
    array or ``out`` (its in-place loop where ``out`` is ``x``), or None where it does not apply.
    (ravel, not reshape(-1): a view of a contiguous array either way, 50 against 190 ns.)"""
    if x.dtype != _FLOAT32 or not x.flags.c_contiguous or out is not None and not out.flags.c_contiguous:
        return None
    if out is x:
        loop = loops(in_place=True)
        if loop is not None:
            loop(x.ravel())
        return None if loop is None else x
    loop = loops()
    if loop is None:
        return None
    y = np.empty(x.shape, _FLOAT32) if out is None else out
    loop(x.ravel(), y.ravel())
    return y


#: dtypes the compiled loops take
JIT_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


@functools.lru_cache(maxsize=256)
def _scalars(dtype: np.dtype, alpha: float, beta: float) -> tuple:
    """``alpha`` and ``beta`` as numpy scalars of ``dtype``, made once (each np.float32(v) cost
    0.2 us a call, a tenth of a small activation's)."""
    return dtype.type(alpha), dtype.type(beta)


def compiled_pass(loop: str, x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> bool:
    """Run the compiled activation loop ``loop`` (see ``_jit.activation``) over flat views of
    ``x`` and ``y`` (its in-place form when ``y`` is ``x``) if it applies: float32/float64,
    both contiguous, numba there. Whether it ran."""
    if y.dtype in JIT_FLOATS and x.flags.c_contiguous and y.flags.c_contiguous and _jit.enabled():
        a, b = _scalars(y.dtype, alpha, beta)
        if y is x:
            _jit.activation(loop + "_in_place")(x.ravel(), a, b)
        else:
            _jit.activation(loop)(x.ravel(), y.ravel(), a, b)
        return True
    return False


def hard_sigmoid_into(x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """y = clip(alpha * x + beta, 0, 1) for float32/float64 ``x`` of ``y``'s shape and dtype
    (``y`` may be ``x``): one compiled pass where numba is installed and both are contiguous,
    else three numpy passes."""
    if compiled_pass("hard_sigmoid", x, y, alpha, beta):
        return y
    t = y.dtype.type
    np.multiply(x, t(alpha), out=y)
    y += t(beta)
    return np.clip(y, t(0), t(1), out=y)


#: HardSwish's fixed constants: y = x * clip(x / 6 + 1 / 2, 0, 1), with 1/6 as the float32
#: attribute of the op's ONNX function body (HardSigmoid, then Mul): float64 inputs then give
#: what onnx.reference and a HardSigmoid+Mul graph give
HARD_SWISH_ALPHA, HARD_SWISH_BETA = float(np.float32(1 / 6)), 0.5


def hard_swish_into(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y = x * clip(x / 6 + 1 / 2, 0, 1) for float32/float64 ``x`` of ``y``'s shape and dtype
    (``y`` may be ``x``): one compiled pass, else HardSigmoid's passes and a multiply."""
    if compiled_pass("hard_swish", x, y, HARD_SWISH_ALPHA, HARD_SWISH_BETA):
        return y
    if y is x:
        return np.multiply(x, hard_sigmoid_into(x, np.empty_like(x), HARD_SWISH_ALPHA, HARD_SWISH_BETA), out=y)
    return np.multiply(x, hard_sigmoid_into(x, y, HARD_SWISH_ALPHA, HARD_SWISH_BETA), out=y)


def _register(op_type: str, fn) -> None:
    kernel(op_type)(lambda node, request: fn)


#: ops that are one numpy ufunc of one input (inplace.py runs some of them with ``out=x``)
UNARY_UFUNCS = {
    "Neg": np.negative, "Abs": np.absolute, "Sign": np.sign,
    "Floor": np.floor, "Ceil": np.ceil, "Reciprocal": np.reciprocal,
    "Sqrt": np.sqrt, "Log": np.log,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
    "Acosh": np.arccosh, "Atanh": np.arctanh,
}

for _op, _fn in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}.items():
    _register(_op, binary(_fn))
for _op, _fn in {
    **UNARY_UFUNCS,
    "Round": np.round,  # numpy rounds half to even, as ONNX asks
}.items():
    _register(_op, unary(_fn))
# several steps: float16 computed in float32 and rounded once, as onnxruntime's is (each step
# rounded in float16 left 11,240 of 32,768 values off the correctly rounded sigmoid)
_register("Sigmoid", unary(lambda x: sigmoid(x), float32_for=(np.float16,)))
_register("Tanh", unary(lambda x: tanh(x)))
_register("Exp", unary(lambda x: exp(x)))

def erf_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """erf of ``x`` into ``out`` (which may be ``x``): contiguous float32 by the compiled loop
    (scipy's takes about 8 ns a value: 0.37 ms on a transformer's (64, 512) GELU input, the
    loop 13 us), others by scipy."""
    if not (x.dtype == out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous and _jit.enabled()):
        return special.erf(x, out=out)
    parts = _jit.split_parts(x.size, x.size, _jit.SPLIT_MIN_TRANSCENDENTAL)
    if out is x:
        _jit.erf(True, parts)(x.ravel(), parts)
    else:
        _jit.erf(False, parts)(x.ravel(), out.ravel(), parts)
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    return erf_into(np.asarray(x, order="C"), np.empty(x.shape, x.dtype))


# Erf takes integer types too: computed in float32 and truncated, as onnx.reference does
_register("Erf", unary(_erf, float32_for=(np.int8, np.int16, np.int32, np.int64,
                                          np.uint8, np.uint16, np.uint32, np.uint64)))

for _op, _fn in {
    "Equal": np.equal, "Less": np.less, "Greater": np.greater,
    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
}.items():
    _register(_op, _compare(_fn))

for _op, _fn in {
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not,
}.items():
    _register(_op, _fn)


@kernel("IsNaN", since=9)
def _isnan(node, request):
    return lambda x: np.isnan(_widen(x))


@kernel("IsInf", since=10)
def _isinf(node, request):
    positive = bool(node.attr("detect_positive", 1))
    negative = bool(node.attr("detect_negative", 1))

    def isinf(x):
        x = _widen(x)
        if positive and negative:
            return np.isinf(x)
        if positive:
            return np.isposinf(x)
        if negative:
            return np.isneginf(x)
        return np.zeros(x.shape, dtype=bool)

    return isinf


@kernel("Div")
def _div(node, request):
    def div(a, b):
        if a.dtype.kind in "iu":
            if not np.all(b):  # numpy gives 0 (and a warning); onnxruntime fails the run
                raise ZeroDivisionError("Integer division by zero")
            # ONNX integer division truncates toward zero (C semantics); numpy floors
            with np.errstate(divide="ignore"):
                q = np.floor_divide(a, b)
                fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
            return q + fix.astype(a.dtype) if a.dtype.kind == "i" else q
        if is_small_float(a.dtype):
            return np.divide(a.astype(np.float32), _widen(b)).astype(a.dtype)
        if a.size >= SPLIT_BINARY_MIN:
            y = split_binary(np.divide, a, b)
            if y is not None:
                return y
        return np.divide(a, b)

    return div


@kernel("Mod", since=10)
def _mod(node, request):
    fmod = bool(node.attr("fmod", 0))
    # fmod=1: C fmod (sign of the dividend); fmod=0: Python/numpy mod (sign of the divisor)
    fn = np.fmod if fmod else np.mod

    def mod(a, b):
        if a.dtype.kind in "iu" and not np.all(b):  # numpy gives 0; onnxruntime fails the run
            raise ZeroDivisionError("Integer modulo by zero")
        with np.errstate(divide="ignore", invalid="ignore"):
            if is_small_float(a.dtype):
                return fn(a.astype(np.float32), _widen(b)).astype(a.dtype)
            return np.asarray(fn(a, b)).astype(a.dtype, copy=False)

    return mod


def whole_power(base: np.ndarray, degree: float) -> np.ndarray:
    """base ** degree, by repeated products ((base * base) * base ...) where the degree is a
    whole number from 1 to 8, else numpy's power: for a float exponent numpy calls pow per
    element (an SVR's (8, 442) polynomial kernel: its SVMRegressor 169 -> 10 us a run)."""
    if degree == int(degree) and 1 <= degree <= 8:
        y = base * base if degree >= 2 else base.copy()
        for _ in range(int(degree) - 2):
            y *= base
        return y
    return base**degree


@kernel("Pow")
def _pow(node, request):
    exponent = const_input(node, request, 1)
    # x^3 as x * x * x where the exponent is a constant 3, as onnxruntime computes it (the same
    # values; numpy's powf: 315 us on GPT-2's (1, 16, 256) GELU input, the products 4)
    cube = exponent if isinstance(exponent, np.ndarray) and exponent.size == 1 and float(exponent.reshape(-1)[0]) == 3.0 \
        else None

    def power(a, b):
        if b is cube and a.dtype in (np.float32, np.float64) and b.ndim <= a.ndim:
            return whole_power(a, 3)
        if is_small_float(a.dtype):
            return np.power(a.astype(np.float32), _widen(b).astype(np.float32)).astype(a.dtype)
        if a.dtype.kind in "iu":
            if b.dtype.kind == "f" or is_small_float(b.dtype) or (b.dtype.kind == "i" and np.any(b < 0)):
                with np.errstate(all="ignore"):
                    return np.power(a.astype(np.float64), _widen(b).astype(np.float64)).astype(a.dtype)
            return np.power(a, b.astype(a.dtype, copy=False))
        return np.power(a, _widen(b).astype(a.dtype, copy=False))

    return power


def clip_v1_bounds(node) -> tuple[float, float]:
    """Clip before opset 11: the bounds are attributes, by default float32's range."""
    return node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38)


@kernel("Clip", since=1)
def _clip_v1(node, request):
    lo, hi = clip_v1_bounds(node)
    return unary(lambda x: np.minimum(np.maximum(x, x.dtype.type(lo)), x.dtype.type(hi)))


def _clip_bound(bound: np.ndarray | None, dtype: np.dtype) -> np.ndarray | None:
    """A Clip bound in ``dtype``, or None where it is absent or NaN (onnxruntime reads a NaN
    bound as no bound). The bound is a scalar by the spec: its NaN test is on the Python value
    (np.isnan(...).all() cost 2.5 us a bound on a tiny tensor)."""
    if bound is None:
        return None
    if bound.dtype.kind == "f" and (bound.item() != bound.item() if bound.size == 1 else np.isnan(bound).all()):
        return None
    return bound if bound.dtype == dtype else _widen(bound).astype(dtype)


def clip_values(y: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None,
                out: np.ndarray | None = None) -> np.ndarray:
    """``y`` clipped to the bound tensors given (Clip-11 and later), into ``out`` if given
    (which may be ``y``: see inplace.py). A NaN bound is no bound, as onnxruntime reads it."""
    lo, hi = _clip_bound(lo, y.dtype), _clip_bound(hi, y.dtype)
    if lo is not None:
        # minimum(maximum(x, lo), hi), as numpy's clip computes it (min > max gives max), by
        # the ufuncs themselves: np.clip's Python layers cost 2 us a call on a tiny tensor
        # (a 0-d input's result is a numpy scalar, which out= refuses: made an array)
        y = out = np.asarray(np.maximum(y, lo, out=out))
    if hi is not None:
        y = np.asarray(np.minimum(y, hi, out=out))
    elif lo is None and out is not None and out is not y:
        out[...] = y
        return out
    return y


@kernel("Clip", since=11)
def _clip(node, request):
    def clip(x, lo=None, hi=None):
        small = is_small_float(x.dtype)
        y = clip_values(x.astype(np.float32) if small else x, lo, hi)
        return y.astype(x.dtype, copy=False)

    return clip


def _variadic(fn):
    def run(*xs):
        small = is_small_float(xs[0].dtype)
        out = _widen(xs[0])
        for x in xs[1:]:
            out = fn(out, _widen(x))
        return out.astype(xs[0].dtype) if small else np.asarray(out).astype(np.result_type(*xs), copy=False)

    return run


kernel("Max")(lambda node, request: _variadic(np.maximum))
kernel("Min")(lambda node, request: _variadic(np.minimum))
kernel("Sum")(lambda node, request: _variadic(np.add))


@kernel("Mean")
def _mean(node, request):
    add = _variadic(np.add)

    def mean(*xs):
        total = add(*xs)
        if is_small_float(total.dtype):
            return (total.astype(np.float32) / len(xs)).astype(total.dtype)
        return (total / len(xs)).astype(xs[0].dtype, copy=False)

    return mean


@kernel("Where", since=9)
def _where(node, request):
    return lambda cond, a, b: np.where(cond, a, b)


def _with_legacy_broadcast(op_type: str) -> None:
    """Opsets before 7 broadcast only with ``broadcast=1``, and ``axis`` says where B's dims line
    up in A (numpy aligns trailing dims). Register a wrapper for opset 1 and the plain kernel
    again from 7 on (the registry takes the newest registration not newer than the model)."""
    plain = lookup("", op_type, 7)
    if plain is None:
        return
    build = plain.build

    def legacy(node, request):
        fn = build(node, request)
        axis = node.attr("axis")
        if not node.attr("broadcast", 0) or axis is None:
            return fn

        def run(a, b):
            if 0 < b.ndim < a.ndim:
                start = int(axis) + a.ndim if int(axis) < 0 else int(axis)
                b = b.reshape(b.shape + (1,) * (a.ndim - start - b.ndim))
            return fn(a, b)

        return run

    kernel(op_type, 1)(legacy)
    kernel(op_type, 7)(build)


for _op in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Less", "Greater"):
    _with_legacy_broadcast(_op)
