"""Shape and data movement: Reshape, Transpose, Gather, Concat, Slice, Split, Cast, ..."""

from __future__ import annotations

import math

import numpy as np
import onnx

from ..registry import kernel
from ._util import normalize_axis, per_shape

_INT_MAX = 2**62


@kernel("Identity")
def _identity(node, request):
    return lambda x: x


@kernel("Constant")
def _constant(node, request):
    attrs = node.attributes
    if "value" in attrs:
        value = attrs["value"]
    elif "value_float" in attrs:
        value = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        value = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        value = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        value = np.array(attrs["value_ints"], dtype=np.int64)
    elif "value_string" in attrs:
        value = np.array(attrs["value_string"], dtype=object)
    elif "value_strings" in attrs:
        value = np.array(attrs["value_strings"], dtype=object)
    else:
        raise ValueError(f"Constant {node.name!r}: no supported value attribute in {sorted(attrs)}")
    value = np.asarray(value)
    return lambda: value


@kernel("Shape")
def _shape(node, request):
    start = node.attr("start", 0)
    end = node.attr("end")
    return lambda x: np.array(x.shape[start:end], dtype=np.int64)


@kernel("Size")
def _size(node, request):
    return lambda x: np.array(x.size, dtype=np.int64)


def _reshape_target(shape: np.ndarray, in_shape: tuple, allowzero: bool) -> list[int]:
    target = [int(d) for d in shape]
    if not allowzero:
        target = [in_shape[i] if d == 0 else d for i, d in enumerate(target)]
    return target


@kernel("Reshape", since=1)
def _reshape_v1(node, request):
    shape = np.asarray(node.attr("shape"), dtype=np.int64)
    return lambda x: x.reshape(_reshape_target(shape, x.shape, False))


@kernel("Reshape", since=5)
def _reshape(node, request):
    allowzero = bool(node.attr("allowzero", 0))

    def target(in_shape: tuple, shape: np.ndarray) -> list[int]:
        return _reshape_target(shape, in_shape, allowzero)

    # a fixed shape (a constant, or a remembered shape computation): its target worked out
    # once per input shape
    lookup = per_shape(node, request, range(1, 2), target)
    return lambda x, shape: x.reshape(lookup(x.shape, shape))


@kernel("Flatten")
def _flatten(node, request):
    axis = int(node.attr("axis", 1))

    def flatten(x):
        a = normalize_axis(axis, x.ndim)
        return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))  # (-1 is unknown for zero rows)

    return flatten


@kernel("Transpose")
def _transpose(node, request):
    perm = node.attr("perm")
    return lambda x: np.transpose(x, perm)


@kernel("Unsqueeze", since=1)
def _unsqueeze_v1(node, request):
    axes = node.attr("axes")
    return lambda x: _unsqueeze(x, axes)


@kernel("Unsqueeze", since=13)
def _unsqueeze_v13(node, request):
    lookup = per_shape(node, request, range(1, 2), _unsqueeze_shape)
    return lambda x, axes: x.reshape(lookup(x.shape, axes))


def _unsqueeze(x, axes):
    return x.reshape(_unsqueeze_shape(x.shape, axes))


def _unsqueeze_shape(x_shape: tuple, axes) -> tuple:
    axes = np.asarray(axes).reshape(-1).tolist()  # a scalar axes tensor is accepted too
    rank = len(x_shape) + len(axes)
    norm = sorted(normalize_axis(int(a), rank) for a in axes)
    if not all(0 <= a < rank for a in norm):
        raise ValueError(f"Unsqueeze: axes {axes} out of range for an output of rank {rank} (valid: {-rank}..{rank - 1})")
    if len(set(norm)) != len(norm):
        raise ValueError(f"Unsqueeze: axes {axes} name the same output axis twice")
    # a reshape with the ones inserted: np.expand_dims costs several microseconds more
    shape = list(x_shape)
    for a in norm:
        shape.insert(a, 1)
    return tuple(shape)


def _squeeze(x, axes):
    if axes is None or np.size(axes) == 0:
        return np.squeeze(x)
    axes = np.asarray(axes).reshape(-1).tolist()  # Python ints: cheaper than numpy scalars
    return np.squeeze(x, axis=tuple(normalize_axis(int(a), x.ndim) for a in axes))


def _squeeze_shape(x_shape: tuple, axes) -> tuple:
    # np.squeeze on an empty array of the shape checks the axes (each of length 1) the same way
    return _squeeze(np.empty(x_shape, np.bool_) if 0 in x_shape else np.broadcast_to(np.bool_(0), x_shape), axes).shape


@kernel("Squeeze", since=1)
def _squeeze_v1(node, request):
    axes = node.attr("axes")
    return lambda x: _squeeze(x, axes)


@kernel("Squeeze", since=13)
def _squeeze_v13(node, request):
    lookup = per_shape(node, request, range(1, 2), _squeeze_shape)
    return lambda x, axes=None: x.reshape(lookup(x.shape, axes))


@kernel("Gather")
def _gather(node, request):
    axis = int(node.attr("axis", 0))

    def gather(data, indices):
        if data.flags.c_contiguous:
            # the method: np.take's Python wrapper costs about a microsecond more per call
            return data.take(indices, axis=axis)
        # a strided view (a transposed sequence): np.take copies all of it to read the rows it
        # takes (an unrolled LSTM's step of a (20, 1, 4096) view: 55 us); indexing reads only them
        return data[(slice(None),) * normalize_axis(axis, data.ndim) + (indices,)]

    return gather


@kernel("Concat")
def _concat(node, request):
    # axis is required from opset 4 on; Concat-1 defaulted it to 1
    axis = int(node.attr("axis", 1 if node.opset < 4 else 0))
    return lambda *xs: np.concatenate(xs, axis=axis)


def _as_ints(values):
    """A 1-D int tensor (or attribute list) as Python ints: per-element int() on numpy scalars
    costs about a microsecond each, tolist() one call."""
    return np.asarray(values).reshape(-1).tolist()


def _slice(x, starts, ends, axes, steps):
    return x[_slice_index(x.shape, starts, ends, axes, steps)]


def _slice_index(shape: tuple, starts, ends, axes, steps) -> tuple:
    index = [slice(None)] * len(shape)
    starts, ends = _as_ints(starts), _as_ints(ends)
    axes = range(len(starts)) if axes is None else _as_ints(axes)
    steps = [1] * len(starts) if steps is None else _as_ints(steps)
    for s, e, a, st in zip(starts, ends, axes, steps):
        s, e, st = int(s), int(e), int(st)
        if st == 0:
            raise ValueError("Slice: steps must not be 0")
        if not -len(shape) <= int(a) < len(shape):
            raise ValueError(f"Slice: axes value {int(a)} is out of range for input data of rank {len(shape)} "
                             f"(valid: [{-len(shape)}, {len(shape) - 1}])")
        axis = normalize_axis(int(a), len(shape))
        dim = shape[axis]
        # ONNX clamps after adding dim to negatives: [0, dim] going forward, [-1, dim - 1]
        # going backward, where -1 means "before the first element" (Python would read -1 as
        # the last element, and clamps a negative start differently for negative steps)
        s = s + dim if s < 0 else s
        e = max(min(e, _INT_MAX), -_INT_MAX)
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            index[axis] = slice(s, e, st)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            index[axis] = slice(s, None if e < 0 else e, st)
    return tuple(index)


@kernel("Slice", since=1)
def _slice_v1(node, request):
    starts, ends, axes = node.attr("starts"), node.attr("ends"), node.attr("axes")
    return lambda x: _slice(x, starts, ends, axes, None)


@kernel("Slice", since=10)
def _slice_v10(node, request):
    lookup = per_shape(node, request, range(1, 5), _slice_index)
    return lambda x, starts, ends, axes=None, steps=None: x[lookup(x.shape, starts, ends, axes, steps)]


@kernel("Split", since=1)
def _split(node, request):
    axis = int(node.attr("axis", 0))
    attr_split = node.attr("split")
    n_out = len(node.outputs)
    num_outputs = node.attr("num_outputs")

    def split(x, split=None):
        sizes = split if split is not None else attr_split
        a = normalize_axis(axis, x.ndim)
        if sizes is None or len(sizes) == 0:
            n = int(num_outputs or n_out)
            chunk = -(-x.shape[a] // n)
            sizes = [min(chunk, x.shape[a] - chunk * k) for k in range(n)]
        else:
            sizes = _as_ints(sizes)
        # views by basic slicing, as np.split makes them (its Python loop cost 5-10 us a call,
        # in a Loop body every step); the last part runs to the end, as np.split's does
        lead = (slice(None),) * a
        parts, start = [], 0
        for size in sizes[:-1]:
            parts.append(x[(*lead, slice(start, start + size))])
            start += size
        parts.append(x[(*lead, slice(start, None))])
        return parts[0] if n_out == 1 else parts  # a one-output kernel returns the value itself

    return split


@kernel("Cast", since=1)
def _cast(node, request):
    to = int(node.attr("to"))
    dtype = onnx.helper.tensor_dtype_to_np_dtype(to)
    if to == onnx.TensorProto.STRING:
        return lambda x: x.astype(str).astype(object)
    return lambda x: x.astype(dtype)


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """numpy's broadcast of two shapes, in plain Python (np.broadcast_shapes costs ~2 us)."""
    if a == b:
        return a
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    out = []
    for p, q in zip(a, b):
        if p != q and p != 1 and q != 1:
            raise ValueError(f"shapes {a} and {b} cannot be broadcast together (dimensions {p} and {q})")
        out.append(q if p == 1 else p)
    return tuple(out)


@kernel("Expand", since=8)
def _expand(node, request):
    def expand(x, shape):
        y = np.empty(broadcast_shape(x.shape, tuple(_as_ints(shape))), x.dtype)
        y[...] = x  # numpy broadcasts the assignment: one C call, no broadcast_to view
        return y

    return expand


@kernel("Tile", since=1)
def _tile_v1(node, request):
    # Tile-1: repeat ``tiles`` times along the single axis ``axis`` (both scalar inputs)
    def tile(x, tiles, axis):
        reps = [1] * x.ndim
        reps[int(np.asarray(axis).reshape(-1)[0])] = int(np.asarray(tiles).reshape(-1)[0])
        return np.tile(x, reps)

    return tile


def tile(x: np.ndarray, repeats: list[int]) -> np.ndarray:
    """np.tile for len(repeats) == x.ndim, as one broadcast assignment: the output seen as
    (r0, s0, r1, s1, ...) takes x seen as (1, s0, 1, s1, ...) (np.tile's Python loop cost
    3-4 us on a one-element tensor)."""
    if len(repeats) != x.ndim:
        return np.tile(x, repeats)  # Tile-6 requires equal lengths; np.tile's rules otherwise
    y = np.empty(tuple(r * d for r, d in zip(repeats, x.shape)), x.dtype)
    pairs = [v for r, d in zip(repeats, x.shape) for v in (r, d)]
    y.reshape(pairs)[...] = x.reshape([v for d in x.shape for v in (1, d)])
    return y


@kernel("Tile", since=6)
def _tile(node, request):
    return lambda x, repeats: tile(x, _as_ints(repeats))


@kernel("Range", since=11)
def _range(node, request):
    # Range-27's stash_type (default 1): float16/bfloat16 compute in float32, cast back once
    stash = int(node.attr("stash_type", 1)) if node.opset >= 27 else 1

    def range_(start, limit, delta):
        dtype = start.dtype
        # inputs are scalars, but exporters also write 1-element tensors
        s, lim, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
        if d == 0:  # as onnxruntime (it was "cannot convert float infinity to integer")
            raise ValueError(f"Range node {node.name!r}: delta must not be 0")
        if dtype.kind in "iu":  # Python integers: exact, no float rounding of the count
            return np.arange(int(s), int(lim), int(d), dtype=dtype)
        work = np.float32 if dtype.itemsize < 4 and stash == 1 else dtype
        s, lim, d = (np.asarray(v, dtype=work) for v in (s, lim, d))
        n = max(int(np.ceil((lim - s) / d)), 0)  # the spec's element count; arange may round differently
        return (s + np.arange(n).astype(work) * d).astype(dtype, copy=False)

    return range_


@kernel("ConstantOfShape", since=9)
def _constant_of_shape(node, request):
    value = node.attr("value")
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value).reshape(-1)
    return lambda shape: np.full(tuple(int(d) for d in shape), fill[0], dtype=fill.dtype)


@kernel("NonZero", since=9)
def _nonzero(node, request):
    return lambda x: np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)

